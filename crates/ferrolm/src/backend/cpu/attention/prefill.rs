//! The tiled path: a tile of queries (consecutive tokens of one sequence × the query heads of
//! one KV head, `rows` in all) against the sequence's cache in blocks of slots, in f32 (the
//! arithmetic of llama.cpp's tiled CPU flash attention: queries not rounded (rounded through
//! Q8_0 over a quantized key cache, as llama.cpp's per-query path scores them), keys and values
//! converted to f32 per block — f16 keys and quantized keys and values into the thread's
//! scratch, f16 values as the GEMM loads them — f32 accumulation).
//!
//! Per block: `Sᵀ = K·Qᵀ` (`[block, rows]`, one query per column, so the softmax runs down the
//! columns in whole vectors), the mask from logical positions where the block straddles the
//! diagonal or the window edge, the online softmax update, then `O = α∘O + P·V`. Blocks outside
//! every query's mask are skipped.

use ferrolm_kernels::quant::kv::KvBlocks;
use ferrolm_kernels::simd_attn::{Beta, Elems, Rows, RowsMut, Strided};

use std::ops::Range;

use super::{Cached, Ctx, Plan, Scratch, SharedOut, Task, block_rows, grow, norm_factor};

/// Slots per key block for a head dimension (a block's f32 keys stay within 32 KiB).
pub(super) fn block_len(head_dim: usize) -> usize {
    if head_dim <= 128 { 64 } else { 32 }
}

/// Query rows per tile (tokens × group), before padding to a multiple of 16.
const TILE_ROWS: usize = 64;

/// A query tile: `tokens` (a range of `Plan::tokens`) of sequence `seq` (an index in
/// `Plan::seqs`) for KV head `kvh`. It alone writes those tokens' outputs for that KV head.
pub(super) struct Tile {
    seq: usize,
    kvh: usize,
    tokens: Range<usize>,
}

/// Smallest and largest of a non-empty slice of positions.
pub(super) fn min_max(p: &[u32]) -> (u32, u32) {
    p.iter().fold((u32::MAX, 0), |(lo, hi), &x| (lo.min(x), hi.max(x)))
}

/// `rows` rows of `cols` elements starting at element `start` of `data`, `stride` apart.
pub(super) fn rows_at(data: Elems<'_>, start: usize, rows: usize, cols: usize, stride: usize) -> Rows<'_> {
    let data = match data {
        Elems::F32(x) => Elems::F32(&x[start.min(x.len())..]),
        Elems::F16(x) => Elems::F16(&x[start.min(x.len())..]),
    };
    Rows { data, rows, cols, stride }
}

/// Adds the tiles of sequence `si` (every KV head), the last tokens first (they see the most
/// keys).
pub(super) fn push_tiles(plan: &mut Plan, si: usize, ctx: &Ctx<'_>) {
    let per_tile = (TILE_ROWS / ctx.group).max(1);
    let tokens = plan.seqs[si].tokens.clone();
    let n_tiles = tokens.len().div_ceil(per_tile);
    for i in (0..n_tiles).rev() {
        let t0 = tokens.start + i * per_tile;
        let range = t0..(t0 + per_tile).min(tokens.end);
        for kvh in 0..ctx.shape.n_head_kv {
            plan.tasks.push(Task::Tile(Tile { seq: si, kvh, tokens: range.clone() }));
        }
    }
}

/// Attends one tile: writes its output rows.
pub(super) fn run(t: &Tile, plan: &Plan, ctx: &Ctx<'_>, out: SharedOut, sc: &mut Scratch) {
    let (g, hd, kv_dim) = (ctx.group, ctx.shape.head_dim, ctx.kv_dim);
    let k = &ctx.kernels;
    let seq = &plan.seqs[t.seq];
    let Some((cache, keys, values)) = ctx.seq(seq.id) else { return };
    let tokens = &plan.tokens[t.tokens.clone()];
    let real = tokens.len() * g;
    let r = real.next_multiple_of(16);

    // Query rows `i * g + h` (token i, head h), scaled and transposed; zero padding rows. Over a
    // quantized key cache, each query is first rounded through Q8_0 (llama.cpp's per-query
    // scoring, see the module docs).
    let qt = grow(&mut sc.qt, hd * r);
    let scale = ctx.shape.scale;
    let mut q8 = matches!(keys, Cached::Blocks(..)).then(|| {
        let (bytes, back) = &mut sc.q8;
        (grow(bytes, KvBlocks::Q8_0.row_bytes(hd)), grow(back, hd))
    });
    for (i, &tok) in tokens.iter().enumerate() {
        for (h, qr) in ctx.q_group(tok, t.kvh).chunks_exact(hd).enumerate() {
            let row = i * g + h;
            let qr = match &mut q8 {
                Some((bytes, back)) => {
                    KvBlocks::Q8_0.quantize_row(qr, bytes);
                    KvBlocks::Q8_0.dequantize_row(bytes, back);
                    &**back
                }
                None => qr,
            };
            for (d, &x) in qr.iter().enumerate() {
                qt[d * r + row] = x * scale;
            }
        }
    }
    for d in 0..hd {
        qt[d * r + real..(d + 1) * r].fill(0.0);
    }
    let qt = Rows { data: Elems::F32(qt), rows: hd, cols: r, stride: r };
    let qpos = grow(&mut sc.qpos, tokens.len());
    for (p, &tok) in qpos.iter_mut().zip(tokens) {
        *p = ctx.entries[tok].pos;
    }
    let (qmin, qmax) = min_max(qpos);

    let o = grow(&mut sc.o, r * hd);
    o.fill(0.0);
    let max = grow(&mut sc.max, r);
    max.fill(f32::NEG_INFINITY);
    let sum = grow(&mut sc.sum, r);
    sum.fill(0.0);
    let alpha = grow(&mut sc.alpha, r);

    let kb = block_len(hd);
    let pos = cache.positions();
    let window = ctx.shape.window.map(|w| w as u64);
    let off = t.kvh * hd;
    for (b, &(pmin, pmax)) in plan.blocks[seq.blocks.clone()].iter().enumerate() {
        if pmin > qmax || window.is_some_and(|w| pmax as u64 + w <= qmin as u64) {
            continue; // no query of the tile sees any key of the block
        }
        let full = pmax <= qmin && window.is_none_or(|w| ((qmax - pmin) as u64) < w);
        let j0 = b * kb;
        let n = kb.min(pos.len() - j0);
        let start = j0 * kv_dim + off;
        let keys = match keys {
            Cached::Float(Elems::F32(x)) => {
                Strided { data: &x[start..], rows: n, cols: hd, row_stride: kv_dim, col_stride: 1 }
            }
            Cached::Float(x @ Elems::F16(_)) => {
                let kf = grow(&mut sc.k, n * hd);
                k.f16_rows_to_f32(rows_at(x, start, n, hd, kv_dim), kf, hd);
                Strided { data: kf, rows: n, cols: hd, row_stride: hd, col_stride: 1 }
            }
            Cached::Blocks(ty, x) => {
                let kf = grow(&mut sc.k, n * hd);
                ctx.kv_kernels.rows_to_f32(block_rows(ty, x, j0, off, n, ctx), kf, hd);
                Strided { data: kf, rows: n, cols: hd, row_stride: hd, col_stride: 1 }
            }
        };
        let s = grow(&mut sc.s, n * r);
        k.gemm(keys, qt, RowsMut { data: s, rows: n, cols: r, stride: r }, Beta::Zero);
        if let Some(c) = ctx.shape.softcap {
            k.softcap(s, c);
        }
        if !full {
            for (j, &p) in pos[j0..j0 + n].iter().enumerate() {
                for (i, &qp) in qpos.iter().enumerate() {
                    if !ctx.visible(qp, p) {
                        s[j * r + i * g..j * r + (i + 1) * g].fill(f32::NEG_INFINITY);
                    }
                }
            }
        }
        k.softmax_lanes(s, r, max, sum, alpha);
        // Probabilities (row, key) at `key * r + row`.
        let p = Strided { data: s, rows: r, cols: n, row_stride: 1, col_stride: r };
        let values = match values {
            Cached::Float(x) => rows_at(x, start, n, hd, kv_dim),
            Cached::Blocks(ty, x) => {
                let vf = grow(&mut sc.v, n * hd);
                ctx.kv_kernels.rows_to_f32(block_rows(ty, x, j0, off, n, ctx), vf, hd);
                Rows { data: Elems::F32(vf), rows: n, cols: hd, stride: hd }
            }
        };
        k.gemm(p, values, RowsMut { data: o, rows: r, cols: hd, stride: hd }, Beta::Rows(alpha));
    }

    for (i, &tok) in tokens.iter().enumerate() {
        // SAFETY: this tile is the only task writing token `tok`'s outputs for KV head `kvh`.
        let dst = unsafe { out.region(ctx.out_offset(tok, t.kvh), g * hd) };
        let sinks = ctx.group_sinks(t.kvh);
        for (h, dst) in dst.chunks_exact_mut(hd).enumerate() {
            let row = i * g + h;
            let inv = norm_factor(sum[row], max[row], sinks.map(|s| s[h]));
            for (d, &x) in dst.iter_mut().zip(&o[row * hd..(row + 1) * hd]) {
                *d = x * inv;
            }
        }
    }
}
