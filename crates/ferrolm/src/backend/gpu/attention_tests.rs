//! Attention against the CPU backend: several sequences per batch, decode steps and prompt
//! chunks (both CPU paths), grouped KV heads, windows, soft-capping, f16 and f32 caches.

use super::test_util::{backend, rand_vec, rel_err};
use crate::backend::{AttentionShape, Backend, BackendError, CpuBackend};
use crate::batch::BatchEntry;
use crate::kv::{KvCache, KvType, SeqId};

/// Layers of the test caches: every case also checks layer 1, whose rows differ.
const LAYERS: usize = 2;

/// Largest accepted `max |opencl - cpu| / max |cpu|` over a call's output.
const TOL: f32 = 1e-3;

/// A cache of `types` holding, per sequence, random rows at the given positions (slot order).
fn cache(shape: &AttentionShape, types: (KvType, KvType), seqs: &[(SeqId, Vec<u32>)], seed: u64) -> KvCache {
    let kv_dim = shape.n_head_kv * shape.head_dim;
    let mut kv = KvCache::new(LAYERS, kv_dim, 4096, types.0, types.1);
    let mut seed = seed;
    for (id, positions) in seqs {
        for &p in positions {
            let slot = kv.push_slot(*id, p).expect("slot");
            for layer in 0..LAYERS {
                seed += 2;
                let (k, v) = (rand_vec(kv_dim, seed), rand_vec(kv_dim, seed + 1));
                kv.seq_mut(*id).write(layer, slot, &k, &v);
            }
        }
    }
    kv
}

/// Entries of sequence `seq` at `positions`.
fn tokens(seq: SeqId, positions: impl IntoIterator<Item = u32>) -> Vec<BatchEntry> {
    positions.into_iter().map(|pos| BatchEntry { seq, pos, token: 0, logits: false }).collect()
}

fn shape(n_head: usize, n_head_kv: usize, head_dim: usize) -> AttentionShape<'static> {
    AttentionShape {
        n_head,
        n_head_kv,
        head_dim,
        scale: 1.0 / (head_dim as f32).sqrt(),
        window: None,
        softcap: None,
        sinks: None,
    }
}

const F32: (KvType, KvType) = (KvType::F32, KvType::F32);
const F16: (KvType, KvType) = (KvType::F16, KvType::F16);

/// Runs one batch on both backends for every layer and returns the largest relative error;
/// fails above [`TOL`]. Also checks that the output is not trivially close to another layer's
/// (so that reading the wrong rows fails) and that entries without a cache get zeros.
fn check(
    what: &str,
    shape: AttentionShape,
    types: (KvType, KvType),
    seqs: &[(SeqId, Vec<u32>)],
    entries: &[BatchEntry],
    chunks: &[(SeqId, u32)],
    seed: u64,
) -> f32 {
    let Some(cl) = backend() else { return 0.0 };
    let kv = cache(&shape, types, seqs, seed);
    let qd = shape.n_head * shape.head_dim;
    let q: Vec<f32> = rand_vec(entries.len() * qd, seed + 1).iter().map(|x| 2.0 * x).collect();
    let run = |b: &dyn Backend, layer: usize| {
        let mut out = vec![f32::NAN; q.len()];
        b.attention(shape, entries, chunks, &kv, layer, &q, &mut out).expect("attention");
        out
    };
    let mut worst = 0f32;
    let mut outs = Vec::new();
    for layer in 0..LAYERS {
        // Both backends split long per-query spans by the CPU pool's thread count, which other
        // tests change meanwhile: a call is compared again if the count changed around it, or
        // if it failed (the computations are deterministic, so a real error fails every time).
        let mut tries = 0;
        let (got, want, err) = loop {
            tries += 1;
            let threads = crate::threads::current_num_threads();
            let want = run(&CpuBackend, layer);
            let got = run(&*cl, layer);
            let err = rel_err(&got, &want);
            let stable = threads == crate::threads::current_num_threads();
            if tries == 4 || (stable && err <= TOL) {
                break (got, want, err);
            }
        };
        eprintln!("{what} {types:?} layer {layer}: max relative error {err:.3e}");
        assert!(err <= TOL, "{what} {types:?} layer {layer}: relative error {err} > {TOL}");
        for (t, e) in entries.iter().enumerate() {
            if kv.seq(e.seq).is_none() {
                assert!(got[t * qd..(t + 1) * qd].iter().all(|&x| x == 0.0), "{what}: entry {t} not zero");
            }
        }
        worst = worst.max(err);
        outs.push((got, want));
    }
    if outs[1].1.iter().any(|&x| x != 0.0) {
        let wrong = rel_err(&outs[1].0, &outs[0].1);
        assert!(wrong > 50.0 * TOL, "{what}: layers 0 and 1 agree ({wrong})");
    }
    worst
}

#[test]
fn smollm2_decode_and_prompts_in_one_batch() {
    // SmolLM2 geometry: 9 query heads over 3 KV heads of 64.
    let s = shape(9, 3, 64);
    let seqs =
        [(1, (0..600).collect()), (2, (0..100).collect()), (3, (0..100).collect()), (4, (0..41).collect())];
    // Seq 1: a decode step at context 600 (split into ranges on the CPU); seq 2: a 70-token
    // prompt (f32 path); seq 3: 2 tokens of a 70-token chunk (f32 path too); seq 4: a
    // 40-token chunk (per-query path); seq 9 has no cache. Interleaved.
    let mut entries = Vec::new();
    for i in 0..70 {
        entries.extend(tokens(2, [30 + i]));
        if i == 3 {
            entries.extend(tokens(1, [599]));
            entries.extend(tokens(9, [0]));
            entries.extend(tokens(3, [98, 99]));
        }
        if i < 40 {
            entries.extend(tokens(4, [1 + i]));
        }
    }
    let chunks = [(3, 70)];
    for types in [F16, F32, (KvType::F16, KvType::F32), (KvType::F32, KvType::F16)] {
        check("smollm2 mixed batch", s, types, &seqs, &entries, &chunks, 1);
    }
}

#[test]
fn smollm2_long_decode_and_prompt() {
    let s = shape(9, 3, 64);
    let seqs = [(0, (0..700).collect())];
    for types in [F16, F32] {
        check("smollm2 decode 700", s, types, &seqs, &tokens(0, [699]), &[], 2);
        check("smollm2 decode 3 tokens", s, types, &seqs, &tokens(0, 697..700), &[], 3);
        check("smollm2 prompt 70 at 630", s, types, &seqs, &tokens(0, 630..700), &[], 4);
    }
}

#[test]
fn gemma3_window_512() {
    // Gemma 3 270M: 4 query heads over 1 KV head of 256, sliding window 512, no soft-capping.
    let s = AttentionShape { window: Some(512), scale: 1.0 / 16.0, ..shape(4, 1, 256) };
    let seqs = [(0, (0..600).collect()), (1, (0..300).collect())];
    for types in [F16, F32] {
        check("gemma3 decode 600", s, types, &seqs, &tokens(0, [599]), &[], 5);
        check("gemma3 decode 300", s, types, &seqs, &tokens(1, [299]), &[], 6);
        let mut both = tokens(0, 530..600);
        both.extend(tokens(1, [299]));
        check("gemma3 prompt 70 + decode", s, types, &seqs, &both, &[], 7);
        check("gemma3 chunk of 20", s, types, &seqs, &tokens(0, 580..600), &[(0, 20)], 8);
    }
}

#[test]
fn softcap_window_and_odd_head_dim() {
    let s = AttentionShape { window: Some(37), softcap: Some(5.0), scale: 0.3, ..shape(6, 3, 72) };
    let seqs = [(0, (0..200).collect())];
    for types in [F16, F32] {
        check("softcap decode", s, types, &seqs, &tokens(0, [199]), &[], 9);
        check("softcap per-query chunk", s, types, &seqs, &tokens(0, 150..190), &[], 10);
        check("softcap prompt", s, types, &seqs, &tokens(0, 100..200), &[], 11);
    }
}

#[test]
fn attention_sinks() {
    // gpt-oss: a sink logit per query head, below, near and far above the scores.
    const SINKS: [f32; 6] = [-3.0, 0.0, 0.7, 2.0, 9.0, 40.0];
    let s = AttentionShape { sinks: Some(&SINKS), window: Some(128), ..shape(6, 3, 64) };
    let seqs = [(0, (0..1300).collect()), (1, (0..90).collect())];
    for types in [F16, F32] {
        let mut both = tokens(0, [1299]);
        both.extend(tokens(1, [89]));
        check("sinks decode (split ranges)", s, types, &seqs, &both, &[], 12);
        check("sinks prompt", s, types, &seqs, &tokens(1, 10..90), &[], 13);
    }
}

#[test]
fn shuffled_slots_and_queries_that_see_nothing() {
    let s = AttentionShape { window: Some(24), ..shape(6, 2, 64) };
    // Positions out of slot order with gaps (as after evictions), and a sequence whose keys all
    // lie after its queries (zeros).
    let mut positions: Vec<u32> = (0..150).map(|i| i * 2).collect();
    let mut seed = 77u64;
    for i in (1..positions.len()).rev() {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        positions.swap(i, (seed >> 33) as usize % (i + 1));
    }
    let seqs = [(0, positions), (5, (100..110).collect())];
    for types in [F16, F32] {
        check("shuffled prompt", s, types, &seqs, &tokens(0, (0..70).map(|i| 1 + i * 5)), &[], 12);
        check("shuffled per-query", s, types, &seqs, &tokens(0, (0..40).map(|i| 1 + i * 7)), &[], 13);
        let mut e = tokens(5, [3]);
        e.extend(tokens(0, [299]));
        check("sees nothing", s, types, &seqs, &e, &[], 14);
    }
}

#[test]
fn long_decodes_split_like_the_cpu() {
    // 1500 slots: the CPU cuts the span into ranges by its thread count, each accumulated on
    // its own and merged; the OpenCL backend cuts it the same way.
    let s = AttentionShape { scale: 0.3, ..shape(4, 1, 64) };
    let seqs = [(0, (0..1500).collect())];
    for threads in [1, 4, 8] {
        crate::threads::set_num_threads(threads).expect("pool");
        check(&format!("decode 1500, {threads} threads"), s, F16, &seqs, &tokens(0, [1499]), &[], 15);
    }
}

#[test]
fn quantized_caches_are_refused() {
    let Some(cl) = backend() else { return };
    let s = shape(2, 1, 32);
    let kv = cache(&s, (KvType::Q8_0, KvType::F16), &[(0, vec![0])], 1);
    let (q, mut out) = (vec![0f32; 64], vec![0f32; 64]);
    let err = cl.attention(s, &tokens(0, [0]), &[], &kv, 0, &q, &mut out);
    assert!(matches!(err, Err(BackendError::Unsupported { .. })), "{err:?}");
}
