//! The engine's draft model: drafts for the slots whose requests speculate with it
//! ([`GenRequest::draft`](super::GenRequest::draft)), batched across slots.
//!
//! The runner keeps one [`Sequence`] per slot (same id) in the draft model's own [`KvCache`].
//! Invariants:
//! - before a slot drafts, its draft sequence is cut back to the longest common prefix of its
//!   tokens and the slot's draft context (the slot's tokens and its pending one), at most all
//!   but the context's last token, whose logits start the draft; the rest of the context is then
//!   fed. So a request that goes on reuses every token it verified, drafts the target rejected
//!   are dropped, and a new request in the slot reuses what it shares with the last one.
//! - a round is one forward pass of the draft model: slots still catching up feed context
//!   tokens, every drafting slot feeds its last draft. One tick feeds at most the engine's chunk
//!   size of context tokens, all slots and rounds together: a slot that is still behind after
//!   that (a long prompt) decodes plainly this tick and catches up over the next ones, so the
//!   draft model never stalls a tick for long. A slot drafts greedily while the draft model is
//!   confident ([`confident_pick`], `p_min`), up to its `max`; a draft shorter than `min_draft`
//!   is dropped (plain decode step).
//! - drafting never fails a request: a draft-model error only costs that tick its drafts (the
//!   sequences it touched are emptied, to be fed again).
//!
//! The drafts only choose what the target verifies: the output is the target's whatever they
//! are (see `decoder::speculative`).

use std::sync::Arc;

use super::DraftSettings;
use super::slot::Active;
use crate::batch::{Batch, Logits};
use crate::decoder::speculative::confident_pick;
use crate::kv::{CacheManager, CacheOptions, KvCache, KvType, SeqId};
use crate::model::Model;
use crate::sequence::{Outputs, Sequence};

/// One slot's draft in progress.
#[derive(Clone, Copy, Debug)]
struct Job {
    slot: usize,
    /// Most tokens to draft.
    max: usize,
    settings: DraftSettings,
    done: bool,
}

/// The draft model with one sequence per slot.
pub(crate) struct DraftRunner {
    model: Arc<Model>,
    kv: KvCache,
    seqs: Vec<Sequence>,
    /// Most context tokens one tick feeds, all slots together.
    chunk: usize,
    /// Context tokens this tick may still feed.
    budget: usize,
    batch: Batch,
    logits: Logits,
    jobs: Vec<Job>,
    /// The job of each output row of the round's pass.
    rows: Vec<usize>,
}

impl DraftRunner {
    /// The runner of `model` for `n_slots` slots of `n_ctx` tokens.
    pub(crate) fn new(
        model: Arc<Model>,
        n_slots: usize,
        n_ctx: usize,
        chunk: usize,
        types: (KvType, KvType),
    ) -> crate::Result<Self> {
        let mut kv = model.new_kv_cache_typed(n_ctx, types.0, types.1)?;
        let mut seqs = Vec::with_capacity(n_slots);
        for i in 0..n_slots {
            let manager = CacheManager::new(CacheOptions::default(), model.attention_shapes(), n_ctx)?;
            seqs.push(Sequence::new(&mut kv, i as SeqId, manager));
        }
        let (batch, logits) = (Batch::new(), Logits::default());
        let chunk = chunk.max(1);
        Ok(Self { model, kv, seqs, chunk, budget: chunk, batch, logits, jobs: Vec::new(), rows: Vec::new() })
    }

    /// Drafts for each `(slot, max, settings)` of `wanted` into the slot's
    /// [`Active::drafts`], after its [`Active::draft_context`].
    pub(crate) fn draft(&mut self, slots: &mut [Option<Active>], wanted: &[(usize, usize, DraftSettings)]) {
        self.jobs.clear();
        self.budget = self.chunk;
        for &(slot, max, settings) in wanted {
            let Some(a) = slots.get(slot).and_then(Option::as_ref) else { continue };
            let context = a.draft_context();
            let seq = &mut self.seqs[slot];
            let common = seq.tokens().iter().zip(context).take_while(|(x, y)| x == y).count();
            seq.truncate(&mut self.kv, common.min(context.len().saturating_sub(1)));
            let done = max == 0 || context.is_empty();
            self.jobs.push(Job { slot, max, settings, done });
        }
        while self.stage_round(slots) {
            if let Err(e) = self.model.forward_into(&self.batch, &mut self.kv, &mut self.logits) {
                tracing::warn!(error = %e, "the draft model's forward pass failed; no drafts this tick");
                self.abandon_round();
                break;
            }
            self.take_round(slots);
        }
        for job in &self.jobs {
            if let Some(a) = slots[job.slot].as_mut()
                && a.drafts.len() < job.settings.min_draft
            {
                a.drafts.clear();
            }
        }
    }

    /// Puts every unfinished job's next tokens into the batch; whether there are any.
    fn stage_round(&mut self, slots: &[Option<Active>]) -> bool {
        self.batch.clear();
        self.rows.clear();
        for (j, job) in self.jobs.iter_mut().enumerate() {
            if job.done {
                continue;
            }
            let Some(a) = slots[job.slot].as_ref() else {
                job.done = true;
                continue;
            };
            let context = a.draft_context();
            let seq = &mut self.seqs[job.slot];
            let fed = seq.len();
            let (tokens, outputs) = if fed < context.len() {
                // Catching up with the context; behind after this tick's budget: no draft now.
                let n = (context.len() - fed).min(self.budget);
                if n == 0 {
                    job.done = true;
                    continue;
                }
                self.budget -= n;
                let last = fed + n == context.len();
                (&context[fed..fed + n], if last { Outputs::Last } else { Outputs::None })
            } else {
                match a.drafts.last() {
                    Some(t) => (std::slice::from_ref(t), Outputs::Last),
                    None => {
                        job.done = true;
                        continue;
                    }
                }
            };
            if seq.feed(&mut self.kv, &mut self.batch, tokens, false, outputs).is_err() {
                job.done = true;
                continue;
            }
            if outputs == Outputs::Last {
                self.rows.push(j);
            }
        }
        !self.batch.is_empty()
    }

    /// Each output row drafts one token for its job, if the draft model is confident.
    fn take_round(&mut self, slots: &mut [Option<Active>]) {
        for (r, &j) in self.rows.iter().enumerate() {
            let job = &mut self.jobs[j];
            let Some(a) = slots[job.slot].as_mut() else {
                job.done = true;
                continue;
            };
            match confident_pick(self.logits.row(r), job.settings.p_min) {
                Some(t) => {
                    a.drafts.push(t);
                    job.done = a.drafts.len() >= job.max;
                }
                None => job.done = true,
            }
        }
    }

    /// After a failed pass: the sequences in it hold tokens whose keys and values may not be
    /// cached; they start over next time, and drafting stops for this tick.
    fn abandon_round(&mut self) {
        let seqs: Vec<SeqId> = self.batch.entries().iter().map(|e| e.seq).collect();
        for id in seqs {
            self.seqs[id as usize].clear(&mut self.kv);
        }
        for job in &mut self.jobs {
            job.done = true;
        }
    }
}
