//! Q3_K: 256-value super-blocks of sixteen 16-value sub-blocks, 3-bit signed values with 6-bit
//! signed sub-block scales relative to one f16 super-block scale.
//!
//! Layout (110 bytes): `hmask: [u8; 32]`, `qs: [u8; 64]`, `scales: [u8; 12]`, `d: f16`.
//!
//! Values: the super-block is two halves of 128 values; in half `h`, with `q = qs[32h..32h + 32]`,
//! value `i = 128h + 32k + l` (`k` = 0..4, `l` = 0..32) has low bits `(q[l] >> 2k) & 3` and high
//! bit `(hmask[l] >> (4h + k)) & 1`. The value is `low - 4` when the high bit is CLEAR and `low`
//! when it is set, so it lies in -4..=3.
//!
//! `scales` packs sixteen 6-bit scales `s[j]` (stored with an offset of 32):
//!
//! ```text
//! byte  0..8 : low nibble = bits 0..4 of s[0..8], high nibble = bits 0..4 of s[8..16]
//! byte 8..12 : bits 2k..2k+2 of byte 8 + i = bits 4..6 of s[4k + i]   (k = 0..4, i = 0..4)
//! ```
//!
//! Element `i` dequantizes to `(d · (s[i / 16] - 32)) · value`.

use half::f16;

use super::fp16::f16_to_f32;
use crate::quant::{QK_K, impl_quant_block};

/// One Q3_K super-block, laid out as in GGML.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ3K {
    /// High bits of the values (see the module docs for the order).
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits of the values (see the module docs for the order).
    pub qs: [u8; QK_K / 4],
    /// Packed 6-bit sub-block scales (see the module docs).
    pub scales: [u8; 12],
    /// Super-block scale.
    pub d: f16,
}

const _: () = assert!(size_of::<BlockQ3K>() == 110);
impl_quant_block!(BlockQ3K, QK_K, 110);

/// Unpacks the sixteen signed sub-block scales (`s - 32`, in -32..=31) from the 12 packed bytes
/// (the `kmask1`/`kmask2` shuffle of GGML's `dequantize_row_q3_K`).
#[inline(always)]
pub fn unpack_scales_q3k(s: &[u8; 12]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let low = (s[j % 8] >> (4 * (j / 8))) & 0x0f;
        let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = (low | (high << 4)) as i8 - 32;
    }
    out
}

impl BlockQ3K {
    /// Parses a super-block from its 110 little-endian bytes.
    #[inline(always)]
    pub fn from_bytes(b: &[u8; 110]) -> Self {
        let mut hmask = [0u8; QK_K / 8];
        hmask.copy_from_slice(&b[0..32]);
        let mut qs = [0u8; QK_K / 4];
        qs.copy_from_slice(&b[32..96]);
        let mut scales = [0u8; 12];
        scales.copy_from_slice(&b[96..108]);
        Self { hmask, qs, scales, d: f16::from_le_bytes([b[108], b[109]]) }
    }

    /// The super-block's 110 bytes, as stored in GGUF files.
    pub fn to_bytes(&self) -> [u8; 110] {
        let mut out = [0u8; 110];
        out[0..32].copy_from_slice(&self.hmask);
        out[32..96].copy_from_slice(&self.qs);
        out[96..108].copy_from_slice(&self.scales);
        out[108..110].copy_from_slice(&self.d.to_le_bytes());
        out
    }

    /// The 256 signed 3-bit values (-4..=3) in element order.
    #[inline(always)]
    pub fn values(&self) -> [i8; QK_K] {
        let mut v = [0i8; QK_K];
        // v: [2 halves][4 shifts][32]; qs: [2 halves][32]; hmask bit 4h + k.
        for (h, (q, y)) in self.qs.chunks_exact(32).zip(v.chunks_exact_mut(128)).enumerate() {
            for (k, yk) in y.chunks_exact_mut(32).enumerate() {
                let bit = 4 * h + k;
                for ((o, &b), &hm) in yk.iter_mut().zip(q).zip(&self.hmask) {
                    let low = ((b >> (2 * k)) & 3) as i8;
                    let high = ((hm >> bit) & 1) as i8;
                    *o = low - 4 + 4 * high;
                }
            }
        }
        v
    }

    /// Dequantizes the super-block into 256 values.
    #[inline(always)]
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = f16_to_f32(self.d);
        let sc = unpack_scales_q3k(&self.scales);
        let v = self.values();
        for ((y, q), &s) in out.chunks_exact_mut(16).zip(v.chunks_exact(16)).zip(&sc) {
            let dl = d * f32::from(s);
            for (o, &q) in y.iter_mut().zip(q) {
                *o = dl * f32::from(q);
            }
        }
    }
}
