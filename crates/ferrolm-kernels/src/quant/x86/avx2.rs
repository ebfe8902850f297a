//! Register-resident AVX2/FMA/F16C kernels for the hottest decode dot products (Q4_0, Q4_1, Q5_0,
//! Q8_0 weights, and the table formats IQ4_NL and MXFP4, whose levels `pshufb` looks up).
//!
//! Same lane layout and operation order as the generic kernels in `quant/vec_dot.rs` (eight i32 lane
//! sums per 32-value block, one fused multiply-add per lane, GGML's `hsum_float_8` at the end),
//! so the results are bit-identical to theirs; only the unpacking and the accumulators stay in
//! registers instead of round-tripping through arrays.

use std::arch::x86_64::*;

use crate::quant::iq4_nl::KVALUES_IQ4NL;
use crate::quant::mxfp4::{KVALUES_MXFP4, e8m0_to_f32_half};
use crate::quant::q8_act::{Q8_0_BYTES, Q8_1_BYTES};
use crate::quant::vec_dot::{HIGH_BITS, hsum8};

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
pub(in crate::quant) fn dot_q4_0(w: &[u8], xq: &[u8]) -> f32 {
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
pub(in crate::quant) fn dot_q4_1(w: &[u8], xq: &[u8]) -> f32 {
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
pub(in crate::quant) fn dot_q8_0(w: &[u8], xq: &[u8]) -> f32 {
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
pub(in crate::quant) fn dot_q5_0(w: &[u8], xq: &[u8]) -> f32 {
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

/// Activation rows handled together by the `*_rows` kernels (as in `vec_dot.rs`).
const ROW_TILE: usize = 4;

/// The 32 signed weights of a 32-value block, in a register.
///
/// # Safety
/// `b` must be a whole block of the kernel's weight type.
#[inline(always)]
unsafe fn unpack32(kind: Kind, b: &[u8]) -> __m256i {
    // SAFETY: the caller passes a whole block: Q4_0 has 16 quant bytes at offset 2, Q5_0 16 at
    // offset 6 (after 4 high-bit bytes), Q8_0 32 at offset 2. The intrinsics are available:
    // every caller is compiled with AVX2.
    unsafe {
        match kind {
            Kind::Q4_0 => _mm256_sub_epi8(nibbles(&b[2..]), _mm256_set1_epi8(8)),
            Kind::Q5_0 => {
                let hb = |k: usize| HIGH_BITS[usize::from(b[2 + k])] as i64;
                let hi = _mm256_set_epi64x(hb(3), hb(2), hb(1), hb(0));
                _mm256_sub_epi8(_mm256_or_si256(nibbles(&b[6..]), hi), _mm256_set1_epi8(16))
            }
            Kind::Q8_0 => load32(&b[2..]),
        }
    }
}

/// The 32-value weight formats dotted with Q8_0 activations.
#[derive(Clone, Copy)]
pub(in crate::quant) enum Kind {
    Q4_0,
    Q5_0,
    Q8_0,
}

/// `out[t]` = the single-row dot of `w` with activation row `t` (rows `rb` bytes apart), for a
/// 32-value weight format dotted with Q8_0, unpacking each weight block once per tile of rows.
/// Same operations in the same order as the single-row kernels: bit-identical results.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::quant) fn dot32_rows(kind: Kind, w: &[u8], xq: &[u8], rb: usize, out: &mut [f32]) {
    let wb = match kind {
        Kind::Q4_0 => 18,
        Kind::Q5_0 => 22,
        Kind::Q8_0 => Q8_0_BYTES,
    };
    for (i, tile) in out.chunks_mut(ROW_TILE).enumerate() {
        let t0 = i * ROW_TILE;
        let mut acc = [_mm256_setzero_ps(); ROW_TILE];
        for (b, bw) in w.chunks_exact(wb).enumerate() {
            let dw = f16_at(bw);
            // SAFETY: `bw` is a whole weight block (chunks_exact).
            let wq = unsafe { unpack32(kind, bw) };
            for (j, a) in acc.iter_mut().enumerate().take(tile.len()) {
                let bx = &xq[(t0 + j) * rb + b * Q8_0_BYTES..][..Q8_0_BYTES];
                let d = _mm256_set1_ps(dw * f16_at(bx));
                // SAFETY: a Q8_0 block has 32 quant bytes after its scale.
                let xv = unsafe { load32(&bx[2..]) };
                *a = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes(wq, xv)), *a);
            }
        }
        for (o, a) in tile.iter_mut().zip(acc) {
            *o = hsum(a);
        }
    }
}

/// Q4_1 · Q8_1 for a tile of activation rows at a time; bit-identical to [`dot_q4_1`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::quant) fn dot_q4_1_rows(w: &[u8], xq: &[u8], rb: usize, out: &mut [f32]) {
    for (i, tile) in out.chunks_mut(ROW_TILE).enumerate() {
        let t0 = i * ROW_TILE;
        let mut acc = [_mm256_setzero_ps(); ROW_TILE];
        let mut summs = [0f32; ROW_TILE];
        for (b, bw) in w.chunks_exact(20).enumerate() {
            let (dw, mw) = (f16_at(bw), f16_at(&bw[2..]));
            // SAFETY: a Q4_1 block has 16 quant bytes after its two scales.
            let wq = unsafe { nibbles(&bw[4..]) };
            for j in 0..tile.len() {
                let bx = &xq[(t0 + j) * rb + b * Q8_1_BYTES..][..Q8_1_BYTES];
                summs[j] = mw.mul_add(f16_at(&bx[2..]), summs[j]);
                let d = _mm256_set1_ps(dw * f16_at(bx));
                // SAFETY: a Q8_1 block has 32 quant bytes after its two scales.
                let xv = unsafe { load32(&bx[4..]) };
                acc[j] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes(wq, xv)), acc[j]);
            }
        }
        for (j, o) in tile.iter_mut().enumerate() {
            *o = hsum(acc[j]) + summs[j];
        }
    }
}

/// The 32-value formats of 4-bit indices into a table of 16 signed levels, dotted with Q8_0
/// activations.
#[derive(Clone, Copy)]
pub(in crate::quant) enum Lut {
    /// IQ4_NL: f16 scale, then 16 bytes of indices (18 bytes).
    Iq4Nl,
    /// MXFP4: E8M0 exponent, then 16 bytes of indices (17 bytes).
    Mxfp4,
}

impl Lut {
    /// Bytes per weight block.
    const fn block_bytes(self) -> usize {
        match self {
            Lut::Iq4Nl => 18,
            Lut::Mxfp4 => 17,
        }
    }

    /// The 16 levels, in a register.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn table(self) -> __m128i {
        let t = match self {
            Lut::Iq4Nl => &KVALUES_IQ4NL,
            Lut::Mxfp4 => &KVALUES_MXFP4,
        };
        // SAFETY: `t` holds 16 bytes; the load is unaligned.
        unsafe { _mm_loadu_si128(t.as_ptr().cast()) }
    }

    /// The weight block's scale.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    fn scale(self, b: &[u8]) -> f32 {
        match self {
            Lut::Iq4Nl => f16_at(b),
            Lut::Mxfp4 => e8m0_to_f32_half(b[0]),
        }
    }

    /// The 32 levels of a weight block (`table` from [`Lut::table`]): low nibbles (elements
    /// 0..16), then high nibbles (16..32), looked up with `pshufb` as GGML's kernels do.
    ///
    /// # Safety
    /// `b` must be a whole block of this format.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn levels(self, table: __m128i, b: &[u8]) -> __m256i {
        let qs = &b[self.block_bytes() - 16..];
        debug_assert!(qs.len() >= 16);
        // SAFETY: the indices are the last 16 bytes of a whole block; the load is unaligned.
        let q = unsafe { _mm_loadu_si128(qs.as_ptr().cast()) };
        let m4 = _mm_set1_epi8(0x0f);
        let lo = _mm_shuffle_epi8(table, _mm_and_si128(q, m4));
        let hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
        _mm256_set_m128i(hi, lo)
    }
}

/// Sum of eight i32 lanes (exact: the lanes of one 32-value block are far from overflowing).
#[inline]
#[target_feature(enable = "avx2")]
fn hsum_i32(v: __m256i) -> i32 {
    let mut a = [0i32; 8];
    // SAFETY: `a` holds exactly eight i32; the store is unaligned.
    unsafe { _mm256_storeu_si256(a.as_mut_ptr().cast(), v) };
    a.iter().sum()
}

/// IQ4_NL / MXFP4 · Q8_0 with the operations of the portable kernel (`vec_dot/kquants.rs`,
/// GGML's AVX2 kernel): blocks alternate between two accumulators, which are added and reduced;
/// an odd last block is added as `d_x d_w · Σ level_w q_x` with one fused multiply-add.
/// Bit-identical to it. Lengths validated by the caller.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::quant) fn dot_lut4(lut: Lut, w: &[u8], xq: &[u8]) -> f32 {
    let wb = lut.block_bytes();
    let table = lut.table();
    let mut acc = [_mm256_setzero_ps(); 2];
    let pw = w.chunks_exact(2 * wb);
    let px = xq.chunks_exact(2 * Q8_0_BYTES);
    let (tail_w, tail_x) = (pw.remainder(), px.remainder());
    for (bw2, bx2) in pw.zip(px) {
        for (k, a) in acc.iter_mut().enumerate() {
            let (bw, bx) = (&bw2[wb * k..wb * (k + 1)], &bx2[Q8_0_BYTES * k..Q8_0_BYTES * (k + 1)]);
            let d = _mm256_set1_ps(f16_at(bx) * lut.scale(bw));
            // SAFETY: `bw` is a whole weight block, a Q8_0 block has 32 quant bytes after its scale.
            let (wq, xv) = unsafe { (lut.levels(table, bw), load32(&bx[2..])) };
            *a = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes(wq, xv)), *a);
        }
    }
    let mut sumf = hsum(_mm256_add_ps(acc[0], acc[1]));
    if tail_w.len() == wb && tail_x.len() == Q8_0_BYTES {
        let d = f16_at(tail_x) * lut.scale(tail_w);
        // SAFETY: as above, for the last blocks.
        let (wq, xv) = unsafe { (lut.levels(table, tail_w), load32(&tail_x[2..])) };
        sumf = d.mul_add(hsum_i32(lanes(wq, xv)) as f32, sumf);
    }
    sumf
}

/// [`dot_lut4`] for a tile of activation rows at a time (rows `rb` bytes apart), unpacking each
/// weight block once per tile; bit-identical to it.
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::quant) fn dot_lut4_rows(lut: Lut, w: &[u8], xq: &[u8], rb: usize, out: &mut [f32]) {
    let wb = lut.block_bytes();
    let table = lut.table();
    let nb = w.len() / wb;
    let paired = nb & !1;
    for (i, tile) in out.chunks_mut(ROW_TILE).enumerate() {
        let t0 = i * ROW_TILE;
        let mut acc = [[_mm256_setzero_ps(); 2]; ROW_TILE];
        for (b, bw) in w.chunks_exact(wb).take(paired).enumerate() {
            let dw = lut.scale(bw);
            // SAFETY: `bw` is a whole weight block (chunks_exact).
            let wq = unsafe { lut.levels(table, bw) };
            for (j, a) in acc.iter_mut().enumerate().take(tile.len()) {
                let bx = &xq[(t0 + j) * rb + b * Q8_0_BYTES..][..Q8_0_BYTES];
                let d = _mm256_set1_ps(f16_at(bx) * dw);
                // SAFETY: a Q8_0 block has 32 quant bytes after its scale.
                let xv = unsafe { load32(&bx[2..]) };
                a[b & 1] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes(wq, xv)), a[b & 1]);
            }
        }
        for (j, o) in tile.iter_mut().enumerate() {
            *o = hsum(_mm256_add_ps(acc[j][0], acc[j][1]));
        }
        if paired < nb {
            let bw = &w[paired * wb..(paired + 1) * wb];
            let dw = lut.scale(bw);
            // SAFETY: `bw` is the last whole weight block.
            let wq = unsafe { lut.levels(table, bw) };
            for (j, o) in tile.iter_mut().enumerate() {
                let bx = &xq[(t0 + j) * rb + paired * Q8_0_BYTES..][..Q8_0_BYTES];
                // SAFETY: a Q8_0 block has 32 quant bytes after its scale.
                let xv = unsafe { load32(&bx[2..]) };
                *o = (f16_at(bx) * dw).mul_add(hsum_i32(lanes(wq, xv)) as f32, *o);
            }
        }
    }
}
