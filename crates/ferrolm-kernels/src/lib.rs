//! Quantized block formats and CPU kernels for ferrolm.
//!
//! - [`GgmlType`]: every GGML tensor type with its block geometry.
//! - [`quant`]: one module per block format — a `#[repr(C)]` block, a scalar dequantizer and a
//!   dot product — dispatched by type.
//! - [`simd`]: plain f32 vector kernels with run-time CPU feature dispatch.

pub mod quant;
pub mod simd;
mod types;

pub use types::GgmlType;
