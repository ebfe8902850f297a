//! Log-probabilities of sampled (or prompt) tokens under the raw logits.

/// A token's log-probability under the model (log-softmax of the raw logits) and the most likely
/// alternatives at its position.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    /// The token.
    pub id: u32,
    /// Its log-probability.
    pub logprob: f32,
    /// The most likely tokens at this position with their log-probabilities, best first.
    pub top: Vec<(u32, f32)>,
}

/// `token`'s log-probability under `logits` (log-softmax) and the `k` most likely tokens
/// (ties broken by the lower id).
pub fn token_logprob(logits: &[f32], token: u32, k: usize) -> TokenLogprob {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
    let log_z = max + sum.ln() as f32;
    let lp = |id: u32| logits.get(id as usize).map_or(f32::NEG_INFINITY, |&l| l - log_z);
    let top = if k == 0 {
        Vec::new()
    } else {
        let k = k.min(logits.len());
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let by_logit = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]).then(a.cmp(b));
        idx.select_nth_unstable_by(k - 1, by_logit);
        idx.truncate(k);
        idx.sort_by(by_logit);
        idx.into_iter().map(|id| (id, lp(id))).collect()
    };
    TokenLogprob { id: token, logprob: lp(token), top }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logprobs_are_a_log_softmax_with_sorted_alternatives() {
        let logits = [1.0f32, 3.0, 2.0, 3.0, -1.0];
        let lp = token_logprob(&logits, 2, 3);
        let z: f64 = logits.iter().map(|&l| f64::from(l).exp()).sum();
        assert!((f64::from(lp.logprob) - (2.0 - z.ln())).abs() < 1e-5);
        // Ties broken by id; best first.
        let ids: Vec<u32> = lp.top.iter().map(|t| t.0).collect();
        assert_eq!(ids, vec![1, 3, 2]);
        let total: f64 = logits.iter().map(|&l| f64::from(l - z.ln() as f32).exp()).sum();
        assert!((total - 1.0).abs() < 1e-5);
        assert!(token_logprob(&logits, 0, 0).top.is_empty());
        assert_eq!(token_logprob(&logits, 0, 10).top.len(), 5);
    }
}
