//! Q8_0: 32 values as signed bytes with one f16 scale.
//!
//! Layout (34 bytes): `d: f16`, `qs: [i8; 32]`; `x = q · d`.

use half::f16;

use super::fp16::f16_to_f32;
use crate::GgmlType;
use crate::quant::{QuantError, impl_quant_block, quantize_row_blocks};

/// Elements per Q8_0 block.
pub const QK8_0: usize = 32;

/// One Q8_0 block, laid out as in GGML.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ8_0 {
    /// Scale.
    pub d: f16,
    /// Quantized values.
    pub qs: [i8; QK8_0],
}

const _: () = assert!(size_of::<BlockQ8_0>() == 34);
impl_quant_block!(BlockQ8_0, QK8_0, 34, quantize);

impl BlockQ8_0 {
    /// Parses a block from its 34 little-endian bytes.
    #[inline(always)]
    pub fn from_bytes(b: &[u8; 34]) -> Self {
        let mut qs = [0i8; QK8_0];
        for (q, &byte) in qs.iter_mut().zip(&b[2..34]) {
            *q = byte as i8;
        }
        Self { d: f16::from_le_bytes([b[0], b[1]]), qs }
    }

    /// The block's 34 bytes, as stored in GGUF files.
    pub fn to_bytes(&self) -> [u8; 34] {
        let mut out = [0u8; 34];
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        for (o, &q) in out[2..34].iter_mut().zip(&self.qs) {
            *o = q as u8;
        }
        out
    }

    /// Dequantizes the block: `out[j] = q[j] · d`.
    #[inline(always)]
    pub fn dequantize(&self, out: &mut [f32; QK8_0]) {
        let d = f16_to_f32(self.d);
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = f32::from(q) * d;
        }
    }

    /// GGML's reference quantizer (`quantize_row_q8_0_ref`): `d = max|x| / 127`,
    /// `q = round(x / d)` (rounding half away from zero, via the f32 reciprocal of `d`).
    pub fn quantize(x: &[f32; QK8_0]) -> Self {
        let amax = x.iter().fold(0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0i8; QK8_0];
        for (q, &v) in qs.iter_mut().zip(x) {
            *q = (v * id).round() as i8;
        }
        Self { d: f16::from_f32(d), qs }
    }
}

/// Quantizes a row (a multiple of 32 values) with [`BlockQ8_0::quantize`]; an error if the length
/// is not a multiple of 32.
pub fn quantize_row_q8_0(x: &[f32]) -> Result<Vec<BlockQ8_0>, QuantError> {
    quantize_row_blocks(GgmlType::Q8_0, x)
}
