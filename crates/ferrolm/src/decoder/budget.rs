//! A reasoning budget: at most N tokens between a thinking model's opening and closing tags.
//!
//! llama.cpp's `--reasoning-budget` semantics, followed on the generated text:
//!
//! ```text
//! idle ──open tag──▶ counting ──N tokens──▶ forcing MESSAGE + close tag ──▶ done
//!                       └──────close tag────────────────────────────────────▶ done
//! ```
//!
//! - The reasoning starts when the output writes the opening tag, or at once when the prompt
//!   already opened it ([`ReasoningBudget::opened`]).
//! - Each generated token inside the reasoning counts; when N have been generated, the next
//!   steps write the tokens of the budget message and the closing tag instead of sampling
//!   (not in the middle of a UTF-8 character: a token that leaves one incomplete is followed by
//!   sampled tokens until it completes). With N = 0 the closing tag comes first.
//! - A closing tag the model writes itself ends the reasoning. Another opening tag later counts
//!   against what is left of the same budget.
//!
//! The tags are matched on the detokenized text, so a tag split over several tokens, or
//! written as one special token, is seen alike.

/// The reasoning budget of one generation (see the [module doc](self)).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReasoningBudget {
    /// Text that opens the reasoning (`<think>`).
    pub open: String,
    /// Text written to close it when the budget runs out (`</think>`; for gpt-oss the end of
    /// the analysis message and the header of the answer).
    pub close: String,
    /// Text that ends the reasoning when the model writes it (usually `close`; gpt-oss: the end
    /// of the analysis message).
    pub natural_close: String,
    /// The prompt ends inside an opened reasoning block: counting starts with the first token.
    pub opened: bool,
    /// Most tokens of reasoning.
    pub tokens: usize,
    /// Written before the closing tag when the budget runs out (llama.cpp's
    /// `--reasoning-budget-message`); may be empty.
    pub message: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Outside the reasoning, watching for the opening tag.
    Idle,
    /// Inside it, counting tokens.
    Counting,
    /// Writing the forced tokens; the index of the next one.
    Forcing(usize),
}

/// The state of a [`ReasoningBudget`] during one generation.
#[derive(Clone, Debug)]
pub(super) struct BudgetState {
    spec: ReasoningBudget,
    /// The tokens of `message` + `close`, written when the budget runs out.
    forced: Vec<u32>,
    phase: Phase,
    /// Reasoning tokens generated so far (over every block).
    used: usize,
    /// The end of the text since the phase began, long enough to hold a tag.
    tail: String,
}

impl BudgetState {
    /// The state at the start of a generation; `forced` is the tokens of the message and the
    /// closing tag (not empty).
    pub(super) fn new(spec: ReasoningBudget, forced: Vec<u32>) -> BudgetState {
        let mut s = BudgetState { spec, forced, phase: Phase::Idle, used: 0, tail: String::new() };
        if s.spec.opened {
            s.enter_counting();
        }
        s
    }

    /// The token the next step must write instead of sampling, if the budget is forcing one.
    pub(super) fn forced_token(&self) -> Option<u32> {
        match self.phase {
            Phase::Forcing(i) => self.forced.get(i).copied(),
            _ => None,
        }
    }

    /// Takes in the token just produced and the text it made final; `pending_utf8` says that
    /// the text ends inside a UTF-8 character.
    pub(super) fn observe(&mut self, piece: &str, pending_utf8: bool) {
        match self.phase {
            Phase::Forcing(i) => {
                if i + 1 < self.forced.len() {
                    self.phase = Phase::Forcing(i + 1);
                } else {
                    self.phase = Phase::Idle;
                    self.tail.clear();
                }
            }
            Phase::Idle => {
                self.push_tail(piece);
                if self.tail.contains(self.spec.open.as_str()) {
                    self.enter_counting();
                }
            }
            Phase::Counting => {
                self.used += 1;
                self.push_tail(piece);
                if self.tail.contains(self.spec.natural_close.as_str()) {
                    self.phase = Phase::Idle;
                    self.tail.clear();
                } else if self.used >= self.spec.tokens && !pending_utf8 {
                    self.phase = Phase::Forcing(0);
                }
            }
        }
    }

    fn enter_counting(&mut self) {
        self.tail.clear();
        self.phase = if self.used >= self.spec.tokens { Phase::Forcing(0) } else { Phase::Counting };
    }

    /// Appends `piece` to the tail, keeping only as much as a tag can span.
    fn push_tail(&mut self, piece: &str) {
        self.tail.push_str(piece);
        let keep = self.spec.open.len().max(self.spec.natural_close.len()) + piece.len();
        if self.tail.len() > 2 * keep {
            let mut cut = self.tail.len() - keep;
            while !self.tail.is_char_boundary(cut) {
                cut += 1;
            }
            self.tail.drain(..cut);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORCED: [u32; 3] = [900, 901, 902];

    fn spec(opened: bool, tokens: usize) -> ReasoningBudget {
        ReasoningBudget {
            open: "<think>".into(),
            close: "</think>".into(),
            natural_close: "</think>".into(),
            opened,
            tokens,
            message: String::new(),
        }
    }

    /// Feeds pieces (`None`: take the forced token) and returns what each step wrote: a sampled
    /// piece as given, a forced token as `#id`.
    fn run(state: &mut BudgetState, pieces: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        let mut pieces = pieces.iter();
        loop {
            if let Some(t) = state.forced_token() {
                state.observe("", false);
                out.push(format!("#{t}"));
                continue;
            }
            let Some(p) = pieces.next() else { break };
            state.observe(p, false);
            out.push(p.to_string());
        }
        out
    }

    #[test]
    fn an_opened_prompt_counts_from_the_first_token_and_forces_the_close() {
        let mut s = BudgetState::new(spec(true, 3), FORCED.to_vec());
        let out = run(&mut s, &["a", "b", "c", "d", "e"]);
        assert_eq!(out, ["a", "b", "c", "#900", "#901", "#902", "d", "e"]);
    }

    #[test]
    fn a_zero_budget_closes_before_any_reasoning() {
        let mut s = BudgetState::new(spec(true, 0), FORCED.to_vec());
        assert_eq!(run(&mut s, &["x"]), ["#900", "#901", "#902", "x"]);
        let mut s = BudgetState::new(spec(false, 0), FORCED.to_vec());
        assert_eq!(run(&mut s, &["<th", "ink>", "y"]), ["<th", "ink>", "#900", "#901", "#902", "y"]);
    }

    #[test]
    fn counting_starts_at_the_opening_tag_even_split_over_tokens() {
        let mut s = BudgetState::new(spec(false, 2), FORCED.to_vec());
        let out = run(&mut s, &["hi ", "<", "think", ">", "r1", "r2", "r3"]);
        assert_eq!(out, ["hi ", "<", "think", ">", "r1", "r2", "#900", "#901", "#902", "r3"]);
    }

    #[test]
    fn a_natural_close_ends_the_reasoning_and_a_second_block_shares_the_budget() {
        let mut s = BudgetState::new(spec(true, 4), FORCED.to_vec());
        let out = run(&mut s, &["r1", "</", "think>", "answer", "<think>", "r4", "r5", "z"]);
        // r1, "</", "think>" use 3 of 4; the second block gets one token.
        assert_eq!(out, ["r1", "</", "think>", "answer", "<think>", "r4", "#900", "#901", "#902", "r5", "z"]);
    }

    #[test]
    fn no_forcing_inside_a_utf8_character() {
        let mut s = BudgetState::new(spec(true, 1), FORCED.to_vec());
        s.observe("", true);
        assert_eq!(s.forced_token(), None, "the character is not complete");
        s.observe("é", false);
        assert_eq!(s.forced_token(), Some(900));
    }

    #[test]
    fn the_tail_stays_short_on_long_reasoning() {
        let mut s = BudgetState::new(spec(true, usize::MAX), FORCED.to_vec());
        for _ in 0..10_000 {
            s.observe("word ", false);
        }
        assert!(s.tail.len() <= 2 * ("</think>".len() + 5), "tail of {} bytes", s.tail.len());
        s.observe("</think>", false);
        assert_eq!(s.phase, Phase::Idle);
    }
}
