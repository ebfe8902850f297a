//! Q2_K: 256-value super-blocks of sixteen 16-value sub-blocks, 2-bit values, with 4-bit
//! sub-block scales and minimums relative to two f16 super-block factors.
//!
//! Layout (84 bytes): `scales: [u8; 16]`, `qs: [u8; 64]`, `d: f16`, `dmin: f16`.
//!
//! `scales[j]` holds sub-block `j`'s scale in its low nibble and its minimum in its high nibble.
//! The super-block is two halves of 128 values; in half `h`, with `q = qs[32h..32h + 32]`, value
//! `128h + 32k + l` (`k` = 0..4, `l` = 0..32) is `(q[l] >> 2k) & 3`. Its sub-block is
//! `(128h + 32k + l) / 16` and it dequantizes to `(d · sc) · q - (dmin · m)`.

use half::f16;

use super::fp16::f16_to_f32;
use crate::quant::{QK_K, impl_quant_block};

/// One Q2_K super-block, laid out as in GGML.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ2K {
    /// Sub-block scales (low nibbles) and minimums (high nibbles).
    pub scales: [u8; QK_K / 16],
    /// Packed 2-bit values (see the module docs for the order).
    pub qs: [u8; QK_K / 4],
    /// Super-block scale for the sub-block scales.
    pub d: f16,
    /// Super-block scale for the sub-block minimums.
    pub dmin: f16,
}

const _: () = assert!(size_of::<BlockQ2K>() == 84);
impl_quant_block!(BlockQ2K, QK_K, 84);

impl BlockQ2K {
    /// Parses a super-block from its 84 little-endian bytes.
    #[inline(always)]
    pub fn from_bytes(b: &[u8; 84]) -> Self {
        let mut scales = [0u8; QK_K / 16];
        scales.copy_from_slice(&b[0..16]);
        let mut qs = [0u8; QK_K / 4];
        qs.copy_from_slice(&b[16..80]);
        Self { scales, qs, d: f16::from_le_bytes([b[80], b[81]]), dmin: f16::from_le_bytes([b[82], b[83]]) }
    }

    /// The super-block's 84 bytes, as stored in GGUF files.
    pub fn to_bytes(&self) -> [u8; 84] {
        let mut out = [0u8; 84];
        out[0..16].copy_from_slice(&self.scales);
        out[16..80].copy_from_slice(&self.qs);
        out[80..82].copy_from_slice(&self.d.to_le_bytes());
        out[82..84].copy_from_slice(&self.dmin.to_le_bytes());
        out
    }

    /// The 256 unsigned 2-bit values in element order.
    #[inline(always)]
    pub fn values(&self) -> [u8; QK_K] {
        let mut v = [0u8; QK_K];
        // v: [2 halves][4 shifts][32]; qs: [2 halves][32].
        for (q, y) in self.qs.chunks_exact(32).zip(v.chunks_exact_mut(128)) {
            for (k, yk) in y.chunks_exact_mut(32).enumerate() {
                for (o, &b) in yk.iter_mut().zip(q) {
                    *o = (b >> (2 * k)) & 3;
                }
            }
        }
        v
    }

    /// Dequantizes the super-block into 256 values.
    #[inline(always)]
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = f16_to_f32(self.d);
        let dmin = f16_to_f32(self.dmin);
        let v = self.values();
        for ((y, q), &sc) in out.chunks_exact_mut(16).zip(v.chunks_exact(16)).zip(&self.scales) {
            let dl = d * f32::from(sc & 0x0f);
            let ml = dmin * f32::from(sc >> 4);
            for (o, &q) in y.iter_mut().zip(q) {
                *o = dl * f32::from(q) - ml;
            }
        }
    }
}
