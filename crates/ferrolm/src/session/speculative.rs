//! Speculative decoding for a [`Session`](super::Session): draft a few tokens cheaply, run them
//! through the model in one forward pass, keep the ones the generation would have produced.
//!
//! Verification is exact: the pass over `[pending, d1 .. dk]` gives the logits after each of its
//! tokens, and the generation's own [`Decoder`](crate::decoder::Decoder) samples from them row
//! by row exactly as plain decoding would (same sampler chain, same random numbers, same
//! constraint). A draft token is kept while it equals the token sampled before it; the first
//! mismatch ends the pass, its sampled token becomes the next pending one and the cache is cut
//! back after it. For a deterministic draft this is the standard acceptance rule (keep `d` with
//! probability `p(d)`, else sample from `p` without `d`), so the output is the target model's,
//! token for token: with greedy sampling, and with a seeded sampler too.
//!
//! A verification pass has at most [`MAX_DRAFT`]` + 1` tokens: small batches whose matmuls and
//! attention compute each token exactly as a decode step does (see `backend/cpu/matmul.rs` and
//! `attention.rs`), so the logits, not only the tokens, equal plain decoding's.
//!
//! Drafters ([`Drafter`]):
//! - prompt lookup: the tokens that followed the most recent earlier occurrence of the
//!   context's last n-gram (longest n first) — free, and strong where the output copies the
//!   prompt (code editing, summaries, extraction);
//! - a draft model sharing the target's vocabulary, decoding greedily in its own session while
//!   it is confident ([`SpeculativeOptions::p_min`]), kept in step with the accepted tokens (its
//!   cache reuses the common prefix).
//!
//! Speculation is skipped (plain decoding runs) where it cannot be exact or cannot fit: a
//! session whose cache evicts, a logits processor set on the stream, or no room left in the
//! context for a draft.

use super::{Session, SessionOptions};
pub use crate::decoder::speculative::MAX_DRAFT;
use crate::decoder::speculative::{check_vocab, confident_pick, lookup_draft};
use crate::model::Model;
use crate::{Error, Result};

/// Where draft tokens come from.
#[derive(Clone, Copy, Debug)]
pub enum Drafter<'m> {
    /// Prompt lookup: continue the most recent earlier occurrence of the context's last
    /// `max_ngram` (down to 1) tokens.
    PromptLookup {
        /// Longest n-gram matched.
        max_ngram: usize,
    },
    /// A smaller model with the same vocabulary, decoding greedily.
    Model(&'m Model),
}

/// Speculative decoding settings of a session.
#[derive(Clone, Copy, Debug)]
pub struct SpeculativeOptions<'m> {
    /// Where drafts come from.
    pub drafter: Drafter<'m>,
    /// Most tokens drafted per pass (1 to [`MAX_DRAFT`]).
    pub max_draft: usize,
    /// A draft model's drafting stops at the first token it gives a probability below this
    /// (llama.cpp's `--draft-p-min`; 0: always `max_draft` tokens). Prompt lookup ignores it.
    pub p_min: f32,
}

/// A session's drafter, ready to draft.
pub(super) struct Speculator<'m> {
    max_draft: usize,
    p_min: f32,
    kind: Kind<'m>,
    /// The context drafted from (scratch, reused).
    context: Vec<u32>,
}

enum Kind<'m> {
    Lookup { max_ngram: usize },
    Model(Box<Session<'m>>),
}

impl std::fmt::Debug for Speculator<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            Kind::Lookup { max_ngram } => format!("lookup({max_ngram})"),
            Kind::Model(s) => format!("model ({} tokens cached)", s.tokens().len()),
        };
        f.debug_struct("Speculator").field("max_draft", &self.max_draft).field("kind", &kind).finish()
    }
}

impl<'m> Speculator<'m> {
    /// A drafter for a session on `target` with options `session`; an error for bad settings or
    /// a draft model whose vocabulary is not the target's.
    pub(super) fn new(
        opts: SpeculativeOptions<'m>,
        target: &Model,
        session: &SessionOptions,
    ) -> Result<Self> {
        if opts.max_draft == 0 || opts.max_draft > MAX_DRAFT {
            return Err(Error::InvalidInput(format!(
                "speculative decoding drafts 1 to {MAX_DRAFT} tokens per pass (got {})",
                opts.max_draft
            )));
        }
        if !(0.0..=1.0).contains(&opts.p_min) {
            return Err(Error::InvalidInput(format!(
                "the draft model's minimum probability is between 0 and 1 (got {})",
                opts.p_min
            )));
        }
        let kind = match opts.drafter {
            Drafter::PromptLookup { max_ngram } => {
                if max_ngram == 0 {
                    return Err(Error::InvalidInput(
                        "prompt lookup needs an n-gram of at least 1 token".into(),
                    ));
                }
                Kind::Lookup { max_ngram }
            }
            Drafter::Model(draft) => {
                check_vocab(draft, target)?;
                let opts = SessionOptions {
                    n_ctx: session.n_ctx,
                    n_batch: session.n_batch,
                    ..SessionOptions::default()
                };
                Kind::Model(Box::new(Session::new(draft, opts)?))
            }
        };
        Ok(Self { max_draft: opts.max_draft, p_min: opts.p_min, kind, context: Vec::new() })
    }

    /// A draft model prefills `prompt` (part of the prompt's processing: the first draft then
    /// only runs the token after it); prompt lookup has nothing to do.
    pub(super) fn prefill(&mut self, prompt: &[u32]) -> Result<()> {
        match &mut self.kind {
            Kind::Lookup { .. } => Ok(()),
            Kind::Model(draft) => draft.prefill(prompt).map(|_| ()),
        }
    }

    /// Drafts at most `max` (and at most `max_draft`) tokens to follow `history` and `next`
    /// into `out` (cleared first).
    pub(super) fn draft(&mut self, history: &[u32], next: u32, max: usize, out: &mut Vec<u32>) -> Result<()> {
        out.clear();
        let max = max.min(self.max_draft);
        if max == 0 {
            return Ok(());
        }
        let context = &mut self.context;
        context.clear();
        context.extend_from_slice(history);
        context.push(next);
        let context = &self.context[..];
        match &mut self.kind {
            Kind::Lookup { max_ngram } => lookup_draft(context, *max_ngram, max, out),
            Kind::Model(draft) => {
                // The draft session's cache keeps the common prefix with the last call's.
                draft.prefill(context)?;
                // Greedy, while the draft model is confident.
                while let Some(t) = confident_pick(&draft.logits, self.p_min) {
                    out.push(t);
                    if out.len() == max {
                        break;
                    }
                    draft.run(&[t], false)?;
                }
            }
        }
        Ok(())
    }
}
