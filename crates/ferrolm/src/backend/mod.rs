//! Compute backends.
