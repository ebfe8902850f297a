//! One running request: its prompt progress, sampler, stop strings and the events it sends.

use std::time::Instant;

use ferrolm::constrain::Constraint;
use ferrolm::kv::CacheManager;
use ferrolm::model::Model;
use ferrolm::sampling::Sampler;
use ferrolm::session::StopMatcher;
use ferrolm::tokenizer::StreamDecoder;
use tokio::sync::mpsc;

use super::{Finish, GenEvent, GenRequest, SlotInfo, SlotState, TokenLogprob, Usage};

/// A request taken by a slot.
pub(crate) struct Active {
    /// The engine's id of the request.
    pub(crate) id: u64,
    pub(crate) tx: mpsc::UnboundedSender<GenEvent>,
    pub(crate) prompt: Vec<u32>,
    /// Every token run through the model for this sequence, in order (token i at position i
    /// unless evicted): the prompt so far, then generated tokens.
    pub(crate) tokens: Vec<u32>,
    /// Prompt tokens whose KV came from the prefix cache.
    pub(crate) n_cached: usize,
    /// Bounds this sequence's cache (eviction policy).
    pub(crate) manager: CacheManager,
    sampler: Sampler,
    constraint: Option<Constraint>,
    /// Logits with the constraint's mask applied. `[n_vocab]`
    masked: Vec<f32>,
    stop: StopMatcher,
    decoder: StreamDecoder,
    max_tokens: usize,
    ignore_eos: bool,
    logprobs: Option<usize>,
    pub(crate) prompt_logprobs: bool,
    /// Log-probabilities of the prompt tokens so far (the first has none). `[n_prompt]`
    prompt_lp: Vec<Option<TokenLogprob>>,
    /// A sampled token not yet run through the model.
    pub(crate) pending: Option<u32>,
    /// Tokens sent to the client.
    n_generated: usize,
    /// Whether a stop string ended the generation.
    hit_stop: bool,
    pub(crate) deadline: Option<Instant>,
    queued_at: Instant,
    started_at: Instant,
    first_token_at: Option<Instant>,
}

impl Active {
    /// Sets up sampling for `req`. Errors are the request's fault (bad sampler or constraint).
    pub(crate) fn new(
        model: &Model,
        id: u64,
        req: GenRequest,
        tx: mpsc::UnboundedSender<GenEvent>,
        queued_at: Instant,
        manager: CacheManager,
    ) -> ferrolm::Result<Self> {
        let sampler = Sampler::new(req.params.sampler.clone(), model.tokenizer())?;
        let constraint = match &req.params.constraint {
            Some(spec) => Some(Constraint::new(&model.token_env()?, spec)?),
            None => None,
        };
        let deadline = req.timeout.map(|t| queued_at + t);
        Ok(Self {
            id,
            tx,
            tokens: Vec::with_capacity(req.prompt.len() + req.params.max_tokens.unwrap_or(256).min(4096)),
            prompt: req.prompt,
            n_cached: 0,
            manager,
            sampler,
            constraint,
            masked: Vec::new(),
            stop: StopMatcher::new(&req.params.stop),
            decoder: StreamDecoder::new(),
            max_tokens: req.params.max_tokens.unwrap_or(usize::MAX),
            ignore_eos: req.params.ignore_eos,
            logprobs: req.logprobs,
            prompt_logprobs: req.prompt_logprobs,
            prompt_lp: Vec::new(),
            pending: None,
            n_generated: 0,
            hit_stop: false,
            deadline,
            queued_at,
            started_at: Instant::now(),
            first_token_at: None,
        })
    }

    /// Records that the first `n` prompt tokens came from the prefix cache.
    pub(crate) fn set_cached(&mut self, n: usize) {
        self.n_cached = n;
        self.tokens.extend_from_slice(&self.prompt[..n]);
    }

    /// Prompt tokens not yet run through the model.
    pub(crate) fn prompt_left(&self) -> usize {
        self.prompt.len().saturating_sub(self.tokens.len())
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
            let k = self.logprobs.unwrap_or(0);
            self.prompt_lp.push(Some(token_logprob(logits, next, k)));
        }
    }

    /// The prompt is in: the sampler sees it, and the prompt log-probabilities go out.
    pub(crate) fn prompt_done(&mut self) {
        for &t in &self.prompt {
            self.sampler.accept(t);
        }
        if self.prompt_logprobs {
            if self.prompt_lp.is_empty() {
                self.prompt_lp.push(None);
            }
            let _ = self.tx.send(GenEvent::PromptLogprobs(std::mem::take(&mut self.prompt_lp)));
        }
    }

    /// Samples the next token from `logits` and sends it; returns why the generation ended, if it
    /// did (the caller then calls [`Active::finish`]).
    pub(crate) fn sample(&mut self, model: &Model, logits: &[f32]) -> ferrolm::Result<Option<Finish>> {
        if self.max_tokens == 0 {
            return Ok(Some(Finish::Length));
        }
        let tok = match &mut self.constraint {
            Some(c) => {
                self.masked.clear();
                self.masked.extend_from_slice(logits);
                c.mask_logits(&mut self.masked)?;
                let tok = self.sampler.sample(&self.masked);
                c.accept(tok)?;
                tok
            }
            None => self.sampler.sample(logits),
        };
        self.sampler.accept(tok);
        self.first_token_at.get_or_insert_with(Instant::now);
        let tokenizer = model.tokenizer();
        if !self.ignore_eos && tokenizer.is_eog(tok) {
            return Ok(Some(Finish::Stop));
        }
        self.n_generated += 1;
        let logprob = self.logprobs.map(|k| token_logprob(logits, tok, k));
        let piece = self.decoder.push(tokenizer, tok);
        let check = self.stop.push(&piece);
        let _ = self.tx.send(GenEvent::Token { id: tok, text: check.text, logprob });
        if check.hit.is_some() {
            self.hit_stop = true;
            return Ok(Some(Finish::Stop));
        }
        if self.constraint.as_ref().is_some_and(Constraint::is_finished) {
            return Ok(Some(Finish::Stop));
        }
        if self.n_generated >= self.max_tokens {
            return Ok(Some(Finish::Length));
        }
        self.pending = Some(tok);
        Ok(None)
    }

    /// Sends the end of the request: the held-back text (none after a stop string), the reason
    /// and the counts.
    pub(crate) fn finish(&mut self, finish: Finish) -> Usage {
        let mut text = self.decoder.flush();
        text = self.stop.push(&text).text + &self.stop.flush();
        if self.hit_stop {
            // Nothing after a stop string is shown.
            text.clear();
        }
        let usage = self.usage();
        if self.prompt_logprobs && !self.prompt_lp.is_empty() {
            // Cancelled before the prompt was in: send what was scored.
            let _ = self.tx.send(GenEvent::PromptLogprobs(std::mem::take(&mut self.prompt_lp)));
        }
        let _ = self.tx.send(GenEvent::Done { text, finish, usage });
        usage
    }

    /// Counts and timings so far.
    pub(crate) fn usage(&self) -> Usage {
        let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1e3;
        let now = Instant::now();
        let first = self.first_token_at.unwrap_or(now);
        Usage {
            prompt_tokens: self.prompt.len(),
            cached_tokens: self.n_cached,
            completion_tokens: self.n_generated,
            queue_ms: ms(self.queued_at, self.started_at),
            prompt_ms: ms(self.started_at, first),
            decode_ms: if self.first_token_at.is_some() { ms(first, now) } else { 0.0 },
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
            n_prompt_done: self.tokens.len().min(self.prompt.len()),
            n_generated: self.n_generated,
            n_kv,
        }
    }
}

/// `token`'s log-probability under `logits` (log-softmax) and the `k` most likely tokens.
pub(crate) fn token_logprob(logits: &[f32], token: u32, k: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    let log_z = max + sum.ln() as f32;
    let lp = |id: u32| logits.get(id as usize).map_or(f32::NEG_INFINITY, |&l| l - log_z);
    let top = if k == 0 {
        Vec::new()
    } else {
        let k = k.min(logits.len());
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let by_logit = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]).then(a.cmp(b));
        idx.select_nth_unstable_by(k - 1, by_logit);
        idx.truncate(k);
        idx.sort_by(by_logit);
        idx.into_iter().map(|id| (id, lp(id))).collect()
    };
    TokenLogprob { id: token, logprob: lp(token), top }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_a_log_softmax_with_sorted_alternatives() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let lp = token_logprob(&logits, 2, 3);
        let z: f64 = logits.iter().map(|&l| f64::from(l).exp()).sum();
        assert!((f64::from(lp.logprob) - (2.0 - z.ln())).abs() < 1e-5);
        // Ties broken by id; best first.
        let ids: Vec<u32> = lp.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![1, 3, 2]);
        let total: f64 = logits.iter().map(|&l| f64::from(l - z.ln() as f32).exp()).sum();
        assert!((total - 1.0).abs() < 1e-5);
        assert!(token_logprob(&logits, 0, 0).top.is_empty());
        assert_eq!(token_logprob(&logits, 0, 10).top.len(), 5);
    }
}
