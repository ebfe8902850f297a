//! Q4_K: 256-value super-blocks of eight 32-value sub-blocks, 4-bit values, with 6-bit sub-block
//! scales and minimums relative to two f16 super-block factors.
//!
//! Layout (144 bytes): `d: f16`, `dmin: f16`, `scales: [u8; 12]`, `qs: [u8; 128]`.
//!
//! `scales` packs eight 6-bit scales `sc[j]` and eight 6-bit minimums `m[j]`:
//!
//! ```text
//! byte  0..4 : sc[0..4] in bits 0..6, bits 4..6 of sc[4..8] in bits 6..8
//! byte  4..8 : m[0..4]  in bits 0..6, bits 4..6 of m[4..8]  in bits 6..8
//! byte 8..12 : low nibble = bits 0..4 of sc[4..8], high nibble = bits 0..4 of m[4..8]
//! ```
//!
//! `qs` holds four 32-byte chunks; chunk `c`'s low nibbles are sub-block `2c`, its high nibbles
//! sub-block `2c + 1`. Element `i` of sub-block `j` is `(d · sc[j]) · q - (dmin · m[j])`.

use half::f16;

use super::fp16::f16_to_f32;
use super::{QK_K, impl_quant_block};

/// Bytes of packed scales and minimums in a Q4_K block.
pub const K_SCALE_SIZE: usize = 12;

/// One Q4_K super-block, laid out as in GGML.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ4K {
    /// Super-block scale for the sub-block scales.
    pub d: f16,
    /// Super-block scale for the sub-block minimums.
    pub dmin: f16,
    /// Packed 6-bit sub-block scales and minimums (see the module docs).
    pub scales: [u8; K_SCALE_SIZE],
    /// Packed nibbles, four chunks of 32 bytes (see the module docs).
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(size_of::<BlockQ4K>() == 144);
impl_quant_block!(BlockQ4K, QK_K, 144);

/// Unpacks the 6-bit scale and minimum of sub-block `j` (0..8) from the 12 packed bytes
/// (`get_scale_min_k4` in GGML).
#[inline(always)]
pub fn scale_min_k4(j: usize, s: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        let sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        let m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        (sc, m)
    }
}

impl BlockQ4K {
    /// Parses a super-block from its 144 little-endian bytes.
    #[inline(always)]
    pub fn from_bytes(b: &[u8; 144]) -> Self {
        let mut scales = [0u8; K_SCALE_SIZE];
        scales.copy_from_slice(&b[4..16]);
        let mut qs = [0u8; QK_K / 2];
        qs.copy_from_slice(&b[16..144]);
        Self { d: f16::from_le_bytes([b[0], b[1]]), dmin: f16::from_le_bytes([b[2], b[3]]), scales, qs }
    }

    /// The super-block's 144 bytes, as stored in GGUF files.
    pub fn to_bytes(&self) -> [u8; 144] {
        let mut out = [0u8; 144];
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..4].copy_from_slice(&self.dmin.to_le_bytes());
        out[4..16].copy_from_slice(&self.scales);
        out[16..144].copy_from_slice(&self.qs);
        out
    }

    /// Dequantizes the super-block into 256 values.
    #[inline(always)]
    pub fn dequantize(&self, out: &mut [f32; QK_K]) {
        let d = f16_to_f32(self.d);
        let dmin = f16_to_f32(self.dmin);
        // out: [4 chunks][2 sub-blocks][32]; qs: [4 chunks][32 bytes].
        for (c, (q, y)) in self.qs.chunks_exact(32).zip(out.chunks_exact_mut(64)).enumerate() {
            let (sc0, m0) = scale_min_k4(2 * c, &self.scales);
            let (sc1, m1) = scale_min_k4(2 * c + 1, &self.scales);
            let (d0, min0) = (d * f32::from(sc0), dmin * f32::from(m0));
            let (d1, min1) = (d * f32::from(sc1), dmin * f32::from(m1));
            let (lo, hi) = y.split_at_mut(32);
            for l in 0..32 {
                lo[l] = d0 * f32::from(q[l] & 0x0f) - min0;
                hi[l] = d1 * f32::from(q[l] >> 4) - min1;
            }
        }
    }
}
