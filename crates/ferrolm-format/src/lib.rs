//! Model file formats: the GGUF reader ([`gguf`]) and writer ([`gguf_write`]), the safetensors
//! reader and writer ([`safetensors`]), and the [`Storage`] (a memory map or an owned buffer) whose
//! bytes their tensors borrow.
//!
//! Every reader checks every count, length and range against the file before using it, and
//! reports malformed input as its own error type ([`gguf::GgufError`],
//! [`safetensors::SafetensorsError`]), never as a panic.
//!
//! Part of ferrolm, which re-exports this crate as `ferrolm::format`. It depends on no other
//! ferrolm crate except `ferrolm-kernels`, for [`GgmlType`] (the tensor types a file names); it
//! knows nothing of models, tokenizers or backends.

pub mod gguf;
pub mod gguf_write;
pub mod safetensors;
mod storage;

pub use ferrolm_kernels::GgmlType;
pub use storage::Storage;
