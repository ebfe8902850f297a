//! Q5_0: 32 values as 5-bit unsigned integers with an implicit offset of 16 and one f16 scale.
//!
//! Layout (22 bytes): `d: f16`, `qh: [u8; 4]` (a little-endian `u32` holding the fifth bit of
//! element `j` in bit `j`), `qs: [u8; 16]` (low nibbles: element `j < 16` in the low nibble of
//! `qs[j]`, element `j + 16` in its high nibble); `x = ((q_lo | hi << 4) - 16) · d`.

use half::f16;

use super::fp16::f16_to_f32;
use crate::GgmlType;
use crate::quant::{QuantError, impl_quant_block, quantize_row_blocks};

/// Elements per Q5_0 block.
pub const QK5_0: usize = 32;

/// One Q5_0 block, laid out as in GGML (`qh` is a byte array so the block stays 2-aligned).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ5_0 {
    /// Scale.
    pub d: f16,
    /// Fifth bits, little-endian `u32`: bit `j` belongs to element `j`.
    pub qh: [u8; 4],
    /// Packed low nibbles: low nibbles are elements 0..16, high nibbles elements 16..32.
    pub qs: [u8; QK5_0 / 2],
}

const _: () = assert!(size_of::<BlockQ5_0>() == 22);
impl_quant_block!(BlockQ5_0, QK5_0, 22, quantize);

impl BlockQ5_0 {
    /// Parses a block from its 22 little-endian bytes.
    #[inline(always)]
    pub fn from_bytes(b: &[u8; 22]) -> Self {
        let mut qs = [0u8; 16];
        qs.copy_from_slice(&b[6..22]);
        Self { d: f16::from_le_bytes([b[0], b[1]]), qh: [b[2], b[3], b[4], b[5]], qs }
    }

    /// The block's 22 bytes, as stored in GGUF files.
    pub fn to_bytes(&self) -> [u8; 22] {
        let mut out = [0u8; 22];
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..6].copy_from_slice(&self.qh);
        out[6..22].copy_from_slice(&self.qs);
        out
    }

    /// Dequantizes the block: `out[j] = (q[j] - 16) · d` with 5-bit `q`.
    #[inline(always)]
    pub fn dequantize(&self, out: &mut [f32; QK5_0]) {
        let d = f16_to_f32(self.d);
        let qh = u32::from_le_bytes(self.qh);
        let (lo, hi) = out.split_at_mut(QK5_0 / 2);
        for j in 0..QK5_0 / 2 {
            let q = self.qs[j];
            let h0 = ((qh >> j) & 1) as u8;
            let h1 = ((qh >> (j + 16)) & 1) as u8;
            lo[j] = f32::from(((q & 0x0f) | (h0 << 4)) as i8 - 16) * d;
            hi[j] = f32::from(((q >> 4) | (h1 << 4)) as i8 - 16) * d;
        }
    }

    /// GGML's reference quantizer (`quantize_row_q5_0_ref`): the value of largest magnitude maps
    /// to -16, `d = max / -16`, `q = min(31, trunc(x / d + 16.5))`.
    pub fn quantize(x: &[f32; QK5_0]) -> Self {
        let (_, max) = crate::quant::signed_absmax(x);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let q = |v: f32| ((v * id + 16.5) as u8).min(31);
        let mut qs = [0u8; 16];
        let mut qh = 0u32;
        for j in 0..16 {
            let (q0, q1) = (q(x[j]), q(x[j + 16]));
            qs[j] = (q0 & 0x0f) | ((q1 & 0x0f) << 4);
            qh |= u32::from(q0 >> 4) << j;
            qh |= u32::from(q1 >> 4) << (j + 16);
        }
        Self { d: f16::from_f32(d), qh: qh.to_le_bytes(), qs }
    }
}

/// Quantizes a row (a multiple of 32 values) with [`BlockQ5_0::quantize`].
pub fn quantize_row_q5_0(x: &[f32]) -> Result<Vec<BlockQ5_0>, QuantError> {
    quantize_row_blocks(GgmlType::Q5_0, x)
}
