//! Truncation steps: top-k, top-p, min-p, locally typical and top-n-sigma, with llama.cpp's
//! semantics (`src/llama-sampler.cpp`), `min_keep` included.

use super::candidates::{Candidates, by_logit_desc};

/// Top-k: keeps the `k` highest logits, sorted (0 = off). As in llama.cpp, a `k` at least the
/// number of candidates still sorts them. Only the best `k` are sorted (partial selection).
pub(crate) fn top_k(c: &mut Candidates, k: usize) {
    if k == 0 || c.len() == 0 {
        return;
    }
    let k = k.min(c.len());
    c.sort_front(k);
    c.truncate(k);
    c.sorted = true;
}

/// Top-p (nucleus): keeps the shortest most-likely prefix whose probability reaches `p`, with at
/// least `min_keep` tokens (`p >= 1` = off). Probabilities are computed over the current
/// candidates and left unnormalised after the cut. A large unsorted list is first searched in
/// its best 256 tokens only.
pub(crate) fn top_p(c: &mut Candidates, p: f32, min_keep: usize) {
    if p >= 1.0 || c.len() == 0 {
        return;
    }
    c.softmax(false);
    let n = c.len();
    // Only the front `sorted_upto` candidates are known to be in order.
    let mut sorted_upto = if c.sorted {
        n
    } else if n > 1024 {
        if c.sort_front(256) { n } else { 256 }
    } else {
        c.sort();
        n
    };
    let mut cum = 0.0f32;
    let mut keep = n;
    for i in 0..n {
        if i == sorted_upto {
            c.data[i..].sort_unstable_by(by_logit_desc);
            sorted_upto = n;
        }
        cum += c.data[i].p;
        if cum >= p && i + 1 >= min_keep {
            keep = i + 1;
            break;
        }
    }
    c.truncate(keep);
    c.sorted = true;
    c.identity = false;
}

/// Min-p: keeps tokens with probability at least `p` × the largest, i.e. logit at least
/// `max + ln p`, and at least `min_keep` (and one) of them (`p <= 0` = off). An unsorted list
/// keeps its order when enough tokens pass; otherwise the list is sorted and cut.
pub(crate) fn min_p(c: &mut Candidates, p: f32, min_keep: usize) {
    if p <= 0.0 || c.len() == 0 {
        return;
    }
    let min_logit = c.max_logit() + p.ln();
    if !c.sorted {
        let n_pass = c.data.iter().filter(|x| x.logit >= min_logit).count();
        if n_pass > 0 && n_pass >= min_keep {
            if n_pass < c.len() {
                c.data.retain(|x| x.logit >= min_logit);
                c.identity = false;
            }
            return;
        }
        c.sort();
    }
    let n_pass = c.data.iter().take_while(|x| x.logit >= min_logit).count();
    let keep = n_pass.max(min_keep).max(1).min(c.len());
    c.truncate(keep);
}

/// Locally typical sampling: orders tokens by how far their surprise `-ln p` is from the
/// entropy, and keeps the closest until their probability exceeds `p` (with at least
/// `min_keep`; `p >= 1` = off). Probabilities stay those of the softmax before the cut.
pub(crate) fn typical(c: &mut Candidates, p: f32, min_keep: usize) {
    if p >= 1.0 || c.len() == 0 {
        return;
    }
    c.softmax(true);
    let entropy: f32 = c.data.iter().filter(|x| x.p > 0.0).map(|x| -x.p * x.p.ln()).sum();
    let mut scores = std::mem::take(&mut c.scores);
    scores.clear();
    scores.extend(c.data.iter().enumerate().map(|(i, x)| ((-x.p.ln() - entropy).abs(), i as u32)));
    scores.sort_unstable_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut cum = 0.0f32;
    let mut keep = scores.len();
    for (i, &(_, idx)) in scores.iter().enumerate() {
        cum += c.data[idx as usize].p;
        if cum > p && (min_keep == 0 || i + 1 >= min_keep) {
            keep = i + 1;
            break;
        }
    }
    let mut out = std::mem::take(&mut c.scratch);
    out.clear();
    out.extend(scores[..keep].iter().map(|&(_, idx)| c.data[idx as usize]));
    std::mem::swap(&mut c.data, &mut out);
    c.scratch = out;
    c.scores = scores;
    c.sorted = false;
    c.identity = false;
}

/// Top-n-sigma: drops tokens whose logit is below `max - n·σ`, with σ the standard deviation of
/// the finite logits (`n <= 0` = off). llama.cpp sets them to `-inf`; here they are removed,
/// which gives the same distribution.
pub(crate) fn top_n_sigma(c: &mut Candidates, n: f32) {
    if n <= 0.0 || c.len() <= 1 {
        return;
    }
    let (mut max, mut sum, mut count) = (f32::NEG_INFINITY, 0.0f64, 0usize);
    for x in c.data.iter().filter(|x| x.logit != f32::NEG_INFINITY) {
        max = max.max(x.logit);
        sum += f64::from(x.logit);
        count += 1;
    }
    if count == 0 {
        return;
    }
    let mean = sum / count as f64;
    let var = c
        .data
        .iter()
        .filter(|x| x.logit != f32::NEG_INFINITY)
        .map(|x| (f64::from(x.logit) - mean).powi(2))
        .sum::<f64>()
        / count as f64;
    let threshold = max - n * var.sqrt() as f32;
    let before = c.len();
    c.data.retain(|x| x.logit >= threshold);
    if c.len() != before {
        c.identity = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::candidates::assert_probs;

    const P4: [f32; 4] = [0.1, 0.2, 0.3, 0.4];

    fn run(probs: &[f32], f: impl FnOnce(&mut Candidates)) -> Vec<f32> {
        let mut c = Candidates::from_probs(probs);
        f(&mut c);
        c.probs_after_dist()
    }

    // Expected values from llama.cpp's tests/test-sampling.cpp.
    #[test]
    fn top_k_cases() {
        assert_probs(&run(&P4, |c| top_k(c, 1)), &[1.0]);
        assert_probs(&run(&P4, |c| top_k(c, 3)), &[0.44444, 0.33333, 0.22222]);
        assert_probs(&run(&P4, |c| top_k(c, 4)), &[0.4, 0.3, 0.2, 0.1]);
        assert_probs(&run(&P4, |c| top_k(c, 0)), &[0.1, 0.2, 0.3, 0.4]);
    }

    #[test]
    fn top_p_cases() {
        assert_probs(&run(&P4, |c| top_p(c, 0.0, 0)), &[1.0]);
        assert_probs(&run(&P4, |c| top_p(c, 0.7, 0)), &[0.571429, 0.428571]);
        assert_probs(&run(&P4, |c| top_p(c, 0.8, 0)), &[0.44444, 0.33333, 0.22222]);
        assert_probs(&run(&P4, |c| top_p(c, 1.0, 0)), &[0.1, 0.2, 0.3, 0.4]);
        assert_probs(&run(&P4, |c| top_p(c, 0.0, 3)), &[0.44444, 0.33333, 0.22222]);
    }

    #[test]
    fn min_p_cases() {
        let all = [0.1, 0.2, 0.3, 0.4];
        assert_probs(&run(&P4, |c| min_p(c, 0.0, 0)), &all);
        assert_probs(&run(&P4, |c| min_p(c, 0.24, 0)), &all);
        assert_probs(&run(&P4, |c| min_p(c, 0.26, 0)), &[0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9]);
        assert_probs(&run(&P4, |c| min_p(c, 0.49, 0)), &[0.2 / 0.9, 0.3 / 0.9, 0.4 / 0.9]);
        assert_probs(&run(&P4, |c| min_p(c, 0.51, 0)), &[0.3 / 0.7, 0.4 / 0.7]);
        assert_probs(&run(&P4, |c| min_p(c, 0.74, 0)), &[0.3 / 0.7, 0.4 / 0.7]);
        assert_probs(&run(&P4, |c| min_p(c, 0.76, 0)), &[1.0]);
        assert_probs(&run(&P4, |c| min_p(c, 1.0, 0)), &[1.0]);
        // min_keep forces the sorted path: the best three, sorted.
        assert_probs(&run(&P4, |c| min_p(c, 0.76, 3)), &[0.4 / 0.9, 0.3 / 0.9, 0.2 / 0.9]);
    }

    #[test]
    fn typical_cases() {
        let mut c = Candidates::from_probs(&[0.97, 0.01, 0.01, 0.01]);
        typical(&mut c, 0.5, 0);
        assert_probs(&c.probs(), &[0.97]);
        let mut c = Candidates::from_probs(&[0.4, 0.2, 0.2, 0.2]);
        typical(&mut c, 0.5, 0);
        assert_probs(&c.probs(), &[0.2, 0.2, 0.2]);
        let mut c = Candidates::from_probs(&[0.4, 0.2, 0.2, 0.2]);
        typical(&mut c, 0.5, 4);
        assert_eq!(c.len(), 4);
        let mut c = Candidates::from_probs(&[0.4, 0.2, 0.2, 0.2]);
        typical(&mut c, 1.0, 0);
        assert_probs(&c.probs(), &[0.4, 0.2, 0.2, 0.2]);
    }

    #[test]
    fn top_n_sigma_cases() {
        // llama.cpp masks the dropped tokens ({0, 0, 0.428571, 0.571429}); they are removed here.
        assert_probs(&run(&P4, |c| top_n_sigma(c, 1.0)), &[0.428571, 0.571429]);
        assert_probs(&run(&P4, |c| top_n_sigma(c, 0.0)), &P4);
        assert_probs(&run(&P4, |c| top_n_sigma(c, 3.0)), &P4);
    }

    #[test]
    fn steps_handle_masked_logits() {
        let logits = [f32::NEG_INFINITY, 1.0, f32::NEG_INFINITY, 2.0, 0.5, f32::NEG_INFINITY];
        let fresh = || {
            let mut c = Candidates::default();
            c.fill(&logits);
            c
        };
        let mut c = fresh();
        top_n_sigma(&mut c, 1.0);
        assert!(c.data.iter().all(|x| x.logit.is_finite()));
        let mut c = fresh();
        typical(&mut c, 0.9, 0);
        assert!(c.data.iter().all(|x| x.p.is_finite()));
        assert!(c.data.iter().all(|x| x.logit.is_finite()), "{:?}", c.data);
        let mut c = fresh();
        min_p(&mut c, 0.01, 0);
        assert_eq!(c.len(), 3);
        let mut c = fresh();
        top_p(&mut c, 0.99999, 0);
        assert!(c.data.iter().all(|x| x.logit.is_finite()));
        let mut c = fresh();
        top_k(&mut c, 5);
        let p = c.probs_after_dist();
        assert!(p.iter().all(|x| x.is_finite()));
        assert_eq!(&p[3..], &[0.0, 0.0]);
    }

    /// llama.cpp's `test_sampler_queue`: 10000 tokens with logits `ln(id)`, steps in sequence.
    #[test]
    fn queue_of_truncations_on_a_large_vocabulary() {
        let n = 10_000usize;
        let logits: Vec<f32> = (0..n).map(|i| (i as f32).ln()).collect();
        for seq in ["kp", "km", "pk", "pm", "mk", "mp", "kpm", "kmp", "pkm", "pmk", "mkp", "mpk"] {
            let mut c = Candidates::default();
            c.fill(&logits);
            let mut min_id = 0usize;
            for s in seq.chars() {
                match s {
                    'k' => {
                        top_k(&mut c, 100);
                        min_id = min_id.max(n - 100);
                        assert_eq!(c.len(), 100.min(c.len()));
                        assert_eq!(c.data[0].id as usize, n - 1);
                        assert_eq!(c.data[c.len() - 1].id as usize, min_id);
                    }
                    'p' => {
                        top_p(&mut c, 0.8, 1);
                        // Probabilities are proportional to ids: keep the largest ids until
                        // their sum reaches 80% of the remaining total.
                        let total: f64 = (min_id..n).map(|i| i as f64).sum();
                        let (mut cum, mut expected) = (0.0f64, 0usize);
                        for id in (min_id..n).rev() {
                            cum += id as f64;
                            expected += 1;
                            if cum >= 0.8 * total {
                                break;
                            }
                        }
                        assert!(c.len().abs_diff(expected) <= 1, "{seq}: {} vs {expected}", c.len());
                        min_id = c.data[c.len() - 1].id as usize;
                        assert_eq!(c.data[0].id as usize, n - 1);
                    }
                    'm' => {
                        min_p(&mut c, 0.1, 1);
                        // p_i >= 0.1 p_max  <=>  id >= 0.1 (n - 1)
                        let lo = (0.1f32 * (n - 1) as f32).ceil() as usize;
                        min_id = min_id.max(lo);
                        assert_eq!(c.len(), n - min_id, "{seq}");
                        assert!(c.data.iter().all(|x| x.id as usize >= min_id));
                    }
                    _ => unreachable!(),
                }
            }
        }
    }
}
