//! [`Decoder`]: the per-token step of a generation, written once for every front end.
//!
//! After each forward pass a generation turns the logits of its last token into the next token
//! and the text to show:
//!
//! ```text
//! logits ─▶ constraint mask ─▶ sampler chain ─▶ accept ─▶ end of generation? ─▶ detokenize
//!        ─▶ reasoning budget ─▶ stop strings (hold back) ─▶ limits (max_tokens, finished grammar)
//!        ─▶ Step
//! ```
//!
//! When a [`ReasoningBudget`] runs out, the steps that write its closing tag take the tag's
//! tokens instead of sampling (see [`budget`]).
//!
//! [`crate::session::Session`] (one user, in the caller's thread) and [`crate::engine::Engine`]
//! (many users, one engine thread) both drive a `Decoder`; neither has a copy of this logic. The
//! caller owns the forward pass: it runs the token of a [`Step::Continue`] through the model and
//! calls [`Decoder::step`] again with the logits after it.
//!
//! A request's constraint (JSON schema, grammar) is compiled once, in [`Decoder::new`].

pub mod budget;
mod logprob;
pub mod speculative;
mod stop;

pub use budget::ReasoningBudget;
pub use logprob::{TokenLogprob, token_logprob};
pub use stop::{StopCheck, StopMatcher};

use crate::Result;
use crate::constrain::{Constraint, ConstraintSpec};
use crate::model::Model;
use crate::sampling::{Sampler, SamplerParams};
use crate::tokenizer::{StreamDecoder, Tokenizer};
use budget::BudgetState;

/// Options of one generation.
#[derive(Clone, Debug, Default)]
pub struct GenerateParams {
    /// Most tokens to generate; `None` goes on until an end-of-generation token, a stop string
    /// or a full context.
    pub max_tokens: Option<usize>,
    /// The sampler chain.
    pub sampler: SamplerParams,
    /// Stop strings: generation ends when the text contains one; it and what follows are not
    /// returned. Text that could still become a stop string is held back until it is decided.
    pub stop: Vec<String>,
    /// Keep going past the model's end-of-generation tokens.
    pub ignore_eos: bool,
    /// Constrain the output to a JSON schema, a Lark grammar or a regular expression: at each
    /// step the tokens that cannot continue a match are masked out before sampling, and
    /// generation ends when the match is complete.
    pub constraint: Option<ConstraintSpec>,
    /// Limit a thinking model's reasoning to a number of tokens ([`budget`]).
    pub reasoning_budget: Option<ReasoningBudget>,
}

impl GenerateParams {
    /// Greedy decoding of at most `max_tokens` tokens.
    pub fn greedy(max_tokens: usize) -> Self {
        Self { max_tokens: Some(max_tokens), sampler: SamplerParams::greedy(), ..Self::default() }
    }
}

/// Why a generation ended: the one finish enum of every front end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// `max_tokens` were generated.
    Length,
    /// The model produced an end-of-generation token, or a constrained output is complete (only
    /// an end-of-generation token could follow).
    EndOfGeneration,
    /// The text reached a stop string.
    StopString,
    /// The context is full and the cache does not evict.
    ContextFull,
    /// The request's time limit passed.
    Timeout,
    /// The generation was cancelled (a cancel handle, a dropped request handle, a shutdown).
    Cancelled,
}

impl FinishReason {
    /// A short name: `length`, `eog`, `stop`, `context`, `timeout`, `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Length => "length",
            FinishReason::EndOfGeneration => "eog",
            FinishReason::StopString => "stop",
            FinishReason::ContextFull => "context",
            FinishReason::Timeout => "timeout",
            FinishReason::Cancelled => "cancelled",
        }
    }

    /// The OpenAI `finish_reason`: `length` (also for a full context), `stop` (end of
    /// generation, stop string), or `timeout` / `cancelled`.
    pub fn openai_reason(self) -> &'static str {
        match self {
            FinishReason::Length | FinishReason::ContextFull => "length",
            FinishReason::EndOfGeneration | FinishReason::StopString => "stop",
            FinishReason::Timeout => "timeout",
            FinishReason::Cancelled => "cancelled",
        }
    }

    /// Whether the generation ended by itself (not cancelled or timed out).
    pub fn is_natural(self) -> bool {
        !matches!(self, FinishReason::Timeout | FinishReason::Cancelled)
    }
}

/// A token a [`Decoder`] produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampled {
    /// The token id.
    pub id: u32,
    /// Text that is now final (may be empty: part of a UTF-8 character, or text held back
    /// while it may still become a stop string).
    pub text: String,
    /// Its log-probability and the top alternatives, when asked for.
    pub logprob: Option<TokenLogprob>,
}

/// What one [`Decoder::step`] decided.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// A token to show; run it through the model and call [`Decoder::step`] with the logits
    /// after it.
    Continue(Sampled),
    /// A token to show, and the generation ends after it (a stop string, `max_tokens`, a
    /// complete constrained output); the token is not run through the model.
    Last(Sampled, FinishReason),
    /// The generation ends without a token to show (an end-of-generation token was sampled, or
    /// `max_tokens` is 0).
    End(FinishReason),
}

/// A logits processor given to [`Decoder::step_with`].
type LogitsHook<'a> = &'a mut dyn FnMut(&mut [f32]) -> Result<()>;

/// The per-token step of one generation: sampler chain, constraint, stop strings with
/// hold-back, detokenizing, limits and log-probabilities. See the [module doc](self).
pub struct Decoder {
    sampler: Sampler,
    constraint: Option<Constraint>,
    /// The logits with the constraint's mask applied. `[n_vocab]`
    masked: Vec<f32>,
    stop: StopMatcher,
    detok: StreamDecoder,
    max_tokens: usize,
    ignore_eos: bool,
    /// `Some(k)`: report each token's log-probability and the `k` best alternatives.
    logprobs: Option<usize>,
    /// Report them from the distribution the sampler drew from rather than the model's.
    post_sampling: bool,
    /// Tokens produced (an end-of-generation token that ended the generation not counted).
    n_generated: usize,
    /// The stop string that ended the generation, if one did (nothing after it is shown).
    stop_word: Option<String>,
    /// The reasoning budget's state, when the generation has one.
    budget: Option<BudgetState>,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("n_generated", &self.n_generated)
            .field("max_tokens", &self.max_tokens)
            .field("constrained", &self.constraint.is_some())
            .finish_non_exhaustive()
    }
}

impl Decoder {
    /// A decoder for one generation on `model`: builds the sampler chain and compiles the
    /// constraint (the only place a request's constraint is compiled). Errors are the request's
    /// fault: bad sampler options, a schema or grammar that does not compile.
    pub fn new(model: &Model, params: &GenerateParams) -> Result<Self> {
        let constraint = match &params.constraint {
            Some(spec) => Some(Constraint::new(&model.token_env()?, spec)?),
            None => None,
        };
        Self::with_constraint(model.tokenizer(), params, constraint)
    }

    /// Like [`Decoder::new`] with an already compiled constraint (its `params.constraint` is not
    /// read): the `n` choices of one request share one compilation by cloning it.
    pub fn with_constraint(
        tokenizer: &Tokenizer,
        params: &GenerateParams,
        constraint: Option<Constraint>,
    ) -> Result<Self> {
        let budget = match &params.reasoning_budget {
            Some(b) => {
                let text = format!("{}{}", b.message, b.close);
                let forced = tokenizer.encode(&text, false, true)?;
                if forced.is_empty() || b.open.is_empty() || b.natural_close.is_empty() {
                    return Err(crate::Error::InvalidInput(
                        "a reasoning budget needs an opening and a closing tag".into(),
                    ));
                }
                Some(BudgetState::new(b.clone(), forced))
            }
            None => None,
        };
        Ok(Self {
            sampler: Sampler::new(params.sampler.clone(), tokenizer)?,
            constraint,
            masked: Vec::new(),
            stop: StopMatcher::new(&params.stop),
            detok: StreamDecoder::new(),
            max_tokens: params.max_tokens.unwrap_or(usize::MAX),
            ignore_eos: params.ignore_eos,
            logprobs: None,
            post_sampling: false,
            n_generated: 0,
            stop_word: None,
            budget,
        })
    }

    /// Reports each token's log-probability and the `k` most likely alternatives (`k` may be 0).
    pub fn with_logprobs(mut self, k: Option<usize>) -> Self {
        self.logprobs = k;
        self
    }

    /// Reports the log-probabilities of [`Decoder::with_logprobs`] after sampling: from the
    /// distribution the sampler chain drew from (truncated, tempered; one-hot when greedy), as
    /// llama.cpp's `post_sampling_probs`, instead of the model's raw distribution.
    pub fn with_post_sampling(mut self, on: bool) -> Self {
        self.post_sampling = on;
        self
    }

    /// Like [`Decoder::with_logprobs`] on a decoder already in use (from the next step on).
    pub fn set_logprobs(&mut self, k: Option<usize>) {
        self.logprobs = k;
    }

    /// The `k` of [`Decoder::with_logprobs`].
    pub fn logprobs(&self) -> Option<usize> {
        self.logprobs
    }

    /// Tokens produced so far (an end-of-generation token that ended it is not counted).
    pub fn n_generated(&self) -> usize {
        self.n_generated
    }

    /// Lets the sampler see the prompt (repetition penalties, DRY): call once, after the prompt
    /// and before the first [`Decoder::step`].
    pub fn accept_prompt(&mut self, prompt: &[u32]) {
        for &t in prompt {
            self.sampler.accept(t);
        }
    }

    /// One step: turns the logits after the last token into the next token and its text.
    /// `logits` is `[n_vocab]`.
    pub fn step(&mut self, tokenizer: &Tokenizer, logits: &[f32]) -> Result<Step> {
        self.step_inner(tokenizer, logits, None)
    }

    /// Like [`Decoder::step`], with a logits processor: `process` may change a copy of the
    /// logits (bias, mask, rescale them) before the constraint's mask and the sampler chain see
    /// them; an error it returns ends the step with that error. Log-probabilities are still
    /// those of the model's raw `logits`. A step without a processor costs no copy.
    pub fn step_with(
        &mut self,
        tokenizer: &Tokenizer,
        logits: &[f32],
        process: &mut dyn FnMut(&mut [f32]) -> Result<()>,
    ) -> Result<Step> {
        self.step_inner(tokenizer, logits, Some(process))
    }

    fn step_inner(
        &mut self,
        tokenizer: &Tokenizer,
        logits: &[f32],
        process: Option<LogitsHook<'_>>,
    ) -> Result<Step> {
        if self.n_generated >= self.max_tokens {
            return Ok(Step::End(FinishReason::Length));
        }
        let forced = self.budget.as_ref().and_then(BudgetState::forced_token);
        let tok = if let Some(t) = forced {
            if let Some(c) = &mut self.constraint {
                c.accept(t)?;
            }
            t
        } else if process.is_none() && self.constraint.is_none() {
            self.sampler.sample(logits)
        } else {
            self.masked.clear();
            self.masked.extend_from_slice(logits);
            if let Some(process) = process {
                process(&mut self.masked)?;
            }
            if let Some(c) = &mut self.constraint {
                c.mask_logits(&mut self.masked)?;
            }
            let tok = self.sampler.sample(&self.masked);
            if let Some(c) = &mut self.constraint {
                c.accept(tok)?;
            }
            tok
        };
        self.sampler.accept(tok);
        if forced.is_none() && !self.ignore_eos && tokenizer.is_eog(tok) {
            return Ok(Step::End(FinishReason::EndOfGeneration));
        }
        self.n_generated += 1;
        let logprob = self.logprobs.map(|k| {
            if forced.is_some() && self.post_sampling {
                // Written, not drawn: the distribution was all on this token.
                TokenLogprob { id: tok, logprob: 0.0, top: vec![(tok, 0.0)].into_iter().take(k).collect() }
            } else if self.post_sampling {
                let (p, top) = self.sampler.drawn_distribution(tok, k);
                TokenLogprob {
                    id: tok,
                    logprob: p.ln(),
                    top: top.into_iter().map(|(id, q)| (id, q.ln())).collect(),
                }
            } else {
                token_logprob(logits, tok, k)
            }
        });
        let piece = self.detok.push(tokenizer, tok);
        if let Some(b) = &mut self.budget {
            b.observe(&piece, self.detok.has_pending());
        }
        let check = self.stop.push(&piece);
        let sampled = Sampled { id: tok, text: check.text, logprob };
        let finish = if check.hit.is_some() {
            self.stop_word = check.hit;
            Some(FinishReason::StopString)
        } else if self.constraint.as_ref().is_some_and(Constraint::is_finished) {
            // The grammar is complete: only an end-of-generation token could follow.
            Some(FinishReason::EndOfGeneration)
        } else if self.n_generated >= self.max_tokens {
            Some(FinishReason::Length)
        } else {
            None
        };
        Ok(match finish {
            Some(reason) => Step::Last(sampled, reason),
            None => Step::Continue(sampled),
        })
    }

    /// Ends the generation: the text still held back (an incomplete UTF-8 character, a possible
    /// stop string that did not complete), or nothing after a stop string.
    pub fn finish(&mut self) -> String {
        let tail = self.detok.flush();
        let text = self.stop.push(&tail).text + &self.stop.flush();
        if self.stop_word.is_some() { String::new() } else { text }
    }

    /// The stop string that ended the generation ([`FinishReason::StopString`]), if one did.
    pub fn stop_word(&self) -> Option<&str> {
        self.stop_word.as_deref()
    }
}
