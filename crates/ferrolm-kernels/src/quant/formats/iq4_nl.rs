//! IQ4_NL: 32 values as 4-bit indices into a fixed non-linear table of signed levels, with one
//! f16 scale.
//!
//! Layout (18 bytes, like Q4_0): `d: f16`, `qs: [u8; 16]`. Element `j < 16` is the low nibble of
//! `qs[j]`, element `j + 16` its high nibble; `x = d · KVALUES_IQ4NL[nibble]`.

use half::f16;

use super::fp16::f16_to_f32;
use crate::quant::impl_quant_block;

/// Elements per IQ4_NL block.
pub const QK4_NL: usize = 32;

/// The sixteen signed levels a 4-bit IQ4_NL / IQ4_XS index selects (`kvalues_iq4nl` in GGML).
pub const KVALUES_IQ4NL: [i8; 16] =
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// One IQ4_NL block, laid out as in GGML.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockIQ4NL {
    /// Scale.
    pub d: f16,
    /// Packed table indices: low nibbles are elements 0..16, high nibbles elements 16..32.
    pub qs: [u8; QK4_NL / 2],
}

const _: () = assert!(size_of::<BlockIQ4NL>() == 18);
impl_quant_block!(BlockIQ4NL, QK4_NL, 18);

/// The 32 signed levels of 16 packed index bytes: low nibbles first, then high nibbles.
#[inline(always)]
pub fn iq4_levels(qs: &[u8; 16]) -> [i8; 32] {
    let mut v = [0i8; 32];
    for j in 0..16 {
        v[j] = KVALUES_IQ4NL[usize::from(qs[j] & 0x0f)];
        v[j + 16] = KVALUES_IQ4NL[usize::from(qs[j] >> 4)];
    }
    v
}

impl BlockIQ4NL {
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

    /// Dequantizes the block: `out[j] = d · KVALUES_IQ4NL[q[j]]`.
    #[inline(always)]
    pub fn dequantize(&self, out: &mut [f32; QK4_NL]) {
        let d = f16_to_f32(self.d);
        for (o, v) in out.iter_mut().zip(iq4_levels(&self.qs)) {
            *o = d * f32::from(v);
        }
    }
}
