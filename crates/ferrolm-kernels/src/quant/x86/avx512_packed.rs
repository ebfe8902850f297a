//! The AVX-512 kernel of [`crate::quant::packed`]: 16 weight rows per tile, one per i32 lane, against
//! up to [`TOKENS`] tokens at a time.
//!
//! Per block of a tile: the value group is loaded once (4-bit formats: four loads split into
//! low and high nibbles; 5-bit formats: the same, with each value's fifth bit moved from `qh` to
//! bit 4 of its byte by one `vpmultishiftqb` per vector), then for every token of the tile eight
//! `vpdpbusd` against the token's 4-byte activation groups broadcast from memory, started from
//! the token's integer offset correction (`−8·Σx` for Q4_0, `−16·Σx` for Q5_0, `−128·Σx` for
//! Q8_0, stored weights being `w + 128`), then `acc += f32(sum) · d_w · d_x` and, for Q4_1 and
//! Q5_1, `acc += m_w · s_x`.
//!
//! Q4_K super-blocks: per 32-value sub-block and token eight `vpdpbusd` from zero, the sum
//! multiplied by the row's 6-bit scale in integers (`vpmulld`) and added up over the super-block
//! (at most 8·63·32·15·127 < 2³¹); the minimums' term `Σ m·Σx` is four `vpdpwssd` of the rows'
//! minimums against the token's sub-block sums, both as i16 pairs; then
//! `acc += f32(Σ sc·sum) · d_w · d_x − f32(Σ m·Σx) · dmin_w · d_x`, the order of GGML's Q4_K dot.
//! Q5_K takes the same path with one step more per value vector: the fifth bits of sub-block
//! `j` are bit `j` of the `qh` bytes, moved to bit 4 by one `vpmultishiftqb` (a fixed control
//! per sub-block) and merged by one `vpternlogd`, as for Q5_0.
//!
//! In both, the tokens' chains are interleaved so that dependent `vpdpbusd` never wait on each
//! other's latency.

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
        Kind::Q5_0 => gemm::<{ Kind::Q5_0 as u8 }>,
        Kind::Q5_1 => gemm::<{ Kind::Q5_1 as u8 }>,
        Kind::Q8_0 => gemm::<{ Kind::Q8_0 as u8 }>,
        Kind::Q4K => gemm::<{ Kind::Q4K as u8 }>,
        Kind::Q5K => gemm::<{ Kind::Q5K as u8 }>,
        Kind::Iq4Nl => gemm::<{ Kind::Iq4Nl as u8 }>,
        Kind::Iq4Xs => gemm::<{ Kind::Iq4Xs as u8 }>,
    }
}

const fn kind_of(k: u8) -> Kind {
    if k == Kind::Q4_0 as u8 {
        Kind::Q4_0
    } else if k == Kind::Q4_1 as u8 {
        Kind::Q4_1
    } else if k == Kind::Q5_0 as u8 {
        Kind::Q5_0
    } else if k == Kind::Q5_1 as u8 {
        Kind::Q5_1
    } else if k == Kind::Q4K as u8 {
        Kind::Q4K
    } else if k == Kind::Q5K as u8 {
        Kind::Q5K
    } else if k == Kind::Iq4Nl as u8 {
        Kind::Iq4Nl
    } else if k == Kind::Iq4Xs as u8 {
        Kind::Iq4Xs
    } else {
        Kind::Q8_0
    }
}

/// Tokens of one pass over a tile: the K-quants keep a second integer accumulator per token, so
/// fewer tokens fit the 32 vector registers.
const fn max_tokens(kind: Kind) -> usize {
    if kind.is_k() { 6 } else { TOKENS }
}

/// The `vpmultishiftqb` control that moves the fifth bits of value vector `j` into place: byte
/// `i` of a 32-bit lane holds value `4j + i`, whose high bit is bit `4j + i` of the lane's `qh`;
/// the byte takes the 8 bits starting 4 below it (rotating within the 64-bit word, which holds
/// two lanes), so that bit lands on bit 4.
const fn qh_control(j: usize) -> i64 {
    let mut c = 0u64;
    let mut p = 0;
    while p < 8 {
        let lane = p / 4;
        let bit = (32 * lane + 4 * j + p % 4 + 60) % 64;
        c |= (bit as u64) << (8 * p);
        p += 1;
    }
    c as i64
}

/// Token `t` of `tokens`: `out + (t - tokens.start)·ldo + r = row r · token t` for every row of
/// the tiles in `w` (`nb` blocks each).
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL and VNNI; `w` holds whole tiles of `nb` blocks of the
/// format; `acts` was prepared for the format with `nb` blocks per row and holds `tokens`; the
/// output rows are writable (see [`crate::quant::packed::PackedRows::gemm_ptr`]).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx512vbmi,f16c,fma")]
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
    let qs_off = if kind.is_k() { 4 } else { ab - 32 };
    let mut t0 = tokens.start;
    while t0 < tokens.end {
        let n = (tokens.end - t0).min(max_tokens(kind));
        for tile in 0..n_tiles {
            let tp = &w[tile * tile_bytes..(tile + 1) * tile_bytes];
            // SAFETY: features and bounds guaranteed by the caller: the pointers cover the token
            // rows `t0..t0 + n` of the activations and the tile's outputs.
            unsafe {
                let x = acts.xq.as_ptr().add(t0 * x_rb + qs_off);
                let a = acts.blocks.as_ptr().add(t0 * nb);
                let dst = out.add((t0 - tokens.start) * ldo + tile * TILE_ROWS);
                let next = w.as_ptr().wrapping_add((tile + 1) * tile_bytes);
                if kind.is_k() {
                    let sums = acts.sums.as_ptr().add(t0 * nb * kind.act_sums());
                    let c = KCall { tp, next, nb, x, x_rb, a, sums, dst, ldo };
                    if kind == Kind::Iq4Xs {
                        match n {
                            6 => tile_dot_iq4xs::<6>(&c),
                            5 => tile_dot_iq4xs::<5>(&c),
                            4 => tile_dot_iq4xs::<4>(&c),
                            3 => tile_dot_iq4xs::<3>(&c),
                            2 => tile_dot_iq4xs::<2>(&c),
                            _ => tile_dot_iq4xs::<1>(&c),
                        }
                        continue;
                    }
                    match n {
                        6 => tile_dot_k::<K, 6>(&c),
                        5 => tile_dot_k::<K, 5>(&c),
                        4 => tile_dot_k::<K, 4>(&c),
                        3 => tile_dot_k::<K, 3>(&c),
                        2 => tile_dot_k::<K, 2>(&c),
                        _ => tile_dot_k::<K, 1>(&c),
                    }
                    continue;
                }
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

/// Prefetches block `b` (of `block` bytes in tiles of `nb` blocks) of the tile at `next` into L1,
/// and the same block [`L2_AHEAD_TILES`] tiles further into L2 (see [`tile_dot`]).
#[inline(always)]
fn prefetch_block(next: *const u8, nb: usize, b: usize, block: usize) {
    for l in (0..block).step_by(64) {
        let ahead = next.wrapping_add(b * block + l);
        // SAFETY: prefetches never fault, whatever the address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
            _mm_prefetch::<_MM_HINT_T2>(ahead.wrapping_add(L2_AHEAD_TILES * nb * block).cast());
        }
    }
}

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
            prefetch_block(next, nb, b, qb + sb);
            let qp = q0.add(b * qb);
            let q: [__m512i; 8] = match kind {
                Kind::Q8_0 => std::array::from_fn(|j| _mm512_loadu_si512(qp.add(64 * j).cast())),
                Kind::Q4K | Kind::Q5K | Kind::Iq4Xs => unreachable!("K-quant tiles go through tile_dot_k"),
                Kind::Q4_0 | Kind::Q4_1 | Kind::Q5_0 | Kind::Q5_1 | Kind::Iq4Nl => {
                    let mut q = nibble_vectors(qp);
                    if kind == Kind::Iq4Nl {
                        iq4_levels(&mut q);
                    }
                    if kind.has_qh() {
                        let qh = _mm512_loadu_si512(qp.add(256).cast());
                        let bit4 = _mm512_set1_epi8(0x10);
                        for (j, qj) in q.iter_mut().enumerate() {
                            let hi = _mm512_multishift_epi64_epi8(_mm512_set1_epi64(qh_control(j)), qh);
                            // qj | (hi & 0x10)
                            *qj = _mm512_ternarylogic_epi32::<0xf8>(*qj, hi, bit4);
                        }
                    }
                    q
                }
            };
            let sp = s0.add(b * sb);
            let dw = _mm512_cvtph_ps(_mm256_loadu_si256(sp.cast()));
            let mut s: [__m512i; T] = std::array::from_fn(|j| {
                if kind.has_min() {
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
            if kind.has_min() {
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

/// One K-quant tile's call: the tile `tp` (`nb` super-blocks), the next tile (prefetched only),
/// token `j`'s super-block `b` values at `x + j·x_rb + b·292`, its scale at `a[j·nb + b]` and
/// its integer terms at `sums + (j·nb + b)·act_sums`, its 16 results to `dst + j·ldo`.
struct KCall<'a> {
    tp: &'a [u8],
    next: *const u8,
    nb: usize,
    x: *const u8,
    x_rb: usize,
    a: *const ActBlock,
    sums: *const i32,
    dst: *mut f32,
    ldo: usize,
}

/// A `vpshufb` control that gives every 32-bit lane the bytes `sel` of the same lane (`-1`: zero).
const fn lane_bytes(sel: [i8; 4]) -> [i8; 64] {
    let mut c = [0i8; 64];
    let mut i = 0;
    while i < 64 {
        let (word, byte) = ((i % 16) / 4, i % 4);
        c[i] = if sel[byte] < 0 { -1 } else { (4 * word) as i8 + sel[byte] };
        i += 1;
    }
    c
}

/// [`lane_bytes`] controls of Q4_K's scales: byte `i` alone (zero-extended to the lane), and
/// bytes 0, 1 and 2, 3 as two zero-extended 16-bit words.
const PICK_ONE: [[i8; 64]; 4] = [
    lane_bytes([0, -1, -1, -1]),
    lane_bytes([1, -1, -1, -1]),
    lane_bytes([2, -1, -1, -1]),
    lane_bytes([3, -1, -1, -1]),
];
const PICK_TWO: [[i8; 64]; 2] = [lane_bytes([0, -1, 1, -1]), lane_bytes([2, -1, 3, -1])];

/// IQ4_NL's sixteen levels + 128, as the unsigned operand of `vpdpbusd` (the kernel's offset
/// of −128 takes the 128 back).
const IQ4NL_LUT: [u8; 16] = {
    let mut t = [0u8; 16];
    let mut i = 0;
    while i < 16 {
        t[i] = (crate::quant::formats::iq4_nl::KVALUES_IQ4NL[i] as i16 + 128) as u8;
        i += 1;
    }
    t
};

/// Bytes of a Q8_K activation block.
const Q8K_BYTES: usize = 292;

/// The `vpmultishiftqb` control that moves the fifth bits of Q5_K's sub-block `sb` into place:
/// byte `p` of a 64-bit word of a `qh` vector is the `qh` byte of the value in byte `p` of the
/// nibble vector, its bit `sb` that value's fifth bit; byte `p` of the result takes the 8 bits
/// starting 4 below bit `8p + sb` (rotating within the word), so that bit lands on bit 4.
const fn k_qh_control(sb: usize) -> i64 {
    let mut c = 0u64;
    let mut p = 0;
    while p < 8 {
        c |= (((8 * p + sb + 60) % 64) as u64) << (8 * p);
        p += 1;
    }
    c as i64
}

/// [`k_qh_control`] of every sub-block.
const K_QH_CONTROL: [i64; 8] = {
    let mut c = [0i64; 8];
    let mut sb = 0;
    while sb < 8 {
        c[sb] = k_qh_control(sb);
        sb += 1;
    }
    c
};

/// The eight value vectors of sub-block `sb` of a K-quant super-block whose value group starts
/// at `qp`: the nibbles of chunk `sb / 2` (low for even `sb`, high for odd), and for Q5_K
/// (`QH`) bit `sb` of the `qh` vectors after them as bit 4.
///
/// # Safety
/// As [`gemm`]: the value group is inside the tile.
#[inline(always)]
unsafe fn k_values<const QH: bool>(qp: *const u8, sb: usize) -> [__m512i; 8] {
    // A loop, not `array::from_fn`: LLVM left that closure out of line, and the intrinsics in it
    // became calls.
    // SAFETY: the caller's contract: the CPU has the features and the loads are inside the
    // value group.
    unsafe {
        let mut q = [_mm512_setzero_si512(); 8];
        let m4 = _mm512_set1_epi8(0x0f);
        for (k, qk) in q.iter_mut().enumerate() {
            let raw = _mm512_loadu_si512(qp.add((sb / 2) * 512 + 64 * k).cast());
            *qk = if sb.is_multiple_of(2) {
                _mm512_and_si512(raw, m4)
            } else {
                _mm512_and_si512(_mm512_srli_epi16::<4>(raw), m4)
            };
            if QH {
                let qh = _mm512_loadu_si512(qp.add(2048 + 64 * k).cast());
                let hi = _mm512_multishift_epi64_epi8(_mm512_set1_epi64(K_QH_CONTROL[sb]), qh);
                // q | (hi & 0x10)
                *qk = _mm512_ternarylogic_epi32::<0xf8>(*qk, hi, _mm512_set1_epi8(0x10));
            }
        }
        q
    }
}

/// The eight value vectors of a 32-value block stored as Q4_0's (four vectors of nibbles at
/// `qp`): the low nibbles (values `4k..4k+4` of each lane's row), then the high ones (`16 + 4k..`).
///
/// # Safety
/// As [`gemm`]: 256 bytes are readable at `qp`.
#[inline(always)]
unsafe fn nibble_vectors(qp: *const u8) -> [__m512i; 8] {
    // A loop, not `array::from_fn` (see `k_values`).
    // SAFETY: the caller's contract.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0f);
        let mut q = [_mm512_setzero_si512(); 8];
        for (k, qk) in q.iter_mut().enumerate() {
            let raw = _mm512_loadu_si512(qp.add(64 * (k % 4)).cast());
            *qk = if k < 4 {
                _mm512_and_si512(raw, m4)
            } else {
                _mm512_and_si512(_mm512_srli_epi16::<4>(raw), m4)
            };
        }
        q
    }
}

/// IQ4_NL's levels of nibble vectors, as level + 128 (`vpshufb` of a 16-byte table).
///
/// # Safety
/// As [`gemm`]: the CPU has the features.
#[inline(always)]
unsafe fn iq4_levels(q: &mut [__m512i; 8]) {
    // SAFETY: the caller's contract; the table is 16 readable bytes.
    unsafe {
        let lut = _mm512_broadcast_i32x4(_mm_loadu_si128(IQ4NL_LUT.as_ptr().cast()));
        for qk in q.iter_mut() {
            *qk = _mm512_shuffle_epi8(lut, *qk);
        }
    }
}

/// One 32-value sub-block of a K-quant tile for `T` tokens: the eight value vectors `q` dotted
/// with each token's values at `c.x + j·c.x_rb + xo` (`vpdpbusd`), times the rows' scale `sc`,
/// added to `isum`.
///
/// # Safety
/// As [`gemm`]: the token rows hold the sub-block's 32 values at `xo`.
#[inline(always)]
unsafe fn scaled_sub_block<const T: usize>(
    c: &KCall<'_>,
    q: &[__m512i; 8],
    xo: usize,
    sc: __m512i,
    isum: &mut [__m512i; T],
) {
    // SAFETY: the caller's contract: the loads are inside the token rows.
    unsafe {
        let mut s = [_mm512_setzero_si512(); T];
        for (k, &qk) in q.iter().enumerate() {
            for (j, sj) in s.iter_mut().enumerate() {
                let xv = c.x.add(j * c.x_rb + xo + 4 * k).cast::<i32>().read_unaligned();
                *sj = _mm512_dpbusd_epi32(*sj, qk, _mm512_set1_epi32(xv));
            }
        }
        for (is, sj) in isum.iter_mut().zip(s) {
            *is = _mm512_add_epi32(*is, _mm512_mullo_epi32(sj, sc));
        }
    }
}

/// `Σ_p pairs[p] · sums[p]` per row (`vpdpwssd`): the rows' per-sub-block i16 pairs (Q4_K's
/// minimums, IQ4_XS's `128·(ls − 32)`) against one token's sub-block sums as i16 pairs.
///
/// # Safety
/// `sums` points at the token's four pairs for the super-block.
#[inline(always)]
unsafe fn pair_term(pairs: &[__m512i; 4], sums: *const i32) -> __m512i {
    // SAFETY: the caller's contract: four readable pairs.
    unsafe {
        let mut t = _mm512_setzero_si512();
        for (p, &pp) in pairs.iter().enumerate() {
            t = _mm512_dpwssd_epi32(t, pp, _mm512_set1_epi32(*sums.add(p)));
        }
        t
    }
}

/// One IQ4_XS tile against `T` tokens. Per sub-block `j` of a super-block: the rows' scale
/// `ls − 32` (6 bits: a nibble of `scales_l`, two bits of `scales_h`), the nibbles looked up as
/// level + 128 and dotted with the token's 32 values (`vpdpbusd`), times the scale (`vpmulld`);
/// the 128s come back as `Σ 128·(ls − 32)·Σx` over the sub-blocks (`vpdpwssd` of the scales' i16
/// pairs against the token's sub-block sums, as Q4_K's minimums). Then
/// `acc += f32(Σ sc·(P − 128·Σx)) · d_w · d_x`, GGML's IQ4_XS dot.
///
/// # Safety
/// As [`gemm`], for the tile and tokens described by `c`.
#[inline(always)]
unsafe fn tile_dot_iq4xs<const T: usize>(c: &KCall<'_>) {
    const QB: usize = 2048;
    const SB: usize = 128;
    const AB: usize = Q8K_BYTES;
    let q0 = c.tp.as_ptr();
    let s0 = q0.wrapping_add(c.nb * QB);
    // SAFETY: the caller's contract: every load below is inside the tile or the token rows.
    unsafe {
        let (low4, low2, bias) = (_mm512_set1_epi32(0xf), _mm512_set1_epi32(3), _mm512_set1_epi32(32));
        let low16 = _mm512_set1_epi32(0xffff);
        let mut acc = [_mm512_setzero_ps(); T];
        for b in 0..c.nb {
            prefetch_block(c.next, c.nb, b, QB + SB);
            let sp = s0.add(b * SB);
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(sp.cast()));
            let sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256(sp.add(32).cast()));
            let sl = _mm512_loadu_si512(sp.add(64).cast());
            let mut isum = [_mm512_setzero_si512(); T];
            // 128·sc of sub-blocks 2p and 2p + 1 as the i16 pair p.
            let mut pairs = [_mm512_setzero_si512(); 4];
            for sb in 0..8 {
                let lo = _mm512_and_si512(_mm512_srlv_epi32(sl, _mm512_set1_epi32(4 * sb as i32)), low4);
                let hi = _mm512_and_si512(_mm512_srlv_epi32(sh, _mm512_set1_epi32(2 * sb as i32)), low2);
                let sc = _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32::<4>(hi)), bias);
                let m = _mm512_slli_epi32::<7>(sc);
                pairs[sb / 2] = if sb.is_multiple_of(2) {
                    _mm512_and_si512(m, low16)
                } else {
                    _mm512_or_si512(pairs[sb / 2], _mm512_slli_epi32::<16>(m))
                };
                let mut q = nibble_vectors(q0.add(b * QB + sb * 256));
                iq4_levels(&mut q);
                scaled_sub_block(c, &q, b * AB + 32 * sb, sc, &mut isum);
            }
            for (j, accj) in acc.iter_mut().enumerate() {
                let offs = pair_term(&pairs, c.sums.add((j * c.nb + b) * 4));
                let dx = _mm512_set1_ps((*c.a.add(j * c.nb + b)).d);
                let total = _mm512_sub_epi32(isum[j], offs);
                *accj = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), _mm512_mul_ps(d, dx), *accj);
            }
        }
        for (j, accj) in acc.iter().enumerate() {
            _mm512_storeu_ps(c.dst.add(j * c.ldo), *accj);
        }
    }
}

/// One Q4_K or Q5_K tile against `T` tokens (see the module documentation).
///
/// # Safety
/// As [`gemm`], for the tile and tokens described by `c`.
#[inline(always)]
unsafe fn tile_dot_k<const K: u8, const T: usize>(c: &KCall<'_>) {
    let kind = kind_of(K);
    let qb = kind.q_bytes();
    const SB: usize = 256;
    const AB: usize = Q8K_BYTES;
    let q0 = c.tp.as_ptr();
    let s0 = q0.wrapping_add(c.nb * qb);
    // SAFETY: the caller's contract: every load below is inside the tile or the token rows.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0f);
        let (low6, top2) = (_mm512_set1_epi8(0x3f), _mm512_set1_epi8(0x30));
        let one: [__m512i; 4] = std::array::from_fn(|i| _mm512_loadu_si512(PICK_ONE[i].as_ptr().cast()));
        let two: [__m512i; 2] = std::array::from_fn(|i| _mm512_loadu_si512(PICK_TWO[i].as_ptr().cast()));
        let mut acc = [_mm512_setzero_ps(); T];
        for b in 0..c.nb {
            prefetch_block(c.next, c.nb, b, qb + SB);
            let sp = s0.add(b * SB);
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(sp.cast()));
            let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(sp.add(32).cast()));
            let v: [__m512i; 3] = std::array::from_fn(|i| _mm512_loadu_si512(sp.add(64 + 64 * i).cast()));
            // Bytes 0..4 of each lane: scales 0..4, scales 4..8, minimums 0..4, minimums 4..8.
            let sc_lo = _mm512_and_si512(v[0], low6);
            let sc_hi = _mm512_ternarylogic_epi32::<0xf8>(
                _mm512_and_si512(v[2], m4),
                _mm512_srli_epi32::<2>(v[0]),
                top2,
            );
            let mn_lo = _mm512_and_si512(v[1], low6);
            let mn_hi = _mm512_ternarylogic_epi32::<0xf8>(
                _mm512_and_si512(_mm512_srli_epi32::<4>(v[2]), m4),
                _mm512_srli_epi32::<2>(v[1]),
                top2,
            );
            let mut isum = [_mm512_setzero_si512(); T];
            for sb in 0..8 {
                let sc = _mm512_shuffle_epi8(if sb < 4 { sc_lo } else { sc_hi }, one[sb % 4]);
                let q = if kind.has_qh() {
                    k_values::<true>(q0.add(b * qb), sb)
                } else {
                    k_values::<false>(q0.add(b * qb), sb)
                };
                scaled_sub_block(c, &q, b * AB + 32 * sb, sc, &mut isum);
            }
            let mp = [
                _mm512_shuffle_epi8(mn_lo, two[0]),
                _mm512_shuffle_epi8(mn_lo, two[1]),
                _mm512_shuffle_epi8(mn_hi, two[0]),
                _mm512_shuffle_epi8(mn_hi, two[1]),
            ];
            for (j, accj) in acc.iter_mut().enumerate() {
                let mins = pair_term(&mp, c.sums.add((j * c.nb + b) * 4));
                let dx = _mm512_set1_ps((*c.a.add(j * c.nb + b)).d);
                *accj = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[j]), _mm512_mul_ps(d, dx), *accj);
                *accj = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins), _mm512_mul_ps(dmin, dx), *accj);
            }
        }
        for (j, accj) in acc.iter().enumerate() {
            _mm512_storeu_ps(c.dst.add(j * c.ldo), *accj);
        }
    }
}
