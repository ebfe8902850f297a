//! Model file formats.

pub mod gguf;
pub mod gguf_write;
mod storage;

pub use storage::Storage;
