//! [`TokenStream`]: a generation as an iterator of [`StreamEvent`]s.

use std::time::{Duration, Instant};

use super::generation::{Completion, FinishReason, GenerateParams, GenerationStats};
use super::stop::StopMatcher;
use super::{PrefillStats, Session};
use crate::Result;
use crate::constrain::Constraint;
use crate::sampling::Sampler;
use crate::tokenizer::StreamDecoder;

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

/// A running generation. Each call to `next` samples one token (after running the previous one
/// through the model). Dropping the stream stops the generation; the session keeps every token
/// that was run through the model and is ready for the next call.
pub struct TokenStream<'s, 'm> {
    session: &'s mut Session<'m>,
    sampler: Sampler,
    constraint: Option<Constraint>,
    /// Logits with the constraint's mask applied. `[n_vocab]`
    masked: Vec<f32>,
    stop: StopMatcher,
    decoder: StreamDecoder,
    max_tokens: usize,
    ignore_eos: bool,
    prefill: PrefillStats,
    /// A sampled token not yet run through the model.
    pending: Option<u32>,
    /// The reason to report on the next call (the stream ends after it).
    finish: Option<FinishReason>,
    done: bool,
    n_generated: usize,
    n_decode: usize,
    decode_time: Duration,
}

impl std::fmt::Debug for TokenStream<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenStream").field("n_generated", &self.n_generated).finish_non_exhaustive()
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
        let mut sampler = Sampler::new(params.sampler.clone(), session.model.tokenizer())?;
        let constraint = match &params.constraint {
            Some(spec) => Some(Constraint::new(&session.model.token_env()?, spec)?),
            None => None,
        };
        let prefill = session.prefill(prompt)?;
        for &t in prompt {
            sampler.accept(t);
        }
        let max_tokens = params.max_tokens.unwrap_or(usize::MAX);
        let finish = if prefill.cancelled {
            Some(FinishReason::Cancelled)
        } else if max_tokens == 0 {
            Some(FinishReason::Length)
        } else {
            None
        };
        Ok(Self {
            session,
            sampler,
            constraint,
            masked: Vec::new(),
            stop: StopMatcher::new(&params.stop),
            decoder: StreamDecoder::new(),
            max_tokens,
            ignore_eos: params.ignore_eos,
            prefill,
            pending: None,
            finish,
            done: false,
            n_generated: 0,
            n_decode: 0,
            decode_time: Duration::ZERO,
        })
    }

    /// Tokens sampled so far.
    pub fn n_generated(&self) -> usize {
        self.n_generated
    }

    /// Tokens cached in the session's KV cache and the bytes they take.
    pub fn session_kv(&self) -> (usize, usize) {
        (self.session.kv_len(), self.session.kv_memory_bytes())
    }

    /// What the prompt cost (cached and prefilled tokens).
    pub fn prefill_stats(&self) -> PrefillStats {
        self.prefill
    }

    fn stats(&self, finish: FinishReason) -> GenerationStats {
        GenerationStats {
            n_prompt: self.prefill.n_prompt,
            n_cached: self.prefill.n_cached,
            n_prefilled: self.prefill.n_prefilled,
            prompt_time: self.prefill.time,
            n_generated: self.n_generated,
            n_decode: self.n_decode,
            decode_time: self.decode_time,
            n_kv: self.session.kv_len(),
            kv_bytes: self.session.kv_memory_bytes(),
            evictions: self.session.eviction_stats(),
            finish,
        }
    }

    fn finished(&mut self, reason: FinishReason) -> StreamEvent {
        self.done = true;
        let mut text = self.decoder.flush();
        text = self.stop.push(&text).text + &self.stop.flush();
        if reason == FinishReason::StopString {
            text.clear();
        }
        StreamEvent::Finished { text, reason, stats: self.stats(reason) }
    }

    /// One step: run the pending token, sample the next.
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
            self.session.run(&[tok], false)?;
            self.n_decode += 1;
        }
        let tok = match &mut self.constraint {
            Some(c) => {
                self.masked.clear();
                self.masked.extend_from_slice(&self.session.logits);
                c.mask_logits(&mut self.masked)?;
                let tok = self.sampler.sample(&self.masked);
                c.accept(tok)?;
                tok
            }
            None => self.sampler.sample(&self.session.logits),
        };
        self.sampler.accept(tok);
        self.n_generated += 1;
        self.decode_time += t0.elapsed();
        let tokenizer = self.session.model.tokenizer();
        if !self.ignore_eos && tokenizer.is_eog(tok) {
            return Ok(self.finished(FinishReason::EndOfGeneration));
        }
        self.pending = Some(tok);
        let piece = self.decoder.push(tokenizer, tok);
        let check = self.stop.push(&piece);
        if check.hit.is_some() {
            self.finish = Some(FinishReason::StopString);
        } else if self.constraint.as_ref().is_some_and(Constraint::is_finished) {
            // The grammar is complete: only an end-of-generation token could follow.
            self.finish = Some(FinishReason::EndOfGeneration);
        } else if self.n_generated >= self.max_tokens {
            self.finish = Some(FinishReason::Length);
        }
        Ok(StreamEvent::Token { id: tok, text: check.text })
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
