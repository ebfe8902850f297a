//! `ferrolm micro-bench`: the speed of one operator of the CPU backend at the sizes given on
//! the command line, like `ferrolm bench` does for whole models (see docs/benchmarks.md).
//!
//! Every case calls the CPU backend through the [`Backend`] trait, the entry points the model's
//! forward pass calls: `matmul` (on weights repacked as a model's are), `attention`,
//! `rms_norm` and `rope`. Inputs are random; weights are random f32 rows quantized by the
//! kernels' reference quantizer ([`ferrolm::backend::compare::random_weight`]). A case runs once
//! unrecorded (the warm-up, which also sets how many calls one repetition makes: enough for
//! `--min-time-ms`), then `--repetitions` times; each repetition's time is divided by its calls.

mod cases;
mod output;

use std::time::Instant;

use anyhow::Context as _;
use ferrolm::Isa;

use crate::bench::output::OutputFormat;
use cases::Case;
use output::{Measurement, Printer};

/// Arguments of `ferrolm micro-bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The operator and its sizes.
    #[command(subcommand)]
    pub op: cases::OpArgs,
    /// Thread counts (comma list; default: all available cores).
    #[arg(short = 't', long = "threads", value_delimiter = ',', global = true)]
    pub threads: Vec<usize>,
    /// Timed repetitions per case (the time shown is their median).
    #[arg(short = 'r', long = "repetitions", default_value_t = 5, global = true)]
    pub repetitions: usize,
    /// Each repetition calls the operator as many times as it takes to last about this long
    /// (at least once), so that short operators are timed above the clock's resolution.
    #[arg(long = "min-time-ms", default_value_t = 20.0, global = true)]
    pub min_time_ms: f64,
    /// Output format: md (a table), json, jsonl or csv.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Md, global = true)]
    pub output: OutputFormat,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 1234, global = true)]
    pub seed: u64,
}

/// Parses a size: a number, optionally with a `k` suffix (× 1024): `4096`, `4k`, `11008`.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (digits, scale) = match t.strip_suffix(['k', 'K']) {
        Some(d) => (d, 1024),
        None => (t, 1),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("'{s}' is not a size (a number such as 4096, or 4k)"))
}

/// Parses a size of at least 1 ([`parse_size`]).
pub fn parse_positive_size(s: &str) -> Result<usize, String> {
    match parse_size(s)? {
        0 => Err(format!("'{s}': the size must be at least 1")),
        n => Ok(n),
    }
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    if args.repetitions == 0 {
        anyhow::bail!("--repetitions must be at least 1");
    }
    if !args.min_time_ms.is_finite() || args.min_time_ms < 0.0 {
        anyhow::bail!("--min-time-ms must be a number of milliseconds, 0 or more");
    }
    let threads = if args.threads.is_empty() {
        vec![std::thread::available_parallelism().map_or(1, |n| n.get())]
    } else {
        args.threads.clone()
    };
    if threads.contains(&0) {
        anyhow::bail!("--threads values must be at least 1");
    }
    // Every case is made (and its sizes checked) before anything is printed.
    let cases = args.op.cases(args.seed)?;
    let isa = Isa::best();
    let mut printer = Printer::new(args.output, std::io::stdout().lock());
    printer.begin(isa)?;
    for &n_threads in &threads {
        ferrolm::threads::set_num_threads(n_threads)
            .with_context(|| format!("cannot start {n_threads} worker threads"))?;
        for case in &cases {
            tracing::info!(op = case.op, case = %case.label, n_threads, "micro-bench");
            let (iterations, samples_ns) = measure(case, args.repetitions, args.min_time_ms)?;
            printer.result(&Measurement { case, isa, n_threads, iterations, samples_ns })?;
        }
    }
    printer.finish()
}

/// Times `case`: one warm-up call, which also sets the calls per repetition, then
/// `repetitions` repetitions. Returns the calls per repetition and each repetition's time per
/// call in nanoseconds.
fn measure(case: &Case, repetitions: usize, min_time_ms: f64) -> anyhow::Result<(u64, Vec<u64>)> {
    let mut run = case.runner.borrow_mut();
    let t0 = Instant::now();
    run().with_context(|| format!("{} {}", case.op, case.label))?;
    let warm_ns = t0.elapsed().as_nanos().max(1) as f64;
    let iterations = ((min_time_ms * 1e6 / warm_ns).ceil() as u64).clamp(1, 1 << 24);
    let mut samples = Vec::with_capacity(repetitions);
    for _ in 0..repetitions {
        let t0 = Instant::now();
        for _ in 0..iterations {
            run()?;
        }
        let per_call = t0.elapsed().as_nanos() as f64 / iterations as f64;
        samples.push((per_call.round() as u64).max(1));
    }
    Ok((iterations, samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_numbers_with_an_optional_k() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size(" 11K "), Ok(11264));
        assert_eq!(parse_size("0"), Ok(0));
        for bad in ["", "k", "4m", "-1", "1.5k", "99999999999999999999k"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
        assert!(parse_positive_size("0").is_err());
        assert_eq!(parse_positive_size("1"), Ok(1));
    }
}
