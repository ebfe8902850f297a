//! The worker pool used by the CPU kernels: a persistent [`ThreadPool`] of spinning workers,
//! sized once to the machine's physical cores (or as asked) and resizable between passes.

pub mod affinity;
mod pool;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

pub use pool::ThreadPool;

use crate::{Error, Result};

/// The global pool, created on first use.
static GLOBAL: Mutex<Option<Arc<ThreadPool>>> = Mutex::new(None);

/// Sizes the global worker pool. `None` uses one thread per physical core. Call before the
/// first forward pass; a later call with a different size replaces the pool (as
/// [`set_num_threads`]), with the same size it does nothing.
pub fn init(n_threads: Option<usize>) -> Result<()> {
    let n = match n_threads {
        Some(0) => return Err(Error::InvalidInput("the number of threads must be at least 1".into())),
        Some(n) => n,
        None => physical_cores(),
    };
    set_num_threads(n)
}

/// Sizes the global worker pool and chooses its CPUs, as a program does once at start:
///
/// - `cpus`: run on these CPUs (the user's `--cpu-mask`); `None` picks the performance cores
///   where the CPU mixes fast and slow cores ([`affinity::performance_cores`]), else no
///   restriction;
/// - `n_threads`: `None` uses one thread per CPU of the chosen set, or per physical core.
///
/// The calling thread is restricted to the set and the pool rebuilt, so that all its threads
/// inherit it. Returns the set applied, if any.
pub fn configure(
    n_threads: Option<usize>,
    cpus: Option<affinity::CpuSet>,
) -> Result<Option<affinity::CpuSet>> {
    let set = match cpus {
        Some(s) => Some(s),
        None => affinity::performance_cores(),
    };
    let Some(set) = set else {
        init(n_threads)?;
        return Ok(None);
    };
    affinity::pin_current_thread(&set)?;
    let n = match n_threads {
        Some(0) => return Err(Error::InvalidInput("the number of threads must be at least 1".into())),
        Some(n) => n,
        None => set.len(),
    };
    // Drop the old pool first: its workers were started with the previous mask.
    GLOBAL.lock().unwrap_or_else(|e| e.into_inner()).take();
    set_num_threads(n)?;
    tracing::info!(cpus = %set, threads = n, "worker threads restricted to CPUs");
    Ok(Some(set))
}

/// Replaces the global pool by one of `n` threads (the caller of a forward pass included).
/// Passes already running keep the pool they started with.
pub fn set_num_threads(n: usize) -> Result<()> {
    if n == 0 {
        return Err(Error::InvalidInput("the number of threads must be at least 1".into()));
    }
    let mut g = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
    if g.as_ref().is_some_and(|p| p.n_threads() == n) {
        return Ok(());
    }
    let pool = ThreadPool::new(n)
        .map_err(|e| Error::InvalidInput(format!("cannot start a worker pool of {n} threads: {e}")))?;
    *g = Some(Arc::new(pool));
    // Other parallel work (quantizing a model, embeddings) runs on rayon: size it alike where
    // it was not sized yet.
    let _ = rayon::ThreadPoolBuilder::new().num_threads(n).build_global();
    Ok(())
}

/// Number of threads in the global pool.
pub fn current_num_threads() -> usize {
    pool().n_threads()
}

/// The global pool (created with one thread per physical core if none was set up).
pub fn pool() -> Arc<ThreadPool> {
    let mut g = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = g.as_ref() {
        return Arc::clone(p);
    }
    let n = physical_cores();
    // If threads cannot be spawned at all, fall back to the calling thread alone.
    let p = Arc::new(ThreadPool::new(n).unwrap_or_else(|_| ThreadPool::single()));
    *g = Some(Arc::clone(&p));
    p
}

/// Physical cores available to this process: distinct (package, core) pairs among the CPUs it
/// may run on, read from Linux sysfs; elsewhere, or if sysfs is unreadable, the number of
/// logical CPUs.
pub fn physical_cores() -> usize {
    let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
    #[cfg(target_os = "linux")]
    {
        let mut cores = std::collections::HashSet::new();
        let Ok(dir) = std::fs::read_dir("/sys/devices/system/cpu") else { return logical };
        for e in dir.flatten() {
            let name = e.file_name();
            let Some(id) = name.to_str().and_then(|s| s.strip_prefix("cpu")) else { continue };
            if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let topo = e.path().join("topology");
            let read = |f: &str| std::fs::read_to_string(topo.join(f)).ok().map(|s| s.trim().to_string());
            if let (Some(pkg), Some(core)) = (read("physical_package_id"), read("core_id")) {
                cores.insert((pkg, core));
            }
        }
        if !cores.is_empty() {
            return cores.len().min(logical);
        }
    }
    logical
}

/// Runs `f(item)` for every item in `0..n_items` on the threads of `pool`, each thread claiming
/// the next unclaimed item (dynamic load balancing with one atomic add per item).
pub(crate) fn parallel_for(pool: &ThreadPool, n_items: usize, f: impl Fn(usize) + Sync) {
    if n_items == 0 {
        return;
    }
    if n_items == 1 || pool.n_threads() == 1 {
        (0..n_items).for_each(f);
        return;
    }
    let next = AtomicUsize::new(0);
    pool.run(|_| {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n_items {
                break;
            }
            f(i);
        }
    });
}

/// Runs `f(c, chunk)` for every `chunk`-long piece of `data` (the last may be shorter), the
/// pieces spread over the threads of `pool` as [`parallel_for`] does. `c` is the piece's index:
/// it starts at element `c * chunk`.
pub(crate) fn par_chunks_mut<T: Send>(
    pool: &ThreadPool,
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    let chunk = chunk.max(1);
    let (ptr, len) = (SendPtr(data.as_mut_ptr()), data.len());
    parallel_for(pool, len.div_ceil(chunk), |c| {
        let start = c * chunk;
        let n = chunk.min(len - start);
        // SAFETY: piece `c` is `start..start + n`, inside `data`; every index `c` is claimed by
        // exactly one thread, and the pieces of different indices do not overlap, so no two
        // threads ever hold the same element. `data` stays borrowed until the region ends.
        let piece = unsafe { std::slice::from_raw_parts_mut(ptr.at(start), n) };
        f(c, piece);
    });
}

/// A pointer shared by the tasks of one parallel region (see [`par_chunks_mut`]).
struct SendPtr<T>(*mut T);

// SAFETY: the tasks only touch disjoint pieces through it (see `par_chunks_mut`).
unsafe impl<T: Send> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The pointer `i` elements further.
    ///
    /// # Safety
    /// `i` must be within the allocation the pointer came from.
    unsafe fn at(&self, i: usize) -> *mut T {
        // SAFETY: the caller's contract.
        unsafe { self.0.add(i) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn par_chunks_mut_visits_every_element_once() {
        let pool = ThreadPool::new(3).expect("pool");
        for (len, chunk) in [(0, 4), (1, 4), (10, 3), (64, 16), (65, 16)] {
            let mut v = vec![0usize; len];
            par_chunks_mut(&pool, &mut v, chunk, |c, piece| {
                for (i, x) in piece.iter_mut().enumerate() {
                    *x += c * chunk + i + 1;
                }
            });
            assert!(v.iter().enumerate().all(|(i, &x)| x == i + 1), "{len} {chunk}: {v:?}");
        }
    }

    #[test]
    fn parallel_for_visits_every_item_once() {
        let pool = ThreadPool::new(3).expect("spawn");
        for n in [0, 1, 2, 7, 1000] {
            let seen: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            parallel_for(&pool, n, |i| {
                seen[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn physical_cores_is_sane() {
        let p = physical_cores();
        assert!(p >= 1 && p <= std::thread::available_parallelism().map_or(1, |n| n.get()));
    }

    #[test]
    fn resizing_and_zero() {
        assert!(set_num_threads(0).is_err());
        assert!(init(Some(0)).is_err());
    }
}
