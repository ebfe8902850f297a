//! Temperature, plain or dynamic (llama.cpp's `temp` and `temp_ext` samplers).

use super::candidates::Candidates;

/// Divides the logits by `t`; `t <= 0` keeps only the most likely token (greedy; the first of
/// equal maxima in the current order). llama.cpp sets the other logits to `-inf` instead of
/// removing them, which gives the same draw.
pub(crate) fn apply(c: &mut Candidates, t: f32) {
    if c.len() == 0 {
        return;
    }
    if t <= 0.0 {
        let mut best = 0;
        for (i, x) in c.data.iter().enumerate() {
            if x.logit > c.data[best].logit {
                best = i;
            }
        }
        c.data.swap(0, best);
        c.truncate(1);
        c.sorted = true;
        c.identity = c.data[0].id == 0;
        return;
    }
    if t != 1.0 {
        for x in &mut c.data {
            x.logit /= t;
        }
    }
}

/// Dynamic temperature: with `range > 0` the temperature is
/// `min + (max - min) * (H / ln n)^exponent` for `min = max(0, t - range)`, `max = t + range`,
/// `H` the entropy of the candidates and `n` their number; then the probabilities are
/// recomputed. With `range <= 0` it is the plain temperature `t`.
pub(crate) fn apply_dynamic(c: &mut Candidates, t: f32, range: f32, exponent: f32) {
    if range <= 0.0 {
        apply(c, t);
        return;
    }
    if c.len() <= 1 {
        return;
    }
    let min_temp = (t - range).max(0.0);
    let max_temp = t + range;
    let max_entropy = (c.len() as f32).ln();
    c.softmax(true);
    let entropy: f32 = c.data.iter().filter(|x| x.p > 0.0).map(|x| -x.p * x.p.ln()).sum();
    let normalized = entropy / max_entropy;
    let dyn_temp = min_temp + (max_temp - min_temp) * normalized.powf(exponent);
    apply(c, dyn_temp);
    c.softmax(false);
}

/// The temperature dynamic temperature picks for these candidates (for tests and diagnostics).
#[cfg(test)]
fn dynamic_value(probs: &[f32], t: f32, range: f32, exponent: f32) -> f32 {
    let h: f32 = probs.iter().filter(|&&p| p > 0.0).map(|&p| -p * p.ln()).sum();
    let lo = (t - range).max(0.0);
    lo + (t + range - lo) * (h / (probs.len() as f32).ln()).powf(exponent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::candidates::assert_probs;

    // llama.cpp's tests/test-sampling.cpp: temperature 1 keeps, 0 is greedy.
    #[test]
    fn plain_temperature() {
        let p = [0.1f32, 0.2, 0.3, 0.4];
        let mut c = Candidates::from_probs(&p);
        apply(&mut c, 1.0);
        assert_probs(&c.probs_after_dist(), &p);
        let mut c = Candidates::from_probs(&p);
        apply(&mut c, 0.0);
        assert_eq!(c.data[0].id, 3);
        assert_probs(&c.probs_after_dist(), &[1.0]);
        // t = 0.5 squares the probabilities: 0.01, 0.04, 0.09, 0.16 over 0.30.
        let mut c = Candidates::from_probs(&p);
        apply(&mut c, 0.5);
        assert_probs(&c.probs_after_dist(), &[0.01 / 0.3, 0.04 / 0.3, 0.09 / 0.3, 0.16 / 0.3]);
        // Greedy keeps the first of equal maxima; -inf stays -inf.
        let mut c = Candidates::default();
        c.fill(&[f32::NEG_INFINITY, 2.0, 2.0]);
        apply(&mut c, -1.0);
        assert_eq!(c.data.iter().map(|x| x.id).collect::<Vec<_>>(), vec![1]);
        let mut c = Candidates::default();
        c.fill(&[f32::NEG_INFINITY, 2.0]);
        apply(&mut c, 2.0);
        assert_eq!(c.data[0].logit, f32::NEG_INFINITY);
        assert_eq!(c.data[1].logit, 1.0);
    }

    #[test]
    fn dynamic_temperature_follows_the_entropy() {
        let p = [0.1f32, 0.2, 0.3, 0.4];
        // Range 0: plain temperature (llama.cpp's test_temp_ext cases).
        let mut c = Candidates::from_probs(&p);
        apply_dynamic(&mut c, 1.0, 0.0, 1.0);
        assert_probs(&c.probs_after_dist(), &p);
        let mut c = Candidates::from_probs(&p);
        apply_dynamic(&mut c, 0.0, 0.0, 1.0);
        assert_probs(&c.probs_after_dist(), &[1.0]);

        // H = 1.279854, ln 4 = 1.386294, H/ln4 = 0.923218; t = 0.5 + 1.0 * 0.923218 = 1.423218.
        let t = dynamic_value(&p, 1.0, 0.5, 1.0);
        assert!((t - 1.423218).abs() < 1e-5, "{t}");
        let mut c = Candidates::from_probs(&p);
        apply_dynamic(&mut c, 1.0, 0.5, 1.0);
        let w: Vec<f32> = [0.4f32, 0.3, 0.2, 0.1].iter().map(|q| q.powf(1.0 / t)).collect();
        let s: f32 = w.iter().sum();
        let expected: Vec<f32> = w.iter().map(|x| x / s).collect();
        assert_probs(&c.probs(), &expected);
        assert_eq!(c.data[0].id, 3);

        // Exponent 2 lowers the normalised entropy: t = 0.5 + 0.923218^2.
        let t2 = dynamic_value(&p, 1.0, 0.5, 2.0);
        assert!((t2 - (0.5 + 0.923218f32.powi(2))).abs() < 1e-5);
        // A uniform distribution has normalised entropy 1: the top of the range.
        assert!((dynamic_value(&[0.25; 4], 1.0, 0.5, 1.0) - 1.5).abs() < 1e-5);
        // Range reaching below 0 is floored at 0: a certain token gives temperature 0 (greedy).
        let mut c = Candidates::from_probs(&[1.0, 0.0]);
        apply_dynamic(&mut c, 0.3, 0.5, 1.0);
        assert_eq!(c.len(), 1);
    }
}
