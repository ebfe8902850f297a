//! The engine thread: intake, slot assignment with prefix reuse, one batched forward pass per
//! tick, per-slot sampling, and the counters `/metrics` reads.

mod slot_state;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::draft::DraftRunner;
use super::metrics::Rate;
use super::plan::{Demand, plan_tick};
use super::prefix::PrefixCache;
use super::slot::Active;
use super::{
    DraftSettings, EngineConfig, EngineError, EngineHooks, Event, EventSender, Job, MetricsSnapshot,
    SlotInfo, TickReport, Usage,
};
use crate::batch::{Batch, Logits};
use crate::decoder::{Decoder, FinishReason};
use crate::kv::{CacheManager, KvCache, RecurrentState, SeqCache, SeqId};
use crate::model::{Model, Pooling};
use crate::sequence::{Outputs, Sequence};
use crate::sysmem::Releaser;
pub(crate) use slot_state::SlotJob;

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
    /// Requests refused because the queue was full (counted by the submitting handle).
    pub(crate) rejected: AtomicU64,
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
    /// After draft `row` (1-based) of the slot's verification pass: sample, if the pass kept
    /// every draft before it.
    Draft { slot: usize, row: usize },
}

/// A request waiting for a slot.
struct Queued {
    id: u64,
    req: super::GenRequest,
    decoder: Box<Decoder>,
    tx: EventSender,
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
    /// A decode step's tokens, its pending one and drafts (scratch).
    pass_tokens: Vec<u32>,
    /// The draft model, when the engine has one.
    drafter: Option<DraftRunner>,
    /// The slots the draft model drafts for this tick: `(slot, most tokens, settings)`.
    draft_wanted: Vec<(usize, usize, DraftSettings)>,
    cancel_epoch: u64,
    started: Instant,
    gen_rate: Rate,
    prompt_rate: Rate,
    counters: MetricsSnapshot,
    hooks: EngineHooks,
    /// Gives the memory of dropped and shrunk caches back to the system.
    releaser: Releaser,
    /// Per slot, the tokens its last request left in the prefix cache (empty: none), what a
    /// slot save writes and a slot erase removes.
    slot_tokens: Vec<Vec<u32>>,
    /// Slot actions waiting for their slot to be free.
    slot_jobs: Vec<SlotJob>,
}

impl Worker {
    pub(crate) fn new(
        model: Arc<Model>,
        config: EngineConfig,
        state: Arc<State>,
        rx: Receiver<Job>,
        hooks: EngineHooks,
    ) -> Result<Self, EngineError> {
        if config.n_slots == 0 || config.n_ctx == 0 || config.chunk_size == 0 {
            return Err(EngineError::Config("slots, context size and chunk size must be at least 1".into()));
        }
        let kv = model.new_kv_cache_typed(config.n_ctx, config.type_k, config.type_v)?;
        // Fails early on bad eviction options.
        CacheManager::new(config.cache.clone(), model.attention_shapes(), config.n_ctx)?;
        let drafter = match &config.draft_model {
            Some(draft) => {
                crate::decoder::speculative::check_vocab(draft, &model)
                    .map_err(|e| EngineError::Config(e.to_string()))?;
                let types = (config.type_k, config.type_v);
                Some(DraftRunner::new(draft.clone(), config.n_slots, config.n_ctx, config.chunk_size, types)?)
            }
            None => None,
        };
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
            pass_tokens: Vec::new(),
            drafter,
            draft_wanted: Vec::new(),
            cancel_epoch: 0,
            started: Instant::now(),
            gen_rate: Rate::new(Duration::from_secs(10)),
            prompt_rate: Rate::new(Duration::from_secs(10)),
            counters: MetricsSnapshot::default(),
            hooks,
            releaser: Releaser::new(Duration::from_secs(1)),
            slot_tokens: Vec::new(),
            slot_jobs: Vec::new(),
        };
        w.slot_tokens = vec![Vec::new(); w.slots.len()];
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
                self.releaser.maybe_release(Instant::now());
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
            self.refuse_queued_if_stopping();
            self.reap();
            self.assign();
            self.tick();
            self.run_slot_jobs();
            self.publish();
            self.releaser.maybe_release(Instant::now());
        }
    }

    fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.slots.iter().all(Option::is_none) && self.slot_jobs.is_empty()
    }

    fn accept(&mut self, job: Job) {
        match job {
            Job::Generate { id, req, decoder, tx, queued_at } => {
                self.queue.push_back(Queued { id, req: *req, decoder, tx, queued_at })
            }
            Job::Embed { inputs, pooling, normalize, tx } => {
                let result = self.embed(&inputs, pooling, normalize);
                // The counters are visible by the time the caller has its vectors.
                self.publish();
                let _ = tx.send(result);
            }
            Job::Slot(job) => self.accept_slot_job(job),
            Job::Rerank { query, documents, tx } => {
                let t0 = Instant::now();
                let result = self.model.rerank(&query, &documents).map_err(EngineError::from);
                tracing::debug!(n = documents.len(), ms = t0.elapsed().as_millis() as u64, "reranked");
                let _ = tx.send(result);
            }
        }
    }

    /// Embeds token sequences between ticks. In the metrics their tokens count as prompt
    /// tokens and the job as one forward pass (however many batches it took).
    fn embed(
        &mut self,
        inputs: &[Vec<u32>],
        pooling: Option<Pooling>,
        normalize: bool,
    ) -> Result<Vec<Vec<f32>>, EngineError> {
        let pooling =
            pooling.or(self.config.embed_pooling).or(self.model.default_pooling()).unwrap_or(Pooling::Mean);
        let t0 = Instant::now();
        let mut out = self.model.embed_tokens(inputs, pooling)?;
        if normalize {
            crate::model::normalize_embeddings(&mut out, pooling);
        }
        let n_tokens: usize = inputs.iter().map(Vec::len).sum();
        let elapsed = t0.elapsed();
        let c = &mut self.counters;
        c.prompt_tokens_total += n_tokens as u64;
        c.prompt_seconds_total += elapsed.as_secs_f64();
        c.forward_passes_total += 1;
        self.prompt_rate.add(Instant::now(), n_tokens as u64);
        tracing::debug!(n = out.len(), n_tokens, ms = elapsed.as_millis() as u64, "embedded");
        Ok(out)
    }

    /// Ends every request after [`super::Engine::cancel_all`].
    fn check_cancel_all(&mut self) {
        let epoch = self.state.cancel_epoch.load(Ordering::Acquire);
        if epoch == self.cancel_epoch {
            return;
        }
        self.cancel_epoch = epoch;
        while let Some(q) = self.queue.pop_front() {
            self.end_queued(q, Some(FinishReason::Cancelled));
        }
        for i in 0..self.slots.len() {
            self.finish(i, FinishReason::Cancelled);
        }
    }

    /// Once [`super::Engine::shutdown`] was called, ends every request still waiting for a slot
    /// with [`Event::Refused`] (running requests go on), so that none waits out the shutdown.
    fn refuse_queued_if_stopping(&mut self) {
        if self.queue.is_empty() || self.state.accepting.load(Ordering::Acquire) {
            return;
        }
        tracing::info!(n = self.queue.len(), "shutting down: refusing the requests still queued");
        while let Some(q) = self.queue.pop_front() {
            self.end_queued(q, None);
        }
    }

    /// Ends a request taken out of the queue before it ran: `Done` with `finish`, or (`None`)
    /// refused because the engine is shutting down. It counts as cancelled.
    fn end_queued(&mut self, q: Queued, finish: Option<FinishReason>) {
        self.state.queued.fetch_sub(1, Ordering::AcqRel);
        self.counters.requests_cancelled += 1;
        q.tx.send(match finish {
            Some(finish) => {
                let usage = Usage { prompt_tokens: q.req.prompt.len(), ..Default::default() };
                Event::Done { text: String::new(), finish, usage, stop_word: None }
            }
            None => Event::Refused(super::SubmitError::ShuttingDown),
        });
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
                self.finish(i, FinishReason::Cancelled);
            } else if a.deadline.is_some_and(|d| now >= d) {
                self.finish(i, FinishReason::Timeout);
            }
        }
        // Queued requests past their deadline.
        let mut k = 0;
        while k < self.queue.len() {
            let expired = self.queue[k].req.timeout.is_some_and(|t| now >= self.queue[k].queued_at + t);
            if expired {
                if let Some(q) = self.queue.remove(k) {
                    self.end_queued(q, Some(FinishReason::Timeout));
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
            // The first request that may run in slot `i` (llama-server's `id_slot` pins one).
            let Some(at) = self.queue.iter().position(|q| q.req.slot.is_none_or(|s| s == i)) else {
                continue;
            };
            let Some(q) = self.queue.remove(at) else { continue };
            self.state.queued.fetch_sub(1, Ordering::AcqRel);
            let seq = match self.new_sequence(i as SeqId, &q.req) {
                Ok(seq) => seq,
                Err(e) => {
                    self.fail_request(&q.tx, &e.to_string());
                    continue;
                }
            };
            let active = Active::new(q.id, i, q.req, *q.decoder, q.tx, q.queued_at, seq);
            active.report_progress();
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

    /// Slot `id`'s sequence for `req`: a copy of the longest prefix of its prompt the prefix
    /// cache holds (the prompt's last token always runs: its logits start the generation), or an
    /// empty one.
    fn new_sequence(&mut self, id: SeqId, req: &super::GenRequest) -> crate::Result<Sequence> {
        let manager =
            || CacheManager::new(self.config.cache.clone(), self.model.attention_shapes(), self.config.n_ctx);
        if !req.prompt_logprobs && !req.fresh_prompt && self.config.prefix_cache_bytes > 0 {
            self.counters.prefix_cache_lookups += 1;
            if let Some((cached, n)) = self.prefix.lookup(&req.prompt) {
                let n = n.min(req.prompt.len() - 1);
                if n > 0
                    && let Ok(seq) =
                        Sequence::from_prefix(&mut self.kv, id, manager()?, cached, &req.prompt[..n])
                {
                    self.counters.prefix_cache_hits += 1;
                    return Ok(seq);
                }
            }
        }
        Ok(Sequence::new(&mut self.kv, id, manager()?))
    }
}

impl Worker {
    /// Builds one batch by the strategy, runs it, and samples for every slot that got logits.
    fn tick(&mut self) {
        let t_plan = Instant::now();
        let plan = self.plan();
        let plan_time = t_plan.elapsed();
        self.batch.clear();
        self.outs.clear();
        let t0 = Instant::now();
        self.draft(&plan.decode);
        for &i in &plan.decode {
            self.stage_decode(i);
        }
        let mut n_prompt = 0usize;
        for &(i, n) in &plan.prefill {
            n_prompt += self.stage_prefill(i, n);
        }
        if self.batch.is_empty() {
            return;
        }
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
        self.counters.busy_slots_per_pass_total += self.slots.iter().filter(|s| s.is_some()).count() as u64;
        let now = Instant::now();
        self.prompt_rate.add(now, n_prompt as u64);
        for &(i, _) in &plan.prefill {
            if let Some(a) = self.slots[i].as_ref() {
                a.report_progress();
            }
        }
        // The tokens are counted as they are sampled: a request's end is sent after that.
        let n_gen = self.sample_outputs();
        self.gen_rate.add(now, n_gen);
        tracing::trace!(
            n = self.batch.len(),
            n_prompt,
            n_gen,
            ms = now.duration_since(t0).as_secs_f64() * 1e3,
            "tick"
        );
        if let Some(on_tick) = self.hooks.on_tick.as_mut() {
            on_tick(&TickReport {
                batch_tokens: self.batch.len(),
                prompt_tokens: n_prompt,
                generated_tokens: n_gen,
                busy_slots: self.slots.iter().filter(|s| s.is_some()).count(),
                queue_depth: self.queue.len(),
                plan_time,
                run_time: t0.elapsed(),
            });
        }
    }

    /// This tick's plan: the custom strategy's when it gives a valid one, else the built-in one.
    fn plan(&mut self) -> super::Plan {
        let demands = self.demands();
        let budget = self.config.chunk_size;
        if let Some(custom) = self.hooks.strategy.as_mut() {
            match custom.plan(&demands, budget) {
                Some(plan) if plan.is_valid(&demands, budget) => return plan,
                Some(plan) => {
                    tracing::warn!(?plan, "invalid plan from the custom strategy; using the built-in one")
                }
                None => {}
            }
        }
        plan_tick(self.config.strategy, budget, &demands)
    }

    /// What each busy slot wants from this tick.
    fn demands(&self) -> Vec<Demand> {
        let chunk = self.config.chunk_size;
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, a)| {
                let a = a.as_ref()?;
                let done = a.seq.len();
                // A pass never crosses a canonical chunk boundary (see `canonical_chunk`).
                let chunk_left = canonical_chunk(done, a.prompt.len(), chunk).end - done;
                Some(Demand {
                    slot: i,
                    decode: a.prompt_left() == 0 && a.pending.is_some(),
                    prompt_left: a.prompt_left().min(chunk_left),
                    max_chunk: a.seq.max_chunk(true),
                    order: a.id,
                })
            })
            .collect()
    }

    /// The drafts of this tick's decode slots that speculate: prompt lookup's at once, the
    /// draft model's in batched passes of the draft model.
    fn draft(&mut self, decode: &[usize]) {
        self.draft_wanted.clear();
        for &i in decode {
            let Some(a) = self.slots[i].as_mut() else { continue };
            let Some(tok) = a.pending else { continue };
            if let Some((max, settings)) = a.draft(tok, &self.kv) {
                self.draft_wanted.push((i, max, settings));
            }
        }
        if let Some(runner) = self.drafter.as_mut()
            && !self.draft_wanted.is_empty()
        {
            runner.draft(&mut self.slots, &self.draft_wanted);
        }
    }

    /// Puts slot `i`'s sampled token into the batch, with its drafted tokens when it
    /// speculates (its context full: the request ends).
    fn stage_decode(&mut self, i: usize) {
        let Some(a) = self.slots[i].as_mut() else { return };
        let Some(tok) = a.pending else { return };
        let base = a.seq.len();
        let mut pass = std::mem::take(&mut self.pass_tokens);
        pass.clear();
        pass.push(tok);
        pass.extend_from_slice(&a.drafts);
        let outputs = if a.drafts.is_empty() { Outputs::Last } else { Outputs::All };
        let fed = a.seq.feed(&mut self.kv, &mut self.batch, &pass, false, outputs);
        self.pass_tokens = pass;
        if fed.is_err() {
            self.finish(i, FinishReason::ContextFull);
            return;
        }
        a.pending = None;
        a.pass.start(base, &a.drafts);
        self.outs.push(Out::Sample { slot: i, last_prompt: None });
        self.outs.extend((1..=a.drafts.len()).map(|row| Out::Draft { slot: i, row }));
    }

    /// Puts the next `n` prompt tokens of slot `i` into the batch; returns how many went in.
    fn stage_prefill(&mut self, i: usize, n: usize) -> usize {
        let Some(a) = self.slots[i].as_mut() else { return 0 };
        let start = a.seq.len();
        let end = start + n;
        let outputs = if a.prompt_logprobs {
            Outputs::All
        } else if end == a.prompt.len() {
            Outputs::Last
        } else {
            Outputs::None
        };
        if let Err(e) = a.seq.feed(&mut self.kv, &mut self.batch, &a.prompt[start..end], true, outputs) {
            let msg = e.to_string();
            self.fail_slot(i, &msg);
            return 0;
        }
        // Attend these tokens as their whole canonical chunk would be: the same results
        // whether the chunk's start was cached or shared a tick with other prompts.
        let canon = canonical_chunk(start, a.prompt.len(), self.config.chunk_size);
        self.batch.set_prompt_chunk(a.seq.id(), canon.len() as u32);
        for at in start..end {
            if at + 1 == a.prompt.len() {
                self.outs.push(Out::Sample { slot: i, last_prompt: Some(at) });
            } else if a.prompt_logprobs {
                self.outs.push(Out::Prompt { slot: i, at });
            }
        }
        n
    }

    /// Hands each output row of the last pass to its slot; returns the tokens generated.
    fn sample_outputs(&mut self) -> u64 {
        let mut n_gen = 0u64;
        let outs = std::mem::take(&mut self.outs);
        for (r, out) in outs.iter().enumerate() {
            let row = self.logits.row(r);
            let (slot, last_prompt) = match *out {
                Out::Prompt { slot, at } => {
                    if let Some(a) = self.slots[slot].as_mut() {
                        a.prompt_logits(at, row);
                    }
                    continue;
                }
                Out::Sample { slot, last_prompt } => (slot, last_prompt),
                Out::Draft { slot, row: n } => {
                    // Void once the pass ended before this draft.
                    if !self.slots[slot].as_ref().is_some_and(|a| a.pass.is_open() && a.pass.row() == n) {
                        continue;
                    }
                    (slot, None)
                }
            };
            let Some(a) = self.slots[slot].as_mut() else { continue };
            if let Some(at) = last_prompt {
                if a.prompt_logprobs {
                    a.prompt_logits(at, row);
                }
                a.seq.end_prompt(&mut self.kv);
                a.prompt_done();
            }
            let sampled = a.sample(self.model.tokenizer(), row, &mut self.kv);
            if sampled.is_ok() {
                n_gen += 1;
                self.counters.generated_tokens_total += 1;
            }
            match sampled {
                Ok(None) => {}
                Ok(Some(finish)) => self.finish(slot, finish),
                Err(e) => {
                    let msg = format!("sampling failed: {e}");
                    self.fail_slot(slot, &msg);
                }
            }
        }
        self.outs = outs;
        n_gen
    }

    /// Ends slot `i`'s request (if any): keeps its KV in the prefix cache, frees the slot and
    /// sends its end after publishing the counters, so that a client that has its answer sees
    /// it in `/metrics`.
    fn finish(&mut self, i: usize, finish: FinishReason) {
        let Some(mut a) = self.slots[i].take() else { return };
        let (usage, done) = a.finish(finish);
        let c = &mut self.counters;
        c.prompt_seconds_total += usage.prompt_ms / 1e3;
        c.generation_seconds_total += usage.decode_ms / 1e3;
        c.draft_tokens_total += usage.draft_tokens as u64;
        c.draft_accepted_total += usage.draft_accepted as u64;
        c.draft_passes_total += usage.draft_passes as u64;
        c.request_tokens_max =
            c.request_tokens_max.max((usage.prompt_tokens + usage.completion_tokens) as u64);
        if finish.is_natural() {
            self.counters.requests_finished += 1;
        } else {
            self.counters.requests_cancelled += 1;
        }
        tracing::debug!(
            slot = i,
            request = a.id,
            finish = finish.as_str(),
            n_prompt = usage.prompt_tokens,
            n_cached = usage.cached_tokens,
            n_gen = usage.completion_tokens,
            "request done"
        );
        self.release(a.seq);
        self.publish();
        a.tx.send(done);
    }

    /// Ends slot `i`'s request with an error.
    fn fail_slot(&mut self, i: usize, msg: &str) {
        let Some(a) = self.slots[i].take() else { return };
        self.fail_request(&a.tx, msg);
        // Its cache may be inconsistent with its tokens: do not keep it.
        self.kv.insert_seq(i as SeqId, self.kv.new_seq());
        self.state.running.fetch_sub(1, Ordering::AcqRel);
    }

    fn fail_request(&mut self, tx: &EventSender, msg: &str) {
        self.counters.requests_failed += 1;
        tracing::warn!(error = msg, "request failed");
        tx.send(Event::Error(msg.to_string()));
    }

    /// Moves a finished sequence's cache into the prefix cache (the part no eviction touched)
    /// and leaves its slot an empty one.
    fn release(&mut self, seq: Sequence) {
        let slot = seq.id() as usize;
        let (old, tokens) = seq.take_cache(&mut self.kv);
        self.slot_tokens[slot].clear();
        if let Some(mut old) = old
            && self.config.prefix_cache_bytes > 0
        {
            let valid = old.contiguous_prefix().min(tokens.len()).min(old.len());
            if valid > 0 {
                old.truncate(valid);
                old.shrink_to_fit();
                // Keys and values, and a recurrent state (Qwen 3.5) if the conversation has one.
                let bytes =
                    valid * self.kv.bytes_per_token() + old.recurrent().map_or(0, RecurrentState::bytes);
                self.prefix.insert(tokens[..valid].to_vec(), old, bytes);
                if self.prefix.peek_len(&tokens[..valid]) == valid {
                    self.slot_tokens[slot] = tokens[..valid].to_vec();
                }
            }
        }
        // The slot's buffers were shrunk or dropped, and the insert may have evicted entries.
        self.releaser.freed();
        self.state.running.fetch_sub(1, Ordering::AcqRel);
    }

    /// Publishes the counters and slot rows for the handles.
    fn publish(&mut self) {
        let now = Instant::now();
        let mut m = self.counters.clone();
        m.requests_total = self.state.next_id.load(Ordering::Acquire);
        m.requests_rejected = self.state.rejected.load(Ordering::Acquire);
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
        m.kv_capacity_bytes = m.kv_capacity_tokens * self.kv.bytes_per_token();
        m.prefix_cache_entries = self.prefix.len();
        m.prefix_cache_tokens = self.prefix.tokens();
        m.prefix_cache_bytes = self.prefix.bytes();
        m.prefix_cache_budget_bytes = self.prefix.budget();
        m.uptime_seconds = now.duration_since(self.started).as_secs_f64();
        let slots = self
            .slots
            .iter()
            .enumerate()
            .map(|(i, a)| match a {
                Some(a) => a.info(i, per_slot[i]),
                None => SlotInfo::idle(i, per_slot[i]),
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
