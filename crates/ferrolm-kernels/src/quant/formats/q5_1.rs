//! Q5_1: 32 values as 5-bit unsigned integers with an f16 scale and an f16 minimum.
//!
//! Layout (24 bytes): `d: f16`, `m: f16`, `qh: [u8; 4]` (a little-endian `u32` holding the fifth
//! bit of element `j` in bit `j`), `qs: [u8; 16]` (low nibbles: element `j < 16` in the low nibble
//! of `qs[j]`, element `j + 16` in its high nibble); `x = (q_lo | hi << 4) · d + m`.

use half::f16;

use super::fp16::f16_to_f32;
use crate::GgmlType;
use crate::quant::{QuantError, impl_quant_block, quantize_row_blocks};

/// Elements per Q5_1 block.
pub const QK5_1: usize = 32;

/// One Q5_1 block, laid out as in GGML (`qh` is a byte array so the block stays 2-aligned).
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ5_1 {
    /// Scale.
    pub d: f16,
    /// Minimum (added after scaling).
    pub m: f16,
    /// Fifth bits, little-endian `u32`: bit `j` belongs to element `j`.
    pub qh: [u8; 4],
    /// Packed low nibbles: low nibbles are elements 0..16, high nibbles elements 16..32.
    pub qs: [u8; QK5_1 / 2],
}

const _: () = assert!(size_of::<BlockQ5_1>() == 24);
impl_quant_block!(BlockQ5_1, QK5_1, 24, quantize);

impl BlockQ5_1 {
    /// Parses a block from its 24 little-endian bytes.
    #[inline(always)]
    pub fn from_bytes(b: &[u8; 24]) -> Self {
        let mut qs = [0u8; 16];
        qs.copy_from_slice(&b[8..24]);
        Self {
            d: f16::from_le_bytes([b[0], b[1]]),
            m: f16::from_le_bytes([b[2], b[3]]),
            qh: [b[4], b[5], b[6], b[7]],
            qs,
        }
    }

    /// The block's 24 bytes, as stored in GGUF files.
    pub fn to_bytes(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..4].copy_from_slice(&self.m.to_le_bytes());
        out[4..8].copy_from_slice(&self.qh);
        out[8..24].copy_from_slice(&self.qs);
        out
    }

    /// The 32 unsigned 5-bit values of the block.
    #[inline(always)]
    pub fn values(&self) -> [u8; QK5_1] {
        let qh = u32::from_le_bytes(self.qh);
        let mut v = [0u8; QK5_1];
        for j in 0..QK5_1 / 2 {
            let q = self.qs[j];
            v[j] = (q & 0x0f) | ((((qh >> j) & 1) as u8) << 4);
            v[j + 16] = (q >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
        }
        v
    }

    /// Dequantizes the block: `out[j] = q[j] · d + m` with 5-bit `q` (multiply, then add).
    #[inline(always)]
    pub fn dequantize(&self, out: &mut [f32; QK5_1]) {
        let (d, m) = (f16_to_f32(self.d), f16_to_f32(self.m));
        for (o, q) in out.iter_mut().zip(self.values()) {
            *o = f32::from(q) * d + m;
        }
    }

    /// GGML's reference quantizer (`quantize_row_q5_1_ref`): `d = (max - min) / 31`, `m = min`,
    /// `q = min(31, trunc((x - min) / d + 0.5))`.
    pub fn quantize(x: &[f32; QK5_1]) -> Self {
        let mut min = f32::MAX;
        let mut max = -f32::MAX;
        for &v in x {
            min = min.min(v);
            max = max.max(v);
        }
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let q = |v: f32| (((v - min) * id + 0.5) as u8).min(31);
        let mut qs = [0u8; 16];
        let mut qh = 0u32;
        for j in 0..16 {
            let (q0, q1) = (q(x[j]), q(x[j + 16]));
            qs[j] = (q0 & 0x0f) | ((q1 & 0x0f) << 4);
            qh |= u32::from(q0 >> 4) << j;
            qh |= u32::from(q1 >> 4) << (j + 16);
        }
        Self { d: f16::from_f32(d), m: f16::from_f32(min), qh: qh.to_le_bytes(), qs }
    }
}

/// Quantizes a row (a multiple of 32 values) with [`BlockQ5_1::quantize`].
pub fn quantize_row_q5_1(x: &[f32]) -> Result<Vec<BlockQ5_1>, QuantError> {
    quantize_row_blocks(GgmlType::Q5_1, x)
}
