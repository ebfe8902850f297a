//! Causal multi-head attention with grouped KV heads over each sequence's cache.
//!
//! The work of one call is a list of independent [`Task`]s run by one function, [`run_task`],
//! in one parallel loop:
//! - a sequence with at least [`TILE_MIN_TOKENS`] queries in the batch (a prompt) is cut into
//!   query tiles; a tile of consecutive tokens × the query heads of one KV head is attended
//!   against the cache in key blocks, flash-attention style ([`prefill`]): scores `S = K·Qᵀ` and
//!   the value product `P·V` are small f32 GEMMs, the softmax is online (running maximum and sum
//!   per query row), blocks entirely outside every query's mask are skipped, and f16 keys are
//!   converted once per block;
//! - every query of a sequence with fewer queries (a decode step, a short chunk) is attended on
//!   its own, per KV head and range of cache slots ([`decode`]): the group's query heads are
//!   scored against each key row, then the values are accumulated; ranges run as separate tasks
//!   and are merged at the end.
//!
//! Numerics follow llama.cpp's CPU flash attention, which has the same two paths. The tiled path
//! (llama.cpp: 64 queries or more) is f32 throughout. The per-query path (llama.cpp's one-chunk
//! path) rounds the query to f16 for an f16 key cache (f16 dot products) and, for f16 values,
//! keeps an f16 accumulator updated key by key in slot order (rescaled when a new maximum
//! appears, every addition rounded). That rounding is coarse and its errors compound through a
//! model's layers, so the per-query scores are summed in exactly the order of
//! `ferrolm_kernels::simd::dot_f32`, as this crate always has (see `AttnKernels::dots`). Long
//! decode contexts ([`decode::SPLIT_MIN_SLOTS`] slots or more) are split into ranges merged in
//! f32, as llama.cpp splits them across threads.

mod decode;
mod prefill;
#[cfg(test)]
mod tests;

use std::cell::RefCell;

use ferrolm_kernels::simd_attn::{AttnKernels, Elems};
use rayon::prelude::*;

use crate::engine::BatchEntry;
use crate::kv::{KvCache, KvType, RowsView, SeqCache, SeqId};

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
/// the slots whose logical position is ≤ `p` (and inside the window); an entry whose sequence
/// has no cache, or that sees no slot, gets zeros.
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
    let group = shape.n_head / shape.n_head_kv;
    let ctx = Ctx {
        shape,
        group,
        kv_dim: shape.n_head_kv * shape.head_dim,
        round_q: kv.types().0 == KvType::F16,
        kernels: AttnKernels::best(),
        q,
        entries,
    };
    out.fill(0.0);
    let seqs = sequences(entries, kv, layer, prefill::block_len(shape.head_dim));
    // Destinations: one `[group, head_dim]` chunk of `out` per (token, KV head), handed to the
    // tile that computes it; decode ranges write partial results into `parts`, merged below.
    let mut dest: Vec<Option<&mut [f32]>> = out.chunks_mut(group * shape.head_dim).map(Some).collect();
    let mut jobs: Vec<decode::Job<'_>> = Vec::new();
    for s in seqs.iter().filter(|s| !s.tiled()) {
        for &token in &s.tokens {
            for kvh in 0..shape.n_head_kv {
                jobs.push(decode::Job { seq: s, token, kvh, ranges: Vec::new() });
            }
        }
    }
    decode::split_ranges(&mut jobs, &ctx, rayon::current_num_threads());
    let part_len = decode::part_len(group, shape.head_dim);
    let mut parts = vec![0.0f32; jobs.iter().map(|j| j.ranges.len()).sum::<usize>() * part_len];
    {
        let mut tasks: Vec<Task<'_>> = Vec::new();
        for s in seqs.iter().filter(|s| s.tiled()) {
            prefill::push_tiles(&mut tasks, s, &ctx, &mut dest);
        }
        let mut free = parts.chunks_mut(part_len);
        for job in &jobs {
            for (slots, part) in job.ranges.iter().zip(free.by_ref()) {
                tasks.push(Task::Range(decode::RangeTask { job, slots: slots.clone(), part }));
            }
        }
        // The one parallel loop: every task writes only the output region it owns.
        tasks.par_iter_mut().for_each(|t| run_task(t, &ctx));
    }
    let mut parts = parts.chunks(part_len);
    for job in &jobs {
        let mine: Vec<&[f32]> = parts.by_ref().take(job.ranges.len()).collect();
        if let Some(o) = dest[job.token * shape.n_head_kv + job.kvh].as_deref_mut() {
            decode::merge(&mine, group, shape.head_dim, o);
        }
    }
}

/// Sequences with at least this many queries in a batch are attended in query tiles; fewer
/// queries each go through the per-query path (llama.cpp's `GGML_FA_TILE_Q`).
const TILE_MIN_TOKENS: usize = 64;

/// What every task of one call reads.
struct Ctx<'a> {
    shape: AttentionShape,
    /// Query heads per KV head.
    group: usize,
    /// Width of a cached row (`n_head_kv * head_dim`).
    kv_dim: usize,
    /// Round queries to f16 before scoring them one by one (f16 key cache).
    round_q: bool,
    kernels: AttnKernels,
    /// `[n_tok, n_head * head_dim]`
    q: &'a [f32],
    entries: &'a [BatchEntry],
}

impl Ctx<'_> {
    /// The queries of KV head `kvh`'s group for batch entry `t`. `[group, head_dim]`
    fn q_group(&self, t: usize, kvh: usize) -> &[f32] {
        let hd = self.shape.head_dim;
        let start = (t * self.shape.n_head + kvh * self.group) * hd;
        &self.q[start..start + self.group * hd]
    }

    /// Whether a query at `qpos` sees a key at `kpos`.
    fn visible(&self, qpos: u32, kpos: u32) -> bool {
        visible(self.shape.window, qpos, kpos)
    }
}

/// Whether a query at `qpos` sees a key at `kpos` (causal, inside the window if any).
fn visible(window: Option<usize>, qpos: u32, kpos: u32) -> bool {
    kpos <= qpos && window.is_none_or(|w| ((qpos - kpos) as usize) < w)
}

/// One sequence of the batch: its cache and its entries (batch indices, in batch order).
struct SeqWork<'a> {
    cache: &'a SeqCache,
    /// The layer's keys. `[slots, kv_dim]`
    keys: Elems<'a>,
    /// The layer's values. `[slots, kv_dim]`
    values: Elems<'a>,
    tokens: Vec<usize>,
    /// Smallest and largest position of each key block (tiled sequences only).
    blocks: Vec<(u32, u32)>,
}

impl SeqWork<'_> {
    /// Whether this sequence is attended in query tiles (else by the decode path).
    fn tiled(&self) -> bool {
        self.tokens.len() >= TILE_MIN_TOKENS
    }
}

/// The batch's sequences that have a cache, in order of first appearance.
fn sequences<'a>(entries: &[BatchEntry], kv: &'a KvCache, layer: usize, block: usize) -> Vec<SeqWork<'a>> {
    let mut ids: Vec<SeqId> = Vec::new();
    let mut seqs: Vec<SeqWork<'a>> = Vec::new();
    for (t, e) in entries.iter().enumerate() {
        match ids.iter().position(|&id| id == e.seq) {
            Some(i) => seqs[i].tokens.push(t),
            None => {
                let Some(cache) = kv.seq(e.seq) else { continue };
                ids.push(e.seq);
                seqs.push(SeqWork {
                    cache,
                    keys: elems(cache.keys(layer)),
                    values: elems(cache.values(layer)),
                    tokens: vec![t],
                    blocks: Vec::new(),
                });
            }
        }
    }
    for s in seqs.iter_mut().filter(|s| s.tiled()) {
        s.blocks = s.cache.positions().chunks(block).map(prefill::min_max).collect();
    }
    seqs
}

/// A layer's cached rows in their storage type.
fn elems(rows: RowsView<'_>) -> Elems<'_> {
    match (rows.as_f32(), rows.as_f16()) {
        (Some(x), _) => Elems::F32(x),
        (None, Some(x)) => Elems::F16(x),
        (None, None) => Elems::F32(&[]),
    }
}

/// An independent unit of work with the output region it alone writes.
enum Task<'a> {
    /// A query tile of one sequence against its whole cache.
    Tile(prefill::TileTask<'a>),
    /// One query and KV head against a range of cache slots.
    Range(decode::RangeTask<'a>),
}

/// Runs one task with this thread's scratch buffers.
fn run_task(task: &mut Task<'_>, ctx: &Ctx<'_>) {
    SCRATCH.with(|s| {
        let mut s = s.borrow_mut();
        match task {
            Task::Tile(t) => prefill::run(t, ctx, &mut s),
            Task::Range(r) => decode::run(r, ctx, &mut s),
        }
    });
}

/// Per-thread buffers, grown on demand and kept between calls.
#[derive(Default)]
struct Scratch {
    /// Query rows of a decode group. `[group, head_dim]`
    q: Vec<f32>,
    /// Transposed query tile. `[head_dim, rows]`
    qt: Vec<f32>,
    /// Scores, then probabilities. Tile: `[block, rows]`; decode: `[group, span]`.
    s: Vec<f32>,
    /// A key block converted to f32. `[block, head_dim]`
    k: Vec<f32>,
    /// Output accumulator of a tile. `[rows, head_dim]`
    o: Vec<f32>,
    /// Running maximum per row.
    max: Vec<f32>,
    /// Running softmax denominator per row.
    sum: Vec<f32>,
    /// Rescaling factor of the last key block per row.
    alpha: Vec<f32>,
    /// Key-by-key rescaling factors of a decode span (f16 values), laid out like `s`.
    ms: Vec<f32>,
    /// Runs of visible slots of a decode span.
    runs: Vec<std::ops::Range<usize>>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// `v` with at least `n` elements, the first `n` returned (contents unspecified).
fn grow(v: &mut Vec<f32>, n: usize) -> &mut [f32] {
    if v.len() < n {
        v.resize(n, 0.0);
    }
    &mut v[..n]
}
