//! The sampler: logit bias → the configured steps → the draw, seeded and reproducible.

use super::candidates::Candidates;
use super::dry::{self, Breakers, Dry};
use super::mirostat::Mirostat;
use super::mt19937::Mt19937;
use super::penalties::Penalties;
use super::{SamplerParams, SamplerStep, argmax, logit_bias, temperature, truncation, xtc};
use crate::tokenizer::Tokenizer;
use crate::{Error, Result};

/// Draws tokens from logits according to [`SamplerParams`].
///
/// The chain is llama.cpp's `common_sampler`: logit bias first, then the steps of
/// [`SamplerParams::order`], then a draw from the softmax of what is left (with Mirostat on:
/// logit bias, penalties and DRY if they are in the order, temperature, then Mirostat's own
/// truncation and draw). Random numbers come from llama.cpp's generator, `std::mt19937` seeded
/// with the low 32 bits of [`SamplerParams::seed`] (XTC from a second one with the same seed), and
/// the draw picks as llama.cpp's `dist` sampler does: the same seed, parameters, logits and
/// accepted tokens give the same tokens, and those llama.cpp gives where its logits are the same.
#[derive(Debug)]
pub struct Sampler {
    params: SamplerParams,
    cands: Candidates,
    penalties: Penalties,
    dry: Dry,
    mirostat: Mirostat,
    rng: Mt19937,
    xtc_rng: Mt19937,
    /// Temperature 0 and no step that can change which token has the highest logit (bias,
    /// penalties, DRY, XTC, typical-p, Mirostat): the draw is the argmax.
    plain_greedy: bool,
    /// The last draw took the argmax without building the candidates (their distribution is
    /// then one-hot).
    last_argmax: bool,
}

/// Whether `p` always draws the most likely token of the raw logits (see `Sampler::plain_greedy`).
fn is_plain_greedy(p: &SamplerParams) -> bool {
    let step_on = |s: SamplerStep| p.order.contains(&s);
    let penalties_off = !step_on(SamplerStep::Penalties)
        || p.penalty_last_n == 0
        || (p.repeat_penalty == 1.0 && p.frequency_penalty == 0.0 && p.presence_penalty == 0.0);
    p.temperature <= 0.0
        && step_on(SamplerStep::Temperature)
        && p.mirostat == 0
        && p.logit_bias.is_empty()
        && penalties_off
        && (!step_on(SamplerStep::Dry) || p.dry_multiplier == 0.0)
        && (!step_on(SamplerStep::Xtc) || p.xtc_probability <= 0.0)
        && (!step_on(SamplerStep::TypicalP) || p.typical_p >= 1.0)
}

/// The generator for `seed` (its low 32 bits, as llama.cpp's `uint32_t` seed), or for a random
/// seed when there is none.
fn seeded(seed: Option<u64>) -> Mt19937 {
    Mt19937::new(seed.map_or_else(rand::random, |s| s as u32))
}

impl Sampler {
    /// A sampler for a model with this tokenizer (which turns the DRY sequence breakers into
    /// tokens and bounds the logit-bias token ids). Fails on invalid parameters.
    pub fn new(params: SamplerParams, tokenizer: &Tokenizer) -> Result<Sampler> {
        params.validate()?;
        let n_vocab = tokenizer.n_vocab();
        if let Some(&(id, _)) = params.logit_bias.iter().find(|(id, _)| *id as usize >= n_vocab) {
            return Err(Error::InvalidInput(format!(
                "logit bias for token {id}, but the vocabulary has {n_vocab} tokens"
            )));
        }
        let uses_dry = params.dry_multiplier != 0.0
            && params.dry_penalty_last_n != 0
            && params.order.contains(&SamplerStep::Dry);
        let breakers = if uses_dry {
            dry::breakers_from_strings(tokenizer, &params.dry_sequence_breakers)?
        } else {
            Breakers::new()
        };
        Ok(Self::build(params, breakers))
    }

    /// A sampler without a tokenizer: the DRY sequence breakers are given as token sequences
    /// (and [`SamplerParams::dry_sequence_breakers`] is ignored). Fails on invalid parameters.
    pub fn with_breaker_tokens(params: SamplerParams, breakers: &[Vec<u32>]) -> Result<Sampler> {
        params.validate()?;
        Ok(Self::build(params, dry::breakers_from_tokens(breakers)))
    }

    fn build(params: SamplerParams, breakers: Breakers) -> Sampler {
        let p = &params;
        Sampler {
            penalties: Penalties::new(
                p.penalty_last_n,
                p.repeat_penalty,
                p.frequency_penalty,
                p.presence_penalty,
            ),
            dry: Dry::new(p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n, breakers),
            mirostat: Mirostat::new(p.mirostat, p.mirostat_tau, p.mirostat_eta),
            rng: seeded(p.seed),
            xtc_rng: seeded(p.seed),
            cands: Candidates::default(),
            plain_greedy: is_plain_greedy(p),
            last_argmax: false,
            params,
        }
    }

    /// The parameters.
    pub fn params(&self) -> &SamplerParams {
        &self.params
    }

    /// Runs the chain over `logits` (one per vocabulary token; `-inf` marks a masked token) and
    /// draws a token. The token is not recorded: call [`Sampler::accept`] with the token kept.
    ///
    /// A masked token is never drawn unless every token is masked (then the result is
    /// [`argmax`] of `logits`, token 0 when all are `-inf`); empty logits give token 0.
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        self.last_argmax = true;
        if self.plain_greedy {
            // Nothing in the chain can move the maximum: skip building the candidates.
            return argmax(logits);
        }
        self.cands.fill(logits);
        logit_bias::apply(&mut self.cands, &self.params.logit_bias);
        if self.cands.max_logit() == f32::NEG_INFINITY {
            return argmax(logits);
        }
        self.last_argmax = false;
        if self.params.mirostat != 0 {
            for i in 0..self.params.order.len() {
                let step = self.params.order[i];
                if matches!(step, SamplerStep::Penalties | SamplerStep::Dry) {
                    self.apply_step(step);
                }
            }
            temperature::apply(&mut self.cands, self.params.temperature);
            return self.mirostat.sample(&mut self.cands, logits.len(), &mut self.rng);
        }
        for i in 0..self.params.order.len() {
            self.apply_step(self.params.order[i]);
        }
        let i = self.cands.draw(self.rng.uniform_f64());
        self.cands.data[i].id
    }

    fn apply_step(&mut self, step: SamplerStep) {
        let p = &self.params;
        let c = &mut self.cands;
        match step {
            SamplerStep::Penalties => self.penalties.apply(c),
            SamplerStep::Dry => self.dry.apply(c),
            SamplerStep::TopNSigma => truncation::top_n_sigma(c, p.top_n_sigma),
            SamplerStep::TopK => truncation::top_k(c, p.top_k),
            SamplerStep::TypicalP => truncation::typical(c, p.typical_p, p.min_keep),
            SamplerStep::TopP => truncation::top_p(c, p.top_p, p.min_keep),
            SamplerStep::MinP => truncation::min_p(c, p.min_p, p.min_keep),
            SamplerStep::Xtc => {
                xtc::apply(c, p.xtc_probability, p.xtc_threshold, p.min_keep, &mut self.xtc_rng)
            }
            SamplerStep::Temperature => {
                temperature::apply_dynamic(c, p.temperature, p.dynatemp_range, p.dynatemp_exponent)
            }
        }
    }

    /// The distribution the last [`Sampler::sample`] drew `token` from, after every step of the
    /// chain (llama.cpp's post-sampling probabilities): `token`'s probability and the `k` most
    /// probable tokens, best first (ties by the lower id), tokens of probability 0 left out. A
    /// greedy draw's distribution is one-hot.
    pub fn drawn_distribution(&self, token: u32, k: usize) -> (f32, Vec<(u32, f32)>) {
        if self.last_argmax {
            return (1.0, if k > 0 { vec![(token, 1.0)] } else { Vec::new() });
        }
        let mut kept: Vec<(u32, f32)> =
            self.cands.data.iter().filter(|c| c.p > 0.0).map(|c| (c.id, c.p)).collect();
        let p = kept.iter().find(|c| c.0 == token).map_or(0.0, |c| c.1);
        kept.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        kept.truncate(k);
        (p, kept)
    }

    /// Records a token in the history the penalties and DRY look at. Call it for the prompt's
    /// tokens and for every token kept after [`Sampler::sample`].
    pub fn accept(&mut self, token: u32) {
        self.penalties.accept(token);
        self.dry.accept(token);
    }

    /// Forgets the history and Mirostat's state, and restarts the random streams from the seed
    /// (from fresh OS entropy when there is no seed).
    pub fn reset(&mut self) {
        self.penalties.reset();
        self.dry.reset();
        self.mirostat.reset();
        self.rng = seeded(self.params.seed);
        self.xtc_rng = seeded(self.params.seed);
    }
}
