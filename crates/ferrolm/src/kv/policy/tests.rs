use super::*;
use crate::kv::{KvCache, KvType};

/// A one-layer cache of `n` tokens at positions 0..n with 2-wide keys `key(p)`.
fn cache(n: u32, key: impl Fn(u32) -> [f32; 2]) -> KvCache {
    let mut kv = KvCache::new(1, 2, 64, KvType::F32, KvType::F32);
    for p in 0..n {
        let s = kv.push_slot(0, p).expect("slot");
        kv.seq_mut(0).write(0, s, &key(p), &[0.0, 0.0]);
    }
    kv
}

/// Positions left after evicting what the policy selects to keep `keep`.
fn kept(policy: &dyn EvictionPolicy, seq: &mut SeqCache, keep: usize) -> Vec<u32> {
    let mut out = Vec::new();
    policy.select(seq, keep, &mut out);
    seq.remove_slots(&out);
    assert_eq!(seq.len(), keep);
    seq.positions().to_vec()
}

#[test]
fn names_parse() {
    for k in [PolicyKind::None, PolicyKind::Sliding, PolicyKind::H2o, PolicyKind::SnapKv] {
        assert_eq!(PolicyKind::from_name(k.name()), Some(k));
    }
    assert_eq!(PolicyKind::from_name("lru"), None);
    assert!(make_policy(PolicyKind::Sliding, 0, 4).is_err());
}

#[test]
fn sliding_keeps_sinks_and_the_newest() {
    let mut kv = cache(20, |_| [0.0, 0.0]);
    let p = make_policy(PolicyKind::Sliding, 6, 2).expect("policy");
    assert_eq!(p.natural_budget(), Some(8));
    assert_eq!(kept(p.as_ref(), kv.seq_mut(0), 8), vec![0, 1, 14, 15, 16, 17, 18, 19]);
    // Without sinks: only the newest.
    let mut kv = cache(20, |_| [0.0, 0.0]);
    let p = make_policy(PolicyKind::Sliding, 8, 0).expect("policy");
    assert_eq!(kept(p.as_ref(), kv.seq_mut(0), 8), (12..20).collect::<Vec<_>>());
}

#[test]
fn h2o_keeps_heavy_hitters_sinks_and_recent() {
    let mut kv = cache(20, |_| [0.0, 0.0]);
    let seq = kv.seq_mut(0);
    for (s, v) in seq.scores_mut().iter_mut().enumerate() {
        *v = if [3, 7, 9, 11].contains(&s) { 10.0 + s as f32 } else { s as f32 * 0.01 };
    }
    let p = make_policy(PolicyKind::H2o, 3, 1).expect("policy");
    assert!(p.tracks_attention());
    assert_eq!(kept(p.as_ref(), seq, 8), vec![0, 3, 7, 9, 11, 17, 18, 19]);
    // Scores follow their tokens through the compaction.
    assert_eq!(seq.scores()[1], 13.0);
}

#[test]
fn snapkv_keeps_what_the_observation_window_attends_to() {
    // Keys: token 5 points where the recent queries look; everything else is orthogonal.
    let mut kv = cache(30, |p| if p == 5 { [8.0, 0.0] } else { [0.0, 1.0] });
    let shape = AttentionShape::tiny();
    let mut p = make_policy(PolicyKind::SnapKv, 4, 0).expect("policy");
    assert_eq!(p.query_window(), 4);
    let seq = kv.seq_mut(0);
    seq.set_query_log(4, 1, 2);
    for pos in 26..30 {
        seq.query_log_mut().expect("log").record(0, pos, &[1.0, 0.0]);
    }
    p.prepare(seq, &[shape]);
    let s = seq.scores();
    assert!(s[5] > 100.0 * s[20], "{s:?}");
    // Pooling: neighbours within 3 share the peak.
    assert_eq!(s[2], s[5]);
    assert_eq!(s[8], s[5]);
    assert!(s[9] < s[5] * 0.1);
    // Keep 11: the 4 observed tokens, then 7 of the best: 2..=8.
    assert_eq!(kept(p.as_ref(), seq, 11), vec![2, 3, 4, 5, 6, 7, 8, 26, 27, 28, 29]);
}

#[test]
fn nothing_is_evicted_when_keep_covers_the_cache() {
    let mut kv = cache(5, |_| [0.0, 0.0]);
    for kind in [PolicyKind::None, PolicyKind::Sliding, PolicyKind::H2o, PolicyKind::SnapKv] {
        let p = make_policy(kind, 2, 1).expect("policy");
        let mut out = Vec::new();
        p.select(kv.seq_mut(0), 5, &mut out);
        assert!(out.is_empty(), "{kind}");
    }
}
