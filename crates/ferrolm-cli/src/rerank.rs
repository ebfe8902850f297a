//! `ferrolm rerank`: how relevant each document is to a query, with a reranker model.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use ferrolm::model::{LoadOptions, Model};

/// Arguments of `ferrolm rerank`.
#[derive(clap::Args)]
pub struct Args {
    /// A reranker model: a GGUF with a classifier head and a `rerank` template (as llama.cpp's
    /// converter writes Qwen3-Reranker), or a BERT / XLM-RoBERTa cross-encoder GGUF with a
    /// classifier head (bge-reranker, ms-marco MiniLM), a folder or a catalog name.
    #[arg(short = 'm', long)]
    model: Option<String>,
    /// The query.
    #[arg(short = 'q', long)]
    query: String,
    /// A document to score (repeatable).
    #[arg(short = 'd', long = "document")]
    documents: Vec<String>,
    /// Score each non-empty line of this file as a document.
    #[arg(short = 'f', long)]
    file: Option<PathBuf>,
    /// Keep only the best N documents.
    #[arg(long)]
    top_n: Option<usize>,
    /// Output: `json` (llama-server's /v1/rerank shape) or `text` (score, index and document per line).
    #[arg(long, default_value = "json", value_parser = ["json", "text"])]
    output: String,
    /// Worker threads (default: one per CPU used: the performance cores, else all cores).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// Which CPUs the worker threads run on.
    #[command(flatten)]
    cpu: crate::cpu_args::CpuArgs,
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    let mut docs = args.documents.clone();
    if let Some(f) = &args.file {
        let all = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        docs.extend(all.lines().filter(|l| !l.trim().is_empty()).map(str::to_string));
    }
    if docs.is_empty() {
        bail!("give documents with -d TEXT (repeatable) or -f FILE (one per line)");
    }
    args.cpu.apply(args.threads)?;
    let path = crate::pull::resolve_model(args.model.as_deref())?;
    let model = Model::load_with(&path, &LoadOptions::default())
        .with_context(|| format!("loading {}", path.display()))?;
    if !model.is_reranker() {
        bail!(
            "{} is not a reranker (it needs a classifier head, and a rerank template unless it is a cross-encoder)",
            path.display()
        );
    }
    let scores = model.rerank(&args.query, &docs)?;
    let mut order = ferrolm::model::ranking(&scores);
    order.truncate(args.top_n.unwrap_or(docs.len()));

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.output == "text" {
        for &i in &order {
            writeln!(out, "{:.6}\t{i}\t{}", scores[i].score, docs[i])?;
        }
        return Ok(());
    }
    let n_tokens: usize = scores.iter().map(|s| s.n_tokens).sum();
    let results: Vec<serde_json::Value> = order
        .iter()
        .map(|&i| serde_json::json!({"index": i, "relevance_score": scores[i].score, "document": {"text": docs[i]}}))
        .collect();
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let doc = serde_json::json!({
        "object": "list",
        "model": name,
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        "results": results,
    });
    writeln!(out, "{}", serde_json::to_string(&doc)?)?;
    Ok(())
}
