//! BF16: the upper 16 bits of an f32, one little-endian `u16` per element.

use crate::quant::{FloatElem, dequantize_elems, dot_elems};

/// Widens bfloat16 bits to f32 (exact: the low 16 mantissa bits are zero).
#[inline(always)]
pub fn bf16_bits_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// Rounds an f32 to bfloat16 bits the way GGML does: NaNs are kept (forced quiet, sign and top
/// payload bits preserved), everything else rounds to nearest even (overflowing to infinity).
#[inline(always)]
pub fn f32_to_bf16_bits(v: f32) -> u16 {
    let n = v.to_bits();
    if n & 0x7fff_ffff > 0x7f80_0000 {
        return ((n >> 16) | 0x0040) as u16;
    }
    // Round to nearest even on bit 16; computed in u64 so the carry cannot wrap.
    ((u64::from(n) + 0x7fff + u64::from((n >> 16) & 1)) >> 16) as u16
}

/// Decoder for little-endian bf16 elements.
pub(crate) struct Bf16Elem;

impl FloatElem for Bf16Elem {
    const BYTES: usize = 2;
    #[inline(always)]
    fn read(b: &[u8]) -> f32 {
        bf16_bits_to_f32(u16::from_le_bytes(*crate::quant::as_array(b)))
    }
}

/// Decodes `dst.len()` bf16 values from `src` (`src.len() == 2 * dst.len()`).
#[inline(always)]
pub(crate) fn dequantize_row(src: &[u8], dst: &mut [f32]) {
    dequantize_elems::<Bf16Elem>(src, dst);
}

/// Dot product of the bf16 row stored in `src` with `x` (`src.len() == 2 * x.len()`).
#[inline(always)]
pub(crate) fn dot_row(src: &[u8], x: &[f32]) -> f32 {
    dot_elems::<Bf16Elem>(src, x)
}

/// Rounds `src` to bf16 with [`f32_to_bf16_bits`] as little-endian bytes.
pub(crate) fn quantize_row(src: &[f32], dst: &mut [u8]) {
    for (&v, out) in src.iter().zip(dst.chunks_exact_mut(2)) {
        out.copy_from_slice(&f32_to_bf16_bits(v).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(f32_to_bf16_bits(1.0), 0x3f80);
        // Exactly halfway between 0x3f80 and 0x3f81: ties to even (down).
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f80_8000)), 0x3f80);
        // Halfway between 0x3f81 and 0x3f82: ties to even (up).
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x3f81_8000)), 0x3f82);
        assert_eq!(f32_to_bf16_bits(f32::MAX), 0x7f80);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert_eq!(f32_to_bf16_bits(f32::from_bits(0xff81_0000)), 0xffc1);
        assert_eq!(bf16_bits_to_f32(0xc040), -3.0);
    }
}
