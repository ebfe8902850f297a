//! ferrolm: an LLM inference engine for small models on CPUs.
//!
//! The data flow is one path: text → [`tokenizer`] → tokens → [`engine::Batch`] →
//! [`model::Model::forward`] with an engine-owned [`kv::KvCache`] → logits → [`sampling`] → token,
//! detokenized as a UTF-8-safe stream.
//!
//! ```no_run
//! use ferrolm::engine::{GenerateOptions, generate};
//! use ferrolm::model::Model;
//! use ferrolm::sampling::SamplerParams;
//! use ferrolm::tokenizer::StreamDecoder;
//!
//! # fn main() -> ferrolm::Result<()> {
//! let model = Model::load("SmolLM2-135M-Instruct.Q4_1.gguf")?;
//! let prompt = model.tokenizer().encode("The capital of France is", true, true)?;
//! let mut kv = model.new_kv_cache(2048);
//! let opts = GenerateOptions { max_tokens: 32, sampler: SamplerParams::greedy(), ..Default::default() };
//! let mut text = StreamDecoder::new();
//! generate(&model, &mut kv, 0, &prompt, &opts, |id| {
//!     print!("{}", text.push(model.tokenizer(), id));
//!     std::ops::ControlFlow::Continue(())
//! })?;
//! # Ok(())
//! # }
//! ```

pub mod backend;
pub mod constrain;
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
