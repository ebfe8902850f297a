//! Attention over the KV cache (kernels in `kernels/attention.cl`), with the semantics and,
//! closely, the numerics of [`crate::backend::cpu::attention`].
//!
//! The batch is processed sequence by sequence, over views of that sequence's cached keys,
//! values and positions (the cache's own memory: nothing is copied on unified memory). For each
//! of its queries the host finds the first and last visible slot and cuts that span into
//! ranges; `attn_partial` attends every (query head, query, range) in one work-group, walking
//! the range's slots in tiles, and `attn_merge` combines each query's ranges into its output
//! row. Nothing proportional to the context is stored: the partial results are
//! `[n_ranges, n_q, n_head, 2 + head_dim]`.
//!
//! Numerics follow the CPU's two paths. A sequence whose prompt chunk (or, without one, whose
//! number of queries in the batch) is shorter than [`TILE_MIN_TOKENS`] takes the per-query
//! path: for an f16 key cache the query is rounded to f16; long spans are cut into ranges where
//! the CPU cuts them (see [`RangeSplit`]), each accumulated on its own and merged. Longer
//! prompts take the f32 path: the same kernel without rounding, one range per query. Values
//! are accumulated in f32 on both paths, as on the CPU.

use super::cl::{Arg, Cl};
use super::ops::dim;
use crate::backend::{AttentionShape, BackendError, BackendResult};
use crate::batch::BatchEntry;
use crate::kv::{KvCache, KvType, RowsView, SeqId};

/// Sequences with at least this many queries (or a prompt chunk this long) take the f32 path
/// (the CPU's `TILE_MIN_TOKENS`).
const TILE_MIN_TOKENS: usize = 64;

/// Work items of an `attn_partial` work-group (slots per tile).
const GROUP: usize = 64;

/// Largest head dimension `attn_partial` handles (its `ATTN_DPI` dimensions per item).
const MAX_HEAD_DIM: usize = 8 * GROUP;

/// Scratch slot of the partial results.
const PART_SLOT: usize = 2;

/// Per-query fields of the `info` buffer: batch row, position, first visible slot, one past the
/// last, range length.
const INFO: usize = 5;

/// Causal attention of every entry over its sequence's cache in `layer` (see
/// [`crate::backend::cpu::attention`]). `q`, `out`: `[entries.len(), n_head * head_dim]`.
#[allow(clippy::too_many_arguments)]
pub(super) fn attention(
    cl: &mut Cl,
    shape: AttentionShape,
    entries: &[BatchEntry],
    prompt_chunks: &[(SeqId, u32)],
    kv: &KvCache,
    layer: usize,
    q: &[f32],
    out: &mut [f32],
) -> BackendResult {
    check_kv(kv)?;
    check_shape(&shape, entries.len(), kv, q, out)?;
    out.fill(0.0);
    let hd = shape.head_dim;
    let group = shape.n_head / shape.n_head_kv;
    let window = shape.window.map(|w| u32::try_from(w).unwrap_or(u32::MAX));
    let decode_split = RangeSplit::new(shape.n_head_kv);

    // Every sequence's queries and their ranges, planned before anything is queued: the info
    // buffers must outlive the kernels, and the scratch is sized once for the largest.
    let mut plans = Vec::new();
    for (id, rows) in group_by_seq(entries) {
        let Some(cache) = kv.seq(id) else { continue };
        if cache.is_empty() || layer >= cache.n_layer() {
            continue;
        }
        let chunk = prompt_chunks.iter().find(|(s, _)| *s == id).map_or(rows.len(), |c| c.1 as usize);
        let per_query = chunk < TILE_MIN_TOKENS;
        let positions = cache.positions();
        let mut info = Vec::with_capacity(rows.len() * INFO);
        let mut n_ranges = 1;
        for &t in &rows {
            let qpos = entries[t].pos;
            let seen = |p: &u32| visible(window, qpos, *p);
            let (first, end, len) = match positions.iter().position(seen) {
                None => (0, 0, 1),
                Some(first) => {
                    let last = positions.iter().rposition(seen).unwrap_or(first);
                    let span = last + 1 - first;
                    let len = if per_query { span.div_ceil(decode_split.ranges(span)) } else { span };
                    n_ranges = n_ranges.max(span.div_ceil(len));
                    (first, last + 1, len)
                }
            };
            info.extend([t, qpos as usize, first, end, len].map(|x| x as u32));
        }
        plans.push(SeqPlan { id, n_q: rows.len(), n_ranges, per_query, info });
    }
    let part_floats = plans.iter().map(|p| p.n_ranges * p.n_q).max().unwrap_or(0) * shape.n_head * (2 + hd);
    let part = cl.scratch(PART_SLOT, part_floats * 4)?;

    let qv = cl.view(q)?;
    let ov = cl.view_mut(out)?;
    let mut views = Vec::new();
    for p in &plans {
        let Some(cache) = kv.seq(p.id) else { continue };
        let (kview, k_f16) = rows_view(cl, cache.keys(layer))?;
        let (vview, v_f16) = rows_view(cl, cache.values(layer))?;
        let (iview, pview) = (cl.view(&p.info)?, cl.view(cache.positions())?);
        let args = [
            Arg::Mem(qv.mem()),
            Arg::Mem(iview.mem()),
            Arg::Mem(pview.mem()),
            Arg::Mem(kview.mem()),
            Arg::Mem(vview.mem()),
            Arg::Mem(part),
            Arg::U32(dim(hd)?),
            Arg::U32(dim(shape.n_head)?),
            Arg::U32(dim(group)?),
            Arg::U32(dim(shape.n_head_kv * hd)?),
            Arg::F32(shape.scale),
            Arg::F32(shape.softcap.unwrap_or(0.0)),
            Arg::I32(window.is_some().into()),
            Arg::U32(window.unwrap_or(0)),
            Arg::I32(k_f16.into()),
            Arg::I32(v_f16.into()),
            Arg::I32((p.per_query && k_f16).into()),
            Arg::Local(hd * 4),
            Arg::Local(GROUP * 4),
            Arg::Local(GROUP * 4),
        ];
        cl.run("attn_partial", &args, &[GROUP * shape.n_head, p.n_q, p.n_ranges], Some(&[GROUP, 1, 1]))?;
        let args = [
            Arg::Mem(part),
            Arg::Mem(iview.mem()),
            Arg::Mem(ov.mem()),
            Arg::U32(dim(hd)?),
            Arg::U32(dim(shape.n_head)?),
            Arg::U32(dim(p.n_ranges)?),
        ];
        cl.run("attn_merge", &args, &[hd, shape.n_head, p.n_q], None)?;
        // Kept until the queue has run: the kernels read the views' host memory.
        views.extend([kview, vview, iview, pview]);
    }
    cl.sync(&ov)?;
    drop(views);
    Ok(())
}

/// One sequence of the batch with a cache: its queries' `info` rows (`[n_q, INFO]`).
struct SeqPlan {
    id: SeqId,
    n_q: usize,
    /// The most ranges any of its queries has.
    n_ranges: usize,
    /// Whether it takes the per-query path (f16 rounding) rather than the f32 one.
    per_query: bool,
    /// `[n_q, INFO]`
    info: Vec<u32>,
}

/// How the CPU's per-query path splits a query's span of visible slots into ranges, each
/// accumulated on its own and merged in f32 (`cpu::attention::decode::push_ranges`): from
/// [`RangeSplit::MIN_SLOTS`] slots on, into about two ranges per thread of the CPU's pool
/// across the KV heads, of at least [`RangeSplit::MIN_RANGE`] slots. Following it groups the
/// sums as the CPU does, and gives a long single-query decode several work-groups per head on
/// a GPU.
struct RangeSplit {
    per_job: usize,
}

impl RangeSplit {
    /// A span shorter than this is one range (`decode::SPLIT_MIN_SLOTS`).
    const MIN_SLOTS: usize = 512;
    /// A split range has at least this many slots (`decode::MIN_RANGE`).
    const MIN_RANGE: usize = 128;

    fn new(n_head_kv: usize) -> Self {
        let threads = crate::threads::current_num_threads();
        RangeSplit { per_job: (2 * threads.max(1)).div_ceil(n_head_kv.max(1)) }
    }

    /// Number of ranges a span of `span` visible-bounded slots is cut into (before rounding
    /// the range length up).
    fn ranges(&self, span: usize) -> usize {
        if span < Self::MIN_SLOTS { 1 } else { self.per_job.min(span.div_ceil(Self::MIN_RANGE)).max(1) }
    }
}

/// Whether a query at `qpos` sees a key at `kpos` (causal, inside the window if any).
fn visible(window: Option<u32>, qpos: u32, kpos: u32) -> bool {
    kpos <= qpos && window.is_none_or(|w| qpos - kpos < w)
}

/// The batch's sequences in order of first appearance, each with its batch rows in order.
fn group_by_seq(entries: &[BatchEntry]) -> Vec<(SeqId, Vec<usize>)> {
    let mut seqs: Vec<(SeqId, Vec<usize>)> = Vec::new();
    for (t, e) in entries.iter().enumerate() {
        match seqs.iter_mut().find(|(id, _)| *id == e.seq) {
            Some((_, rows)) => rows.push(t),
            None => seqs.push((e.seq, vec![t])),
        }
    }
    seqs
}

/// A device view of a layer's cached rows and whether they are f16 (else f32).
fn rows_view<'a>(cl: &Cl, rows: RowsView<'a>) -> BackendResult<(super::cl::View<'a>, bool)> {
    if let Some(x) = rows.as_f16() {
        return Ok((cl.view(x)?, true));
    }
    if let Some(x) = rows.as_f32() {
        return Ok((cl.view(x)?, false));
    }
    Err(unsupported("a quantized KV cache".into()))
}

/// Checks the head geometry and the buffer shapes (the kernels index by them).
fn check_shape(shape: &AttentionShape, n_tok: usize, kv: &KvCache, q: &[f32], out: &[f32]) -> BackendResult {
    let (nh, nkv, hd) = (shape.n_head, shape.n_head_kv, shape.head_dim);
    if nh == 0 || nkv == 0 || nh % nkv != 0 || hd == 0 || hd > MAX_HEAD_DIM {
        return Err(unsupported(format!(
            "attention with {nh} query heads, {nkv} KV heads of {hd} (up to {MAX_HEAD_DIM})"
        )));
    }
    if kv.kv_dim() != nkv * hd {
        return Err(unsupported(format!("a KV cache of rows of {} for {nkv} heads of {hd}", kv.kv_dim())));
    }
    let want = n_tok * nh * hd;
    if q.len() != want || out.len() != want {
        return Err(unsupported(format!(
            "attention queries of {} and outputs of {} values for {n_tok} tokens of {nh} heads of {hd}",
            q.len(),
            out.len()
        )));
    }
    Ok(())
}

/// Checks that the kernels can read a cache: f32 or f16 keys and values.
pub(super) fn check_kv(kv: &KvCache) -> BackendResult {
    let (k, v) = kv.types();
    for t in [k, v] {
        if !matches!(t, KvType::F16 | KvType::F32) {
            return Err(unsupported(format!("a {t} KV cache (use f16 or f32)")));
        }
    }
    Ok(())
}

fn unsupported(what: String) -> BackendError {
    BackendError::Unsupported { backend: "opencl", what }
}
