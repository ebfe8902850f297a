//! Q4_0: 32 values as 4-bit unsigned nibbles with an implicit offset of 8 and one f16 scale.
//!
//! Layout (18 bytes): `d: f16`, `qs: [u8; 16]`. Element `j < 16` is the low nibble of `qs[j]`,
//! element `j + 16` its high nibble; `x = (q - 8) · d`.

use half::f16;

use super::fp16::f16_to_f32;
use crate::GgmlType;
use crate::quant::{QuantError, impl_quant_block, quantize_row_blocks};

/// Elements per Q4_0 block.
pub const QK4_0: usize = 32;

/// One Q4_0 block, laid out as in GGML.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ4_0 {
    /// Scale.
    pub d: f16,
    /// Packed nibbles: low nibbles are elements 0..16, high nibbles elements 16..32.
    pub qs: [u8; QK4_0 / 2],
}

const _: () = assert!(size_of::<BlockQ4_0>() == 18);
impl_quant_block!(BlockQ4_0, QK4_0, 18, quantize);

impl BlockQ4_0 {
    /// Parses a block from its 18 little-endian bytes.
    #[inline(always)]
    pub fn from_bytes(b: &[u8; 18]) -> Self {
        let mut qs = [0u8; 16];
        qs.copy_from_slice(&b[2..18]);
        Self { d: f16::from_le_bytes([b[0], b[1]]), qs }
    }

    /// The block's 18 bytes, as stored in GGUF files.
    pub fn to_bytes(&self) -> [u8; 18] {
        let mut out = [0u8; 18];
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..18].copy_from_slice(&self.qs);
        out
    }

    /// Dequantizes the block: `out[j] = (q[j] - 8) · d`.
    #[inline(always)]
    pub fn dequantize(&self, out: &mut [f32; QK4_0]) {
        let d = f16_to_f32(self.d);
        let (lo, hi) = out.split_at_mut(QK4_0 / 2);
        for j in 0..QK4_0 / 2 {
            let q = self.qs[j];
            lo[j] = f32::from((q & 0x0f) as i8 - 8) * d;
            hi[j] = f32::from((q >> 4) as i8 - 8) * d;
        }
    }

    /// GGML's reference quantizer (`quantize_row_q4_0_ref`): the value of largest magnitude maps
    /// to -8, `d = max / -8`, `q = min(15, trunc(x / d + 8.5))`.
    pub fn quantize(x: &[f32; QK4_0]) -> Self {
        let (_, max) = crate::quant::signed_absmax(x);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let q = |v: f32| ((v * id + 8.5) as u8).min(15);
        let mut qs = [0u8; 16];
        for j in 0..16 {
            qs[j] = q(x[j]) | (q(x[j + 16]) << 4);
        }
        Self { d: f16::from_f32(d), qs }
    }
}

/// Quantizes a row (a multiple of 32 values) with [`BlockQ4_0::quantize`].
pub fn quantize_row_q4_0(x: &[f32]) -> Result<Vec<BlockQ4_0>, QuantError> {
    quantize_row_blocks(GgmlType::Q4_0, x)
}
