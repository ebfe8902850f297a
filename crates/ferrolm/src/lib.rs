//! ferrolm: an LLM inference engine for small models on CPUs.
//!
//! The data flow is one path: text → [`tokenizer`] → tokens → [`engine::Batch`] →
//! [`model::Model::forward`] with an engine-owned [`kv::KvCache`] → logits → [`sampling`] → token,
//! detokenized as a UTF-8-safe stream.

pub mod backend;
pub mod engine;
mod error;
pub mod format;
pub mod hub;
pub mod kv;
pub mod model;
pub mod sampling;
pub mod threads;
pub mod tokenizer;

pub use error::{Error, Result};
pub use ferrolm_kernels::GgmlType;
