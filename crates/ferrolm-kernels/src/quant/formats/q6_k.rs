//! Q6_K: 256-value super-blocks of sixteen 16-value sub-blocks, 6-bit values with signed 8-bit
//! sub-block scales relative to one f16 super-block scale.
//!
//! Layout (210 bytes): `ql: [u8; 128]` (low 4 bits), `qh: [u8; 64]` (high 2 bits),
//! `scales: [i8; 16]`, `d: f16`.
//!
//! The super-block is two halves of 128 values. In half `h`, with `ql = ql[64h..]`,
//! `qh = qh[32h..]` and `l` in `0..32`, the four values `128h + l + 32k` (`k` = 0..4) are
//!
//! ```text
//! k = 0: ql[l]      & 0xF | ((qh[l] >> 0) & 3) << 4
//! k = 1: ql[l + 32] & 0xF | ((qh[l] >> 2) & 3) << 4
//! k = 2: ql[l]      >> 4  | ((qh[l] >> 4) & 3) << 4
//! k = 3: ql[l + 32] >> 4  | ((qh[l] >> 6) & 3) << 4
//! ```
//!
//! minus 32, times `d · scales[i / 16]` where `i` is the element index in the super-block.

use half::f16;

use super::fp16::f16_to_f32;
use crate::quant::{QK_K, impl_quant_block};

/// One Q6_K super-block, laid out as in GGML.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ6K {
    /// Low 4 bits of each value (see the module docs for the order).
    pub ql: [u8; QK_K / 2],
    /// High 2 bits of each value (see the module docs for the order).
    pub qh: [u8; QK_K / 4],
    /// Signed scale of each 16-value sub-block.
    pub scales: [i8; QK_K / 16],
    /// Super-block scale.
    pub d: f16,
}

const _: () = assert!(size_of::<BlockQ6K>() == 210);
impl_quant_block!(BlockQ6K, QK_K, 210);

impl BlockQ6K {
    /// Parses a super-block from its 210 little-endian bytes.
    #[inline(always)]
    pub fn from_bytes(b: &[u8; 210]) -> Self {
        let mut ql = [0u8; QK_K / 2];
        ql.copy_from_slice(&b[0..128]);
        let mut qh = [0u8; QK_K / 4];
        qh.copy_from_slice(&b[128..192]);
        let mut scales = [0i8; QK_K / 16];
        for (s, &byte) in scales.iter_mut().zip(&b[192..208]) {
            *s = byte as i8;
        }
        Self { ql, qh, scales, d: f16::from_le_bytes([b[208], b[209]]) }
    }

    /// The super-block's 210 bytes, as stored in GGUF files.
    pub fn to_bytes(&self) -> [u8; 210] {
        let mut out = [0u8; 210];
        out[0..128].copy_from_slice(&self.ql);
        out[128..192].copy_from_slice(&self.qh);
        for (o, &s) in out[192..208].iter_mut().zip(&self.scales) {
            *o = s as u8;
        }
        out[208..210].copy_from_slice(&self.d.to_le_bytes());
        out
    }

    /// Dequantizes the super-block into 256 values.
    #[inline(always)]
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = f16_to_f32(self.d);
        let mut sc = [0f32; QK_K / 16];
        for (s, &raw) in sc.iter_mut().zip(&self.scales) {
            *s = d * f32::from(raw);
        }
        // out: [2 halves][4 groups k][32]; ql: [2 halves][64]; qh: [2 halves][32].
        for h in 0..2 {
            let ql = &self.ql[64 * h..64 * h + 64];
            let qh = &self.qh[32 * h..32 * h + 32];
            let sc = &sc[8 * h..8 * h + 8];
            let y = &mut out[128 * h..128 * h + 128];
            for l in 0..32 {
                let is = l / 16;
                let hb = qh[l];
                let q0 = (ql[l] & 0x0f) | ((hb & 3) << 4);
                let q1 = (ql[l + 32] & 0x0f) | (((hb >> 2) & 3) << 4);
                let q2 = (ql[l] >> 4) | (((hb >> 4) & 3) << 4);
                let q3 = (ql[l + 32] >> 4) | (((hb >> 6) & 3) << 4);
                y[l] = sc[is] * f32::from(q0 as i8 - 32);
                y[l + 32] = sc[is + 2] * f32::from(q1 as i8 - 32);
                y[l + 64] = sc[is + 4] * f32::from(q2 as i8 - 32);
                y[l + 96] = sc[is + 6] * f32::from(q3 as i8 - 32);
            }
        }
    }
}
