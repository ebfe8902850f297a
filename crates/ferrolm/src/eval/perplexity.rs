//! Perplexity of a model over a token sequence, with any KV eviction policy and budget active:
//! the way policies are compared.
//!
//! The text is cut into windows of `n_ctx` tokens. In each window a first part is context (a
//! prompt: processed, not scored) and the rest is scored, each token predicted from everything
//! before it in the window that the cache still holds. Two ways to place the windows
//! ([`Scoring`]):
//!
//! - [`Scoring::Sliding`] (the default): windows start `stride` tokens apart and score their last
//!   `stride` tokens, so every token after the first window's context is scored exactly once;
//! - [`Scoring::Chunks`]: `llama-perplexity`'s chunking, so that figures compare with llama.cpp's:
//!   windows do not overlap, and each scores its tokens after the first half (`n_ctx / 2 + 1 ..
//!   n_ctx`, i.e. `n_ctx - n_ctx / 2 - 1` of them). llama.cpp tokenizes the text with BOS in front
//!   (`add_special`): pass tokens encoded that way to reproduce its numbers.
//!
//! As in llama.cpp, the first token of a window is replaced by BOS when the tokenizer adds one.
//!
//! Tokens go through the model in chunks of at most `n_batch`; before each chunk the
//! [`CacheManager`] makes room, so the cache (chunk included) never exceeds the budget. A
//! compressing policy (SnapKV) sees the whole context first and compresses it before the scored
//! tokens, which is what it is designed for.

use std::time::{Duration, Instant};

use crate::batch::{Batch, Logits};
use crate::kv::{CacheManager, CacheOptions, EvictionStats, KvType};
use crate::model::Model;
use crate::sequence::{Outputs, Sequence};
use crate::{Error, Result};

/// How perplexity is measured.
#[derive(Clone, Debug, PartialEq)]
pub struct PerplexityOptions {
    /// Window length in tokens.
    pub n_ctx: usize,
    /// Sliding windows: tokens scored per window, and distance between window starts
    /// (`n_ctx / 2` when 0). Must be 0 for [`Scoring::Chunks`].
    pub stride: usize,
    /// Largest chunk of tokens per forward pass.
    pub n_batch: usize,
    /// Storage type of cached keys.
    pub type_k: KvType,
    /// Storage type of cached values.
    pub type_v: KvType,
    /// Eviction policy and budget.
    pub cache: CacheOptions,
    /// Stop after this many windows.
    pub max_windows: Option<usize>,
    /// Where windows start and which of their tokens are scored.
    pub scoring: Scoring,
}

/// Where perplexity windows start and which of their tokens are scored (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scoring {
    /// Windows `stride` apart, each scoring its last `stride` tokens.
    #[default]
    Sliding,
    /// `llama-perplexity`'s non-overlapping chunks, each scoring the tokens after its first half.
    Chunks,
}

impl Scoring {
    /// `sliding` or `chunks`.
    pub fn name(self) -> &'static str {
        match self {
            Scoring::Sliding => "sliding",
            Scoring::Chunks => "chunks",
        }
    }
}

/// Where windows start and how they split, in tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Geometry {
    /// Distance between window starts.
    step: usize,
    /// Leading tokens of a window that are context only.
    n_context: usize,
}

impl Geometry {
    /// The geometry `opts` asks for, or an error naming what is wrong.
    fn new(opts: &PerplexityOptions) -> Result<Self> {
        let n_ctx = opts.n_ctx;
        let g = match opts.scoring {
            Scoring::Sliding => {
                let stride = if opts.stride == 0 { n_ctx / 2 } else { opts.stride };
                if n_ctx < 2 || stride == 0 || stride >= n_ctx {
                    return Err(Error::InvalidInput(format!(
                        "perplexity needs a context of at least 2 tokens and a stride below it (got context {n_ctx}, stride {stride})"
                    )));
                }
                Geometry { step: stride, n_context: n_ctx - stride }
            }
            Scoring::Chunks => {
                if opts.stride != 0 {
                    return Err(Error::InvalidInput(
                        "llama.cpp-style chunks do not overlap: a stride applies to sliding windows only"
                            .into(),
                    ));
                }
                if n_ctx < 4 {
                    return Err(Error::InvalidInput(format!(
                        "chunked perplexity needs a context of at least 4 tokens (got {n_ctx})"
                    )));
                }
                Geometry { step: n_ctx, n_context: n_ctx / 2 + 1 }
            }
        };
        Ok(g)
    }
}

impl Default for PerplexityOptions {
    fn default() -> Self {
        Self {
            n_ctx: 1024,
            stride: 0,
            n_batch: 512,
            type_k: KvType::F16,
            type_v: KvType::F16,
            cache: CacheOptions::default(),
            max_windows: None,
            scoring: Scoring::Sliding,
        }
    }
}

/// The outcome of a perplexity run.
#[derive(Clone, Debug, PartialEq)]
pub struct PerplexityResult {
    /// `exp(mean negative log-likelihood)` over the scored tokens.
    pub perplexity: f64,
    /// Mean negative log-likelihood (nats per token).
    pub mean_nll: f64,
    /// Standard error of the mean NLL.
    pub nll_stderr: f64,
    /// Tokens scored.
    pub n_scored: usize,
    /// Windows run.
    pub n_windows: usize,
    /// Perplexity of each window's scored tokens.
    pub window_perplexity: Vec<f64>,
    /// Tokens run through the model (context and scored).
    pub n_processed: usize,
    /// Time spent.
    pub time: Duration,
    /// Evictions over the run.
    pub evictions: EvictionStats,
}

/// Progress of a run: windows done and in all.
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize);

/// Measures the perplexity of `model` on `tokens` (see the module docs).
pub fn perplexity(
    model: &Model,
    tokens: &[u32],
    opts: &PerplexityOptions,
    progress: Progress<'_>,
) -> Result<PerplexityResult> {
    let Geometry { step, n_context } = Geometry::new(opts)?;
    if opts.n_batch == 0 {
        return Err(Error::InvalidInput("perplexity needs a batch size of at least 1".into()));
    }
    if tokens.len() < opts.n_ctx {
        return Err(Error::InvalidInput(format!(
            "the text has {} tokens, fewer than one window of {}",
            tokens.len(),
            opts.n_ctx
        )));
    }
    let mut n_windows = (tokens.len() - opts.n_ctx) / step + 1;
    if let Some(m) = opts.max_windows {
        n_windows = n_windows.min(m.max(1));
    }
    let mut kv = model.new_kv_cache_typed(opts.n_ctx, opts.type_k, opts.type_v)?;
    let mgr = CacheManager::new(opts.cache.clone(), model.attention_shapes(), opts.n_ctx)?;
    let mut seq = Sequence::new(&mut kv, 0, mgr);
    let bos = model.tokenizer().bos().filter(|_| model.tokenizer().add_bos());
    let n_vocab = model.config().n_vocab;
    let t0 = Instant::now();
    let (mut nlls, mut window_perplexity, mut n_processed) = (Vec::new(), Vec::new(), 0);
    let mut batch = Batch::new();
    let mut logits = Logits::default();
    progress(0, n_windows);
    for w in 0..n_windows {
        let mut win = tokens[w * step..w * step + opts.n_ctx].to_vec();
        if let Some(b) = bos {
            win[0] = b;
        }
        seq.clear(&mut kv);
        let mut window_nll = 0.0;
        let mut pos = 0;
        while pos < opts.n_ctx - 1 {
            let in_prompt = pos < n_context;
            // A chunk stays inside the context or inside the scored part.
            let end_part = if in_prompt { n_context } else { opts.n_ctx - 1 };
            let chunk = opts.n_batch.min(seq.max_chunk(in_prompt)).min(end_part - pos);
            batch.clear();
            // Logits of the last context token (it predicts the first scored one) and of every
            // scored token but the window's last.
            let first_out = (n_context - 1).saturating_sub(pos);
            seq.feed(&mut kv, &mut batch, &win[pos..pos + chunk], in_prompt, Outputs::From(first_out))?;
            model.forward_into(&batch, &mut kv, &mut logits)?;
            for (row, p) in (pos.max(n_context - 1)..pos + chunk).enumerate() {
                let nll = nll(&logits.row(row)[..n_vocab], win[p + 1]);
                nlls.push(nll);
                window_nll += nll;
            }
            pos += chunk;
            n_processed += chunk;
            if pos == n_context {
                seq.end_prompt(&mut kv);
            }
        }
        window_perplexity.push((window_nll / (opts.n_ctx - n_context) as f64).exp());
        tracing::debug!(window = w, ppl = window_perplexity[w], "perplexity window done");
        progress(w + 1, n_windows);
    }
    let n = nlls.len().max(1) as f64;
    let mean = nlls.iter().sum::<f64>() / n;
    let var = nlls.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0).max(1.0);
    Ok(PerplexityResult {
        perplexity: mean.exp(),
        mean_nll: mean,
        nll_stderr: (var / n).sqrt(),
        n_scored: nlls.len(),
        n_windows,
        window_perplexity,
        n_processed,
        time: t0.elapsed(),
        evictions: seq.eviction_stats(),
    })
}

/// `-log softmax(logits)[target]`, computed in f64.
fn nll(logits: &[f32], target: u32) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let sum: f64 = logits.iter().map(|&l| (l as f64 - max).exp()).sum();
    let lt = logits.get(target as usize).copied().unwrap_or(f32::NEG_INFINITY) as f64;
    (sum.ln() + max) - lt
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(n_ctx: usize, stride: usize, scoring: Scoring) -> Result<Geometry> {
        Geometry::new(&PerplexityOptions { n_ctx, stride, scoring, ..PerplexityOptions::default() })
    }

    #[test]
    fn sliding_windows_score_every_token_after_the_first_context_once() {
        assert_eq!(
            geometry(512, 0, Scoring::Sliding).expect("valid"),
            Geometry { step: 256, n_context: 256 }
        );
        assert_eq!(
            geometry(512, 128, Scoring::Sliding).expect("valid"),
            Geometry { step: 128, n_context: 384 }
        );
        assert!(geometry(512, 512, Scoring::Sliding).is_err());
        assert!(geometry(1, 0, Scoring::Sliding).is_err());
    }

    /// llama-perplexity: `first = n_ctx / 2`, the logits of positions `first .. n_ctx - 1`
    /// score tokens `first + 1 .. n_ctx`, i.e. `n_ctx - first - 1` tokens per chunk; chunks start
    /// `n_ctx` apart.
    #[test]
    fn chunks_are_llama_perplexity_s() {
        for n_ctx in [4, 5, 128, 512, 513] {
            let g = geometry(n_ctx, 0, Scoring::Chunks).expect("valid");
            let first = n_ctx / 2;
            assert_eq!(g.step, n_ctx);
            assert_eq!(n_ctx - g.n_context, n_ctx - first - 1, "n_ctx {n_ctx}");
        }
        assert!(geometry(512, 64, Scoring::Chunks).is_err(), "chunks take no stride");
        assert!(geometry(3, 0, Scoring::Chunks).is_err());
    }

    #[test]
    fn nll_of_a_uniform_and_a_peaked_distribution() {
        let u = [0.0f32; 4];
        assert!((nll(&u, 2) - 4f64.ln()).abs() < 1e-12);
        let p = [10.0f32, 0.0, 0.0];
        assert!(nll(&p, 0) < 1e-3);
        assert!(nll(&p, 1) > 9.9);
    }
}
