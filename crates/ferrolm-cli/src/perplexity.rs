//! `ferrolm perplexity`: perplexity over a text file, with any KV eviction policy and budget.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use ferrolm::eval::{PerplexityOptions, PerplexityResult, Scoring, perplexity};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::model_args::ModelArgs;

/// Arguments of `ferrolm perplexity`.
#[derive(clap::Args)]
pub struct Args {
    /// Model, threads, window length (--ctx-size), chunk size (--batch-size), cache types and
    /// eviction options.
    #[command(flatten)]
    model: ModelArgs,
    /// Text file to score.
    #[arg(short = 'f', long)]
    file: PathBuf,
    /// Tokens scored per window and distance between windows; 0 (the default) means half the
    /// context size (--ctx-size / 2). Sliding windows only.
    #[arg(long, default_value_t = 0, hide_default_value = true)]
    stride: usize,
    /// How windows are placed: `sliding` (windows --stride apart, each scoring its last --stride
    /// tokens: every token after the first context scored once) or `chunks` (llama-perplexity's:
    /// non-overlapping windows of --ctx-size with BOS first, each scoring the tokens after its
    /// first half; the text is tokenized with BOS in front as llama.cpp does, so the figures
    /// compare with its "Final estimate").
    #[arg(long, default_value = "sliding", value_parser = ["sliding", "chunks"])]
    scoring: String,
    /// Stop after this many windows (llama-perplexity's --chunks).
    #[arg(long = "max-windows", alias = "chunks")]
    max_windows: Option<usize>,
    /// Output: text or json.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    output: String,
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    args.model.cache.validate()?;
    let text =
        std::fs::read_to_string(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let scoring = if args.scoring == "chunks" { Scoring::Chunks } else { Scoring::Sliding };
    if scoring == Scoring::Chunks && args.stride != 0 {
        bail!("--stride applies to --scoring sliding; llama.cpp-style chunks do not overlap");
    }
    let (model, _) = args.model.load()?;
    // llama-perplexity tokenizes with BOS in front (the model's add_bos decides).
    let tokens = model.tokenizer().encode(&text, scoring == Scoring::Chunks, false)?;
    let sopts = args.model.session_options();
    let opts = PerplexityOptions {
        n_ctx: sopts.n_ctx,
        stride: args.stride,
        n_batch: sopts.n_batch,
        type_k: sopts.type_k,
        type_v: sopts.type_v,
        cache: sopts.cache.clone(),
        max_windows: args.max_windows,
        scoring,
    };
    if tokens.len() < opts.n_ctx {
        bail!(
            "{} has {} tokens, fewer than one window (--ctx-size {})",
            args.file.display(),
            tokens.len(),
            opts.n_ctx
        );
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("perplexity {bar:30} {pos}/{len} windows {elapsed} (eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let res = perplexity(&model, &tokens, &opts, &mut |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    if args.output == "json" {
        print_json(&args, &opts, tokens.len(), &res)
    } else {
        print_text(&opts, &res);
        Ok(())
    }
}

/// Distance between window starts.
fn step(opts: &PerplexityOptions) -> usize {
    match opts.scoring {
        Scoring::Chunks => opts.n_ctx,
        Scoring::Sliding if opts.stride == 0 => opts.n_ctx / 2,
        Scoring::Sliding => opts.stride,
    }
}

/// Tokens per second over the whole run.
fn tokens_per_second(res: &PerplexityResult) -> f64 {
    res.n_processed as f64 / res.time.as_secs_f64().max(1e-9)
}

/// `--output json`: one object with the settings and every figure.
fn print_json(
    args: &Args,
    opts: &PerplexityOptions,
    n_tokens: usize,
    res: &PerplexityResult,
) -> anyhow::Result<()> {
    let c = &opts.cache;
    let v = json!({
        "file": args.file.display().to_string(),
        "n_tokens": n_tokens,
        "n_ctx": opts.n_ctx,
        "scoring": opts.scoring.name(),
        "stride": step(opts),
        "n_batch": opts.n_batch,
        "cache_type_k": opts.type_k.name(),
        "cache_type_v": opts.type_v.name(),
        "eviction_policy": c.policy.name(),
        "eviction_window": c.window,
        "protected_prefix": c.protected_prefix,
        "kv_budget": c.kv_budget,
        "evict_ratio": c.target_ratio,
        "perplexity": res.perplexity,
        "mean_nll": res.mean_nll,
        "nll_stderr": res.nll_stderr,
        "n_scored": res.n_scored,
        "n_windows": res.n_windows,
        "window_perplexity": res.window_perplexity,
        "n_processed": res.n_processed,
        "seconds": res.time.as_secs_f64(),
        "tokens_per_second": tokens_per_second(res),
        "evictions": res.evictions.n_events,
        "evicted_tokens": res.evictions.n_evicted,
        "peak_kv_tokens": res.evictions.peak_len,
    });
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &v)?;
    writeln!(out)?;
    Ok(())
}

/// Text output: per-window figures and the estimate on stdout (llama-perplexity's running
/// estimates and "Final estimate" line for chunks), the cache and speed on stderr.
fn print_text(opts: &PerplexityOptions, res: &PerplexityResult) {
    if opts.scoring == Scoring::Chunks {
        let mut sum = 0.0;
        let running: Vec<String> = res
            .window_perplexity
            .iter()
            .enumerate()
            .map(|(i, p)| {
                sum += p.ln();
                format!("[{}]{:.4}", i + 1, (sum / (i + 1) as f64).exp())
            })
            .collect();
        println!("{},", running.join(","));
        println!(
            "Final estimate: PPL = {:.4} +/- {:.5} ({} chunks of {}, {} tokens scored)",
            res.perplexity,
            res.perplexity * res.nll_stderr,
            res.n_windows,
            opts.n_ctx,
            res.n_scored
        );
    } else {
        for (i, p) in res.window_perplexity.iter().enumerate() {
            println!("[{}] {p:.4}", i + 1);
        }
        println!(
            "perplexity = {:.4} ± {:.4} over {} tokens ({} windows of {}, stride {})",
            res.perplexity,
            res.perplexity * res.nll_stderr,
            res.n_scored,
            res.n_windows,
            opts.n_ctx,
            step(opts)
        );
    }
    let c = &opts.cache;
    eprintln!(
        "kv: {}/{} cache, policy {} (window {}, protected {}, budget {}), {} evictions of {} tokens, peak {} tokens; {:.1} s, {:.1} tokens/s",
        opts.type_k.name(),
        opts.type_v.name(),
        c.policy,
        c.window,
        c.protected_prefix,
        c.kv_budget.map_or("none".to_string(), |b| b.to_string()),
        res.evictions.n_events,
        res.evictions.n_evicted,
        res.evictions.peak_len,
        res.time.as_secs_f64(),
        tokens_per_second(res)
    );
}
