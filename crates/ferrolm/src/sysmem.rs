//! The process's memory as the operating system sees it: resident set size, and giving freed
//! heap memory back.
//!
//! Pools that grow and shrink (the engine's prefix cache, the slots' KV caches) free large
//! buffers in an order unrelated to the one they were allocated in. glibc's allocator keeps such
//! memory mapped inside its heaps for reuse, so the resident set grows far past what is live (a
//! 256 MiB prefix cache was seen holding over 1 GiB). [`release_free_memory`] asks the allocator
//! to hand the free pages of every heap back to the system; the engine calls it, at most once a
//! second, after it dropped or shrank caches.
//!
//! A trim cannot catch everything: between trims, and for chunks glibc's heuristics keep, a
//! long-running process (the server) still sees its RSS swing by a hundred MiB with its load.
//! [`return_large_buffers`] makes the allocator map every large buffer on its own and unmap it
//! when freed, so that memory goes back at once; the server calls it at start.

use std::time::{Duration, Instant};

/// Current and peak resident set size in bytes (`VmRSS`, `VmHWM` of `/proc/self/status`), where
/// the system reports them (Linux).
pub fn resident() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Returns the free pages of the allocator's heaps to the system (glibc's `malloc_trim`); a
/// no-op with other allocators and systems. Returns whether any memory was released.
pub fn release_free_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only walks and madvises the allocator's own free chunks, under
        // the allocator's locks; it takes no pointers from us.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Buffers of at least this many bytes get their own mapping under [`return_large_buffers`].
pub const LARGE_BUFFER_BYTES: usize = 256 << 10;

/// Makes the allocator give every buffer of [`LARGE_BUFFER_BYTES`] or more its own memory
/// mapping and unmap it when it is freed (glibc's `mallopt(M_MMAP_THRESHOLD)`, which also turns
/// off glibc's habit of raising that threshold after such a buffer is freed). Freed KV rows,
/// prompt batches and request bodies then leave the resident set at once instead of staying in
/// a heap. Costs a system call and fresh page faults per large allocation, which the decode loop
/// does not make (it reuses its buffers). Process-wide: meant for a binary's start, not for a
/// library to call behind its host's back. A no-op returning false with other allocators.
pub fn return_large_buffers() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets a tunable of the allocator, under its lock; no pointers.
        unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, LARGE_BUFFER_BYTES as libc::c_int) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Calls [`release_free_memory`] when memory was freed since the last call, at most once per
/// `interval`.
#[derive(Debug)]
pub struct Releaser {
    interval: Duration,
    last: Option<Instant>,
    pending: bool,
}

impl Releaser {
    /// A releaser that trims at most once per `interval`.
    pub fn new(interval: Duration) -> Self {
        Self { interval, last: None, pending: false }
    }

    /// Notes that buffers were freed.
    pub fn freed(&mut self) {
        self.pending = true;
    }

    /// Releases free memory when something was freed and the interval has passed since the last
    /// release; returns whether it asked the allocator.
    pub fn maybe_release(&mut self, now: Instant) -> bool {
        if !self.pending || self.last.is_some_and(|t| now.duration_since(t) < self.interval) {
            return false;
        }
        let t0 = Instant::now();
        let released = release_free_memory();
        tracing::debug!(released, micros = t0.elapsed().as_micros() as u64, "returned free heap memory");
        self.last = Some(now);
        self.pending = false;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_only_after_frees_and_at_most_once_per_interval() {
        let mut r = Releaser::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert!(!r.maybe_release(t0), "nothing freed yet");
        r.freed();
        assert!(r.maybe_release(t0));
        r.freed();
        assert!(!r.maybe_release(t0 + Duration::from_millis(500)), "within the interval");
        assert!(r.maybe_release(t0 + Duration::from_millis(1000)), "pending since the last one");
        assert!(!r.maybe_release(t0 + Duration::from_secs(5)), "nothing freed since");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn resident_set_is_reported() {
        let (rss, peak) = resident().expect("/proc/self/status");
        assert!(rss > 0 && peak >= rss);
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn freed_fragmented_heap_memory_goes_back_to_the_system() {
        // 64 MiB in 64 KiB buffers (below glibc's mmap threshold: they live in a heap), every
        // other one freed: the heap cannot shrink from its top, only a trim that madvises the
        // free chunks inside it gives the freed half back. Other tests of this binary run in
        // parallel threads and may grow the RSS meanwhile (a model's pages): three tries.
        let mut drops = Vec::new();
        for _ in 0..3 {
            let mut bufs: Vec<Vec<u8>> = (0..1024).map(|i| vec![i as u8 | 1; 64 << 10]).collect();
            let before = resident().expect("rss").0;
            for b in bufs.iter_mut().step_by(2) {
                *b = Vec::new();
            }
            release_free_memory();
            let after = resident().expect("rss").0;
            assert!(bufs.iter().skip(1).step_by(2).all(|b| b[0] != 0), "kept buffers intact");
            if after + (16 << 20) < before {
                return;
            }
            drops.push(before as i64 - after as i64);
        }
        panic!("RSS fell by only {drops:?} bytes after freeing 32 MiB: freed memory was kept");
    }

    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn large_buffers_leave_the_resident_set_when_freed_without_a_trim() {
        assert!(return_large_buffers());
        // Without it, freeing a 16 MiB buffer raises glibc's threshold past 1 MiB: the 1 MiB
        // buffers below then live in a heap, and after the first round (a fresh heap may still
        // shrink) freeing every other one gives nothing back. Rounds after the first count;
        // other tests of this binary may grow the RSS meanwhile, so one of three must pass.
        let mut drops = Vec::new();
        for round in 0..4 {
            drop(vec![1u8; 16 << 20]);
            let mut bufs: Vec<Vec<u8>> = (0..64).map(|i| vec![i as u8 | 1; 1 << 20]).collect();
            let before = resident().expect("rss").0;
            for b in bufs.iter_mut().step_by(2) {
                *b = Vec::new();
            }
            let after = resident().expect("rss").0;
            assert!(bufs.iter().skip(1).step_by(2).all(|b| b[0] != 0), "kept buffers intact");
            // Half of what was freed: other tests' allocations and the kernel's lazily summed
            // RSS counters blur the figure (23 of 32 MiB was seen under a loaded CI run);
            // without the setting nothing at all comes back.
            if round > 0 && after + (16 << 20) < before {
                return;
            }
            drops.push(before as i64 - after as i64);
        }
        panic!("RSS fell by only {drops:?} bytes after each freeing of 32 MiB of 1 MiB buffers");
    }
}
