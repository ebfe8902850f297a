//! Unit tests of chat templates.
