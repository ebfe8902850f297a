//! A small f32 vector abstraction for writing a kernel once and compiling it per instruction-set
//! level: [`Portable`] (plain Rust on `[f32; 8]`), on x86_64 [`Avx2`] (`__m256`, with FMA and
//! F16C) and [`Avx512`] (`__m512`), and on aarch64 [`Neon`] (two `float32x4_t`).
//!
//! Every method is `unsafe`: it may only run on a CPU with the type's features. A generic kernel
//! is `#[inline(always)]` and called from a `#[target_feature]` wrapper of the same features, so
//! the methods inline into code compiled for them.

use half::f16;

/// An f32 vector of [`FVec::W`] lanes.
///
/// # Safety
/// Callers of every method must run on a CPU that has the implementing type's features; the
/// pointer methods also require `W` readable (or writable) elements.
pub(crate) trait FVec: Copy {
    /// Lanes.
    const W: usize;
    /// All lanes zero.
    unsafe fn zero() -> Self;
    /// All lanes `x`.
    unsafe fn splat(x: f32) -> Self;
    /// `W` f32s from `p` (unaligned).
    unsafe fn load(p: *const f32) -> Self;
    /// `W` f16s from `p` (unaligned), converted exactly.
    unsafe fn load_h(p: *const f16) -> Self;
    /// Stores the lanes at `p` (unaligned).
    unsafe fn store(self, p: *mut f32);
    /// Lane-wise `self + b`.
    unsafe fn add(self, b: Self) -> Self;
    /// Lane-wise `self - b`.
    unsafe fn sub(self, b: Self) -> Self;
    /// Lane-wise `self * b`.
    unsafe fn mul(self, b: Self) -> Self;
    /// Lane-wise `self / b`.
    unsafe fn div(self, b: Self) -> Self;
    /// Lane-wise maximum (`b` where either is NaN is not specified; callers pass no NaN).
    unsafe fn max(self, b: Self) -> Self;
    /// Lane-wise `self * b + c`, fused where the level has FMA.
    unsafe fn fma(self, b: Self, c: Self) -> Self;
    /// Lane-wise rounding to the nearest f16 (ties to even), back in f32.
    unsafe fn round_f16(self) -> Self;
    /// Lane-wise `eˣ`, within about 2 ulp; exactly 0 below about -87.3 (so `exp(-∞) = 0`).
    unsafe fn exp(self) -> Self;
    /// Sum of the lanes.
    unsafe fn hsum(self) -> f32;
    /// Maximum of the lanes.
    unsafe fn hmax(self) -> f32;
    /// `a · b` (equal lengths) with exactly the summation order of [`crate::simd::dot_f32`] on
    /// this level's CPUs: its AVX2 kernel on x86 levels, its portable kernel's order otherwise
    /// (the NEON level computes that order with NEON instructions, bit for bit).
    unsafe fn dot(a: &[f32], b: &[f32]) -> f32;
    /// `a · b_r` for eight rows `b_r` of `a.len()` elements each, every dot product exactly as
    /// [`FVec::dot`] computes it (levels override this to compute the eight together).
    ///
    /// # Safety
    /// The level's features; `a.len()` elements readable at each `b_r`.
    #[inline(always)]
    unsafe fn dot8(a: &[f32], b: [*const f32; 8]) -> [f32; 8] {
        // SAFETY: forwarded caller contract.
        b.map(|r| unsafe { Self::dot(a, std::slice::from_raw_parts(r, a.len())) })
    }
}

/// Cephes `expf` constants: Cody-Waite split of ln 2 and the polynomial for `e^r`, |r| ≤ ln2/2.
pub(crate) mod exp_consts {
    /// log2(e).
    pub const LOG2E: f32 = std::f32::consts::LOG2_E;
    /// High part of ln 2 (exact in few bits).
    pub const LN2_HI: f32 = 0.693_359_4;
    /// ln 2 - [`LN2_HI`].
    pub const LN2_LO: f32 = -2.121_944_4e-4;
    /// Polynomial coefficients, highest degree first: `e^r ≈ 1 + r + r²·P(r)`.
    pub const P: [f32; 6] =
        [1.987_569_1e-4, 1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 5.0e-1];
    /// Inputs below this give 0 (e^x would be subnormal).
    pub const MIN_X: f32 = -87.336_55;
    /// Inputs above this are clamped (so that 2ⁿ stays a normal number).
    pub const MAX_X: f32 = 88.0;
}

/// Asks for the cache lines of `bytes` bytes at `p` ahead of their use (x86_64; elsewhere
/// nothing). Attention kernels walk the KV cache row by row with the row stride of all KV heads,
/// a pattern the hardware prefetchers follow too late: the loads of a row then wait on memory.
#[inline(always)]
pub(crate) fn prefetch_rows<T>(p: *const T, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    for off in (0..bytes).step_by(64) {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: a prefetch is only a hint: it never faults, whatever the address, and the
        // address is computed with wrapping arithmetic (never dereferenced).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>().wrapping_add(off)) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, bytes);
}

/// Scalar `eˣ` with the same range reduction and polynomial as the vector kernels.
#[inline(always)]
pub(crate) fn exp_scalar(x: f32) -> f32 {
    use exp_consts::*;
    if x < MIN_X || x.is_nan() {
        return if x.is_nan() { x } else { 0.0 };
    }
    let x = x.min(MAX_X);
    let n = (x * LOG2E).round_ties_even();
    // Plain multiply-adds: `mul_add` is a slow library call where the CPU has no FMA, and the
    // split of ln 2 keeps `n·LN2_HI` exact without fusion.
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let mut p = P[0];
    for c in &P[1..] {
        p = p * r + c;
    }
    let y = (p * (r * r) + r) + 1.0;
    // 2^n for n in [-126, 127]: the exponent field.
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// Portable 8-lane vector: plain loops that LLVM vectorises for the baseline target.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Portable([f32; 8]);

impl Portable {
    #[inline(always)]
    fn map(self, f: impl Fn(f32) -> f32) -> Self {
        Portable(self.0.map(f))
    }

    #[inline(always)]
    fn zip(self, b: Self, f: impl Fn(f32, f32) -> f32) -> Self {
        let mut o = self.0;
        for (x, y) in o.iter_mut().zip(b.0) {
            *x = f(*x, y);
        }
        Portable(o)
    }
}

impl FVec for Portable {
    const W: usize = 8;
    #[inline(always)]
    unsafe fn zero() -> Self {
        Portable([0.0; 8])
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self {
        Portable([x; 8])
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller guarantees 8 readable f32s at `p`.
        Portable(unsafe { p.cast::<[f32; 8]>().read_unaligned() })
    }
    #[inline(always)]
    unsafe fn load_h(p: *const f16) -> Self {
        // SAFETY: the caller guarantees 8 readable f16s at `p`.
        let h = unsafe { p.cast::<[f16; 8]>().read_unaligned() };
        Portable(h.map(f16::to_f32))
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller guarantees 8 writable f32s at `p`.
        unsafe { p.cast::<[f32; 8]>().write_unaligned(self.0) }
    }
    #[inline(always)]
    unsafe fn add(self, b: Self) -> Self {
        self.zip(b, |x, y| x + y)
    }
    #[inline(always)]
    unsafe fn sub(self, b: Self) -> Self {
        self.zip(b, |x, y| x - y)
    }
    #[inline(always)]
    unsafe fn mul(self, b: Self) -> Self {
        self.zip(b, |x, y| x * y)
    }
    #[inline(always)]
    unsafe fn div(self, b: Self) -> Self {
        self.zip(b, |x, y| x / y)
    }
    #[inline(always)]
    unsafe fn max(self, b: Self) -> Self {
        self.zip(b, f32::max)
    }
    #[inline(always)]
    unsafe fn fma(self, b: Self, c: Self) -> Self {
        // Separate multiply and add: `mul_add` without hardware FMA is a slow library call.
        let mut o = self.0;
        for ((x, y), z) in o.iter_mut().zip(b.0).zip(c.0) {
            *x = *x * y + z;
        }
        Portable(o)
    }
    #[inline(always)]
    unsafe fn round_f16(self) -> Self {
        self.map(|x| f16::from_f32(x).to_f32())
    }
    #[inline(always)]
    unsafe fn exp(self) -> Self {
        self.map(exp_scalar)
    }
    #[inline(always)]
    unsafe fn hsum(self) -> f32 {
        let v = self.0;
        ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]))
    }
    #[inline(always)]
    unsafe fn hmax(self) -> f32 {
        self.0.into_iter().fold(f32::NEG_INFINITY, f32::max)
    }
    #[inline(always)]
    unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        crate::simd::dot_f32_scalar(a, b)
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use x86::{Avx2, Avx512};

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{FVec, exp_consts::*};
    use half::f16;
    use std::arch::x86_64::*;

    /// AVX2 + FMA + F16C, 8 lanes.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Avx2(__m256);

    impl FVec for Avx2 {
        const W: usize = 8;
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn zero() -> Self {
            Avx2(_mm256_setzero_ps())
        }
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn splat(x: f32) -> Self {
            Avx2(_mm256_set1_ps(x))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: the caller guarantees 8 readable f32s at `p`.
            Avx2(unsafe { _mm256_loadu_ps(p) })
        }
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn load_h(p: *const f16) -> Self {
            // SAFETY: the caller guarantees 8 readable f16s (16 bytes) at `p`.
            Avx2(_mm256_cvtph_ps(unsafe { _mm_loadu_si128(p.cast()) }))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: the caller guarantees 8 writable f32s at `p`.
            unsafe { _mm256_storeu_ps(p, self.0) }
        }
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn add(self, b: Self) -> Self {
            Avx2(_mm256_add_ps(self.0, b.0))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn sub(self, b: Self) -> Self {
            Avx2(_mm256_sub_ps(self.0, b.0))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn mul(self, b: Self) -> Self {
            Avx2(_mm256_mul_ps(self.0, b.0))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn div(self, b: Self) -> Self {
            Avx2(_mm256_div_ps(self.0, b.0))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn max(self, b: Self) -> Self {
            Avx2(_mm256_max_ps(self.0, b.0))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn fma(self, b: Self, c: Self) -> Self {
            Avx2(_mm256_fmadd_ps(self.0, b.0, c.0))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn round_f16(self) -> Self {
            Avx2(_mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(self.0)))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn exp(self) -> Self {
            let x = _mm256_min_ps(_mm256_max_ps(self.0, _mm256_set1_ps(MIN_X)), _mm256_set1_ps(MAX_X));
            let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
                x,
                _mm256_set1_ps(LOG2E),
            ));
            let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
            let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
            let mut p = _mm256_set1_ps(P[0]);
            for c in &P[1..] {
                p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(*c));
            }
            let y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0));
            let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)));
            let y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
            // Below MIN_X (including -∞): exactly 0.
            let under = _mm256_cmp_ps::<_CMP_LT_OQ>(self.0, _mm256_set1_ps(MIN_X));
            Avx2(_mm256_andnot_ps(under, y))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn hsum(self) -> f32 {
            let s = _mm_add_ps(_mm256_castps256_ps128(self.0), _mm256_extractf128_ps::<1>(self.0));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn hmax(self) -> f32 {
            let s = _mm_max_ps(_mm256_castps256_ps128(self.0), _mm256_extractf128_ps::<1>(self.0));
            let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
            _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)))
        }
        #[inline]
        #[target_feature(enable = "avx2,fma,f16c")]
        unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
            // SAFETY: AVX2 and FMA are enabled here; equal lengths (caller contract).
            unsafe { crate::simd::dot_f32_avx2(a, b) }
        }
    }

    /// AVX-512 F, 16 lanes.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Avx512(__m512);

    impl FVec for Avx512 {
        const W: usize = 16;
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn zero() -> Self {
            Avx512(_mm512_setzero_ps())
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn splat(x: f32) -> Self {
            Avx512(_mm512_set1_ps(x))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: the caller guarantees 16 readable f32s at `p`.
            Avx512(unsafe { _mm512_loadu_ps(p) })
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn load_h(p: *const f16) -> Self {
            // SAFETY: the caller guarantees 16 readable f16s (32 bytes) at `p`.
            Avx512(_mm512_cvtph_ps(unsafe { _mm256_loadu_si256(p.cast()) }))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: the caller guarantees 16 writable f32s at `p`.
            unsafe { _mm512_storeu_ps(p, self.0) }
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn add(self, b: Self) -> Self {
            Avx512(_mm512_add_ps(self.0, b.0))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn sub(self, b: Self) -> Self {
            Avx512(_mm512_sub_ps(self.0, b.0))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn mul(self, b: Self) -> Self {
            Avx512(_mm512_mul_ps(self.0, b.0))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn div(self, b: Self) -> Self {
            Avx512(_mm512_div_ps(self.0, b.0))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn max(self, b: Self) -> Self {
            Avx512(_mm512_max_ps(self.0, b.0))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn fma(self, b: Self, c: Self) -> Self {
            Avx512(_mm512_fmadd_ps(self.0, b.0, c.0))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn round_f16(self) -> Self {
            Avx512(_mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(self.0)))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn exp(self) -> Self {
            // scalef(p, n) = p·2ⁿ underflows to 0 for n ≤ -150 (and so for -∞ clamped to -104),
            // without building the exponent bits.
            let x = _mm512_min_ps(_mm512_max_ps(self.0, _mm512_set1_ps(-104.0)), _mm512_set1_ps(MAX_X));
            let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(
                x,
                _mm512_set1_ps(LOG2E),
            ));
            let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
            let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
            let mut p = _mm512_set1_ps(P[0]);
            for c in &P[1..] {
                p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(*c));
            }
            let y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0));
            let y = _mm512_scalef_ps(y, n);
            // Subnormal results are flushed to 0, as the other levels do.
            let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(self.0, _mm512_set1_ps(MIN_X));
            Avx512(_mm512_maskz_mov_ps(!under, y))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn hsum(self) -> f32 {
            let lo = _mm512_castps512_ps256(self.0);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(self.0)));
            let s = _mm256_add_ps(lo, hi);
            let s = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn hmax(self) -> f32 {
            _mm512_reduce_max_ps(self.0)
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
            // SAFETY: AVX-512 F implies AVX2 and FMA; equal lengths (caller contract).
            unsafe { crate::simd::dot_f32_avx2(a, b) }
        }
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn dot8(a: &[f32], b: [*const f32; 8]) -> [f32; 8] {
            // `dot_f32_avx2`'s arithmetic for eight rows at once: its accumulators s0|s1 and
            // s2|s3 (elements 0-15 and 16-31 of each 32-element chunk) are the two halves of
            // `lo[r]` and `hi[r]`, 8-element chunks go into s0 (the low half, the high one
            // gaining exact zeros), and its final lane sums run across rows after an 8×8
            // transpose; the scalar tail is added last, as there.
            let n = a.len();
            let (mut lo, mut hi) = ([_mm512_setzero_ps(); 8], [_mm512_setzero_ps(); 8]);
            let mut i = 0;
            // SAFETY: every load reads elements `< n` of `a` or of a row (caller contract).
            unsafe {
                while i + 32 <= n {
                    let (qa, qb) =
                        (_mm512_loadu_ps(a.as_ptr().add(i)), _mm512_loadu_ps(a.as_ptr().add(i + 16)));
                    for r in 0..8 {
                        lo[r] = _mm512_fmadd_ps(qa, _mm512_loadu_ps(b[r].add(i)), lo[r]);
                        hi[r] = _mm512_fmadd_ps(qb, _mm512_loadu_ps(b[r].add(i + 16)), hi[r]);
                    }
                    i += 32;
                }
                while i + 8 <= n {
                    let qa = _mm512_maskz_loadu_ps(0xff, a.as_ptr().add(i));
                    for (l, row) in lo.iter_mut().zip(b) {
                        *l = _mm512_fmadd_ps(qa, _mm512_maskz_loadu_ps(0xff, row.add(i)), *l);
                    }
                    i += 8;
                }
            }
            let half = |x: __m512, upper: bool| {
                let d = _mm512_castps_pd(x);
                _mm256_castpd_ps(if upper {
                    _mm512_extractf64x4_pd::<1>(d)
                } else {
                    _mm512_castpd512_pd256(d)
                })
            };
            let v: [__m256; 8] = std::array::from_fn(|r| {
                let s01 = _mm256_add_ps(half(lo[r], false), half(lo[r], true));
                let s23 = _mm256_add_ps(half(hi[r], false), half(hi[r], true));
                _mm256_add_ps(s01, s23)
            });
            // Transpose: c[l] holds lane l of every row.
            let t = |x, y, lohi: bool| if lohi { _mm256_unpackhi_ps(x, y) } else { _mm256_unpacklo_ps(x, y) };
            let (t0, t1, t2, t3) =
                (t(v[0], v[1], false), t(v[0], v[1], true), t(v[2], v[3], false), t(v[2], v[3], true));
            let (t4, t5, t6, t7) =
                (t(v[4], v[5], false), t(v[4], v[5], true), t(v[6], v[7], false), t(v[6], v[7], true));
            let (u0, u1) = (_mm256_shuffle_ps::<0x44>(t0, t2), _mm256_shuffle_ps::<0xee>(t0, t2));
            let (u2, u3) = (_mm256_shuffle_ps::<0x44>(t1, t3), _mm256_shuffle_ps::<0xee>(t1, t3));
            let (u4, u5) = (_mm256_shuffle_ps::<0x44>(t4, t6), _mm256_shuffle_ps::<0xee>(t4, t6));
            let (u6, u7) = (_mm256_shuffle_ps::<0x44>(t5, t7), _mm256_shuffle_ps::<0xee>(t5, t7));
            let c = [
                _mm256_permute2f128_ps::<0x20>(u0, u4),
                _mm256_permute2f128_ps::<0x20>(u1, u5),
                _mm256_permute2f128_ps::<0x20>(u2, u6),
                _mm256_permute2f128_ps::<0x20>(u3, u7),
                _mm256_permute2f128_ps::<0x31>(u0, u4),
                _mm256_permute2f128_ps::<0x31>(u1, u5),
                _mm256_permute2f128_ps::<0x31>(u2, u6),
                _mm256_permute2f128_ps::<0x31>(u3, u7),
            ];
            let s = _mm256_add_ps(
                _mm256_add_ps(_mm256_add_ps(c[0], c[4]), _mm256_add_ps(c[1], c[5])),
                _mm256_add_ps(_mm256_add_ps(c[2], c[6]), _mm256_add_ps(c[3], c[7])),
            );
            let mut out = [0f32; 8];
            // SAFETY: `out` holds 8 floats; the tail reads elements `i..n` of `a` and the rows.
            unsafe {
                _mm256_storeu_ps(out.as_mut_ptr(), s);
                for (o, row) in out.iter_mut().zip(b) {
                    for (k, &x) in a.iter().enumerate().skip(i) {
                        *o += x * *row.add(k);
                    }
                }
            }
            out
        }
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) use arm::Neon;

#[cfg(target_arch = "aarch64")]
mod arm {
    use super::{FVec, exp_consts::*};
    use half::f16;
    use std::arch::aarch64::*;
    use std::arch::asm;

    /// NEON, 8 lanes in two 4-lane registers (lanes 0-3, lanes 4-7).
    ///
    /// Eight lanes rather than four: the generic kernels then have the width of [`super::Portable`]
    /// (so [`FVec::hsum`] adds in its order), and every vector operation issues two independent
    /// instructions, which the two to four FP pipes of current Arm cores run side by side.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct Neon(float32x4_t, float32x4_t);

    /// A lane-wise method from a two-operand NEON intrinsic.
    macro_rules! lanewise {
        ($name:ident, $op:ident) => {
            #[inline]
            #[target_feature(enable = "neon")]
            unsafe fn $name(self, b: Self) -> Self {
                Neon($op(self.0, b.0), $op(self.1, b.1))
            }
        };
    }

    /// `eˣ` on four lanes: [`super::exp_scalar`]'s range reduction and polynomial, with fused
    /// multiply-adds (as the x86 levels).
    #[inline]
    #[target_feature(enable = "neon")]
    fn exp4(x0: float32x4_t) -> float32x4_t {
        let x = vminq_f32(vmaxq_f32(x0, vdupq_n_f32(MIN_X)), vdupq_n_f32(MAX_X));
        let n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(LOG2E)));
        let r = vfmsq_f32(x, n, vdupq_n_f32(LN2_HI));
        let r = vfmsq_f32(r, n, vdupq_n_f32(LN2_LO));
        let mut p = vdupq_n_f32(P[0]);
        for c in &P[1..] {
            p = vfmaq_f32(vdupq_n_f32(*c), p, r);
        }
        let y = vaddq_f32(vfmaq_f32(r, p, vmulq_f32(r, r)), vdupq_n_f32(1.0));
        // `n` is a whole number in [-126, 127]: the conversion is exact, 2ⁿ a normal number.
        let e = vshlq_n_s32::<23>(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)));
        let y = vmulq_f32(y, vreinterpretq_f32_s32(e));
        // Below MIN_X (including -∞): exactly 0.
        let under = vcltq_f32(x0, vdupq_n_f32(MIN_X));
        vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(y), under))
    }

    /// Four f16s (their bits) to f32, exactly: `fcvtl`, part of base NEON. (The `vcvt_f32_f16`
    /// intrinsic is stable only since Rust 1.94, after this crate's minimum version.)
    #[inline]
    #[target_feature(enable = "neon")]
    fn f16x4_to_f32(h: uint16x4_t) -> float32x4_t {
        let f: float32x4_t;
        // SAFETY: `fcvtl` reads and writes only the two vector registers named (NEON is
        // enabled for this function).
        unsafe {
            asm!(
                "fcvtl {f:v}.4s, {h:v}.4h",
                f = lateout(vreg) f,
                h = in(vreg) h,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        f
    }

    /// Four f32s rounded to f16 bits (to nearest, ties to even: the default rounding mode),
    /// with `fcvtn`.
    #[inline]
    #[target_feature(enable = "neon")]
    fn f32x4_to_f16(x: float32x4_t) -> uint16x4_t {
        let h: uint16x4_t;
        // SAFETY: `fcvtn` reads and writes only the two vector registers named.
        unsafe {
            asm!(
                "fcvtn {h:v}.4h, {x:v}.4s",
                h = lateout(vreg) h,
                x = in(vreg) x,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        h
    }

    /// Four lanes rounded to the nearest f16 (ties to even) and back.
    #[inline]
    #[target_feature(enable = "neon")]
    fn round_f16_4(x: float32x4_t) -> float32x4_t {
        f16x4_to_f32(f32x4_to_f16(x))
    }

    impl FVec for Neon {
        const W: usize = 8;
        #[inline]
        #[target_feature(enable = "neon")]
        unsafe fn zero() -> Self {
            Neon(vdupq_n_f32(0.0), vdupq_n_f32(0.0))
        }
        #[inline]
        #[target_feature(enable = "neon")]
        unsafe fn splat(x: f32) -> Self {
            Neon(vdupq_n_f32(x), vdupq_n_f32(x))
        }
        #[inline]
        #[target_feature(enable = "neon")]
        unsafe fn load(p: *const f32) -> Self {
            // SAFETY: the caller guarantees 8 readable f32s at `p`; `ld1` needs no alignment
            // beyond the element's.
            unsafe { Neon(vld1q_f32(p), vld1q_f32(p.add(4))) }
        }
        #[inline]
        #[target_feature(enable = "neon")]
        unsafe fn load_h(p: *const f16) -> Self {
            // SAFETY: the caller guarantees 8 readable f16s (16 bytes) at `p`; f16 has the size
            // and alignment of u16.
            let h = unsafe { vld1q_u16(p.cast()) };
            Neon(f16x4_to_f32(vget_low_u16(h)), f16x4_to_f32(vget_high_u16(h)))
        }
        #[inline]
        #[target_feature(enable = "neon")]
        unsafe fn store(self, p: *mut f32) {
            // SAFETY: the caller guarantees 8 writable f32s at `p`.
            unsafe {
                vst1q_f32(p, self.0);
                vst1q_f32(p.add(4), self.1);
            }
        }
        lanewise!(add, vaddq_f32);
        lanewise!(sub, vsubq_f32);
        lanewise!(mul, vmulq_f32);
        lanewise!(div, vdivq_f32);
        lanewise!(max, vmaxq_f32);
        #[inline]
        #[target_feature(enable = "neon")]
        unsafe fn fma(self, b: Self, c: Self) -> Self {
            Neon(vfmaq_f32(c.0, self.0, b.0), vfmaq_f32(c.1, self.1, b.1))
        }
        #[inline]
        #[target_feature(enable = "neon")]
        unsafe fn round_f16(self) -> Self {
            Neon(round_f16_4(self.0), round_f16_4(self.1))
        }
        #[inline]
        #[target_feature(enable = "neon")]
        unsafe fn exp(self) -> Self {
            Neon(exp4(self.0), exp4(self.1))
        }
        #[inline]
        #[target_feature(enable = "neon")]
        unsafe fn hsum(self) -> f32 {
            // ((v0+v4) + (v1+v5)) + ((v2+v6) + (v3+v7)), as the portable level.
            let s = vaddq_f32(self.0, self.1);
            vpadds_f32(vget_low_f32(vpaddq_f32(s, s)))
        }
        #[inline]
        #[target_feature(enable = "neon")]
        unsafe fn hmax(self) -> f32 {
            vmaxvq_f32(vmaxq_f32(self.0, self.1))
        }
        #[inline]
        #[target_feature(enable = "neon")]
        unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
            // SAFETY: NEON is enabled here; equal lengths (caller contract).
            unsafe { crate::simd::dot_f32_neon(a, b) }
        }
    }
}
