//! The tiled and decode paths against a straightforward f64 attention.

use super::*;
use crate::kv::SeqId;
use ferrolm_kernels::quant::kv::KvBlocks;
use half::f16;
use rand::{Rng, SeedableRng, rngs::StdRng};

/// A cache holding, per sequence, rows for the given positions (in slot order).
fn cache(
    shape: &AttentionShape,
    types: (KvType, KvType),
    seqs: &[(SeqId, Vec<u32>)],
    rng: &mut StdRng,
) -> KvCache {
    let kv_dim = shape.n_head_kv * shape.head_dim;
    let mut kv = KvCache::new(2, kv_dim, 4096, types.0, types.1);
    for (id, positions) in seqs {
        for &p in positions {
            let slot = kv.push_slot(*id, p).expect("slot");
            for layer in 0..2 {
                let k: Vec<f32> = (0..kv_dim).map(|_| rng.random_range(-1.0f32..1.0)).collect();
                let v: Vec<f32> = (0..kv_dim).map(|_| rng.random_range(-1.0f32..1.0)).collect();
                kv.seq_mut(*id).write(layer, slot, &k, &v);
            }
        }
    }
    kv
}

/// The query as the per-query path scores it against keys of type `ty`: rounded to f16 for f16
/// keys, quantized to Q8_0 (per head, whole blocks) for quantized keys.
fn scored_query(ty: KvType, q: &[f32]) -> Vec<f64> {
    match ty {
        KvType::F32 => q.iter().map(|&x| x as f64).collect(),
        KvType::F16 => q.iter().map(|&x| f16::from_f32(x).to_f64()).collect(),
        KvType::Q8_0 | KvType::Q4_0 => {
            let b = KvBlocks::Q8_0;
            let mut bytes = vec![0u8; b.row_bytes(q.len())];
            b.quantize_row(q, &mut bytes);
            let mut out = vec![0f32; q.len()];
            b.dequantize_row(&bytes, &mut out);
            out.into_iter().map(f64::from).collect()
        }
    }
}

/// Attention in f64 from the definition, over the cached rows as stored (read back as f32).
/// Queries of sequences with fewer than [`TILE_MIN_TOKENS`] entries in the batch follow
/// llama.cpp's per-query path: the query rounded to f16 when keys are f16 or quantized to Q8_0
/// when keys are quantized; the tiled path also quantizes queries to Q8_0 over quantized keys.
fn reference(
    shape: &AttentionShape,
    entries: &[BatchEntry],
    kv: &KvCache,
    layer: usize,
    q: &[f32],
) -> Vec<f64> {
    let (hd, nh) = (shape.head_dim, shape.n_head);
    let group = nh / shape.n_head_kv;
    let kv_dim = shape.n_head_kv * hd;
    let mut out = vec![0f64; q.len()];
    for (t, e) in entries.iter().enumerate() {
        let Some(seq) = kv.seq(e.seq) else { continue };
        let per_query = entries.iter().filter(|x| x.seq == e.seq).count() < TILE_MIN_TOKENS;
        let n = seq.len();
        let (mut keys, mut vals) = (vec![0f32; n * kv_dim], vec![0f32; n * kv_dim]);
        seq.keys(layer).read(0, &mut keys);
        seq.values(layer).read(0, &mut vals);
        for h in 0..nh {
            let kvh = h / group;
            let qh = &q[(t * nh + h) * hd..(t * nh + h + 1) * hd];
            let kt = kv.types().0;
            let qh = scored_query(if per_query || kt.block_size() > 1 { kt } else { KvType::F32 }, qh);
            let mut scores: Vec<(usize, f64)> = Vec::new();
            for (slot, &p) in seq.positions().iter().enumerate() {
                if !visible(shape.window, e.pos, p) {
                    continue;
                }
                let k = &keys[slot * kv_dim + kvh * hd..][..hd];
                let mut s = qh.iter().zip(k).map(|(a, &b)| a * b as f64).sum::<f64>() * shape.scale as f64;
                if let Some(c) = shape.softcap {
                    s = c as f64 * (s / c as f64).tanh();
                }
                scores.push((slot, s));
            }
            let o = &mut out[(t * nh + h) * hd..(t * nh + h + 1) * hd];
            let v = |slot: usize| &vals[slot * kv_dim + kvh * hd..][..hd];
            if scores.is_empty() {
                continue;
            }
            // A sink is one more score in the softmax, with no value.
            let sink = shape.sinks.map(|s| f64::from(s[h]));
            let m = scores.iter().map(|s| s.1).chain(sink).fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = scores.iter().map(|s| s.1).chain(sink).map(|s| (s - m).exp()).sum();
            for &(slot, s) in &scores {
                let w = (s - m).exp() / z;
                for (a, &x) in o.iter_mut().zip(v(slot)) {
                    *a += w * x as f64;
                }
            }
        }
    }
    out
}

fn check(
    shape: AttentionShape,
    types: (KvType, KvType),
    seqs: &[(SeqId, Vec<u32>)],
    entries: &[BatchEntry],
    seed: u64,
) {
    check_tol(shape, types, seqs, entries, seed, 1.0);
}

/// [`check`] with the tolerance multiplied by `loose` (scores far from 1 carry a larger f32
/// error into the weights).
fn check_tol(
    shape: AttentionShape,
    types: (KvType, KvType),
    seqs: &[(SeqId, Vec<u32>)],
    entries: &[BatchEntry],
    seed: u64,
    loose: f64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let kv = cache(&shape, types, seqs, &mut rng);
    let qd = shape.n_head * shape.head_dim;
    let q: Vec<f32> = (0..entries.len() * qd).map(|_| rng.random_range(-2.0f32..2.0)).collect();
    for layer in 0..2 {
        let want = reference(&shape, entries, &kv, layer, &q);
        for threads in [1, 3, 8] {
            // The global pool: other tests may resize it meanwhile, which changes only how
            // decode ranges are split (covered by the tolerance).
            crate::threads::set_num_threads(threads).expect("pool");
            let mut out = vec![f32::NAN; q.len()];
            attention(shape, entries, &[], &kv, layer, &q, &mut out);
            for (i, (&got, &w)) in out.iter().zip(&want).enumerate() {
                let (t, h) = (i / qd, i % qd / shape.head_dim);
                let tol = loose * 2e-5;
                assert!(
                    (got as f64 - w).abs() <= tol * (1.0 + w.abs()),
                    "{shape:?} {types:?} layer {layer} threads {threads}: token {t} head {h}: {got} vs {w}"
                );
            }
        }
    }
}

fn prompt(seq: SeqId, positions: impl IntoIterator<Item = u32>) -> Vec<BatchEntry> {
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
const Q8: (KvType, KvType) = (KvType::Q8_0, KvType::Q8_0);
const Q4: (KvType, KvType) = (KvType::Q4_0, KvType::Q4_0);

#[test]
fn prompt_and_decode_with_grouped_heads() {
    for types in [F32, F16, (KvType::F16, KvType::F32), (KvType::F32, KvType::F16)] {
        let s = shape(9, 3, 64);
        // A 70-token prompt: tiles of 21 tokens and a short last one, blocks of 64 and a tail.
        check(s, types, &[(0, (0..70).collect())], &prompt(0, 0..70), 1);
        // One decode step at context 71, a 3-token step and a 40-token prompt (per query).
        check(s, types, &[(0, (0..71).collect())], &prompt(0, [70]), 2);
        check(s, types, &[(0, (0..73).collect())], &prompt(0, 70..73), 3);
        check(s, types, &[(0, (0..40).collect())], &prompt(0, 0..40), 22);
    }
}

#[test]
fn attention_sinks_take_their_share_of_every_softmax() {
    // gpt-oss geometry (group of 2, window 128 on alternate layers) with sinks far below, near
    // and far above the scores: a sink above every score leaves almost nothing to the values.
    const SINKS: [f32; 6] = [-3.0, 0.0, 0.7, 2.0, 9.0, 40.0];
    let s = AttentionShape { sinks: Some(&SINKS), ..shape(6, 3, 64) };
    let windowed = AttentionShape { window: Some(128), ..s };
    for sh in [s, windowed] {
        check(sh, F16, &[(0, (0..150).collect())], &prompt(0, 0..150), 40);
        check(sh, F32, &[(0, (0..700).collect())], &prompt(0, [699]), 41);
        check(sh, F16, &[(0, (0..40).collect())], &prompt(0, 30..40), 42);
        // Two sequences decoding at once, one long enough to be split into ranges.
        let seqs = [(0, (0..1300).collect()), (1, (0..90).collect())];
        let mut entries = prompt(0, [1299]);
        entries.extend(prompt(1, [89]));
        check(sh, F16, &seqs, &entries, 43);
    }
}

#[test]
fn windows_softcap_and_odd_head_dims() {
    // Gemma 3 geometry with a small window: blocks before the window are skipped.
    let g3 = AttentionShape { window: Some(16), scale: 1.0 / 16.0, ..shape(4, 1, 256) };
    check(g3, F16, &[(0, (0..100).collect())], &prompt(0, 0..100), 4);
    check(g3, F32, &[(0, (0..300).collect())], &prompt(0, [299]), 5);
    // Soft-capping, a window that is not a multiple of anything, head_dim not a multiple of 16.
    let odd = AttentionShape { window: Some(37), softcap: Some(5.0), ..shape(6, 3, 72) };
    check(odd, F16, &[(0, (0..90).collect())], &prompt(0, 0..90), 6);
    check(odd, F32, &[(0, (0..90).collect())], &prompt(0, [89]), 7);
    check(odd, F16, &[(0, (0..90).collect())], &prompt(0, 50..90), 23);
    // Window 1: each query sees only its own key.
    let one = AttentionShape { window: Some(1), ..shape(2, 1, 16) };
    check(one, F32, &[(0, (0..80).collect())], &prompt(0, 0..80), 8);
    check(one, F16, &[(0, (0..40).collect())], &prompt(0, 0..40), 9);
    // Multi-head attention (group of 1), head_dim 8: tiles of 64 tokens.
    check(shape(5, 5, 8), F32, &[(0, (0..150).collect())], &prompt(0, 0..150), 10);
    check(shape(5, 5, 8), F16, &[(0, (0..33).collect())], &prompt(0, 0..33), 24);
}

#[test]
fn several_sequences_in_one_batch() {
    let s = shape(8, 2, 32);
    let seqs = [(1, (0..110).collect()), (2, (0..200).collect()), (3, (0..9).collect())];
    // Seq 1: a 70-token chunk (tiled); seq 2: one decode step; seq 3: two tokens (per query);
    // seq 4 has no cache (zeros). Interleaved.
    let mut entries = Vec::new();
    for i in 0..70 {
        entries.extend(prompt(1, [40 + i]));
        if i == 3 {
            entries.extend(prompt(2, [199]));
            entries.extend(prompt(4, [0]));
        }
        if i == 6 {
            entries.extend(prompt(3, [7, 8]));
        }
    }
    for types in [F32, F16] {
        check(s, types, &seqs, &entries, 11);
    }
}

#[test]
fn slots_out_of_position_order_and_queries_that_see_nothing() {
    let s = AttentionShape { window: Some(24), ..shape(6, 2, 64) };
    // Positions shuffled across slots (as after evictions and reuse), with gaps.
    let mut positions: Vec<u32> = (0..150).map(|i| i * 2).collect();
    let mut rng = StdRng::seed_from_u64(12);
    for i in (1..positions.len()).rev() {
        positions.swap(i, rng.random_range(0..=i));
    }
    let seqs = [(0, positions), (5, (100..110).collect())];
    for types in [F32, F16] {
        // Queries at odd positions (between cached ones, some past them all), ascending and
        // descending, tiled and one by one.
        check(s, types, &seqs, &prompt(0, (0..70).map(|i| 1 + i * 5)), 13);
        check(s, types, &seqs, &prompt(0, (0..70).rev().map(|i| 1 + i * 5)), 14);
        check(s, types, &seqs, &prompt(0, (0..40).map(|i| 1 + i * 7)), 25);
        check(s, types, &seqs, &prompt(0, [299]), 15);
        // Seq 5's keys all lie after these queries: they see nothing and get zeros.
        check(s, types, &seqs, &prompt(5, 0..70), 16);
        check(s, types, &seqs, &prompt(5, [3]), 17);
    }
}

#[test]
fn long_decode_splits_into_merged_ranges() {
    // 1500 slots: several ranges per KV head, each scored in spans.
    let s = AttentionShape { scale: 0.3, ..shape(4, 1, 64) };
    check(s, F16, &[(0, (0..1500).collect())], &prompt(0, [1499]), 18);
    check(s, F32, &[(0, (0..1500).collect())], &prompt(0, [1400]), 19);
}

#[test]
fn outputs_are_finite_for_large_scores() {
    // Scores far beyond exp's range (hundreds): the online softmax must not overflow. Their
    // f32 rounding (~1e-5 absolute) moves the weights by as much, hence the looser tolerance.
    let s = AttentionShape { scale: 40.0, ..shape(3, 1, 32) };
    check_tol(s, F32, &[(0, (0..130).collect())], &prompt(0, 0..130), 20, 50.0);
    check_tol(s, F32, &[(0, (0..130).collect())], &prompt(0, [129]), 21, 50.0);
}

#[test]
fn quantized_caches_are_read_in_place() {
    let mixed = [(KvType::Q8_0, KvType::F16), (KvType::F16, KvType::Q4_0), (KvType::Q4_0, KvType::F32)];
    for types in [Q8, Q4].into_iter().chain(mixed) {
        let s = shape(9, 3, 64);
        // Tiled (blocks converted once), one decode step, a 3-token step and a 40-token chunk.
        check(s, types, &[(0, (0..70).collect())], &prompt(0, 0..70), 31);
        check(s, types, &[(0, (0..71).collect())], &prompt(0, [70]), 32);
        check(s, types, &[(0, (0..73).collect())], &prompt(0, 70..73), 33);
        check(s, types, &[(0, (0..40).collect())], &prompt(0, 0..40), 34);
    }
    // Gemma 3 geometry (one KV head, head_dim 256) with a window and soft-capping.
    let g3 = AttentionShape { window: Some(16), softcap: Some(5.0), scale: 1.0 / 16.0, ..shape(4, 1, 256) };
    for types in [Q8, Q4] {
        check(g3, types, &[(0, (0..100).collect())], &prompt(0, 0..100), 35);
        check(g3, types, &[(0, (0..300).collect())], &prompt(0, [299]), 36);
    }
    // A long decode split into ranges, several value chunks per span.
    let long = AttentionShape { scale: 0.3, ..shape(4, 1, 64) };
    check(long, Q8, &[(0, (0..1500).collect())], &prompt(0, [1499]), 37);
    check(long, Q4, &[(0, (0..1500).collect())], &prompt(0, [1400]), 38);
    // Slots out of position order, and a sequence whose keys all lie after the queries.
    let mut positions: Vec<u32> = (0..150).map(|i| i * 2).collect();
    let mut rng = StdRng::seed_from_u64(39);
    for i in (1..positions.len()).rev() {
        positions.swap(i, rng.random_range(0..=i));
    }
    let s = AttentionShape { window: Some(24), ..shape(6, 2, 32) };
    let seqs = [(0, positions), (5, (100..110).collect())];
    for types in [Q8, Q4] {
        check(s, types, &seqs, &prompt(0, (0..70).map(|i| 1 + i * 5)), 40);
        check(s, types, &seqs, &prompt(0, (0..40).map(|i| 1 + i * 7)), 41);
        check(s, types, &seqs, &prompt(5, [3]), 42);
    }
}

/// Relative RMS distance of `a` from `b`.
fn rel_rms(a: &[f32], b: &[f32]) -> f64 {
    let d: f64 = a.iter().zip(b).map(|(&x, &y)| (x as f64 - y as f64).powi(2)).sum();
    let n: f64 = b.iter().map(|&y| (y as f64).powi(2)).sum();
    (d / n).sqrt()
}

#[test]
fn quantized_caches_stay_close_to_f32() {
    let s = shape(9, 3, 64);
    let seqs = [(0, (0..100).collect())];
    // Tiled, one decode step, a per-query chunk.
    let batches = [prompt(0, 0..100), prompt(0, [99]), prompt(0, 60..100)];
    let qd = s.n_head * s.head_dim;
    for (types, tol) in [(Q8, 0.02), (Q4, 0.15)] {
        for entries in &batches {
            // The same random rows (same seed) stored as f32 and as `types`.
            let exact = cache(&s, F32, &seqs, &mut StdRng::seed_from_u64(50));
            let quant = cache(&s, types, &seqs, &mut StdRng::seed_from_u64(50));
            let q: Vec<f32> = {
                let mut rng = StdRng::seed_from_u64(51);
                (0..entries.len() * qd).map(|_| rng.random_range(-2.0f32..2.0)).collect()
            };
            let run = |kv: &KvCache, layer: usize| {
                let mut out = vec![0f32; q.len()];
                attention(s, entries, &[], kv, layer, &q, &mut out);
                out
            };
            let want = run(&exact, 0);
            let err = rel_rms(&run(&quant, 0), &want);
            // Reading the wrong rows (here: another layer's) is far outside the tolerance.
            let wrong = rel_rms(&run(&exact, 1), &want);
            eprintln!(
                "{types:?} {} queries: relative RMS error {err:.4} (wrong rows: {wrong:.3})",
                entries.len()
            );
            assert!(err < tol && wrong > 4.0 * tol, "{types:?}: {err} (tolerance {tol}, wrong rows {wrong})");
        }
    }
}
