//! The engine thread: intake, slot assignment with prefix reuse, one batched forward pass per
//! tick, per-slot sampling, and the counters `/metrics` reads.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ferrolm::batch::{Batch, Logits};
use ferrolm::kv::{CacheManager, KvCache, SeqCache, SeqId};
use ferrolm::model::{Model, Pooling};

use super::Usage;
use super::metrics::Rate;
use super::plan::{Demand, plan_tick};
use super::prefix::PrefixCache;
use super::slot::Active;
use super::{EngineConfig, EngineError, Finish, GenEvent, Job, MetricsSnapshot, SlotInfo, SlotState};

/// State shared between the engine thread and its handles.
pub(crate) struct Shared {
    pub(crate) config: EngineConfig,
    pub(crate) model: Arc<Model>,
    pub(crate) jobs: Sender<Job>,
    pub(crate) state: Arc<State>,
}

/// What the engine thread publishes and the handles set.
#[derive(Default)]
pub(crate) struct State {
    /// Whether new requests are taken.
    pub(crate) accepting: AtomicBool,
    /// Requests submitted and not yet taken by a slot (or dropped).
    pub(crate) queued: AtomicUsize,
    /// Requests in slots.
    pub(crate) running: AtomicUsize,
    /// Bumped by [`super::Engine::cancel_all`].
    pub(crate) cancel_epoch: AtomicU64,
    /// Request ids.
    pub(crate) next_id: AtomicU64,
    /// Counters and slot rows as of the last tick.
    pub(crate) published: Mutex<Published>,
}

/// Counters and slot rows published after each tick.
#[derive(Clone, Debug, Default)]
pub(crate) struct Published {
    pub(crate) metrics: MetricsSnapshot,
    pub(crate) slots: Vec<SlotInfo>,
}

/// What one batch row's logits are for.
#[derive(Clone, Copy, Debug)]
enum Out {
    /// After prompt token `at` of the slot's request (prompt log-probabilities).
    Prompt { slot: usize, at: usize },
    /// After the slot's last prompt token, or its last generated token: sample.
    Sample { slot: usize, last_prompt: Option<usize> },
}

/// A request waiting for a slot.
struct Queued {
    id: u64,
    req: super::GenRequest,
    tx: tokio::sync::mpsc::UnboundedSender<GenEvent>,
    queued_at: Instant,
}

/// The engine thread's state.
pub(crate) struct Worker {
    config: EngineConfig,
    model: Arc<Model>,
    state: Arc<State>,
    rx: Receiver<Job>,
    kv: KvCache,
    slots: Vec<Option<Active>>,
    queue: VecDeque<Queued>,
    prefix: PrefixCache<SeqCache>,
    batch: Batch,
    logits: Logits,
    outs: Vec<Out>,
    cancel_epoch: u64,
    started: Instant,
    gen_rate: Rate,
    prompt_rate: Rate,
    counters: MetricsSnapshot,
}

impl Worker {
    pub(crate) fn new(
        model: Arc<Model>,
        config: EngineConfig,
        state: Arc<State>,
        rx: Receiver<Job>,
    ) -> Result<Self, EngineError> {
        if config.n_slots == 0 || config.n_ctx == 0 || config.chunk_size == 0 {
            return Err(EngineError::Config("slots, context size and chunk size must be at least 1".into()));
        }
        let kv = model.new_kv_cache_typed(config.n_ctx, config.type_k, config.type_v)?;
        // Fails early on bad eviction options.
        CacheManager::new(config.cache.clone(), model.attention_shapes(), config.n_ctx)?;
        let mut w = Self {
            slots: (0..config.n_slots).map(|_| None).collect(),
            prefix: PrefixCache::new(config.prefix_cache_bytes),
            config,
            model,
            state,
            rx,
            kv,
            queue: VecDeque::new(),
            batch: Batch::new(),
            logits: Logits::default(),
            outs: Vec::new(),
            cancel_epoch: 0,
            started: Instant::now(),
            gen_rate: Rate::new(Duration::from_secs(10)),
            prompt_rate: Rate::new(Duration::from_secs(10)),
            counters: MetricsSnapshot::default(),
        };
        w.publish();
        Ok(w)
    }

    /// Runs until every handle is gone and no request is left.
    pub(crate) fn run(mut self) {
        let mut disconnected = false;
        loop {
            if self.is_idle() {
                if disconnected {
                    return;
                }
                self.publish();
                match self.rx.recv_timeout(Duration::from_millis(250)) {
                    Ok(job) => self.accept(job),
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => return,
                }
            }
            loop {
                match self.rx.try_recv() {
                    Ok(job) => self.accept(job),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        disconnected = true;
                        break;
                    }
                }
            }
            self.check_cancel_all();
            self.reap();
            self.assign();
            self.tick();
            self.publish();
        }
    }

    fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.slots.iter().all(Option::is_none)
    }

    fn accept(&mut self, job: Job) {
        match job {
            Job::Generate { id, req, tx, queued_at } => {
                self.queue.push_back(Queued { id, req: *req, tx, queued_at })
            }
            Job::Embed { texts, pooling, normalize, tx } => {
                let pooling = pooling
                    .or(self.config.embed_pooling)
                    .or(self.model.default_pooling())
                    .unwrap_or(Pooling::Mean);
                let t0 = Instant::now();
                let result = self.model.embed(&texts, pooling, normalize).map_err(EngineError::from);
                if let Ok(v) = &result {
                    tracing::debug!(n = v.len(), ms = t0.elapsed().as_millis() as u64, "embedded");
                }
                let _ = tx.send(result);
            }
        }
    }

    /// Ends every request after [`super::Engine::cancel_all`].
    fn check_cancel_all(&mut self) {
        let epoch = self.state.cancel_epoch.load(Ordering::Acquire);
        if epoch == self.cancel_epoch {
            return;
        }
        self.cancel_epoch = epoch;
        while let Some(q) = self.queue.pop_front() {
            self.state.queued.fetch_sub(1, Ordering::AcqRel);
            self.counters.requests_cancelled += 1;
            let usage = Usage { prompt_tokens: q.req.prompt.len(), ..Default::default() };
            let _ = q.tx.send(GenEvent::Done { text: String::new(), finish: Finish::Cancelled, usage });
        }
        for i in 0..self.slots.len() {
            self.finish(i, Finish::Cancelled);
        }
    }

    /// Drops requests whose client went away, and ends those past their deadline.
    fn reap(&mut self) {
        let now = Instant::now();
        let before = self.queue.len();
        self.queue.retain(|q| !q.tx.is_closed());
        let gone = before - self.queue.len();
        if gone > 0 {
            self.state.queued.fetch_sub(gone, Ordering::AcqRel);
            self.counters.requests_cancelled += gone as u64;
        }
        for i in 0..self.slots.len() {
            let Some(a) = &self.slots[i] else { continue };
            if a.is_abandoned() {
                tracing::debug!(slot = i, request = a.id, "client went away; slot freed");
                self.finish(i, Finish::Cancelled);
            } else if a.deadline.is_some_and(|d| now >= d) {
                self.finish(i, Finish::Timeout);
            }
        }
        // Queued requests past their deadline.
        let mut k = 0;
        while k < self.queue.len() {
            let expired = self.queue[k].req.timeout.is_some_and(|t| now >= self.queue[k].queued_at + t);
            if expired {
                if let Some(q) = self.queue.remove(k) {
                    self.state.queued.fetch_sub(1, Ordering::AcqRel);
                    self.counters.requests_cancelled += 1;
                    let usage = Usage { prompt_tokens: q.req.prompt.len(), ..Default::default() };
                    let _ = q.tx.send(GenEvent::Done { text: String::new(), finish: Finish::Timeout, usage });
                }
            } else {
                k += 1;
            }
        }
    }

    /// Gives free slots to queued requests, reusing the longest cached prefix.
    fn assign(&mut self) {
        for i in 0..self.slots.len() {
            if self.slots[i].is_some() {
                continue;
            }
            let Some(q) = self.queue.pop_front() else { return };
            self.state.queued.fetch_sub(1, Ordering::AcqRel);
            let manager = match CacheManager::new(
                self.config.cache.clone(),
                self.model.attention_shapes(),
                self.config.n_ctx,
            ) {
                Ok(m) => m,
                Err(e) => {
                    self.fail_request(&q.tx, &e.to_string());
                    continue;
                }
            };
            let tx = q.tx.clone();
            let mut active = match Active::new(&self.model, q.id, q.req, q.tx, q.queued_at, manager) {
                Ok(a) => a,
                Err(e) => {
                    self.fail_request(&tx, &e.to_string());
                    continue;
                }
            };
            let seq = i as SeqId;
            let mut fresh = self.kv.new_seq();
            active.manager.prepare_seq(&mut fresh);
            if !active.prompt_logprobs && self.config.prefix_cache_bytes > 0 {
                self.counters.prefix_cache_lookups += 1;
                if let Some((cached, n)) = self.prefix.lookup(&active.prompt) {
                    // The last prompt token always runs: its logits start the generation.
                    let n = n.min(active.prompt.len() - 1);
                    if n > 0 && fresh.copy_prefix_from(cached, n).is_ok() {
                        active.set_cached(n);
                        self.counters.prefix_cache_hits += 1;
                    }
                }
            }
            self.kv.insert_seq(seq, fresh);
            self.counters.cached_tokens_total += active.n_cached as u64;
            self.counters.prompt_tokens_total += active.prompt.len() as u64;
            tracing::debug!(
                slot = i,
                request = active.id,
                n_prompt = active.prompt.len(),
                n_cached = active.n_cached,
                "slot taken"
            );
            self.slots[i] = Some(active);
            self.state.running.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl Worker {
    /// Builds one batch by the strategy, runs it, and samples for every slot that got logits.
    fn tick(&mut self) {
        let chunk = self.config.chunk_size;
        let demands: Vec<Demand> = self
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, a)| {
                let a = a.as_ref()?;
                // A pass never crosses a canonical chunk boundary (see `canonical_chunk`).
                let chunk_left = canonical_chunk(a.tokens.len(), a.prompt.len(), chunk).end - a.tokens.len();
                Some(Demand {
                    slot: i,
                    decode: a.prompt_left() == 0 && a.pending.is_some(),
                    prompt_left: a.prompt_left().min(chunk_left),
                    max_chunk: a.manager.max_chunk(true),
                    order: a.id,
                })
            })
            .collect();
        if demands.is_empty() {
            return;
        }
        let plan = plan_tick(self.config.strategy, self.config.chunk_size, &demands);
        self.batch.clear();
        self.outs.clear();
        let mut n_prompt = 0usize;
        for &i in &plan.decode {
            let seq = i as SeqId;
            let Some(a) = self.slots[i].as_mut() else { continue };
            let Some(tok) = a.pending else { continue };
            if a.manager.make_room(self.kv.seq_mut(seq), 1, false).is_err() {
                self.finish(i, Finish::ContextFull);
                continue;
            }
            a.pending = None;
            self.batch.push(seq, a.tokens.len() as u32, tok, true);
            a.tokens.push(tok);
            self.outs.push(Out::Sample { slot: i, last_prompt: None });
        }
        for &(i, n) in &plan.prefill {
            let seq = i as SeqId;
            let Some(a) = self.slots[i].as_mut() else { continue };
            if let Err(e) = a.manager.make_room(self.kv.seq_mut(seq), n, true) {
                let msg = e.to_string();
                self.fail_slot(i, &msg);
                continue;
            }
            let start = a.tokens.len();
            let end = start + n;
            // Attend these tokens as their whole canonical chunk would be: the same results
            // whether the chunk's start was cached or shared a tick with other prompts.
            let canon = canonical_chunk(start, a.prompt.len(), chunk);
            self.batch.set_prompt_chunk(seq, canon.len() as u32);
            for at in start..end {
                let last = at + 1 == a.prompt.len();
                let want = last || a.prompt_logprobs;
                self.batch.push(seq, at as u32, a.prompt[at], want);
                if last {
                    self.outs.push(Out::Sample { slot: i, last_prompt: Some(at) });
                } else if want {
                    self.outs.push(Out::Prompt { slot: i, at });
                }
            }
            a.tokens.extend_from_slice(&a.prompt[start..end]);
            n_prompt += n;
        }
        if self.batch.is_empty() {
            return;
        }
        let t0 = Instant::now();
        if let Err(e) = self.model.forward_into(&self.batch, &mut self.kv, &mut self.logits) {
            tracing::error!(error = %e, "forward pass failed");
            let msg = format!("the forward pass failed: {e}");
            let busy: Vec<usize> = self.batch.entries().iter().map(|e| e.seq as usize).collect();
            for i in busy {
                self.fail_slot(i, &msg);
            }
            return;
        }
        self.counters.forward_passes_total += 1;
        let now = Instant::now();
        self.prompt_rate.add(now, n_prompt as u64);
        let mut n_gen = 0u64;
        let outs = std::mem::take(&mut self.outs);
        for (r, out) in outs.iter().enumerate() {
            let row = self.logits.row(r);
            match *out {
                Out::Prompt { slot, at } => {
                    if let Some(a) = self.slots[slot].as_mut() {
                        a.prompt_logits(at, row);
                    }
                }
                Out::Sample { slot, last_prompt } => {
                    let Some(a) = self.slots[slot].as_mut() else { continue };
                    if let Some(at) = last_prompt {
                        if a.prompt_logprobs {
                            a.prompt_logits(at, row);
                        }
                        a.manager.end_prompt(self.kv.seq_mut(slot as SeqId));
                        a.prompt_done();
                    }
                    match a.sample(&self.model, row) {
                        Ok(None) => n_gen += 1,
                        Ok(Some(finish)) => {
                            n_gen += 1;
                            self.finish(slot, finish);
                        }
                        Err(e) => {
                            let msg = format!("sampling failed: {e}");
                            self.fail_slot(slot, &msg);
                        }
                    }
                }
            }
        }
        self.outs = outs;
        self.counters.generated_tokens_total += n_gen;
        self.gen_rate.add(now, n_gen);
        tracing::trace!(
            n = self.batch.len(),
            n_prompt,
            n_gen,
            ms = now.duration_since(t0).as_secs_f64() * 1e3,
            "tick"
        );
    }

    /// Ends slot `i`'s request (if any): sends its end, keeps its KV in the prefix cache and
    /// frees the slot.
    fn finish(&mut self, i: usize, finish: Finish) {
        let Some(mut a) = self.slots[i].take() else { return };
        let usage = a.finish(finish);
        match finish {
            Finish::Length | Finish::Stop | Finish::ContextFull => self.counters.requests_finished += 1,
            Finish::Timeout | Finish::Cancelled => self.counters.requests_cancelled += 1,
        }
        tracing::debug!(
            slot = i,
            request = a.id,
            finish = finish.openai_reason(),
            n_prompt = usage.prompt_tokens,
            n_cached = usage.cached_tokens,
            n_gen = usage.completion_tokens,
            "request done"
        );
        self.release(i, &a.tokens);
    }

    /// Ends slot `i`'s request with an error.
    fn fail_slot(&mut self, i: usize, msg: &str) {
        let Some(a) = self.slots[i].take() else { return };
        self.fail_request(&a.tx, msg);
        // Its cache may be inconsistent with its tokens: do not keep it.
        self.kv.insert_seq(i as SeqId, self.kv.new_seq());
        self.state.running.fetch_sub(1, Ordering::AcqRel);
    }

    fn fail_request(&mut self, tx: &tokio::sync::mpsc::UnboundedSender<GenEvent>, msg: &str) {
        self.counters.requests_failed += 1;
        tracing::warn!(error = msg, "request failed");
        let _ = tx.send(GenEvent::Error(msg.to_string()));
    }

    /// Moves slot `i`'s cache into the prefix cache (the part no eviction touched) and gives the
    /// slot an empty one.
    fn release(&mut self, i: usize, tokens: &[u32]) {
        let seq = i as SeqId;
        let fresh = self.kv.new_seq();
        if let Some(mut old) = self.kv.take_seq(seq)
            && self.config.prefix_cache_bytes > 0
        {
            let valid = old.contiguous_prefix().min(tokens.len()).min(old.len());
            if valid > 0 {
                old.truncate(valid);
                old.shrink_to_fit();
                let bytes = valid * self.kv.bytes_per_token();
                self.prefix.insert(tokens[..valid].to_vec(), old, bytes);
            }
        }
        self.kv.insert_seq(seq, fresh);
        self.state.running.fetch_sub(1, Ordering::AcqRel);
    }

    /// Publishes the counters and slot rows for the handles.
    fn publish(&mut self) {
        let now = Instant::now();
        let mut m = self.counters.clone();
        m.requests_total = self.state.next_id.load(Ordering::Acquire);
        m.generation_tokens_per_second = self.gen_rate.per_second(now, self.started);
        m.prompt_tokens_per_second = self.prompt_rate.per_second(now, self.started);
        m.queue_depth = self.state.queued.load(Ordering::Acquire);
        m.slots_busy = self.slots.iter().filter(|s| s.is_some()).count();
        m.slots_total = self.slots.len();
        let per_slot: Vec<usize> =
            (0..self.slots.len()).map(|i| self.kv.seq(i as SeqId).map_or(0, SeqCache::len)).collect();
        m.kv_tokens = per_slot.iter().sum();
        m.kv_bytes = m.kv_tokens * self.kv.bytes_per_token();
        m.kv_capacity_tokens = self.slots.len() * self.config.n_ctx;
        m.prefix_cache_entries = self.prefix.len();
        m.prefix_cache_tokens = self.prefix.tokens();
        m.prefix_cache_bytes = self.prefix.bytes();
        m.uptime_seconds = now.duration_since(self.started).as_secs_f64();
        let slots = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, a)| match a {
                Some(a) => a.info(i, per_slot[i]),
                None => SlotInfo {
                    id: i,
                    state: SlotState::Idle,
                    request_id: 0,
                    n_prompt: 0,
                    n_cached: 0,
                    n_prompt_done: 0,
                    n_generated: 0,
                    n_kv: per_slot[i],
                },
            })
            .collect();
        if let Ok(mut p) = self.state.published.lock() {
            *p = Published { metrics: m, slots };
        }
    }
}

/// The canonical prompt chunk holding prompt position `at` of a prompt of `len` tokens: the
/// chunks a prompt run alone, from position 0, would be cut into (`[k·size, (k+1)·size)`, the
/// last one shorter). A slot's prompt passes stay inside these chunks and declare their length
/// to the forward pass ([`Batch::set_prompt_chunk`]), so a request's results do not depend on
/// how much of its prompt came from the prefix cache or on the other prompts of a tick.
fn canonical_chunk(at: usize, len: usize, size: usize) -> std::ops::Range<usize> {
    let size = size.max(1);
    let start = at / size * size;
    start..(start + size).min(len).max(at)
}
