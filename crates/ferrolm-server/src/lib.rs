//! OpenAI-compatible HTTP server for ferrolm.
//!
//! Not implemented yet: the server arrives with its own issue. This crate exists so the
//! workspace layout matches the design from the start.
