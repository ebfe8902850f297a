//! Speculative decoding's shared parts, for [`crate::session::Session`] and
//! [`crate::engine::Engine`] alike: the prompt-lookup drafter and the bookkeeping of a
//! verification pass ([`Pass`]).
//!
//! A pass runs a generation's pending token and a few drafted tokens through the model at once.
//! The generation's [`Decoder`](super::Decoder) then samples from the pass's logits row by row
//! exactly as plain decoding would; a draft is kept while it equals the token sampled before it
//! (it is already in the cache, so nothing is pending), and the first mismatch — or the end of
//! the generation — ends the pass: the cache is cut back after the token whose logits were used
//! last, and the sampled token (if the generation goes on) is the next pending one. For a
//! deterministic draft this is the standard acceptance rule, so the output is the model's own.

/// Most tokens drafted per verification pass: a pass of up to 16 tokens per sequence takes the
/// decode step's matmul and attention paths, so its logits equal plain decoding's.
pub const MAX_DRAFT: usize = 15;

/// Why a model with recurrent layers does not speculate: rejected drafts are cut from the cache,
/// and a recurrent state cannot be cut back.
pub(crate) const NO_SPECULATION: &str = "speculative decoding is not supported for models with recurrent layers \
     (Qwen 3.5, LFM2): their state cannot drop rejected drafts";

/// A verification pass in progress, and the drafted and kept counts of a generation.
#[derive(Clone, Debug, Default)]
pub struct Pass {
    /// The drafted tokens of the pass (run after the pending token).
    drafts: Vec<u32>,
    /// Tokens cached before the pass.
    base: usize,
    /// Drafts kept so far in this pass.
    kept: usize,
    open: bool,
    n_drafted: usize,
    n_kept: usize,
    n_passes: usize,
}

/// What [`Pass::verify`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No pass is open: plain decoding, nothing to do.
    Plain,
    /// The sampled token is the next draft, already in the cache: nothing is pending, and the
    /// next row of the pass is the logits after it.
    Kept,
    /// The pass is over: the cache keeps its first `cached` tokens (cut it back to that); the
    /// sampled token, if the generation goes on, is the next pending one.
    End {
        /// Tokens the cache keeps.
        cached: usize,
    },
}

impl Pass {
    /// Opens a pass over the pending token and `drafts`, run after `base` cached tokens.
    pub fn start(&mut self, base: usize, drafts: &[u32]) {
        self.drafts.clear();
        self.drafts.extend_from_slice(drafts);
        self.base = base;
        self.kept = 0;
        self.open = !drafts.is_empty();
        self.n_drafted += drafts.len();
        self.n_passes += usize::from(!drafts.is_empty());
    }

    /// Whether a pass is open.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// The row of the pass the next sample reads: the logits after its `row()`-th token.
    pub fn row(&self) -> usize {
        self.kept
    }

    /// After the decoder sampled from the pass's current row: `sampled` is the token if the
    /// generation goes on (`None` when it ended there).
    pub fn verify(&mut self, sampled: Option<u32>) -> Verdict {
        if !self.open {
            return Verdict::Plain;
        }
        match sampled {
            Some(t) if self.drafts.get(self.kept) == Some(&t) => {
                self.kept += 1;
                self.n_kept += 1;
                Verdict::Kept
            }
            _ => self.close(),
        }
    }

    /// Ends the pass where it stands (a caller's own stop): the cache keeps the tokens up to
    /// the current row's.
    pub fn close(&mut self) -> Verdict {
        if !self.open {
            return Verdict::Plain;
        }
        self.open = false;
        Verdict::End { cached: self.base + 1 + self.kept }
    }

    /// Takes the last kept draft back out of the pass (it is to be dropped from the cache, the
    /// generation ending after it): the current row moves back by one. `false` when no draft
    /// was kept.
    pub fn unkeep(&mut self) -> bool {
        if self.open && self.kept > 0 {
            self.kept -= 1;
            true
        } else {
            false
        }
    }

    /// Tokens drafted over the generation.
    pub fn n_drafted(&self) -> usize {
        self.n_drafted
    }

    /// Drafted tokens kept over the generation.
    pub fn n_kept(&self) -> usize {
        self.n_kept
    }

    /// Passes that verified at least one drafted token.
    pub fn n_passes(&self) -> usize {
        self.n_passes
    }
}

/// A draft model's greedy pick after `logits`: its most likely token, when the draft model gives
/// it a probability of at least `p_min` (llama.cpp's `--draft-p-min`), else `None`: drafting stops
/// at the first token the draft model is unsure of, where the target would likely disagree.
/// `p_min` ≤ 0 always picks.
pub fn confident_pick(logits: &[f32], p_min: f32) -> Option<u32> {
    let t = crate::sampling::argmax(logits);
    if p_min <= 0.0 {
        return Some(t);
    }
    let top = *logits.get(t as usize)?;
    // softmax(top) = 1 / Σ exp(l − top)
    let sum: f32 = logits.iter().map(|&l| (l - top).exp()).sum();
    (sum.is_finite() && sum * p_min <= 1.0).then_some(t)
}

/// A draft model must produce the target's token ids: the same vocabulary size and special
/// tokens; an error that says what differs.
pub fn check_vocab(draft: &crate::model::Model, target: &crate::model::Model) -> crate::Result<()> {
    let (d, t) = (draft.tokenizer(), target.tokenizer());
    let (nd, nt) = (draft.config().n_vocab, target.config().n_vocab);
    if nd != nt || d.bos() != t.bos() || d.eos() != t.eos() {
        return Err(crate::Error::InvalidInput(format!(
            "the draft model's vocabulary ({nd} tokens, BOS {:?}, EOS {:?}) is not the target's ({nt} tokens, BOS {:?}, EOS {:?})",
            d.bos(),
            d.eos(),
            t.bos(),
            t.eos()
        )));
    }
    Ok(())
}

/// Prompt lookup: for `n` from `max_ngram` down to 1, the most recent earlier occurrence of the
/// last `n` tokens of `context`; the (at most `max`) tokens that followed it go to `out`. Nothing
/// when no n-gram recurs.
pub fn lookup_draft(context: &[u32], max_ngram: usize, max: usize, out: &mut Vec<u32>) {
    let len = context.len();
    for n in (1..=max_ngram.min(len.saturating_sub(1))).rev() {
        let key = &context[len - n..];
        // Occurrences ending before the last token, most recent first.
        if let Some(start) = (0..len - n).rev().find(|&s| &context[s..s + n] == key) {
            let follow = &context[start + n..];
            out.extend_from_slice(&follow[..follow.len().min(max)]);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft(context: &[u32], max_ngram: usize, max: usize) -> Vec<u32> {
        let mut out = vec![99];
        lookup_draft(context, max_ngram, max, &mut out);
        out.remove(0);
        out
    }
    #[test]
    fn the_longest_recurring_ngram_wins() {
        // "1 2 3" recurs at 0: it was followed by 4 5.
        assert_eq!(draft(&[1, 2, 3, 4, 5, 9, 1, 2, 3], 3, 8), vec![4, 5, 9, 1, 2, 3]);
        // Only "3" recurs when the 3-gram and 2-gram do not.
        assert_eq!(draft(&[3, 7, 8, 1, 2, 3], 3, 2), vec![7, 8]);
    }

    #[test]
    fn the_most_recent_occurrence_wins() {
        assert_eq!(draft(&[5, 1, 6, 5, 2, 5], 1, 1), vec![2]);
    }

    #[test]
    fn no_recurrence_no_draft() {
        assert!(draft(&[1, 2, 3, 4], 3, 8).is_empty());
        assert!(draft(&[], 3, 8).is_empty());
        assert!(draft(&[7], 3, 8).is_empty());
        // The context's own last n-gram is not an earlier occurrence.
        assert!(draft(&[1, 2], 2, 8).is_empty());
    }

    #[test]
    fn a_confident_pick_needs_p_min() {
        // Probabilities ~0.84, 0.11, 0.04 (logits 3, 1, 0).
        let logits = [1.0, 3.0, 0.0];
        assert_eq!(confident_pick(&logits, 0.0), Some(1));
        assert_eq!(confident_pick(&logits, 0.8), Some(1));
        assert_eq!(confident_pick(&logits, 0.9), None);
        // A tie is never confident above one half.
        assert_eq!(confident_pick(&[2.0, 2.0], 0.5), Some(0));
        assert_eq!(confident_pick(&[2.0, 2.0], 0.51), None);
        // Masked (−∞) tokens take no probability.
        assert_eq!(confident_pick(&[f32::NEG_INFINITY, 0.5], 0.99), Some(1));
    }

    #[test]
    fn a_draft_stops_at_max() {
        assert_eq!(draft(&[1, 2, 3, 4, 5, 6, 1], 1, 3), vec![2, 3, 4]);
    }

    /// A pass over pending token P and drafts [a, b, c] after 10 cached tokens.
    fn pass() -> Pass {
        let mut p = Pass::default();
        p.start(10, &[1, 2, 3]);
        p
    }

    #[test]
    fn drafts_are_kept_while_they_are_sampled() {
        let mut p = pass();
        assert_eq!(p.row(), 0);
        assert_eq!(p.verify(Some(1)), Verdict::Kept);
        assert_eq!((p.row(), p.is_open()), (1, true));
        assert_eq!(p.verify(Some(2)), Verdict::Kept);
        // A mismatch at row 2: the cache keeps P, a, b; 7 is pending.
        assert_eq!(p.verify(Some(7)), Verdict::End { cached: 13 });
        assert!(!p.is_open());
        assert_eq!(p.verify(Some(3)), Verdict::Plain);
        assert_eq!((p.n_drafted(), p.n_kept()), (3, 2));
    }

    #[test]
    fn every_draft_kept_leaves_the_whole_pass_cached() {
        let mut p = pass();
        for t in [1, 2, 3] {
            assert_eq!(p.verify(Some(t)), Verdict::Kept);
        }
        // The bonus row: whatever is sampled there is pending, the whole pass stays.
        assert_eq!(p.verify(Some(9)), Verdict::End { cached: 14 });
    }

    #[test]
    fn an_end_inside_the_pass_keeps_the_tokens_before_it() {
        let mut p = pass();
        assert_eq!(p.verify(Some(1)), Verdict::Kept);
        // The generation ended on row 1 (a stop string, max_tokens, end of generation).
        assert_eq!(p.verify(None), Verdict::End { cached: 12 });
        let mut q = pass();
        assert_eq!(q.verify(Some(1)), Verdict::Kept);
        assert!(q.unkeep());
        assert_eq!(q.close(), Verdict::End { cached: 11 });
        assert!(!q.unkeep());
    }

    #[test]
    fn an_empty_draft_opens_no_pass() {
        let mut p = Pass::default();
        p.start(5, &[]);
        assert!(!p.is_open());
        assert_eq!(p.verify(Some(1)), Verdict::Plain);
    }
}
