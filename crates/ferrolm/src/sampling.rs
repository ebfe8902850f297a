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
//!
//! ```
//! use ferrolm::sampling::{Sampler, SamplerParams, SamplerStep};
//!
//! # fn main() -> ferrolm::Result<()> {
//! let logits = [0.5f32, 3.0, 2.9, -1.0, f32::NEG_INFINITY];
//! // Greedy picks the largest logit.
//! let mut greedy = Sampler::with_breaker_tokens(SamplerParams::greedy(), &[])?;
//! assert_eq!(greedy.sample(&logits), 1);
//!
//! // A seeded chain in a custom order: the same seed draws the same tokens.
//! let params = SamplerParams {
//!     temperature: 1.2,
//!     top_k: 3,
//!     seed: Some(42),
//!     order: SamplerStep::parse_order("top_k;min_p;temperature")?,
//!     ..SamplerParams::default()
//! };
//! let draw = |p: &SamplerParams| -> ferrolm::Result<Vec<u32>> {
//!     let mut s = Sampler::with_breaker_tokens(p.clone(), &[])?;
//!     Ok((0..20).map(|_| s.sample(&logits)).collect())
//! };
//! let a = draw(&params)?;
//! assert_eq!(a, draw(&params)?);
//! assert!(a.iter().all(|&t| t < 3), "top-k 3 keeps tokens 0, 1 and 2");
//! # Ok(())
//! # }
//! ```

mod candidates;
mod chain;
mod dry;
mod logit_bias;
mod mirostat;
mod mt19937;
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
    // Two passes the compiler vectorises: the maximum lane by lane (`x > m` keeps `m` when `x`
    // is NaN), then the first index holding it. A branchy single pass is several times slower,
    // and in a server this runs once per busy slot per step, on one thread.
    const LANES: usize = 16;
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            *m = if x > *m { x } else { *m };
        }
    }
    let max = lanes.iter().chain(rest).fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
    if max == f32::NEG_INFINITY {
        return 0;
    }
    logits.iter().position(|&x| x == max).unwrap_or(0) as u32
}
