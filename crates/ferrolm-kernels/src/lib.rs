//! Quantized block formats and CPU kernels for ferrolm.
//!
//! - [`GgmlType`]: every GGML tensor type with its block geometry.
//! - [`quant`]: one module per block format — a `#[repr(C)]` block, a scalar dequantizer and a
//!   dot product — dispatched by type.
//! - [`Isa`]: instruction-set levels and run-time detection.
//! - [`simd`]: plain f32 vector kernels with run-time CPU feature dispatch.
//! - [`simd_attn`]: f32 kernels for attention (small GEMMs, online softmax, f16 conversions).
//! - [`rows`]: row kernels of the forward pass (RMSNorm, RoPE).

mod isa;
pub mod quant;
pub mod rows;
pub mod simd;
pub mod simd_attn;
mod simd_vec;
mod types;

pub use isa::Isa;
pub use types::GgmlType;
