//! Batches, logits and generation.

mod batch;
mod generate;

pub use batch::{Batch, BatchEntry, Logits};
pub use generate::{FinishReason, GenerateOptions, GenerationStats, generate};
