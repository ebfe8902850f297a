//! AVX2 (with FMA and F16C) and AVX-512 kernels for float weights (F32, F16, BF16): see
//! [`crate::quant::FloatDot`] for the contract.
//!
//! Every (weight row, token) pair has one accumulator of 8 (AVX2) or 16 (AVX-512) f32 lanes: each
//! step widens the next 8 or 16 weight elements (`vcvtph2ps` for F16, a zero-extend and shift for
//! BF16) and adds their products with the token's elements in one fused multiply-add. The lanes
//! are then summed by a fixed halving tree and the last `cols % lanes` products added one by one,
//! so a pair's result depends on `cols` only.
//!
//! A call works on blocks of up to `R` rows × `T` tokens whose accumulators stay in registers
//! (AVX2: 4 × 2 with 4 weight vectors, 12 of 16 registers; AVX-512: 4 × 4, 20 of 32): the weight
//! vectors widened for a step serve every token of the block. A decode step (one token) keeps 4
//! independent rows in flight and prefetches the rows a few blocks ahead (as the quantized decode
//! kernels do), which streams the weights at memory speed.

use std::arch::x86_64::*;

use crate::GgmlType;
use crate::quant::float_kernel::{ELEM_BF16, ELEM_F16, ELEM_F32, FloatGemmFn};
use crate::quant::prefetch_next;

/// Bytes per element of kind `E`.
const fn elem_bytes(e: u8) -> usize {
    if e == ELEM_F32 { 4 } else { 2 }
}

/// Element `j` of kind `E` at `p`, widened to f32.
///
/// # Safety
/// `p + j * elem_bytes(E)` must be readable for one element.
#[inline(always)]
unsafe fn read_elem<const E: u8>(p: *const u8, j: usize) -> f32 {
    // SAFETY: readable per the caller's contract; unaligned reads of plain integers.
    unsafe {
        let q = p.add(j * elem_bytes(E));
        match E {
            ELEM_F16 => crate::quant::fp16::f16_bits_to_f32(u16::from_le(q.cast::<u16>().read_unaligned())),
            ELEM_BF16 => crate::quant::bf16::bf16_bits_to_f32(u16::from_le(q.cast::<u16>().read_unaligned())),
            _ => f32::from_bits(u32::from_le(q.cast::<u32>().read_unaligned())),
        }
    }
}

/// Rows per register block.
const ROWS: usize = 4;

/// Generates, for one ISA, the widening load, the reduction, the register-block kernel and the
/// whole-call driver.
macro_rules! level {
    (
        $features:literal, $lanes:literal, $vec:ty, $tokens:literal,
        load = $load:ident, reduce = $reduce:ident, block = $block:ident, gemm = $gemm:ident,
        zero = $zero:path, fmadd = $fmadd:path, loadx = $loadx:path,
        blocks = [$(($r:literal, $t:literal)),*]
    ) => {
        /// Sums a whole block of `ROWS` × `TOK` pairs: `out[t * ldo + r] = w_r · x_t`.
        ///
        /// # Safety
        /// The CPU must support this level's features; `w` must hold `R` rows of `w_rb ≥ cols ·
        /// elem_bytes(E)` bytes, `x` `T` rows of `cols` floats, and `out` must be writable at
        /// `t * ldo + r` for every `r < R`, `t < T`.
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn $block<const E: u8, const R: usize, const T: usize>(
            w: *const u8,
            w_rb: usize,
            x: *const f32,
            cols: usize,
            out: *mut f32,
            ldo: usize,
        ) {
            let mut acc = [[$zero(); T]; R];
            let whole = cols / $lanes * $lanes;
            let mut k = 0;
            while k < whole {
                let mut wv = [$zero(); R];
                for (r, v) in wv.iter_mut().enumerate() {
                    // SAFETY: `k + lanes <= cols` elements of row `r` are in bounds.
                    *v = unsafe { $load::<E>(w.add(r * w_rb + k * elem_bytes(E))) };
                }
                for t in 0..T {
                    // SAFETY: `k + lanes <= cols` floats of token row `t` are in bounds.
                    let xv = unsafe { $loadx(x.add(t * cols + k)) };
                    for r in 0..R {
                        acc[r][t] = $fmadd(wv[r], xv, acc[r][t]);
                    }
                }
                k += $lanes;
            }
            for r in 0..R {
                for t in 0..T {
                    let mut s = $reduce(acc[r][t]);
                    for j in whole..cols {
                        // SAFETY: `j < cols`: in bounds of row `r` and token row `t`.
                        s += unsafe { read_elem::<E>(w.add(r * w_rb), j) * *x.add(t * cols + j) };
                    }
                    // SAFETY: `t * ldo + r` is writable (caller's contract).
                    unsafe { *out.add(t * ldo + r) = s };
                }
            }
        }

        /// The whole call: blocks of up to `ROWS` rows × `$tokens` tokens, rows outermost.
        ///
        /// # Safety
        /// The CPU must support this level's features; `w_rb == cols * elem_bytes(E)`, and `out`
        /// holds `(nt - 1) * ldo + nr` floats.
        #[target_feature(enable = $features)]
        unsafe fn $gemm<const E: u8>(w: &[u8], w_rb: usize, x: &[f32], cols: usize, out: &mut [f32], ldo: usize) {
            let (nr, nt) = (w.len() / w_rb, x.len() / cols);
            let (wp, xp, op) = (w.as_ptr(), x.as_ptr(), out.as_mut_ptr());
            for r0 in (0..nr).step_by(ROWS) {
                let rn = ROWS.min(nr - r0);
                if nt <= $tokens {
                    // A decode step streams the weights once: request the rows a few blocks on.
                    prefetch_next(&w[r0 * w_rb..(r0 + rn) * w_rb]);
                }
                for t0 in (0..nt).step_by($tokens) {
                    let tn = $tokens.min(nt - t0);
                    // SAFETY: rows r0..r0+rn and tokens t0..t0+tn are whole rows of `w` and `x`,
                    // and their outputs lie inside `out` (caller's contract).
                    unsafe {
                        let (wb, xb, ob) = (wp.add(r0 * w_rb), xp.add(t0 * cols), op.add(t0 * ldo + r0));
                        match (rn, tn) {
                            $(($r, $t) => $block::<E, $r, $t>(wb, w_rb, xb, cols, ob, ldo),)*
                            _ => unreachable!("block sizes are at most {ROWS} x {}", $tokens),
                        }
                    }
                }
            }
        }
    };
}

/// 8 elements of kind `E` at `p`, widened to f32.
///
/// # Safety
/// AVX2, FMA and F16C; 8 elements readable at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load8<const E: u8>(p: *const u8) -> __m256 {
    // SAFETY: 8 elements readable (caller's contract); unaligned loads.
    unsafe {
        match E {
            ELEM_F16 => _mm256_cvtph_ps(_mm_loadu_si128(p.cast())),
            ELEM_BF16 => {
                _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast()))))
            }
            _ => _mm256_loadu_ps(p.cast()),
        }
    }
}

/// The 8 lanes summed by a fixed tree: halves, then quarters, then the last pair.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn reduce8(v: __m256) -> f32 {
    let q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let h = _mm_add_ps(q, _mm_movehl_ps(q, q));
    _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps::<0b01>(h, h)))
}

/// 16 elements of kind `E` at `p`, widened to f32.
///
/// # Safety
/// AVX-512F (and AVX2/F16C); 16 elements readable at `p`.
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn load16<const E: u8>(p: *const u8) -> __m512 {
    // SAFETY: 16 elements readable (caller's contract); unaligned loads.
    unsafe {
        match E {
            ELEM_F16 => _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())),
            ELEM_BF16 => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(
                _mm256_loadu_si256(p.cast()),
            ))),
            _ => _mm512_loadu_ps(p.cast()),
        }
    }
}

/// The 16 lanes summed by a fixed tree: the two 256-bit halves, then [`reduce8`].
#[inline]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
fn reduce16(v: __m512) -> f32 {
    let lo = _mm512_castps512_ps256(v);
    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    reduce8(_mm256_add_ps(lo, hi))
}

level!(
    "avx2,fma,f16c",
    8,
    __m256,
    2,
    load = load8,
    reduce = reduce8,
    block = block_avx2,
    gemm = gemm_avx2,
    zero = _mm256_setzero_ps,
    fmadd = _mm256_fmadd_ps,
    loadx = _mm256_loadu_ps,
    blocks = [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (3, 2), (4, 1), (4, 2)]
);

level!(
    "avx512f,avx2,fma,f16c",
    16,
    __m512,
    4,
    load = load16,
    reduce = reduce16,
    block = block_avx512,
    gemm = gemm_avx512,
    zero = _mm512_setzero_ps,
    fmadd = _mm512_fmadd_ps,
    loadx = _mm512_loadu_ps,
    blocks = [
        (1, 1),
        (1, 2),
        (1, 3),
        (1, 4),
        (2, 1),
        (2, 2),
        (2, 3),
        (2, 4),
        (3, 1),
        (3, 2),
        (3, 3),
        (3, 4),
        (4, 1),
        (4, 2),
        (4, 3),
        (4, 4)
    ]
);

/// Wraps an unsafe level driver as a safe [`FloatGemmFn`]. Rows whose byte length does not match
/// the activations' get NaN (the contract allows any number there, never undefined behaviour).
macro_rules! safe {
    ($gemm:ident, $e:ident) => {{
        fn f(w: &[u8], w_rb: usize, x: &[f32], cols: usize, out: &mut [f32], ldo: usize) {
            if w_rb == 0 || cols == 0 {
                return;
            }
            let (nr, nt) = (w.len() / w_rb, x.len() / cols);
            if nr == 0 || nt == 0 {
                return;
            }
            if w_rb != cols * elem_bytes($e) || out.len() < (nt - 1) * ldo + nr {
                for t in 0..nt {
                    let end = (t * ldo + nr).min(out.len());
                    out.get_mut(t * ldo..end).into_iter().flatten().for_each(|o| *o = f32::NAN);
                }
                return;
            }
            // SAFETY: only handed out by `FloatDot::with_isa` after `Isa::is_supported` confirmed
            // this level's features; row lengths and the output size were checked just above.
            unsafe { $gemm::<$e>(w, w_rb, x, cols, out, ldo) }
        }
        f as FloatGemmFn
    }};
}

/// The AVX2 kernel for `ty` (`None` for a non-float type).
pub(in crate::quant) fn avx2(ty: GgmlType) -> Option<FloatGemmFn> {
    Some(match ty {
        GgmlType::F32 => safe!(gemm_avx2, ELEM_F32),
        GgmlType::F16 => safe!(gemm_avx2, ELEM_F16),
        GgmlType::BF16 => safe!(gemm_avx2, ELEM_BF16),
        _ => return None,
    })
}

/// The AVX-512 kernel for `ty` (`None` for a non-float type).
pub(in crate::quant) fn avx512(ty: GgmlType) -> Option<FloatGemmFn> {
    Some(match ty {
        GgmlType::F32 => safe!(gemm_avx512, ELEM_F32),
        GgmlType::F16 => safe!(gemm_avx512, ELEM_F16),
        GgmlType::BF16 => safe!(gemm_avx512, ELEM_BF16),
        _ => return None,
    })
}
