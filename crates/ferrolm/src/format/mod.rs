//! Model file formats.

pub mod gguf;
pub mod gguf_write;
pub mod safetensors;
mod storage;

pub use storage::Storage;
