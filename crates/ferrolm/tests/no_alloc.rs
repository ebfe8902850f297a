//! A decode step allocates nothing: the forward pass runs on buffers sized once (the model's
//! workspace, the KV cache's reservation, the caller's batch and logits). Counted with a
//! global allocator that tallies every allocation of the process while decoding; this file
//! holds a single test so that no other test allocates meanwhile.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use ferrolm::batch::{Batch, Logits};
use ferrolm::kv::{KvCache, KvType};
use ferrolm::model::Model;

/// The system allocator, counting allocations while `COUNTING` is set.
struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; the counters are atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn decode_steps_allocate_nothing() {
    for file in ["SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"] {
        let Some(path) = common::require_model(file) else { return };
        let model = Model::load(&path).expect("model loads");
        let cfg = model.config();
        for (n_threads, kv_type) in [1, 2].into_iter().flat_map(|n| KvType::ALL.map(|t| (n, t))) {
            ferrolm::threads::set_num_threads(n_threads).expect("pool");
            let mut kv = KvCache::new(cfg.n_layer, cfg.kv_dim(), 256, kv_type, kv_type);
            let prompt = model.tokenizer().encode("The capital of France is", true, false).expect("tokenize");
            let mut batch = Batch::from_prompt(0, 0, &prompt);
            let mut logits = Logits::default();
            model.forward_into(&batch, &mut kv, &mut logits).expect("prefill");
            let next = |logits: &Logits| {
                let row = logits.last().expect("logits");
                row.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(i, _)| i as u32)
            };
            let mut pos = prompt.len() as u32;
            let mut step = |batch: &mut Batch, logits: &mut Logits, pos: &mut u32| {
                let token = next(logits);
                batch.clear();
                batch.push(0, *pos, token, true);
                model.forward_into(batch, &mut kv, logits).expect("decode");
                *pos += 1;
            };
            // Warm-up: per-thread scratch is sized on first use.
            for _ in 0..3 {
                step(&mut batch, &mut logits, &mut pos);
            }
            // Then windows of 16 steps. On one thread the first must allocate nothing. On two,
            // items go to whichever thread claims them first, so on a busy machine a thread may
            // take its first item of some operator (and size its scratch) in a later step: that
            // happens once per thread and buffer, so a later window must reach zero, where an
            // allocation of the step itself shows up in every window.
            let mut windows = Vec::new();
            let tries = if n_threads == 1 { 1 } else { 6 };
            while windows.len() < tries && windows.last() != Some(&0) {
                ALLOCATIONS.store(0, Ordering::SeqCst);
                COUNTING.store(true, Ordering::SeqCst);
                for _ in 0..16 {
                    step(&mut batch, &mut logits, &mut pos);
                }
                COUNTING.store(false, Ordering::SeqCst);
                windows.push(ALLOCATIONS.load(Ordering::SeqCst));
            }
            assert_eq!(
                windows.last(),
                Some(&0),
                "{file} ({kv_type:?} cache, {n_threads} threads): allocations per 16 decode steps: {windows:?}"
            );
        }
    }
}
