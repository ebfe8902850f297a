//! Bytes of a model file: a read-only memory map, or an owned buffer.

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

/// The bytes a parsed file borrows its tensors from.
pub enum Storage {
    /// A read-only memory map of a file on disk.
    Mapped(Mmap),
    /// Bytes held in memory.
    Owned(Vec<u8>),
}

impl Storage {
    /// Maps a file read-only.
    pub fn map(path: &Path) -> std::io::Result<Self> {
        let file = File::open(path)?;
        // SAFETY: the map is read-only and private to this process. Like every mmap-based model
        // loader we rely on the file not being truncated or rewritten while it is mapped; a file
        // changed underneath would give wrong weights or SIGBUS, never memory unsafety in Rust's
        // sense of aliasing, because we only ever read through shared slices.
        let map = unsafe { Mmap::map(&file)? };
        Ok(Storage::Mapped(map))
    }

    /// All bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}
