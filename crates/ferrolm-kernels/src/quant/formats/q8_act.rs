//! 8-bit activation formats ("vec_dot types"): Q8_0, Q8_1 and Q8_K, quantized the way GGML's x86
//! CPU backend quantizes an activation row before an integer dot product.
//!
//! Layouts (little-endian, as in GGML):
//!
//! - Q8_0 (34 bytes per 32 values): `d: f16`, `qs: [i8; 32]`.
//! - Q8_1 (36 bytes per 32 values): `d: f16`, `s: f16`, `qs: [i8; 32]`, with `s = d · Σ qs`.
//! - Q8_K (292 bytes per 256 values): `d: f32`, `qs: [i8; 256]`, `bsums: [i16; 16]` (sums of
//!   16-value groups of `qs`).
//!
//! Q8_0 and Q8_1 follow GGML's AVX path (`quantize_row_q8_0` / `quantize_row_q8_1` in the x86
//! CPU backend), which differs from the portable reference quantizer: `id = 127 / max|x|` (not
//! `1 / d`) and the product `x · id` is rounded half to even. Q8_K follows
//! `quantize_row_q8_K_ref`, which the x86 backend uses as is.

use half::f16;

use crate::quant::QK_K;

/// Values per Q8_0 / Q8_1 block.
pub const QK8: usize = 32;
/// Bytes per Q8_0 block.
pub const Q8_0_BYTES: usize = 34;
/// Bytes per Q8_1 block.
pub const Q8_1_BYTES: usize = 36;
/// Bytes per Q8_K block.
pub const Q8_K_BYTES: usize = 4 + QK_K + 2 * (QK_K / 16);

/// Scale and rounded quants of one 32-value block, GGML x86 style: `amax = max|x|`,
/// `d = amax / 127`, `id = 127 / amax` (0 for an all-zero block), `q = round_half_even(x · id)`.
#[inline(always)]
fn quantize32(x: &[f32], qs: &mut [i8]) -> (f32, i32) {
    let (x, qs) = (&x[..QK8], &mut qs[..QK8]);
    // max|x| lane by lane, in a form that vectorises (`a > m` keeps `m` for a NaN, as
    // `f32::max` does; the maximum does not depend on the order).
    let mut lanes = [0f32; 8];
    for c in x.chunks_exact(8) {
        for (m, &v) in lanes.iter_mut().zip(c) {
            let a = v.abs();
            *m = if a > *m { a } else { *m };
        }
    }
    let amax = lanes.iter().fold(0f32, |m, &a| if a > m { a } else { m });
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        // |v · id| <= 127 (plus an ulp) for finite inputs. `nearest_int` rounds half to even
        // in plain float/integer arithmetic that vectorises (`round_ties_even` becomes a libm
        // call on targets without SSE4.1); the clamp keeps non-finite inputs in range.
        let r = nearest_int(v * id).clamp(-127, 127);
        sum += r;
        *q = r as i8;
    }
    (d, sum)
}

/// Quantizes 32 values into one Q8_0 block (`out.len() == 34`).
#[inline(always)]
pub(crate) fn quantize_block_q8_0(x: &[f32], out: &mut [u8]) {
    let mut qs = [0i8; QK8];
    let (d, _) = quantize32(x, &mut qs);
    out[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    for (o, &q) in out[2..2 + QK8].iter_mut().zip(&qs) {
        *o = q as u8;
    }
}

/// Quantizes 32 values into one Q8_1 block (`out.len() == 36`); `s` is `d · Σq` computed in f32
/// from the exact integer sum, then rounded to f16.
#[inline(always)]
pub(crate) fn quantize_block_q8_1(x: &[f32], out: &mut [u8]) {
    let mut qs = [0i8; QK8];
    let (d, sum) = quantize32(x, &mut qs);
    out[0..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
    out[2..4].copy_from_slice(&f16::from_f32(d * sum as f32).to_le_bytes());
    for (o, &q) in out[4..4 + QK8].iter_mut().zip(&qs) {
        *o = q as u8;
    }
}

/// GGML's `nearest_int`: round half to even through the f32 magic number `1.5 · 2^23`, valid for
/// `|v| <= 4194303` (as in C, the result is meaningless outside that range).
#[inline(always)]
pub(crate) fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0f32).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}

/// Quantizes 256 values into one Q8_K block (`out.len() == 292`), as `quantize_row_q8_K_ref`:
/// `max` = the value of largest magnitude (first one wins), `iscale = -127 / max`,
/// `q = min(127, nearest_int(iscale · x))`, `d = 1 / iscale`; an all-zero block gives `d = 0`
/// and zero quants (and zero group sums).
#[inline(always)]
pub(crate) fn quantize_block_q8_k(x: &[f32], out: &mut [u8]) {
    let (x, out) = (&x[..QK_K], &mut out[..Q8_K_BYTES]);
    let (amax, max) = crate::quant::signed_absmax(x);
    let mut qs = [0i8; QK_K];
    let d = if amax == 0.0 {
        0.0
    } else {
        let iscale = -127.0f32 / max;
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = nearest_int(iscale * v).min(127) as i8;
        }
        1.0 / iscale
    };
    out[0..4].copy_from_slice(&d.to_le_bytes());
    for (o, &q) in out[4..4 + QK_K].iter_mut().zip(&qs) {
        *o = q as u8;
    }
    for (g, o) in qs.chunks_exact(16).zip(out[4 + QK_K..].chunks_exact_mut(2)) {
        let s: i32 = g.iter().map(|&q| i32::from(q)).sum();
        o.copy_from_slice(&(s as i16).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        for (v, want) in
            [(0.5f32, 0), (1.5, 2), (2.5, 2), (-0.5, 0), (-1.5, -2), (-2.5, -2), (126.6, 127), (-127.0, -127)]
        {
            assert_eq!(nearest_int(v), want, "{v}");
            assert_eq!(v.round_ties_even() as i32, want, "{v}");
        }
    }

    #[test]
    fn q8_1_sum_and_zero_blocks() {
        let x: Vec<f32> = (0..32).map(|i| i as f32 - 10.0).collect();
        let mut out = [0u8; Q8_1_BYTES];
        quantize_block_q8_1(&x, &mut out);
        let d = f16::from_le_bytes([out[0], out[1]]).to_f32();
        let s = f16::from_le_bytes([out[2], out[3]]).to_f32();
        let sum: i32 = out[4..].iter().map(|&b| i32::from(b as i8)).sum();
        assert_eq!(out[4 + 31] as i8, 127);
        assert_eq!(s, f16::from_f32((21.0f32 / 127.0) * sum as f32).to_f32());
        assert!(d > 0.0);

        let mut z = [0xffu8; Q8_K_BYTES];
        quantize_block_q8_k(&[0f32; QK_K], &mut z);
        assert!(z.iter().all(|&b| b == 0));
        let mut z = [0xffu8; Q8_0_BYTES];
        quantize_block_q8_0(&[0f32; QK8], &mut z);
        assert!(z.iter().all(|&b| b == 0));
    }

    #[test]
    fn q8_k_extreme_maps_to_minus_127() {
        let mut x = [0.25f32; QK_K];
        x[7] = 3.0;
        x[9] = -3.0;
        let mut out = [0u8; Q8_K_BYTES];
        quantize_block_q8_k(&x, &mut out);
        assert_eq!(out[4 + 7] as i8, -127);
        assert_eq!(out[4 + 9] as i8, 127);
        let d = f32::from_le_bytes([out[0], out[1], out[2], out[3]]);
        assert_eq!(d, 1.0 / (-127.0f32 / 3.0));
    }
}
