//! OpenAI-compatible HTTP server for ferrolm: HTTP, auth and JSON over the library's
//! [`ferrolm::engine::Engine`].
//!
//! The engine runs the requests (N slots, one forward pass per tick mixing decode tokens and
//! prompt chunks, a prefix cache shared by all slots); [`api`] serves them over HTTP
//! ([`serve`]).

pub mod api;
pub mod conn;

pub use api::{ReloadFn, ServerConfig, ServerError, serve, serve_listener, serve_models, serve_reloadable};
pub use conn::{ConnLimits, derive_max_connections, raise_fd_limit};
