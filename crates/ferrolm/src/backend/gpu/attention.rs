//! Attention over the KV cache (kernels in `kernels/attention.cl`), with the semantics and,
//! closely, the numerics of [`crate::backend::cpu::attention`].
//!
//! The batch's sequences are planned one by one: for each of its queries the host finds the
//! first and last visible slot of its sequence's cache and cuts that span into ranges. The
//! sequences of each numeric path (below) then run as one launch pair over their cached keys,
//! values and positions side by side (a lone sequence's viewed in place: nothing is copied on
//! unified memory; see `Launch`); `attn_partial` attends every (query head, query, range) in one work-group, walking
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

use std::borrow::Cow;

use half::f16;

use super::ops::dim;
use super::{Arg, Device, DeviceView};
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

/// Scratch slots of the keys and values of a launch of several sequences.
const KEYS_SLOT: usize = 3;
const VALUES_SLOT: usize = 4;

/// Per-query fields of the `info` buffer: batch row, position, first visible slot, one past the
/// last, range length.
const INFO: usize = 5;

/// Causal attention of every entry over its sequence's cache in `layer` (see
/// [`crate::backend::cpu::attention`]). `q`, `out`: `[entries.len(), n_head * head_dim]`.
#[allow(clippy::too_many_arguments)]
pub(super) fn attention<D: Device>(
    dev: &mut D,
    shape: AttentionShape,
    entries: &[BatchEntry],
    prompt_chunks: &[(SeqId, u32)],
    kv: &KvCache,
    layer: usize,
    q: &[f32],
    out: &mut [f32],
) -> BackendResult {
    check_kv::<D>(kv)?;
    check_shape::<D>(&shape, entries.len(), kv, q, out)?;
    let (hd, out_len) = (shape.head_dim, out.len());
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
    // One launch pair per path: the sequences of a path side by side (see `Launch`).
    let launches: Vec<Launch<'_>> = [true, false]
        .into_iter()
        .filter_map(|pq| {
            Launch::merge::<D>(kv, layer, plans.iter().filter(|p| p.per_query == pq).collect()).transpose()
        })
        .collect::<BackendResult<_>>()?;
    let part_floats =
        launches.iter().map(|l| l.n_ranges * l.n_q).max().unwrap_or(0) * shape.n_head * (2 + hd);
    let part = dev.scratch(PART_SLOT, part_floats * 4)?;

    let qv = dev.view(q)?;
    let ov = dev.view_out(out)?;
    let sinks = shape.sinks.map(|s| dev.view(s)).transpose()?;
    if launches.iter().map(|l| l.n_q).sum::<usize>() < entries.len() {
        // Rows of sequences without a cache get zeros (no launch writes them).
        dev.run("op_zero", &[Arg::Mem(ov.mem())], &[out_len], None)?;
    }
    let mut views = Vec::new();
    for l in &launches {
        let (kview, k_f16) = l.keys.place(&mut *dev, KEYS_SLOT)?;
        let (vview, v_f16) = l.values.place(&mut *dev, VALUES_SLOT)?;
        let (iview, pview) = (dev.view(&l.info)?, dev.view(&l.positions)?);
        let args = [
            Arg::Mem(qv.mem()),
            Arg::Mem(iview.mem()),
            Arg::Mem(pview.mem()),
            Arg::Mem(kview.mem()),
            Arg::Mem(vview.mem()),
            Arg::Mem(part),
            Arg::U32(dim::<D>(hd)?),
            Arg::U32(dim::<D>(shape.n_head)?),
            Arg::U32(dim::<D>(group)?),
            Arg::U32(dim::<D>(shape.n_head_kv * hd)?),
            Arg::F32(shape.scale),
            Arg::F32(shape.softcap.unwrap_or(0.0)),
            Arg::I32(window.is_some().into()),
            Arg::U32(window.unwrap_or(0)),
            Arg::I32(k_f16.into()),
            Arg::I32(v_f16.into()),
            Arg::I32((l.per_query && k_f16).into()),
        ];
        dev.run("attn_partial", &args, &[GROUP * shape.n_head, l.n_q, l.n_ranges], Some(&[GROUP, 1, 1]))?;
        let args = [
            Arg::Mem(part),
            Arg::Mem(iview.mem()),
            Arg::Mem(ov.mem()),
            // Without sinks the kernel reads nothing there: any buffer will do.
            Arg::Mem(sinks.as_ref().map_or(part, |v| v.mem())),
            Arg::U32(dim::<D>(hd)?),
            Arg::U32(dim::<D>(shape.n_head)?),
            Arg::U32(dim::<D>(l.n_ranges)?),
            Arg::I32(sinks.is_some().into()),
        ];
        dev.run("attn_merge", &args, &[hd, shape.n_head, l.n_q], None)?;
        // Kept until the queue has run: the kernels read the views' memory.
        views.push((kview, vview, iview, pview));
    }
    dev.sync(&ov)?;
    drop(views);
    Ok(())
}

/// One layer's cached rows of one or more sequences, as stored (f16 or f32): each sequence's
/// rows where the cache keeps them.
enum Cached<'a> {
    F16(Vec<&'a [f16]>),
    F32(Vec<&'a [f32]>),
}

/// Where a launch's keys or values are on the device: a view of one sequence's rows, or the
/// rows of several copied side by side into a scratch buffer.
enum Placed<'a, D: Device> {
    View(D::View<'a>),
    Scratch(D::Mem),
}

impl<D: Device> Placed<'_, D> {
    fn mem(&self) -> D::Mem {
        match self {
            Placed::View(v) => v.mem(),
            Placed::Scratch(m) => *m,
        }
    }
}

impl<'a> Cached<'a> {
    /// The rows on the device (in scratch slot `slot` when there are several sequences) and
    /// whether they are f16 (else f32).
    fn place<D: Device>(&self, dev: &mut D, slot: usize) -> BackendResult<(Placed<'a, D>, bool)> {
        fn parts<'a, T: Copy, D: Device>(
            dev: &mut D,
            slot: usize,
            parts: &[&'a [T]],
        ) -> BackendResult<Placed<'a, D>> {
            if let [one] = parts {
                return Ok(Placed::View(dev.view(one)?));
            }
            let total: usize = parts.iter().map(|p| std::mem::size_of_val(*p)).sum();
            let mem = dev.scratch(slot, total)?; // [n_slots, kv_dim] of every sequence in turn
            let mut offset = 0;
            for p in parts {
                dev.write(mem, offset, super::bytes_of(p))?;
                offset += std::mem::size_of_val(*p);
            }
            Ok(Placed::Scratch(mem))
        }
        Ok(match self {
            Cached::F16(p) => (parts(dev, slot, p)?, true),
            Cached::F32(p) => (parts(dev, slot, p)?, false),
        })
    }

    /// Appends `rows` (of the same storage type).
    fn extend<D: Device>(&mut self, rows: RowsView<'a>) -> BackendResult {
        match (self, rows.as_f16(), rows.as_f32()) {
            (Cached::F16(x), Some(r), _) => x.push(r),
            (Cached::F32(x), _, Some(r)) => x.push(r),
            _ => return Err(unsupported::<D>("a KV cache mixing storage types".into())),
        }
        Ok(())
    }
}

/// The sequences of one path (per-query or f32) attended by one `attn_partial` and one
/// `attn_merge` launch: their cached rows and positions side by side, each sequence's `info`
/// slots offset by the slots before it. A lone sequence's rows are viewed where they are (on
/// unified memory, nothing is copied); the rows of several are copied from the cache into one
/// device buffer (no host-side copy first), so a batch of many sequences (a server's decode
/// step) costs two launches per layer rather than as many as it has sequences.
struct Launch<'a> {
    n_q: usize,
    n_ranges: usize,
    per_query: bool,
    /// `[n_q, INFO]`
    info: Vec<u32>,
    /// `[n_slots]`
    positions: Cow<'a, [u32]>,
    /// `[n_slots, kv_dim]`
    keys: Cached<'a>,
    /// `[n_slots, kv_dim]`
    values: Cached<'a>,
}

impl<'a> Launch<'a> {
    /// The launch of `plans` (all of one path), `None` when there are none.
    fn merge<D: Device>(kv: &'a KvCache, layer: usize, plans: Vec<&SeqPlan>) -> BackendResult<Option<Self>> {
        let mut launch: Option<Launch<'a>> = None;
        for p in plans {
            let Some(cache) = kv.seq(p.id) else { continue };
            let Some(l) = launch.as_mut() else {
                launch = Some(Launch {
                    n_q: p.n_q,
                    n_ranges: p.n_ranges,
                    per_query: p.per_query,
                    info: p.info.clone(),
                    positions: Cow::Borrowed(cache.positions()),
                    keys: cached::<D>(cache.keys(layer))?,
                    values: cached::<D>(cache.values(layer))?,
                });
                continue;
            };
            let offset = l.positions.len() as u32;
            l.info.extend(
                p.info.chunks_exact(INFO).flat_map(|i| [i[0], i[1], i[2] + offset, i[3] + offset, i[4]]),
            );
            l.positions.to_mut().extend_from_slice(cache.positions());
            l.keys.extend::<D>(cache.keys(layer))?;
            l.values.extend::<D>(cache.values(layer))?;
            l.n_q += p.n_q;
            l.n_ranges = l.n_ranges.max(p.n_ranges);
        }
        Ok(launch)
    }
}

/// A layer's cached rows as stored, borrowed.
fn cached<D: Device>(rows: RowsView<'_>) -> BackendResult<Cached<'_>> {
    if let Some(x) = rows.as_f16() {
        return Ok(Cached::F16(vec![x]));
    }
    if let Some(x) = rows.as_f32() {
        return Ok(Cached::F32(vec![x]));
    }
    Err(unsupported::<D>("a quantized KV cache".into()))
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

/// Checks the head geometry and the buffer shapes (the kernels index by them).
fn check_shape<D: Device>(
    shape: &AttentionShape,
    n_tok: usize,
    kv: &KvCache,
    q: &[f32],
    out: &[f32],
) -> BackendResult {
    let (nh, nkv, hd) = (shape.n_head, shape.n_head_kv, shape.head_dim);
    if nh == 0 || nkv == 0 || nh % nkv != 0 || hd == 0 || hd > MAX_HEAD_DIM {
        return Err(unsupported::<D>(format!(
            "attention with {nh} query heads, {nkv} KV heads of {hd} (up to {MAX_HEAD_DIM})"
        )));
    }
    if kv.kv_dim() != nkv * hd {
        return Err(unsupported::<D>(format!(
            "a KV cache of rows of {} for {nkv} heads of {hd}",
            kv.kv_dim()
        )));
    }
    let want = n_tok * nh * hd;
    if q.len() != want || out.len() != want {
        return Err(unsupported::<D>(format!(
            "attention queries of {} and outputs of {} values for {n_tok} tokens of {nh} heads of {hd}",
            q.len(),
            out.len()
        )));
    }
    Ok(())
}

/// Checks that the kernels can read a cache: f32 or f16 keys and values.
pub(super) fn check_kv<D: Device>(kv: &KvCache) -> BackendResult {
    let (k, v) = kv.types();
    for t in [k, v] {
        if !matches!(t, KvType::F16 | KvType::F32) {
            return Err(unsupported::<D>(format!("a {t} KV cache (use f16 or f32)")));
        }
    }
    Ok(())
}

fn unsupported<D: Device>(what: String) -> BackendError {
    BackendError::Unsupported { backend: D::NAME, what }
}
