use super::*;
use crate::kv::{FixedMonitor, KvCache, KvType};

fn shapes() -> Vec<AttentionShape<'static>> {
    vec![AttentionShape::tiny()]
}

fn opts(policy: PolicyKind, window: usize, sinks: usize) -> CacheOptions {
    CacheOptions { policy, window, protected_prefix: sinks, ..CacheOptions::default() }
}

/// Runs `n` tokens one at a time through `mgr`, as decode does; returns the largest length seen.
fn feed(mgr: &mut CacheManager, kv: &mut KvCache, from: u32, n: u32) -> Result<usize> {
    let mut peak = 0;
    for p in from..from + n {
        mgr.make_room(kv.seq_mut(0), 1, false)?;
        let s = kv.push_slot(0, p)?;
        kv.seq_mut(0).write(0, s, &[1.0, 0.0], &[0.0, 1.0]);
        peak = peak.max(kv.seq(0).map_or(0, |s| s.len()));
    }
    Ok(peak)
}

#[test]
fn sliding_window_stays_bounded_and_keeps_sinks() {
    let mut mgr = CacheManager::new(opts(PolicyKind::Sliding, 20, 4), shapes(), 1000).expect("mgr");
    assert_eq!(mgr.limit(), 24);
    let mut kv = KvCache::new(1, 2, 1000, KvType::F32, KvType::F32);
    let peak = feed(&mut mgr, &mut kv, 0, 500).expect("feed");
    assert_eq!(peak, 24);
    let seq = kv.seq(0).expect("seq");
    assert_eq!(&seq.positions()[..4], &[0, 1, 2, 3]);
    assert_eq!(seq.positions().last(), Some(&499));
    let st = mgr.stats();
    assert!(st.n_events > 10 && st.n_memory_events == 0, "{st:?}");
    assert_eq!(st.n_evicted, 500 - seq.len());
    // Evicting to 90% of 24 (21, less the new token's room): 3 or 4 tokens at a time.
    assert!(mgr.events().iter().all(|e| e.evicted >= 3 && e.reason == EvictionReason::Budget));
}

#[test]
fn budget_caps_h2o_and_none_fails_when_full() {
    let o = CacheOptions { kv_budget: Some(50), ..opts(PolicyKind::H2o, 10, 0) };
    let mut mgr = CacheManager::new(o, shapes(), 1000).expect("mgr");
    let mut kv = KvCache::new(1, 2, 1000, KvType::F32, KvType::F32);
    assert_eq!(feed(&mut mgr, &mut kv, 0, 300).expect("feed"), 50);
    assert!(kv.seq(0).expect("seq").tracks_attention());

    let o = CacheOptions { kv_budget: Some(50), ..opts(PolicyKind::None, 10, 0) };
    let mut mgr = CacheManager::new(o, shapes(), 1000).expect("mgr");
    let mut kv = KvCache::new(1, 2, 1000, KvType::F32, KvType::F32);
    let err = feed(&mut mgr, &mut kv, 0, 300).expect_err("full");
    assert!(err.to_string().contains("context is full"), "{err}");
    assert_eq!(kv.seq(0).expect("seq").len(), 50);
}

#[test]
fn memory_pressure_evicts_to_the_ratio_and_only_when_low() {
    let monitor = FixedMonitor::new(8 << 30);
    let o = CacheOptions { memory_threshold_mb: Some(100), ..opts(PolicyKind::Sliding, 400, 4) };
    let mut mgr = CacheManager::with_monitor(o, shapes(), 1000, Box::new(monitor.clone())).expect("mgr");
    mgr.check_every = Duration::ZERO;
    let mut kv = KvCache::new(1, 2, 1000, KvType::F32, KvType::F32);
    feed(&mut mgr, &mut kv, 0, 200).expect("feed");
    assert_eq!(mgr.stats().n_events, 0);
    assert_eq!(kv.seq(0).expect("seq").len(), 200);

    monitor.set(50 << 20);
    mgr.make_room(kv.seq_mut(0), 1, false).expect("room");
    let seq = kv.seq(0).expect("seq");
    assert_eq!(seq.len(), 180);
    assert_eq!(mgr.stats().n_memory_events, 1);
    assert_eq!(mgr.events()[0].reason, EvictionReason::MemoryPressure);
    // Sustained pressure shrinks further, but never below the floor.
    for _ in 0..100 {
        mgr.make_room(kv.seq_mut(0), 1, false).expect("room");
    }
    assert_eq!(kv.seq(0).expect("seq").len(), 4 + PRESSURE_FLOOR);
    monitor.set(8 << 30);
    let before = mgr.stats().n_events;
    feed(&mut mgr, &mut kv, 200, 10).expect("feed");
    assert_eq!(mgr.stats().n_events, before);
}

#[test]
fn snapkv_lets_the_prompt_in_then_compresses_it() {
    let o = CacheOptions { kv_budget: Some(40), ..opts(PolicyKind::SnapKv, 8, 0) };
    let mut mgr = CacheManager::new(o, shapes(), 1000).expect("mgr");
    let mut kv = KvCache::new(1, 2, 1000, KvType::F32, KvType::F32);
    mgr.make_room(kv.seq_mut(0), 100, true).expect("prompt fits the capacity");
    for p in 0..100 {
        let s = kv.push_slot(0, p).expect("slot");
        kv.seq_mut(0).write(0, s, &[1.0, 0.0], &[0.0, 1.0]);
        kv.seq_mut(0).query_log_mut().expect("log").record(0, p, &[1.0, 0.0]);
    }
    mgr.end_prompt(kv.seq_mut(0));
    assert_eq!(kv.seq(0).expect("seq").len(), 36);
    assert_eq!(mgr.events()[0].reason, EvictionReason::PromptCompression);
    // The observation window survives.
    assert_eq!(&kv.seq(0).expect("seq").positions()[28..], &(92..100).collect::<Vec<_>>()[..]);
    assert_eq!(feed(&mut mgr, &mut kv, 100, 100).expect("feed"), 40);
}

#[test]
fn bad_options_are_clear_errors() {
    let bad = [
        CacheOptions { target_ratio: 1.5, ..opts(PolicyKind::Sliding, 8, 2) },
        CacheOptions { kv_budget: Some(0), ..opts(PolicyKind::Sliding, 8, 2) },
        CacheOptions { kv_budget: Some(4), ..opts(PolicyKind::H2o, 8, 4) },
        opts(PolicyKind::H2o, 0, 4),
    ];
    for o in bad {
        assert!(CacheManager::new(o.clone(), shapes(), 100).is_err(), "{o:?}");
    }
}
