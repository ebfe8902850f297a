//! XTC ("exclude top choices"): with some probability, removes every token at least as likely
//! as `threshold` except the least likely of them (llama.cpp's `xtc` sampler).

use super::candidates::Candidates;
use super::mt19937::Mt19937;

/// Applies XTC; `rng` decides whether it triggers. Off when `probability <= 0`,
/// `threshold > 0.5` or fewer than two candidates (no random number is drawn then).
pub(crate) fn apply(
    c: &mut Candidates,
    probability: f32,
    threshold: f32,
    min_keep: usize,
    rng: &mut Mt19937,
) {
    if probability <= 0.0 || threshold > 0.5 || c.len() < 2 {
        return;
    }
    let chance = rng.uniform_f32();
    if chance > probability {
        return;
    }
    c.softmax(true);
    // The last of the leading tokens with p >= threshold stays; those before it go.
    let pos_last = c.data.iter().take_while(|x| x.p >= threshold).count().saturating_sub(1);
    if pos_last > 0 && c.len() - pos_last >= min_keep {
        c.data.drain(..pos_last);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::candidates::assert_probs;

    fn run(probs: &[f32], probability: f32, threshold: f32, min_keep: usize) -> Vec<f32> {
        let mut c = Candidates::from_probs(probs);
        apply(&mut c, probability, threshold, min_keep, &mut Mt19937::new(0));
        c.probs()
    }

    // Expected values from llama.cpp's tests/test-sampling.cpp (probability 1 instead of 0.99 so
    // the outcome does not depend on the random stream).
    #[test]
    fn llama_cpp_cases() {
        let p = [0.4f32, 0.3, 0.2, 0.1];
        assert_probs(&run(&p, 1.0, 0.09, 0), &[0.1]);
        assert_probs(&run(&p, 1.0, 0.19, 0), &[0.2, 0.1]);
        assert_probs(&run(&p, 1.0, 0.29, 0), &[0.3, 0.2, 0.1]);
        assert_probs(&run(&p, 1.0, 0.39, 0), &[0.4, 0.3, 0.2, 0.1]);
    }

    #[test]
    fn off_settings_and_min_keep() {
        let p = [0.4f32, 0.3, 0.2, 0.1];
        assert_probs(&run(&p, 0.0, 0.09, 0), &p);
        assert_probs(&run(&p, 1.0, 0.6, 0), &p);
        assert_probs(&run(&p, 1.0, 0.09, 2), &p);
        assert_probs(&run(&p, 1.0, 0.19, 2), &[0.2, 0.1]);
    }

    #[test]
    fn triggers_with_the_given_probability() {
        let mut rng = Mt19937::new(5);
        let n = 4000;
        let mut hits = 0;
        for _ in 0..n {
            let mut c = Candidates::from_probs(&[0.6, 0.3, 0.1]);
            apply(&mut c, 0.25, 0.2, 0, &mut rng);
            if c.len() == 2 {
                hits += 1;
            }
        }
        let f = hits as f32 / n as f32;
        assert!((f - 0.25).abs() < 0.03, "{f}");
    }
}
