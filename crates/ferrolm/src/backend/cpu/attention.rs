//! Causal multi-head attention with grouped KV heads over each sequence's cache.

use ferrolm_kernels::simd;
use half::f16;
use rayon::prelude::*;

use crate::engine::BatchEntry;
use crate::kv::{KvCache, KvType};

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
/// One pass per query with an online softmax (running maximum and sum), so no score buffer
/// grows with the context. With an f16 cache the arithmetic is f16 too, as in llama.cpp's CPU
/// flash attention: the query is rounded to f16 for the f16 dot products with the keys, and the
/// weighted sum of values is accumulated in f16. An f32 cache computes everything in f32.
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
    let f16_q = kv.types().0 == KvType::F16;
    let f16_acc = kv.types().1 == KvType::F16;
    let r16 = |v: f32| f16::from_f32(v).to_f32();
    out.par_chunks_mut(hd).enumerate().for_each_init(
        || (vec![0.0f32; hd], vec![0.0f32; hd], vec![0.0f32; hd]),
        |(qbuf, kbuf, vbuf), (idx, o)| {
            let (t, h) = (idx / n_head, idx % n_head);
            let e = entries[t];
            o.fill(0.0);
            let Some(seq) = kv.seq(e.seq) else { return };
            let (keys, values) = (seq.keys(layer), seq.values(layer));
            let qh = &q[t * n_head * hd + h * hd..t * n_head * hd + (h + 1) * hd];
            if f16_q {
                qbuf.iter_mut().zip(qh).for_each(|(d, &s)| *d = r16(s));
            } else {
                qbuf.copy_from_slice(qh);
            }
            let off = (h / group) * hd;
            let (mut max, mut sum) = (f32::NEG_INFINITY, 0.0f32);
            for (slot, &p) in seq.positions().iter().enumerate() {
                if p > e.pos || window.is_some_and(|w| (e.pos - p) as usize >= w) {
                    continue;
                }
                keys.read(slot * kv_dim + off, kbuf);
                let mut s = simd::dot_f32(qbuf, kbuf) * scale;
                if let Some(c) = softcap {
                    s = c * (s / c).tanh();
                }
                // Online softmax: rescale what was accumulated when a new maximum appears.
                let w = if s > max {
                    let r = (max - s).exp();
                    if f16_acc {
                        simd::scale_round_f16(o, r);
                    } else {
                        o.iter_mut().for_each(|a| *a *= r);
                    }
                    sum *= r;
                    max = s;
                    1.0
                } else {
                    (s - max).exp()
                };
                sum += w;
                values.read(slot * kv_dim + off, vbuf);
                if f16_acc {
                    simd::mad_round_f16(o, vbuf, w);
                } else {
                    o.iter_mut().zip(vbuf.iter()).for_each(|(a, &b)| *a += w * b);
                }
            }
            if sum > 0.0 {
                let inv = 1.0 / sum;
                o.iter_mut().for_each(|a| *a *= inv);
            }
        },
    );
}
