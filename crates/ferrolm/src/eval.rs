//! Evaluation of a model on text: perplexity, with or without a bounded KV cache.

pub mod perplexity;

pub use perplexity::{PerplexityOptions, PerplexityResult, Scoring, perplexity};
