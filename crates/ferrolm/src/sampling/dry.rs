//! DRY ("don't repeat yourself"), as llama.cpp ports it from KoboldCpp: a token that would extend
//! a sequence already repeated in the recent history gets its logit lowered by
//! `multiplier * base^(length - allowed_length)`, where `length` is the longest such repeat.
//! Sequence breakers (like `"\n"`) cut the repeats that may be considered.

use std::collections::{HashMap, VecDeque};

use super::candidates::Candidates;
use crate::Result;
use crate::tokenizer::Tokenizer;

/// Breaker sequences by their first token: each entry is the rest of the sequence (empty for a
/// breaker that is a single token).
pub(crate) type Breakers = HashMap<u32, Vec<Vec<u32>>>;

/// Breaker strings longer than this are cut (llama.cpp's `MAX_CHAR_LEN`).
const MAX_CHAR_LEN: usize = 40;
/// Breaker tails are cut to this many tokens (llama.cpp's `MAX_SEQ_LEN`).
const MAX_SEQ_LEN: usize = 20;

fn add_breaker(map: &mut Breakers, head: u32, tail: Vec<u32>) {
    let tails = map.entry(head).or_default();
    if !tails.contains(&tail) {
        tails.push(tail);
    }
}

/// Builds breakers from token sequences (the first token is the head).
pub(crate) fn breakers_from_tokens(seqs: &[Vec<u32>]) -> Breakers {
    let mut map = Breakers::new();
    for s in seqs {
        if let Some((&head, tail)) = s.split_first() {
            add_breaker(&mut map, head, tail.to_vec());
        }
    }
    map
}

/// Builds breakers from strings like llama.cpp's `get_overlapping_token_sequences`: every token
/// whose text contains the string is a single-token breaker; a token whose text ends with a
/// proper prefix of the string starts a breaker whose tail is the tokenization of the rest.
pub(crate) fn breakers_from_strings(tok: &Tokenizer, strings: &[String]) -> Result<Breakers> {
    let strs: Vec<&[u8]> = strings
        .iter()
        .map(|s| {
            let mut end = s.len().min(MAX_CHAR_LEN);
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            &s.as_bytes()[..end]
        })
        .filter(|s| !s.is_empty())
        .collect();
    let mut map = Breakers::new();
    if strs.is_empty() {
        return Ok(map);
    }
    let mut tails: HashMap<Vec<u8>, Vec<u32>> = HashMap::new();
    for id in 0..tok.n_vocab() as u32 {
        let word = tok.token_to_piece(id);
        for s in &strs {
            if word.windows(s.len()).any(|w| w == *s) {
                add_breaker(&mut map, id, Vec::new());
                continue;
            }
            for pos in (0..word.len()).filter(|&p| word[p] == s[0]) {
                // The word ends inside the string: word[pos..] == s[..word.len() - pos].
                let n = word.len() - pos;
                if n < s.len() && word[pos..] == s[..n] {
                    let rest = &s[n..];
                    if !tails.contains_key(rest) {
                        let mut t = tok.encode(&String::from_utf8_lossy(rest), false, false)?;
                        t.truncate(MAX_SEQ_LEN);
                        tails.insert(rest.to_vec(), t);
                    }
                    add_breaker(&mut map, id, tails[rest].clone());
                }
            }
        }
    }
    Ok(map)
}

/// DRY settings, breakers and the token history they scan.
#[derive(Debug)]
pub(crate) struct Dry {
    multiplier: f32,
    base: f32,
    allowed_length: i32,
    /// Tokens of history scanned (-1 = all, 0 = off).
    last_n: i32,
    breakers: Breakers,
    history: VecDeque<u32>,
    repeat_count: Vec<i32>,
    max_token_repeat: HashMap<u32, i32>,
}

impl Dry {
    /// DRY with an empty history.
    pub(crate) fn new(
        multiplier: f32,
        base: f32,
        allowed_length: usize,
        last_n: i32,
        breakers: Breakers,
    ) -> Self {
        Self {
            multiplier,
            base,
            allowed_length: i32::try_from(allowed_length).unwrap_or(i32::MAX),
            last_n,
            breakers,
            history: VecDeque::new(),
            repeat_count: Vec::new(),
            max_token_repeat: HashMap::new(),
        }
    }

    /// Whether DRY does anything with these settings.
    pub(crate) fn enabled(&self) -> bool {
        self.multiplier != 0.0 && self.base >= 1.0 && self.last_n != 0
    }

    /// Records a token.
    pub(crate) fn accept(&mut self, token: u32) {
        if !self.enabled() {
            return;
        }
        if self.last_n > 0 && self.history.len() >= self.last_n as usize {
            self.history.pop_front();
        }
        self.history.push_back(token);
    }

    /// Forgets the history.
    pub(crate) fn reset(&mut self) {
        self.history.clear();
        self.max_token_repeat.clear();
    }

    /// The `i`-th most recent token (0 = the last).
    fn rat(&self, i: usize) -> u32 {
        self.history[self.history.len() - 1 - i]
    }

    /// Lowers the logits of tokens that would extend a repeat.
    pub(crate) fn apply(&mut self, c: &mut Candidates) {
        if !self.enabled() {
            return;
        }
        let n = match self.last_n {
            -1 => self.history.len(),
            k => self.history.len().min(usize::try_from(k).unwrap_or(0)),
        };
        let n_i = i32::try_from(n).unwrap_or(i32::MAX);
        if n_i <= self.allowed_length {
            return;
        }
        let rep_limit = self.repeat_limit(n);
        if rep_limit < self.allowed_length {
            return;
        }
        self.count_repeats(n, rep_limit);

        // For each position ending a long enough repeat, the token after it would extend it.
        self.max_token_repeat.clear();
        for i in 0..n - 1 {
            let len = self.repeat_count[i];
            if len >= self.allowed_length {
                let tok = self.rat(n - 2 - i);
                let e = self.max_token_repeat.entry(tok).or_insert(len);
                *e = (*e).max(len);
            }
        }
        if self.max_token_repeat.is_empty() {
            return;
        }

        // Clamp the exponent so base^exp stays finite (ln(f32::MAX) ≈ 88.72).
        let max_exponent = if self.base > 1.000001 { (88.722_84f32 / self.base.ln()) as i32 } else { 0 };
        let penalty = |len: i32| {
            let mut e = len - self.allowed_length;
            if max_exponent > 0 && e > max_exponent {
                e = max_exponent;
            }
            self.multiplier * self.base.powf(e as f32)
        };
        // Single-token breakers are never penalised.
        let single_breaker = |tok: u32| self.breakers.get(&tok).is_some_and(|t| t.iter().any(Vec::is_empty));
        if c.identity {
            for (&tok, &len) in &self.max_token_repeat {
                if let Some(x) = c.data.get_mut(tok as usize)
                    && !single_breaker(tok)
                {
                    x.logit -= penalty(len);
                }
            }
        } else {
            for x in &mut c.data {
                if let Some(&len) = self.max_token_repeat.get(&x.id)
                    && !single_breaker(x.id)
                {
                    x.logit -= penalty(len);
                }
            }
        }
        c.logits_changed();
    }

    /// Step 1: the most recent breaker limits how long a repeat may be (the whole window if
    /// there is none).
    fn repeat_limit(&self, n: usize) -> i32 {
        for i in 0..n {
            let Some(tails) = self.breakers.get(&self.rat(i)) else { continue };
            let mut longest: i32 = -1;
            for tail in tails {
                let len = tail.len();
                if len as i32 > longest
                    && len <= i
                    && tail.iter().enumerate().all(|(off, &t)| t == self.rat(i - off - 1))
                {
                    longest = len as i32;
                }
            }
            if longest >= 0 {
                return i as i32 - longest;
            }
        }
        n as i32
    }

    /// Step 2: `repeat_count[n - 1 - k]` = length of the longest suffix of the window that also
    /// ends `k` tokens earlier (capped at `rep_limit`), by the Z-algorithm run backwards.
    fn count_repeats(&mut self, n: usize, rep_limit: i32) {
        self.repeat_count.clear();
        self.repeat_count.resize(n, 0);
        let last = n - 1;
        let (mut lt, mut rt) = (0usize, 0usize);
        for k in 1..n {
            if k > rt {
                let mut m = 0;
                while m + k < n && self.rat(m) == self.rat(m + k) {
                    m += 1;
                }
                self.repeat_count[last - k] = (m as i32).min(rep_limit);
                if m > 0 {
                    lt = k;
                    rt = k + m - 1;
                }
            } else {
                let p = k - lt;
                let right_part_len = (rt - k + 1) as i32;
                if self.repeat_count[last - p] < right_part_len {
                    self.repeat_count[last - k] = self.repeat_count[last - p].min(rep_limit);
                } else {
                    let mut i = rt + 1;
                    while i < n && self.rat(i) == self.rat(i - k) {
                        i += 1;
                    }
                    self.repeat_count[last - k] = ((i - k) as i32).min(rep_limit);
                    lt = k;
                    rt = i - 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::candidates::assert_probs;

    #[allow(clippy::too_many_arguments)]
    fn run(
        probs: &[f32],
        history: &[u32],
        mult: f32,
        base: f32,
        allowed: usize,
        last_n: i32,
        breakers: &[Vec<u32>],
    ) -> Vec<f32> {
        let mut d = Dry::new(mult, base, allowed, last_n, breakers_from_tokens(breakers));
        for &t in history {
            d.accept(t);
        }
        let mut c = Candidates::from_probs(probs);
        d.apply(&mut c);
        c.probs_after_dist()
    }

    // Expected values from llama.cpp's tests/test-sampling.cpp.
    #[test]
    fn llama_cpp_cases() {
        let q = [0.25f32; 4];
        let f = [0.2f32; 5];
        assert_probs(&run(&q, &[0, 1], 1.0, 1.1, 2, 4, &[]), &q);
        assert_probs(
            &run(&q, &[0, 1, 2, 0, 1], 1.0, 1.1, 2, 5, &[]),
            &[0.296923, 0.296923, 0.109232, 0.296923],
        );
        assert_probs(&run(&f, &[0, 1, 3, 4, 0, 1], 1.0, 1.1, 2, 6, &[vec![3]]), &f);
        assert_probs(
            &run(&f, &[0, 1, 2, 0, 1], 2.0, 1.1, 2, 5, &[]),
            &[0.241818, 0.241818, 0.032727, 0.241818, 0.241818],
        );
        assert_probs(&run(&f, &[0, 1, 2, 3, 4, 0, 1], 1.0, 1.1, 4, 7, &[]), &f);
    }

    #[test]
    fn penalty_grows_with_the_repeat_length() {
        // History a b c d a b c: token d would extend a repeat of 3 → 1 * 2^(3-2) = 2.
        let mut d = Dry::new(1.0, 2.0, 2, -1, Breakers::new());
        for t in [0, 1, 2, 3, 0, 1, 2] {
            d.accept(t);
        }
        let mut c = Candidates::default();
        c.fill(&[0.0; 5]);
        d.apply(&mut c);
        assert_eq!(c.data.iter().map(|x| x.logit).collect::<Vec<_>>(), vec![0.0, 0.0, 0.0, -2.0, 0.0]);
        // The same when the candidates are no longer indexed by id.
        let mut c = Candidates::default();
        c.fill(&[0.0; 5]);
        c.data.reverse();
        c.identity = false;
        d.apply(&mut c);
        assert_eq!(c.data[1].id, 3);
        assert_eq!(c.data[1].logit, -2.0);
        // The window limits how much history is scanned.
        let mut d = Dry::new(1.0, 2.0, 2, 3, Breakers::new());
        for t in [0, 1, 2, 3, 0, 1, 2] {
            d.accept(t);
        }
        let mut c = Candidates::default();
        c.fill(&[0.0; 5]);
        d.apply(&mut c);
        assert!(c.data.iter().all(|x| x.logit == 0.0));
    }

    #[test]
    fn multi_token_breaker_limits_the_repeat() {
        // Breaker [5, 6]: the repeat may not reach back over it.
        let hist = [0, 1, 2, 3, 5, 6, 0, 1, 2];
        let mut d = Dry::new(1.0, 2.0, 1, -1, breakers_from_tokens(&[vec![5, 6]]));
        for t in hist {
            d.accept(t);
        }
        assert_eq!(d.repeat_limit(hist.len()), 3);
        let mut c = Candidates::default();
        c.fill(&[0.0; 7]);
        d.apply(&mut c);
        // Repeat "0 1 2" (length 3, within the limit) → penalty 2^(3-1) = 4 on token 3.
        assert_eq!(c.data[3].logit, -4.0);
        d.reset();
        let mut c = Candidates::default();
        c.fill(&[0.0; 7]);
        d.apply(&mut c);
        assert_eq!(c.data[3].logit, 0.0);
    }

    #[test]
    fn exponent_is_clamped_to_stay_finite() {
        let hist: Vec<u32> = (0..300).map(|i| i % 2).collect();
        let mut d = Dry::new(1.0, 3.0, 1, -1, Breakers::new());
        for &t in &hist {
            d.accept(t);
        }
        let mut c = Candidates::default();
        c.fill(&[0.0, 0.0]);
        d.apply(&mut c);
        assert!(c.data[0].logit.is_finite() && c.data[0].logit < -1e30, "{:?}", c.data);
    }
}
