//! ferrolm: an LLM inference engine for small models on CPUs.
//!
//! The data flow is one path: text → [`tokenizer`] → tokens → [`batch::Batch`] →
//! [`model::Model::forward`] with an engine-owned [`kv::KvCache`] → logits → [`sampling`] → token,
//! detokenized as a UTF-8-safe stream. A [`session::Session`] runs that loop for one conversation
//! and keeps its KV cache between calls.
//!
//! ```no_run
//! use ferrolm::model::Model;
//! use ferrolm::session::{GenerateParams, Session, SessionOptions};
//!
//! # fn main() -> ferrolm::Result<()> {
//! let model = Model::load("SmolLM2-135M-Instruct.Q4_1.gguf")?;
//! let mut session = Session::new(&model, SessionOptions::default())?;
//! let reply = session.generate("The capital of France is", &GenerateParams::greedy(32))?;
//! println!("{}", reply.text);
//! # Ok(())
//! # }
//! ```

pub mod backend;
pub mod batch;
pub mod chat;
pub mod constrain;
mod error;
pub mod eval;
pub mod format;
pub mod hub;
pub mod kv;
pub mod model;
pub mod ops;
pub mod sampling;
pub mod session;
pub mod threads;
pub mod tokenizer;

pub use error::{Error, Result};
pub use ferrolm_kernels::GgmlType;
