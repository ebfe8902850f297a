//! Repetition, frequency and presence penalties over the last `penalty_last_n` accepted tokens
//! (llama.cpp's `penalties` sampler).

use std::collections::{HashMap, VecDeque};

use super::candidates::Candidates;

/// Penalty settings plus the token history they look at.
#[derive(Debug)]
pub(crate) struct Penalties {
    /// Tokens of history (-1 = all, 0 = off).
    last_n: i32,
    repeat: f32,
    frequency: f32,
    presence: f32,
    history: VecDeque<u32>,
    counts: HashMap<u32, u32>,
}

impl Penalties {
    /// Penalties with an empty history.
    pub(crate) fn new(last_n: i32, repeat: f32, frequency: f32, presence: f32) -> Self {
        let cap = usize::try_from(last_n).unwrap_or(0).min(1 << 16);
        Self {
            last_n,
            repeat,
            frequency,
            presence,
            history: VecDeque::with_capacity(cap),
            counts: HashMap::with_capacity(cap),
        }
    }

    fn disabled(&self) -> bool {
        self.last_n == 0 || (self.repeat == 1.0 && self.frequency == 0.0 && self.presence == 0.0)
    }

    /// Records a token; the oldest leaves the window when it is full.
    pub(crate) fn accept(&mut self, token: u32) {
        if self.disabled() {
            return;
        }
        *self.counts.entry(token).or_insert(0) += 1;
        if self.last_n > 0
            && self.history.len() >= self.last_n as usize
            && let Some(old) = self.history.pop_front()
            && let Some(n) = self.counts.get_mut(&old)
        {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(&old);
            }
        }
        if self.last_n > 0 {
            self.history.push_back(token);
        }
    }

    /// Forgets the history.
    pub(crate) fn reset(&mut self) {
        self.history.clear();
        self.counts.clear();
    }

    fn penalize(&self, logit: f32, count: u32) -> f32 {
        // Dividing a negative logit would make the token more likely: multiply it instead.
        let l = if logit <= 0.0 { logit * self.repeat } else { logit / self.repeat };
        l - count as f32 * self.frequency - self.presence
    }

    /// Applies the penalties to every candidate seen in the window.
    pub(crate) fn apply(&self, c: &mut Candidates) {
        if self.disabled() || self.counts.is_empty() {
            return;
        }
        if c.identity {
            for (&tok, &count) in &self.counts {
                if let Some(x) = c.data.get_mut(tok as usize) {
                    x.logit = self.penalize(x.logit, count);
                }
            }
        } else {
            for x in &mut c.data {
                if let Some(&count) = self.counts.get(&x.id) {
                    x.logit = self.penalize(x.logit, count);
                }
            }
        }
        c.logits_changed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::candidates::assert_probs;

    fn run(history: &[u32], repeat: f32, freq: f32, presence: f32, shuffle: bool) -> Vec<f32> {
        let mut p = Penalties::new(history.len() as i32, repeat, freq, presence);
        for &t in history {
            p.accept(t);
        }
        let mut c = Candidates::from_probs(&[0.2; 5]);
        if shuffle {
            c.data.reverse();
            c.identity = false;
        }
        p.apply(&mut c);
        if shuffle {
            c.data.reverse();
        }
        c.probs_after_dist()
    }

    // Expected values from llama.cpp's tests/test-sampling.cpp.
    #[test]
    fn llama_cpp_cases_by_index_and_by_search() {
        for shuffle in [false, true] {
            assert_probs(&run(&[0], 50.0, 0.0, 0.0, shuffle), &[0.0, 0.25, 0.25, 0.25, 0.25]);
            assert_probs(&run(&[0, 1, 2], 50.0, 0.0, 0.0, shuffle), &[0.0, 0.0, 0.0, 0.5, 0.5]);
            assert_probs(&run(&[0, 1, 2, 0, 0], 50.0, 0.0, 0.0, shuffle), &[0.0, 0.0, 0.0, 0.5, 0.5]);
            assert_probs(
                &run(&[0], 1.0, 5.0, 5.0, shuffle),
                &[0.000011, 0.249997, 0.249997, 0.249997, 0.249997],
            );
            assert_probs(
                &run(&[0, 1, 2], 1.0, 5.0, 5.0, shuffle),
                &[0.000023, 0.000023, 0.000023, 0.499966, 0.499966],
            );
            assert_probs(
                &run(&[0, 1, 2, 0, 0], 1.0, 5.0, 5.0, shuffle),
                &[0.0, 0.000023, 0.000023, 0.499977, 0.499977],
            );
        }
    }

    #[test]
    fn repeat_penalty_divides_positive_and_multiplies_negative_logits() {
        let mut p = Penalties::new(4, 2.0, 0.5, 0.25);
        for t in [0, 1, 1] {
            p.accept(t);
        }
        let mut c = Candidates::default();
        c.fill(&[3.0, -1.0, 1.0, f32::NEG_INFINITY]);
        p.apply(&mut c);
        // token 0: 3/2 - 0.5 - 0.25; token 1: -1*2 - 2*0.5 - 0.25
        assert_eq!(c.data[0].logit, 0.75);
        assert_eq!(c.data[1].logit, -3.25);
        assert_eq!(c.data[2].logit, 1.0);
        assert_eq!(c.data[3].logit, f32::NEG_INFINITY);
    }

    #[test]
    fn window_forgets_old_tokens_and_minus_one_keeps_all() {
        let mut p = Penalties::new(2, 1.0, 1.0, 0.0);
        for t in [0, 1, 2] {
            p.accept(t);
        }
        let mut c = Candidates::default();
        c.fill(&[0.0; 3]);
        p.apply(&mut c);
        assert_eq!(c.data.iter().map(|x| x.logit).collect::<Vec<_>>(), vec![0.0, -1.0, -1.0]);

        let mut all = Penalties::new(-1, 1.0, 1.0, 0.0);
        for t in [0, 1, 2, 0] {
            all.accept(t);
        }
        c.fill(&[0.0; 3]);
        all.apply(&mut c);
        assert_eq!(c.data.iter().map(|x| x.logit).collect::<Vec<_>>(), vec![-2.0, -1.0, -1.0]);
        all.reset();
        c.fill(&[0.0; 3]);
        all.apply(&mut c);
        assert_eq!(c.data.iter().map(|x| x.logit).collect::<Vec<_>>(), vec![0.0; 3]);
    }

    #[test]
    fn disabled_when_neutral_or_zero_window() {
        let mut p = Penalties::new(0, 50.0, 1.0, 1.0);
        p.accept(0);
        let mut c = Candidates::default();
        c.fill(&[1.0, 1.0]);
        p.apply(&mut c);
        assert_eq!(c.data[0].logit, 1.0);
    }
}
