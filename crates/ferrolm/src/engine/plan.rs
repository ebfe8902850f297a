//! Which tokens go into a tick's batch, by [`BatchStrategy`].

use super::BatchStrategy;

/// What one busy slot wants from a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Demand {
    /// Slot index.
    pub(crate) slot: usize,
    /// The slot has a sampled token to run (it is generating).
    pub(crate) decode: bool,
    /// Prompt tokens not yet run (0 when generating).
    pub(crate) prompt_left: usize,
    /// Most prompt tokens this slot may run in one pass (its cache's limit).
    pub(crate) max_chunk: usize,
    /// Arrival order of its request: older prompts are served first.
    pub(crate) order: u64,
}

/// One tick's batch: the slots whose next token runs, and prompt chunks `(slot, n_tokens)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    pub(crate) decode: Vec<usize>,
    pub(crate) prefill: Vec<(usize, usize)>,
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
