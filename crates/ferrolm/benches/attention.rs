//! Attention alone, on two threads, with the head geometry of the test models and random
//! queries, keys and values: a 512-token prompt (one batch) and one decode step at context 512,
//! with every cache type (f32, f16, q8_0, q4_0); and a server's decode step, 8 sequences at
//! context 256 through the 30 layers of SmolLM2 (a cache of 57 MiB in f16, mostly out of the
//! caches as in a real pass). Needs no model file.
//!
//! `cargo bench -p ferrolm --bench attention`

#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use ferrolm::backend::cpu::{AttentionShape, attention};
use ferrolm::batch::Batch;
use ferrolm::kv::{KvCache, KvType};

const THREADS: usize = 2;
const CONTEXT: u32 = 512;

/// (name, shape): SmolLM2-135M (9 query heads, 3 KV heads of 64) and Gemma-3-270M (4 and 1
/// of 256, a global layer).
fn shapes() -> [(&'static str, AttentionShape<'static>); 2] {
    let shape = |n_head, n_head_kv, head_dim: usize| AttentionShape {
        n_head,
        n_head_kv,
        head_dim,
        scale: 1.0 / (head_dim as f32).sqrt(),
        window: None,
        softcap: None,
        sinks: None,
    };
    [("smollm2", shape(9, 3, 64)), ("gemma3", shape(4, 1, 256))]
}

/// Deterministic values in [-1, 1).
fn noise(n: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x as f32 / u32::MAX as f32) * 2.0 - 1.0
        })
        .collect()
}

/// A one-layer cache holding `n` tokens of sequence 0.
fn filled_cache(shape: &AttentionShape, n: u32, ty: KvType) -> KvCache {
    let kv_dim = shape.n_head_kv * shape.head_dim;
    let mut kv = KvCache::new(1, kv_dim, CONTEXT as usize + 1, ty, ty);
    for p in 0..n {
        let slot = kv.push_slot(0, p).expect("slot");
        let (k, v) = (noise(kv_dim, 2 * p + 1), noise(kv_dim, 2 * p + 2));
        kv.seq_mut(0).write(0, slot, &k, &v);
    }
    kv
}

fn bench(c: &mut Criterion) {
    ferrolm::threads::set_num_threads(THREADS).expect("pool");
    let mut g = c.benchmark_group("attention");
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3)).sample_size(20);
    for (name, shape) in shapes() {
        let qd = shape.n_head * shape.head_dim;
        for ty in KvType::ALL {
            let ty_name = ty.name();
            // Prompt: 512 queries against the 512 slots they were written to.
            let kv = filled_cache(&shape, CONTEXT, ty);
            let tokens: Vec<u32> = (0..CONTEXT).collect();
            let batch = Batch::from_prompt(0, 0, &tokens);
            let q = noise(CONTEXT as usize * qd, 7);
            let mut out = vec![0.0f32; q.len()];
            g.bench_function(format!("{name}/{ty_name}/prefill_512"), |b| {
                b.iter(|| attention(shape, batch.entries(), &[], &kv, 0, black_box(&q), &mut out))
            });
            // Decode: the query at position 512 against 513 slots.
            let kv = filled_cache(&shape, CONTEXT + 1, ty);
            let batch = Batch::from_prompt(0, CONTEXT, &[0]);
            let q = noise(qd, 9);
            let mut out = vec![0.0f32; qd];
            g.bench_function(format!("{name}/{ty_name}/decode_at_512"), |b| {
                b.iter(|| attention(shape, batch.entries(), &[], &kv, 0, black_box(&q), &mut out))
            });
        }
    }
    g.finish();
}

/// One decode step of 8 sequences (a server's busy slots) at context 256 through 30 layers.
fn server_step(c: &mut Criterion) {
    const SEQS: u32 = 8;
    const LAYERS: usize = 30;
    const CTX: u32 = 256;
    ferrolm::threads::set_num_threads(THREADS).expect("pool");
    let mut g = c.benchmark_group("attention_step");
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3)).sample_size(20);
    let (name, shape) = shapes()[0];
    let kv_dim = shape.n_head_kv * shape.head_dim;
    for ty in [KvType::F16, KvType::Q8_0] {
        let mut kv = KvCache::new(LAYERS, kv_dim, (SEQS * (CTX + 1)) as usize, ty, ty);
        for s in 0..SEQS {
            for p in 0..=CTX {
                let slot = kv.push_slot(s, p).expect("slot");
                for l in 0..LAYERS {
                    let seed = ((s * (CTX + 1) + p) as usize * LAYERS + l) as u32;
                    let (k, v) = (noise(kv_dim, 2 * seed + 1), noise(kv_dim, 2 * seed + 2));
                    kv.seq_mut(s).write(l, slot, &k, &v);
                }
            }
        }
        let mut batch = Batch::new();
        for s in 0..SEQS {
            batch.push(s, CTX, 0, false);
        }
        let qd = shape.n_head * shape.head_dim;
        let q = noise(SEQS as usize * qd, 11);
        let mut out = vec![0.0f32; q.len()];
        g.bench_function(format!("{name}/{}/8_seqs_at_256_x30_layers", ty.name()), |b| {
            b.iter(|| {
                for l in 0..LAYERS {
                    attention(shape, batch.entries(), &[], &kv, l, black_box(&q), &mut out);
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench, server_step);
criterion_main!(benches);
