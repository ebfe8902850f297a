//! Sampling options shared by the commands that generate text, with llama.cpp's flag names.

use anyhow::{Context, bail};
use ferrolm::sampling::{SamplerParams, SamplerStep};

/// Sampling options (defaults: `SamplerParams::default()`, llama.cpp's).
#[derive(clap::Args, Clone, Debug)]
#[command(next_help_heading = "Sampling")]
pub struct SamplingArgs {
    /// Temperature (<= 0: greedy).
    #[arg(
        long = "temp",
        visible_alias = "temperature",
        default_value_t = 0.8,
        allow_negative_numbers = true
    )]
    pub temp: f32,
    /// Top-k sampling (<= 0 = off).
    #[arg(long = "top-k", default_value_t = 40, allow_negative_numbers = true)]
    pub top_k: i64,
    /// Top-p (nucleus) sampling (1.0 = off).
    #[arg(long = "top-p", default_value_t = 0.95)]
    pub top_p: f32,
    /// Min-p sampling (0.0 = off).
    #[arg(long = "min-p", default_value_t = 0.05)]
    pub min_p: f32,
    /// Locally typical sampling, parameter p (1.0 = off).
    #[arg(long = "typical", visible_alias = "typical-p", default_value_t = 1.0)]
    pub typical: f32,
    /// Top-n-sigma sampling (<= 0 = off).
    #[arg(long = "top-nsigma", visible_alias = "top-n-sigma", default_value_t = -1.0, allow_negative_numbers = true)]
    pub top_nsigma: f32,
    /// XTC probability (0.0 = off).
    #[arg(long = "xtc-probability", default_value_t = 0.0)]
    pub xtc_probability: f32,
    /// XTC threshold (> 0.5 = off).
    #[arg(long = "xtc-threshold", default_value_t = 0.1)]
    pub xtc_threshold: f32,
    /// Last n tokens considered by the penalties (0 = off, -1 = the whole history).
    #[arg(long = "repeat-last-n", default_value_t = 64, allow_negative_numbers = true)]
    pub repeat_last_n: i32,
    /// Repetition penalty (1.0 = off).
    #[arg(long = "repeat-penalty", default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Presence penalty (0.0 = off).
    #[arg(long = "presence-penalty", default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Frequency penalty (0.0 = off).
    #[arg(long = "frequency-penalty", default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// DRY multiplier (0.0 = off).
    #[arg(long = "dry-multiplier", default_value_t = 0.0)]
    pub dry_multiplier: f32,
    /// DRY base (the penalty is multiplier * base^(length - allowed length)).
    #[arg(long = "dry-base", default_value_t = 1.75)]
    pub dry_base: f32,
    /// Repeats longer than this are penalised by DRY.
    #[arg(long = "dry-allowed-length", default_value_t = 2)]
    pub dry_allowed_length: usize,
    /// Last n tokens scanned by DRY (0 = off, -1 = the whole history).
    #[arg(long = "dry-penalty-last-n", default_value_t = 64, allow_negative_numbers = true)]
    pub dry_penalty_last_n: i32,
    /// DRY sequence breaker; repeat the flag for several. Replaces the defaults ('\n', ':', '"',
    /// '*'); "none" for no breakers.
    #[arg(long = "dry-sequence-breaker", value_name = "STRING")]
    pub dry_sequence_breaker: Vec<String>,
    /// Dynamic temperature range (0.0 = off).
    #[arg(long = "dynatemp-range", default_value_t = 0.0)]
    pub dynatemp_range: f32,
    /// Dynamic temperature exponent.
    #[arg(long = "dynatemp-exp", default_value_t = 1.0)]
    pub dynatemp_exp: f32,
    /// Mirostat: 0 = off, 1 = Mirostat, 2 = Mirostat 2.0 (replaces top-k, top-p, ... when on).
    #[arg(long = "mirostat", default_value_t = 0)]
    pub mirostat: u8,
    /// Mirostat learning rate (eta).
    #[arg(long = "mirostat-lr", default_value_t = 0.1)]
    pub mirostat_lr: f32,
    /// Mirostat target entropy (tau).
    #[arg(long = "mirostat-ent", default_value_t = 5.0)]
    pub mirostat_ent: f32,
    /// Logit bias TOKEN_ID(+/-)BIAS, e.g. `15043+1` or `15043-inf`; repeat the flag for several.
    #[arg(short = 'l', long = "logit-bias", value_name = "TOKEN_ID(+/-)BIAS", value_parser = parse_logit_bias)]
    pub logit_bias: Vec<(u32, f32)>,
    /// Sampler order, names separated by ';' (e.g. "penalties;top_k;top_p;temperature").
    #[arg(long = "samplers", value_name = "SAMPLERS", conflicts_with = "sampling_seq")]
    pub samplers: Option<String>,
    /// Sampler order as one letter per step (e=penalties d=dry s=top_n_sigma k=top_k y=typ_p
    /// p=top_p m=min_p x=xtc t=temperature; default "edskypmxt").
    #[arg(long = "sampling-seq", visible_alias = "sampler-seq", value_name = "SEQUENCE")]
    pub sampling_seq: Option<String>,
    /// Random seed (default or -1: random).
    #[arg(short = 's', long = "seed", value_parser = parse_seed, allow_negative_numbers = true)]
    pub seed: Option<Seed>,
    /// Truncation steps keep at least this many tokens.
    #[arg(long = "min-keep", default_value_t = 0)]
    pub min_keep: usize,
}

/// A `--seed` value: a number, or random (-1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seed(pub Option<u64>);

fn parse_seed(s: &str) -> Result<Seed, String> {
    if s.trim() == "-1" {
        return Ok(Seed(None));
    }
    s.trim().parse::<u64>().map(|v| Seed(Some(v))).map_err(|e| format!("invalid seed '{s}': {e}"))
}

/// Parses llama.cpp's `TOKEN_ID(+/-)BIAS` (`15043+1`, `15043-0.5`, `15043-inf`).
fn parse_logit_bias(s: &str) -> Result<(u32, f32), String> {
    let err = || format!("invalid logit bias '{s}': expected TOKEN_ID(+/-)BIAS, e.g. 15043+1 or 15043-inf");
    let s = s.trim();
    let split = s.find(['+', '-']).ok_or_else(err)?;
    let (id, rest) = s.split_at(split);
    let id: u32 = id.trim().parse().map_err(|_| err())?;
    let sign = if rest.starts_with('-') { -1.0 } else { 1.0 };
    let value: f32 = rest[1..].trim().parse().map_err(|_| err())?;
    if value.is_nan() || value.is_sign_negative() {
        return Err(err());
    }
    Ok((id, sign * value))
}

impl SamplingArgs {
    /// The sampler parameters these options give (validated).
    pub fn to_params(&self) -> anyhow::Result<SamplerParams> {
        let defaults = SamplerParams::default();
        let order = match (&self.samplers, &self.sampling_seq) {
            (Some(names), _) => SamplerStep::from_names(names).context("--samplers")?,
            (None, Some(seq)) => SamplerStep::from_letters(seq).context("--sampling-seq")?,
            (None, None) => defaults.order.clone(),
        };
        let dry_sequence_breakers = if self.dry_sequence_breaker.is_empty() {
            defaults.dry_sequence_breakers.clone()
        } else if self.dry_sequence_breaker.iter().any(|b| b == "none") {
            if self.dry_sequence_breaker.len() > 1 {
                bail!("--dry-sequence-breaker none cannot be combined with other breakers");
            }
            Vec::new()
        } else {
            self.dry_sequence_breaker.clone()
        };
        let params = SamplerParams {
            temperature: self.temp,
            dynatemp_range: self.dynatemp_range,
            dynatemp_exponent: self.dynatemp_exp,
            top_k: usize::try_from(self.top_k.max(0)).unwrap_or(usize::MAX),
            top_p: self.top_p,
            min_p: self.min_p,
            typical_p: self.typical,
            top_n_sigma: self.top_nsigma,
            xtc_probability: self.xtc_probability,
            xtc_threshold: self.xtc_threshold,
            penalty_last_n: self.repeat_last_n,
            repeat_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            dry_multiplier: self.dry_multiplier,
            dry_base: self.dry_base,
            dry_allowed_length: self.dry_allowed_length,
            dry_penalty_last_n: self.dry_penalty_last_n,
            dry_sequence_breakers,
            mirostat: self.mirostat,
            mirostat_tau: self.mirostat_ent,
            mirostat_eta: self.mirostat_lr,
            logit_bias: self.logit_bias.clone(),
            min_keep: self.min_keep,
            order,
            seed: self.seed.and_then(|s| s.0),
        };
        params.validate()?;
        Ok(params)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        s: SamplingArgs,
    }

    fn parse(args: &[&str]) -> anyhow::Result<SamplerParams> {
        let cli = Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()))?;
        cli.s.to_params()
    }

    #[test]
    fn defaults_equal_sampler_params_default() {
        assert_eq!(parse(&[]).expect("defaults"), SamplerParams::default());
    }

    #[test]
    fn every_flag_reaches_its_parameter() {
        let p = parse(&[
            "--temp",
            "0.5",
            "--top-k",
            "7",
            "--top-p",
            "0.9",
            "--min-p",
            "0.1",
            "--typical",
            "0.8",
            "--top-nsigma",
            "1.5",
            "--xtc-probability",
            "0.3",
            "--xtc-threshold",
            "0.2",
            "--repeat-last-n",
            "-1",
            "--repeat-penalty",
            "1.1",
            "--presence-penalty",
            "0.4",
            "--frequency-penalty",
            "-0.2",
            "--dry-multiplier",
            "0.8",
            "--dry-base",
            "2",
            "--dry-allowed-length",
            "3",
            "--dry-penalty-last-n",
            "128",
            "--dry-sequence-breaker",
            "\n",
            "--dry-sequence-breaker",
            "###",
            "--dynatemp-range",
            "0.25",
            "--dynatemp-exp",
            "1.5",
            "--mirostat",
            "2",
            "--mirostat-lr",
            "0.2",
            "--mirostat-ent",
            "4",
            "-l",
            "15043+1",
            "--logit-bias",
            "2-inf",
            "--logit-bias",
            "9-0.5",
            "--sampling-seq",
            "kt",
            "-s",
            "123",
            "--min-keep",
            "2",
        ])
        .expect("all flags");
        assert_eq!((p.temperature, p.top_k, p.top_p, p.min_p, p.typical_p), (0.5, 7, 0.9, 0.1, 0.8));
        assert_eq!((p.top_n_sigma, p.xtc_probability, p.xtc_threshold), (1.5, 0.3, 0.2));
        assert_eq!(
            (p.penalty_last_n, p.repeat_penalty, p.presence_penalty, p.frequency_penalty),
            (-1, 1.1, 0.4, -0.2)
        );
        assert_eq!(
            (p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n),
            (0.8, 2.0, 3, 128)
        );
        assert_eq!(p.dry_sequence_breakers, vec!["\n", "###"]);
        assert_eq!((p.dynatemp_range, p.dynatemp_exponent), (0.25, 1.5));
        assert_eq!((p.mirostat, p.mirostat_eta, p.mirostat_tau), (2, 0.2, 4.0));
        assert_eq!(p.logit_bias, vec![(15043, 1.0), (2, f32::NEG_INFINITY), (9, -0.5)]);
        assert_eq!(p.order, vec![SamplerStep::TopK, SamplerStep::Temperature]);
        assert_eq!((p.seed, p.min_keep), (Some(123), 2));
    }

    #[test]
    fn orders_breakers_seed_and_errors() {
        let p = parse(&["--samplers", "top_k;temp"]).expect("names");
        assert_eq!(p.order, vec![SamplerStep::TopK, SamplerStep::Temperature]);
        assert!(parse(&["--samplers", "top_k", "--sampling-seq", "k"]).is_err());
        assert!(parse(&["--samplers", "top_k;bogus"]).is_err());
        assert!(parse(&["--sampling-seq", "kq"]).is_err());
        assert!(parse(&["--dry-sequence-breaker", "none"]).expect("none").dry_sequence_breakers.is_empty());
        assert_eq!(parse(&["-s", "-1"]).expect("random").seed, None);
        assert_eq!(parse(&["--top-k", "-1"]).expect("off").top_k, 0);
        assert!(parse(&["--top-p", "1.5"]).is_err());
        assert!(parse(&["-l", "15043"]).is_err());
        assert!(parse(&["-l", "x+1"]).is_err());
        assert!(parse(&["-l", "5+inf"]).is_err());
    }
}
