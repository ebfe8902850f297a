//! `ferrolm embed`: embedding vectors of texts.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use ferrolm::model::{LoadOptions, Model, Pooling};

/// Arguments of `ferrolm embed`.
#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file, Hugging Face model folder, or catalog name (default: the default model).
    #[arg(short = 'm', long)]
    model: Option<String>,
    /// A text to embed (repeatable).
    #[arg(short = 'p', long = "prompt")]
    prompts: Vec<String>,
    /// Embed each non-empty line of this file.
    #[arg(short = 'f', long)]
    file: Option<PathBuf>,
    /// Pooling of the token states: mean, cls or last (default: the model's, else mean).
    #[arg(long, value_parser = parse_pooling)]
    pooling: Option<Pooling>,
    /// Do not L2-normalise the vectors.
    #[arg(long)]
    no_normalize: bool,
    /// Output: `json` (an OpenAI-style list) or `text` (one line of numbers per text).
    #[arg(long, default_value = "json", value_parser = ["json", "text"])]
    output: String,
    /// Worker threads (default: one per CPU used: the performance cores, else all cores).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// Which CPUs the worker threads run on.
    #[command(flatten)]
    cpu: crate::cpu_args::CpuArgs,
}

fn parse_pooling(s: &str) -> Result<Pooling, String> {
    Pooling::from_name(s).ok_or_else(|| format!("unknown pooling '{s}' (use mean, cls or last)"))
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    let mut texts = args.prompts.clone();
    if let Some(f) = &args.file {
        let all = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        texts.extend(all.lines().filter(|l| !l.trim().is_empty()).map(str::to_string));
    }
    if texts.is_empty() {
        bail!("give texts with -p TEXT (repeatable) or -f FILE (one per line)");
    }
    args.cpu.apply(args.threads)?;
    let path = crate::pull::resolve_model(args.model.as_deref())?;
    let model = Model::load_with(&path, &LoadOptions::default())
        .with_context(|| format!("loading {}", path.display()))?;
    let pooling = args.pooling.or_else(|| model.default_pooling()).unwrap_or_default();
    let vectors = model.embed(&texts, pooling, !args.no_normalize)?;

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.output == "text" {
        for v in &vectors {
            let line: Vec<String> = v.iter().map(|x| format!("{x:.6}")).collect();
            writeln!(out, "{}", line.join(" "))?;
        }
    } else {
        let data: Vec<serde_json::Value> = vectors
            .iter()
            .enumerate()
            .map(|(i, v)| serde_json::json!({"object": "embedding", "index": i, "embedding": v}))
            .collect();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let doc = serde_json::json!({
            "object": "list",
            "model": name,
            "pooling": format!("{pooling:?}").to_lowercase(),
            "normalized": !args.no_normalize,
            "data": data,
        });
        writeln!(out, "{}", serde_json::to_string(&doc)?)?;
    }
    Ok(())
}
