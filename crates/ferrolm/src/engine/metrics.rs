//! Counters the engine keeps for `/metrics` and `/slots`.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde::Serialize;

/// What a slot is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SlotState {
    /// No request.
    Idle,
    /// Running its prompt through the model.
    Prefill,
    /// Generating tokens.
    Generating,
}

/// One slot, as `/slots` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SlotInfo {
    /// Slot index.
    pub id: usize,
    /// What it is doing.
    pub state: SlotState,
    /// The engine's id of its request (0 when idle).
    pub request_id: u64,
    /// Prompt length of its request.
    pub n_prompt: usize,
    /// Prompt tokens reused from the prefix cache.
    pub n_cached: usize,
    /// Prompt tokens run through the model so far (cached ones included).
    pub n_prompt_done: usize,
    /// Tokens generated so far.
    pub n_generated: usize,
    /// Tokens in its KV cache.
    pub n_kv: usize,
}

impl SlotInfo {
    /// Slot `id` with no request, `n_kv` tokens left in its cache.
    pub fn idle(id: usize, n_kv: usize) -> Self {
        Self {
            id,
            state: SlotState::Idle,
            request_id: 0,
            n_prompt: 0,
            n_cached: 0,
            n_prompt_done: 0,
            n_generated: 0,
            n_kv,
        }
    }
}

/// A consistent reading of the engine's counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MetricsSnapshot {
    /// Requests accepted since start.
    pub requests_total: u64,
    /// Requests that ended normally (length or stop).
    pub requests_finished: u64,
    /// Requests cancelled (client gone, shutdown) or timed out.
    pub requests_cancelled: u64,
    /// Requests that failed in the engine.
    pub requests_failed: u64,
    /// Requests refused because the queue was full.
    pub requests_rejected: u64,
    /// Prompt tokens of all requests.
    pub prompt_tokens_total: u64,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens_total: u64,
    /// Tokens generated.
    pub generated_tokens_total: u64,
    /// Forward passes run.
    pub forward_passes_total: u64,
    /// Generated tokens per second over the last 10 seconds.
    pub generation_tokens_per_second: f64,
    /// Prompt tokens run through the model per second over the last 10 seconds.
    pub prompt_tokens_per_second: f64,
    /// Requests waiting for a slot.
    pub queue_depth: usize,
    /// Slots running a request.
    pub slots_busy: usize,
    /// Number of slots.
    pub slots_total: usize,
    /// Tokens in the slots' KV caches.
    pub kv_tokens: usize,
    /// Bytes of the slots' KV caches.
    pub kv_bytes: usize,
    /// Most tokens all slots can hold (slots × context).
    pub kv_capacity_tokens: usize,
    /// Sequences kept by the prefix cache.
    pub prefix_cache_entries: usize,
    /// Tokens kept by the prefix cache.
    pub prefix_cache_tokens: usize,
    /// Bytes kept by the prefix cache.
    pub prefix_cache_bytes: usize,
    /// Most bytes the prefix cache keeps (its budget).
    pub prefix_cache_budget_bytes: usize,
    /// Bytes of the slots' KV caches when every slot holds a full context.
    pub kv_capacity_bytes: usize,
    /// Requests that reused a cached prefix.
    pub prefix_cache_hits: u64,
    /// Requests that looked for a cached prefix.
    pub prefix_cache_lookups: u64,
    /// Seconds since the engine started.
    pub uptime_seconds: f64,
    /// Seconds ended requests spent on their prompts (from taking a slot to the first token).
    pub prompt_seconds_total: f64,
    /// Seconds ended requests spent generating (from the first token to the end).
    pub generation_seconds_total: f64,
    /// Tokens drafted by speculative decoding, by ended requests.
    pub draft_tokens_total: u64,
    /// Drafted tokens kept, by ended requests.
    pub draft_accepted_total: u64,
    /// Verification passes of drafted tokens, by ended requests.
    pub draft_passes_total: u64,
    /// Most tokens one request held (prompt and generated), over the ended requests.
    pub request_tokens_max: u64,
    /// Busy slots summed over the forward passes (over `forward_passes_total`: slots per pass).
    pub busy_slots_per_pass_total: u64,
}

/// Events in a sliding window, for rates.
#[derive(Debug)]
pub(crate) struct Rate {
    window: Duration,
    events: VecDeque<(Instant, u64)>,
    sum: u64,
}

impl Rate {
    pub(crate) fn new(window: Duration) -> Self {
        Self { window, events: VecDeque::new(), sum: 0 }
    }

    pub(crate) fn add(&mut self, now: Instant, n: u64) {
        if n > 0 {
            self.events.push_back((now, n));
            self.sum += n;
        }
        self.expire(now);
    }

    fn expire(&mut self, now: Instant) {
        while let Some(&(t, n)) = self.events.front() {
            if now.duration_since(t) <= self.window {
                break;
            }
            self.events.pop_front();
            self.sum -= n;
        }
    }

    /// Events per second over the window (or since the first event, when more recent).
    pub(crate) fn per_second(&mut self, now: Instant, started: Instant) -> f64 {
        self.expire(now);
        let span = self.window.min(now.duration_since(started)).as_secs_f64();
        if span <= 0.0 { 0.0 } else { self.sum as f64 / span }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_counts_only_the_window() {
        let t0 = Instant::now();
        let mut r = Rate::new(Duration::from_secs(10));
        r.add(t0, 100);
        r.add(t0 + Duration::from_secs(5), 50);
        let now = t0 + Duration::from_secs(12);
        // The first event left the window; 50 tokens over 10 s.
        assert!((r.per_second(now, t0) - 5.0).abs() < 1e-9);
        // Just after the start the span is the time since the start.
        let mut r = Rate::new(Duration::from_secs(10));
        r.add(t0, 20);
        assert!((r.per_second(t0 + Duration::from_secs(2), t0) - 10.0).abs() < 1e-9);
    }
}
