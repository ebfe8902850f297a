//! F16: IEEE-754 half precision, one little-endian `u16` per element.

use half::f16;

use crate::quant::{FloatElem, dequantize_elems, dot_elems};

/// Converts half-precision bits to f32, exactly (NaNs come out quiet, like F16C's `vcvtph2ps`).
///
/// Branch-free so that loops over it vectorise; equal to `half::f16::to_f32` on all 65536 inputs.
#[inline(always)]
pub fn f16_bits_to_f32(h: u16) -> f32 {
    let h = u32::from(h);
    let sign = (h & 0x8000) << 16;
    let em = h & 0x7fff;
    let shifted = em << 13; // exponent and mantissa in f32 position, exponent still biased by 15
    let exp = em & 0x7c00;
    // Normal: rebias the exponent from 15 to 127.
    let normal = shifted + ((127 - 15) << 23);
    // Zero/subnormal: m·2^-24 = (2^-14 + m·2^-24) - 2^-14, both exact in f32.
    let magic = f32::from_bits(113 << 23);
    let sub = (f32::from_bits(shifted + (113 << 23)) - magic).to_bits();
    // Inf/NaN: maximal exponent, mantissa kept, NaNs quieted.
    let quiet = if em > 0x7c00 { 0x0040_0000 } else { 0 };
    let inf_nan = shifted | 0x7f80_0000 | quiet;
    let bits = if exp == 0 {
        sub
    } else if exp == 0x7c00 {
        inf_nan
    } else {
        normal
    };
    f32::from_bits(bits | sign)
}

/// Converts a [`half::f16`](struct@f16) to f32 exactly; inlinable (unlike `half`'s run-time dispatched
/// `to_f32`), so block scales cost a few integer operations.
#[inline(always)]
pub fn f16_to_f32(h: f16) -> f32 {
    f16_bits_to_f32(h.to_bits())
}

/// Decoder for little-endian f16 elements.
pub(crate) struct F16Elem;

impl FloatElem for F16Elem {
    const BYTES: usize = 2;
    #[inline(always)]
    fn read(b: &[u8]) -> f32 {
        f16_bits_to_f32(u16::from_le_bytes(*crate::quant::as_array(b)))
    }
}

/// Decodes `dst.len()` f16 values from `src` (`src.len() == 2 * dst.len()`).
#[inline(always)]
pub(crate) fn dequantize_row(src: &[u8], dst: &mut [f32]) {
    dequantize_elems::<F16Elem>(src, dst);
}

/// Dot product of the f16 row stored in `src` with `x` (`src.len() == 2 * x.len()`).
#[inline(always)]
pub(crate) fn dot_row(src: &[u8], x: &[f32]) -> f32 {
    dot_elems::<F16Elem>(src, x)
}

/// Rounds `src` to f16 (round to nearest even, overflow to infinity) as little-endian bytes.
pub(crate) fn quantize_row(src: &[f32], dst: &mut [u8]) {
    for (&v, out) in src.iter().zip(dst.chunks_exact_mut(2)) {
        out.copy_from_slice(&f16::from_f32(v).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversion_matches_half_everywhere() {
        for h in 0..=u16::MAX {
            let want = f16::from_bits(h).to_f32();
            let got = f16_bits_to_f32(h);
            assert_eq!(got.to_bits(), want.to_bits(), "f16 bits {h:#06x}");
        }
    }
}
