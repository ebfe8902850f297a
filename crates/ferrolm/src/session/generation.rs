//! What a session's generation cost ([`GenerationStats`]) and produced ([`Completion`]).

use std::time::Duration;

use crate::decoder::FinishReason;

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
    /// Tokens generated (an end-of-generation token that ended the generation not counted).
    pub n_generated: usize,
    /// Generated tokens run through the model (one per decode step; a speculative verification
    /// pass counts the tokens it kept).
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
    /// Tokens drafted by speculative decoding (0 when it is off).
    pub n_drafted: usize,
    /// Drafted tokens kept (the generation's own tokens, verified).
    pub n_draft_accepted: usize,
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

    /// The share of drafted tokens kept (0 when none were drafted).
    pub fn draft_acceptance(&self) -> f64 {
        if self.n_drafted == 0 { 0.0 } else { self.n_draft_accepted as f64 / self.n_drafted as f64 }
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
