//! Q4_1: 32 values as 4-bit unsigned nibbles with an f16 scale and an f16 minimum.
//!
//! Layout (20 bytes): `d: f16`, `m: f16`, `qs: [u8; 16]`. Element `j < 16` is the low nibble of
//! `qs[j]`, element `j + 16` its high nibble; `x = q · d + m`.

use half::f16;

use super::fp16::f16_to_f32;
use crate::GgmlType;
use crate::quant::{QuantError, impl_quant_block, quantize_row_blocks};

/// Elements per Q4_1 block.
pub const QK4_1: usize = 32;

/// One Q4_1 block, laid out as in GGML.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ4_1 {
    /// Scale.
    pub d: f16,
    /// Minimum (added after scaling).
    pub m: f16,
    /// Packed nibbles: low nibbles are elements 0..16, high nibbles elements 16..32.
    pub qs: [u8; QK4_1 / 2],
}

const _: () = assert!(size_of::<BlockQ4_1>() == 20);
impl_quant_block!(BlockQ4_1, QK4_1, 20, quantize);

impl BlockQ4_1 {
    /// Parses a block from its 20 little-endian bytes.
    #[inline(always)]
    pub fn from_bytes(b: &[u8; 20]) -> Self {
        let mut qs = [0u8; 16];
        qs.copy_from_slice(&b[4..20]);
        Self { d: f16::from_le_bytes([b[0], b[1]]), m: f16::from_le_bytes([b[2], b[3]]), qs }
    }

    /// The block's 20 bytes, as stored in GGUF files.
    pub fn to_bytes(&self) -> [u8; 20] {
        let mut out = [0u8; 20];
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..4].copy_from_slice(&self.m.to_le_bytes());
        out[4..20].copy_from_slice(&self.qs);
        out
    }

    /// Dequantizes the block: `out[j] = q[j] · d + m` (multiply, then add; no fusion).
    #[inline(always)]
    pub fn dequantize(&self, out: &mut [f32; QK4_1]) {
        let (d, m) = (f16_to_f32(self.d), f16_to_f32(self.m));
        let (lo, hi) = out.split_at_mut(QK4_1 / 2);
        for j in 0..QK4_1 / 2 {
            let q = self.qs[j];
            lo[j] = f32::from(q & 0x0f) * d + m;
            hi[j] = f32::from(q >> 4) * d + m;
        }
    }

    /// GGML's reference quantizer (`quantize_row_q4_1_ref`): `d = (max - min) / 15`, `m = min`,
    /// `q = min(15, trunc((x - min) / d + 0.5))`.
    pub fn quantize(x: &[f32; QK4_1]) -> Self {
        let mut min = f32::MAX;
        let mut max = -f32::MAX;
        for &v in x {
            min = min.min(v);
            max = max.max(v);
        }
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let q = |v: f32| (((v - min) * id + 0.5) as u8).min(15);
        let mut qs = [0u8; 16];
        for j in 0..16 {
            qs[j] = q(x[j]) | (q(x[j + 16]) << 4);
        }
        Self { d: f16::from_f32(d), m: f16::from_f32(min), qs }
    }
}

/// Quantizes a row (a multiple of 32 values) with [`BlockQ4_1::quantize`].
pub fn quantize_row_q4_1(x: &[f32]) -> Result<Vec<BlockQ4_1>, QuantError> {
    quantize_row_blocks(GgmlType::Q4_1, x)
}
