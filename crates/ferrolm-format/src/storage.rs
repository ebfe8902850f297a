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

/// What a non-regular file is, for error messages.
fn file_kind(kind: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt as _;
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_char_device() || kind.is_block_device() {
            return "a device";
        }
        if kind.is_socket() {
            return "a socket";
        }
    }
    if kind.is_dir() { "a directory" } else { "not a regular file" }
}

impl Storage {
    /// Maps a file read-only. Anything but a regular file (a FIFO, a directory, a device, a
    /// socket) is refused with [`std::io::ErrorKind::InvalidInput`] before it is opened: opening
    /// a FIFO for reading would block until a writer appears, and a device has no length to map.
    pub fn map(path: &Path) -> std::io::Result<Self> {
        let kind = std::fs::metadata(path)?.file_type();
        if !kind.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("not a regular file (it is {})", file_kind(&kind)),
            ));
        }
        let file = File::open(path)?;
        // SAFETY: the map is read-only and private to this process. Like every mmap-based model
        // loader we rely on the file not being truncated or rewritten while it is mapped; a file
        // changed underneath would give wrong weights or SIGBUS, never memory unsafety in Rust's
        // sense of aliasing, because we only ever read through shared slices.
        let map = unsafe { Mmap::map(&file)? };
        Ok(Storage::Mapped(map))
    }

    /// Tells the system that bytes `range` will not be read soon (a memory map only): it may
    /// drop their pages from this process's resident memory; a later read maps them again from
    /// the page cache or the file, with the same bytes. Used once a weight has a packed copy.
    pub fn release(&self, range: std::ops::Range<usize>) {
        #[cfg(unix)]
        if let Storage::Mapped(m) = self
            && range.start < range.end
            && range.end <= m.len()
        {
            // SAFETY: the map is a read-only shared mapping of a file: MADV_DONTNEED only drops
            // pages, and the next access faults the file's same bytes back in, so no slice
            // borrowed from the map ever observes a change. (memmap2 widens the range to whole
            // pages; neighbouring bytes are refetched the same way.)
            let res = unsafe {
                m.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, range.start, range.len())
            };
            if let Err(e) = res {
                tracing::debug!(error = %e, "madvise(DONTNEED) failed; the pages stay resident");
            }
        }
        #[cfg(not(unix))]
        let _ = range;
    }

    /// All bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}
