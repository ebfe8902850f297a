//! `ferrolm generate`: stream a continuation of a prompt.

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;

use anyhow::{Context, bail};
use ferrolm::engine::{FinishReason, GenerateOptions, generate};
use ferrolm::kv::KvType;
use ferrolm::model::{GgmlType, LoadOptions, Model};
use ferrolm::tokenizer::StreamDecoder;

/// Arguments of `ferrolm generate`.
#[derive(clap::Args)]
pub struct Args {
    /// GGUF model file, Hugging Face model folder, or catalog name; without it the default model
    /// is used (downloaded on first use).
    #[arg(short = 'm', long)]
    model: Option<String>,
    /// Quantize float weights at load (for Hugging Face folders): q8_0, q4_0, q4_k or f16.
    #[arg(long, value_parser = crate::convert::parse_load_quant)]
    quantize: Option<GgmlType>,
    /// Prompt text.
    #[arg(short = 'p', long, conflicts_with = "file")]
    prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(short = 'f', long)]
    file: Option<PathBuf>,
    /// Number of tokens to generate (-1: until end of generation or a full context).
    #[arg(short = 'n', long = "n-predict", default_value_t = 256, allow_negative_numbers = true)]
    n_predict: i64,
    #[command(flatten)]
    sampling: Box<crate::sampling_args::SamplingArgs>,
    /// Worker threads (default: all available cores).
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// Context size in tokens (prompt + generation).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 4096)]
    ctx_size: usize,
    /// Largest prompt chunk per forward pass.
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    batch_size: usize,
    /// Storage type of cached keys: f16 (llama.cpp's default) or f32.
    #[arg(long = "cache-type-k", default_value = "f16", value_parser = parse_kv_type)]
    cache_type_k: KvType,
    /// Storage type of cached values: f16 or f32.
    #[arg(long = "cache-type-v", default_value = "f16", value_parser = parse_kv_type)]
    cache_type_v: KvType,
    /// Do not echo the prompt before the generated text.
    #[arg(long)]
    no_display_prompt: bool,
    /// Do not parse special tokens (like `<|im_start|>`) in the prompt.
    #[arg(long)]
    no_parse_special: bool,
    /// Keep generating past end-of-generation tokens.
    #[arg(long)]
    ignore_eos: bool,
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    let prompt = match (&args.prompt, &args.file) {
        (Some(p), _) => p.clone(),
        (None, Some(f)) => {
            std::fs::read_to_string(f).with_context(|| format!("reading prompt file {}", f.display()))?
        }
        (None, None) => bail!("give a prompt with -p TEXT or -f FILE"),
    };
    if args.ctx_size == 0 {
        bail!("--ctx-size must be at least 1");
    }
    let sampler = args.sampling.to_params()?;
    ferrolm::threads::init(args.threads)?;
    let path = crate::pull::resolve_model(args.model.as_deref())?;
    let t_load = std::time::Instant::now();
    let load_opts = LoadOptions { quantize: args.quantize, ..LoadOptions::default() };
    let model = Model::load_with(&path, &load_opts).with_context(|| format!("loading {}", path.display()))?;
    let load_ms = t_load.elapsed().as_secs_f64() * 1e3;

    let tok = model.tokenizer();
    let tokens = tok.encode(&prompt, true, !args.no_parse_special)?;
    if tokens.is_empty() {
        bail!("the prompt tokenized to nothing");
    }
    if tokens.len() >= args.ctx_size {
        bail!("the prompt has {} tokens, which does not fit --ctx-size {}", tokens.len(), args.ctx_size);
    }
    let room = args.ctx_size - tokens.len();
    let max_tokens = if args.n_predict < 0 { room } else { (args.n_predict as usize).min(room) };
    let opts =
        GenerateOptions { max_tokens, sampler, n_batch: args.batch_size, stop_at_eog: !args.ignore_eos };

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if !args.no_display_prompt {
        write!(out, "{prompt}")?;
        out.flush()?;
    }
    let mut kv = model.new_kv_cache_typed(args.ctx_size, args.cache_type_k, args.cache_type_v);
    let mut decoder = StreamDecoder::new();
    let mut io_err = None;
    let stats = generate(&model, &mut kv, 0, &tokens, &opts, |id| {
        if tok.is_eog(id) && !args.ignore_eos {
            return ControlFlow::Continue(());
        }
        let piece = decoder.push(tok, id);
        if let Err(e) = out.write_all(piece.as_bytes()).and_then(|()| out.flush()) {
            io_err = Some(e);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    })?;
    let tail = decoder.flush();
    if let Some(e) = io_err {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return Ok(());
        }
        return Err(e.into());
    }
    writeln!(out, "{tail}")?;
    drop(out);

    let reason = match stats.finish {
        FinishReason::Length => "length",
        FinishReason::EndOfGeneration => "end of generation",
        FinishReason::ContextFull => "context full",
        FinishReason::Cancelled => "cancelled",
    };
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let per = |d: std::time::Duration, n: usize| if n == 0 { 0.0 } else { ms(d) / n as f64 };
    eprintln!();
    eprintln!("load time        = {load_ms:10.2} ms");
    eprintln!(
        "prompt eval time = {:10.2} ms / {:5} tokens ({:8.2} ms per token, {:8.2} tokens per second)",
        ms(stats.prompt_time),
        stats.n_prompt,
        per(stats.prompt_time, stats.n_prompt),
        stats.prompt_tps()
    );
    eprintln!(
        "       eval time = {:10.2} ms / {:5} runs   ({:8.2} ms per token, {:8.2} tokens per second)",
        ms(stats.decode_time),
        stats.n_decode,
        per(stats.decode_time, stats.n_decode),
        stats.decode_tps()
    );
    eprintln!("generated {} tokens, stopped by {reason}, {} threads", stats.n_generated, rayon_threads());
    Ok(())
}

fn parse_kv_type(s: &str) -> Result<KvType, String> {
    KvType::from_name(s).ok_or_else(|| format!("unknown cache type '{s}' (use f16 or f32)"))
}

fn rayon_threads() -> usize {
    ferrolm::threads::current_num_threads()
}
