//! Integer dot products of Q2_K, Q3_K, Q5_K and IQ4_XS weights with Q8_K activations, and of
//! IQ4_NL and MXFP4 weights with Q8_0 activations.
//!
//! Each kernel follows the structure of GGML's x86 AVX2 kernel for the type: exact i32 lanes
//! (lane `l` of a 32-value group sums its elements `4l..4l+4`, as `maddubs`/`madd` leave them;
//! for 16-value sub-blocks lanes 0..4 carry the first sub-block's scale and lanes 4..8 the
//! second's), scaled by the combined f32 block scale and accumulated with [`madd`] into eight f32
//! lanes reduced by [`hsum8`]. No partial sum in these kernels can overflow or saturate: weight
//! levels are at most 127 in magnitude and Q8 quants at most 127.

use super::{Q8_0_BYTES, Q8_K_BYTES, acc8, as_i8, f16_at, hsum8, lanes8, madd, q8k_parts};
use crate::quant::as_array;
use crate::quant::iq4_nl::iq4_levels;
use crate::quant::iq4_xs::unpack_scales_iq4xs;
use crate::quant::mxfp4::{e8m0_to_f32_half, mxfp4_levels};
use crate::quant::q3_k::unpack_scales_q3k;
use crate::quant::q4_k::{K_SCALE_SIZE, scale_min_k4};

/// Adds `s0 · p[l]` to lanes 0..4 and `s1 · p[l]` to lanes 4..8 (a 32-value group made of two
/// 16-value sub-blocks with scales `s0` and `s1`).
#[inline(always)]
fn add_halves(sumi: &mut [i32; 8], p: &[i32; 8], s0: i32, s1: i32) {
    for l in 0..4 {
        sumi[l] += s0 * p[l];
        sumi[l + 4] += s1 * p[l + 4];
    }
}

/// Q2_K · Q8_K: per super-block, the minimum term `-(d_x · dmin) · (m[2l] · bsum[2l] +
/// m[2l+1] · bsum[2l+1])` is accumulated into lane `l` first, then the eight lanes of
/// `Σ_sub sc · Σ q_w q_x` scaled by `d_x · d`.
#[inline(always)]
pub(super) fn dot_q2_k<const FMA: bool, const AVX2: bool>(w: &[u8], xq: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for (bw, bx) in w.chunks_exact(84).zip(xq.chunks_exact(Q8_K_BYTES)) {
        let (dx, q8, bsums) = q8k_parts(bx);
        let d = dx * f16_at::<AVX2>(&bw[80..]);
        let dmin = -dx * f16_at::<AVX2>(&bw[82..]);
        let scales = &bw[..16];
        let mut prod = [0i32; 8];
        for (l, p) in prod.iter_mut().enumerate() {
            let m = |j: usize| i32::from(scales[j] >> 4) * i32::from(bsums[j]);
            *p = m(2 * l) + m(2 * l + 1);
        }
        acc8::<FMA>(&mut acc, dmin, &prod);
        let mut sumi = [0i32; 8];
        for (h, q) in bw[16..80].chunks_exact(32).enumerate() {
            for k in 0..4 {
                let g = 4 * h + k;
                let mut v = [0i8; 32];
                for (o, &b) in v.iter_mut().zip(q) {
                    *o = ((b >> (2 * k)) & 3) as i8;
                }
                let p = lanes8::<AVX2>(&v, &q8[32 * g..]);
                let sc = |j: usize| i32::from(scales[j] & 0x0f);
                add_halves(&mut sumi, &p, sc(2 * g), sc(2 * g + 1));
            }
        }
        acc8::<FMA>(&mut acc, d, &sumi);
    }
    hsum8(&acc)
}

/// Q3_K · Q8_K: per super-block eight lanes of `Σ_sub (s - 32) · Σ q_w q_x` (`q_w` in -4..=3)
/// scaled by `d_x · d`.
#[inline(always)]
pub(super) fn dot_q3_k<const FMA: bool, const AVX2: bool>(w: &[u8], xq: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for (bw, bx) in w.chunks_exact(110).zip(xq.chunks_exact(Q8_K_BYTES)) {
        let (dx, q8, _) = q8k_parts(bx);
        let d = dx * f16_at::<AVX2>(&bw[108..]);
        let mut packed = [0u8; 12];
        packed.copy_from_slice(&bw[96..108]);
        let scales = unpack_scales_q3k(&packed);
        let hmask = &bw[..32];
        let mut sumi = [0i32; 8];
        for (h, q) in bw[32..96].chunks_exact(32).enumerate() {
            for k in 0..4 {
                // Group `g` of 32 values takes its high bits from bit `g` of `hmask`.
                let g = 4 * h + k;
                let mut v = [0i8; 32];
                for ((o, &b), &hm) in v.iter_mut().zip(q).zip(hmask) {
                    let low = ((b >> (2 * k)) & 3) as i8;
                    *o = low - 4 + 4 * ((hm >> g) & 1) as i8;
                }
                let p = lanes8::<AVX2>(&v, &q8[32 * g..]);
                add_halves(&mut sumi, &p, i32::from(scales[2 * g]), i32::from(scales[2 * g + 1]));
            }
        }
        acc8::<FMA>(&mut acc, d, &sumi);
    }
    hsum8(&acc)
}

/// Q5_K · Q8_K: per super-block eight lanes of `Σ_sub sc · Σ q_w q_x` scaled by `d_x · d`, plus
/// the minimum term `-(d_x · dmin) · Σ m · bsum` accumulated in one f32 and added last.
#[inline(always)]
pub(super) fn dot_q5_k<const FMA: bool, const AVX2: bool>(w: &[u8], xq: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    let mut summs = 0f32;
    for (bw, bx) in w.chunks_exact(176).zip(xq.chunks_exact(Q8_K_BYTES)) {
        let (dx, q8, bsums) = q8k_parts(bx);
        let d = dx * f16_at::<AVX2>(bw);
        let dmin = -dx * f16_at::<AVX2>(&bw[2..]);
        let mut packed = [0u8; K_SCALE_SIZE];
        packed.copy_from_slice(&bw[4..16]);
        let mut sc = [0i32; 8];
        let mut msum = 0i32;
        for (j, s) in sc.iter_mut().enumerate() {
            let (scale, m) = scale_min_k4(j, &packed);
            *s = i32::from(scale);
            msum += i32::from(m) * (i32::from(bsums[2 * j]) + i32::from(bsums[2 * j + 1]));
        }
        // |msum| <= 63 · 256 · 127 < 2^24: exact in f32.
        summs = madd::<FMA>(dmin, msum as f32, summs);
        let qh = &bw[16..48];
        let mut sumi = [0i32; 8];
        for (c, qs) in bw[48..176].chunks_exact(32).enumerate() {
            let mut lo = [0i8; 32];
            let mut hi = [0i8; 32];
            for l in 0..32 {
                lo[l] = ((qs[l] & 0x0f) | (((qh[l] >> (2 * c)) & 1) << 4)) as i8;
                hi[l] = ((qs[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4)) as i8;
            }
            let pl = lanes8::<AVX2>(&lo, &q8[64 * c..]);
            let ph = lanes8::<AVX2>(&hi, &q8[64 * c + 32..]);
            for l in 0..8 {
                sumi[l] += sc[2 * c] * pl[l] + sc[2 * c + 1] * ph[l];
            }
        }
        acc8::<FMA>(&mut acc, d, &sumi);
    }
    hsum8(&acc) + summs
}

/// IQ4_XS · Q8_K: per super-block eight lanes of `Σ_sub (ls - 32) · Σ level_w q_x` scaled by
/// `d · d_x`.
#[inline(always)]
pub(super) fn dot_iq4_xs<const FMA: bool, const AVX2: bool>(w: &[u8], xq: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    for (bw, bx) in w.chunks_exact(136).zip(xq.chunks_exact(Q8_K_BYTES)) {
        let (dx, q8, _) = q8k_parts(bx);
        let d = f16_at::<AVX2>(bw) * dx;
        let scales = unpack_scales_iq4xs(u16::from_le_bytes([bw[2], bw[3]]), as_array(&bw[4..8]));
        let mut sumi = [0i32; 8];
        for (j, qs) in bw[8..136].chunks_exact(16).enumerate() {
            let p = lanes8::<AVX2>(&iq4_levels(as_array(qs)), &q8[32 * j..]);
            let s = i32::from(scales[j]);
            for l in 0..8 {
                sumi[l] += s * p[l];
            }
        }
        acc8::<FMA>(&mut acc, d, &sumi);
    }
    hsum8(&acc)
}

/// IQ4_NL · Q8_0: blocks alternate between two sets of eight lanes (`acc[l] += d_x d_w · lane`),
/// which are added lane-wise and reduced; an odd last block is added as
/// `d_x d_w · Σ level_w q_x`.
#[inline(always)]
pub(super) fn dot_iq4_nl<const FMA: bool, const AVX2: bool>(w: &[u8], xq: &[u8]) -> f32 {
    dot_lut4_q8_0::<FMA, AVX2, 18>(w, xq, f16_at::<AVX2>, |b| iq4_levels(as_array(&b[2..18])))
}

/// MXFP4 · Q8_0, as GGML's AVX2 kernel (the same loop as IQ4_NL's): the weight scale is the E8M0
/// exponent's `2^(e - 128)` and the levels are the doubled E2M1 values.
#[inline(always)]
pub(super) fn dot_mxfp4<const FMA: bool, const AVX2: bool>(w: &[u8], xq: &[u8]) -> f32 {
    dot_lut4_q8_0::<FMA, AVX2, 17>(w, xq, |b| e8m0_to_f32_half(b[0]), |b| mxfp4_levels(as_array(&b[1..17])))
}

/// The loop of GGML's AVX2 kernels for the 32-value formats of 4-bit table indices dotted with
/// Q8_0 (IQ4_NL, MXFP4): `WB`-byte weight blocks with the scale `scale` reads and the levels
/// `levels` unpacks. Blocks alternate between two sets of eight lanes
/// (`acc[l] += d_x d_w · lane`), which are added lane-wise and reduced; an odd last block is
/// added as `d_x d_w · Σ level_w q_x`.
#[inline(always)]
fn dot_lut4_q8_0<const FMA: bool, const AVX2: bool, const WB: usize>(
    w: &[u8],
    xq: &[u8],
    scale: impl Fn(&[u8]) -> f32,
    levels: impl Fn(&[u8]) -> [i8; 32],
) -> f32 {
    let mut acc = [[0f32; 8]; 2];
    let pw = w.chunks_exact(2 * WB);
    let px = xq.chunks_exact(2 * Q8_0_BYTES);
    let (tail_w, tail_x) = (pw.remainder(), px.remainder());
    for (bw2, bx2) in pw.zip(px) {
        for (k, a) in acc.iter_mut().enumerate() {
            let (bw, bx) = (&bw2[WB * k..WB * (k + 1)], &bx2[Q8_0_BYTES * k..Q8_0_BYTES * (k + 1)]);
            let d = f16_at::<AVX2>(bx) * scale(bw);
            let lanes = lanes8::<AVX2>(&levels(bw), as_i8(&bx[2..]));
            acc8::<FMA>(a, d, &lanes);
        }
    }
    let mut sum = [0f32; 8];
    for (l, s) in sum.iter_mut().enumerate() {
        *s = acc[0][l] + acc[1][l];
    }
    let mut sumf = hsum8(&sum);
    if tail_w.len() == WB && tail_x.len() == Q8_0_BYTES {
        let d = f16_at::<AVX2>(tail_x) * scale(tail_w);
        let sumi: i32 =
            levels(tail_w).iter().zip(as_i8(&tail_x[2..])).map(|(&a, &b)| i32::from(a) * i32::from(b)).sum();
        sumf = madd::<FMA>(d, sumi as f32, sumf);
    }
    sumf
}
