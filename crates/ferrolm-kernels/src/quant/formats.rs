//! The GGML block formats, one module per format: the block laid out as in GGML, its scalar
//! dequantizer and dot product with f32 values, and GGML's reference quantizer where the crate has
//! one. [`crate::quant`] re-exports every module (`quant::q4_0`, `quant::q4_k`, ...): use those
//! paths.
//!
//! - element formats: [`fp32`], [`fp16`], [`bf16`];
//! - 32-value blocks: [`q4_0`], [`q4_1`], [`q5_0`], [`q5_1`], [`q8_0`], [`iq4_nl`], [`mxfp4`];
//! - 256-value super-blocks (K-quants): [`q2_k`], [`q3_k`], [`q4_k`], [`q5_k`], [`q6_k`],
//!   [`iq4_xs`];
//! - [`q8_act`]: the 8-bit formats activations are quantized to for the integer dot products
//!   (Q8_0, Q8_1, Q8_K).

pub mod bf16;
pub mod fp16;
pub mod fp32;
pub mod iq4_nl;
pub mod iq4_xs;
pub mod mxfp4;
pub mod q2_k;
pub mod q3_k;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;
pub mod q8_act;
