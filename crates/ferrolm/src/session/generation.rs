//! What a generation is asked for ([`GenerateParams`]), how it ended ([`FinishReason`],
//! [`GenerationStats`]) and what it produced ([`Completion`]).

use std::time::Duration;

use crate::constrain::ConstraintSpec;
use crate::sampling::SamplerParams;

/// Options of one generation.
#[derive(Clone, Debug, Default)]
pub struct GenerateParams {
    /// Most tokens to generate; `None` goes on until an end-of-generation token, a stop string
    /// or a full context.
    pub max_tokens: Option<usize>,
    /// The sampler chain.
    pub sampler: SamplerParams,
    /// Stop strings: generation ends when the text contains one; it and what follows are not
    /// returned. Text that could still become a stop string is held back until it is decided.
    pub stop: Vec<String>,
    /// Keep going past the model's end-of-generation tokens.
    pub ignore_eos: bool,
    /// Constrain the output to a JSON schema, a Lark grammar or a regular expression: at each
    /// step the tokens that cannot continue a match are masked out before sampling, and
    /// generation ends when the match is complete.
    pub constraint: Option<ConstraintSpec>,
}

impl GenerateParams {
    /// Greedy decoding of at most `max_tokens` tokens.
    pub fn greedy(max_tokens: usize) -> Self {
        Self { max_tokens: Some(max_tokens), sampler: SamplerParams::greedy(), ..Self::default() }
    }
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// `max_tokens` were generated.
    Length,
    /// The model produced an end-of-generation token.
    EndOfGeneration,
    /// The text reached a stop string.
    StopString,
    /// The context is full.
    ContextFull,
    /// The generation was cancelled through a [`super::CancelHandle`].
    Cancelled,
}

impl FinishReason {
    /// A short name: `length`, `eog`, `stop`, `context`, `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Length => "length",
            FinishReason::EndOfGeneration => "eog",
            FinishReason::StopString => "stop",
            FinishReason::ContextFull => "context",
            FinishReason::Cancelled => "cancelled",
        }
    }
}

/// Counts and timings of one generation.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerationStats {
    /// Prompt length in tokens.
    pub n_prompt: usize,
    /// Prompt tokens reused from the session's cache.
    pub n_cached: usize,
    /// Prompt tokens run through the model.
    pub n_prefilled: usize,
    /// Time spent on the prompt.
    pub prompt_time: Duration,
    /// Tokens sampled, including a final end-of-generation token.
    pub n_generated: usize,
    /// Forward passes over generated tokens.
    pub n_decode: usize,
    /// Time spent decoding: forward passes and sampling after the prompt.
    pub decode_time: Duration,
    /// Why it ended.
    pub finish: FinishReason,
    /// Tokens cached at the end.
    pub n_kv: usize,
    /// KV cache bytes in use at the end.
    pub kv_bytes: usize,
    /// Evictions of the session so far.
    pub evictions: crate::kv::EvictionStats,
}

impl GenerationStats {
    /// Prefilled prompt tokens per second.
    pub fn prompt_tps(&self) -> f64 {
        rate(self.n_prefilled, self.prompt_time)
    }

    /// Decoded tokens per second.
    pub fn decode_tps(&self) -> f64 {
        rate(self.n_decode, self.decode_time)
    }
}

fn rate(n: usize, t: Duration) -> f64 {
    if t.is_zero() { 0.0 } else { n as f64 / t.as_secs_f64() }
}

/// The result of [`super::Session::generate`].
#[derive(Clone, Debug, PartialEq)]
pub struct Completion {
    /// The generated text (without a stop string or end-of-generation token).
    pub text: String,
    /// The sampled token ids (an end-of-generation token that ended it is not included).
    pub tokens: Vec<u32>,
    /// Counts, timings and the finish reason.
    pub stats: GenerationStats,
}
