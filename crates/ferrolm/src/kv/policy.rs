//! KV-cache eviction policies: which cached tokens to drop when a sequence's cache must shrink.
//!
//! A policy only *chooses* slots; the [`super::CacheManager`] decides when to evict and how
//! many slots to keep, and [`super::SeqCache::remove_slots`] compacts the rest in order. Logical
//! positions of the kept tokens never change, so their keys (stored rotated) stay valid.
//!
//! The choice is made per sequence: every layer and head keeps the same tokens, since a sequence's
//! slots are shared by all layers. Policies that score tokens (H2O, SnapKV) sum their per-head
//! scores over heads and layers.

use std::fmt::Debug;

use super::{SeqCache, attention_mass};
use crate::ops::AttentionShape;
use crate::{Error, Result};

/// The policies ferrolm ships, by name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PolicyKind {
    /// Never evict: a full cache ends the generation.
    #[default]
    None,
    /// StreamingLLM: keep the first `protected_prefix` tokens (attention sinks) and the last
    /// `window` tokens.
    Sliding,
    /// Heavy hitters (H2O): keep the tokens with the most accumulated attention plus the last
    /// `window` tokens.
    H2o,
    /// SnapKV: score tokens by the attention of the last `window` queries (the observation
    /// window), max-pooled along the sequence per head, and keep the best plus the window.
    SnapKv,
}

impl PolicyKind {
    /// Parses `none`, `sliding`, `h2o` or `snapkv`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "none" => Some(Self::None),
            "sliding" | "streaming" => Some(Self::Sliding),
            "h2o" => Some(Self::H2o),
            "snapkv" => Some(Self::SnapKv),
            _ => None,
        }
    }

    /// The policy's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Sliding => "sliding",
            Self::H2o => "h2o",
            Self::SnapKv => "snapkv",
        }
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Chooses which cached tokens of a sequence to evict.
pub trait EvictionPolicy: Send + Sync + Debug {
    /// The policy's name.
    fn name(&self) -> &'static str;

    /// Whether the policy evicts at all (`none` does not: a full cache is an error).
    fn evicts(&self) -> bool {
        true
    }

    /// The most tokens the policy itself lets a sequence hold (a sliding window's sinks plus
    /// window), if it has such a limit; the budget applies on top.
    fn natural_budget(&self) -> Option<usize> {
        None
    }

    /// Whether the forward pass must add each query's attention to [`SeqCache::scores`].
    fn tracks_attention(&self) -> bool {
        false
    }

    /// How many recent queries per layer the sequence must keep (SnapKV's observation window).
    fn query_window(&self) -> usize {
        0
    }

    /// Whether the budget only applies once the prompt is in: the prompt is first cached whole
    /// and then compressed (SnapKV).
    fn compresses_prompt(&self) -> bool {
        false
    }

    /// Updates the slot scores before a selection (SnapKV scores from its observation window).
    /// `shapes`: the attention geometry of every layer.
    fn prepare(&mut self, _seq: &mut SeqCache, _shapes: &[AttentionShape]) {}

    /// Writes to `out` the slots to evict so that `keep` of the `seq.len()` slots remain.
    fn select(&self, seq: &SeqCache, keep: usize, out: &mut Vec<usize>);
}

/// The policy of `kind`. `window`: the recent window (sliding and H2O) or observation window
/// (SnapKV); `protected_prefix`: tokens at the start that are never evicted.
pub fn make_policy(
    kind: PolicyKind,
    window: usize,
    protected_prefix: usize,
) -> Result<Box<dyn EvictionPolicy>> {
    if kind != PolicyKind::None && window == 0 {
        return Err(Error::InvalidInput(format!("the {kind} eviction policy needs a window of at least 1")));
    }
    Ok(match kind {
        PolicyKind::None => Box::new(NoEviction),
        PolicyKind::Sliding => Box::new(Sliding { window, sinks: protected_prefix }),
        PolicyKind::H2o => Box::new(H2o { recent: window, sinks: protected_prefix }),
        PolicyKind::SnapKv => Box::new(SnapKv { window, sinks: protected_prefix, pool: SNAPKV_POOL }),
    })
}

/// Half-width of SnapKV's max-pooling kernel (kernel size 7, as the SnapKV paper uses).
const SNAPKV_POOL: usize = 3;

/// `none`.
#[derive(Debug)]
struct NoEviction;

impl EvictionPolicy for NoEviction {
    fn name(&self) -> &'static str {
        "none"
    }

    fn evicts(&self) -> bool {
        false
    }

    fn select(&self, _seq: &SeqCache, _keep: usize, _out: &mut Vec<usize>) {}
}

/// StreamingLLM's sliding window with attention sinks.
#[derive(Debug)]
struct Sliding {
    window: usize,
    sinks: usize,
}

impl EvictionPolicy for Sliding {
    fn name(&self) -> &'static str {
        "sliding"
    }

    fn natural_budget(&self) -> Option<usize> {
        Some(self.sinks + self.window)
    }

    fn select(&self, seq: &SeqCache, keep: usize, out: &mut Vec<usize>) {
        let order = by_position(seq);
        let len = order.len();
        if keep >= len {
            return;
        }
        let sinks = self.sinks.min(keep);
        // Keep order[..sinks] and the newest keep - sinks.
        out.extend_from_slice(&order[sinks..len - (keep - sinks)]);
    }
}

/// H2O: heavy hitters by accumulated attention, plus a recent window.
#[derive(Debug)]
struct H2o {
    recent: usize,
    sinks: usize,
}

impl EvictionPolicy for H2o {
    fn name(&self) -> &'static str {
        "h2o"
    }

    fn tracks_attention(&self) -> bool {
        true
    }

    fn select(&self, seq: &SeqCache, keep: usize, out: &mut Vec<usize>) {
        keep_best(seq, keep, self.sinks, self.recent, out);
    }
}

/// SnapKV: the observation window's pooled attention decides.
#[derive(Debug)]
struct SnapKv {
    window: usize,
    sinks: usize,
    pool: usize,
}

impl EvictionPolicy for SnapKv {
    fn name(&self) -> &'static str {
        "snapkv"
    }

    fn query_window(&self) -> usize {
        self.window
    }

    fn compresses_prompt(&self) -> bool {
        true
    }

    fn prepare(&mut self, seq: &mut SeqCache, shapes: &[AttentionShape]) {
        let len = seq.len();
        let mut total = vec![0.0f32; len];
        let mut pooled = vec![0.0f32; len];
        if let Some(log) = seq.query_log() {
            for (layer, &shape) in shapes.iter().enumerate().take(seq.n_layer()) {
                let (mut qpos, mut q) = (Vec::new(), Vec::new());
                for (p, row) in log.queries(layer) {
                    qpos.push(p);
                    q.extend_from_slice(row);
                }
                if qpos.is_empty() || q.len() != qpos.len() * shape.n_head * shape.head_dim {
                    continue;
                }
                let mut mass = vec![0.0f32; shape.n_head * len];
                attention_mass(shape, seq, layer, &q, &qpos, &mut mass);
                // Per head: pool along the sequence (a token next to an attended one is kept
                // with it, which keeps phrases whole), normalise, and add.
                for head in mass.chunks_exact(len.max(1)) {
                    max_pool(head, self.pool, &mut pooled);
                    let sum: f32 = pooled.iter().sum();
                    if sum > 0.0 {
                        total.iter_mut().zip(&pooled).for_each(|(t, p)| *t += p / sum);
                    }
                }
            }
        }
        seq.scores_mut().copy_from_slice(&total);
    }

    fn select(&self, seq: &SeqCache, keep: usize, out: &mut Vec<usize>) {
        keep_best(seq, keep, self.sinks, self.window, out);
    }
}

/// Slot indices sorted by logical position.
fn by_position(seq: &SeqCache) -> Vec<usize> {
    let pos = seq.positions();
    let mut order: Vec<usize> = (0..pos.len()).collect();
    order.sort_by_key(|&s| pos[s]);
    order
}

/// Keeps the first `sinks` and last `recent` tokens (by position) and, of the rest, those with
/// the highest score, `keep` in all; writes the others to `out`.
fn keep_best(seq: &SeqCache, keep: usize, sinks: usize, recent: usize, out: &mut Vec<usize>) {
    let order = by_position(seq);
    let len = order.len();
    if keep >= len {
        return;
    }
    let sinks = sinks.min(keep);
    let recent = recent.min(keep - sinks);
    let middle = &order[sinks..len - recent];
    let n_best = keep - sinks - recent;
    let scores = seq.scores();
    let mut ranked: Vec<usize> = middle.to_vec();
    // Highest score first; ties keep the newer token.
    ranked
        .sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(seq.positions()[b].cmp(&seq.positions()[a])));
    out.extend_from_slice(&ranked[n_best..]);
}

/// `out[i] = max(x[i - r..=i + r])`.
fn max_pool(x: &[f32], r: usize, out: &mut [f32]) {
    let n = x.len();
    for (i, o) in out.iter_mut().enumerate().take(n) {
        let (a, b) = (i.saturating_sub(r), (i + r + 1).min(n));
        *o = x[a..b].iter().copied().fold(f32::NEG_INFINITY, f32::max);
    }
}

#[cfg(test)]
mod tests;
