//! F32: plain little-endian IEEE-754 single precision, one element per "block".

use crate::quant::{FloatElem, dequantize_elems, dot_elems};

/// Decoder for little-endian f32 elements.
pub(crate) struct F32Elem;

impl FloatElem for F32Elem {
    const BYTES: usize = 4;
    #[inline(always)]
    fn read(b: &[u8]) -> f32 {
        f32::from_le_bytes(*crate::quant::as_array(b))
    }
}

/// Decodes `dst.len()` little-endian f32 values from `src` (`src.len() == 4 * dst.len()`).
#[inline(always)]
pub(crate) fn dequantize_row(src: &[u8], dst: &mut [f32]) {
    dequantize_elems::<F32Elem>(src, dst);
}

/// Dot product of the f32 row stored in `src` with `x` (`src.len() == 4 * x.len()`).
///
/// When the bytes happen to be 4-byte aligned (GGUF tensor data usually is) and the target is
/// little-endian, the row is viewed in place and handed to [`crate::simd::dot_f32`].
#[inline(always)]
pub(crate) fn dot_row(src: &[u8], x: &[f32]) -> f32 {
    #[cfg(target_endian = "little")]
    {
        // SAFETY: every bit pattern is a valid f32 and `align_to` only puts correctly aligned,
        // whole f32s into the middle slice, which borrows `src` for the same lifetime.
        let (head, mid, tail) = unsafe { src.align_to::<f32>() };
        if head.is_empty() && tail.is_empty() && mid.len() == x.len() {
            return crate::simd::dot_f32(mid, x);
        }
    }
    dot_elems::<F32Elem>(src, x)
}

/// Writes `src` as little-endian f32 bytes (`dst.len() == 4 * src.len()`).
pub(crate) fn quantize_row(src: &[f32], dst: &mut [u8]) {
    for (v, out) in src.iter().zip(dst.chunks_exact_mut(4)) {
        out.copy_from_slice(&v.to_le_bytes());
    }
}
