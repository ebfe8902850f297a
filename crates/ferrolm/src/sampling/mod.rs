//! Token sampling: a chain of small steps over candidate tokens, seeded and reproducible.
//!
//! Order (as llama.cpp's default chain): top-k → top-p → min-p → temperature → draw.
//! A temperature ≤ 0 means greedy (argmax).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Sampling parameters. Defaults match llama.cpp's.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplerParams {
    /// Temperature; ≤ 0 selects the most likely token (greedy).
    pub temperature: f32,
    /// Keep only the `k` most likely tokens (0 = all).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches `p` (1.0 = all).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` × the most likely one (0 = off).
    pub min_p: f32,
    /// Random seed; `None` draws one from the OS.
    pub seed: Option<u64>,
}

impl Default for SamplerParams {
    fn default() -> Self {
        Self { temperature: 0.8, top_k: 40, top_p: 0.95, min_p: 0.05, seed: None }
    }
}

impl SamplerParams {
    /// Greedy decoding.
    pub fn greedy() -> Self {
        Self { temperature: 0.0, ..Self::default() }
    }
}

/// A candidate token with its logit (and, after softmax, probability).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    /// Token id.
    pub id: u32,
    /// Logit.
    pub logit: f32,
    /// Probability (valid after the candidates were normalised by a softmax).
    pub p: f32,
}

/// Draws tokens from logits according to [`SamplerParams`].
#[derive(Debug)]
pub struct Sampler {
    params: SamplerParams,
    rng: StdRng,
    cands: Vec<Candidate>,
}

impl Sampler {
    /// A sampler with its own random stream.
    pub fn new(params: SamplerParams) -> Self {
        let rng = match params.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_os_rng(),
        };
        Self { params, rng, cands: Vec::new() }
    }

    /// The parameters.
    pub fn params(&self) -> &SamplerParams {
        &self.params
    }

    /// Picks the next token.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if self.params.temperature <= 0.0 {
            return argmax(logits);
        }
        let p = &self.params;
        self.cands.clear();
        self.cands.extend(logits.iter().enumerate().map(|(i, &l)| Candidate {
            id: i as u32,
            logit: l,
            p: 0.0,
        }));
        top_k(&mut self.cands, p.top_k);
        top_p(&mut self.cands, p.top_p);
        min_p(&mut self.cands, p.min_p);
        temperature(&mut self.cands, p.temperature);
        softmax_probs(&mut self.cands);
        let cands = &self.cands;
        let r: f32 = self.rng.random();
        let mut acc = 0.0;
        for c in cands {
            acc += c.p;
            if r < acc {
                return c.id;
            }
        }
        cands.last().map_or_else(|| argmax(logits), |c| c.id)
    }
}

/// Index of the largest logit (the first one on ties).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// Sorts candidates by logit, descending, and fills in their probabilities.
fn softmax_probs(c: &mut [Candidate]) {
    c.sort_by(|a, b| b.logit.total_cmp(&a.logit));
    let Some(max) = c.first().map(|x| x.logit) else { return };
    let mut sum = 0.0;
    for x in c.iter_mut() {
        x.p = (x.logit - max).exp();
        sum += x.p;
    }
    for x in c.iter_mut() {
        x.p /= sum;
    }
}

/// Keeps the `k` highest logits (0 keeps all).
pub fn top_k(c: &mut Vec<Candidate>, k: usize) {
    if k == 0 || k >= c.len() {
        return;
    }
    c.select_nth_unstable_by(k - 1, |a, b| b.logit.total_cmp(&a.logit));
    c.truncate(k);
}

/// Keeps the most likely candidates until their probabilities sum to at least `p`.
pub fn top_p(c: &mut Vec<Candidate>, p: f32) {
    if p >= 1.0 || c.is_empty() {
        return;
    }
    softmax_probs(c);
    let mut acc = 0.0;
    let mut keep = c.len();
    for (i, x) in c.iter().enumerate() {
        acc += x.p;
        if acc >= p {
            keep = i + 1;
            break;
        }
    }
    c.truncate(keep.max(1));
}

/// Drops candidates whose probability is below `p` × the top probability.
pub fn min_p(c: &mut Vec<Candidate>, p: f32) {
    if p <= 0.0 || c.is_empty() {
        return;
    }
    softmax_probs(c);
    let threshold = c[0].p * p;
    let keep = c.iter().take_while(|x| x.p >= threshold).count();
    c.truncate(keep.max(1));
}

/// Divides logits by the temperature.
pub fn temperature(c: &mut [Candidate], t: f32) {
    if t > 0.0 {
        c.iter_mut().for_each(|x| x.logit /= t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(logits: &[f32]) -> Vec<Candidate> {
        logits.iter().enumerate().map(|(i, &l)| Candidate { id: i as u32, logit: l, p: 0.0 }).collect()
    }

    #[test]
    fn greedy_picks_argmax() {
        let mut s = Sampler::new(SamplerParams::greedy());
        assert_eq!(s.sample(&[0.1, 3.0, -1.0, 2.9]), 1);
    }

    #[test]
    fn top_k_keeps_k_best() {
        let mut c = cands(&[1.0, 5.0, 3.0, 4.0, 2.0]);
        top_k(&mut c, 2);
        let mut ids: Vec<u32> = c.iter().map(|x| x.id).collect();
        ids.sort();
        assert_eq!(ids, vec![1, 3]);
    }

    #[test]
    fn top_p_cuts_tail() {
        // Probabilities ~ [0.64, 0.24, 0.09, 0.03]
        let mut c = cands(&[3.0, 2.0, 1.0, 0.0]);
        top_p(&mut c, 0.8);
        assert_eq!(c.iter().map(|x| x.id).collect::<Vec<_>>(), vec![0, 1]);
    }

    #[test]
    fn min_p_cuts_unlikely() {
        let mut c = cands(&[3.0, 2.0, 0.0]);
        min_p(&mut c, 0.2);
        assert_eq!(c.iter().map(|x| x.id).collect::<Vec<_>>(), vec![0, 1]);
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_follows_distribution() {
        let logits = [0.0f32, 1.0, 2.0];
        let params = SamplerParams { temperature: 1.0, top_k: 0, top_p: 1.0, min_p: 0.0, seed: Some(7) };
        let draw = |n: usize| {
            let mut s = Sampler::new(params.clone());
            (0..n).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(draw(50), draw(50));
        let xs = draw(20000);
        let f2 = xs.iter().filter(|&&x| x == 2).count() as f32 / xs.len() as f32;
        // softmax([0,1,2])[2] = 0.665
        assert!((f2 - 0.665).abs() < 0.02, "{f2}");
    }
}
