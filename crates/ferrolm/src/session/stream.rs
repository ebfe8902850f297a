//! [`TokenStream`]: a generation as an iterator of [`StreamEvent`]s.

use std::time::{Duration, Instant};

use super::generation::{Completion, GenerationStats};
use super::{PrefillStats, Session};
use crate::Result;
use crate::decoder::speculative::{Pass, Verdict};
use crate::decoder::{Decoder, FinishReason, GenerateParams, Step, TokenLogprob};

/// One step of a streamed generation.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent {
    /// A sampled token and the text it completes. The text may be empty (part of a UTF-8
    /// character, or text held back because it may be the start of a stop string).
    Token {
        /// The token id.
        id: u32,
        /// Text that is now final.
        text: String,
    },
    /// The generation ended; no events follow.
    Finished {
        /// Text held back until now (empty when nothing was pending).
        text: String,
        /// Why it ended.
        reason: FinishReason,
        /// Counts and timings.
        stats: GenerationStats,
    },
}

/// A logits processor of a [`TokenStream`]: called before each token is sampled with the tokens
/// of the context (prompt and generated so far) and a copy of the logits after them, which it may
/// change. See [`crate::decoder::Decoder::step_with`].
pub type LogitsProcessor = Box<dyn FnMut(&[u32], &mut [f32]) -> Result<()> + Send + Sync>;

/// A running generation. Each call to `next` samples one token (after running the previous one
/// through the model). Dropping the stream stops the generation; the session keeps every token
/// that was run through the model and is ready for the next call.
pub struct TokenStream<'s, 'm> {
    session: &'s mut Session<'m>,
    /// The per-token step.
    decoder: Decoder,
    prefill: PrefillStats,
    /// A sampled token not yet run through the model.
    pending: Option<u32>,
    /// The reason to report on the next call (the stream ends after it).
    finish: Option<FinishReason>,
    done: bool,
    n_decode: usize,
    decode_time: Duration,
    /// Changes the logits before each token is sampled.
    processor: Option<LogitsProcessor>,
    /// The log-probability of the last token, when asked for ([`TokenStream::set_logprobs`]).
    last_logprob: Option<TokenLogprob>,
    /// The speculative verification pass being consumed, if any.
    verify: Verify,
}

/// A verification pass over `[pending, drafts..]`, consumed one row per step while the sampled
/// tokens equal the drafts (see `decoder::speculative`). Its logits rows stay in the session's
/// forward output until the pass ends (nothing else runs on the session meanwhile).
#[derive(Default)]
struct Verify {
    pass: Pass,
    /// The drafts, then the pass's tokens (scratch, reused).
    drafts: Vec<u32>,
    tokens: Vec<u32>,
}

impl std::fmt::Debug for TokenStream<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenStream")
            .field("n_generated", &self.decoder.n_generated())
            .finish_non_exhaustive()
    }
}

impl<'s, 'm> TokenStream<'s, 'm> {
    /// Prefills `prompt` and prepares sampling.
    pub(super) fn start(
        session: &'s mut Session<'m>,
        prompt: &[u32],
        params: &GenerateParams,
    ) -> Result<Self> {
        session.cancel.clear();
        let mut decoder = Decoder::new(session.model, params)?;
        let prefill = session.prefill(prompt)?;
        decoder.accept_prompt(prompt);
        Ok(Self {
            session,
            decoder,
            prefill,
            pending: None,
            finish: prefill.cancelled.then_some(FinishReason::Cancelled),
            done: false,
            n_decode: 0,
            decode_time: Duration::ZERO,
            processor: None,
            last_logprob: None,
            verify: Verify::default(),
        })
    }

    /// Tokens sampled so far.
    pub fn n_generated(&self) -> usize {
        self.decoder.n_generated()
    }

    /// Sets a logits processor for the following tokens (`None` removes it).
    pub fn set_logits_processor(&mut self, processor: Option<LogitsProcessor>) {
        self.processor = processor;
    }

    /// Reports each following token's log-probability and its `k` most likely alternatives
    /// ([`TokenStream::last_logprob`]); `None` stops it.
    pub fn set_logprobs(&mut self, k: Option<usize>) {
        self.decoder.set_logprobs(k);
    }

    /// The log-probability of the token of the last [`StreamEvent::Token`], when asked for.
    pub fn last_logprob(&self) -> Option<&TokenLogprob> {
        self.last_logprob.as_ref()
    }

    /// The tokens run through the model so far (prompt and generated tokens, not yet the token
    /// of the last [`StreamEvent::Token`]).
    pub fn context(&self) -> &[u32] {
        self.session.tokens()
    }

    /// The logits from which the token of the last [`StreamEvent::Token`] was sampled (the
    /// model's, before any processor). `[n_vocab]`
    pub fn logits(&self) -> &[f32] {
        &self.session.logits
    }

    /// Ends the generation after the token of the last [`StreamEvent::Token`] (which is not run
    /// through the model): the next call returns [`StreamEvent::Finished`] with `reason` and the
    /// text held back so far. For a caller's own stopping criteria.
    pub fn finish_after_token(&mut self, reason: FinishReason) {
        if !self.done {
            if self.pending.take().is_none() && self.verify.pass.unkeep() {
                // The token was a kept draft, already in the cache: take it out again.
                self.n_decode -= 1;
                self.load_pass_row();
            }
            self.end_verify();
            self.finish = Some(reason);
        }
    }

    /// Tokens cached in the session's KV cache and the bytes they take.
    pub fn session_kv(&self) -> (usize, usize) {
        (self.session.kv_len(), self.session.kv_memory_bytes())
    }

    /// What the prompt cost (cached and prefilled tokens).
    pub fn prefill_stats(&self) -> PrefillStats {
        self.prefill
    }

    /// Runs the generation to its end and gathers the text, the tokens and the statistics (what
    /// [`Session::generate_tokens`] returns, for a caller that looked at the stream first).
    pub fn into_completion(mut self) -> Result<Completion> {
        collect(&mut self)
    }

    fn stats(&self, finish: FinishReason) -> GenerationStats {
        GenerationStats {
            n_prompt: self.prefill.n_prompt,
            n_cached: self.prefill.n_cached,
            n_prefilled: self.prefill.n_prefilled,
            prompt_time: self.prefill.time,
            n_generated: self.decoder.n_generated(),
            n_decode: self.n_decode,
            decode_time: self.decode_time,
            n_kv: self.session.kv_len(),
            kv_bytes: self.session.kv_memory_bytes(),
            evictions: self.session.eviction_stats(),
            n_drafted: self.verify.pass.n_drafted(),
            n_draft_accepted: self.verify.pass.n_kept(),
            finish,
        }
    }

    fn finished(&mut self, reason: FinishReason) -> StreamEvent {
        self.done = true;
        self.end_verify();
        let text = self.decoder.finish();
        StreamEvent::Finished { text, reason, stats: self.stats(reason) }
    }

    /// One step: run the pending token, then let the decoder pick the next.
    fn step(&mut self) -> Result<StreamEvent> {
        if let Some(reason) = self.finish {
            return Ok(self.finished(reason));
        }
        if self.session.cancel.is_cancelled() {
            return Ok(self.finished(FinishReason::Cancelled));
        }
        let t0 = Instant::now();
        if let Some(tok) = self.pending.take() {
            if self.session.is_full() {
                return Ok(self.finished(FinishReason::ContextFull));
            }
            self.run_pending(tok)?;
        }
        let tokenizer = self.session.model.tokenizer();
        let step = match &mut self.processor {
            Some(p) => {
                let context = self.session.tokens();
                self.decoder.step_with(tokenizer, &self.session.logits, &mut |l| p(context, l))?
            }
            None => self.decoder.step(tokenizer, &self.session.logits)?,
        };
        let sampled = match step {
            Step::End(reason) => {
                self.end_verify();
                self.decode_time += t0.elapsed();
                return Ok(self.finished(reason));
            }
            Step::Last(sampled, reason) => {
                self.end_verify();
                self.finish = Some(reason);
                sampled
            }
            Step::Continue(sampled) => {
                if !self.keep_draft(sampled.id) {
                    self.pending = Some(sampled.id);
                }
                sampled
            }
        };
        self.decode_time += t0.elapsed();
        self.last_logprob = sampled.logprob;
        Ok(StreamEvent::Token { id: sampled.id, text: sampled.text })
    }
}

impl TokenStream<'_, '_> {
    /// Runs the pending token through the model: alone, or with a draft in one verification
    /// pass (then the session's logits are those after `tok`, and the pass's other rows wait).
    fn run_pending(&mut self, tok: u32) -> Result<()> {
        let v = &mut self.verify;
        if self.processor.is_none() {
            self.session.draft(tok, &mut v.drafts)?;
        } else {
            // A processor sees the context, which a pass would run ahead of the samples.
            v.drafts.clear();
        }
        self.n_decode += 1;
        if v.drafts.is_empty() {
            return self.session.run(&[tok], false);
        }
        v.tokens.clear();
        v.tokens.push(tok);
        v.tokens.extend_from_slice(&v.drafts);
        let base = self.session.seq.len();
        self.session.run_pass(&v.tokens)?;
        v.pass.start(base, &v.drafts);
        self.load_pass_row();
        Ok(())
    }

    /// Makes the logits of the pass's current row the session's (those the next step samples).
    fn load_pass_row(&mut self) {
        let s = &mut *self.session;
        s.logits.clear();
        s.logits.extend_from_slice(s.out.row(self.verify.pass.row()));
    }

    /// After a step sampled `tok` and the generation goes on: if `tok` is the pass's next
    /// draft, it is already in the cache — move to its row and return true. Otherwise end the
    /// pass (the cache is cut back after the row's token) and return false.
    fn keep_draft(&mut self, tok: u32) -> bool {
        match self.verify.pass.verify(Some(tok)) {
            Verdict::Kept => {
                self.n_decode += 1;
                self.load_pass_row();
                true
            }
            Verdict::End { cached } => {
                self.session.rewind(cached);
                false
            }
            Verdict::Plain => false,
        }
    }

    /// Ends a verification pass, if one is in progress: the cache keeps the tokens up to the
    /// one whose logits the last step used (the session's logits are those).
    fn end_verify(&mut self) {
        if let Verdict::End { cached } = self.verify.pass.close() {
            self.session.rewind(cached);
        }
    }
}

/// Runs a stream of events to its end and gathers the text, the tokens and the statistics.
pub(super) fn collect(events: &mut dyn Iterator<Item = Result<StreamEvent>>) -> Result<Completion> {
    let (mut text, mut tokens) = (String::new(), Vec::new());
    for event in events {
        match event? {
            StreamEvent::Token { id, text: piece } => {
                tokens.push(id);
                text.push_str(&piece);
            }
            StreamEvent::Finished { text: tail, stats, .. } => {
                text.push_str(&tail);
                return Ok(Completion { text, tokens, stats });
            }
        }
    }
    Err(crate::Error::InvalidInput("generation ended without a finish event".into()))
}

impl Drop for TokenStream<'_, '_> {
    /// A stream dropped in the middle of a verification pass leaves the session holding the
    /// generation's tokens only (not the rest of the draft).
    fn drop(&mut self) {
        self.end_verify();
    }
}

impl Iterator for TokenStream<'_, '_> {
    type Item = Result<StreamEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let event = self.step();
        if event.is_err() {
            self.done = true;
        }
        Some(event)
    }
}
