//! The worker pool used by the CPU kernels.

use crate::{Error, Result};

/// Sizes the global worker pool. `None` uses every available core. Call once, before the first
/// forward pass; later calls with the same size are no-ops.
pub fn init(n_threads: Option<usize>) -> Result<()> {
    let n = match n_threads {
        Some(0) => return Err(Error::InvalidInput("the number of threads must be at least 1".into())),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    match rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .thread_name(|i| format!("ferrolm-worker-{i}"))
        .build_global()
    {
        Ok(()) => Ok(()),
        Err(_) if rayon::current_num_threads() == n => Ok(()),
        Err(e) => Err(Error::InvalidInput(format!("cannot size the worker pool to {n} threads: {e}"))),
    }
}

/// Number of threads in the pool.
pub fn current_num_threads() -> usize {
    rayon::current_num_threads()
}
