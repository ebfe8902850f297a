//! Q5_K: 256-value super-blocks of eight 32-value sub-blocks, 5-bit values, with 6-bit sub-block
//! scales and minimums relative to two f16 super-block factors (the scales packed as in Q4_K).
//!
//! Layout (176 bytes): `d: f16`, `dmin: f16`, `scales: [u8; 12]`, `qh: [u8; 32]`,
//! `qs: [u8; 128]`.
//!
//! `scales` is packed exactly as in [Q4_K](super::q4_k) (see [`scale_min_k4`]). `qs` holds four
//! 32-byte chunks; chunk `c`'s low nibbles are the low 4 bits of sub-block `2c`, its high nibbles
//! those of sub-block `2c + 1`. The fifth bit of element `l` of sub-block `j` is bit `j` of
//! `qh[l]`. Element `i` of sub-block `j` is `(d · sc[j]) · q - (dmin · m[j])`.

use half::f16;

use super::fp16::f16_to_f32;
use super::q4_k::{K_SCALE_SIZE, scale_min_k4};
use crate::quant::{QK_K, impl_quant_block};

/// One Q5_K super-block, laid out as in GGML.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ5K {
    /// Super-block scale for the sub-block scales.
    pub d: f16,
    /// Super-block scale for the sub-block minimums.
    pub dmin: f16,
    /// Packed 6-bit sub-block scales and minimums (as in Q4_K).
    pub scales: [u8; K_SCALE_SIZE],
    /// Fifth bits: bit `j` of `qh[l]` belongs to element `l` of sub-block `j`.
    pub qh: [u8; QK_K / 8],
    /// Packed low nibbles, four chunks of 32 bytes (see the module docs).
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(size_of::<BlockQ5K>() == 176);
impl_quant_block!(BlockQ5K, QK_K, 176);

impl BlockQ5K {
    /// Parses a super-block from its 176 little-endian bytes.
    #[inline(always)]
    pub fn from_bytes(b: &[u8; 176]) -> Self {
        let mut scales = [0u8; K_SCALE_SIZE];
        scales.copy_from_slice(&b[4..16]);
        let mut qh = [0u8; QK_K / 8];
        qh.copy_from_slice(&b[16..48]);
        let mut qs = [0u8; QK_K / 2];
        qs.copy_from_slice(&b[48..176]);
        Self { d: f16::from_le_bytes([b[0], b[1]]), dmin: f16::from_le_bytes([b[2], b[3]]), scales, qh, qs }
    }

    /// The super-block's 176 bytes, as stored in GGUF files.
    pub fn to_bytes(&self) -> [u8; 176] {
        let mut out = [0u8; 176];
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..4].copy_from_slice(&self.dmin.to_le_bytes());
        out[4..16].copy_from_slice(&self.scales);
        out[16..48].copy_from_slice(&self.qh);
        out[48..176].copy_from_slice(&self.qs);
        out
    }

    /// The 256 unsigned 5-bit values in element order.
    #[inline(always)]
    pub fn values(&self) -> [u8; QK_K] {
        let mut v = [0u8; QK_K];
        // v: [4 chunks][2 sub-blocks][32]; qs: [4 chunks][32 bytes].
        for (c, (q, y)) in self.qs.chunks_exact(32).zip(v.chunks_exact_mut(64)).enumerate() {
            let (lo, hi) = y.split_at_mut(32);
            for l in 0..32 {
                let h = self.qh[l];
                lo[l] = (q[l] & 0x0f) | (((h >> (2 * c)) & 1) << 4);
                hi[l] = (q[l] >> 4) | (((h >> (2 * c + 1)) & 1) << 4);
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
        for (j, (y, q)) in out.chunks_exact_mut(32).zip(v.chunks_exact(32)).enumerate() {
            let (sc, m) = scale_min_k4(j, &self.scales);
            let (dl, ml) = (d * f32::from(sc), dmin * f32::from(m));
            for (o, &q) in y.iter_mut().zip(q) {
                *o = dl * f32::from(q) - ml;
            }
        }
    }
}
