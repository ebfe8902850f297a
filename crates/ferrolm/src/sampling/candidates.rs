//! The working set the steps operate on: candidate tokens plus what is known about their order,
//! with the sorting, softmax and draw helpers the steps share. Buffers are reused across tokens.

use std::cmp::Ordering;

use super::Candidate;

/// Descending by logit; ties by ascending id, so every sort is deterministic and the first of
/// equal maxima (the lowest id) comes first, as [`super::argmax`] picks it.
pub(crate) fn by_logit_desc(a: &Candidate, b: &Candidate) -> Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// Candidate tokens of one sampling call.
#[derive(Debug, Default)]
pub(crate) struct Candidates {
    /// The candidates.
    pub(crate) data: Vec<Candidate>,
    /// `data` is sorted by [`by_logit_desc`].
    pub(crate) sorted: bool,
    /// `data[i].id == i` for every `i` (the untouched vocabulary, possibly cut at the end), so a
    /// token is found by indexing.
    pub(crate) identity: bool,
    /// Scratch for steps that rebuild the list (typical-p).
    pub(crate) scratch: Vec<Candidate>,
    /// Scratch scores with candidate indices (typical-p).
    pub(crate) scores: Vec<(f32, u32)>,
}

impl Candidates {
    /// Refills from logits (NaN counts as `-inf`).
    pub(crate) fn fill(&mut self, logits: &[f32]) {
        self.data.clear();
        self.data.extend(logits.iter().enumerate().map(|(i, &l)| Candidate {
            id: i as u32,
            logit: if l.is_nan() { f32::NEG_INFINITY } else { l },
            p: 0.0,
        }));
        self.sorted = false;
        self.identity = true;
    }

    /// Test helper: candidates whose logits are `ln(p)` and whose `p` are the given values.
    #[cfg(test)]
    pub(crate) fn from_probs(probs: &[f32]) -> Candidates {
        let data = probs.iter().enumerate().map(|(i, &p)| Candidate { id: i as u32, logit: p.ln(), p });
        Candidates { data: data.collect(), identity: true, ..Candidates::default() }
    }

    /// Number of candidates.
    pub(crate) fn len(&self) -> usize {
        self.data.len()
    }

    /// The largest logit (`-inf` when empty).
    pub(crate) fn max_logit(&self) -> f32 {
        if self.sorted {
            return self.data.first().map_or(f32::NEG_INFINITY, |c| c.logit);
        }
        self.data.iter().fold(f32::NEG_INFINITY, |m, c| m.max(c.logit))
    }

    /// Marks that logits changed in place (the order may no longer hold).
    pub(crate) fn logits_changed(&mut self) {
        self.sorted = false;
    }

    /// Sorts all candidates (no-op when already sorted).
    pub(crate) fn sort(&mut self) {
        if !self.sorted {
            self.data.sort_unstable_by(by_logit_desc);
            self.sorted = true;
            self.identity = false;
        }
    }

    /// Puts the `k` largest candidates, sorted, at the front; the rest follow in no order.
    /// Returns whether the whole list is now sorted.
    pub(crate) fn sort_front(&mut self, k: usize) -> bool {
        if self.sorted {
            return true;
        }
        if k >= self.data.len() {
            self.sort();
            return true;
        }
        if k > 0 {
            self.data.select_nth_unstable_by(k - 1, by_logit_desc);
            self.data[..k].sort_unstable_by(by_logit_desc);
        }
        self.identity = false;
        false
    }

    /// Keeps the first `n` candidates.
    pub(crate) fn truncate(&mut self, n: usize) {
        self.data.truncate(n);
    }

    /// Fills `p` with the softmax of the logits, sorting first when `sort` is set.
    ///
    /// With a `+inf` logit the probability is shared among the `+inf` tokens; with only `-inf`
    /// logits it is uniform. `-inf` tokens otherwise get probability 0.
    pub(crate) fn softmax(&mut self, sort: bool) {
        if sort {
            self.sort();
        }
        let max = self.max_logit();
        if self.data.is_empty() {
            return;
        }
        if max.is_infinite() {
            let hit = |c: &Candidate| max == f32::NEG_INFINITY || c.logit == f32::INFINITY;
            let n = self.data.iter().filter(|c| hit(c)).count() as f32;
            for c in &mut self.data {
                c.p = if hit(c) { 1.0 / n } else { 0.0 };
            }
            return;
        }
        let mut sum = 0.0f64;
        for c in &mut self.data {
            c.p = (c.logit - max).exp();
            sum += f64::from(c.p);
        }
        let inv = (1.0 / sum) as f32;
        for c in &mut self.data {
            c.p *= inv;
        }
    }

    /// The softmax of the logits into `p`, and the index the uniform number `r` (in `[0, 1)`)
    /// draws from it, as llama.cpp's `dist` sampler picks: the first candidate at which the
    /// running sum of `exp(logit - max)` (in candidate order) reaches `r` times their total.
    /// A candidate with probability 0 is never drawn while another has more.
    pub(crate) fn draw(&mut self, r: f64) -> usize {
        let max = self.max_logit();
        if !max.is_finite() {
            self.softmax(false);
            return self.draw_index(r);
        }
        let mut sum = 0.0f64;
        for c in &mut self.data {
            c.p = (c.logit - max).exp();
            sum += f64::from(c.p);
        }
        let target = sum * r;
        let (mut run, mut picked, mut last) = (0.0f64, None, 0);
        for (i, c) in self.data.iter_mut().enumerate() {
            if c.p > 0.0 {
                run += f64::from(c.p);
                last = i;
                if picked.is_none() && run >= target {
                    picked = Some(i);
                }
            }
            c.p = (f64::from(c.p) / sum) as f32;
        }
        picked.unwrap_or(last)
    }

    /// Draws an index from the (normalised) probabilities `p` with the uniform number `r` (in
    /// `[0, 1)`). A candidate with probability 0 is never drawn while another has more.
    pub(crate) fn draw_index(&self, r: f64) -> usize {
        let total: f64 = self.data.iter().map(|c| f64::from(c.p)).sum();
        let target = r * total;
        let mut acc = 0.0f64;
        let mut last = None;
        for (i, c) in self.data.iter().enumerate() {
            if c.p > 0.0 {
                acc += f64::from(c.p);
                last = Some(i);
                if acc > target {
                    return i;
                }
            }
        }
        last.unwrap_or(0)
    }

    /// Test helper: the probabilities after a softmax over the remaining candidates, in order
    /// (what llama.cpp's tests read after its `dist` sampler).
    #[cfg(test)]
    pub(crate) fn probs_after_dist(&mut self) -> Vec<f32> {
        self.softmax(false);
        self.data.iter().map(|c| c.p).collect()
    }

    /// Test helper: the current probabilities, in order.
    #[cfg(test)]
    pub(crate) fn probs(&self) -> Vec<f32> {
        self.data.iter().map(|c| c.p).collect()
    }
}

/// Test helper: asserts two probability lists match within 1e-5 (llama.cpp's tolerance).
#[cfg(test)]
#[track_caller]
pub(crate) fn assert_probs(actual: &[f32], expected: &[f32]) {
    assert_eq!(actual.len(), expected.len(), "{actual:?} vs {expected:?}");
    for (a, e) in actual.iter().zip(expected) {
        assert!((a - e).abs() < 1e-5, "{actual:?} vs {expected:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::mt19937::Mt19937;

    #[test]
    fn softmax_handles_masked_and_infinite_logits() {
        let mut c = Candidates::default();
        c.fill(&[0.0, f32::NEG_INFINITY, 0.0, f32::NAN]);
        c.softmax(false);
        assert_probs(&c.probs(), &[0.5, 0.0, 0.5, 0.0]);
        c.fill(&[f32::NEG_INFINITY; 4]);
        c.softmax(false);
        assert_probs(&c.probs(), &[0.25; 4]);
        c.fill(&[1.0, f32::INFINITY, 3.0]);
        c.softmax(true);
        assert_eq!(c.data[0].id, 1);
        assert_probs(&c.probs(), &[1.0, 0.0, 0.0]);
    }

    #[test]
    fn sort_front_selects_the_best_in_order_with_id_tie_break() {
        let mut c = Candidates::default();
        c.fill(&[1.0, 5.0, 3.0, 5.0, 2.0, 4.0]);
        assert!(!c.sort_front(3));
        let ids: Vec<u32> = c.data[..3].iter().map(|x| x.id).collect();
        assert_eq!(ids, vec![1, 3, 5]);
        assert!(!c.identity);
    }

    #[test]
    fn draw_never_picks_zero_probability() {
        let mut c = Candidates::default();
        c.fill(&[f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY]);
        c.softmax(false);
        let mut rng = Mt19937::new(1);
        for _ in 0..2000 {
            let i = c.draw_index(rng.uniform_f64());
            assert!(i == 1 || i == 3, "{i}");
            let i = c.draw(rng.uniform_f64());
            assert!(i == 1 || i == 3, "{i}");
        }
        for r in [0.0, 0.5 - 1e-12, 0.5, 1.0 - 1e-16] {
            let i = c.draw(r);
            assert!(i == 1 || i == 3, "{r} {i}");
        }
    }

    #[test]
    fn draw_picks_where_the_running_sum_reaches_the_target_and_normalises() {
        // exp(logit - max): 1, 1/e, 1/e; llama.cpp's rule: the first i with Σ_{j<=i} >= r Σ.
        let mut c = Candidates::default();
        let e = f64::from((-1.0f32).exp());
        let total = 1.0 + 2.0 * e;
        let (a, b) = (1.0 / total, (1.0 + e) / total);
        for (r, want) in [(0.0, 0), (a - 1e-9, 0), (a + 1e-9, 1), (b - 1e-9, 1), (b + 1e-9, 2)] {
            c.fill(&[2.0, 1.0, 1.0]);
            assert_eq!(c.draw(r), want, "r {r}");
        }
        assert_probs(&c.probs(), &[(1.0 / total) as f32, (e / total) as f32, (e / total) as f32]);
    }
}
