//! Model file formats.

pub mod gguf;
mod storage;

pub use storage::Storage;
