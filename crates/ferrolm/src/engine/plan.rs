//! Which tokens go into a tick's batch, by [`BatchStrategy`] or by a [`CustomStrategy`].

use super::BatchStrategy;

/// What one busy slot wants from a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Demand {
    /// Slot index.
    pub slot: usize,
    /// The slot has a sampled token to run (it is generating).
    pub decode: bool,
    /// Prompt tokens this slot may run this tick (0 when generating): what is left of its
    /// prompt, up to the end of the current chunk.
    pub prompt_left: usize,
    /// Most prompt tokens this slot may run in one pass (its cache's limit).
    pub max_chunk: usize,
    /// Arrival order of its request: older prompts are served first.
    pub order: u64,
}

/// One tick's batch: the slots whose next token runs, and prompt chunks `(slot, n_tokens)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Generating slots whose next token runs this tick.
    pub decode: Vec<usize>,
    /// Prefilling slots and how many of their prompt tokens run this tick.
    pub prefill: Vec<(usize, usize)>,
}

impl Plan {
    /// Whether the plan can run: every slot at most once, decode only for generating slots,
    /// prompt chunks of 1..=`prompt_left` (and `max_chunk`) tokens, at most `budget` tokens in
    /// all, and at least one token when anything is waiting (so the engine always progresses).
    pub fn is_valid(&self, demands: &[Demand], budget: usize) -> bool {
        let find = |slot: usize| demands.iter().find(|d| d.slot == slot);
        let mut seen = std::collections::HashSet::new();
        let decode_ok = self.decode.iter().all(|&s| seen.insert(s) && find(s).is_some_and(|d| d.decode));
        let prefill_ok = self.prefill.iter().all(|&(s, n)| {
            seen.insert(s)
                && find(s)
                    .is_some_and(|d| !d.decode && n >= 1 && n <= d.prompt_left && n <= d.max_chunk.max(1))
        });
        let total = self.decode.len() + self.prefill.iter().map(|p| p.1).sum::<usize>();
        let waiting = demands.iter().any(|d| d.decode || d.prompt_left > 0);
        decode_ok && prefill_ok && total <= budget.max(1) && (total > 0 || !waiting)
    }
}

/// A batch strategy written outside the library (an Elixir behaviour, a Python callable…): the
/// engine asks it for each tick's [`Plan`]. A plan that is not [valid](Plan::is_valid), or
/// `None`, falls back to the configured [`BatchStrategy`] for that tick.
pub trait CustomStrategy: Send {
    /// The plan for one tick of at most `budget` tokens, given what every busy slot wants.
    fn plan(&mut self, demands: &[Demand], budget: usize) -> Option<Plan>;
}

/// Fills a batch of at most `budget` tokens (at least one token always runs when anything is
/// waiting):
/// - decode-first: every generating slot's token, then prompt chunks, oldest request first,
///   in the room left;
/// - prefill-first: prompt chunks first, then generating slots in the room left;
/// - balanced: prompts get at least half of the budget when they need it, generating slots the
///   rest, and either side's unused room goes to the other.
pub(crate) fn plan_tick(strategy: BatchStrategy, budget: usize, demands: &[Demand]) -> Plan {
    let budget = budget.max(1);
    let mut decoders: Vec<usize> = demands.iter().filter(|d| d.decode).map(|d| d.slot).collect();
    let mut prompts: Vec<&Demand> = demands.iter().filter(|d| !d.decode && d.prompt_left > 0).collect();
    prompts.sort_by_key(|d| d.order);
    let prompt_need: usize = prompts.iter().map(|d| d.prompt_left.min(d.max_chunk.max(1))).sum();
    let prompt_room = match strategy {
        BatchStrategy::DecodeFirst => budget.saturating_sub(decoders.len()),
        BatchStrategy::PrefillFirst => budget,
        BatchStrategy::Balanced => budget.saturating_sub(decoders.len()).max(budget / 2).min(prompt_need),
    };
    let mut plan = Plan::default();
    let mut left = prompt_room;
    for d in prompts {
        if left == 0 {
            break;
        }
        let n = d.prompt_left.min(d.max_chunk.max(1)).min(left);
        plan.prefill.push((d.slot, n));
        left -= n;
    }
    let used: usize = plan.prefill.iter().map(|p| p.1).sum();
    decoders.truncate(budget - used);
    plan.decode = decoders;
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoding(slot: usize) -> Demand {
        Demand { slot, decode: true, prompt_left: 0, max_chunk: 512, order: slot as u64 }
    }

    fn prompt(slot: usize, left: usize, order: u64) -> Demand {
        Demand { slot, decode: false, prompt_left: left, max_chunk: 512, order }
    }

    #[test]
    fn decode_first_runs_every_generating_slot_then_fills_with_prompts() {
        let d = [decoding(0), prompt(1, 1000, 5), decoding(2), prompt(3, 100, 1)];
        let p = plan_tick(BatchStrategy::DecodeFirst, 512, &d);
        assert_eq!(p.decode, vec![0, 2]);
        // Oldest prompt first, then the next one with what is left (510 - 100).
        assert_eq!(p.prefill, vec![(3, 100), (1, 410)]);
    }

    #[test]
    fn prefill_first_lets_prompts_take_the_tick() {
        let d = [decoding(0), prompt(1, 1000, 0), decoding(2)];
        let p = plan_tick(BatchStrategy::PrefillFirst, 512, &d);
        assert_eq!(p.prefill, vec![(1, 512)]);
        assert!(p.decode.is_empty());
        // A short prompt leaves room for the generating slots.
        let d = [decoding(0), prompt(1, 10, 0), decoding(2)];
        let p = plan_tick(BatchStrategy::PrefillFirst, 512, &d);
        assert_eq!((p.prefill, p.decode), (vec![(1, 10)], vec![0, 2]));
    }

    #[test]
    fn balanced_splits_the_budget_when_both_sides_want_it() {
        let decoders: Vec<Demand> = (0..8).map(decoding).collect();
        let mut d = decoders.clone();
        d.push(prompt(8, 1000, 0));
        // With a budget of 12: prompts get 6 (half), decoders the other 6.
        let p = plan_tick(BatchStrategy::Balanced, 12, &d);
        assert_eq!(p.prefill, vec![(8, 6)]);
        assert_eq!(p.decode.len(), 6);
        // Decode-first would leave the prompt 4.
        let p = plan_tick(BatchStrategy::DecodeFirst, 12, &d);
        assert_eq!((p.prefill, p.decode.len()), (vec![(8, 4)], 8));
        // A short prompt leaves its unused half to the decoders.
        let mut d = decoders;
        d.push(prompt(8, 2, 0));
        let p = plan_tick(BatchStrategy::Balanced, 12, &d);
        assert_eq!((p.prefill, p.decode.len()), (vec![(8, 2)], 8));
    }

    #[test]
    fn validation_rejects_plans_that_cannot_run() {
        let d = [decoding(0), prompt(1, 10, 0)];
        let ok = Plan { decode: vec![0], prefill: vec![(1, 10)] };
        assert!(ok.is_valid(&d, 11));
        assert!(!ok.is_valid(&d, 10), "over budget");
        assert!(!Plan { decode: vec![1], prefill: vec![] }.is_valid(&d, 64), "slot 1 is not generating");
        assert!(!Plan { decode: vec![], prefill: vec![(1, 11)] }.is_valid(&d, 64), "more than its prompt");
        assert!(!Plan { decode: vec![], prefill: vec![(0, 1)] }.is_valid(&d, 64), "slot 0 is generating");
        assert!(!Plan { decode: vec![0, 0], prefill: vec![] }.is_valid(&d, 64), "a slot twice");
        assert!(!Plan { decode: vec![7], prefill: vec![] }.is_valid(&d, 64), "no such slot");
        assert!(!Plan::default().is_valid(&d, 64), "no progress while work waits");
        assert!(Plan::default().is_valid(&[], 64));
        // Every built-in plan is valid.
        for s in [BatchStrategy::DecodeFirst, BatchStrategy::PrefillFirst, BatchStrategy::Balanced] {
            assert!(plan_tick(s, 4, &d).is_valid(&d, 4));
        }
    }

    #[test]
    fn chunks_respect_each_slots_limit_and_nothing_is_lost() {
        let d =
            [Demand { slot: 0, decode: false, prompt_left: 300, max_chunk: 64, order: 0 }, prompt(1, 5, 1)];
        let p = plan_tick(BatchStrategy::DecodeFirst, 512, &d);
        assert_eq!(p.prefill, vec![(0, 64), (1, 5)]);
        assert_eq!(plan_tick(BatchStrategy::Balanced, 512, &[]), Plan::default());
        // A zero budget still makes progress.
        let p = plan_tick(BatchStrategy::DecodeFirst, 0, &[decoding(3)]);
        assert_eq!(p.decode, vec![3]);
    }
}
