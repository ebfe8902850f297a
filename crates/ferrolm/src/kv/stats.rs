//! Attention statistics for KV-cache eviction policies: how much probability mass given queries
//! put on each cached slot, per query head.
//!
//! Only policies that need them ask (H2O after every forward pass, SnapKV when it compresses),
//! so the attention kernels stay free of bookkeeping. The probabilities are those of the
//! attention itself: scaled, soft-capped and masked the same way (causal over logical
//! positions, inside the layer's sliding window), normalised over the slots a query sees.

use std::cell::RefCell;

use ferrolm_kernels::simd::dot_f32;

use super::SeqCache;
use crate::ops::{AttentionShape, visible};
use crate::threads::{self, parallel_for};

/// Adds, for every query head `h` and slot `j` of `cache`, the attention probability that each
/// query puts on slot `j` in `layer` to `mass[h * len + j]`. The reference for the backends'
/// `attention_mass` operator (the CPU's runs this), and what SnapKV scores the prompt with
/// when it compresses it.
///
/// `q`: the queries (rotated, as the attention saw them), `[m, n_head * head_dim]`; `qpos`:
/// their logical positions, `[m]`; `mass`: `[n_head, len]` where `len` is the cache's slot
/// count.
///
/// # Panics
/// If the shapes of `q`, `qpos` or `mass` do not match.
pub fn attention_mass(
    shape: AttentionShape,
    cache: &SeqCache,
    layer: usize,
    q: &[f32],
    qpos: &[u32],
    mass: &mut [f32],
) {
    let (hd, nh) = (shape.head_dim, shape.n_head);
    let len = cache.len();
    let kv_dim = shape.n_head_kv * hd;
    assert!(q.len() == qpos.len() * nh * hd, "attention_mass: q shape");
    assert!(mass.len() == nh * len, "attention_mass: mass shape");
    if len == 0 || qpos.is_empty() {
        return;
    }
    KEYS.with(|keys| {
        let mut keys = keys.borrow_mut();
        if keys.len() < len * kv_dim {
            keys.resize(len * kv_dim, 0.0);
        }
        // [len, kv_dim]: the layer's keys in f32, converted once for all the queries.
        let keys = &mut keys[..len * kv_dim];
        cache.keys(layer).read(0, keys);
        let keys: &[f32] = keys;
        let pool = threads::pool();
        let n_tasks = if qpos.len() < 4 { 1 } else { pool.n_threads().min(qpos.len()) };
        if n_tasks == 1 {
            for (i, &p) in qpos.iter().enumerate() {
                query_mass(shape, cache.positions(), keys, &q[i * nh * hd..(i + 1) * nh * hd], p, mass);
            }
            return;
        }
        // One accumulator per task, summed at the end (each task takes a run of queries).
        let parts: Vec<std::sync::Mutex<Vec<f32>>> =
            (0..n_tasks).map(|_| std::sync::Mutex::new(vec![0.0; nh * len])).collect();
        parallel_for(&pool, n_tasks, |t| {
            let Ok(mut acc) = parts[t].lock() else { return };
            let (a, b) = (t * qpos.len() / n_tasks, (t + 1) * qpos.len() / n_tasks);
            for i in a..b {
                let qi = &q[i * nh * hd..(i + 1) * nh * hd];
                query_mass(shape, cache.positions(), keys, qi, qpos[i], &mut acc);
            }
        });
        for part in parts {
            let part = part.into_inner().unwrap_or_else(|e| e.into_inner());
            mass.iter_mut().zip(&part).for_each(|(m, p)| *m += p);
        }
    });
}

/// One query's probabilities added into `mass` (`[n_head, len]`).
fn query_mass(shape: AttentionShape, pos: &[u32], keys: &[f32], q: &[f32], qpos: u32, mass: &mut [f32]) {
    let (hd, nh) = (shape.head_dim, shape.n_head);
    let group = nh / shape.n_head_kv;
    let kv_dim = shape.n_head_kv * hd;
    let len = pos.len();
    SCORES.with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < len {
            s.resize(len, 0.0);
        }
        let s = &mut s[..len];
        for h in 0..nh {
            let kvh = h / group;
            let qh = &q[h * hd..(h + 1) * hd];
            let mut max = f32::NEG_INFINITY;
            for (j, sj) in s.iter_mut().enumerate() {
                *sj = if visible(shape.window, qpos, pos[j]) {
                    let k = &keys[j * kv_dim + kvh * hd..j * kv_dim + (kvh + 1) * hd];
                    let mut x = dot_f32(qh, k) * shape.scale;
                    if let Some(c) = shape.softcap {
                        x = c * (x / c).tanh();
                    }
                    max = max.max(x);
                    x
                } else {
                    f32::NEG_INFINITY
                };
            }
            if max == f32::NEG_INFINITY {
                continue;
            }
            let mut sum = 0.0;
            for sj in s.iter_mut() {
                *sj = (*sj - max).exp();
                sum += *sj;
            }
            let inv = 1.0 / sum;
            for (m, sj) in mass[h * len..(h + 1) * len].iter_mut().zip(s.iter()) {
                *m += sj * inv;
            }
        }
    });
}

thread_local! {
    /// The keys of the layer being scored, in f32. `[len, kv_dim]`
    static KEYS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// One head's scores, then probabilities. `[len]`
    static SCORES: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{KvCache, KvType};

    /// Each query's probabilities sum to one per head; hidden slots get nothing; the key that
    /// matches the query best gets the most.
    #[test]
    fn mass_is_a_distribution_over_visible_slots() {
        let shape = AttentionShape {
            n_head: 2,
            n_head_kv: 1,
            head_dim: 4,
            scale: 0.5,
            window: None,
            softcap: None,
            sinks: None,
        };
        let mut kv = KvCache::new(1, 4, 16, KvType::F32, KvType::F32);
        for p in 0..6u32 {
            let s = kv.push_slot(0, p).expect("slot");
            let k = [p as f32, 1.0, 0.0, -(p as f32)];
            kv.seq_mut(0).write(0, s, &k, &[0.0; 4]);
        }
        let seq = kv.seq(0).expect("seq");
        // Query 1 at position 3 (e0: prefers large positions), query 2 at position 5 (e3: prefers
        // small ones); both heads the same.
        let q = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
        let mut mass = vec![0.0; 2 * 6];
        attention_mass(shape, seq, 0, &q, &[3, 5], &mut mass);
        for h in 0..2 {
            let row = &mass[h * 6..(h + 1) * 6];
            let total: f32 = row.iter().sum();
            assert!((total - 2.0).abs() < 1e-5, "head {h}: {row:?}");
        }
        // Slot 3 (query 1's favourite, 0.455 + 0.092) beats slot 0 (query 2's, 0.414 + 0.102).
        assert!(mass[3] > mass[0]);
        // Query 1 never sees slots 4 and 5; query 2 puts little there.
        let only_second = &mass[4..6];
        assert!(only_second.iter().all(|&m| m < 0.1), "{only_second:?}");
        // The parallel path gives the same sums.
        let q8: Vec<f32> = q.iter().cycle().take(q.len() * 4).copied().collect();
        let mut m8 = vec![0.0; 12];
        attention_mass(shape, seq, 0, &q8, &[3, 5, 3, 5, 3, 5, 3, 5], &mut m8);
        for (a, b) in m8.iter().zip(&mass) {
            assert!((a - 4.0 * b).abs() < 1e-4);
        }
    }
}
