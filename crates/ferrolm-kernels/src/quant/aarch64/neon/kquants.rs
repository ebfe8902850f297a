//! NEON Q2_K, Q3_K, Q4_K and Q6_K kernels (weights with Q8_K activations: f32 `d`, 256 i8, 16
//! i16 sums of 16-value groups). A whole 256-value super-block is unpacked into sixteen
//! registers once and reused for every activation row of the tile. Q2_K, Q3_K and Q6_K unpack
//! into the same form ([`K16Block`]: sixteen 16-value sub-blocks, each with an integer scale)
//! and share its accumulation; Q2_K adds its minimum term.
//!
//! Exactness: a Q4_K sub-block sum is at most 32 · 15 · 127 in magnitude, times a 6-bit scale,
//! eight of them: below 2^25; a Q6_K 16-value sum is at most 16 · 32 · 127, times an i8 scale,
//! sixteen of them: below 2^28 (Q3_K's levels -4..=3 and scales -32..=31, and Q2_K's levels
//! 0..=3 and scales 0..=15, stay far below). All fit the i32 lanes.

use std::arch::aarch64::*;

use super::{Acc, I8Dot, Kernel, f16_at, f32_at, ld_s8, ld_s16, ld_u8, nibbles};
use crate::quant::QK_K;
use crate::quant::q3_k::unpack_scales_q3k;
use crate::quant::q8_act::Q8_K_BYTES;

/// Q4_K (144 bytes: f16 `d`, f16 `dmin`, 12 bytes of 6-bit scales and minimums, 128 nibble
/// bytes) · Q8_K: `Σ d_x (d Σ_j sc_j Σ q_w q_x - dmin Σ_j m_j bsum_j)`.
pub(super) struct Q4K;

/// An unpacked Q4_K super-block.
#[derive(Clone, Copy)]
pub(super) struct Q4KBlock {
    d: f32,
    dmin: f32,
    /// Sub-block scales.
    sc: [i32; 8],
    /// Sub-block minimums, as i16 lanes.
    mins: int16x8_t,
    /// Chunk `c` (32 bytes of nibbles) gives `q[4c..4c + 2]`: its low nibbles (sub-block `2c`),
    /// and `q[4c + 2..4c + 4]`: its high nibbles (sub-block `2c + 1`).
    q: [int8x16_t; 16],
}

impl Kernel for Q4K {
    const WB: usize = 144;
    const XB: usize = Q8_K_BYTES;
    type W = Q4KBlock;

    #[inline(always)]
    fn unpack(bw: &[u8]) -> Q4KBlock {
        // The 12 scale bytes as three little-endian words: scales 0..4 and minimums 0..4 are the
        // low six bits of words 0 and 1; scales and minimums 4..8 take their low four bits from
        // the nibbles of word 2 and their top two bits from the top bits of words 0 and 1.
        let word =
            |i: usize| u32::from_le_bytes([bw[4 + 4 * i], bw[5 + 4 * i], bw[6 + 4 * i], bw[7 + 4 * i]]);
        let (u0, u1, u2) = (word(0), word(1), word(2));
        const LOW6: u32 = 0x3f3f_3f3f;
        const LOW4: u32 = 0x0f0f_0f0f;
        const LOW2: u32 = 0x0303_0303;
        let sc = u64::from(u0 & LOW6) | u64::from((u2 & LOW4) | (((u0 >> 6) & LOW2) << 4)) << 32;
        let m = u64::from(u1 & LOW6) | u64::from(((u2 >> 4) & LOW4) | (((u1 >> 6) & LOW2) << 4)) << 32;
        let mut q = [ld_s8(&bw[16..]); 16];
        for c in 0..4 {
            let (lo0, hi0) = nibbles(ld_u8(&bw[16 + 32 * c..]), 0);
            let (lo1, hi1) = nibbles(ld_u8(&bw[32 + 32 * c..]), 0);
            q[4 * c..4 * c + 4].copy_from_slice(&[lo0, lo1, hi0, hi1]);
        }
        Q4KBlock {
            d: f16_at(bw),
            dmin: f16_at(&bw[2..]),
            sc: std::array::from_fn(|j| i32::from((sc >> (8 * j)) as u8)),
            // SAFETY: register-only NEON intrinsics; NEON is enabled for this module.
            mins: unsafe { vreinterpretq_s16_u16(vmovl_u8(vcreate_u8(m))) },
            q,
        }
    }

    #[inline(always)]
    fn acc<D: I8Dot>(w: &Q4KBlock, bx: &[u8], acc: &mut Acc) {
        let dx = f32_at(bx);
        let x = &bx[4..4 + QK_K];
        // SAFETY: register-only NEON intrinsics; NEON is enabled for this module.
        let (zero, mins) = unsafe {
            // Pairs of 16-value sums are the eight sub-block sums (each below 2^13 in magnitude),
            // times the minimums (below 2^6).
            let bs = vpaddq_s16(ld_s16(&bx[4 + QK_K..]), ld_s16(&bx[20 + QK_K..]));
            let lo = vmull_s16(vget_low_s16(bs), vget_low_s16(w.mins));
            (vdupq_n_s32(0), vmlal_high_s16(lo, bs, w.mins))
        };
        let mut sumi = zero;
        for c in 0..4 {
            let xc = &x[64 * c..];
            let lo = D::dot(D::dot(zero, w.q[4 * c], ld_s8(xc)), w.q[4 * c + 1], ld_s8(&xc[16..]));
            let hi = D::dot(D::dot(zero, w.q[4 * c + 2], ld_s8(&xc[32..])), w.q[4 * c + 3], ld_s8(&xc[48..]));
            // SAFETY: register-only NEON intrinsics; NEON is enabled for this module.
            sumi = unsafe { vmlaq_n_s32(vmlaq_n_s32(sumi, lo, w.sc[2 * c]), hi, w.sc[2 * c + 1]) };
        }
        acc.add(dx * w.d, sumi);
        acc.add(-dx * w.dmin, mins);
    }
}

/// A super-block as sixteen 16-value sub-blocks with integer scales: `d Σ_s sc_s Σ v_s x_s`.
#[derive(Clone, Copy)]
pub(super) struct K16Block {
    d: f32,
    /// Sub-block scales.
    sc: [i32; 16],
    /// `v[s]`: the signed levels of sub-block `s` (elements `16s..16s + 16`).
    v: [int8x16_t; 16],
}

/// Adds `d_x · w` (a [`K16Block`] against the Q8_K block `bx`) to `acc`.
#[inline(always)]
fn acc_k16<D: I8Dot>(w: &K16Block, bx: &[u8], acc: &mut Acc) {
    let x = &bx[4..4 + QK_K];
    // SAFETY: register-only NEON intrinsic; NEON is enabled for this module.
    let zero = unsafe { vdupq_n_s32(0) };
    let mut sumi = zero;
    for s in 0..16 {
        let p = D::dot(zero, w.v[s], ld_s8(&x[16 * s..]));
        // SAFETY: register-only NEON intrinsic; NEON is enabled for this module.
        sumi = unsafe { vmlaq_n_s32(sumi, p, w.sc[s]) };
    }
    acc.add(f32_at(bx) * w.d, sumi);
}

/// The four 2-bit fields of each byte of `q`: `[q & 3, (q >> 2) & 3, (q >> 4) & 3, q >> 6]`.
#[inline(always)]
fn crumbs(q: uint8x16_t) -> [uint8x16_t; 4] {
    // SAFETY: register-only NEON intrinsics; NEON is enabled for this module.
    unsafe {
        let m3 = vdupq_n_u8(3);
        [
            vandq_u8(q, m3),
            vandq_u8(vshrq_n_u8::<2>(q), m3),
            vandq_u8(vshrq_n_u8::<4>(q), m3),
            vshrq_n_u8::<6>(q),
        ]
    }
}

/// Q2_K (84 bytes: 16 bytes of 4-bit scales and minimums, 64 bytes of 2-bit levels, f16 `d`,
/// f16 `dmin`) · Q8_K: `Σ d_x (d Σ_s sc_s Σ q_w q_x - dmin Σ_s m_s bsum_s)`.
pub(super) struct Q2K;

/// An unpacked Q2_K super-block.
#[derive(Clone, Copy)]
pub(super) struct Q2KBlock {
    /// Scales and levels (0..=3).
    k16: K16Block,
    dmin: f32,
    /// Sub-block minimums, as i16 lanes (sub-blocks 0..8, 8..16).
    mins: [int16x8_t; 2],
}

impl Kernel for Q2K {
    const WB: usize = 84;
    const XB: usize = Q8_K_BYTES;
    type W = Q2KBlock;

    #[inline(always)]
    fn unpack(bw: &[u8]) -> Q2KBlock {
        let mut v = [ld_s8(bw); 16];
        // Byte `l` (0..32) of `qs[32h..]` holds in bits `2k..2k + 2` the element
        // `128h + 32k + l`: sub-block `8h + 2k + l / 16`.
        for h in 0..2 {
            for m in 0..2 {
                for (k, c) in crumbs(ld_u8(&bw[16 + 32 * h + 16 * m..])).into_iter().enumerate() {
                    // SAFETY: register-only NEON intrinsic; NEON is enabled for this module.
                    v[8 * h + 2 * k + m] = unsafe { vreinterpretq_s8_u8(c) };
                }
            }
        }
        // SAFETY: register-only NEON intrinsics; NEON is enabled for this module.
        let mins = unsafe {
            let m = vshrq_n_u8::<4>(ld_u8(bw));
            let wide = |h: uint8x8_t| vreinterpretq_s16_u16(vmovl_u8(h));
            [wide(vget_low_u8(m)), wide(vget_high_u8(m))]
        };
        let sc = std::array::from_fn(|s| i32::from(bw[s] & 0x0f));
        Q2KBlock { k16: K16Block { d: f16_at(&bw[80..]), sc, v }, dmin: f16_at(&bw[82..]), mins }
    }

    #[inline(always)]
    fn acc<D: I8Dot>(w: &Q2KBlock, bx: &[u8], acc: &mut Acc) {
        acc_k16::<D>(&w.k16, bx, acc);
        // SAFETY: register-only NEON intrinsics; NEON is enabled for this module. Each 16-value
        // sum is below 2^11 and each minimum below 2^4: the products fit i32 lanes.
        let mins = unsafe {
            let (b0, b1) = (ld_s16(&bx[4 + QK_K..]), ld_s16(&bx[20 + QK_K..]));
            let lo = vmlal_high_s16(vmull_s16(vget_low_s16(b0), vget_low_s16(w.mins[0])), b0, w.mins[0]);
            vmlal_high_s16(vmlal_s16(lo, vget_low_s16(b1), vget_low_s16(w.mins[1])), b1, w.mins[1])
        };
        acc.add(-f32_at(bx) * w.dmin, mins);
    }
}

/// Q3_K (110 bytes: 32 bytes of high bits, 64 bytes of 2-bit low bits, 12 bytes of 6-bit
/// scales, f16 `d`) · Q8_K: `Σ d_x d Σ_s (scale_s - 32) Σ q_w q_x`, `q_w` in -4..=3.
pub(super) struct Q3K;

impl Kernel for Q3K {
    const WB: usize = 110;
    const XB: usize = Q8_K_BYTES;
    type W = K16Block;

    #[inline(always)]
    fn unpack(bw: &[u8]) -> K16Block {
        let mut v = [ld_s8(bw); 16];
        // As Q2_K's levels, from `qs` at byte 32; the 32-value group `g = 4h + k` takes bit `g`
        // of `hmask[l]` as its third bit, and the levels are offset by -4.
        for h in 0..2 {
            for m in 0..2 {
                let hm = ld_u8(&bw[16 * m..]);
                for (k, c) in crumbs(ld_u8(&bw[32 + 32 * h + 16 * m..])).into_iter().enumerate() {
                    let g = (4 * h + k) as i8;
                    // SAFETY: register-only NEON intrinsics; NEON is enabled for this module. A
                    // negative shift count shifts right.
                    v[8 * h + 2 * k + m] = unsafe {
                        let four = vandq_u8(vshlq_u8(hm, vdupq_n_s8(2 - g)), vdupq_n_u8(4));
                        vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(c, four)), vdupq_n_s8(4))
                    };
                }
            }
        }
        let mut packed = [0u8; 12];
        packed.copy_from_slice(&bw[96..108]);
        let scales = unpack_scales_q3k(&packed);
        K16Block { d: f16_at(&bw[108..]), sc: scales.map(i32::from), v }
    }

    #[inline(always)]
    fn acc<D: I8Dot>(w: &K16Block, bx: &[u8], acc: &mut Acc) {
        acc_k16::<D>(w, bx, acc);
    }
}

/// Q6_K (210 bytes: 128 bytes of low nibbles, 64 bytes of high bit pairs, 16 i8 scales, f16
/// `d`) · Q8_K: `Σ d_x d Σ_s scale_s Σ (q_w - 32) q_x` over the sixteen 16-value sub-blocks.
pub(super) struct Q6K;

impl Kernel for Q6K {
    const WB: usize = 210;
    const XB: usize = Q8_K_BYTES;
    type W = K16Block;

    #[inline(always)]
    fn unpack(bw: &[u8]) -> K16Block {
        let mut v = [ld_s8(bw); 16];
        // In half `h`, byte `l` (0..32) of `ql[64h..]`, `ql[64h + 32..]` and `qh[32h..]` builds
        // the elements `128h + 32k + l`, k = 0..4: sub-block `8h + 2k + l / 16`.
        for h in 0..2 {
            for m in 0..2 {
                let ql0 = ld_u8(&bw[64 * h + 16 * m..]);
                let ql1 = ld_u8(&bw[64 * h + 32 + 16 * m..]);
                let qh = ld_u8(&bw[128 + 32 * h + 16 * m..]);
                // SAFETY: register-only NEON intrinsics; NEON is enabled for this module.
                let k4 = unsafe {
                    let (m4, m30) = (vdupq_n_u8(0x0f), vdupq_n_u8(0x30));
                    [
                        vorrq_u8(vandq_u8(ql0, m4), vandq_u8(vshlq_n_u8::<4>(qh), m30)),
                        vorrq_u8(vandq_u8(ql1, m4), vandq_u8(vshlq_n_u8::<2>(qh), m30)),
                        vorrq_u8(vshrq_n_u8::<4>(ql0), vandq_u8(qh, m30)),
                        vorrq_u8(vshrq_n_u8::<4>(ql1), vandq_u8(vshrq_n_u8::<2>(qh), m30)),
                    ]
                    .map(|q| vsubq_s8(vreinterpretq_s8_u8(q), vdupq_n_s8(32)))
                };
                for (k, vk) in k4.into_iter().enumerate() {
                    v[8 * h + 2 * k + m] = vk;
                }
            }
        }
        K16Block { d: f16_at(&bw[208..]), sc: std::array::from_fn(|s| i32::from(bw[192 + s] as i8)), v }
    }

    #[inline(always)]
    fn acc<D: I8Dot>(w: &K16Block, bx: &[u8], acc: &mut Acc) {
        acc_k16::<D>(w, bx, acc);
    }
}
