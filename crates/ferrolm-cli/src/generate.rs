//! `ferrolm generate`: stream a continuation of a prompt.

use std::io::Write;

use anyhow::{Context, bail};
use ferrolm::session::{FinishReason, GenerateParams, GenerationStats, Session, StreamEvent};

use crate::model_args::ModelArgs;
use crate::sampling_args::SamplingArgs;

/// Arguments of `ferrolm generate`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    prompt: crate::prompt_args::PromptArgs,
    /// Number of tokens to generate (-1: until end of generation or a full context).
    #[arg(short = 'n', long = "n-predict", default_value_t = 256, allow_negative_numbers = true)]
    n_predict: i64,
    #[command(flatten)]
    sampling: Box<SamplingArgs>,
    #[command(flatten)]
    constraint: crate::constraint_args::ConstraintArgs,
    #[command(flatten)]
    speculative: crate::speculative_args::SpeculativeArgs,
    /// Stop when the text contains this string (repeatable; the stop string is not printed).
    #[arg(long = "stop", short = 'r', alias = "reverse-prompt")]
    stop: Vec<String>,
    /// Do not echo the prompt before the generated text.
    #[arg(long)]
    no_display_prompt: bool,
    /// Do not parse special tokens (like `<|im_start|>`) in the prompt.
    #[arg(long)]
    no_parse_special: bool,
    /// Keep generating past end-of-generation tokens.
    #[arg(long)]
    ignore_eos: bool,
    /// Every N generated tokens, print the speed of the last N, the KV cache size and the
    /// resident memory to stderr (0: never).
    #[arg(long = "report-every", default_value_t = 0)]
    report_every: usize,
    /// After the timings, print to stderr the time of each operator type per forward pass, for
    /// the prompt and the generation (as `ferrolm profile` does; on a GPU backend the times are
    /// what the host sees).
    #[arg(long)]
    profile: bool,
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    let prompt = args.prompt.text(None)?;
    let sampler = args.sampling.to_params()?;
    let (mut model, load_ms) = args.model.load()?;
    let profile = if args.profile { Some(crate::profile::Hook::install(&mut model)?) } else { None };
    let n_ctx = args.model.ctx_size;

    let tokens = model.tokenizer().encode(&prompt, true, !args.no_parse_special)?;
    if tokens.is_empty() {
        bail!("the prompt tokenized to nothing");
    }
    let evicts = args.model.cache.options().evicts();
    let max_tokens = if evicts {
        // The cache stays bounded: generation may go on past the context size.
        (args.n_predict >= 0).then_some(args.n_predict as usize)
    } else {
        if tokens.len() >= n_ctx {
            bail!("the prompt has {} tokens, which does not fit --ctx-size {n_ctx}", tokens.len());
        }
        let room = n_ctx - tokens.len();
        Some(if args.n_predict < 0 { room } else { (args.n_predict as usize).min(room) })
    };
    // Without eviction the CLI caps generation at the room left in the context: reaching that
    // cap, rather than -n, means the context filled.
    let ctx_capped = !evicts && usize::try_from(args.n_predict).ok() != max_tokens;
    let params = GenerateParams {
        max_tokens,
        sampler,
        stop: args.stop.clone(),
        ignore_eos: args.ignore_eos,
        constraint: args.constraint.to_spec(&model)?,
        reasoning_budget: None,
    };
    let draft = args.speculative.load_draft()?;
    let mut session = Session::new(&model, args.model.session_options())?;
    session.set_speculative(args.speculative.options(draft.as_ref())?)?;

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if !args.no_display_prompt {
        write!(out, "{prompt}")?;
        out.flush()?;
    }
    let mut stats = None;
    let mut report = Report::new(args.report_every);
    profile.iter().for_each(crate::profile::Hook::prefill);
    let mut stream = session.stream_tokens(&tokens, &params)?;
    profile.iter().for_each(crate::profile::Hook::decode);
    while let Some(event) = stream.next() {
        let (text, done) = match event? {
            StreamEvent::Token { text, .. } => (text, None),
            StreamEvent::Finished { text, stats, .. } => (text, Some(stats)),
        };
        report.token(stream.session_kv());
        if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                return Ok(());
            }
            return Err(e.into());
        }
        stats = done;
    }
    writeln!(out)?;
    drop(out);
    drop(stream);
    let stats = stats.context("generation ended without statistics")?;

    let reason = finish_text(stats.finish, ctx_capped, n_ctx);
    print_timings(&stats, load_ms, &reason, session.is_speculative());
    if let Some(hook) = profile {
        hook.report(&stats).write_md(&mut std::io::stderr())?;
    }
    Ok(())
}

/// llama.cpp-style timings of a generation, and the cache and memory it ended with, on stderr.
fn print_timings(stats: &GenerationStats, load_ms: f64, reason: &str, speculative: bool) {
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let per = |d: std::time::Duration, n: usize| if n == 0 { 0.0 } else { ms(d) / n as f64 };
    eprintln!();
    eprintln!("load time        = {load_ms:10.2} ms");
    eprintln!(
        "prompt eval time = {:10.2} ms / {:5} tokens ({:8.2} ms per token, {:8.2} tokens per second)",
        ms(stats.prompt_time),
        stats.n_prefilled,
        per(stats.prompt_time, stats.n_prefilled),
        stats.prompt_tps()
    );
    eprintln!(
        "       eval time = {:10.2} ms / {:5} runs   ({:8.2} ms per token, {:8.2} tokens per second)",
        ms(stats.decode_time),
        stats.n_decode,
        per(stats.decode_time, stats.n_decode),
        stats.decode_tps()
    );
    eprintln!(
        "generated {} tokens, {reason}, {} threads",
        stats.n_generated,
        ferrolm::threads::current_num_threads()
    );
    if speculative {
        eprintln!(
            "speculative      = {} tokens drafted, {} kept ({:.1}%)",
            stats.n_drafted,
            stats.n_draft_accepted,
            100.0 * stats.draft_acceptance()
        );
    }
    let ev = stats.evictions;
    eprintln!(
        "kv cache         = {} tokens, {:.2} MiB; {} evictions ({} tokens, {:.2} ms), {} under memory pressure",
        stats.n_kv,
        crate::mem::mib(stats.kv_bytes as u64),
        ev.n_events,
        ev.n_evicted,
        ms(ev.time),
        ev.n_memory_events
    );
    if let Some((rss, peak)) = crate::mem::rss() {
        eprintln!(
            "memory           = {:.1} MiB resident, {:.1} MiB peak",
            crate::mem::mib(rss),
            crate::mem::mib(peak)
        );
    }
}

/// How the end of a generation is reported. `ctx_capped`: the token limit was the room left in
/// the context (not `-n`), so reaching it means the context of `n_ctx` tokens filled.
fn finish_text(finish: FinishReason, ctx_capped: bool, n_ctx: usize) -> String {
    if matches!(finish, FinishReason::ContextFull) || (matches!(finish, FinishReason::Length) && ctx_capped) {
        return format!("stopped: the context of {n_ctx} tokens is full");
    }
    let by = match finish {
        FinishReason::Length | FinishReason::ContextFull => "length (-n)",
        FinishReason::EndOfGeneration => "end of generation",
        FinishReason::StopString => "stop string",
        FinishReason::Timeout => "timeout",
        FinishReason::Cancelled => "cancelled",
    };
    format!("stopped by {by}")
}

/// Periodic progress lines of a long generation.
struct Report {
    every: usize,
    n: usize,
    since: std::time::Instant,
}

impl Report {
    fn new(every: usize) -> Self {
        Self { every, n: 0, since: std::time::Instant::now() }
    }

    /// Counts a token; every `every` tokens prints speed, cache size and memory.
    fn token(&mut self, kv: (usize, usize)) {
        self.n += 1;
        if self.every == 0 || !self.n.is_multiple_of(self.every) {
            return;
        }
        let tps = self.every as f64 / self.since.elapsed().as_secs_f64();
        self.since = std::time::Instant::now();
        let (rss, peak) = crate::mem::rss().unwrap_or((0, 0));
        eprintln!(
            "[{:6} tokens] {tps:7.1} tokens/s over the last {}, kv {} tokens ({:.2} MiB), rss {:.1} MiB (peak {:.1})",
            self.n,
            self.every,
            kv.0,
            crate::mem::mib(kv.1 as u64),
            crate::mem::mib(rss),
            crate::mem::mib(peak)
        );
    }
}
