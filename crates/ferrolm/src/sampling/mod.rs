//! Token sampling: llama.cpp's sampler chain, one step per module, seeded and reproducible.
//!
//! [`Sampler::sample`] runs, over the candidate tokens of one set of logits:
//!
//! 1. logit bias ([`SamplerParams::logit_bias`]);
//! 2. the steps of [`SamplerParams::order`], by default llama.cpp's
//!    penalties → DRY → top-n-sigma → top-k → typical-p → top-p → min-p → XTC → temperature;
//! 3. a draw from the softmax of the remaining candidates.
//!
//! A temperature ≤ 0 keeps only the most likely token at the temperature step (greedy: the
//! argmax of the logits after bias and penalties with the default settings). With
//! [`SamplerParams::mirostat`] on, Mirostat replaces the truncation steps and the draw.
//! [`Sampler::accept`] feeds the history used by the penalties and DRY.
//!
//! Logits may hold `-inf` (tokens masked by a grammar): every step keeps them at probability 0
//! and they are never drawn.

mod candidates;
mod chain;
mod dry;
mod logit_bias;
mod mirostat;
mod params;
mod penalties;
mod temperature;
mod truncation;
mod xtc;

#[cfg(test)]
mod tests;

pub use chain::Sampler;
pub use params::{SamplerParams, SamplerStep};

/// A candidate token with its logit (and, after a softmax, probability).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// Token id.
    pub id: u32,
    /// Logit.
    pub logit: f32,
    /// Probability (valid after the candidates were normalised by a softmax).
    pub p: f32,
}

/// Index of the largest logit (the first one on ties). NaN never wins; when every logit is
/// `-inf` (or NaN), or there are none, the result is 0.
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    let mut best_val = f32::NEG_INFINITY;
    for (i, &l) in logits.iter().enumerate() {
        if l > best_val {
            best = i;
            best_val = l;
        }
    }
    best as u32
}
