//! Sampling parameters ([`SamplerParams`]), the configurable steps ([`SamplerStep`]) and their
//! validation. Defaults are llama.cpp's `common_params_sampling`.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// One configurable step of the sampler chain (llama.cpp's `common_sampler_type`).
///
/// Logit bias always runs first and the draw always runs last; these are the steps in between,
/// in the order given by [`SamplerParams::order`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SamplerStep {
    /// Repetition, frequency and presence penalties over the last `penalty_last_n` tokens.
    #[serde(rename = "penalties")]
    Penalties,
    /// DRY ("don't repeat yourself") penalty on tokens that would extend a repeated sequence.
    #[serde(rename = "dry")]
    Dry,
    /// Top-n-sigma: keeps logits within `n` standard deviations of the largest.
    #[serde(rename = "top_n_sigma")]
    TopNSigma,
    /// Top-k: keeps the `k` most likely tokens.
    #[serde(rename = "top_k")]
    TopK,
    /// Locally typical sampling.
    #[serde(rename = "typ_p")]
    TypicalP,
    /// Top-p (nucleus): keeps the most likely tokens until their probabilities reach `p`.
    #[serde(rename = "top_p")]
    TopP,
    /// Min-p: drops tokens less likely than `p` × the most likely one.
    #[serde(rename = "min_p")]
    MinP,
    /// XTC ("exclude top choices").
    #[serde(rename = "xtc")]
    Xtc,
    /// Temperature, with an optional dynamic range.
    #[serde(rename = "temperature")]
    Temperature,
}

impl SamplerStep {
    /// Every step, in llama.cpp's default order.
    pub const DEFAULT_ORDER: [SamplerStep; 9] = [
        SamplerStep::Penalties,
        SamplerStep::Dry,
        SamplerStep::TopNSigma,
        SamplerStep::TopK,
        SamplerStep::TypicalP,
        SamplerStep::TopP,
        SamplerStep::MinP,
        SamplerStep::Xtc,
        SamplerStep::Temperature,
    ];

    /// llama.cpp's canonical name (as `--samplers` takes it).
    pub fn name(self) -> &'static str {
        match self {
            SamplerStep::Penalties => "penalties",
            SamplerStep::Dry => "dry",
            SamplerStep::TopNSigma => "top_n_sigma",
            SamplerStep::TopK => "top_k",
            SamplerStep::TypicalP => "typ_p",
            SamplerStep::TopP => "top_p",
            SamplerStep::MinP => "min_p",
            SamplerStep::Xtc => "xtc",
            SamplerStep::Temperature => "temperature",
        }
    }

    /// llama.cpp's one-letter code (as `--sampling-seq` takes it).
    pub fn letter(self) -> char {
        match self {
            SamplerStep::Penalties => 'e',
            SamplerStep::Dry => 'd',
            SamplerStep::TopNSigma => 's',
            SamplerStep::TopK => 'k',
            SamplerStep::TypicalP => 'y',
            SamplerStep::TopP => 'p',
            SamplerStep::MinP => 'm',
            SamplerStep::Xtc => 'x',
            SamplerStep::Temperature => 't',
        }
    }

    /// A step from one of llama.cpp's names (case-insensitive): the canonical names
    /// (`top_k`), their kebab-case (`top-k`) and no-dash (`topk`) spellings, and the aliases
    /// `nucleus`, `temp` and `typ`.
    pub fn from_name(name: &str) -> Option<SamplerStep> {
        use SamplerStep::*;
        const NAMES: [(&str, SamplerStep); 22] = [
            ("penalties", Penalties),
            ("dry", Dry),
            ("top_n_sigma", TopNSigma),
            ("top-n-sigma", TopNSigma),
            ("topnsigma", TopNSigma),
            ("top_k", TopK),
            ("top-k", TopK),
            ("topk", TopK),
            ("typ_p", TypicalP),
            ("typ-p", TypicalP),
            ("typp", TypicalP),
            ("typ", TypicalP),
            ("top_p", TopP),
            ("top-p", TopP),
            ("topp", TopP),
            ("nucleus", TopP),
            ("min_p", MinP),
            ("min-p", MinP),
            ("minp", MinP),
            ("xtc", Xtc),
            ("temperature", Temperature),
            ("temp", Temperature),
        ];
        let lower = name.trim().to_ascii_lowercase();
        NAMES.iter().find(|(n, _)| *n == lower).map(|&(_, s)| s)
    }

    /// A step from its one-letter code.
    pub fn from_letter(c: char) -> Option<SamplerStep> {
        SamplerStep::DEFAULT_ORDER.into_iter().find(|s| s.letter() == c)
    }

    /// Parses a `;`-separated list of names, as llama.cpp's `--samplers` (empty items are skipped).
    pub fn from_names(s: &str) -> Result<Vec<SamplerStep>> {
        s.split(';')
            .filter(|n| !n.trim().is_empty())
            .map(|n| {
                SamplerStep::from_name(n).ok_or_else(|| {
                    Error::InvalidInput(format!(
                        "unknown sampler '{}' (known: penalties, dry, top_n_sigma, top_k, typ_p, top_p, \
                         min_p, xtc, temperature)",
                        n.trim()
                    ))
                })
            })
            .collect()
    }

    /// Parses a string of one-letter codes, as llama.cpp's `--sampling-seq` (`"edskypmxt"`).
    pub fn from_letters(s: &str) -> Result<Vec<SamplerStep>> {
        s.chars()
            .map(|c| {
                SamplerStep::from_letter(c).ok_or_else(|| {
                    Error::InvalidInput(format!(
                        "unknown sampler letter '{c}' (known: e=penalties, d=dry, s=top_n_sigma, k=top_k, \
                         y=typ_p, p=top_p, m=min_p, x=xtc, t=temperature)"
                    ))
                })
            })
            .collect()
    }

    /// Parses a sampler order written either as `;`-separated names (`"penalties;top_k;temp"`) or
    /// as one-letter codes (`"ekpt"`). A single word that is a name is read as a name.
    pub fn parse_order(s: &str) -> Result<Vec<SamplerStep>> {
        let s = s.trim();
        if s.contains(';') || SamplerStep::from_name(s).is_some() {
            SamplerStep::from_names(s)
        } else {
            SamplerStep::from_letters(s)
        }
    }
}

impl std::fmt::Display for SamplerStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Sampling parameters. [`Default`] gives llama.cpp's defaults (`common_params_sampling`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SamplerParams {
    /// Temperature; ≤ 0 keeps only the most likely token (greedy).
    pub temperature: f32,
    /// Dynamic temperature range: the temperature moves within `temperature ± range` with the
    /// normalised entropy of the candidates (0 = off).
    pub dynatemp_range: f32,
    /// Exponent applied to the normalised entropy by dynamic temperature.
    pub dynatemp_exponent: f32,
    /// Keep only the `k` most likely tokens (0 = off).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches `p` (1.0 = off).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` × the most likely one (0.0 = off).
    pub min_p: f32,
    /// Locally typical sampling mass (1.0 = off).
    pub typical_p: f32,
    /// Keep logits within `n` standard deviations of the largest (≤ 0 = off).
    pub top_n_sigma: f32,
    /// XTC: chance of removing the top choices on each draw (0.0 = off).
    pub xtc_probability: f32,
    /// XTC: tokens at least this likely count as top choices (> 0.5 = off).
    pub xtc_threshold: f32,
    /// Tokens of history the penalties look at (0 = off, -1 = the whole history).
    pub penalty_last_n: i32,
    /// Repetition penalty: divides positive / multiplies negative logits of seen tokens (1.0 = off).
    pub repeat_penalty: f32,
    /// Subtracted from a seen token's logit once per occurrence (0.0 = off).
    pub frequency_penalty: f32,
    /// Subtracted from a seen token's logit once (0.0 = off).
    pub presence_penalty: f32,
    /// DRY multiplier (0.0 = off).
    pub dry_multiplier: f32,
    /// DRY base: the penalty is `multiplier * base^(length - allowed_length)`.
    pub dry_base: f32,
    /// Repeated sequences longer than this are penalised by DRY.
    pub dry_allowed_length: usize,
    /// Tokens of history DRY scans (0 = off, -1 = the whole history).
    pub dry_penalty_last_n: i32,
    /// Strings that interrupt a repeated sequence for DRY (each at most 40 bytes are used).
    pub dry_sequence_breakers: Vec<String>,
    /// Mirostat: 0 = off, 1 = Mirostat, 2 = Mirostat 2.0. When on, it replaces the truncation steps
    /// and the draw: the chain is logit bias → penalties/DRY (if in [`Self::order`]) → temperature
    /// → Mirostat.
    pub mirostat: u8,
    /// Mirostat target entropy (tau).
    pub mirostat_tau: f32,
    /// Mirostat learning rate (eta).
    pub mirostat_eta: f32,
    /// Added to the logits of the given tokens before anything else (`-inf` bans a token).
    pub logit_bias: Vec<(u32, f32)>,
    /// Truncation steps (top-p, min-p, typical-p, XTC) keep at least this many tokens.
    pub min_keep: usize,
    /// The steps between logit bias and the draw, in order.
    pub order: Vec<SamplerStep>,
    /// Random seed (its low 32 bits seed llama.cpp's generator, `std::mt19937`); `None` draws one
    /// from the OS (again on every [`super::Sampler::reset`]).
    pub seed: Option<u64>,
}

impl Default for SamplerParams {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            dynatemp_range: 0.0,
            dynatemp_exponent: 1.0,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            typical_p: 1.0,
            top_n_sigma: -1.0,
            xtc_probability: 0.0,
            xtc_threshold: 0.1,
            penalty_last_n: 64,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            dry_multiplier: 0.0,
            dry_base: 1.75,
            dry_allowed_length: 2,
            dry_penalty_last_n: 64,
            dry_sequence_breakers: ["\n", ":", "\"", "*"].into_iter().map(String::from).collect(),
            mirostat: 0,
            mirostat_tau: 5.0,
            mirostat_eta: 0.1,
            logit_bias: Vec::new(),
            min_keep: 0,
            order: SamplerStep::DEFAULT_ORDER.to_vec(),
            seed: None,
        }
    }
}

fn bad(name: &str, value: impl std::fmt::Display, rule: &str) -> Error {
    Error::InvalidInput(format!("invalid sampling parameter {name} = {value}: {rule}"))
}

fn finite(name: &str, v: f32) -> Result<()> {
    if v.is_finite() { Ok(()) } else { Err(bad(name, v, "must be a finite number")) }
}

fn in_unit(name: &str, v: f32) -> Result<()> {
    if (0.0..=1.0).contains(&v) { Ok(()) } else { Err(bad(name, v, "must be between 0 and 1")) }
}

fn non_negative(name: &str, v: f32) -> Result<()> {
    finite(name, v)?;
    if v >= 0.0 { Ok(()) } else { Err(bad(name, v, "must not be negative")) }
}

fn last_n(name: &str, v: i32) -> Result<()> {
    if v >= -1 { Ok(()) } else { Err(bad(name, v, "must be -1 (whole history), 0 (off) or positive")) }
}

impl SamplerParams {
    /// Greedy decoding: temperature 0, everything else at its default (so logit bias and
    /// penalties still apply, as in llama.cpp).
    pub fn greedy() -> Self {
        Self { temperature: 0.0, ..Self::default() }
    }

    /// Checks every value's range; the error names the parameter and the rule it breaks.
    pub fn validate(&self) -> Result<()> {
        finite("temperature", self.temperature)?;
        non_negative("dynatemp_range", self.dynatemp_range)?;
        non_negative("dynatemp_exponent", self.dynatemp_exponent)?;
        in_unit("top_p", self.top_p)?;
        in_unit("min_p", self.min_p)?;
        in_unit("typical_p", self.typical_p)?;
        finite("top_n_sigma", self.top_n_sigma)?;
        in_unit("xtc_probability", self.xtc_probability)?;
        in_unit("xtc_threshold", self.xtc_threshold)?;
        last_n("penalty_last_n", self.penalty_last_n)?;
        finite("repeat_penalty", self.repeat_penalty)?;
        if self.repeat_penalty <= 0.0 {
            return Err(bad("repeat_penalty", self.repeat_penalty, "must be greater than 0 (1.0 = off)"));
        }
        finite("frequency_penalty", self.frequency_penalty)?;
        finite("presence_penalty", self.presence_penalty)?;
        non_negative("dry_multiplier", self.dry_multiplier)?;
        finite("dry_base", self.dry_base)?;
        if self.dry_base < 1.0 {
            return Err(bad("dry_base", self.dry_base, "must be at least 1"));
        }
        if self.dry_allowed_length > i32::MAX as usize {
            return Err(bad("dry_allowed_length", self.dry_allowed_length, "is too large"));
        }
        last_n("dry_penalty_last_n", self.dry_penalty_last_n)?;
        if self.dry_sequence_breakers.iter().any(String::is_empty) {
            return Err(Error::InvalidInput(
                "invalid sampling parameter dry_sequence_breakers: a breaker is empty".into(),
            ));
        }
        if self.mirostat > 2 {
            return Err(bad("mirostat", self.mirostat, "must be 0 (off), 1 (Mirostat) or 2 (Mirostat 2.0)"));
        }
        non_negative("mirostat_tau", self.mirostat_tau)?;
        non_negative("mirostat_eta", self.mirostat_eta)?;
        for &(id, b) in &self.logit_bias {
            if b.is_nan() || b == f32::INFINITY {
                return Err(Error::InvalidInput(format!(
                    "invalid logit bias {b} for token {id}: must be a finite number or -inf"
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_llama_cpp_defaults() {
        let p = SamplerParams::default();
        assert_eq!((p.temperature, p.top_k, p.top_p, p.min_p, p.typical_p), (0.8, 40, 0.95, 0.05, 1.0));
        assert_eq!(
            (p.penalty_last_n, p.repeat_penalty, p.frequency_penalty, p.presence_penalty),
            (64, 1.0, 0.0, 0.0)
        );
        assert_eq!(
            (p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n),
            (0.0, 1.75, 2, 64)
        );
        assert_eq!(p.dry_sequence_breakers, vec!["\n", ":", "\"", "*"]);
        assert_eq!((p.xtc_probability, p.xtc_threshold, p.top_n_sigma), (0.0, 0.1, -1.0));
        assert_eq!((p.dynatemp_range, p.dynatemp_exponent), (0.0, 1.0));
        assert_eq!((p.mirostat, p.mirostat_tau, p.mirostat_eta), (0, 5.0, 0.1));
        assert_eq!(p.order, SamplerStep::parse_order("edskypmxt").expect("letters"));
        assert!(p.validate().is_ok());
        assert_eq!(SamplerParams::greedy().temperature, 0.0);
    }

    #[test]
    fn parse_order_names_and_letters() {
        use SamplerStep::*;
        assert_eq!(
            SamplerStep::parse_order("penalties;dry;top_k;typ_p;top_p;min_p;xtc;temperature").expect("names"),
            vec![Penalties, Dry, TopK, TypicalP, TopP, MinP, Xtc, Temperature]
        );
        assert_eq!(
            SamplerStep::parse_order("Top-K;nucleus;minp;temp;typ;top-n-sigma").expect("aliases"),
            vec![TopK, TopP, MinP, Temperature, TypicalP, TopNSigma]
        );
        assert_eq!(SamplerStep::parse_order("temp").expect("one name"), vec![Temperature]);
        assert_eq!(SamplerStep::parse_order("kpt").expect("letters"), vec![TopK, TopP, Temperature]);
        assert_eq!(SamplerStep::parse_order("").expect("empty"), vec![]);
        assert!(SamplerStep::parse_order("top_k;bogus").is_err());
        assert!(SamplerStep::parse_order("kpq").is_err());
        assert!(SamplerStep::parse_order("top_n-sigma;top_k").is_err());
        for s in SamplerStep::DEFAULT_ORDER {
            assert_eq!(SamplerStep::from_name(s.name()), Some(s));
            assert_eq!(SamplerStep::from_letter(s.letter()), Some(s));
        }
    }

    #[test]
    fn serde_uses_llama_cpp_names_and_defaults() {
        let p: SamplerParams =
            serde_json::from_str(r#"{"top_k": 5, "order": ["top_k", "typ_p", "temperature"]}"#)
                .expect("json");
        assert_eq!(p.top_k, 5);
        assert_eq!(p.order, vec![SamplerStep::TopK, SamplerStep::TypicalP, SamplerStep::Temperature]);
        assert_eq!(p.top_p, 0.95);
        let back: SamplerParams = serde_json::from_str(&serde_json::to_string(&p).expect("ser")).expect("de");
        assert_eq!(back, p);
    }

    #[test]
    fn validate_rejects_out_of_range_values() {
        let ok = SamplerParams::default();
        let cases: Vec<(SamplerParams, &str)> = vec![
            (SamplerParams { temperature: f32::NAN, ..ok.clone() }, "temperature"),
            (SamplerParams { top_p: 1.5, ..ok.clone() }, "top_p"),
            (SamplerParams { min_p: -0.1, ..ok.clone() }, "min_p"),
            (SamplerParams { typical_p: 2.0, ..ok.clone() }, "typical_p"),
            (SamplerParams { xtc_probability: 1.1, ..ok.clone() }, "xtc_probability"),
            (SamplerParams { xtc_threshold: -1.0, ..ok.clone() }, "xtc_threshold"),
            (SamplerParams { penalty_last_n: -2, ..ok.clone() }, "penalty_last_n"),
            (SamplerParams { repeat_penalty: 0.0, ..ok.clone() }, "repeat_penalty"),
            (SamplerParams { frequency_penalty: f32::INFINITY, ..ok.clone() }, "frequency_penalty"),
            (SamplerParams { dry_base: 0.5, ..ok.clone() }, "dry_base"),
            (SamplerParams { dry_multiplier: -1.0, ..ok.clone() }, "dry_multiplier"),
            (SamplerParams { dry_penalty_last_n: -5, ..ok.clone() }, "dry_penalty_last_n"),
            (
                SamplerParams { dry_sequence_breakers: vec![String::new()], ..ok.clone() },
                "dry_sequence_breakers",
            ),
            (SamplerParams { mirostat: 3, ..ok.clone() }, "mirostat"),
            (SamplerParams { mirostat_eta: -0.1, ..ok.clone() }, "mirostat_eta"),
            (SamplerParams { dynatemp_range: -1.0, ..ok.clone() }, "dynatemp_range"),
            (SamplerParams { logit_bias: vec![(3, f32::INFINITY)], ..ok.clone() }, "logit bias"),
            (SamplerParams { logit_bias: vec![(3, f32::NAN)], ..ok.clone() }, "logit bias"),
        ];
        for (p, name) in cases {
            let e = p.validate().expect_err(name).to_string();
            assert!(e.contains(name), "{e}");
        }
        let fine = SamplerParams {
            temperature: -1.0,
            penalty_last_n: -1,
            dry_penalty_last_n: -1,
            logit_bias: vec![(3, f32::NEG_INFINITY), (4, 2.5)],
            top_n_sigma: 0.0,
            order: vec![],
            ..ok
        };
        assert!(fine.validate().is_ok());
    }
}
