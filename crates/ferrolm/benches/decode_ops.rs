//! What one parallel operation of a decode step costs in synchronisation, against what the
//! operation itself takes: an empty job on the worker pool, an empty `parallel_for`, and the
//! real decode matvecs of SmolLM2's first layer (the smallest ops of a step), all on two
//! threads. The model comes from `FERROLM_MODEL_DIR` (or the download cache); without it only
//! the pool benchmarks run.
//!
//! `cargo bench -p ferrolm --bench decode_ops`

#![allow(missing_docs)]

use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use ferrolm::backend::cpu::{MatmulJob, matmul, matmul_many};
use ferrolm::model::Model;
use ferrolm::model::weights::Ffn;
use ferrolm::threads::ThreadPool;

const THREADS: usize = 2;

fn model_path() -> Option<PathBuf> {
    let dir = std::env::var_os("FERROLM_MODEL_DIR")
        .map(PathBuf::from)
        .or_else(|| ferrolm::hub::model_dir().ok())?;
    let p = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    p.is_file().then_some(p)
}

fn pool_overhead(c: &mut Criterion) {
    let pool = ThreadPool::new(THREADS).expect("spawn workers");
    let mut g = c.benchmark_group("pool");
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    g.bench_function("run_empty", |b| b.iter(|| pool.run(|i| _ = black_box(i))));
    g.finish();
}

fn decode_matvecs(c: &mut Criterion) {
    let Some(path) = model_path() else {
        eprintln!("SmolLM2 not found (set FERROLM_MODEL_DIR): skipping the matvec benchmarks");
        return;
    };
    let model = Model::load(&path).expect("model loads");
    let pool = ThreadPool::new(THREADS).expect("spawn workers");
    let lw = &model.weights().layers[0];
    let aw = lw.mixer.attention().expect("SmolLM2's layers attend");
    let d = model.config().n_embd;
    let x: Vec<f32> = (0..model.config().n_ff).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
    let mut xq = Vec::new();
    let mut g = c.benchmark_group("decode_op");
    g.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    let (wk, wv) = (aw.wk.as_ref().expect("layer 0 has keys"), aw.wv.as_ref().expect("layer 0 has values"));
    let (mut q, mut k, mut v) = (vec![0f32; aw.wq.rows], vec![0f32; wk.rows], vec![0f32; wv.rows]);
    g.bench_function("qkv_576", |b| {
        b.iter(|| {
            let jobs = &mut [
                MatmulJob { w: &aw.wq, out: &mut q },
                MatmulJob { w: wk, out: &mut k },
                MatmulJob { w: wv, out: &mut v },
            ];
            matmul_many(&pool, &x[..d], 1, jobs, &mut xq);
        })
    });
    let mut y = vec![0f32; aw.wo.rows];
    g.bench_function("attn_output_576x576", |b| {
        b.iter(|| matmul(&pool, &aw.wo, &x[..d], 1, &mut y, &mut xq))
    });
    let Ffn::Dense(ffn) = &lw.ffn else { panic!("SmolLM2 has a dense FFN") };
    let mut down = vec![0f32; ffn.down.rows];
    g.bench_function("ffn_down_576x1536", |b| {
        b.iter(|| matmul(&pool, &ffn.down, &x[..ffn.down.cols], 1, &mut down, &mut xq))
    });
    g.finish();
}

criterion_group!(benches, pool_overhead, decode_matvecs);
criterion_main!(benches);
