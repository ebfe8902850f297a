//! The process's resident memory, from `/proc/self/status` (Linux).

/// Current and peak resident set size in bytes (`VmRSS`, `VmHWM`), where the system reports them.
pub fn rss() -> Option<(u64, u64)> {
    ferrolm::sysmem::resident()
}

/// Bytes as MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}
