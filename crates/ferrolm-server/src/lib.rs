//! OpenAI-compatible HTTP server for ferrolm.
//!
//! [`engine`] runs the requests: N slots, one forward pass per tick mixing decode tokens and
//! prompt chunks, and a prefix cache shared by all slots. [`api`] serves them over HTTP
//! ([`serve`]).

pub mod api;
pub mod engine;

pub use api::{ServerConfig, ServerError, serve, serve_listener};
