//! Integer dot products of quantized weight rows with 8-bit quantized activations, as GGML's CPU
//! backend does for quantized matmuls: the activation row is quantized once to the weight type's
//! "vec_dot type" ([`vec_dot_type`], [`quantize_activations`]) and every weight row is then dotted
//! with it in integers ([`vec_dot_q`]).
//!
//! The arithmetic mirrors GGML's x86 AVX2 kernels (`ggml_vec_dot_*` in the x86 CPU backend):
//!
//! - integer parts are exact: each block (or super-block) yields eight i32 lanes, lane `l` holding
//!   the (scaled) sums of elements `4l..4l+4` of every 32-value group, as `maddubs`/`madd` leave
//!   them;
//! - each lane is converted to f32 and accumulated as `acc[l] = fma(d, lane, acc[l])` with the
//!   block's combined scale `d` (`d_w · d_x`, in f32);
//! - the eight accumulators are reduced as `hsum_float_8` does:
//!   `((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7))`;
//! - Q4_1 and Q5_1 add `Σ m_w · s_x` (accumulated separately), Q4_K adds
//!   `Σ -(d_x · dmin) · Σ m · bsum` (four lanes, reduced as `(a0+a2) + (a1+a3)`), Q5_K adds the
//!   same term accumulated in one scalar, Q2_K accumulates it into the eight main lanes;
//! - IQ4_NL and MXFP4 alternate two sets of eight accumulators between consecutive blocks
//!   (summed lane-wise before the reduction), a last odd block added as a scalar.
//!
//! Q5_1, Q2_K, Q3_K, Q5_K and IQ4_XS have no hand-written AVX2 kernel: their portable kernels
//! (Q5_1 here, the others in `vec_dot/kquants.rs`) follow the operation order of GGML's AVX2
//! kernels and are compiled for AVX2 like the others. IQ4_NL and MXFP4 have one (`x86/avx2.rs`,
//! levels looked up with `pshufb`), bit-identical to their portable kernels.
//!
//! With AVX2+FMA (detected at run time) the kernels are compiled for AVX2 and use fused
//! multiply-adds, reproducing GGML's AVX2 results bit for bit (except Q6_K, whose current GGML
//! kernel folds the -32 offset into the block sums and so splits its terms differently: a few
//! ulps apart). The portable path uses fused
//! multiply-adds only where the target has them natively; otherwise it rounds the product
//! separately (an ulp-level difference in the per-block accumulation).

use super::fp16::f16_bits_to_f32;
use super::q4_k::{K_SCALE_SIZE, scale_min_k4};
use super::q8_act::{
    Q8_0_BYTES, Q8_1_BYTES, Q8_K_BYTES, QK8, quantize_block_q8_0, quantize_block_q8_1, quantize_block_q8_k,
};
#[cfg(target_arch = "x86_64")]
use super::x86::avx2;
use super::{QK_K, QuantError, check_len};
use crate::GgmlType;

/// The 8-bit type GGML quantizes activations to before dotting them with weights of type `ty`:
/// Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4 → Q8_0; Q4_1, Q5_1 → Q8_1; Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
/// IQ4_XS → Q8_K. `None` for float types (which use the f32 path, [`super::dot_f32`]) and for types
/// without an integer kernel here.
pub fn vec_dot_type(ty: GgmlType) -> Option<GgmlType> {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL | MXFP4 => Some(Q8_0),
        Q4_1 | Q5_1 => Some(Q8_1),
        Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | IQ4_XS => Some(Q8_K),
        _ => None,
    }
}

/// Bytes of the quantized form of `n` activations for weight type `ty` (in its
/// [`vec_dot_type`]); `None` if `ty` has no vec_dot type or `n` is not a whole number of blocks.
pub fn act_row_bytes(ty: GgmlType, n: usize) -> Option<usize> {
    let vt = vec_dot_type(ty)?;
    let block = vt.block_size();
    if !n.is_multiple_of(block) {
        return None;
    }
    (n / block).checked_mul(vt.type_size())
}

/// Quantizes an activation row `x` for a dot product with weights of type `ty` (the WEIGHT
/// type), writing its [`vec_dot_type`] form into `out`.
///
/// `x.len()` must be a whole number of blocks of that type and `out.len()` must equal
/// [`act_row_bytes`]`(ty, x.len())`.
pub fn quantize_activations(ty: GgmlType, x: &[f32], out: &mut [u8]) -> Result<(), QuantError> {
    let vt = vec_dot_type(ty).ok_or(QuantError::UnsupportedType(ty))?;
    check_len(vt, x.len(), out.len())?;
    #[cfg(target_arch = "x86_64")]
    if crate::simd::has_avx2_fma() {
        // SAFETY: AVX2 and FMA were detected on this CPU; lengths validated above.
        unsafe { quantize_avx2(vt, x, out) };
        return Ok(());
    }
    quantize_any(vt, x, out);
    Ok(())
}

/// Quantizes whole blocks of the activation type `vt` (Q8_0, Q8_1 or Q8_K); lengths validated.
#[inline(always)]
pub(super) fn quantize_any(vt: GgmlType, x: &[f32], out: &mut [u8]) {
    // Dispatching on the type outside the loop keeps the block quantizer inlined in it.
    // The loops are written out (not a block function passed by value) so that each block
    // quantizer is inlined, and vectorised, in the caller's target features.
    match vt {
        GgmlType::Q8_1 => {
            for (xb, ob) in x.chunks_exact(QK8).zip(out.chunks_exact_mut(Q8_1_BYTES)) {
                quantize_block_q8_1(xb, ob);
            }
        }
        GgmlType::Q8_K => {
            for (xb, ob) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q8_K_BYTES)) {
                quantize_block_q8_k(xb, ob);
            }
        }
        _ => {
            for (xb, ob) in x.chunks_exact(QK8).zip(out.chunks_exact_mut(Q8_0_BYTES)) {
                quantize_block_q8_0(xb, ob);
            }
        }
    }
}

/// [`quantize_any`] compiled for AVX2+FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn quantize_avx2(vt: GgmlType, x: &[f32], out: &mut [u8]) {
    quantize_any(vt, x, out);
}

/// Dot product of one weight row `w_row` of type `ty` with an activation row `xq` quantized by
/// [`quantize_activations`] for the same `ty`.
///
/// The row length is implied by `xq`; `w_row` must hold exactly as many elements of `ty`.
pub fn vec_dot_q(ty: GgmlType, w_row: &[u8], xq: &[u8]) -> Result<f32, QuantError> {
    check_dot(ty, w_row, xq)?;
    #[cfg(target_arch = "x86_64")]
    if crate::simd::has_avx2_fma_f16c() {
        // SAFETY: AVX2, FMA and F16C were detected on this CPU; lengths validated above.
        return Ok(unsafe { vec_dot_avx2(ty, w_row, xq) });
    }
    Ok(vec_dot_any::<PORTABLE_FMA, false>(ty, w_row, xq))
}

/// [`vec_dot_q`] of one weight row with several activation rows at once: `xq` holds
/// `out.len()` rows of equal length back to back, and `out[t]` receives exactly what
/// `vec_dot_q(ty, w_row, row t)` returns (same operations in the same order). Each weight block
/// is unpacked once for a tile of rows, which is what makes prompt processing cheaper than a
/// loop of single dot products.
pub fn vec_dot_q_rows(ty: GgmlType, w_row: &[u8], xq: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    let n = out.len();
    if n == 0 {
        return Ok(());
    }
    let rb = xq.len() / n;
    if rb * n != xq.len() {
        return Err(QuantError::BadLength { ty, elements: n, bytes: xq.len(), expected: rb * n });
    }
    check_dot(ty, w_row, &xq[..rb])?;
    #[cfg(target_arch = "x86_64")]
    if crate::simd::has_avx2_fma_f16c() {
        // SAFETY: AVX2, FMA and F16C were detected on this CPU; lengths validated above.
        unsafe { vec_dot_rows_avx2(ty, w_row, xq, rb, out) };
        return Ok(());
    }
    vec_dot_rows_any::<PORTABLE_FMA, false>(ty, w_row, xq, rb, out);
    Ok(())
}

/// Checks that `w_row` and the activation row `xq` have matching lengths for `ty`.
pub(super) fn check_dot(ty: GgmlType, w_row: &[u8], xq: &[u8]) -> Result<(), QuantError> {
    let vt = vec_dot_type(ty).ok_or(QuantError::UnsupportedType(ty))?;
    let (vblock, vsize) = (vt.block_size(), vt.type_size());
    if !xq.len().is_multiple_of(vsize) {
        return Err(QuantError::BadLength {
            ty: vt,
            elements: xq.len() / vsize * vblock,
            bytes: xq.len(),
            expected: xq.len() / vsize * vsize,
        });
    }
    let n = xq.len() / vsize * vblock;
    check_len(ty, n, w_row.len())
}

/// [`vec_dot_rows_any`] compiled for AVX2+FMA, with fused multiply-adds.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn vec_dot_rows_avx2(ty: GgmlType, w: &[u8], xq: &[u8], rb: usize, out: &mut [f32]) {
    // The calls below are safe here: this function is compiled with AVX2, FMA and F16C.
    match ty {
        GgmlType::Q4_0 => avx2::dot32_rows(avx2::Kind::Q4_0, w, xq, rb, out),
        GgmlType::Q5_0 => avx2::dot32_rows(avx2::Kind::Q5_0, w, xq, rb, out),
        GgmlType::Q8_0 => avx2::dot32_rows(avx2::Kind::Q8_0, w, xq, rb, out),
        GgmlType::Q4_1 => avx2::dot_q4_1_rows(w, xq, rb, out),
        GgmlType::IQ4_NL => avx2::dot_lut4_rows(avx2::Lut::Iq4Nl, w, xq, rb, out),
        GgmlType::MXFP4 => avx2::dot_lut4_rows(avx2::Lut::Mxfp4, w, xq, rb, out),
        _ => vec_dot_rows_any::<true, true>(ty, w, xq, rb, out),
    }
}

/// Activation rows handled together by [`vec_dot_q_rows`].
const ROW_TILE: usize = 4;

/// Several-row dot products; lengths already validated.
#[inline(always)]
pub(super) fn vec_dot_rows_any<const FMA: bool, const AVX2: bool>(
    ty: GgmlType,
    w: &[u8],
    xq: &[u8],
    rb: usize,
    out: &mut [f32],
) {
    use GgmlType::*;
    match ty {
        Q4_0 => dot32_rows::<FMA, AVX2>(w, xq, rb, out, 18, |b| nibbles(&b[2..], 8)),
        Q5_0 => dot32_rows::<FMA, AVX2>(w, xq, rb, out, 22, unpack_q5_0),
        Q8_0 => dot32_rows::<FMA, AVX2>(w, xq, rb, out, Q8_0_BYTES, unpack_q8_0),
        Q4_1 => dot32_q8_1_rows::<FMA, AVX2>(w, xq, rb, out, 20, |b| nibbles(&b[4..], 0)),
        Q5_1 => dot32_q8_1_rows::<FMA, AVX2>(w, xq, rb, out, 24, unpack_q5_1),
        _ => {
            for (t, o) in out.iter_mut().enumerate() {
                *o = vec_dot_any::<FMA, AVX2>(ty, w, &xq[t * rb..(t + 1) * rb]);
            }
        }
    }
}

/// [`dot32_q8_0`] for a tile of activation rows at a time.
#[inline(always)]
fn dot32_rows<const FMA: bool, const AVX2: bool>(
    w: &[u8],
    xq: &[u8],
    rb: usize,
    out: &mut [f32],
    wb: usize,
    unpack: impl Fn(&[u8]) -> [i8; 32],
) {
    for (i, tile) in out.chunks_mut(ROW_TILE).enumerate() {
        let t0 = i * ROW_TILE;
        let mut acc = [[0f32; 8]; ROW_TILE];
        for (b, bw) in w.chunks_exact(wb).enumerate() {
            let (wq, dw) = (unpack(bw), f16_at::<AVX2>(bw));
            for (j, a) in acc.iter_mut().enumerate().take(tile.len()) {
                let bx = &xq[(t0 + j) * rb + b * Q8_0_BYTES..][..Q8_0_BYTES];
                let lanes = lanes8::<AVX2>(&wq, as_i8(&bx[2..]));
                acc8::<FMA>(a, dw * f16_at::<AVX2>(bx), &lanes);
            }
        }
        for (o, a) in tile.iter_mut().zip(&acc) {
            *o = hsum8(a);
        }
    }
}

/// [`dot32_q8_1`] for a tile of activation rows at a time.
#[inline(always)]
fn dot32_q8_1_rows<const FMA: bool, const AVX2: bool>(
    w: &[u8],
    xq: &[u8],
    rb: usize,
    out: &mut [f32],
    wb: usize,
    unpack: impl Fn(&[u8]) -> [i8; 32],
) {
    for (i, tile) in out.chunks_mut(ROW_TILE).enumerate() {
        let t0 = i * ROW_TILE;
        let mut acc = [[0f32; 8]; ROW_TILE];
        let mut summs = [0f32; ROW_TILE];
        for (b, bw) in w.chunks_exact(wb).enumerate() {
            let (wq, dw, mw) = (unpack(bw), f16_at::<AVX2>(bw), f16_at::<AVX2>(&bw[2..]));
            for j in 0..tile.len() {
                let bx = &xq[(t0 + j) * rb + b * Q8_1_BYTES..][..Q8_1_BYTES];
                summs[j] = madd::<FMA>(mw, f16_at::<AVX2>(&bx[2..]), summs[j]);
                let lanes = lanes8::<AVX2>(&wq, as_i8(&bx[4..]));
                acc8::<FMA>(&mut acc[j], dw * f16_at::<AVX2>(bx), &lanes);
            }
        }
        for (j, o) in tile.iter_mut().enumerate() {
            *o = hsum8(&acc[j]) + summs[j];
        }
    }
}

/// Whether the portable path fuses multiply-adds: only where the target has hardware FMA (always
/// off x86_64; on x86_64 when compiled with `+fma`), so that `mul_add` never becomes a libm call.
pub(super) const PORTABLE_FMA: bool = !cfg!(target_arch = "x86_64") || cfg!(target_feature = "fma");

/// [`vec_dot_any`] compiled for AVX2+FMA, with fused multiply-adds.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn vec_dot_avx2(ty: GgmlType, w: &[u8], xq: &[u8]) -> f32 {
    match ty {
        // The calls are safe here: this function is compiled with AVX2, FMA and F16C.
        GgmlType::Q4_0 => avx2::dot_q4_0(w, xq),
        GgmlType::Q4_1 => avx2::dot_q4_1(w, xq),
        GgmlType::Q8_0 => avx2::dot_q8_0(w, xq),
        GgmlType::Q5_0 => avx2::dot_q5_0(w, xq),
        GgmlType::IQ4_NL => avx2::dot_lut4(avx2::Lut::Iq4Nl, w, xq),
        GgmlType::MXFP4 => avx2::dot_lut4(avx2::Lut::Mxfp4, w, xq),
        _ => vec_dot_any::<true, true>(ty, w, xq),
    }
}

/// Row dot product for a supported weight type; lengths already validated.
#[inline(always)]
pub(super) fn vec_dot_any<const FMA: bool, const AVX2: bool>(ty: GgmlType, w: &[u8], xq: &[u8]) -> f32 {
    use GgmlType::*;
    match ty {
        Q4_0 => dot_q4_0::<FMA, AVX2>(w, xq),
        Q4_1 => dot_q4_1::<FMA, AVX2>(w, xq),
        Q5_0 => dot_q5_0::<FMA, AVX2>(w, xq),
        Q5_1 => dot32_q8_1::<FMA, AVX2>(w, xq, 24, unpack_q5_1),
        Q8_0 => dot_q8_0::<FMA, AVX2>(w, xq),
        Q2_K => kquants::dot_q2_k::<FMA, AVX2>(w, xq),
        Q3_K => kquants::dot_q3_k::<FMA, AVX2>(w, xq),
        Q4_K => dot_q4_k::<FMA, AVX2>(w, xq),
        Q5_K => kquants::dot_q5_k::<FMA, AVX2>(w, xq),
        Q6_K => dot_q6_k::<FMA, AVX2>(w, xq),
        IQ4_NL => kquants::dot_iq4_nl::<FMA, AVX2>(w, xq),
        IQ4_XS => kquants::dot_iq4_xs::<FMA, AVX2>(w, xq),
        MXFP4 => kquants::dot_mxfp4::<FMA, AVX2>(w, xq),
        _ => 0.0,
    }
}

/// `a · b + c`, fused when `FMA`.
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA { a.mul_add(b, c) } else { a * b + c }
}

/// `acc[l] = madd(d, lanes[l] as f32, acc[l])` for the eight lanes.
#[inline(always)]
fn acc8<const FMA: bool>(acc: &mut [f32; 8], d: f32, lanes: &[i32; 8]) {
    for l in 0..8 {
        acc[l] = madd::<FMA>(d, lanes[l] as f32, acc[l]);
    }
}

/// GGML's `hsum_float_8`: `((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7))`.
#[inline(always)]
pub(in crate::quant) fn hsum8(a: &[f32; 8]) -> f32 {
    let r = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (r[0] + r[2]) + (r[1] + r[3])
}

/// Eight lanes of `Σ w·x` over 32 values, lane `l` summing elements `4l..4l+4`.
#[inline(always)]
fn lanes8<const AVX2: bool>(w: &[i8; 32], x: &[i8]) -> [i32; 8] {
    let x = &x[..32];
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        // SAFETY: `AVX2` is only true inside functions compiled for AVX2 that run after
        // run-time detection; `x` has 32 elements (sliced above).
        return unsafe { lanes8_avx2(w, x) };
    }
    let mut p = [0i32; 32];
    for j in 0..32 {
        p[j] = i32::from(w[j]) * i32::from(x[j]);
    }
    let mut s = [0i32; 8];
    for l in 0..8 {
        s[l] = (p[4 * l] + p[4 * l + 1]) + (p[4 * l + 2] + p[4 * l + 3]);
    }
    s
}

/// [`lanes8`] with `maddubs`/`madd`, as GGML's `mul_sum_i8_pairs_float`: `|w| · sign(x, w)` in
/// 16-bit pairs, then pairs of pairs in 32 bits. Exact for `|w| <= 128`, `|x| <= 127`
/// (pair sums stay below 2^15), which holds for every weight format here and for activations
/// from [`quantize_activations`].
///
/// # Safety
/// The CPU must support AVX2; `x.len() >= 32`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn lanes8_avx2(w: &[i8; 32], x: &[i8]) -> [i32; 8] {
    use std::arch::x86_64::*;
    let mut out = [0i32; 8];
    // SAFETY: `w` is 32 bytes and `x` at least 32 (caller contract): both unaligned 256-bit loads
    // are in bounds, as is the 256-bit store into the 8 i32s of `out`; AVX2 is available.
    unsafe {
        let vw = _mm256_loadu_si256(w.as_ptr().cast());
        let vx = _mm256_loadu_si256(x.as_ptr().cast());
        let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(vw, vw), _mm256_sign_epi8(vx, vw));
        let p32 = _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
        _mm256_storeu_si256(out.as_mut_ptr().cast(), p32);
    }
    out
}

/// Reinterprets bytes as signed quants.
#[inline(always)]
fn as_i8(b: &[u8]) -> &[i8] {
    // SAFETY: `u8` and `i8` have the same size and alignment and every bit pattern is valid for
    // both, so the slice is reinterpreted in place with the same length.
    unsafe { std::slice::from_raw_parts(b.as_ptr().cast::<i8>(), b.len()) }
}

/// Little-endian f16 at `b[0..2]`, as f32: one F16C instruction inside the AVX2 kernels
/// (which are only entered after detecting F16C), a few integer operations elsewhere.
#[inline(always)]
fn f16_at<const AVX2: bool>(b: &[u8]) -> f32 {
    let bits = u16::from_le_bytes([b[0], b[1]]);
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        use std::arch::x86_64::{_mm_cvtph_ps, _mm_cvtsi32_si128, _mm_cvtss_f32};
        // SAFETY: `AVX2` is only true inside functions compiled for AVX2, FMA and F16C that are
        // called after run-time detection of all three; the intrinsics read only registers.
        return unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits)))) };
    }
    f16_bits_to_f32(bits)
}

/// Unpacks 16 nibble bytes into 32 values: low nibbles first, then high nibbles, minus `off`.
#[inline(always)]
fn nibbles(qs: &[u8], off: i8) -> [i8; 32] {
    let qs = &qs[..16];
    let mut w = [0i8; 32];
    for j in 0..16 {
        w[j] = (qs[j] & 0x0f) as i8 - off;
        w[j + 16] = (qs[j] >> 4) as i8 - off;
    }
    w
}

/// Shared loop of the 32-value formats dotted with Q8_0: `wb`-byte weight blocks whose scale is
/// the f16 at offset 0 and whose values `unpack` returns.
#[inline(always)]
fn dot32_q8_0<const FMA: bool, const AVX2: bool>(
    w: &[u8],
    xq: &[u8],
    wb: usize,
    unpack: impl Fn(&[u8]) -> [i8; 32],
) -> f32 {
    let mut acc = [0f32; 8];
    for (bw, bx) in w.chunks_exact(wb).zip(xq.chunks_exact(Q8_0_BYTES)) {
        let d = f16_at::<AVX2>(bw) * f16_at::<AVX2>(bx);
        let lanes = lanes8::<AVX2>(&unpack(bw), as_i8(&bx[2..]));
        acc8::<FMA>(&mut acc, d, &lanes);
    }
    hsum8(&acc)
}

/// Q4_0 · Q8_0: `Σ d_w d_x Σ (q_w - 8) q_x`.
#[inline(always)]
fn dot_q4_0<const FMA: bool, const AVX2: bool>(w: &[u8], xq: &[u8]) -> f32 {
    dot32_q8_0::<FMA, AVX2>(w, xq, 18, |b| nibbles(&b[2..], 8))
}

/// Q5_0 · Q8_0: `Σ d_w d_x Σ (q_w - 16) q_x` with 5-bit `q_w`.
#[inline(always)]
fn dot_q5_0<const FMA: bool, const AVX2: bool>(w: &[u8], xq: &[u8]) -> f32 {
    dot32_q8_0::<FMA, AVX2>(w, xq, 22, unpack_q5_0)
}

/// The 32 signed values of a Q5_0 block.
#[inline(always)]
fn unpack_q5_0(b: &[u8]) -> [i8; 32] {
    add_high_bits(nibbles(&b[6..], 16), &b[2..6])
}

/// The 32 unsigned 5-bit values of a Q5_1 block.
#[inline(always)]
fn unpack_q5_1(b: &[u8]) -> [i8; 32] {
    add_high_bits(nibbles(&b[8..], 0), &b[4..8])
}

/// Adds 16 to `v[j]` where bit `j` of the little-endian `u32` `qh` is set.
#[inline(always)]
fn add_high_bits(mut v: [i8; 32], qh: &[u8]) -> [i8; 32] {
    // The fifth bits, eight values at a time through a table (branch-free, vectorisable).
    let mut hi = [0u8; 32];
    for (h, &byte) in hi.chunks_exact_mut(8).zip(&qh[..4]) {
        h.copy_from_slice(&HIGH_BITS[usize::from(byte)].to_le_bytes());
    }
    for (x, h) in v.iter_mut().zip(hi) {
        *x += h as i8;
    }
    v
}

/// The 32 values of a Q8_0 block.
#[inline(always)]
fn unpack_q8_0(b: &[u8]) -> [i8; 32] {
    let mut v = [0i8; 32];
    v.copy_from_slice(as_i8(&b[2..34]));
    v
}

/// For each byte value, eight bytes that are 16 where the corresponding bit is set.
pub(super) const HIGH_BITS: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut v = 0;
    while v < 256 {
        let mut j = 0;
        while j < 8 {
            if v >> j & 1 == 1 {
                t[v] |= 16 << (8 * j);
            }
            j += 1;
        }
        v += 1;
    }
    t
};

/// Q8_0 · Q8_0: `Σ d_w d_x Σ q_w q_x`.
#[inline(always)]
fn dot_q8_0<const FMA: bool, const AVX2: bool>(w: &[u8], xq: &[u8]) -> f32 {
    dot32_q8_0::<FMA, AVX2>(w, xq, Q8_0_BYTES, unpack_q8_0)
}

/// Q4_1 · Q8_1: `Σ (d_w d_x) Σ q_w q_x + Σ m_w s_x`, the second sum kept apart and added last.
#[inline(always)]
fn dot_q4_1<const FMA: bool, const AVX2: bool>(w: &[u8], xq: &[u8]) -> f32 {
    dot32_q8_1::<FMA, AVX2>(w, xq, 20, |b| nibbles(&b[4..], 0))
}

/// Shared loop of the 32-value formats with a minimum dotted with Q8_1 (Q4_1, Q5_1): `wb`-byte
/// weight blocks with the f16 scale at offset 0, the f16 minimum at offset 2 and the unsigned
/// values `unpack` returns; `Σ (d_w d_x) Σ q_w q_x + Σ m_w s_x`, the second sum kept apart.
#[inline(always)]
fn dot32_q8_1<const FMA: bool, const AVX2: bool>(
    w: &[u8],
    xq: &[u8],
    wb: usize,
    unpack: impl Fn(&[u8]) -> [i8; 32],
) -> f32 {
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (bw, bx) in w.chunks_exact(wb).zip(xq.chunks_exact(Q8_1_BYTES)) {
        summs = madd::<FMA>(f16_at::<AVX2>(&bw[2..]), f16_at::<AVX2>(&bx[2..]), summs);
        let d = f16_at::<AVX2>(bw) * f16_at::<AVX2>(bx);
        let lanes = lanes8::<AVX2>(&unpack(bw), as_i8(&bx[4..]));
        acc8::<FMA>(&mut acc, d, &lanes);
    }
    hsum8(&acc) + summs
}

/// Q8_K block fields: `(d, qs, bsums)`.
#[inline(always)]
fn q8k_parts(bx: &[u8]) -> (f32, &[i8], [i16; 16]) {
    let d = f32::from_le_bytes([bx[0], bx[1], bx[2], bx[3]]);
    let mut bsums = [0i16; 16];
    for (s, b) in bsums.iter_mut().zip(bx[4 + QK_K..Q8_K_BYTES].chunks_exact(2)) {
        *s = i16::from_le_bytes([b[0], b[1]]);
    }
    (d, as_i8(&bx[4..4 + QK_K]), bsums)
}

/// Q4_K · Q8_K, as GGML's AVX2 kernel: per super-block eight i32 lanes of
/// `Σ_sub sc · Σ q_w q_x` scaled by `d_x · d_w`, plus the minimum term
/// `-(d_x · dmin) · Σ m · bsum` in four lanes (pairs of sub-blocks), the two parts reduced
/// separately and added last.
#[inline(always)]
fn dot_q4_k<const FMA: bool, const AVX2: bool>(w: &[u8], xq: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    let mut acc_m = [0f32; 4];
    for (bw, bx) in w.chunks_exact(144).zip(xq.chunks_exact(Q8_K_BYTES)) {
        let (dx, q8, bsums) = q8k_parts(bx);
        let d = dx * f16_at::<AVX2>(bw);
        let dmin = -dx * f16_at::<AVX2>(&bw[2..]);
        let mut packed = [0u8; K_SCALE_SIZE];
        packed.copy_from_slice(&bw[4..16]);
        let mut sc = [0i32; 8];
        let mut m = [0i32; 8];
        for j in 0..8 {
            let (s, mm) = scale_min_k4(j, &packed);
            sc[j] = i32::from(s);
            m[j] = i32::from(mm);
        }
        // Minimums: bsums of each 32-value sub-block, paired into four lanes.
        for k in 0..4 {
            let q8s = |j: usize| i32::from(bsums[2 * j]) + i32::from(bsums[2 * j + 1]);
            let prod = m[2 * k] * q8s(2 * k) + m[2 * k + 1] * q8s(2 * k + 1);
            acc_m[k] = madd::<FMA>(dmin, prod as f32, acc_m[k]);
        }
        let mut sumi = [0i32; 8];
        for (c, qs) in bw[16..144].chunks_exact(32).enumerate() {
            let mut lo = [0i8; 32];
            let mut hi = [0i8; 32];
            for l in 0..32 {
                lo[l] = (qs[l] & 0x0f) as i8;
                hi[l] = (qs[l] >> 4) as i8;
            }
            let pl = lanes8::<AVX2>(&lo, &q8[64 * c..]);
            let ph = lanes8::<AVX2>(&hi, &q8[64 * c + 32..]);
            for l in 0..8 {
                sumi[l] += sc[2 * c] * pl[l] + sc[2 * c + 1] * ph[l];
            }
        }
        acc8::<FMA>(&mut acc, d, &sumi);
    }
    let m = (acc_m[0] + acc_m[2]) + (acc_m[1] + acc_m[3]);
    hsum8(&acc) + m
}

/// Q6_K · Q8_K, as GGML's AVX2 kernel: per super-block eight i32 lanes of
/// `Σ_sub sc · Σ (q_w - 32) q_x` (lanes 0..4 of each 32-value group belong to its first 16-value
/// sub-block, lanes 4..8 to the second), scaled by `d_x · d_w`.
#[inline(always)]
fn dot_q6_k<const FMA: bool, const AVX2: bool>(w: &[u8], xq: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for (bw, bx) in w.chunks_exact(210).zip(xq.chunks_exact(Q8_K_BYTES)) {
        let (dx, q8, _) = q8k_parts(bx);
        let d = dx * f16_at::<AVX2>(&bw[208..]);
        let scales = as_i8(&bw[192..208]);
        let mut sumi = [0i32; 8];
        for h in 0..2 {
            let ql = &bw[64 * h..64 * h + 64];
            let qh = &bw[128 + 32 * h..128 + 32 * h + 32];
            let mut v = [[0i8; 32]; 4];
            for l in 0..32 {
                let hb = qh[l];
                v[0][l] = ((ql[l] & 0x0f) | ((hb & 3) << 4)) as i8 - 32;
                v[1][l] = ((ql[l + 32] & 0x0f) | (((hb >> 2) & 3) << 4)) as i8 - 32;
                v[2][l] = ((ql[l] >> 4) | (((hb >> 4) & 3) << 4)) as i8 - 32;
                v[3][l] = ((ql[l + 32] >> 4) | (((hb >> 6) & 3) << 4)) as i8 - 32;
            }
            for (k, vk) in v.iter().enumerate() {
                let g = 4 * h + k;
                let p = lanes8::<AVX2>(vk, &q8[32 * g..]);
                let (s0, s1) = (i32::from(scales[2 * g]), i32::from(scales[2 * g + 1]));
                for l in 0..4 {
                    sumi[l] += s0 * p[l];
                    sumi[l + 4] += s1 * p[l + 4];
                }
            }
        }
        acc8::<FMA>(&mut acc, d, &sumi);
    }
    hsum8(&acc)
}

mod kquants;

#[cfg(test)]
mod tests;
