//! Causal multi-head attention with grouped KV heads over one sequence's cache.

use rayon::prelude::*;

use crate::engine::BatchEntry;
use crate::kv::KvCache;

/// Head geometry of an attention call.
#[derive(Clone, Copy, Debug)]
pub struct AttentionShape {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads; query head `h` reads KV head `h / (n_head / n_head_kv)`.
    pub n_head_kv: usize,
    /// Dimension of a head.
    pub head_dim: usize,
    /// Score scale (usually 1/√head_dim).
    pub scale: f32,
    /// Sliding window: a query at position p sees keys at positions > p - window.
    pub window: Option<usize>,
    /// Soft-capping of scores (`cap * tanh(s / cap)`), Gemma 2 style.
    pub softcap: Option<f32>,
}

/// Attention for every batch entry over its sequence's cached keys and values of `layer`
/// (which already include the batch's own tokens). A query at logical position `p` attends to
/// the slots whose logical position is ≤ `p` (and inside the window).
///
/// `q`: `[n_tok, n_head * head_dim]` (rotated); `out`: same shape.
pub fn attention(
    shape: AttentionShape,
    entries: &[BatchEntry],
    kv: &KvCache,
    layer: usize,
    q: &[f32],
    out: &mut [f32],
) {
    let AttentionShape { n_head, n_head_kv, head_dim: hd, scale, window, softcap } = shape;
    let group = n_head / n_head_kv;
    let kv_dim = n_head_kv * hd;
    out.par_chunks_mut(hd).enumerate().for_each_init(Vec::new, |scores: &mut Vec<f32>, (idx, o)| {
        let (t, h) = (idx / n_head, idx % n_head);
        let e = entries[t];
        o.fill(0.0);
        let Some(seq) = kv.seq(e.seq) else { return };
        let keys = seq.keys(layer);
        let values = seq.values(layer);
        let qh = &q[t * n_head * hd + h * hd..t * n_head * hd + (h + 1) * hd];
        let kvh = h / group;
        let visible = |p: u32| p <= e.pos && window.is_none_or(|w| (e.pos - p) < w as u32);
        scores.clear();
        let mut max = f32::NEG_INFINITY;
        for (slot, &p) in seq.positions().iter().enumerate() {
            if !visible(p) {
                scores.push(f32::NEG_INFINITY);
                continue;
            }
            let k = &keys[slot * kv_dim + kvh * hd..slot * kv_dim + (kvh + 1) * hd];
            let mut s = ferrolm_kernels::simd::dot_f32(qh, k) * scale;
            if let Some(c) = softcap {
                s = c * (s / c).tanh();
            }
            max = max.max(s);
            scores.push(s);
        }
        if max == f32::NEG_INFINITY {
            return;
        }
        let mut sum = 0.0f32;
        for s in scores.iter_mut() {
            *s = (*s - max).exp();
            sum += *s;
        }
        let inv = 1.0 / sum;
        for (slot, &w) in scores.iter().enumerate() {
            if w == 0.0 {
                continue;
            }
            let v = &values[slot * kv_dim + kvh * hd..slot * kv_dim + (kvh + 1) * hd];
            let w = w * inv;
            o.iter_mut().zip(v).for_each(|(a, &b)| *a += w * b);
        }
    });
}
