//! AVX-512 (F/BW/VL/DQ + VNNI + VBMI) kernels for [`Isa::Avx512`](crate::Isa::Avx512): decode
//! dot products and the prompt GEMM for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K and
//! Q6_K weights.
//!
//! # Layout: one block per lane
//!
//! A *group* is 16 weight blocks of 32 values (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0), two Q4_K or Q5_K
//! super-blocks (16 sub-blocks of 32) or one Q2_K, Q3_K or Q6_K super-block (16 sub-blocks of
//! 16). Each group is turned into `NQ` 512-bit vectors (8, or 4 for Q2_K, Q3_K and Q6_K) whose
//! i32 lane `b` holds four consecutive values of block `b`: one `vpdpbusd` per vector accumulates
//! four products per lane, so after `NQ` of them lane `b` holds block `b`'s whole integer dot
//! product. Converting the 16 sums to f32 and scaling them by a vector of 16 block scales then
//! costs three instructions per group, where a block-per-register layout pays that per block.
//!
//! Weights stay in GGUF layout: each group is loaded with a few full-width loads and rearranged
//! with VBMI byte permutes (`vpermt2b`) into the lane layout, nibbles split, high bits merged with
//! `vpmultishiftqb`/`vprolvd`. Activations (Q8_0, Q8_1, Q8_K rows from
//! [`quantize_activations`](crate::quant::quantize_activations)) are rearranged the same way once per
//! call into a buffer that every weight row reuses.
//!
//! `vpdpbusd` multiplies unsigned by signed bytes: 3-, 4-, 5- and 6-bit weights are unsigned and
//! their offsets (−4, −8, −16, −32) become an integer start value `−offset · Σx` per block computed
//! from the activations; Q8_0 weights are flipped to `w + 128` with a start value `−128 · Σx`.
//! Integer sums are exact; only the f32 accumulation order differs from the portable kernels.
//!
//! # GEMM
//!
//! Tokens are processed in tiles of [`TILE`]: each weight group is unpacked once into registers
//! and dotted with every token of the tile (activations read from the L1-resident buffer), with
//! one f32 accumulator per token; the row's results are reduced at the end.

use std::arch::x86_64::*;
use std::cell::RefCell;

use super::avx512_formats::{Q2K, Q3K, Q4_0, Q4_1, Q4K, Q5_0, Q5_1, Q5K, Q6K, Q8_0};
use crate::GgmlType;
use crate::quant::prefetch_next;

/// Proof that the CPU supports [`Isa::Avx512`](crate::Isa::Avx512): only built after detection.
#[derive(Clone, Copy)]
pub(super) struct Avx512 {
    _private: (),
}

/// The weight rows and activation rows handled by one call: `w` holds whole rows of `w_rb`
/// bytes, `xq` whole rows of `x_rb` bytes.
type GemmFn = fn(&[u8], usize, &[u8], usize, &mut [f32], usize);

/// `fn(w_row, xq) -> w_row · xq`.
type DotFn = fn(&[u8], &[u8]) -> f32;

/// The dot and GEMM kernels for `ty`, or `None` where this level has none (the caller falls back
/// to the AVX2 ones). The function pointers are safe: they are only handed out by
/// [`crate::quant::VecDot::with_isa`] after [`crate::Isa::is_supported`] confirmed AVX-512.
pub(in crate::quant) fn kernels(ty: GgmlType) -> Option<(DotFn, GemmFn)> {
    macro_rules! pair {
        ($f:ty) => {{
            fn dot(w: &[u8], xq: &[u8]) -> f32 {
                let mut out = [0f32];
                // SAFETY: only reachable through `VecDot::with_isa`, which selects these kernels
                // after `Isa::Avx512.is_supported()`; lengths only steer safe slicing.
                unsafe { gemm::<$f>(w, w.len(), xq, xq.len(), &mut out, 1) };
                out[0]
            }
            fn gemm_fn(w: &[u8], w_rb: usize, xq: &[u8], x_rb: usize, out: &mut [f32], ldo: usize) {
                // SAFETY: as for `dot` above: selected only where AVX-512 is supported.
                unsafe { gemm::<$f>(w, w_rb, xq, x_rb, out, ldo) };
            }
            Some((dot as DotFn, gemm_fn as GemmFn))
        }};
    }
    match ty {
        GgmlType::Q4_0 => pair!(Q4_0),
        GgmlType::Q4_1 => pair!(Q4_1),
        GgmlType::Q5_0 => pair!(Q5_0),
        GgmlType::Q5_1 => pair!(Q5_1),
        GgmlType::Q8_0 => pair!(Q8_0),
        GgmlType::Q4_K => pair!(Q4K),
        GgmlType::Q5_K => pair!(Q5K),
        GgmlType::Q6_K => pair!(Q6K),
        GgmlType::Q2_K => pair!(Q2K),
        GgmlType::Q3_K => pair!(Q3K),
        _ => None,
    }
}

/// One weight group in lane layout: `q[..NQ]` unsigned values, the per-lane f32 scale and (for
/// formats with a minimum) the per-lane f32 minimum term.
pub(super) struct WGroup {
    pub(super) q: [__m512i; 8],
    pub(super) scale: __m512,
    pub(super) min: __m512,
}

/// A weight format's group geometry and unpacking, and the matching activation repacking.
///
/// A row is a run of whole groups, then a remainder processed in smaller *units*: pairs of
/// blocks in natural order for the 32-value formats (lane `l` of the single value vector holds
/// values `4l..4l+4` of the pair, the scales are per half), whole super-blocks (a partial group)
/// for the K-quants.
pub(super) trait Format {
    /// Bytes of a whole weight group.
    const W_GROUP: usize;
    /// Bytes of the activations of a whole group.
    const X_GROUP: usize;
    /// Value vectors per group (lane `b` of vector `j` holds four values of block `b`).
    const NQ: usize;
    /// Bytes of the weights of a remainder unit.
    const W_UNIT: usize;
    /// Bytes of the activations of a remainder unit.
    const X_UNIT: usize;
    /// Value vectors per remainder unit.
    const UNIT_NQ: usize;
    /// Whether activation groups carry an integer start value (offset correction).
    const INIT: bool;
    /// Whether the result has a `min · a` term (Q2_K, Q4_1, Q5_1, Q4_K, Q5_K).
    const MIN: bool;
    /// A nonzero number unique to the format (its rearranged activations differ).
    const ID: u8;
    /// Unpacks the whole weight group in `src`.
    fn unpack(t: Avx512, src: &[u8]) -> WGroup;
    /// Repacks the whole activation group in `src` into `NQ + 3` vectors: the values, the f32
    /// scales, the f32 minimum factors and the i32 start values.
    fn repack(t: Avx512, src: &[u8], dst: &mut [__m512i]);
    /// Unpacks the remainder unit in `src` (whole, or the row's last single block); for the
    /// K-quants, whose unit is a (partial) group, [`Format::unpack`].
    #[inline(always)]
    fn unpack_unit(t: Avx512, src: &[u8]) -> WGroup {
        Self::unpack(t, src)
    }
    /// Repacks the activations of a remainder unit into `UNIT_NQ + 3` vectors; for the
    /// K-quants, [`Format::repack`].
    #[inline(always)]
    fn repack_unit(t: Avx512, src: &[u8], dst: &mut [__m512i]) {
        Self::repack(t, src, dst);
    }
}

/// How a row of `x_rb` activation bytes splits: whole groups, remainder units, and the
/// rearranged vectors per activation row.
#[derive(Clone, Copy)]
struct Split {
    groups: usize,
    units: usize,
    per_row: usize,
}

impl Split {
    fn new<F: Format>(x_rb: usize) -> Self {
        let groups = x_rb / F::X_GROUP;
        let units = (x_rb % F::X_GROUP).div_ceil(F::X_UNIT);
        Split { groups, units, per_row: groups * (F::NQ + 3) + units * (F::UNIT_NQ + 3) }
    }
}

/// Tokens processed together against each unpacked weight group.
const TILE: usize = 8;

/// The activations of the last call on this thread, rearranged: calls with the same
/// activation bytes for the same format (every weight row block of one matmul, every row of a
/// decode matvec) reuse them instead of rearranging again.
struct ActCache {
    /// [`Format::ID`] of the format they were rearranged for (0: none yet).
    id: u8,
    /// Bytes per activation row.
    x_rb: usize,
    /// The activation bytes they come from.
    src: Vec<u8>,
    /// The rearranged groups, `NQ + 3` vectors each, token-major.
    acts: Vec<__m512i>,
}

thread_local! {
    static CACHE: RefCell<ActCache> =
        const { RefCell::new(ActCache { id: 0, x_rb: 0, src: Vec::new(), acts: Vec::new() }) };
}

/// `out[t * ldo + r] = w_r · x_t` for every weight row `r` (`w_rb` bytes each) and activation
/// row `t` (`x_rb` bytes each).
///
/// # Safety
/// The CPU must support AVX-512 F/BW/VL/DQ, VNNI and VBMI.
unsafe fn gemm<F: Format>(w: &[u8], w_rb: usize, xq: &[u8], x_rb: usize, out: &mut [f32], ldo: usize) {
    if w_rb == 0 || x_rb == 0 {
        return;
    }
    // SAFETY: the caller guarantees the features.
    let t = Avx512 { _private: () };
    CACHE.with_borrow_mut(|cache| {
        // SAFETY: as above. The closure only forwards to this function compiled for AVX-512.
        unsafe { gemm_impl::<F>(t, w, w_rb, xq, x_rb, out, ldo, cache) }
    });
}

#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,avx2,fma,f16c")]
fn gemm_impl<F: Format>(
    t: Avx512,
    w: &[u8],
    w_rb: usize,
    xq: &[u8],
    x_rb: usize,
    out: &mut [f32],
    ldo: usize,
    cache: &mut ActCache,
) {
    let nt = xq.len() / x_rb;
    let split = Split::new::<F>(x_rb);
    let need = nt * split.per_row;
    if cache.id != F::ID || cache.x_rb != x_rb || !same_bytes(t, &cache.src, xq) {
        cache.id = F::ID;
        cache.x_rb = x_rb;
        cache.src.clear();
        cache.src.extend_from_slice(xq);
        if cache.acts.len() < need {
            cache.acts.resize(need, _mm512_setzero_si512());
        }
        for (row, dst) in xq.chunks_exact(x_rb).zip(cache.acts.chunks_exact_mut(split.per_row)) {
            let (groups, units) = dst.split_at_mut(split.groups * (F::NQ + 3));
            for (g, d) in groups.chunks_exact_mut(F::NQ + 3).enumerate() {
                F::repack(t, &row[g * F::X_GROUP..(g + 1) * F::X_GROUP], d);
            }
            let rest = &row[split.groups * F::X_GROUP..];
            for (u, d) in units.chunks_exact_mut(F::UNIT_NQ + 3).enumerate() {
                F::repack_unit(t, &rest[u * F::X_UNIT..((u + 1) * F::X_UNIT).min(rest.len())], d);
            }
        }
    }
    let acts = &cache.acts[..need];
    let mut t0 = 0;
    while nt - t0 >= TILE {
        tile::<F, TILE>(t, w, w_rb, acts, split, t0, out, ldo);
        t0 += TILE;
    }
    if nt - t0 >= 4 {
        tile::<F, 4>(t, w, w_rb, acts, split, t0, out, ldo);
        t0 += 4;
    }
    if nt - t0 >= 2 {
        tile::<F, 2>(t, w, w_rb, acts, split, t0, out, ldo);
        t0 += 2;
    }
    if nt - t0 == 1 {
        tile::<F, 1>(t, w, w_rb, acts, split, t0, out, ldo);
    }
}

/// Tokens `t0..t0 + T` against every weight row.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn tile<F: Format, const T: usize>(
    t: Avx512,
    w: &[u8],
    w_rb: usize,
    acts: &[__m512i],
    split: Split,
    t0: usize,
    out: &mut [f32],
    ldo: usize,
) {
    let per_row = split.per_row;
    let x = &acts[t0 * per_row..(t0 + T) * per_row];
    let (gs, us) = (F::NQ + 3, F::UNIT_NQ + 3);
    let units_at = split.groups * gs;
    for (r, row) in w.chunks_exact(w_rb).enumerate() {
        if T == 1 {
            prefetch_next(row);
        }
        let mut acc = [zero_ps(t); T];
        for g in 0..split.groups {
            let wg = F::unpack(t, &row[g * F::W_GROUP..(g + 1) * F::W_GROUP]);
            if T >= 4 {
                tile_group_dot::<F, T>(t, &wg, x, per_row, g * gs, &mut acc);
                continue;
            }
            for (j, a) in acc.iter_mut().enumerate() {
                let base = j * per_row + g * gs;
                *a = group_dot::<F, T>(t, &wg, F::NQ, &x[base..base + gs], *a);
            }
        }
        let rest = &row[split.groups * F::W_GROUP..];
        for u in 0..split.units {
            let wg = F::unpack_unit(t, &rest[u * F::W_UNIT..((u + 1) * F::W_UNIT).min(rest.len())]);
            for (j, a) in acc.iter_mut().enumerate() {
                let base = j * per_row + units_at + u * us;
                *a = group_dot::<F, T>(t, &wg, F::UNIT_NQ, &x[base..base + us], *a);
            }
        }
        for (j, a) in acc.iter().enumerate() {
            out[(t0 + j) * ldo + r] = reduce(t, *a);
        }
    }
}

/// `acc + Σ_lanes scale · (start + Σ w·x) · d_x (+ min · a_x)` for one group of `nq` value
/// vectors. With few tokens per tile the latency of one chain of `vpdpbusd` would dominate, so
/// it is split in two.
#[inline(always)]
fn group_dot<F: Format, const T: usize>(
    _t: Avx512,
    wg: &WGroup,
    nq: usize,
    x: &[__m512i],
    acc: __m512,
) -> __m512 {
    // SAFETY: `_t` proves AVX-512 F/VNNI support; every intrinsic reads registers only.
    unsafe {
        let mut s = if F::INIT { x[nq + 2] } else { _mm512_setzero_si512() };
        if T < 4 && nq >= 4 {
            let mut s2 = _mm512_setzero_si512();
            for j in (0..nq).step_by(2) {
                s = _mm512_dpbusd_epi32(s, wg.q[j], x[j]);
                s2 = _mm512_dpbusd_epi32(s2, wg.q[j + 1], x[j + 1]);
            }
            s = _mm512_add_epi32(s, s2);
        } else {
            for (&w, &v) in wg.q[..nq].iter().zip(&x[..nq]) {
                s = _mm512_dpbusd_epi32(s, w, v);
            }
        }
        scale_group::<F>(_t, wg, s, &x[nq..], acc)
    }
}

/// `acc + scale · f32(s) · d_x (+ min · a_x)`: one group's integer sums `s` scaled and added,
/// with `x` the activation group's vectors after its values (`[d_x, a_x, …]`).
#[inline(always)]
fn scale_group<F: Format>(_t: Avx512, wg: &WGroup, s: __m512i, x: &[__m512i], acc: __m512) -> __m512 {
    // SAFETY: `_t` proves AVX-512 F support; every intrinsic reads registers only.
    unsafe {
        let f = _mm512_mul_ps(_mm512_cvtepi32_ps(s), wg.scale);
        let a = _mm512_fmadd_ps(f, _mm512_castsi512_ps(x[0]), acc);
        if F::MIN { _mm512_fmadd_ps(wg.min, _mm512_castsi512_ps(x[1]), a) } else { a }
    }
}

/// [`group_dot`] for every token of a tile at once (token `j`'s group at `x[j * per_row + at..]`),
/// with the tokens' `vpdpbusd` chains interleaved: one chain per token would be latency-bound
/// (eight dependent `vpdpbusd` per group), and the out-of-order window does not reach far
/// enough ahead to overlap the chains of consecutive tokens by itself.
#[inline(always)]
fn tile_group_dot<F: Format, const T: usize>(
    _t: Avx512,
    wg: &WGroup,
    x: &[__m512i],
    per_row: usize,
    at: usize,
    acc: &mut [__m512; T],
) {
    let nq = F::NQ;
    let xs: [&[__m512i]; T] = std::array::from_fn(|j| &x[j * per_row + at..j * per_row + at + nq + 3]);
    // SAFETY: `_t` proves AVX-512 F/VNNI support; every intrinsic reads registers only.
    unsafe {
        let mut s: [__m512i; T] =
            std::array::from_fn(|j| if F::INIT { xs[j][nq + 2] } else { _mm512_setzero_si512() });
        for (q, &wq) in wg.q[..nq].iter().enumerate() {
            for (sj, xj) in s.iter_mut().zip(&xs) {
                *sj = _mm512_dpbusd_epi32(*sj, wq, xj[q]);
            }
        }
        for ((a, sj), xj) in acc.iter_mut().zip(s).zip(&xs) {
            *a = scale_group::<F>(_t, wg, sj, &xj[nq..], *a);
        }
    }
}

/// Whether `a == b`, compared 64 bytes at a time in registers (the activations are in L1; a
/// library call costs more than the comparison).
#[inline(always)]
fn same_bytes(_t: Avx512, a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    // SAFETY: `_t` proves AVX-512 F/BW; each load covers bytes `off..off + 64` of both slices,
    // in bounds, or only the bytes up to their common end (masked loads do not touch the rest).
    unsafe {
        let mut diff: u64 = 0;
        let mut off = 0;
        while off + 64 <= a.len() {
            let x = _mm512_loadu_si512(a.as_ptr().add(off).cast());
            let y = _mm512_loadu_si512(b.as_ptr().add(off).cast());
            diff |= _mm512_cmpneq_epi8_mask(x, y);
            off += 64;
        }
        if off < a.len() {
            let k = (1u64 << (a.len() - off)) - 1;
            let x = _mm512_maskz_loadu_epi8(k, a.as_ptr().add(off).cast());
            let y = _mm512_maskz_loadu_epi8(k, b.as_ptr().add(off).cast());
            diff |= _mm512_cmpneq_epi8_mask(x, y);
        }
        diff == 0
    }
}

/// A zero f32 vector.
#[inline(always)]
pub(super) fn zero_ps(_t: Avx512) -> __m512 {
    // SAFETY: `_t` proves AVX-512 F support.
    unsafe { _mm512_setzero_ps() }
}

/// Sum of the 16 lanes.
#[inline(always)]
fn reduce(_t: Avx512, a: __m512) -> f32 {
    // SAFETY: `_t` proves AVX-512 F support.
    unsafe { _mm512_reduce_add_ps(a) }
}

/// `N` consecutive 64-byte vectors of `src`, zero past its end.
#[inline(always)]
pub(super) fn load<const N: usize>(_t: Avx512, src: &[u8]) -> [__m512i; N] {
    // SAFETY: `_t` proves AVX-512 F.
    let mut z = [unsafe { _mm512_setzero_si512() }; N];
    for (i, v) in z.iter_mut().enumerate() {
        let off = 64 * i;
        if off + 64 <= src.len() {
            // SAFETY: bytes `off..off + 64` are in `src`; AVX-512 F proven by `_t`.
            *v = unsafe { _mm512_loadu_si512(src.as_ptr().add(off).cast()) };
        } else if off < src.len() {
            let k = (1u64 << (src.len() - off)) - 1;
            // SAFETY: the mask selects only bytes `off..src.len()` (masked-out bytes are not
            // accessed and cannot fault); AVX-512 BW proven by `_t`.
            *v = unsafe { _mm512_maskz_loadu_epi8(k, src.as_ptr().add(off).cast()) };
        }
    }
    z
}

/// Where each byte of a gathered vector comes from: `idx` the byte within a pair of source
/// vectors, `masks[m]` the bytes taken from pair `m` (vectors `2m`, `2m + 1`).
#[derive(Clone, Copy)]
pub(super) struct BytePlan {
    idx: [u8; 64],
    masks: [u64; 5],
}

impl BytePlan {
    /// The plan for byte `l` taken from byte `pos[l]` of the loaded vectors (`pos[l] < 640`).
    pub(super) const fn new(pos: [u16; 64]) -> Self {
        let mut idx = [0u8; 64];
        let mut masks = [0u64; 5];
        let mut l = 0;
        while l < 64 {
            idx[l] = (pos[l] % 128) as u8;
            masks[(pos[l] / 128) as usize] |= 1 << l;
            l += 1;
        }
        BytePlan { idx, masks }
    }

    /// The plan where lane `b`'s four bytes are `pos(b) .. pos(b) + 4` with
    /// `pos(b) = base[b]`.
    pub(super) const fn lanes(base: [u16; 16]) -> Self {
        let mut pos = [0u16; 64];
        let mut l = 0;
        while l < 64 {
            pos[l] = base[l / 4] + (l % 4) as u16;
            l += 1;
        }
        BytePlan::new(pos)
    }
}

/// Where each 16-bit word of a gathered vector comes from (as [`BytePlan`], in words).
pub(super) struct WordPlan {
    idx: [u16; 32],
    masks: [u32; 5],
}

impl WordPlan {
    /// The plan for word `l` taken from byte offset `pos[l]` (even, `< 640`).
    pub(super) const fn new(pos: [u16; 32]) -> Self {
        let mut idx = [0u16; 32];
        let mut masks = [0u32; 5];
        let mut l = 0;
        while l < 32 {
            idx[l] = (pos[l] / 2) % 64;
            masks[(pos[l] / 128) as usize] |= 1 << l;
            l += 1;
        }
        WordPlan { idx, masks }
    }
}

/// The bytes `plan` selects from the loaded vectors `z`.
#[inline(always)]
pub(super) fn gather<const N: usize>(_t: Avx512, z: &[__m512i; N], plan: &BytePlan) -> __m512i {
    // SAFETY: `_t` proves AVX-512 BW and VBMI; `plan.idx` holds 64 bytes.
    unsafe {
        let idx = _mm512_loadu_si512(plan.idx.as_ptr().cast());
        let mut r = _mm512_permutex2var_epi8(z[0], idx, if N > 1 { z[1] } else { z[0] });
        for m in 1..N.div_ceil(2) {
            if plan.masks[m] != 0 {
                let b = if 2 * m + 1 < N { z[2 * m + 1] } else { z[2 * m] };
                let s = _mm512_permutex2var_epi8(z[2 * m], idx, b);
                r = _mm512_mask_blend_epi8(plan.masks[m], r, s);
            }
        }
        r
    }
}

/// The 16-bit words `plan` selects from the loaded vectors `z`.
#[inline(always)]
pub(super) fn gather_words<const N: usize>(_t: Avx512, z: &[__m512i; N], plan: &WordPlan) -> __m512i {
    // SAFETY: `_t` proves AVX-512 BW; `plan.idx` holds 64 bytes.
    unsafe {
        let idx = _mm512_loadu_si512(plan.idx.as_ptr().cast());
        let mut r = _mm512_permutex2var_epi16(z[0], idx, if N > 1 { z[1] } else { z[0] });
        for m in 1..N.div_ceil(2) {
            if plan.masks[m] != 0 {
                let b = if 2 * m + 1 < N { z[2 * m + 1] } else { z[2 * m] };
                let s = _mm512_permutex2var_epi16(z[2 * m], idx, b);
                r = _mm512_mask_blend_epi16(plan.masks[m], r, s);
            }
        }
        r
    }
}

/// The low 16 f16 values of `v` as f32.
#[inline(always)]
pub(super) fn f16_lo(_t: Avx512, v: __m512i) -> __m512 {
    // SAFETY: `_t` proves AVX-512 F (which includes the 512-bit f16 conversion).
    unsafe { _mm512_cvtph_ps(_mm512_castsi512_si256(v)) }
}

/// The high 16 f16 values of `v` as f32.
#[inline(always)]
pub(super) fn f16_hi(_t: Avx512, v: __m512i) -> __m512 {
    // SAFETY: `_t` proves AVX-512 F.
    unsafe { _mm512_cvtph_ps(_mm512_extracti64x4_epi64::<1>(v)) }
}

/// Low nibbles of every byte.
#[inline(always)]
pub(super) fn lo_nibbles(_t: Avx512, v: __m512i) -> __m512i {
    // SAFETY: `_t` proves AVX-512 F.
    unsafe { _mm512_and_si512(v, _mm512_set1_epi8(0x0f)) }
}

/// High nibbles of every byte.
#[inline(always)]
pub(super) fn hi_nibbles(_t: Avx512, v: __m512i) -> __m512i {
    // SAFETY: `_t` proves AVX-512 F/BW.
    unsafe { _mm512_and_si512(_mm512_srli_epi16::<4>(v), _mm512_set1_epi8(0x0f)) }
}

/// Per-lane sums of the signed bytes of `q[..n]` (`Σx` of each block).
#[inline(always)]
pub(super) fn byte_sums(_t: Avx512, q: &[__m512i]) -> __m512i {
    // SAFETY: `_t` proves AVX-512 F/VNNI; registers only.
    unsafe {
        let ones = _mm512_set1_epi8(1);
        let mut s = _mm512_setzero_si512();
        for &v in q {
            s = _mm512_dpbusd_epi32(s, ones, v);
        }
        s
    }
}
