//! Causal multi-head attention with grouped KV heads over each sequence's cache.
//!
//! The work of one call is a list of independent [`Task`]s, each writing its own region of the
//! output, run by one function, [`run_task`], in one parallel loop on the worker pool:
//! - a sequence with at least [`TILE_MIN_TOKENS`] queries in the batch (a prompt) is cut into
//!   query tiles; a tile of consecutive tokens × the query heads of one KV head is attended
//!   against the cache in key blocks, flash-attention style ([`prefill`]): scores `S = K·Qᵀ` and
//!   the value product `P·V` are small f32 GEMMs, the softmax is online (running maximum and sum
//!   per query row), blocks entirely outside every query's mask are skipped, and f16 keys and
//!   quantized keys and values are converted to f32 once per block;
//! - every query of a sequence with fewer queries (a decode step, a short chunk) is attended on
//!   its own, per KV head and range of cache slots ([`decode`]): the group's query heads are
//!   scored against each key row, then the values are accumulated; ranges run as separate tasks
//!   and are merged at the end.
//!
//! Numerics follow llama.cpp's CPU flash attention, which has the same two paths, except for
//! one choice. The tiled path (llama.cpp: 64 queries or more over a float cache) is f32
//! throughout; over a quantized key cache, where llama.cpp scores every query on its own path
//! against a Q8_0 copy of it, a tile's queries are rounded through Q8_0 first, so that the
//! scores are llama.cpp's up to the order of the f32 additions. The per-query
//! path (llama.cpp's one-chunk path) rounds the query to f16 for an f16 key cache (f16 dot
//! products); for a quantized key cache (q8_0, q4_0) the query is quantized once to Q8_0 and
//! scored with integer dot products; quantized values are converted to f32 a few rows at a time
//! (llama.cpp's `v_to_float`), both straight from the cache's blocks
//! ([`ferrolm_kernels::quant::kv`]). The choice: values are always accumulated in f32, where
//! llama.cpp keeps an f16 accumulator for f16 values, updated key by key with every addition
//! rounded to f16. That accumulator costs five vector operations per 16 values and key against
//! one (a decode step of 8 sequences at context 256 through SmolLM2's 30 layers: 4.5 → 3.4
//! ms, `cargo bench -p ferrolm --bench attention`) and is the less accurate of the two; it also
//! matches llama.cpp's attention without flash attention, which accumulates in f32. The
//! per-query scores are summed in exactly the order of `ferrolm_kernels::simd::dot_f32`, as
//! this crate always has (see `AttnKernels::dots`). Long decode contexts
//! ([`decode::SPLIT_MIN_SLOTS`] slots or more) are split into ranges merged in f32, as
//! llama.cpp splits them across threads.
//!
//! A call allocates nothing once warm: the work list and the per-query tasks' buffers live in
//! the calling thread's [`Plan`], kept between calls. Tiles, which need larger buffers, use a
//! per-thread [`Scratch`] grown on first use.

mod decode;
mod prefill;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::ops::Range;

use ferrolm_kernels::quant::kv::{BlockRows, KvBlocks, KvKernels};
use ferrolm_kernels::simd_attn::{AttnKernels, Elems};

use crate::batch::BatchEntry;

use crate::kv::{KvCache, KvType, RowsView, SeqCache, SeqId, Stored};
use crate::ops::{AttentionShape, visible};

/// Attention for every batch entry over its sequence's cached keys and values of `layer`
/// (which already include the batch's own tokens). A query at logical position `p` attends to
/// the slots whose logical position is ≤ `p` (and inside the window); an entry whose sequence
/// has no cache, or that sees no slot, gets zeros.
///
/// `q`: `[n_tok, n_head * head_dim]` (rotated); `out`: same shape. `prompt_chunks`: sequences
/// whose queries are part of a prompt chunk of the given length (see
/// [`crate::batch::Batch::set_prompt_chunk`]); their path is chosen by that length instead of
/// by their number of queries in this call, so that each query's result is the same either way.
///
/// # Panics
/// If `q` or `out` is not `[entries.len(), n_head * head_dim]`, or the cache stores a block
/// type (q8_0, q4_0) whose blocks do not divide `head_dim` (`Model::forward` refuses such a
/// cache with an error first).
pub fn attention(
    shape: AttentionShape,
    entries: &[BatchEntry],
    prompt_chunks: &[(SeqId, u32)],
    kv: &KvCache,
    layer: usize,
    q: &[f32],
    out: &mut [f32],
) {
    let qd = shape.n_head * shape.head_dim;
    assert!(q.len() == entries.len() * qd && out.len() == q.len(), "attention: q/out shape");
    out.fill(0.0);
    let pool = crate::threads::pool();
    let mut plan = PLAN.with(|p| std::mem::take(&mut *p.borrow_mut()));
    let ctx = Ctx {
        shape,
        group: shape.n_head / shape.n_head_kv,
        kv_dim: shape.n_head_kv * shape.head_dim,
        round_q: kv.types().0 == KvType::F16,
        kernels: AttnKernels::best(),
        kv_kernels: KvKernels::best(),
        v_blocks: kv.types().1.blocks(),
        q,
        entries,
        prompt_chunks,
        kv,
        layer,
    };
    plan.build(&ctx, pool.n_threads());
    let mut parts = std::mem::take(&mut plan.parts);
    {
        let (out, parts) = (SharedOut::new(out), SharedOut::new(&mut parts));
        let (plan, ctx) = (&plan, &ctx);
        // The one parallel loop: every task writes only the output region it owns.
        crate::threads::parallel_for(&pool, plan.tasks.len(), |i| {
            run_task(&plan.tasks[i], plan, ctx, out, parts)
        });
    }
    plan.parts = parts;
    for job in &plan.jobs {
        let parts = &plan.parts[job.parts.start * plan.part_len..job.parts.end * plan.part_len];
        let start = (job.token * shape.n_head + job.kvh * ctx.group) * shape.head_dim;
        let o = &mut out[start..start + ctx.group * shape.head_dim];
        let sinks = ctx.group_sinks(job.kvh);
        decode::merge(parts, plan.part_len, ctx.group, shape.head_dim, sinks, o);
    }
    PLAN.with(|p| *p.borrow_mut() = plan);
}

/// Sequences with at least this many queries in a batch are attended in query tiles; fewer
/// queries each go through the per-query path (llama.cpp's `GGML_FA_TILE_Q`).
const TILE_MIN_TOKENS: usize = 64;

/// What every task of one call reads.
struct Ctx<'a> {
    shape: AttentionShape<'a>,
    /// Query heads per KV head.
    group: usize,
    /// Width of a cached row (`n_head_kv * head_dim`).
    kv_dim: usize,
    /// Round queries to f16 before scoring them one by one (f16 key cache).
    round_q: bool,
    kernels: AttnKernels,
    kv_kernels: KvKernels,
    /// The block format of quantized values.
    v_blocks: Option<KvBlocks>,
    /// `[n_tok, n_head * head_dim]`
    q: &'a [f32],
    entries: &'a [BatchEntry],
    /// `(seq, prompt chunk length)`: overrides the query count in the choice of path.
    prompt_chunks: &'a [(SeqId, u32)],
    kv: &'a KvCache,
    layer: usize,
}

impl<'a> Ctx<'a> {
    /// The queries of KV head `kvh`'s group for batch entry `t`. `[group, head_dim]`
    fn q_group(&self, t: usize, kvh: usize) -> &[f32] {
        let hd = self.shape.head_dim;
        let start = (t * self.shape.n_head + kvh * self.group) * hd;
        &self.q[start..start + self.group * hd]
    }

    /// Offset in `out` of the `[group, head_dim]` output of batch entry `t` for KV head `kvh`.
    fn out_offset(&self, t: usize, kvh: usize) -> usize {
        (t * self.shape.n_head + kvh * self.group) * self.shape.head_dim
    }

    /// The attention sinks of KV head `kvh`'s query heads, if the model has sinks. `[group]`
    fn group_sinks(&self, kvh: usize) -> Option<&'a [f32]> {
        self.shape.sinks.map(|s| &s[kvh * self.group..(kvh + 1) * self.group])
    }

    /// Whether a query at `qpos` sees a key at `kpos`.
    fn visible(&self, qpos: u32, kpos: u32) -> bool {
        visible(self.shape.window, qpos, kpos)
    }

    /// A sequence's cache and this layer's keys and values.
    fn seq(&self, id: SeqId) -> Option<(&SeqCache, Cached<'_>, Cached<'_>)> {
        let c = self.kv.seq(id)?;
        Some((c, cached(c.keys(self.layer)), cached(c.values(self.layer))))
    }
}

/// A layer's cached keys or values as the kernels read them.
#[derive(Clone, Copy)]
enum Cached<'a> {
    /// f32 or f16 elements. `[len, kv_dim]`
    Float(Elems<'a>),
    /// GGML blocks, `ty.row_bytes(kv_dim)` bytes per slot.
    Blocks(KvBlocks, &'a [u8]),
}

/// `rows` rows of one head (the `head_dim` values from value `off` of each slot), from slot
/// `slot` on, of a layer stored in blocks of type `ty`.
fn block_rows<'a>(
    ty: KvBlocks,
    data: &'a [u8],
    slot: usize,
    off: usize,
    rows: usize,
    ctx: &Ctx<'_>,
) -> BlockRows<'a> {
    let stride = ty.row_bytes(ctx.kv_dim);
    let start = (slot * stride + ty.row_bytes(off)).min(data.len());
    BlockRows { ty, data: &data[start..], rows, cols: ctx.shape.head_dim, stride }
}

/// A layer's cached rows in their storage type.
fn cached(rows: RowsView<'_>) -> Cached<'_> {
    match rows.stored() {
        Stored::F32(x) => Cached::Float(Elems::F32(x)),
        Stored::F16(x) => Cached::Float(Elems::F16(x)),
        Stored::Blocks(ty, x) => Cached::Blocks(ty, x),
    }
}

/// The work list of one call. Kept between calls (see [`PLAN`]) so that its vectors keep their
/// capacity.
#[derive(Default)]
struct Plan {
    /// The batch's sequences that have a cache, in order of first appearance.
    seqs: Vec<SeqPlan>,
    /// Batch indices grouped by sequence (in batch order within a sequence).
    tokens: Vec<usize>,
    /// Smallest and largest position of each key block of the tiled sequences.
    blocks: Vec<(u32, u32)>,
    tasks: Vec<Task>,
    /// Per-query jobs, in the order of their range tasks.
    jobs: Vec<decode::Job>,
    /// Partial results and scratch of the range tasks, [`Plan::part_len`] each.
    parts: Vec<f32>,
    /// See [`decode::part_len`].
    part_len: usize,
    /// For a quantized key cache, each job's queries quantized to Q8_0, [`Plan::q8_len`] bytes
    /// each (see [`decode::quantize_queries`]).
    q8: Vec<u8>,
    /// Bytes of one job's quantized queries (0 without a quantized key cache).
    q8_len: usize,
}

/// One sequence of the batch.
struct SeqPlan {
    id: SeqId,
    /// Its entries: `Plan::tokens[tokens]`.
    tokens: Range<usize>,
    /// Its key blocks: `Plan::blocks[blocks]` (tiled sequences only).
    blocks: Range<usize>,
}

impl SeqPlan {
    /// Whether this sequence is attended in query tiles (else query by query): by the length
    /// of the prompt chunk its queries belong to when declared, else by their number.
    fn tiled(&self, prompt_chunks: &[(SeqId, u32)]) -> bool {
        let n = prompt_chunks.iter().find(|(s, _)| *s == self.id).map_or(self.tokens.len(), |c| c.1 as usize);
        n >= TILE_MIN_TOKENS
    }
}

impl Plan {
    /// Fills the plan for one call.
    fn build(&mut self, ctx: &Ctx<'_>, threads: usize) {
        self.seqs.clear();
        self.tokens.clear();
        self.blocks.clear();
        self.tasks.clear();
        self.jobs.clear();
        // Sequences and their token counts, then the tokens grouped by sequence.
        for e in ctx.entries {
            match self.seqs.iter_mut().find(|s| s.id == e.seq) {
                Some(s) => s.tokens.end += 1,
                None if ctx.kv.seq(e.seq).is_some() => {
                    self.seqs.push(SeqPlan { id: e.seq, tokens: 0..1, blocks: 0..0 })
                }
                None => {}
            }
        }
        let mut start = 0;
        for s in &mut self.seqs {
            let n = s.tokens.end;
            s.tokens = start..start;
            start += n;
        }
        self.tokens.resize(start, 0);
        for (t, e) in ctx.entries.iter().enumerate() {
            if let Some(s) = self.seqs.iter_mut().find(|s| s.id == e.seq) {
                self.tokens[s.tokens.end] = t;
                s.tokens.end += 1;
            }
        }
        let block = prefill::block_len(ctx.shape.head_dim);
        for si in 0..self.seqs.len() {
            let (id, tiled) = (self.seqs[si].id, self.seqs[si].tiled(ctx.prompt_chunks));
            let Some(cache) = ctx.kv.seq(id) else { continue };
            if tiled {
                let b0 = self.blocks.len();
                self.blocks.extend(cache.positions().chunks(block).map(prefill::min_max));
                self.seqs[si].blocks = b0..self.blocks.len();
                prefill::push_tiles(self, si, ctx);
            } else {
                for i in self.seqs[si].tokens.clone() {
                    for kvh in 0..ctx.shape.n_head_kv {
                        self.jobs.push(decode::Job { seq: si, token: self.tokens[i], kvh, parts: 0..0 });
                    }
                }
            }
        }
        self.part_len = decode::part_len(ctx.group, ctx.shape.head_dim, ctx.v_blocks.is_some());
        decode::push_ranges(self, ctx, threads);
        // Longest ranges first, so that the short ones fill in at the end of the parallel loop
        // rather than one thread finishing a long one alone (the order changes no result: each
        // task writes its own region). Tiles, the longest work, stay ahead.
        self.tasks.sort_unstable_by_key(|t| match t {
            Task::Tile(_) => (0, 0),
            Task::Range(r) => (1, usize::MAX - r.slots()),
        });
        decode::quantize_queries(self, ctx);
        let n_parts = self.jobs.last().map_or(0, |j| j.parts.end);
        self.parts.resize(n_parts * self.part_len, 0.0);
    }
}

/// An independent unit of work and the output region it alone writes.
enum Task {
    /// A query tile of one sequence against its whole cache: writes the tile's output rows.
    Tile(prefill::Tile),
    /// One query and KV head against a range of cache slots: writes its partial result.
    Range(decode::RangeTask),
}

/// Runs one task with this thread's scratch buffers.
fn run_task(task: &Task, plan: &Plan, ctx: &Ctx<'_>, out: SharedOut, parts: SharedOut) {
    match task {
        Task::Tile(t) => SCRATCH.with(|s| prefill::run(t, plan, ctx, out, &mut s.borrow_mut())),
        Task::Range(r) => decode::run(r, plan, ctx, parts),
    }
}

/// An output buffer shared by the tasks of one parallel loop, which write disjoint regions of
/// it (each task the regions its plan entry names).
#[derive(Clone, Copy)]
struct SharedOut {
    ptr: *mut f32,
    len: usize,
}

// SAFETY: the tasks of a loop write disjoint regions (by construction of the plan: every
// (token, KV head) output belongs to one tile, every partial result to one range task), and the
// buffer outlives the loop.
unsafe impl Send for SharedOut {}
// SAFETY: as above.
unsafe impl Sync for SharedOut {}

impl SharedOut {
    fn new(x: &mut [f32]) -> Self {
        Self { ptr: x.as_mut_ptr(), len: x.len() }
    }

    /// `len` floats from `start`.
    ///
    /// # Safety
    /// No other live reference may overlap the region (the task owns it).
    #[allow(clippy::mut_from_ref)]
    unsafe fn region(&self, start: usize, len: usize) -> &mut [f32] {
        assert!(start + len <= self.len, "attention: output region out of bounds");
        // SAFETY: in bounds (checked above); exclusivity is the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}

/// Per-thread buffers of the tiles, grown on demand and kept between calls.
#[derive(Default)]
struct Scratch {
    /// Transposed query tile. `[head_dim, rows]`
    qt: Vec<f32>,
    /// One query head as Q8_0 blocks, and back in f32 (a quantized key cache). `[head_dim]`
    q8: (Vec<u8>, Vec<f32>),
    /// Positions of a tile's queries.
    qpos: Vec<u32>,
    /// Scores, then probabilities. `[block, rows]`
    s: Vec<f32>,
    /// A key block converted to f32. `[block, head_dim]`
    k: Vec<f32>,
    /// A value block converted to f32 (quantized values). `[block, head_dim]`
    v: Vec<f32>,
    /// Output accumulator of a tile. `[rows, head_dim]`
    o: Vec<f32>,
    /// Running maximum per row.
    max: Vec<f32>,
    /// Running softmax denominator per row.
    sum: Vec<f32>,
    /// Rescaling factor of the last key block per row.
    alpha: Vec<f32>,
}

thread_local! {
    /// This thread's work list (the caller's of [`attention`]).
    static PLAN: RefCell<Plan> = RefCell::new(Plan::default());
    /// This thread's tile buffers.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// The factor that turns an output row accumulated with softmax maximum `max` and denominator
/// `sum` into its attention output: `1 / sum`, or with an attention sink of logit `sink`,
/// `1 / (sum + e^(sink - max))` (the sink takes its share of the probability and adds no
/// value), rescaled to the sink when it is the larger so that nothing overflows. Zero for a
/// row that saw no key.
fn norm_factor(sum: f32, max: f32, sink: Option<f32>) -> f32 {
    match sink {
        _ if sum <= 0.0 => 0.0,
        None => 1.0 / sum,
        Some(s) if s > max => {
            let ms = (max - s).exp();
            ms / (sum * ms + 1.0)
        }
        Some(s) => 1.0 / (sum + (s - max).exp()),
    }
}

/// `v` with at least `n` elements, the first `n` returned (contents unspecified).
fn grow<T: Copy + Default>(v: &mut Vec<T>, n: usize) -> &mut [T] {
    if v.len() < n {
        v.resize(n, T::default());
    }
    &mut v[..n]
}
