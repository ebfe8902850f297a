//! aarch64 NEON kernels of [`super::KvKernels`] and NEON forms of the row quantizers of
//! [`super::KvBlocks`]:
//!
//! - scores: the Q8_0·Q8_0 and Q4_0·Q8_0 GEMM kernels of the quantized matmuls
//!   (`quant/aarch64/neon.rs`), at [`Isa::Neon`] (`smull` + `sadalp`) or [`Isa::NeonDotprod`]
//!   (`sdot`), each key block unpacked once for four query rows;
//! - conversions to f32: bytes widened to i32 in registers, converted and scaled, exactly as the
//!   portable conversion (one rounding of `q · d`);
//! - quantizers: the portable quantizers' operations lane by lane, so the bytes are the same on
//!   every input (NaNs and infinities included).
//!
//! Built only when NEON is enabled at compile time (the aarch64 baseline).

use std::arch::aarch64::*;

use half::f16;

use super::{DotsArgs, KvBlocks, ToF32Args, dots_with};
use crate::Isa;
use crate::quant::fp16::f16_bits_to_f32;
use crate::quant::q8_act::{Q8_0_BYTES, QK8};

/// Scores with the plain NEON matmul kernels.
///
/// # Safety
/// The CPU must support NEON (every CPU that runs this build does); arguments checked by
/// [`super::KvKernels::dots`].
pub(super) unsafe fn dots(a: &mut DotsArgs<'_>) {
    dots_at(a, Isa::Neon);
}

/// Scores with the `sdot` matmul kernels.
///
/// # Safety
/// The CPU must support NEON and dotprod (checked by [`super::KvKernels::for_isa`] before it
/// hands this function out); arguments checked by [`super::KvKernels::dots`].
pub(super) unsafe fn dots_dotprod(a: &mut DotsArgs<'_>) {
    dots_at(a, Isa::NeonDotprod);
}

/// The score loop over the GEMM kernel of level `isa` for the keys' type: one key row (the
/// "weight" row) against a tile of query rows per call.
fn dots_at(a: &mut DotsArgs<'_>, isa: Isa) {
    let (_, _, gemm) = crate::quant::aarch64::neon::kernels(a.ty.ggml_type(), isa)
        .expect("Q8_0 and Q4_0 have NEON kernels at both levels");
    dots_with(a, |key, q, qb, out| gemm(key, key.len(), q, qb, out, 1));
}

/// Conversion of rows of blocks to f32.
///
/// # Safety
/// The CPU must support NEON; arguments checked by [`super::KvKernels::rows_to_f32`].
#[target_feature(enable = "neon")]
pub(super) unsafe fn rows_to_f32(a: &mut ToF32Args<'_>) {
    let rb = a.ty.row_bytes(a.cols);
    for i in 0..a.rows {
        let src = &a.src[i * a.stride..i * a.stride + rb];
        to_f32(a.ty, src, &mut a.dst[i * a.dst_stride..i * a.dst_stride + a.cols]);
    }
}

/// Converts whole blocks to f32 (`src` exactly the blocks of `dst.len()` values), bit for bit as
/// the portable conversion.
#[target_feature(enable = "neon")]
pub(super) fn to_f32(ty: KvBlocks, src: &[u8], dst: &mut [f32]) {
    let bb = ty.block_bytes();
    for (b, out) in src.chunks_exact(bb).zip(dst.chunks_exact_mut(QK8)) {
        // The scale as the portable conversion gets it (NaNs quieted alike).
        let d = f16_bits_to_f32(u16::from_le_bytes([b[0], b[1]]));
        let q = match ty {
            KvBlocks::Q8_0 => {
                let q = &b[2..Q8_0_BYTES];
                // SAFETY: `q` has 32 bytes (sliced above): two 16-byte loads.
                unsafe { [vld1q_s8(q.as_ptr().cast()), vld1q_s8(q.as_ptr().add(16).cast())] }
            }
            KvBlocks::Q4_0 => {
                let q = &b[2..18];
                // SAFETY: `q` has 16 bytes (sliced above).
                let q = unsafe { vld1q_u8(q.as_ptr()) };
                // Low nibbles are values 0..16, high nibbles 16..32; each minus 8.
                let lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f)));
                let hi = vreinterpretq_s8_u8(vshrq_n_u8::<4>(q));
                [vsubq_s8(lo, vdupq_n_s8(8)), vsubq_s8(hi, vdupq_n_s8(8))]
            }
        };
        store_scaled(q, d, out);
    }
}

/// Stores `q[k] · d` for the 32 signed bytes of `q` into `out[..32]`.
#[inline]
#[target_feature(enable = "neon")]
fn store_scaled(q: [int8x16_t; 2], d: f32, out: &mut [f32]) {
    let out = &mut out[..QK8];
    for (h, q) in q.into_iter().enumerate() {
        let w = [vmovl_s8(vget_low_s8(q)), vmovl_s8(vget_high_s8(q))];
        for (p, w) in w.into_iter().enumerate() {
            let v = [vmovl_s16(vget_low_s16(w)), vmovl_s16(vget_high_s16(w))];
            for (k, v) in v.into_iter().enumerate() {
                let f = vmulq_n_f32(vcvtq_f32_s32(v), d);
                // SAFETY: `16h + 8p + 4k + 4 <= 32 = out.len()`: the store stays inside `out`.
                unsafe { vst1q_f32(out.as_mut_ptr().add(16 * h + 8 * p + 4 * k), f) };
            }
        }
    }
}

/// The 32 values of a block as eight registers.
#[inline]
#[target_feature(enable = "neon")]
fn load32(x: &[f32]) -> [float32x4_t; 8] {
    let x = &x[..QK8];
    // SAFETY: `x` has 32 floats (sliced above); load `k` reads floats `4k..4k + 4`.
    std::array::from_fn(|k| unsafe { vld1q_f32(x.as_ptr().add(4 * k)) })
}

/// `max|x|` over the registers, NaNs skipped (`fmaxnm`), 0 when none is larger: the portable
/// quantizers' `a > m` comparisons, which keep the running maximum for a NaN.
#[inline]
#[target_feature(enable = "neon")]
fn abs_max(v: &[float32x4_t; 8]) -> f32 {
    let m = v.iter().fold(vdupq_n_f32(0.0), |m, &x| vmaxnmq_f32(m, vabsq_f32(x)));
    vmaxnmvq_f32(m)
}

/// Narrows four registers of small integers (each in the i8 range) to 16 bytes, in order.
#[inline]
#[target_feature(enable = "neon")]
fn narrow16(r: &[int32x4_t]) -> int8x16_t {
    let lo = vcombine_s16(vmovn_s32(r[0]), vmovn_s32(r[1]));
    let hi = vcombine_s16(vmovn_s32(r[2]), vmovn_s32(r[3]));
    vcombine_s8(vmovn_s16(lo), vmovn_s16(hi))
}

/// Q8_0 rows as [`crate::quant::q8_act`]'s quantizer writes them (`d = max|x| / 127`,
/// `q = clamp(nearest_int(x · 127 / max|x|), ±127)`), bit for bit. Whole blocks; `out` holds
/// exactly their bytes.
#[target_feature(enable = "neon")]
pub(super) fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(QK8).zip(out.chunks_exact_mut(Q8_0_BYTES)) {
        let v = load32(xb);
        let amax = abs_max(&v);
        let d = amax / 127.0;
        let id = vdupq_n_f32(if amax != 0.0 { 127.0 / amax } else { 0.0 });
        // `nearest_int`: round half to even through the magic number 1.5 · 2^23.
        let magic = vdupq_n_f32(12_582_912.0);
        let r: [int32x4_t; 8] = std::array::from_fn(|k| {
            let bits = vreinterpretq_s32_f32(vaddq_f32(vmulq_f32(v[k], id), magic));
            let r = vsubq_s32(vandq_s32(bits, vdupq_n_s32(0x007f_ffff)), vdupq_n_s32(0x0040_0000));
            vmaxq_s32(vminq_s32(r, vdupq_n_s32(127)), vdupq_n_s32(-127))
        });
        ob[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        let q = &mut ob[2..Q8_0_BYTES];
        // SAFETY: `q` has 32 bytes (sliced above): two 16-byte stores.
        unsafe {
            vst1q_s8(q.as_mut_ptr().cast(), narrow16(&r[..4]));
            vst1q_s8(q.as_mut_ptr().add(16).cast(), narrow16(&r[4..]));
        }
    }
}

/// Q4_0 rows as GGML's reference quantizer ([`crate::quant::BlockQ4_0::quantize`]) writes them
/// (the value of largest magnitude, the first one on ties, maps to -8; `d = max / -8`,
/// `q = min(15, trunc(x / d + 8.5))`), bit for bit. Whole blocks; `out` holds exactly their
/// bytes.
#[target_feature(enable = "neon")]
pub(super) fn quantize_q4_0(x: &[f32], out: &mut [u8]) {
    for (xb, ob) in x.chunks_exact(QK8).zip(out.chunks_exact_mut(18)) {
        let v = load32(xb);
        let amax = abs_max(&v);
        // The signed value: the first of largest magnitude (+0 for a block of zeros).
        let max = if amax == 0.0 { 0.0 } else { xb.iter().copied().find(|x| x.abs() == amax).unwrap_or(0.0) };
        let d = max / -8.0;
        let id = vdupq_n_f32(if d != 0.0 { 1.0 / d } else { 0.0 });
        // `as u8` then `min(15)`: `fcvtzu` truncates and saturates alike (NaN and negatives
        // to 0), and anything above 15 ends at 15 either way.
        let q: [int32x4_t; 8] = std::array::from_fn(|k| {
            let u = vcvtq_u32_f32(vaddq_f32(vmulq_f32(v[k], id), vdupq_n_f32(8.5)));
            vreinterpretq_s32_u32(vminq_u32(u, vdupq_n_u32(15)))
        });
        let (lo, hi) = (vreinterpretq_u8_s8(narrow16(&q[..4])), vreinterpretq_u8_s8(narrow16(&q[4..])));
        ob[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        let qs = &mut ob[2..18];
        // SAFETY: `qs` has 16 bytes (sliced above).
        unsafe { vst1q_u8(qs.as_mut_ptr(), vorrq_u8(lo, vshlq_n_u8::<4>(hi))) };
    }
}
