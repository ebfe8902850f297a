//! AVX-VNNI kernels for [`Isa::AvxVnni`](crate::Isa::AvxVnni) (256-bit `vpdpbusd` on top of
//! AVX2, for CPUs without AVX-512): decode dot products and the prompt GEMM for Q4_0, Q4_1, Q5_0,
//! Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K weights.
//!
//! The layout is the AVX-512 kernels' (`avx512.rs`) at half width: a *group* is 8 blocks of
//! 32 values (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0), one Q4_K or Q5_K super-block (8 sub-blocks of 32) or
//! one Q2_K, Q3_K or Q6_K super-block (two halves of 8 sub-blocks of 16, each half with its own
//! scales), turned into 256-bit vectors whose i32 lane `b` holds four values of block `b`, so
//! that `vpdpbusd` leaves one block's integer dot product per lane and the block scales apply to
//! 8 blocks per instruction. Without byte permutes across lanes, blocks are rearranged with
//! 128-bit loads and in-lane dword transposes; scales are read one by one. A row's remaining
//! blocks past whole groups are processed one block per vector in natural order.
//!
//! Offsets are integer start values from the activations as in the AVX-512 kernels; integer sums
//! are exact, only the f32 accumulation order differs from the portable kernels.

use std::arch::x86_64::*;
use std::cell::RefCell;

use super::avxvnni_formats::{Q2K, Q3K, Q4_0, Q4_1, Q4K, Q5_0, Q5_1, Q5K, Q6K, Q8_0};
use crate::GgmlType;
use crate::quant::prefetch_next;

/// Proof that the CPU supports [`Isa::AvxVnni`](crate::Isa::AvxVnni): only built after
/// detection.
#[derive(Clone, Copy)]
pub(super) struct AvxVnni {
    _private: (),
}

/// The weight rows and activation rows handled by one call: `w` holds whole rows of `w_rb`
/// bytes, `xq` whole rows of `x_rb` bytes.
type GemmFn = fn(&[u8], usize, &[u8], usize, &mut [f32], usize);

/// `fn(w_row, xq) -> w_row · xq`.
type DotFn = fn(&[u8], &[u8]) -> f32;

/// The dot and GEMM kernels for `ty`, or `None` where this level has none (the caller falls back
/// to the AVX2 ones). The function pointers are safe: they are only handed out by
/// [`crate::quant::VecDot::with_isa`] after [`crate::Isa::is_supported`] confirmed AVX-VNNI.
pub(in crate::quant) fn kernels(ty: GgmlType) -> Option<(DotFn, GemmFn)> {
    macro_rules! pair {
        ($f:ty) => {{
            fn dot(w: &[u8], xq: &[u8]) -> f32 {
                let mut out = [0f32];
                // SAFETY: only reachable through `VecDot::with_isa`, which selects these kernels
                // after `Isa::AvxVnni.is_supported()`; lengths only steer safe slicing.
                unsafe { gemm::<$f>(w, w.len(), xq, xq.len(), &mut out, 1) };
                out[0]
            }
            fn gemm_fn(w: &[u8], w_rb: usize, xq: &[u8], x_rb: usize, out: &mut [f32], ldo: usize) {
                // SAFETY: as for `dot` above: selected only where AVX-VNNI is supported.
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

/// One weight group in lane layout: `q[..NQ]` unsigned values, the per-lane f32 scale and the
/// per-lane f32 minimum term (of the first half of `q`, and in `scale2` and `min2` of the second,
/// for split formats).
pub(super) struct WGroup {
    pub(super) q: [__m256i; 8],
    pub(super) scale: __m256,
    pub(super) scale2: __m256,
    pub(super) min: __m256,
    pub(super) min2: __m256,
}

/// A weight format's group geometry and unpacking, and the matching activation repacking (as
/// the AVX-512 kernels' `Format`; remainder units are single blocks in natural order).
pub(super) trait Format {
    /// Bytes of a whole weight group.
    const W_GROUP: usize;
    /// Bytes of the activations of a whole group.
    const X_GROUP: usize;
    /// Value vectors per group.
    const NQ: usize;
    /// Bytes of the weights of a remainder unit.
    const W_UNIT: usize;
    /// Bytes of the activations of a remainder unit.
    const X_UNIT: usize;
    /// Value vectors per remainder unit.
    const UNIT_NQ: usize;
    /// Whether activation groups carry an integer start value (offset correction).
    const INIT: bool;
    /// Whether the result has a `min · a` term (Q4_1, Q4_K).
    const MIN: bool;
    /// Whether the two halves of `q` have their own scales (`scale`, `scale2`) and either start
    /// values (`INIT`) or minimums (`min`, `min2`, with `MIN`), the activations' start values or
    /// minimum factors of the first half in the start-value slot, of the second in the minimum
    /// slot.
    const SPLIT: bool;
    /// A nonzero number unique to the format (its rearranged activations differ).
    const ID: u8;
    /// Unpacks the whole weight group in `src`.
    fn unpack(t: AvxVnni, src: &[u8]) -> WGroup;
    /// Repacks the whole activation group in `src` into `NQ + 3` vectors: the values, the f32
    /// scales, the f32 minimum factors and the i32 start values.
    fn repack(t: AvxVnni, src: &[u8], dst: &mut [__m256i]);
    /// Unpacks a remainder unit.
    fn unpack_unit(t: AvxVnni, src: &[u8]) -> WGroup;
    /// Repacks the activations of a remainder unit into `UNIT_NQ + 3` vectors.
    fn repack_unit(t: AvxVnni, src: &[u8], dst: &mut [__m256i]);
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

/// Tokens processed together against each unpacked weight group (AVX2 has 16 vector
/// registers: eight weight vectors, their scales and one accumulator per token).
const TILE: usize = 4;

/// The activations of the last call on this thread, rearranged (see the AVX-512 kernels).
struct ActCache {
    /// [`Format::ID`] of the format they were rearranged for (0: none yet).
    id: u8,
    /// Bytes per activation row.
    x_rb: usize,
    /// The activation bytes they come from.
    src: Vec<u8>,
    /// The rearranged groups and units, token-major.
    acts: Vec<__m256i>,
}

thread_local! {
    static CACHE: RefCell<ActCache> =
        const { RefCell::new(ActCache { id: 0, x_rb: 0, src: Vec::new(), acts: Vec::new() }) };
}

/// `out[t * ldo + r] = w_r · x_t` for every weight row `r` (`w_rb` bytes each) and activation
/// row `t` (`x_rb` bytes each).
///
/// # Safety
/// The CPU must support AVX2, FMA, F16C and AVX-VNNI.
unsafe fn gemm<F: Format>(w: &[u8], w_rb: usize, xq: &[u8], x_rb: usize, out: &mut [f32], ldo: usize) {
    if w_rb == 0 || x_rb == 0 {
        return;
    }
    // SAFETY: the caller guarantees the features.
    let t = AvxVnni { _private: () };
    CACHE.with_borrow_mut(|cache| {
        // SAFETY: as above. The closure only forwards to this function compiled for AVX-VNNI.
        unsafe { gemm_impl::<F>(t, w, w_rb, xq, x_rb, out, ldo, cache) }
    });
}

#[allow(clippy::too_many_arguments)]
#[cfg_attr(not(feature = "avx-vnni-as-avx512"), target_feature(enable = "avx2,fma,f16c,avxvnni"))]
#[cfg_attr(
    feature = "avx-vnni-as-avx512",
    target_feature(enable = "avx2,fma,f16c,avx512f,avx512vnni,avx512vl")
)]
fn gemm_impl<F: Format>(
    t: AvxVnni,
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
    if cache.id != F::ID || cache.x_rb != x_rb || cache.src != xq {
        cache.id = F::ID;
        cache.x_rb = x_rb;
        cache.src.clear();
        cache.src.extend_from_slice(xq);
        if cache.acts.len() < need {
            cache.acts.resize(need, _mm256_setzero_si256());
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
    t: AvxVnni,
    w: &[u8],
    w_rb: usize,
    acts: &[__m256i],
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
/// vectors (two halves with their own scales and starts for split formats). With few tokens per
/// tile a single chain of `vpdpbusd` would be latency-bound, so it is split in two.
#[inline(always)]
fn group_dot<F: Format, const T: usize>(
    _t: AvxVnni,
    wg: &WGroup,
    nq: usize,
    x: &[__m256i],
    acc: __m256,
) -> __m256 {
    // SAFETY: `_t` proves AVX2/FMA/AVX-VNNI support; every intrinsic reads registers only.
    unsafe {
        let mut s = if F::INIT { x[nq + 2] } else { _mm256_setzero_si256() };
        if F::SPLIT {
            let mut s2 = if F::INIT { x[nq + 1] } else { _mm256_setzero_si256() };
            for j in 0..nq / 2 {
                s = dpbusd(_t, s, wg.q[j], x[j]);
                s2 = dpbusd(_t, s2, wg.q[nq / 2 + j], x[nq / 2 + j]);
            }
            let f = _mm256_mul_ps(_mm256_cvtepi32_ps(s), wg.scale);
            let f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s2), wg.scale2, f);
            let a = _mm256_fmadd_ps(f, _mm256_castsi256_ps(x[nq]), acc);
            if F::MIN {
                let a = _mm256_fmadd_ps(wg.min, _mm256_castsi256_ps(x[nq + 2]), a);
                return _mm256_fmadd_ps(wg.min2, _mm256_castsi256_ps(x[nq + 1]), a);
            }
            return a;
        }
        if T < 4 && nq >= 4 {
            let mut s2 = _mm256_setzero_si256();
            for j in (0..nq).step_by(2) {
                s = dpbusd(_t, s, wg.q[j], x[j]);
                s2 = dpbusd(_t, s2, wg.q[j + 1], x[j + 1]);
            }
            s = _mm256_add_epi32(s, s2);
        } else {
            for (&w, &v) in wg.q[..nq].iter().zip(&x[..nq]) {
                s = dpbusd(_t, s, w, v);
            }
        }
        let f = _mm256_mul_ps(_mm256_cvtepi32_ps(s), wg.scale);
        let a = _mm256_fmadd_ps(f, _mm256_castsi256_ps(x[nq]), acc);
        if F::MIN { _mm256_fmadd_ps(wg.min, _mm256_castsi256_ps(x[nq + 1]), a) } else { a }
    }
}

/// `vpdpbusd` on 256-bit vectors: `s + Σ` of each lane's four products of unsigned `a` and
/// signed `b` bytes. VEX-encoded (AVX-VNNI); with the test-only `avx-vnni-as-avx512` feature
/// EVEX-encoded (AVX-512 VNNI/VL), the same operation.
#[inline(always)]
fn dpbusd(_t: AvxVnni, s: __m256i, a: __m256i, b: __m256i) -> __m256i {
    // SAFETY: `_t` proves AVX-VNNI (or, with the feature, AVX-512 VNNI/VL); registers only.
    #[cfg(not(feature = "avx-vnni-as-avx512"))]
    unsafe {
        _mm256_dpbusd_avx_epi32(s, a, b)
    }
    // SAFETY: as above.
    #[cfg(feature = "avx-vnni-as-avx512")]
    unsafe {
        _mm256_dpbusd_epi32(s, a, b)
    }
}

/// A zero f32 vector.
#[inline(always)]
pub(super) fn zero_ps(_t: AvxVnni) -> __m256 {
    // SAFETY: `_t` proves AVX.
    unsafe { _mm256_setzero_ps() }
}

/// Sum of the 8 lanes.
#[inline(always)]
fn reduce(_t: AvxVnni, a: __m256) -> f32 {
    // SAFETY: `_t` proves AVX; registers only.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }
}

/// Per-lane sums of the signed bytes of `q` (`Σx` of each block).
#[inline(always)]
pub(super) fn byte_sums(_t: AvxVnni, q: &[__m256i]) -> __m256i {
    // SAFETY: `_t` proves AVX2/AVX-VNNI; registers only.
    unsafe {
        let ones = _mm256_set1_epi8(1);
        let mut s = _mm256_setzero_si256();
        for &v in q {
            s = dpbusd(_t, s, ones, v);
        }
        s
    }
}

/// The 16 bytes at `src[at..]`.
///
/// # Panics
/// If they are out of bounds.
#[inline(always)]
fn load16(_t: AvxVnni, src: &[u8], at: usize) -> __m128i {
    let r = &src[at..at + 16];
    // SAFETY: `r` holds 16 bytes; SSE2 load, unaligned.
    unsafe { _mm_loadu_si128(r.as_ptr().cast()) }
}

/// The 32 bytes at `src[at..]`.
///
/// # Panics
/// If they are out of bounds.
#[inline(always)]
fn load32(_t: AvxVnni, src: &[u8], at: usize) -> __m256i {
    let r = &src[at..at + 32];
    // SAFETY: `r` holds 32 bytes; AVX load, unaligned.
    unsafe { _mm256_loadu_si256(r.as_ptr().cast()) }
}

// The loaders below use plain loops, not closures: a closure is compiled without the caller's
// target features, and intrinsics called from it would not be inlined.

/// Eight rows of 16 bytes (at `src[at[i]..]`) as four vectors: lane `i` of vector `j` holds
/// bytes `4j..4j + 4` of row `i` (an in-lane 4×4 dword transpose of two rows per vector).
///
/// # Panics
/// If a row is out of bounds.
#[inline(always)]
pub(super) fn rows16(t: AvxVnni, src: &[u8], at: [usize; 8]) -> [__m256i; 4] {
    let mut z = [zero_si(t); 4];
    for k in 0..4 {
        // SAFETY: `t` proves AVX; registers only.
        z[k] = unsafe { _mm256_set_m128i(load16(t, src, at[k + 4]), load16(t, src, at[k])) };
    }
    transpose4(t, z)
}

/// Eight rows of 32 bytes (at `src[at[i]..]`) as eight vectors: lane `i` of vector `j` holds
/// bytes `4j..4j + 4` of row `i`.
///
/// # Panics
/// If a row is out of bounds.
#[inline(always)]
pub(super) fn rows32(t: AvxVnni, src: &[u8], at: [usize; 8]) -> [__m256i; 8] {
    // Rows `k` and `k + 4` share a vector per 128-bit half, then each half is a 4×4 transpose.
    let (mut lo, mut hi) = ([zero_si(t); 4], [zero_si(t); 4]);
    for k in 0..4 {
        let (a, b) = (load32(t, src, at[k]), load32(t, src, at[k + 4]));
        // SAFETY: `t` proves AVX2; registers only.
        unsafe {
            lo[k] = _mm256_permute2x128_si256::<0x20>(a, b);
            hi[k] = _mm256_permute2x128_si256::<0x31>(a, b);
        }
    }
    let (a, b) = (transpose4(t, lo), transpose4(t, hi));
    [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
}

/// A zero integer vector.
#[inline(always)]
pub(super) fn zero_si(_t: AvxVnni) -> __m256i {
    // SAFETY: `_t` proves AVX.
    unsafe { _mm256_setzero_si256() }
}

/// In-lane 4×4 dword transpose: dword `j` of each 128-bit lane of output `i` is dword `i` of
/// that lane of input `j`.
#[inline(always)]
fn transpose4(_t: AvxVnni, z: [__m256i; 4]) -> [__m256i; 4] {
    // SAFETY: `_t` proves AVX2; registers only.
    unsafe {
        let t0 = _mm256_unpacklo_epi32(z[0], z[1]);
        let t1 = _mm256_unpackhi_epi32(z[0], z[1]);
        let t2 = _mm256_unpacklo_epi32(z[2], z[3]);
        let t3 = _mm256_unpackhi_epi32(z[2], z[3]);
        [
            _mm256_unpacklo_epi64(t0, t2),
            _mm256_unpackhi_epi64(t0, t2),
            _mm256_unpacklo_epi64(t1, t3),
            _mm256_unpackhi_epi64(t1, t3),
        ]
    }
}
