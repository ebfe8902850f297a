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
pub mod constrain;
pub mod decoder;
pub mod engine;
mod error;
pub mod eval;
pub mod kv;
pub mod model;
pub mod ops;
pub mod sampling;
pub mod sequence;
pub mod session;
pub mod sysmem;
pub mod threads;

pub use error::{Error, Result};
pub use ferrolm_kernels::GgmlType;
/// The instruction-set levels of the CPU kernels; [`Isa::best`] is the one they run at.
pub use ferrolm_kernels::Isa;

/// Chat templates: the `ferrolm-chat` crate.
pub use ferrolm_chat as chat;
/// GGUF and safetensors files: the `ferrolm-format` crate.
pub use ferrolm_format as format;
/// The model catalog and downloads: the `ferrolm-hub` crate.
pub use ferrolm_hub as hub;
/// Tokenizers: the `ferrolm-tokenizer` crate.
pub use ferrolm_tokenizer as tokenizer;
