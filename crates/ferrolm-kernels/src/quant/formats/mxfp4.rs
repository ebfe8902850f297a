//! MXFP4 (OCP microscaling FP4): 32 E2M1 values sharing one E8M0 (power-of-two) scale, as in the
//! gpt-oss GGUFs and llama.cpp's `MXFP4_MOE` quantization of mixture-of-experts weights.
//!
//! Layout (17 bytes): `e: u8` (E8M0 exponent), `qs: [u8; 16]`. Element `j < 16` is the low nibble
//! of `qs[j]`, element `j + 16` its high nibble; `x = KVALUES_MXFP4[nibble] · e8m0_to_f32_half(e)`.
//! GGML stores the E2M1 levels doubled (so that they are integers, `0, 1, 2, 3, 4, 6, 8, 12` and
//! their negatives) and halves the scale to compensate: `e8m0_to_f32_half(e) = 2^(e - 128)`.
//!
//! Like GGML (`ggml_e8m0_to_fp32_half`), `e = 255` is not read as the specification's NaN but as
//! the finite `2^127`, and `e = 0, 1` give the subnormals `2^-128, 2^-127`.

use crate::GgmlType;
use crate::quant::{QuantError, impl_quant_block, quantize_row_blocks};

/// Elements per MXFP4 block.
pub const QK_MXFP4: usize = 32;

/// The sixteen E2M1 values a 4-bit MXFP4 code selects, doubled (`kvalues_mxfp4` in GGML): codes
/// 0..8 are `0, 0.5, 1, 1.5, 2, 3, 4, 6` times two, codes 8..16 the same with the sign bit set
/// (code 8, `-0`, is stored as 0).
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// Half the value of the E8M0 scale `e`, `2^(e - 128)`, exactly as GGML's
/// `ggml_e8m0_to_fp32_half`: subnormal bit patterns for `e < 2`, and no NaN (`e = 255` gives
/// `2^127`).
#[inline(always)]
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 { 0x0020_0000u32 << e } else { u32::from(e - 1) << 23 };
    f32::from_bits(bits)
}

/// One MXFP4 block, laid out as in GGML.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockMXFP4 {
    /// Shared E8M0 exponent: the block's scale is `2^(e - 127)` (halved for the doubled levels).
    pub e: u8,
    /// Packed codes: low nibbles are elements 0..16, high nibbles elements 16..32.
    pub qs: [u8; QK_MXFP4 / 2],
}

const _: () = assert!(size_of::<BlockMXFP4>() == 17);
impl_quant_block!(BlockMXFP4, QK_MXFP4, 17, quantize);

/// The 32 doubled E2M1 levels of 16 packed code bytes: low nibbles first, then high nibbles.
#[inline(always)]
pub fn mxfp4_levels(qs: &[u8; 16]) -> [i8; 32] {
    let mut v = [0i8; 32];
    for j in 0..16 {
        v[j] = KVALUES_MXFP4[usize::from(qs[j] & 0x0f)];
        v[j + 16] = KVALUES_MXFP4[usize::from(qs[j] >> 4)];
    }
    v
}

/// The code whose level times `d` is nearest to `x` (the first on ties, so `0` before `-0` and
/// the smaller magnitude before the larger), as GGML's `best_index_mxfp4`.
#[inline(always)]
fn best_index(x: f32, d: f32) -> u8 {
    let mut best = 0u8;
    let mut best_err = (f32::from(KVALUES_MXFP4[0]) * d - x).abs();
    for (i, &k) in KVALUES_MXFP4.iter().enumerate().skip(1) {
        let err = (f32::from(k) * d - x).abs();
        if err < best_err {
            best = i as u8;
            best_err = err;
        }
    }
    best
}

/// The C cast `(uint8_t) f` of an integral float as x86-64 compilers emit it (truncation to a
/// 32-bit integer, whose low byte is kept): values outside 0..=255 wrap modulo 256, and an
/// infinity (the "integer indefinite" `0x80000000`) gives 0. numpy's `astype(np.uint8)`, which
/// the `gguf` package's quantizer uses, does the same.
#[inline(always)]
fn c_f32_to_u8(f: f32) -> u8 {
    if f.is_finite() && f.abs() < 2_147_483_648.0 { (f as i32) as u8 } else { 0 }
}

impl BlockMXFP4 {
    /// Parses a block from its 17 bytes.
    #[inline(always)]
    pub fn from_bytes(b: &[u8; 17]) -> Self {
        let mut qs = [0u8; 16];
        qs.copy_from_slice(&b[1..17]);
        Self { e: b[0], qs }
    }

    /// The block's 17 bytes, as stored in GGUF files.
    pub fn to_bytes(&self) -> [u8; 17] {
        let mut out = [0u8; 17];
        out[0] = self.e;
        out[1..17].copy_from_slice(&self.qs);
        out
    }

    /// Dequantizes the block: `out[j] = KVALUES_MXFP4[q[j]] · e8m0_to_f32_half(e)`.
    #[inline(always)]
    pub fn dequantize(&self, out: &mut [f32; QK_MXFP4]) {
        let d = e8m0_to_f32_half(self.e);
        for (o, v) in out.iter_mut().zip(mxfp4_levels(&self.qs)) {
            *o = f32::from(v) * d;
        }
    }

    /// GGML's reference quantizer (`quantize_row_mxfp4_ref`): with `amax` the largest magnitude
    /// (NaNs ignored), `e = floor(log2(amax)) - 2 + 127` (0 for an all-zero block) and each value
    /// takes the code of the nearest level at scale `e8m0_to_f32_half(e)`.
    ///
    /// GGML converts the exponent with a C cast to `uint8_t`, undefined outside 0..=255: this
    /// follows what GGML's and the `gguf` package's builds do on x86-64 (see [`c_f32_to_u8`]), so
    /// a block with `amax < 2^-125` gets a wrapped, huge scale and quantizes to zeros.
    pub fn quantize(x: &[f32; QK_MXFP4]) -> Self {
        let mut amax = 0f32;
        for &v in x {
            if amax < v.abs() {
                amax = v.abs();
            }
        }
        let e = if amax > 0.0 { c_f32_to_u8(amax.log2().floor() - 2.0 + 127.0) } else { 0 };
        let d = e8m0_to_f32_half(e);
        let mut qs = [0u8; 16];
        for j in 0..16 {
            qs[j] = best_index(x[j], d) | (best_index(x[j + 16], d) << 4);
        }
        Self { e, qs }
    }
}

/// Quantizes a row (a multiple of 32 values) with [`BlockMXFP4::quantize`].
pub fn quantize_row_mxfp4(x: &[f32]) -> Result<Vec<BlockMXFP4>, QuantError> {
    quantize_row_blocks(GgmlType::MXFP4, x)
}
