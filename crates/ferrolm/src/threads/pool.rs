//! A persistent worker pool for the forward pass: `n - 1` workers plus the calling thread run one
//! job at a time, each with its thread index.
//!
//! A decode step of a small model runs hundreds of parallel operations of a few microseconds
//! each, so waking sleeping threads through the kernel (what general-purpose pools do between
//! jobs) would cost as much as the work. Here a job is published by bumping a generation
//! counter that idle workers spin on; workers only block on a condition variable after a
//! couple of milliseconds without work, so a running generation never sleeps between ops.
//!
//! Workers join a job only until the caller has finished its own share: the caller then closes
//! the job and waits only for the workers already inside it. With more busy threads than cores
//! (other processes, parallel tests), a worker that is not scheduled in time is simply left
//! out instead of making every operation wait for its next time slice. Jobs must therefore
//! share their work dynamically ([`super::parallel_for`]).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before blocking.
const SPIN_BEFORE_SLEEP: Duration = Duration::from_millis(3);

/// Set in [`Shared::state`] once the caller has finished its share: no worker may join.
const CLOSED: u64 = 1 << 31;

/// The low bits of [`Shared::state`]: workers inside the job.
const ACTIVE: u64 = CLOSED - 1;

/// A job: called with the index of each thread that takes part.
type Job<'a> = &'a (dyn Fn(usize) + Sync);

/// State shared between the pool and its workers.
struct Shared {
    /// Bumped once per published job.
    generation: AtomicU64,
    /// The job of the current generation, valid while it is open or has workers inside.
    job: UnsafeCell<Option<Job<'static>>>,
    /// The current job's admission state: its generation in the high 32 bits, [`CLOSED`], and
    /// the number of workers inside the job in the low bits.
    state: AtomicU64,
    /// Workers blocked (or about to block) on `wake`.
    sleepers: AtomicUsize,
    /// Set when the pool is dropped.
    shutdown: AtomicBool,
    /// Set when a worker's job panicked; the publisher re-raises it.
    panicked: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only by the publisher while no worker is inside a job (after the
// previous job was closed with no active worker, and before the next is opened, serialised by
// `ThreadPool::dispatch`), and read by a worker only after it joined the open job by a CAS on
// `state` carrying that job's generation (Acquire pairs with the publisher's SeqCst store).
// The job itself is `Sync`.
unsafe impl Sync for Shared {}

thread_local! {
    /// Whether this thread is running a pool job.
    static IN_JOB: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Clears [`IN_JOB`] when a job returns or unwinds.
struct ResetInJob;

impl Drop for ResetInJob {
    fn drop(&mut self) {
        IN_JOB.with(|c| c.set(false));
    }
}

/// A fixed-size pool of spinning workers. See the module docs.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serialises jobs published from different threads.
    dispatch: Mutex<()>,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool").field("n_threads", &self.n_threads()).finish()
    }
}

impl ThreadPool {
    /// A pool of `n_threads` threads in all: the caller of [`ThreadPool::run`] is thread 0 and
    /// `n_threads - 1` workers are spawned. `0` is treated as 1.
    pub fn new(n_threads: usize) -> std::io::Result<Self> {
        let mut pool = Self::single();
        for i in 1..n_threads.max(1) {
            let shared = Arc::clone(&pool.shared);
            let handle = std::thread::Builder::new()
                .name(format!("ferrolm-worker-{i}"))
                .spawn(move || worker(&shared, i))?;
            pool.workers.push(handle);
        }
        Ok(pool)
    }

    /// A pool of the calling thread alone (spawns nothing, so it cannot fail).
    pub fn single() -> Self {
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            state: AtomicU64::new(CLOSED),
            sleepers: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            panicked: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        Self { shared, workers: Vec::new(), dispatch: Mutex::new(()) }
    }

    /// Threads in the pool, the caller included.
    pub fn n_threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `f(0)` on the calling thread and `f(i)` on each worker `i` that joins before
    /// `f(0)` returns (each at most once), and returns when every call has returned. `f` must
    /// share its work dynamically, so that any subset of threads completes it (the caller alone
    /// included). A panic in any call is re-raised here.
    ///
    /// Called from inside a job of any pool (nested parallelism), it runs `f(0)` alone on the
    /// calling thread instead of waiting for workers that are busy with the outer job.
    pub fn run(&self, f: impl Fn(usize) + Sync) {
        if self.workers.is_empty() {
            f(0);
            return;
        }
        if IN_JOB.with(|c| c.get()) {
            f(0);
            return;
        }
        let f = |i: usize| {
            IN_JOB.with(|c| c.set(true));
            let _reset = ResetInJob;
            f(i);
        };
        // A poisoned lock only means an earlier job panicked; the pool's state is still sound.
        let _guard = self.dispatch.lock().unwrap_or_else(|e| e.into_inner());
        let sh = &*self.shared;
        let job: Job<'_> = &f;
        // SAFETY: no worker is inside a job (the previous `run` closed its job and waited for
        // its workers) and none can join before the new state is stored below. The 'static
        // lifetime is a lie contained by this function: the reference is cleared before `f` goes
        // out of scope, and no worker reads it after leaving the job.
        unsafe { *sh.job.get() = Some(std::mem::transmute::<Job<'_>, Job<'static>>(job)) };
        let generation = sh.generation.load(Ordering::Relaxed).wrapping_add(1);
        sh.state.store((generation & 0xffff_ffff) << 32, Ordering::SeqCst);
        sh.generation.store(generation, Ordering::SeqCst);
        if sh.sleepers.load(Ordering::SeqCst) > 0 {
            let _l = sh.lock.lock().unwrap_or_else(|e| e.into_inner());
            sh.wake.notify_all();
        }
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(0)));
        // Close the job, then wait for the workers inside it.
        sh.state.fetch_or(CLOSED, Ordering::SeqCst);
        let mut spins = 0u32;
        while sh.state.load(Ordering::Acquire) & ACTIVE != 0 {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                // A worker may have been descheduled (more threads than free cores).
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        // SAFETY: the job is closed and no worker is inside it, so none reads `job` now.
        unsafe { *sh.job.get() = None };
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if sh.panicked.swap(false, Ordering::Relaxed) {
            panic!("a worker thread panicked while running a parallel operation");
        }
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _l = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A worker's loop: wait for a new generation, run the job with index `index`, repeat.
fn worker(sh: &Shared, index: usize) {
    // No job is published before the pool is built, so generation 0 is "seen"; reading the
    // counter here instead could skip a job published before this thread started.
    let mut seen = 0u64;
    loop {
        let mut idle_since: Option<Instant> = None;
        let mut spins = 0u32;
        loop {
            let g = sh.generation.load(Ordering::Acquire);
            if g != seen {
                seen = g;
                break;
            }
            if sh.shutdown.load(Ordering::Relaxed) {
                return;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(128) {
                std::hint::spin_loop();
                continue;
            }
            // Let other runnable threads in now and then: with more threads than free cores a
            // pure spin would hold a core the publisher or another worker needs.
            std::thread::yield_now();
            let since = *idle_since.get_or_insert_with(Instant::now);
            if since.elapsed() < SPIN_BEFORE_SLEEP {
                continue;
            }
            // Block until the next generation. Announcing ourselves as a sleeper before the
            // last check of the generation (both SeqCst, as the publisher's bump and read)
            // guarantees that either we see the new job or the publisher sees us and notifies.
            let mut l = sh.lock.lock().unwrap_or_else(|e| e.into_inner());
            sh.sleepers.fetch_add(1, Ordering::SeqCst);
            while sh.generation.load(Ordering::SeqCst) == seen && !sh.shutdown.load(Ordering::SeqCst) {
                l = sh.wake.wait(l).unwrap_or_else(|e| e.into_inner());
            }
            sh.sleepers.fetch_sub(1, Ordering::SeqCst);
            drop(l);
            idle_since = None;
        }
        // Join the job unless it is already closed (or a newer one replaced it).
        let tag = (seen & 0xffff_ffff) << 32;
        let mut st = sh.state.load(Ordering::Acquire);
        let joined = loop {
            if st & !(CLOSED | ACTIVE) != tag || st & CLOSED != 0 {
                break false;
            }
            match sh.state.compare_exchange_weak(st, st + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break true,
                Err(now) => st = now,
            }
        };
        if !joined {
            continue;
        }
        // SAFETY: we joined the open job of generation `seen`: the publisher wrote `job` before
        // opening it and keeps it alive until the job is closed with no worker inside, which
        // cannot happen before our decrement below.
        let job = unsafe { *sh.job.get() };
        if let Some(job) = job
            && std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(index))).is_err()
        {
            sh.panicked.store(true, Ordering::Relaxed);
        }
        sh.state.fetch_sub(1, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_runs_once_on_the_caller_and_at_most_once_per_worker() {
        for n in [1, 2, 3, 5] {
            let pool = ThreadPool::new(n).expect("spawn");
            assert_eq!(pool.n_threads(), n);
            let mut joined = 0;
            for round in 0..200 {
                let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                pool.run(|i| {
                    hits[i].fetch_add(round + 1, Ordering::Relaxed);
                    if i == 0 {
                        // Give the workers time to join.
                        std::thread::sleep(Duration::from_micros(200));
                    }
                });
                assert_eq!(hits[0].load(Ordering::Relaxed), round + 1);
                assert!(hits.iter().all(|h| [0, round + 1].contains(&h.load(Ordering::Relaxed))));
                joined += hits[1..].iter().filter(|h| h.load(Ordering::Relaxed) > 0).count();
            }
            if n > 1 {
                assert!(joined > 0, "workers never joined a job");
            }
        }
    }

    #[test]
    fn workers_wake_up_after_sleeping() {
        let pool = ThreadPool::new(3).expect("spawn");
        for _ in 0..3 {
            std::thread::sleep(SPIN_BEFORE_SLEEP * 3);
            let items = AtomicUsize::new(0);
            crate::threads::parallel_for(&pool, 1000, |_| {
                items.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(items.load(Ordering::Relaxed), 1000);
        }
    }

    #[test]
    fn jobs_from_several_threads_are_serialised() {
        let pool = Arc::new(ThreadPool::new(2).expect("spawn"));
        let total = Arc::new(AtomicUsize::new(0));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (pool, total) = (Arc::clone(&pool), Arc::clone(&total));
                std::thread::spawn(move || {
                    for _ in 0..100 {
                        crate::threads::parallel_for(&pool, 10, |_| {
                            total.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("no panic");
        }
        assert_eq!(total.load(Ordering::Relaxed), 4 * 100 * 10);
    }

    #[test]
    fn a_panicking_job_is_reported_and_the_pool_survives() {
        let pool = ThreadPool::new(2).expect("spawn");
        for failing in [0, 1] {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                pool.run(|i| {
                    // The caller waits so that the worker joins before the job closes.
                    if i == 0 {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    assert_ne!(i, failing, "thread fails");
                });
            }));
            assert!(r.is_err(), "thread {failing}'s panic is reported");
        }
        let items = AtomicUsize::new(0);
        crate::threads::parallel_for(&pool, 100, |_| {
            items.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(items.load(Ordering::Relaxed), 100);
    }
}
