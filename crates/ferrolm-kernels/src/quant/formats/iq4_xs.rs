//! IQ4_XS: 256-value super-blocks of eight 32-value sub-blocks, each value a 4-bit index into the
//! IQ4_NL level table, with 6-bit signed sub-block scales relative to one f16 super-block scale.
//!
//! Layout (136 bytes): `d: f16`, `scales_h: u16` (little-endian), `scales_l: [u8; 4]`,
//! `qs: [u8; 128]`.
//!
//! Sub-block `j`'s scale is `ls = (scales_l[j / 2] >> 4·(j % 2)) & 0xF | ((scales_h >> 2j) & 3) << 4`
//! (offset by 32). Its 32 values are indexed by `qs[16j..16j + 16]`, low nibbles first, then high
//! nibbles, and dequantize to `(d · (ls - 32)) · KVALUES_IQ4NL[index]`.

use half::f16;

use super::fp16::f16_to_f32;
use super::iq4_nl::iq4_levels;
use crate::quant::{QK_K, as_array, impl_quant_block};

/// One IQ4_XS super-block, laid out as in GGML.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockIQ4XS {
    /// Super-block scale.
    pub d: f16,
    /// High 2 bits of the eight sub-block scales (bits `2j..2j + 2` for sub-block `j`).
    pub scales_h: u16,
    /// Low 4 bits of the eight sub-block scales, two per byte (even sub-block in the low nibble).
    pub scales_l: [u8; QK_K / 64],
    /// Packed table indices, 16 bytes per sub-block (see the module docs).
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(size_of::<BlockIQ4XS>() == 136);
impl_quant_block!(BlockIQ4XS, QK_K, 136);

/// The eight signed sub-block scales (`ls - 32`, in -32..=31) of an IQ4_XS super-block.
#[inline(always)]
pub fn unpack_scales_iq4xs(scales_h: u16, scales_l: &[u8; QK_K / 64]) -> [i8; 8] {
    let mut out = [0i8; 8];
    for (j, o) in out.iter_mut().enumerate() {
        let low = (scales_l[j / 2] >> (4 * (j % 2))) & 0x0f;
        let high = ((scales_h >> (2 * j)) & 3) as u8;
        *o = (low | (high << 4)) as i8 - 32;
    }
    out
}

impl BlockIQ4XS {
    /// Parses a super-block from its 136 little-endian bytes.
    #[inline(always)]
    pub fn from_bytes(b: &[u8; 136]) -> Self {
        let mut qs = [0u8; QK_K / 2];
        qs.copy_from_slice(&b[8..136]);
        Self {
            d: f16::from_le_bytes([b[0], b[1]]),
            scales_h: u16::from_le_bytes([b[2], b[3]]),
            scales_l: [b[4], b[5], b[6], b[7]],
            qs,
        }
    }

    /// The super-block's 136 bytes, as stored in GGUF files.
    pub fn to_bytes(&self) -> [u8; 136] {
        let mut out = [0u8; 136];
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..4].copy_from_slice(&self.scales_h.to_le_bytes());
        out[4..8].copy_from_slice(&self.scales_l);
        out[8..136].copy_from_slice(&self.qs);
        out
    }

    /// Dequantizes the super-block into 256 values.
    #[inline(always)]
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = f16_to_f32(self.d);
        let sc = unpack_scales_iq4xs(self.scales_h, &self.scales_l);
        for ((y, q), &s) in out.chunks_exact_mut(32).zip(self.qs.chunks_exact(16)).zip(&sc) {
            let dl = d * f32::from(s);
            for (o, v) in y.iter_mut().zip(iq4_levels(as_array(q))) {
                *o = dl * f32::from(v);
            }
        }
    }
}
