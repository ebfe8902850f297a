//! [`CacheManager`]: keeps a sequence's KV cache within its budget and within the memory the
//! system has left, using an [`EvictionPolicy`] to choose what goes.
//!
//! Before each forward pass the caller asks for room for the pass's tokens
//! ([`CacheManager::make_room`]). The cache is shrunk when
//! - the tokens would not fit under the limit: the smallest of the cache's capacity, the
//!   `--kv-budget` and the policy's own limit (a sliding window's sinks plus window). Policies
//!   that compress the prompt (SnapKV) let the prompt fill the capacity first and compress it
//!   when it is in ([`CacheManager::end_prompt`]);
//! - the system's available memory (see [`SystemMonitor`]) is below `--memory-threshold-mb`.
//!
//! Either way the cache is evicted down to `target_ratio` of its limit (or of its length, under
//! memory pressure) rather than by one token, so that compaction runs once every few tokens.
//! Every eviction is logged through `tracing` and counted in [`EvictionStats`].

use std::time::{Duration, Instant};

use super::SeqCache;
use super::monitor::{ProcMonitor, SystemMonitor};
use super::policy::{EvictionPolicy, PolicyKind, make_policy};
use crate::ops::AttentionShape;
use crate::{Error, Result};

/// How a sequence's cache is bounded.
#[derive(Clone, Debug, PartialEq)]
pub struct CacheOptions {
    /// Which policy chooses the evicted tokens.
    pub policy: PolicyKind,
    /// Recent window (sliding, H2O) or observation window (SnapKV), in tokens.
    pub window: usize,
    /// Tokens at the start never evicted (attention sinks).
    pub protected_prefix: usize,
    /// Most tokens cached per sequence (`None`: the context size).
    pub kv_budget: Option<usize>,
    /// Evict when the system's available memory falls below this many MiB.
    pub memory_threshold_mb: Option<u64>,
    /// An eviction leaves this fraction of the limit (or, under memory pressure, of the cache).
    pub target_ratio: f32,
}

impl Default for CacheOptions {
    fn default() -> Self {
        Self {
            policy: PolicyKind::None,
            window: 256,
            protected_prefix: 4,
            kv_budget: None,
            memory_threshold_mb: None,
            target_ratio: 0.9,
        }
    }
}

impl CacheOptions {
    /// Whether these options can ever evict anything.
    pub fn evicts(&self) -> bool {
        self.policy != PolicyKind::None
    }
}

/// Why tokens were evicted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionReason {
    /// The cache reached its limit (budget, policy window or capacity).
    Budget,
    /// The prompt was compressed once it was in (SnapKV).
    PromptCompression,
    /// Available memory fell below the threshold.
    MemoryPressure,
}

/// One eviction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvictionEvent {
    /// Why.
    pub reason: EvictionReason,
    /// Cached tokens before.
    pub before: usize,
    /// Tokens evicted.
    pub evicted: usize,
    /// Time to choose and compact.
    pub time: Duration,
}

/// Totals over a manager's life.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EvictionStats {
    /// Evictions.
    pub n_events: usize,
    /// Tokens evicted.
    pub n_evicted: usize,
    /// Evictions caused by memory pressure.
    pub n_memory_events: usize,
    /// Time spent evicting.
    pub time: Duration,
    /// Most tokens the cache held at once.
    pub peak_len: usize,
}

/// Keeps one or more sequences' caches bounded (see the module docs).
#[derive(Debug)]
pub struct CacheManager {
    policy: Box<dyn EvictionPolicy>,
    opts: CacheOptions,
    /// Attention geometry of every layer (for scoring policies).
    shapes: Vec<AttentionShape<'static>>,
    capacity: usize,
    limit: usize,
    monitor: Box<dyn SystemMonitor>,
    last_check: Option<Instant>,
    check_every: Duration,
    stats: EvictionStats,
    events: Vec<EvictionEvent>,
    /// Slots chosen for eviction.
    victims: Vec<usize>,
}

/// Fewest tokens a memory-pressure eviction leaves (besides the protected prefix).
const PRESSURE_FLOOR: usize = 32;

impl CacheManager {
    /// A manager for caches of `capacity` slots of a model with the given per-layer attention
    /// geometry, watching the system's memory through `/proc` and the cgroup.
    pub fn new(opts: CacheOptions, shapes: Vec<AttentionShape<'static>>, capacity: usize) -> Result<Self> {
        Self::with_monitor(opts, shapes, capacity, Box::new(ProcMonitor))
    }

    /// Like [`CacheManager::new`] with another source of available memory.
    pub fn with_monitor(
        opts: CacheOptions,
        shapes: Vec<AttentionShape<'static>>,
        capacity: usize,
        monitor: Box<dyn SystemMonitor>,
    ) -> Result<Self> {
        if !(opts.target_ratio > 0.0 && opts.target_ratio < 1.0) {
            return Err(Error::InvalidInput(format!(
                "the eviction target ratio must be between 0 and 1 (got {})",
                opts.target_ratio
            )));
        }
        if opts.kv_budget == Some(0) {
            return Err(Error::InvalidInput("the KV budget must be at least 1 token".into()));
        }
        let policy = make_policy(opts.policy, opts.window, opts.protected_prefix)?;
        let mut limit = capacity.min(opts.kv_budget.unwrap_or(capacity));
        if let Some(n) = policy.natural_budget() {
            limit = limit.min(n);
        }
        if policy.evicts() && limit <= opts.protected_prefix {
            return Err(Error::InvalidInput(format!(
                "a KV limit of {limit} tokens leaves no room beside the {} protected tokens",
                opts.protected_prefix
            )));
        }
        Ok(Self {
            policy,
            opts,
            shapes,
            capacity,
            limit,
            monitor,
            last_check: None,
            check_every: Duration::from_millis(100),
            stats: EvictionStats::default(),
            events: Vec::new(),
            victims: Vec::new(),
        })
    }

    /// The options.
    pub fn options(&self) -> &CacheOptions {
        &self.opts
    }

    /// The policy's name.
    pub fn policy_name(&self) -> &'static str {
        self.policy.name()
    }

    /// Whether the cache is evicted at all (any policy but `none`).
    pub fn evicts(&self) -> bool {
        self.policy.evicts()
    }

    /// The most tokens a sequence holds outside a compressing policy's prompt.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The most tokens one forward pass may add: a chunk leaves the cache room for at least the
    /// protected prefix and a quarter of the limit of older tokens.
    pub fn max_chunk(&self, in_prompt: bool) -> usize {
        let limit = self.limit_now(in_prompt);
        if !self.policy.evicts() {
            return limit;
        }
        let keep = self.opts.protected_prefix + limit / 4;
        limit.saturating_sub(keep).max(1)
    }

    /// Totals so far.
    pub fn stats(&self) -> EvictionStats {
        self.stats
    }

    /// Every eviction so far, in order.
    pub fn events(&self) -> &[EvictionEvent] {
        &self.events
    }

    /// Sets up a sequence's cache for the policy (attention tracking, query log).
    pub fn prepare_seq(&self, seq: &mut SeqCache) {
        seq.set_track_attention(self.policy.tracks_attention());
        let w = self.policy.query_window();
        if w > 0 && seq.query_log().is_none_or(|l| l.window() != w) {
            let q_dim = self.shapes.first().map_or(0, |s| s.n_head * s.head_dim);
            seq.set_query_log(w, self.shapes.len(), q_dim);
        }
    }

    fn limit_now(&self, in_prompt: bool) -> usize {
        if in_prompt && self.policy.compresses_prompt() { self.capacity } else { self.limit }
    }

    /// Makes room in `seq` for a forward pass of `n_new` tokens, evicting if the limit or the
    /// memory threshold requires it. `in_prompt`: the tokens are part of a prompt (SnapKV then
    /// waits for [`CacheManager::end_prompt`]).
    ///
    /// Fails when the tokens cannot fit: `none` with a full cache, or more new tokens than the
    /// limit leaves room for.
    pub fn make_room(&mut self, seq: &mut SeqCache, n_new: usize, in_prompt: bool) -> Result<()> {
        self.prepare_seq(seq);
        let limit = self.limit_now(in_prompt);
        if seq.len() + n_new > limit {
            if !self.policy.evicts() || n_new > self.max_chunk(in_prompt) {
                return Err(Error::InvalidInput(format!(
                    "the context is full ({} cached + {n_new} new tokens > {limit})",
                    seq.len()
                )));
            }
            let target = ((limit as f32 * self.opts.target_ratio) as usize).min(limit - n_new);
            self.evict(seq, target, EvictionReason::Budget);
        }
        self.check_memory(seq);
        self.stats.peak_len = self.stats.peak_len.max(seq.len() + n_new);
        Ok(())
    }

    /// Called when a prompt is in: a compressing policy (SnapKV) shrinks it to the limit.
    pub fn end_prompt(&mut self, seq: &mut SeqCache) {
        if self.policy.compresses_prompt() && seq.len() >= self.limit {
            let target = ((self.limit as f32 * self.opts.target_ratio) as usize).min(self.limit - 1);
            self.evict(seq, target, EvictionReason::PromptCompression);
        }
    }

    /// Evicts under memory pressure, at most every `check_every`.
    fn check_memory(&mut self, seq: &mut SeqCache) {
        let Some(mb) = self.opts.memory_threshold_mb else { return };
        if self.last_check.is_some_and(|t| t.elapsed() < self.check_every) {
            return;
        }
        self.last_check = Some(Instant::now());
        let Some(avail) = self.monitor.available_bytes() else { return };
        if avail >= mb.saturating_mul(1 << 20) {
            return;
        }
        let floor = self.opts.protected_prefix + PRESSURE_FLOOR;
        if !self.policy.evicts() || seq.len() <= floor {
            tracing::warn!(
                available_mb = avail >> 20,
                threshold_mb = mb,
                policy = self.policy.name(),
                "memory is low but the KV cache cannot shrink"
            );
            return;
        }
        let target = ((seq.len() as f32 * self.opts.target_ratio) as usize).max(floor);
        self.evict(seq, target, EvictionReason::MemoryPressure);
        seq.shrink_to_fit();
    }

    /// Evicts `seq` down to `keep` slots.
    fn evict(&mut self, seq: &mut SeqCache, keep: usize, reason: EvictionReason) {
        let t0 = Instant::now();
        let before = seq.len();
        self.policy.prepare(seq, &self.shapes);
        self.victims.clear();
        self.policy.select(seq, keep, &mut self.victims);
        seq.remove_slots(&self.victims);
        let event = EvictionEvent { reason, before, evicted: before - seq.len(), time: t0.elapsed() };
        tracing::debug!(
            policy = self.policy.name(),
            ?reason,
            before,
            evicted = event.evicted,
            us = event.time.as_micros() as u64,
            "KV cache evicted"
        );
        self.stats.n_events += 1;
        self.stats.n_evicted += event.evicted;
        self.stats.time += event.time;
        if reason == EvictionReason::MemoryPressure {
            self.stats.n_memory_events += 1;
        }
        self.events.push(event);
    }
}

#[cfg(test)]
mod tests;
