//! `ferrolm check-model`: does a model run sanely here (this build, CPU, backend, cache type)?
//!
//! Runs a fixed plain prompt (no chat template) and checks that
//! 1. every logit after the prompt's last token is finite;
//! 2. greedy generation of `-n` tokens gives the same tokens twice (two fresh sessions);
//! 3. the prompt prefilled as one batch and token by token (`n_batch` 1) gives the same greedy
//!    next token and logits within `--tolerance` (relative to the largest logit).
//!
//! 4. with `--reference FILE` (saved by `--save-reference` on another machine, build or
//!    backend): the same prompt tokens, the reference's ten most likely first tokens' logits
//!    within `--reference-tolerance`, and the same greedy tokens, except that the two may part
//!    where the reference's two best logits were within that tolerance of each other (relative
//!    to the largest logit). The numerics contract lets sums differ in their last bits; a flipped
//!    rounding of an 8-bit activation grows through the layers (x86's AVX-512 and portable
//!    kernels differ by 1.9% on Gemma 3 and 2.3% on SmolLM2), so the default is 5%.
//!
//! Prints one verdict line per check, then `OK` or `FAIL`; FAIL exits with status 1.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use ferrolm::model::Model;
use ferrolm::session::{GenerateParams, Session, SessionOptions, StreamEvent};
use serde_json::json;

use crate::model_args::ModelArgs;

/// The prompt every check runs: over 32 tokens, so that its batch takes the CPU's prompt GEMM
/// rather than the small-batch kernels of a decode step.
const PROMPT: &str = "The capital of France is Paris, the capital of Italy is Rome, the capital of Spain \
is Madrid, the capital of Portugal is Lisbon, and the capital of Germany is";

/// Arguments of `ferrolm check-model`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Tokens generated (greedy) by the reproducibility check.
    #[arg(short = 'n', long = "n-predict", default_value_t = 16)]
    n_predict: usize,
    /// Largest difference allowed between a batched prompt's logits and token-by-token ones, as
    /// a fraction of the largest logit (the kernels for a batch and for one token sum in
    /// different orders).
    #[arg(long, default_value_t = 1e-2)]
    tolerance: f32,
    /// Save this run's greedy generation (tokens, the gap between the two best logits at each
    /// step, the first step's ten best logits) as JSON, for `--reference` elsewhere.
    #[arg(long, value_name = "FILE")]
    save_reference: Option<PathBuf>,
    /// Compare with a generation saved by `--save-reference` (another machine, build, backend).
    #[arg(long, value_name = "FILE")]
    reference: Option<PathBuf>,
    /// Largest difference allowed between this run's first-step logits and the reference's, and
    /// the gap below which the reference's two best tokens count as a tie, as a fraction of the
    /// largest logit.
    #[arg(long, default_value_t = 5e-2)]
    reference_tolerance: f32,
}

/// One check's outcome and what it saw.
struct Verdict {
    name: &'static str,
    ok: bool,
    detail: String,
}

/// A greedy generation: the logits after the prompt, the tokens and text, and at each step
/// the gap between the two best logits and the largest |logit| (what a tie is relative to).
struct Run {
    logits: Vec<f32>,
    tokens: Vec<u32>,
    text: String,
    gaps: Vec<(f32, f32)>,
}

/// Runs `prompt` in a fresh session with `opts` and generates `n` greedy tokens.
fn greedy_run(model: &Model, opts: SessionOptions, prompt: &[u32], n: usize) -> anyhow::Result<Run> {
    let mut session = Session::new(model, opts)?;
    let params = GenerateParams { ignore_eos: true, ..GenerateParams::greedy(n) };
    let mut stream = session.stream_tokens(prompt, &params)?;
    let mut run =
        Run { logits: stream.logits().to_vec(), tokens: Vec::new(), text: String::new(), gaps: Vec::new() };
    while let Some(event) = stream.next() {
        match event? {
            StreamEvent::Token { id, text } => {
                run.tokens.push(id);
                run.text.push_str(&text);
                run.gaps.push(top2_gap(stream.logits()));
            }
            StreamEvent::Finished { text, .. } => {
                run.text.push_str(&text);
                break;
            }
        }
    }
    Ok(run)
}

/// The gap between the two largest of `logits`, and the largest |logit|.
fn top2_gap(logits: &[f32]) -> (f32, f32) {
    let (mut a, mut b) = (f32::NEG_INFINITY, f32::NEG_INFINITY);
    for &v in logits {
        if v > a {
            (a, b) = (v, a);
        } else if v > b {
            b = v;
        }
    }
    (a - b, logits.iter().fold(0f32, |m, v| m.max(v.abs())))
}

/// Check 1: every logit is finite.
fn finite(logits: &[f32]) -> Verdict {
    let bad = logits.iter().filter(|v| !v.is_finite()).count();
    let detail = match bad {
        0 => format!("all {} logits after the prompt are finite", logits.len()),
        n => format!("{n} of {} logits after the prompt are NaN or infinite", logits.len()),
    };
    Verdict { name: "finite logits", ok: bad == 0 && !logits.is_empty(), detail }
}

/// Check 2: two greedy generations (tokens and text) agree.
fn reproducible(a: (&[u32], &str), b: (&[u32], &str)) -> Verdict {
    let ok = a.0 == b.0;
    let detail = if ok {
        format!("{} tokens, the same twice: {:?}", a.0.len(), a.1)
    } else {
        let at = a.0.iter().zip(b.0).take_while(|(x, y)| x == y).count();
        format!("the generations part at token {at}: {:?} vs {:?}", a.1, b.1)
    };
    Verdict { name: "greedy reproducible", ok, detail }
}

/// `max |a - b|` and the largest `|a|`.
fn max_diff(a: &[f32], b: &[f32]) -> (f32, f32) {
    let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    let scale = a.iter().fold(0f32, |m, x| m.max(x.abs()));
    (diff, scale)
}

/// Check 3: a batched prompt and a token-by-token one agree (`batch`, `single`: their logits and
/// first greedy tokens).
fn batch_matches(batch: &Run, single: &Run, tolerance: f32, model: &Model) -> Verdict {
    let name = "batch = token by token";
    if batch.logits.len() != single.logits.len() {
        let detail = format!("{} logits vs {}", batch.logits.len(), single.logits.len());
        return Verdict { name, ok: false, detail };
    }
    let (diff, scale) = max_diff(&batch.logits, &single.logits);
    let rel = diff / scale.max(f32::MIN_POSITIVE);
    let (ta, tb) = (batch.tokens.first(), single.tokens.first());
    let piece =
        |t: Option<&u32>| t.map_or("(none)".into(), |&t| format!("{t} {:?}", model.tokenizer().decode(&[t])));
    let same = ta.is_some() && ta == tb;
    let ok = same && rel <= tolerance;
    let token = if same {
        format!("same next token {}", piece(ta))
    } else {
        format!("next token {} vs {}", piece(ta), piece(tb))
    };
    let detail = format!(
        "{token}, max |Δ logit| {diff:.2e} = {:.3}% of the largest logit (tolerance {:.3}%)",
        100.0 * rel,
        100.0 * tolerance
    );
    Verdict { name, ok, detail }
}

/// Runs the command: an error (exit status 1) when a check fails.
pub fn run(args: Args) -> anyhow::Result<()> {
    if args.n_predict == 0 {
        bail!("--n-predict must be at least 1");
    }
    for (flag, v) in [("--tolerance", args.tolerance), ("--reference-tolerance", args.reference_tolerance)] {
        if !v.is_finite() || v < 0.0 {
            bail!("{flag} must be a number, 0 or more");
        }
    }
    let (model, _, path) = args.model.load_with_path()?;
    let prompt = model.tokenizer().encode(PROMPT, true, false).context("tokenizing the prompt")?;
    let opts = args.model.session_options();
    if prompt.len() + args.n_predict > opts.n_ctx {
        bail!(
            "--ctx-size {} is too small for the check ({} tokens)",
            opts.n_ctx,
            prompt.len() + args.n_predict
        );
    }
    println!(
        "check-model: {} ({}, {}, {} threads)",
        path.display(),
        model.config().arch.name(),
        model.placement().describe(),
        ferrolm::threads::current_num_threads()
    );
    println!("prompt: {PROMPT:?} ({} tokens)", prompt.len());
    let batched = SessionOptions { n_batch: opts.n_batch.max(prompt.len()), ..opts.clone() };
    let first = greedy_run(&model, batched.clone(), &prompt, args.n_predict).context("first generation")?;
    let second = greedy_run(&model, batched, &prompt, args.n_predict).context("second generation")?;
    let single = SessionOptions { n_batch: 1, ..opts };
    let one_by_one = greedy_run(&model, single, &prompt, 1).context("token-by-token prompt")?;
    let mut verdicts = vec![
        finite(&first.logits),
        reproducible((&first.tokens, &first.text), (&second.tokens, &second.text)),
        batch_matches(&first, &one_by_one, args.tolerance, &model),
    ];
    if let Some(file) = &args.reference {
        let reference = Reference::read(file)?;
        verdicts.push(reference.compare(&prompt, &first, args.reference_tolerance));
    }
    if let Some(file) = &args.save_reference {
        Reference::of(&prompt, &first).write(file)?;
        println!("reference saved to {}", file.display());
    }
    for v in &verdicts {
        println!("{:<24} {} ({})", format!("{}:", v.name), if v.ok { "OK" } else { "FAIL" }, v.detail);
    }
    let failed = verdicts.iter().filter(|v| !v.ok).count();
    if failed > 0 {
        println!("FAIL");
        bail!("{failed} of {} checks failed", verdicts.len());
    }
    println!("OK");
    Ok(())
}

/// A greedy generation saved by one run for another to compare with (`--save-reference`).
#[derive(Debug, PartialEq)]
struct Reference {
    prompt: Vec<u32>,
    tokens: Vec<u32>,
    /// Per step: the gap between the two best logits, the largest |logit|.
    gaps: Vec<(f32, f32)>,
    /// The ten most likely first tokens and their logits.
    top: Vec<(u32, f32)>,
}

impl Reference {
    fn of(prompt: &[u32], run: &Run) -> Reference {
        let mut ids: Vec<u32> = (0..run.logits.len() as u32).collect();
        ids.sort_by(|&a, &b| run.logits[b as usize].total_cmp(&run.logits[a as usize]).then(a.cmp(&b)));
        let top = ids.iter().take(10).map(|&i| (i, run.logits[i as usize])).collect();
        Reference { prompt: prompt.to_vec(), tokens: run.tokens.clone(), gaps: run.gaps.clone(), top }
    }

    fn write(&self, file: &std::path::Path) -> anyhow::Result<()> {
        let v = json!({
            "prompt": self.prompt, "tokens": self.tokens,
            "gaps": self.gaps.iter().map(|g| [g.0, g.1]).collect::<Vec<_>>(),
            "top": self.top.iter().map(|&(i, l)| json!([i, l])).collect::<Vec<_>>(),
        });
        std::fs::write(file, format!("{v}\n")).with_context(|| format!("writing {}", file.display()))
    }

    fn read(file: &std::path::Path) -> anyhow::Result<Reference> {
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        Self::parse(&text).with_context(|| format!("{} is not a check-model reference", file.display()))
    }

    fn parse(text: &str) -> anyhow::Result<Reference> {
        let v: serde_json::Value = serde_json::from_str(text)?;
        let ids = |key: &str| -> anyhow::Result<Vec<u32>> {
            let a = v[key].as_array().with_context(|| format!("no {key:?} list"))?;
            a.iter().map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()).context("a token id")).collect()
        };
        let pairs = |key: &str| -> anyhow::Result<Vec<(f64, f64)>> {
            let a = v[key].as_array().with_context(|| format!("no {key:?} list"))?;
            a.iter()
                .map(|p| Some((p.get(0)?.as_f64()?, p.get(1)?.as_f64()?)))
                .collect::<Option<_>>()
                .with_context(|| format!("{key:?} holds pairs of numbers"))
        };
        let gaps: Vec<(f32, f32)> = pairs("gaps")?.into_iter().map(|(a, b)| (a as f32, b as f32)).collect();
        let top = pairs("top")?.into_iter().map(|(i, l)| (i as u32, l as f32)).collect();
        let r = Reference { prompt: ids("prompt")?, tokens: ids("tokens")?, gaps, top };
        if r.gaps.len() != r.tokens.len() {
            bail!("{} gaps for {} tokens", r.gaps.len(), r.tokens.len());
        }
        Ok(r)
    }

    /// Check 4: `run` (of `prompt`) against this reference.
    fn compare(&self, prompt: &[u32], run: &Run, tolerance: f32) -> Verdict {
        let name = "same as the reference";
        if prompt != self.prompt {
            let detail = "the prompt's tokens differ: another model or tokenizer".to_string();
            return Verdict { name, ok: false, detail };
        }
        let scale = self.top.iter().fold(0f32, |m, &(_, l)| m.max(l.abs()));
        let logit = |i: u32| run.logits.get(i as usize).copied().unwrap_or(f32::NAN);
        let diff = self.top.iter().fold(0f32, |m, &(i, l)| m.max((logit(i) - l).abs()));
        let logits_ok = diff <= tolerance * scale;
        let same = run.tokens.iter().zip(&self.tokens).take_while(|(a, b)| a == b).count();
        let n = self.tokens.len().min(run.tokens.len());
        let tokens = if same == n {
            (true, format!("the same {n} greedy tokens"))
        } else {
            let (gap, max) = self.gaps[same];
            let tie = gap <= tolerance * max;
            let why = if tie { "a near-tie the tolerance allows" } else { "not a near-tie" };
            (
                tie,
                format!(
                    "the same first {same} of {n} greedy tokens, then the reference's best two logits {gap:.3} apart ({why})"
                ),
            )
        };
        let detail = format!(
            "{}; first-step top-10 logits within {diff:.2e} = {:.3}% of the largest (tolerance {:.3}%)",
            tokens.1,
            100.0 * diff / scale.max(f32::MIN_POSITIVE),
            100.0 * tolerance
        );
        Verdict { name, ok: logits_ok && tokens.0, detail }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn non_finite_logits_fail() {
        assert!(finite(&[0.5, -3.0]).ok);
        let v = finite(&[0.5, f32::NAN, f32::INFINITY]);
        assert!(!v.ok && v.detail.starts_with("2 of 3"), "{}", v.detail);
        assert!(!finite(&[]).ok);
    }

    #[test]
    fn differences_are_relative_to_the_largest_logit() {
        assert_eq!(max_diff(&[1.0, -8.0, 2.0], &[1.5, -8.0, 2.0]), (0.5, 8.0));
    }

    #[test]
    fn generations_that_part_say_where() {
        assert!(reproducible((&[1, 2, 3], "abc"), (&[1, 2, 3], "abc")).ok);
        let v = reproducible((&[1, 2, 3], "abc"), (&[1, 5, 3], "aec"));
        assert!(!v.ok && v.detail.contains("at token 1"), "{}", v.detail);
    }

    fn run_of(tokens: &[u32], gaps: &[(f32, f32)]) -> Run {
        let logits = vec![1.0, 5.0, 3.0, -2.0];
        Run { logits, tokens: tokens.to_vec(), text: String::new(), gaps: gaps.to_vec() }
    }

    #[test]
    fn top_two_gaps() {
        assert_eq!(top2_gap(&[1.0, 5.0, 3.0, -7.0]), (2.0, 7.0));
        assert_eq!(top2_gap(&[4.0, 4.0]), (0.0, 4.0));
    }

    #[test]
    fn references_round_trip_and_bad_files_are_named() {
        let r = Reference::of(&[1, 2], &run_of(&[7, 8], &[(0.5, 9.0), (2.0, 9.5)]));
        assert_eq!(r.top[..2], [(1, 5.0), (2, 3.0)]);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ref.json");
        r.write(&file).unwrap();
        assert_eq!(Reference::read(&file).unwrap(), r);
        std::fs::write(&file, r#"{"prompt": [1], "tokens": [2], "gaps": [], "top": []}"#).unwrap();
        let e = format!("{:#}", Reference::read(&file).unwrap_err());
        assert!(e.contains("not a check-model reference") && e.contains("0 gaps for 1 tokens"), "{e}");
    }

    #[test]
    fn runs_may_part_from_the_reference_only_at_a_near_tie() {
        // The reference's second step is a near-tie (0.05 apart, largest logit 10).
        let reference =
            Reference::of(&[1, 2], &run_of(&[7, 8, 9], &[(3.0, 10.0), (0.05, 10.0), (2.0, 10.0)]));
        let compare = |tokens: &[u32]| reference.compare(&[1, 2], &run_of(tokens, &[(1.0, 1.0); 3]), 1e-2);
        assert!(compare(&[7, 8, 9]).ok);
        let v = compare(&[7, 5, 5]);
        assert!(v.ok && v.detail.contains("first 1 of 3") && v.detail.contains("allows"), "{}", v.detail);
        let v = compare(&[6, 8, 9]);
        assert!(!v.ok && v.detail.contains("not a near-tie"), "{}", v.detail);
        // Another prompt, or logits off by more than the tolerance, fail.
        assert!(!reference.compare(&[1, 3], &run_of(&[7, 8, 9], &[(1.0, 1.0); 3]), 1e-2).ok);
        let mut off = run_of(&[7, 8, 9], &[(1.0, 1.0); 3]);
        off.logits[2] += 0.2;
        let v = reference.compare(&[1, 2], &off, 1e-2);
        assert!(!v.ok && v.detail.contains("top-10 logits within 2.00e-1"), "{}", v.detail);
    }
}
