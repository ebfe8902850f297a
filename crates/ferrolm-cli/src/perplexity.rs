//! `ferrolm perplexity`: perplexity over a text file, with any KV eviction policy and budget.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use ferrolm::eval::{PerplexityOptions, perplexity};
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
    /// context size (--ctx-size / 2).
    #[arg(long, default_value_t = 0, hide_default_value = true)]
    stride: usize,
    /// Stop after this many windows.
    #[arg(long = "max-windows")]
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
    let (model, _) = args.model.load()?;
    let tokens = model.tokenizer().encode(&text, false, false)?;
    let sopts = args.model.session_options();
    let opts = PerplexityOptions {
        n_ctx: sopts.n_ctx,
        stride: args.stride,
        n_batch: sopts.n_batch,
        type_k: sopts.type_k,
        type_v: sopts.type_v,
        cache: sopts.cache.clone(),
        max_windows: args.max_windows,
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
    let c = &opts.cache;
    let ty = |t: ferrolm::kv::KvType| t.name();
    let stride = if opts.stride == 0 { opts.n_ctx / 2 } else { opts.stride };
    let tps = res.n_processed as f64 / res.time.as_secs_f64().max(1e-9);
    if args.output == "json" {
        let v = json!({
            "file": args.file.display().to_string(),
            "n_tokens": tokens.len(),
            "n_ctx": opts.n_ctx,
            "stride": stride,
            "n_batch": opts.n_batch,
            "cache_type_k": ty(opts.type_k),
            "cache_type_v": ty(opts.type_v),
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
            "tokens_per_second": tps,
            "evictions": res.evictions.n_events,
            "evicted_tokens": res.evictions.n_evicted,
            "peak_kv_tokens": res.evictions.peak_len,
        });
        let mut out = std::io::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
    } else {
        for (i, p) in res.window_perplexity.iter().enumerate() {
            println!("[{}] {p:.4}", i + 1);
        }
        println!(
            "perplexity = {:.4} ± {:.4} over {} tokens ({} windows of {}, stride {stride})",
            res.perplexity,
            res.perplexity * res.nll_stderr,
            res.n_scored,
            res.n_windows,
            opts.n_ctx
        );
        eprintln!(
            "kv: {}/{} cache, policy {} (window {}, protected {}, budget {}), {} evictions of {} tokens, peak {} tokens; {:.1} s, {tps:.1} tokens/s",
            ty(opts.type_k),
            ty(opts.type_v),
            c.policy,
            c.window,
            c.protected_prefix,
            c.kv_budget.map_or("none".to_string(), |b| b.to_string()),
            res.evictions.n_events,
            res.evictions.n_evicted,
            res.evictions.peak_len,
            res.time.as_secs_f64()
        );
    }
    Ok(())
}
