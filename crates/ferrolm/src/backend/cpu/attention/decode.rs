//! The decode path: one query against a sequence's cache, per KV head, split into ranges of
//! slots that run as separate tasks and are merged afterwards (so that even a model with one KV
//! head uses every thread).
//!
//! A range is processed in spans of at most [`SPAN`] slots: the group's query heads are scored
//! against each visible key row, the scores exponentiated in place, and the values accumulated
//! in f32 by a small GEMM, spans combined by an online softmax (f32 and f16 values read in
//! place, quantized values converted [`V_ROWS`] rows at a time). Quantized keys are scored
//! against the job's queries quantized once to Q8_0 ([`quantize_queries`]). A task's scratch memory is bounded by the span, not the
//! context, and lives next to its partial result (see [`part_len`]).

use std::ops::Range;

use ferrolm_kernels::quant::kv::KvBlocks;
use ferrolm_kernels::simd_attn::{Beta, Elems, Rows, RowsMut, Strided};

use super::prefill::rows_at;
use super::{Cached, Ctx, Plan, SharedOut, Task, block_rows, norm_factor};

/// Slots scored at once.
const SPAN: usize = 256;

/// Quantized value rows converted to f32 at once.
const V_ROWS: usize = 16;

/// A query that sees fewer slots is attended in one range (llama.cpp splits at 512 cells).
pub(super) const SPLIT_MIN_SLOTS: usize = 512;

/// A split range has at least this many slots.
const MIN_RANGE: usize = 128;

/// One query (batch entry `token`) and one KV head of sequence `seq` (an index in
/// `Plan::seqs`); its range tasks wrote partial results `parts` (indices into `Plan::parts`).
pub(super) struct Job {
    pub seq: usize,
    pub token: usize,
    pub kvh: usize,
    pub parts: Range<usize>,
}

/// One range of cache slots of job `job` (an index in `Plan::jobs`); it alone writes region
/// `part` of `Plan::parts` (see [`part_len`]): its partial result then its scratch.
pub(super) struct RangeTask {
    job: usize,
    slots: Range<usize>,
    part: usize,
}

impl RangeTask {
    /// Number of cache slots the task spans (its cost, roughly).
    pub(super) fn slots(&self) -> usize {
        self.slots.len()
    }
}

/// Length of a range task's region of `Plan::parts`: the partial result (`[max; group]`,
/// `[sum; group]`, `[out; group * head_dim]`, what [`merge`] reads), then the task's scratch (its
/// queries, `[group, head_dim]`, the scores of a span, `[group, SPAN]`, and
/// for quantized values `v_blocks`, `[V_ROWS, head_dim]` converted values). Scratch kept with
/// the task rather than per thread makes the memory a step uses independent of which thread
/// runs what, so a warm decode step allocates nothing.
pub(super) fn part_len(group: usize, head_dim: usize, v_blocks: bool) -> usize {
    let values = if v_blocks { V_ROWS * head_dim } else { 0 };
    result_len(group, head_dim) + group * (head_dim + SPAN) + values
}

/// Length of a partial result.
fn result_len(group: usize, head_dim: usize) -> usize {
    group * (2 + head_dim)
}

/// Adds the range tasks of every job: the slots from its first to its last visible one, split
/// (from [`SPLIT_MIN_SLOTS`] slots on) so that the KV heads of one query make about two tasks
/// per thread, in ranges of at least [`MIN_RANGE`] slots. A job that sees no slot gets none.
///
/// The split depends on the span, the model and the thread count only, never on the other
/// queries of the batch: ranges are merged in f32 while one range accumulates in f16, so a
/// split chosen by the batch would make a query's result depend on what it was batched with.
pub(super) fn push_ranges(plan: &mut Plan, ctx: &Ctx<'_>, threads: usize) {
    let per_job = (2 * threads.max(1)).div_ceil(ctx.shape.n_head_kv.max(1));
    let mut part = 0;
    for (ji, job) in plan.jobs.iter_mut().enumerate() {
        job.parts = part..part;
        let qpos = ctx.entries[job.token].pos;
        let Some(cache) = ctx.kv.seq(plan.seqs[job.seq].id) else { continue };
        let pos = cache.positions();
        let Some(first) = pos.iter().position(|&p| ctx.visible(qpos, p)) else { continue };
        let last = pos.iter().rposition(|&p| ctx.visible(qpos, p)).unwrap_or(first);
        let span = last + 1 - first;
        let n = if span < SPLIT_MIN_SLOTS { 1 } else { per_job.min(span.div_ceil(MIN_RANGE)).max(1) };
        let len = span.div_ceil(n);
        for a in (first..=last).step_by(len) {
            plan.tasks.push(Task::Range(RangeTask { job: ji, slots: a..(a + len).min(last + 1), part }));
            part += 1;
        }
        job.parts.end = part;
    }
}

/// For a quantized key cache, quantizes every job's queries to Q8_0 (llama.cpp converts the
/// query to the key type's vec-dot type once), into `Plan::q8`; its range tasks share them.
pub(super) fn quantize_queries(plan: &mut Plan, ctx: &Ctx<'_>) {
    plan.q8_len = 0;
    if ctx.kv.types().0.blocks().is_none() {
        return;
    }
    let len = ctx.group * KvBlocks::Q8_0.row_bytes(ctx.shape.head_dim);
    plan.q8_len = len;
    plan.q8.resize(plan.jobs.len() * len, 0);
    if len == 0 {
        return;
    }
    for (job, out) in plan.jobs.iter().zip(plan.q8.chunks_exact_mut(len)) {
        // The group's query heads are consecutive rows of whole blocks: one row of blocks.
        KvBlocks::Q8_0.quantize_row(ctx.q_group(job.token, job.kvh), out);
    }
}

/// Maximal runs of slots in `start..end` that a query at `qpos` sees, relative to `start`.
fn visible_runs<'a>(
    ctx: &'a Ctx<'_>,
    pos: &'a [u32],
    qpos: u32,
    start: usize,
    end: usize,
) -> impl Iterator<Item = Range<usize>> + 'a {
    let mut j = start;
    std::iter::from_fn(move || {
        while j < end && !ctx.visible(qpos, pos[j]) {
            j += 1;
        }
        let a = j;
        while j < end && ctx.visible(qpos, pos[j]) {
            j += 1;
        }
        (j > a).then(|| a - start..j - start)
    })
}

/// Attends one range: fills the task's partial result.
pub(super) fn run(task: &RangeTask, plan: &Plan, ctx: &Ctx<'_>, parts: SharedOut) {
    let (g, hd, kv_dim) = (ctx.group, ctx.shape.head_dim, ctx.kv_dim);
    let k = &ctx.kernels;
    let job = &plan.jobs[task.job];
    // SAFETY: this task is the only one writing region `task.part`.
    let region = unsafe { parts.region(task.part * plan.part_len, plan.part_len) };
    let Some((cache, keys, values)) = ctx.seq(plan.seqs[job.seq].id) else { return };
    let (result, scratch) = region.split_at_mut(result_len(g, hd));
    let (q, scratch) = scratch.split_at_mut(g * hd);
    let (s, vbuf) = scratch.split_at_mut(g * SPAN);
    let qpos = ctx.entries[job.token].pos;
    if let Cached::Float(_) = keys {
        q.copy_from_slice(ctx.q_group(job.token, job.kvh));
        if ctx.round_q {
            k.round_f16(q);
        }
    }
    let q = Rows { data: Elems::F32(q), rows: g, cols: hd, stride: hd };
    let q8 = &plan.q8[task.job * plan.q8_len..(task.job + 1) * plan.q8_len];
    let (m, rest) = result.split_at_mut(g);
    let (l, o) = rest.split_at_mut(g);
    m.fill(f32::NEG_INFINITY);
    l.fill(0.0);
    o.fill(0.0);
    let pos = cache.positions();
    let off = job.kvh * hd;
    for start in task.slots.clone().step_by(SPAN) {
        let end = (start + SPAN).min(task.slots.end);
        let runs = || visible_runs(ctx, pos, qpos, start, end);
        if runs().next().is_none() {
            continue;
        }
        let n = end - start;
        for h in 0..g {
            s[h * SPAN..h * SPAN + n].fill(f32::NEG_INFINITY);
        }
        for r in runs() {
            let scores = RowsMut { data: &mut s[r.start..], rows: g, cols: r.len(), stride: SPAN };
            let first = start + r.start;
            match keys {
                Cached::Float(x) => {
                    let keys = rows_at(x, first * kv_dim + off, r.len(), hd, kv_dim);
                    k.dots(q, keys, scores, ctx.shape.scale);
                }
                Cached::Blocks(ty, x) => {
                    let keys = block_rows(ty, x, first, off, r.len(), ctx);
                    ctx.kv_kernels.dots(q8, keys, scores, ctx.shape.scale);
                }
            }
            if let Some(c) = ctx.shape.softcap {
                for h in 0..g {
                    k.softcap(&mut s[h * SPAN + r.start..h * SPAN + r.end], c);
                }
            }
        }
        for h in 0..g {
            let row = &mut s[h * SPAN..h * SPAN + n];
            let m_new = m[h].max(k.max(row));
            let alpha = (m[h] - m_new).exp();
            l[h] = l[h] * alpha + k.exp_sum(row, m_new);
            if alpha != 1.0 {
                o[h * hd..(h + 1) * hd].iter_mut().for_each(|x| *x *= alpha);
            }
            m[h] = m_new;
        }
        for r in runs() {
            // Probabilities of keys `a..b` of the span (relative to `start`).
            let p = |a: usize, b: usize| Strided {
                data: &s[a..],
                rows: g,
                cols: b - a,
                row_stride: SPAN,
                col_stride: 1,
            };
            match values {
                Cached::Float(x) => {
                    let values = rows_at(x, (start + r.start) * kv_dim + off, r.len(), hd, kv_dim);
                    let o = RowsMut { data: &mut *o, rows: g, cols: hd, stride: hd };
                    k.gemm_stream(p(r.start, r.end), values, o, Beta::One);
                }
                Cached::Blocks(ty, x) => {
                    for a in r.clone().step_by(V_ROWS) {
                        let b = (a + V_ROWS).min(r.end);
                        let vf = &mut vbuf[..(b - a) * hd];
                        ctx.kv_kernels.rows_to_f32(block_rows(ty, x, start + a, off, b - a, ctx), vf, hd);
                        let values = Rows { data: Elems::F32(vf), rows: b - a, cols: hd, stride: hd };
                        let o = RowsMut { data: &mut *o, rows: g, cols: hd, stride: hd };
                        k.gemm_stream(p(a, b), values, o, Beta::One);
                    }
                }
            }
        }
    }
}

/// Combines a job's partial results (the regions `parts`, `part_len` floats each) into `out`
/// (`[group, head_dim]`), with the group's attention sinks if any (`[group]`): zeros when no
/// range saw a slot.
pub(super) fn merge(
    parts: &[f32],
    part_len: usize,
    g: usize,
    hd: usize,
    sinks: Option<&[f32]>,
    out: &mut [f32],
) {
    for h in 0..g {
        let o = &mut out[h * hd..(h + 1) * hd];
        o.fill(0.0);
        let mx = parts.chunks_exact(part_len).map(|p| p[h]).fold(f32::NEG_INFINITY, f32::max);
        if mx == f32::NEG_INFINITY {
            continue;
        }
        let mut sum = 0.0f32;
        for p in parts.chunks_exact(part_len) {
            let w = (p[h] - mx).exp();
            sum += p[g + h] * w;
            for (d, &x) in o.iter_mut().zip(&p[2 * g + h * hd..2 * g + (h + 1) * hd]) {
                *d += w * x;
            }
        }
        let inv = norm_factor(sum, mx, sinks.map(|s| s[h]));
        o.iter_mut().for_each(|x| *x *= inv);
    }
}
