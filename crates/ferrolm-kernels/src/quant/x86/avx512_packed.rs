//! The AVX-512 kernel of [`crate::quant::packed`]: 16 weight rows per tile, one per i32 lane, against
//! up to [`TOKENS`] tokens at a time.
//!
//! Per block of a tile: the value group is loaded once (4-bit formats: four loads split into
//! low and high nibbles), then for every token of the tile eight `vpdpbusd` against the token's
//! 4-byte activation groups broadcast from memory, started from the token's integer offset
//! correction (`−8·Σx` for Q4_0, `−128·Σx` for Q8_0, stored weights being `w + 128`), then
//! `acc += f32(sum) · d_w · d_x` and, for Q4_1, `acc += m_w · s_x`. The tokens' chains are
//! interleaved so that eight dependent `vpdpbusd` never wait on each other's latency.

use std::arch::x86_64::*;

use std::ops::Range;

use crate::quant::packed::{ActBlock, Kind, PackedActs, PackedFn, TILE_ROWS};

/// Tokens processed together against each loaded value group.
const TOKENS: usize = 8;

/// The kernel for `kind`. Only called after `Isa::best()` chose AVX-512.
pub(in crate::quant) fn kernel(kind: Kind) -> PackedFn {
    match kind {
        Kind::Q4_0 => gemm::<{ Kind::Q4_0 as u8 }>,
        Kind::Q4_1 => gemm::<{ Kind::Q4_1 as u8 }>,
        Kind::Q8_0 => gemm::<{ Kind::Q8_0 as u8 }>,
    }
}

const fn kind_of(k: u8) -> Kind {
    if k == Kind::Q4_0 as u8 {
        Kind::Q4_0
    } else if k == Kind::Q4_1 as u8 {
        Kind::Q4_1
    } else {
        Kind::Q8_0
    }
}

/// Token `t` of `tokens`: `out + (t - tokens.start)·ldo + r = row r · token t` for every row of
/// the tiles in `w` (`nb` blocks each).
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL and VNNI; `w` holds whole tiles of `nb` blocks of the
/// format; `acts` was prepared for the format with `nb` blocks per row and holds `tokens`; the
/// output rows are writable (see [`crate::quant::packed::PackedRows::gemm_ptr`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
unsafe fn gemm<const K: u8>(
    w: &[u8],
    nb: usize,
    acts: &PackedActs<'_>,
    tokens: Range<usize>,
    out: *mut f32,
    ldo: usize,
) {
    let kind = kind_of(K);
    let tile_bytes = nb * (kind.q_bytes() + kind.s_bytes());
    let n_tiles = w.len() / tile_bytes;
    let (x_rb, ab) = (acts.x_rb, kind.act_bytes());
    let qs_off = ab - 32;
    let mut t0 = tokens.start;
    while t0 < tokens.end {
        let n = (tokens.end - t0).min(TOKENS);
        for tile in 0..n_tiles {
            let tp = &w[tile * tile_bytes..(tile + 1) * tile_bytes];
            // SAFETY: features and bounds guaranteed by the caller: the pointers cover the token
            // rows `t0..t0 + n` of the activations and the tile's outputs.
            unsafe {
                let x = acts.xq.as_ptr().add(t0 * x_rb + qs_off);
                let a = acts.blocks.as_ptr().add(t0 * nb);
                let dst = out.add((t0 - tokens.start) * ldo + tile * TILE_ROWS);
                let next = w.as_ptr().wrapping_add((tile + 1) * tile_bytes);
                match n {
                    8 => tile_dot::<K, 8>(tp, next, nb, x, x_rb, ab, a, dst, ldo),
                    7 => tile_dot::<K, 7>(tp, next, nb, x, x_rb, ab, a, dst, ldo),
                    6 => tile_dot::<K, 6>(tp, next, nb, x, x_rb, ab, a, dst, ldo),
                    5 => tile_dot::<K, 5>(tp, next, nb, x, x_rb, ab, a, dst, ldo),
                    4 => tile_dot::<K, 4>(tp, next, nb, x, x_rb, ab, a, dst, ldo),
                    3 => tile_dot::<K, 3>(tp, next, nb, x, x_rb, ab, a, dst, ldo),
                    2 => tile_dot::<K, 2>(tp, next, nb, x, x_rb, ab, a, dst, ldo),
                    _ => tile_dot::<K, 1>(tp, next, nb, x, x_rb, ab, a, dst, ldo),
                }
            }
        }
        t0 += n;
    }
}

/// Tiles beyond the next one that are requested into L2 (see [`tile_dot`]).
const L2_AHEAD_TILES: usize = 3;

/// One tile against `T` tokens: token `j`'s block `b` values at `x + j·x_rb + b·ab`, its
/// scalars at `a[j·nb + b]`, its 16 results to `dst + j·ldo`. `next` (the next tile, possibly
/// past the end: only prefetched) is prefetched a block's share at a time, so a decode stream
/// runs one tile ahead of the loads; the tile [`L2_AHEAD_TILES`] further is requested into L2
/// at the same pace. With the first prefetch alone, a batch of 8 tokens waited on memory in
/// those prefetches (all of the core's L1 miss buffers busy): the second keeps more of the
/// stream in flight and turns the first into L2 hits (tg128 ×8: 770 → 830 t/s).
///
/// # Safety
/// As [`gemm`], for the tile and tokens described.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_dot<const K: u8, const T: usize>(
    tp: &[u8],
    next: *const u8,
    nb: usize,
    x: *const u8,
    x_rb: usize,
    ab: usize,
    a: *const ActBlock,
    dst: *mut f32,
    ldo: usize,
) {
    let kind = kind_of(K);
    let (qb, sb) = (kind.q_bytes(), kind.s_bytes());
    let q0 = tp.as_ptr();
    let s0 = q0.wrapping_add(nb * qb);
    // SAFETY: the caller's contract: every load below is inside the tile or the token rows.
    unsafe {
        let mut acc = [_mm512_setzero_ps(); T];
        for b in 0..nb {
            for l in (0..qb + sb).step_by(64) {
                let ahead = next.wrapping_add(b * (qb + sb) + l);
                _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                _mm_prefetch::<_MM_HINT_T2>(ahead.wrapping_add(L2_AHEAD_TILES * nb * (qb + sb)).cast());
            }
            let qp = q0.add(b * qb);
            let q: [__m512i; 8] = match kind {
                Kind::Q8_0 => std::array::from_fn(|j| _mm512_loadu_si512(qp.add(64 * j).cast())),
                Kind::Q4_0 | Kind::Q4_1 => {
                    let m = _mm512_set1_epi8(0x0f);
                    let v: [__m512i; 4] = std::array::from_fn(|k| _mm512_loadu_si512(qp.add(64 * k).cast()));
                    std::array::from_fn(|j| {
                        if j < 4 {
                            _mm512_and_si512(v[j], m)
                        } else {
                            _mm512_and_si512(_mm512_srli_epi16::<4>(v[j - 4]), m)
                        }
                    })
                }
            };
            let sp = s0.add(b * sb);
            let dw = _mm512_cvtph_ps(_mm256_loadu_si256(sp.cast()));
            let mut s: [__m512i; T] = std::array::from_fn(|j| {
                if kind == Kind::Q4_1 {
                    _mm512_setzero_si512()
                } else {
                    _mm512_set1_epi32((*a.add(j * nb + b)).extra as i32)
                }
            });
            for (k, &qk) in q.iter().enumerate() {
                for (j, sj) in s.iter_mut().enumerate() {
                    let xv = x.add(j * x_rb + b * ab + 4 * k).cast::<i32>().read_unaligned();
                    *sj = _mm512_dpbusd_epi32(*sj, qk, _mm512_set1_epi32(xv));
                }
            }
            for (j, accj) in acc.iter_mut().enumerate() {
                let act = &*a.add(j * nb + b);
                let scale = _mm512_mul_ps(dw, _mm512_set1_ps(act.d));
                *accj = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[j]), scale, *accj);
            }
            if kind == Kind::Q4_1 {
                let mw = _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(32).cast()));
                for (j, accj) in acc.iter_mut().enumerate() {
                    let sx = f32::from_bits((*a.add(j * nb + b)).extra);
                    *accj = _mm512_fmadd_ps(mw, _mm512_set1_ps(sx), *accj);
                }
            }
        }
        for (j, accj) in acc.iter().enumerate() {
            _mm512_storeu_ps(dst.add(j * ldo), *accj);
        }
    }
}
