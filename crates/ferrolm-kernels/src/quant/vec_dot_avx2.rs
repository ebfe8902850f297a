//! Register-resident AVX2/FMA/F16C kernels for the hottest decode dot products (Q4_0, Q4_1, Q5_0,
//! Q8_0 weights).
//!
//! Same lane layout and operation order as the generic kernels in `vec_dot.rs` (eight i32 lane
//! sums per 32-value block, one fused multiply-add per lane, GGML's `hsum_float_8` at the end),
//! so the results are bit-identical to theirs; only the unpacking and the accumulators stay in
//! registers instead of round-tripping through arrays.

use std::arch::x86_64::*;

use super::super::q8_act::{Q8_0_BYTES, Q8_1_BYTES};
use super::{HIGH_BITS, hsum8};

/// Little-endian f16 at `b[0..2]`, as f32, in one F16C instruction.
#[inline]
#[target_feature(enable = "f16c")]
fn f16_at(b: &[u8]) -> f32 {
    let h = i32::from(u16::from_le_bytes([b[0], b[1]]));
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)))
}

/// Eight i32 lane sums of `w·x` over 32 signed bytes (lane `l`: elements `4l..4l+4`).
#[inline]
#[target_feature(enable = "avx2")]
fn lanes(w: __m256i, x: __m256i) -> __m256i {
    let p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    _mm256_madd_epi16(p16, _mm256_set1_epi16(1))
}

/// Loads 32 bytes.
///
/// # Safety
/// `b.len() >= 32`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn load32(b: &[u8]) -> __m256i {
    debug_assert!(b.len() >= 32);
    // SAFETY: the caller guarantees 32 readable bytes; the load is unaligned.
    unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
}

/// The 32 nibbles of 16 bytes: low nibbles (elements 0..16), then high nibbles (16..32).
///
/// # Safety
/// `b.len() >= 16`.
#[inline]
#[target_feature(enable = "avx2")]
unsafe fn nibbles(b: &[u8]) -> __m256i {
    debug_assert!(b.len() >= 16);
    // SAFETY: the caller guarantees 16 readable bytes; the load is unaligned.
    let lo = unsafe { _mm_loadu_si128(b.as_ptr().cast()) };
    let hi = _mm_srli_epi16(lo, 4);
    _mm256_and_si256(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(0x0f))
}

/// Horizontal sum of eight f32 lanes in `hsum_float_8` order.
#[inline]
#[target_feature(enable = "avx2")]
fn hsum(acc: __m256) -> f32 {
    let mut a = [0f32; 8];
    // SAFETY: `a` holds exactly eight f32; the store is unaligned.
    unsafe { _mm256_storeu_ps(a.as_mut_ptr(), acc) };
    hsum8(&a)
}

/// Q4_0 · Q8_0. Lengths validated by the caller (whole blocks, same count).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q4_0(w: &[u8], xq: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (bw, bx) in w.chunks_exact(18).zip(xq.chunks_exact(Q8_0_BYTES)) {
        let d = _mm256_set1_ps(f16_at(bw) * f16_at(bx));
        // SAFETY: a Q4_0 block has 16 quant bytes after its scale, a Q8_0 block 32.
        let (wq, xv) = unsafe { (_mm256_sub_epi8(nibbles(&bw[2..]), _mm256_set1_epi8(8)), load32(&bx[2..])) };
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes(wq, xv)), acc);
    }
    hsum(acc)
}

/// Q4_1 · Q8_1: `Σ d_w d_x Σ q_w q_x`, plus `Σ m_w s_x` kept apart and added last.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q4_1(w: &[u8], xq: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    let mut summs = 0f32;
    for (bw, bx) in w.chunks_exact(20).zip(xq.chunks_exact(Q8_1_BYTES)) {
        summs = f16_at(&bw[2..]).mul_add(f16_at(&bx[2..]), summs);
        let d = _mm256_set1_ps(f16_at(bw) * f16_at(bx));
        // SAFETY: a Q4_1 block has 16 quant bytes after its two scales, a Q8_1 block 32.
        let (wq, xv) = unsafe { (nibbles(&bw[4..]), load32(&bx[4..])) };
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes(wq, xv)), acc);
    }
    hsum(acc) + summs
}

/// Q8_0 · Q8_0.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q8_0(w: &[u8], xq: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (bw, bx) in w.chunks_exact(Q8_0_BYTES).zip(xq.chunks_exact(Q8_0_BYTES)) {
        let d = _mm256_set1_ps(f16_at(bw) * f16_at(bx));
        // SAFETY: both Q8_0 blocks have 32 quant bytes after their scale.
        let (wq, xv) = unsafe { (load32(&bw[2..]), load32(&bx[2..])) };
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes(wq, xv)), acc);
    }
    hsum(acc)
}

/// Q5_0 · Q8_0: `Σ d_w d_x Σ (q_w − 16) q_x` with 5-bit `q_w` (fifth bits through a table).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) fn dot_q5_0(w: &[u8], xq: &[u8]) -> f32 {
    let mut acc = _mm256_setzero_ps();
    for (bw, bx) in w.chunks_exact(22).zip(xq.chunks_exact(Q8_0_BYTES)) {
        let d = _mm256_set1_ps(f16_at(bw) * f16_at(bx));
        let hb = |k: usize| HIGH_BITS[usize::from(bw[2 + k])] as i64;
        let hi = _mm256_set_epi64x(hb(3), hb(2), hb(1), hb(0));
        // SAFETY: a Q5_0 block has 16 quant bytes after its scale and high bits, a Q8_0 block 32.
        let (lo, xv) = unsafe { (nibbles(&bw[6..]), load32(&bx[2..])) };
        let wq = _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(16));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes(wq, xv)), acc);
    }
    hsum(acc)
}
