//! Causal multi-head attention with grouped KV heads over each sequence's cache.

use ferrolm_kernels::simd;
use half::f16;
use std::cell::RefCell;

use crate::engine::BatchEntry;
use std::borrow::Cow;

use crate::kv::{KvCache, KvType, SeqId};

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
/// grows with the context. Work is split by (token, KV head): the query heads that share a KV
/// head are processed together, so each cached row is read (and converted from f16) once for
/// the whole group. With an f16 cache the arithmetic is f16 too, as in llama.cpp's CPU
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
    // A prompt batch converts each sequence's rows to f32 once; a decode step, which reads
    // every row once anyway, converts row by row and allocates nothing large.
    let materialize = entries.len() >= MATERIALIZE_MIN_TOKENS;
    let mut seqs: Vec<SeqRows<'_>> = Vec::new();
    if materialize {
        for e in entries {
            if seqs.iter().all(|(id, _, _)| *id != e.seq) {
                if let Some(sc) = kv.seq(e.seq) {
                    seqs.push((e.seq, sc.keys(layer).to_f32(), sc.values(layer).to_f32()));
                }
            }
        }
    }
    // [n_tok, n_head_kv, group * head_dim]: one chunk per (token, KV head).
    let n_tasks = out.len() / (group * hd);
    let out_ptr = TaskOut(out.as_mut_ptr(), out.len());
    crate::threads::parallel_for(&crate::threads::pool(), n_tasks, |idx| {
        // SAFETY: task `idx` is claimed by one thread and owns floats idx*group*hd.. of `out`.
        let o = unsafe { out_ptr.chunk(idx, group * hd) };
        SCRATCH.with(|sc| {
            let mut sc = sc.borrow_mut();
            let sc = sc.get_or_insert_with(|| Scratch::new(group, hd));
            if sc.q.len() != group * hd || sc.max.len() != group {
                *sc = Scratch::new(group, hd);
            }
            let (t, kvh) = (idx / n_head_kv, idx % n_head_kv);
            let e = entries[t];
            o.fill(0.0);
            let Some(seq) = kv.seq(e.seq) else { return };
            // Queries of the group. [group, head_dim]
            let qg = &q[t * n_head * hd + kvh * group * hd..][..group * hd];
            if f16_q {
                sc.q.iter_mut().zip(qg).for_each(|(d, &s)| *d = f16::from_f32(s).to_f32());
            } else {
                sc.q.copy_from_slice(qg);
            }
            sc.max.fill(f32::NEG_INFINITY);
            sc.sum.fill(0.0);
            let rows = seqs.iter().find(|(id, _, _)| *id == e.seq);
            let off = kvh * hd;
            for (slot, &p) in seq.positions().iter().enumerate() {
                if p > e.pos || window.is_some_and(|w| (e.pos - p) as usize >= w) {
                    continue;
                }
                let at = slot * kv_dim + off;
                let (k, v): (&[f32], &[f32]) = match rows {
                    Some((_, ks, vs)) => (&ks[at..at + hd], &vs[at..at + hd]),
                    None => {
                        seq.keys(layer).read(at, &mut sc.k);
                        seq.values(layer).read(at, &mut sc.v);
                        (&sc.k, &sc.v)
                    }
                };
                for g in 0..group {
                    let mut s = simd::dot_f32(&sc.q[g * hd..(g + 1) * hd], k) * scale;
                    if let Some(c) = softcap {
                        s = c * (s / c).tanh();
                    }
                    let og = &mut o[g * hd..(g + 1) * hd];
                    // Online softmax: rescale what was accumulated when a new maximum appears.
                    let w = if s > sc.max[g] {
                        let r = (sc.max[g] - s).exp();
                        if f16_acc {
                            simd::scale_round_f16(og, r);
                        } else {
                            og.iter_mut().for_each(|a| *a *= r);
                        }
                        sc.sum[g] *= r;
                        sc.max[g] = s;
                        1.0
                    } else {
                        (s - sc.max[g]).exp()
                    };
                    sc.sum[g] += w;
                    if f16_acc {
                        simd::mad_round_f16(og, v, w);
                    } else {
                        og.iter_mut().zip(v).for_each(|(a, &b)| *a += w * b);
                    }
                }
            }
            for (g, og) in o.chunks_exact_mut(hd).enumerate() {
                if sc.sum[g] > 0.0 {
                    let inv = 1.0 / sc.sum[g];
                    og.iter_mut().for_each(|a| *a *= inv);
                }
            }
        })
    });
}

thread_local! {
    /// Per-thread buffers of [`attention`], sized for the last shape seen.
    static SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
}

/// The attention output shared by the tasks, which write disjoint chunks of it.
#[derive(Clone, Copy)]
struct TaskOut(*mut f32, usize);

// SAFETY: tasks write disjoint chunks; the buffer outlives the parallel region.
unsafe impl Send for TaskOut {}
// SAFETY: as above.
unsafe impl Sync for TaskOut {}

impl TaskOut {
    /// Chunk `i` of `len` floats.
    ///
    /// # Safety
    /// No other live reference may overlap the chunk.
    #[allow(clippy::mut_from_ref)]
    unsafe fn chunk(&self, i: usize, len: usize) -> &mut [f32] {
        assert!((i + 1) * len <= self.1, "attention output chunk out of bounds");
        // SAFETY: in bounds (checked above); exclusivity is the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.0.add(i * len), len) }
    }
}

/// A sequence's keys and values of one layer, as f32. `[len, kv_dim]` each.
type SeqRows<'a> = (SeqId, Cow<'a, [f32]>, Cow<'a, [f32]>);

/// Batches at least this long convert the cache to f32 once per call.
const MATERIALIZE_MIN_TOKENS: usize = 8;

/// Per-task buffers of [`attention`].
struct Scratch {
    /// Queries of one KV group. `[group, head_dim]`
    q: Vec<f32>,
    /// One key row. `[head_dim]`
    k: Vec<f32>,
    /// One value row. `[head_dim]`
    v: Vec<f32>,
    /// Running maximum per query head. `[group]`
    max: Vec<f32>,
    /// Running softmax denominator per query head. `[group]`
    sum: Vec<f32>,
}

impl Scratch {
    fn new(group: usize, hd: usize) -> Self {
        Self {
            q: vec![0.0; group * hd],
            k: vec![0.0; hd],
            v: vec![0.0; hd],
            max: vec![0.0; group],
            sum: vec![0.0; group],
        }
    }
}
