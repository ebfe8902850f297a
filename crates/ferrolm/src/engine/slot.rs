//! One running request: its [`Sequence`] in the engine's cache, its [`Decoder`], its prompt
//! progress and the events it sends.

use std::time::Instant;

use super::{DraftSettings, Event, EventSender, GenRequest, PromptLookup, SlotInfo, SlotState, Usage};
use crate::decoder::speculative::{Pass, Verdict, lookup_draft};
use crate::decoder::{Decoder, FinishReason, Step, TokenLogprob, token_logprob};
use crate::kv::KvCache;
use crate::sequence::Sequence;
use crate::tokenizer::Tokenizer;

/// A request taken by a slot.
pub(crate) struct Active {
    /// The engine's id of the request.
    pub(crate) id: u64,
    /// The slot it runs in.
    pub(crate) slot: usize,
    pub(crate) tx: EventSender,
    pub(crate) prompt: Vec<u32>,
    /// The slot's sequence: the prompt so far, then generated tokens.
    pub(crate) seq: Sequence,
    /// Prompt tokens whose KV came from the prefix cache.
    pub(crate) n_cached: usize,
    /// The per-token step.
    decoder: Decoder,
    pub(crate) prompt_logprobs: bool,
    /// Whether it asked for [`Event::Progress`].
    progress: bool,
    /// Log-probabilities of the prompt tokens so far (the first has none). `[n_prompt]`
    prompt_lp: Vec<Option<TokenLogprob>>,
    /// A sampled token not yet run through the model.
    pub(crate) pending: Option<u32>,
    pub(crate) deadline: Option<Instant>,
    /// Speculative decoding by prompt lookup, when asked for.
    lookup: Option<PromptLookup>,
    /// Speculative decoding with the engine's draft model, when asked for.
    draft: Option<DraftSettings>,
    /// The verification pass of the last decode step, if it drafted.
    pub(crate) pass: Pass,
    /// The drafts of the next pass (scratch). `[max_draft]`
    pub(crate) drafts: Vec<u32>,
    /// The context drafted from: the sequence's tokens and the pending one (scratch, reused).
    context: Vec<u32>,
    queued_at: Instant,
    started_at: Instant,
    first_token_at: Option<Instant>,
}

impl Active {
    /// A request taking a slot whose sequence is `seq` (empty, or holding a cached prefix of
    /// the prompt).
    pub(crate) fn new(
        id: u64,
        slot: usize,
        req: GenRequest,
        decoder: Decoder,
        tx: EventSender,
        queued_at: Instant,
        seq: Sequence,
    ) -> Self {
        let deadline = req.timeout.map(|t| queued_at + t);
        Self {
            id,
            slot,
            tx,
            n_cached: seq.len(),
            prompt: req.prompt,
            seq,
            decoder,
            prompt_logprobs: req.prompt_logprobs,
            progress: req.progress,
            prompt_lp: Vec::new(),
            pending: None,
            deadline,
            lookup: req.lookup,
            draft: req.draft,
            pass: Pass::default(),
            drafts: Vec::new(),
            context: Vec::new(),
            queued_at,
            started_at: Instant::now(),
            first_token_at: None,
        }
    }

    /// Prompt tokens not yet run through the model.
    pub(crate) fn prompt_left(&self) -> usize {
        self.prompt.len().saturating_sub(self.seq.len())
    }

    /// Sends an [`Event::Progress`] when the request asked for them.
    pub(crate) fn report_progress(&self) {
        if !self.progress {
            return;
        }
        let mut usage = self.usage();
        if self.seq.len() <= self.n_cached {
            // Nothing has run yet: no prompt time.
            usage.prompt_ms = 0.0;
        }
        let processed = self.seq.len().min(self.prompt.len());
        self.tx.send(Event::Progress { processed, usage });
    }

    /// Whether the request still wants a response.
    pub(crate) fn is_abandoned(&self) -> bool {
        self.tx.is_closed()
    }

    /// Feeds the logits after prompt token `at` (an index into the prompt) when the request asked
    /// for the prompt's log-probabilities: they score token `at + 1`.
    pub(crate) fn prompt_logits(&mut self, at: usize, logits: &[f32]) {
        if self.prompt_lp.is_empty() {
            self.prompt_lp.push(None);
        }
        if let Some(&next) = self.prompt.get(at + 1) {
            let k = self.decoder.logprobs().unwrap_or(0);
            self.prompt_lp.push(Some(token_logprob(logits, next, k)));
        }
    }

    /// The prompt is in: the decoder sees it, and the prompt log-probabilities go out.
    pub(crate) fn prompt_done(&mut self) {
        self.decoder.accept_prompt(&self.prompt);
        if self.prompt_logprobs {
            if self.prompt_lp.is_empty() {
                self.prompt_lp.push(None);
            }
            self.tx.send(Event::PromptLogprobs(std::mem::take(&mut self.prompt_lp)));
        }
    }

    /// Prepares the drafts of a verification pass to run after `next` ([`Active::drafts`]):
    /// none without speculation, on an evicting cache, or without room for one. Prompt lookup
    /// drafts here; for the draft model it returns the most tokens to draft and the settings,
    /// and the draft runner fills [`Active::drafts`] from [`Active::draft_context`].
    pub(crate) fn draft(&mut self, next: u32, kv: &KvCache) -> Option<(usize, DraftSettings)> {
        self.drafts.clear();
        if self.lookup.is_none() && self.draft.is_none() {
            return None;
        }
        let m = self.seq.manager();
        let room = m.limit().saturating_sub(self.seq.kv_len(kv) + 1);
        if m.evicts() || room == 0 {
            return None;
        }
        self.context.clear();
        self.context.extend_from_slice(self.seq.tokens());
        self.context.push(next);
        if let Some(l) = self.lookup {
            lookup_draft(&self.context, l.max_ngram, l.max_draft.min(room), &mut self.drafts);
        }
        self.draft.map(|d| (d.max_draft.min(room), d))
    }

    /// What the draft model drafts after: the sequence's tokens and the pending one (set by
    /// [`Active::draft`]).
    pub(crate) fn draft_context(&self) -> &[u32] {
        &self.context
    }

    /// Lets the decoder pick the next token from `logits` and sends it; returns why the
    /// generation ended, if it did (the caller then calls [`Active::finish`]). Inside a
    /// verification pass, a sampled token that is the next draft is kept (nothing pending),
    /// and otherwise the pass ends and the sequence is cut back after the row's token.
    pub(crate) fn sample(
        &mut self,
        tokenizer: &Tokenizer,
        logits: &[f32],
        kv: &mut KvCache,
    ) -> crate::Result<Option<FinishReason>> {
        let step = self.decoder.step(tokenizer, logits)?;
        self.first_token_at.get_or_insert_with(Instant::now);
        let (shown, finish) = match step {
            Step::Continue(s) => (Some(s), None),
            Step::Last(s, reason) => (Some(s), Some(reason)),
            Step::End(reason) => (None, Some(reason)),
        };
        // The token the generation goes on from (none when it ended here).
        let next = shown.as_ref().filter(|_| finish.is_none()).map(|s| s.id);
        if let Some(s) = shown {
            self.report_progress();
            self.tx.send(Event::Token { id: s.id, text: s.text, logprob: s.logprob });
        }
        self.pending = next;
        match self.pass.verify(next) {
            Verdict::Kept => self.pending = None,
            Verdict::End { cached } => self.seq.truncate(kv, cached),
            Verdict::Plain => {}
        }
        Ok(finish)
    }

    /// Ends the request: the counts, and its last event (the held-back text, none after a stop
    /// string, the reason and the counts) for the caller to send once its counters include this
    /// request. Prompt logprobs scored before a cancel are sent here.
    pub(crate) fn finish(&mut self, finish: FinishReason) -> (Usage, Event) {
        let text = self.decoder.finish();
        let usage = self.usage();
        if self.prompt_logprobs && !self.prompt_lp.is_empty() {
            // Cancelled before the prompt was in: send what was scored.
            self.tx.send(Event::PromptLogprobs(std::mem::take(&mut self.prompt_lp)));
        }
        let stop_word = self.decoder.stop_word().map(str::to_owned);
        (usage, Event::Done { text, finish, usage, stop_word })
    }

    /// Counts and timings so far.
    pub(crate) fn usage(&self) -> Usage {
        let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1e3;
        let now = Instant::now();
        let first = self.first_token_at.unwrap_or(now);
        Usage {
            prompt_tokens: self.prompt.len(),
            cached_tokens: self.n_cached,
            completion_tokens: self.decoder.n_generated(),
            queue_ms: ms(self.queued_at, self.started_at),
            prompt_ms: ms(self.started_at, first),
            decode_ms: if self.first_token_at.is_some() { ms(first, now) } else { 0.0 },
            draft_tokens: self.pass.n_drafted(),
            draft_accepted: self.pass.n_kept(),
            draft_passes: self.pass.n_passes(),
            slot: Some(self.slot),
        }
    }

    /// The slot's row in `/slots`.
    pub(crate) fn info(&self, slot: usize, n_kv: usize) -> SlotInfo {
        let prefilling = self.prompt_left() > 0;
        SlotInfo {
            id: slot,
            state: if prefilling { SlotState::Prefill } else { SlotState::Generating },
            request_id: self.id,
            n_prompt: self.prompt.len(),
            n_cached: self.n_cached,
            n_prompt_done: self.seq.len().min(self.prompt.len()),
            n_generated: self.decoder.n_generated(),
            n_kv,
        }
    }
}
