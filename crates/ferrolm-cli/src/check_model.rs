//! `ferrolm check-model`: does a model run sanely here (this build, CPU, backend, cache type)?
//!
//! Runs a fixed plain prompt (no chat template) and checks that
//! 1. every logit after the prompt's last token is finite;
//! 2. greedy generation of `-n` tokens gives the same tokens twice (two fresh sessions);
//! 3. the prompt prefilled as one batch and token by token (`n_batch` 1) gives the same greedy
//!    next token and logits within `--tolerance` (relative to the largest logit).
//!
//! Prints one verdict line per check, then `OK` or `FAIL`; FAIL exits with status 1.

use anyhow::{Context as _, bail};
use ferrolm::model::Model;
use ferrolm::session::{Completion, GenerateParams, Session, SessionOptions};

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
}

/// One check's outcome and what it saw.
struct Verdict {
    name: &'static str,
    ok: bool,
    detail: String,
}

/// A greedy generation's logits after the prompt and its completion.
struct Run {
    logits: Vec<f32>,
    completion: Completion,
}

/// Runs `prompt` in a fresh session with `opts` and generates `n` greedy tokens.
fn greedy_run(model: &Model, opts: SessionOptions, prompt: &[u32], n: usize) -> anyhow::Result<Run> {
    let mut session = Session::new(model, opts)?;
    let params = GenerateParams { ignore_eos: true, ..GenerateParams::greedy(n) };
    let stream = session.stream_tokens(prompt, &params)?;
    let logits = stream.logits().to_vec();
    Ok(Run { logits, completion: stream.into_completion()? })
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
    let (ta, tb) = (batch.completion.tokens.first(), single.completion.tokens.first());
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
    if !args.tolerance.is_finite() || args.tolerance < 0.0 {
        bail!("--tolerance must be a number, 0 or more");
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
    let verdicts = [
        finite(&first.logits),
        reproducible(
            (&first.completion.tokens, &first.completion.text),
            (&second.completion.tokens, &second.completion.text),
        ),
        batch_matches(&first, &one_by_one, args.tolerance, &model),
    ];
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

#[cfg(test)]
mod tests {
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
}
