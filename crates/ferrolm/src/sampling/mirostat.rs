//! Mirostat (v1) and Mirostat 2.0: truncation that steers the surprise of drawn tokens towards a
//! target `tau`, updating `mu` after each draw (llama.cpp's `mirostat` and `mirostat_v2`).

use super::mt19937::Mt19937;

use super::candidates::Candidates;
use super::truncation;

/// Mirostat state.
#[derive(Debug)]
pub(crate) struct Mirostat {
    /// 1 or 2.
    version: u8,
    tau: f32,
    eta: f32,
    /// Maximum surprise, starts at `2 tau`.
    pub(crate) mu: f32,
}

/// Tokens used to estimate the Zipf exponent (v1), as in llama.cpp.
const M: usize = 100;

impl Mirostat {
    /// A fresh state (`mu = 2 tau`).
    pub(crate) fn new(version: u8, tau: f32, eta: f32) -> Self {
        Self { version, tau, eta, mu: 2.0 * tau }
    }

    /// Restarts at `mu = 2 tau`.
    pub(crate) fn reset(&mut self) {
        self.mu = 2.0 * self.tau;
    }

    /// Truncates, draws a token and updates `mu`. `n_vocab` is the vocabulary size (v1).
    pub(crate) fn sample(&mut self, c: &mut Candidates, n_vocab: usize, rng: &mut Mt19937) -> u32 {
        c.softmax(true);
        if self.version == 1 {
            self.truncate_v1(c, n_vocab);
        } else {
            // Keep the tokens whose surprise -log2 p is at most mu (at least one).
            let keep = c.data.iter().take_while(|x| -x.p.log2() <= self.mu).count().max(1);
            c.truncate(keep);
        }
        c.softmax(true);
        let idx = c.draw_index(rng.uniform_f64());
        let surprise = -c.data[idx].p.log2();
        self.mu -= self.eta * (surprise - self.tau);
        c.data[idx].id
    }

    /// Mirostat v1: estimates the Zipf exponent `s` from the top `M` probabilities and keeps
    /// `k = (ε 2^mu / (1 - N^-ε))^(1/s)` tokens, `ε = s - 1`.
    fn truncate_v1(&self, c: &mut Candidates, n_vocab: usize) {
        let (mut sum_ti_bi, mut sum_ti_sq) = (0.0f32, 0.0f32);
        for i in 0..(M - 1).min(c.len().saturating_sub(1)) {
            if c.data[i + 1].p <= 0.0 {
                break;
            }
            let t_i = ((i + 2) as f32 / (i + 1) as f32).ln();
            let b_i = (c.data[i].p / c.data[i + 1].p).ln();
            sum_ti_bi += t_i * b_i;
            sum_ti_sq += t_i * t_i;
        }
        if sum_ti_sq == 0.0 {
            // One possible token: nothing to estimate.
            c.truncate(1);
            return;
        }
        let s_hat = sum_ti_bi / sum_ti_sq;
        let eps = s_hat - 1.0;
        let k = ((eps * 2f32.powf(self.mu)) / (1.0 - (n_vocab as f32).powf(-eps))).powf(1.0 / s_hat);
        // `as` saturates: NaN → 0, +inf → usize::MAX.
        truncation::top_k(c, (k as usize).max(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_truncates_by_surprise_and_updates_mu() {
        // Surprises: 1, 2, 3, 3 bits. tau 0.5 → mu 1: only the first token stays, p = 1, surprise
        // 0, so mu = 1 - 0.1 (0 - 0.5) = 1.05.
        let mut m = Mirostat::new(2, 0.5, 0.1);
        let mut c = Candidates::from_probs(&[0.125, 0.5, 0.25, 0.125]);
        let tok = m.sample(&mut c, 4, &mut Mt19937::new(1));
        assert_eq!(tok, 1);
        assert!((m.mu - 1.05).abs() < 1e-6, "{}", m.mu);
        // mu 2.5 keeps {0.5, 0.25} → renormalised 2/3, 1/3 (surprises 0.585, 1.585 bits).
        let mut m = Mirostat::new(2, 1.25, 1.0);
        let mut rng = Mt19937::new(2);
        let mut seen = [0usize; 4];
        for _ in 0..3000 {
            m.mu = 2.5;
            let mut c = Candidates::from_probs(&[0.125, 0.5, 0.25, 0.125]);
            let t = m.sample(&mut c, 4, &mut rng);
            seen[t as usize] += 1;
            let expected = if t == 1 { 2.5 - (0.5849625 - 1.25) } else { 2.5 - (1.5849625 - 1.25) };
            assert!((m.mu - expected).abs() < 1e-5);
        }
        assert_eq!(seen[0] + seen[3], 0);
        let f = seen[1] as f32 / 3000.0;
        assert!((f - 2.0 / 3.0).abs() < 0.03, "{f}");
        m.reset();
        assert_eq!(m.mu, 2.5);
    }

    #[test]
    fn v1_keeps_about_k_tokens_for_a_zipf_distribution() {
        // p_i ∝ 1/(i+1) (s = 1 exactly would divide by 0; use s = 1.5): s_hat = 1.5, eps = 0.5.
        let n = 1000usize;
        let w: Vec<f32> = (0..n).map(|i| 1.0 / ((i + 1) as f32).powf(1.5)).collect();
        let sum: f32 = w.iter().sum();
        let probs: Vec<f32> = w.iter().map(|x| x / sum).collect();
        let m = Mirostat::new(1, 3.0, 0.1);
        let mut c = Candidates::from_probs(&probs);
        c.softmax(true);
        m.truncate_v1(&mut c, n);
        let k = ((0.5 * 2f32.powf(6.0)) / (1.0 - (n as f32).powf(-0.5))).powf(1.0 / 1.5);
        assert!((c.len() as f32 - k).abs() <= 1.0, "{} vs {k}", c.len());
        // A single possible token.
        let mut c = Candidates::from_probs(&[0.0, 1.0, 0.0]);
        let mut m = Mirostat::new(1, 3.0, 0.1);
        assert_eq!(m.sample(&mut c, 3, &mut Mt19937::new(0)), 1);
        assert!((m.mu - (6.0 + 0.1 * 3.0)).abs() < 1e-6);
    }
}
