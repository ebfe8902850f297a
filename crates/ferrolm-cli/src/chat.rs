//! `ferrolm chat`: an interactive conversation using the model's chat template. Each turn
//! prefills only what it adds; Ctrl-C stops the current reply (at the prompt it quits).

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use ferrolm::chat::{ChatTemplate, Message};
use ferrolm::session::{ChatSession, FinishReason, GenerateParams, StreamEvent};

use crate::model_args::ModelArgs;
use crate::sampling_args::SamplingArgs;

/// Arguments of `ferrolm chat`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    sampling: Box<SamplingArgs>,
    #[command(flatten)]
    constraint: crate::constraint_args::ConstraintArgs,
    /// System prompt.
    #[arg(long = "system", short = 'y')]
    system: Option<String>,
    /// Use this Jinja chat template file instead of the model's.
    #[arg(long = "chat-template-file")]
    chat_template_file: Option<PathBuf>,
    /// Most tokens per reply (-1: until end of generation or a full context).
    #[arg(short = 'n', long = "n-predict", default_value_t = -1, allow_negative_numbers = true)]
    n_predict: i64,
    /// Stop a reply when it contains this string (repeatable).
    #[arg(long = "stop", short = 'r')]
    stop: Vec<String>,
    /// Template keyword arguments as a JSON object, e.g. '{"enable_thinking": false}'.
    #[arg(long = "chat-template-kwargs")]
    template_kwargs: Option<String>,
    /// After each reply, print token counts and speed to stderr.
    #[arg(long)]
    stats: bool,
}

const HELP: &str = "commands: /reset (forget the conversation), /exit, /help; Ctrl-C stops a reply";

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    let (model, _, path) = args.model.load_with_path()?;
    let opts = args.model.session_options();
    let mut chat = match &args.chat_template_file {
        Some(f) => {
            let src = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            ChatSession::with_template(&model, opts, ChatTemplate::new(&src)?)?
        }
        None => {
            let template = model.chat_template()?.ok_or_else(|| {
                anyhow::anyhow!(
                    "{} has no chat template (tokenizer.chat_template); give one with --chat-template-file FILE",
                    path.display()
                )
            })?;
            ChatSession::with_template(&model, opts, template)?
        }
    };
    if let Some(kw) = &args.template_kwargs {
        let map: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(kw).context("--chat-template-kwargs must be a JSON object")?;
        chat.render_options_mut().kwargs = map;
    }
    if let Some(s) = &args.system {
        chat.push(Message::system(s.as_str()));
    }
    let params = GenerateParams {
        max_tokens: usize::try_from(args.n_predict).ok(),
        sampler: args.sampling.to_params()?,
        stop: args.stop.clone(),
        ignore_eos: false,
        constraint: args.constraint.to_spec(&model)?,
        reasoning_budget: None,
    };

    // Ctrl-C: cancel the reply being generated; at the prompt, quit.
    let generating = Arc::new(AtomicBool::new(false));
    let cancel = chat.session().cancel_handle();
    {
        let generating = generating.clone();
        ctrlc::set_handler(move || {
            if generating.load(Ordering::SeqCst) {
                cancel.cancel();
            } else {
                eprintln!();
                std::process::exit(130);
            }
        })
        .context("installing the Ctrl-C handler")?;
    }

    let interactive = std::io::stdin().is_terminal();
    if interactive {
        eprintln!("{HELP}");
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        if interactive {
            eprint!("> ");
        }
        let Some(line) = lines.next() else { break };
        let line = line.context("reading stdin")?;
        let input = line.trim();
        match input {
            "" => continue,
            "/exit" | "/quit" => break,
            "/help" => {
                eprintln!("{HELP}");
                continue;
            }
            "/reset" => {
                chat.reset(true);
                eprintln!("(conversation reset)");
                continue;
            }
            _ => {}
        }
        generating.store(true, Ordering::SeqCst);
        let result = reply(&mut chat, input, &params, args.stats);
        generating.store(false, Ordering::SeqCst);
        result?;
    }
    Ok(())
}

/// Streams one reply to stdout.
fn reply(
    chat: &mut ChatSession<'_>,
    input: &str,
    params: &GenerateParams,
    show_stats: bool,
) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for event in chat.send_stream(input, params)? {
        match event? {
            StreamEvent::Token { text, .. } => {
                out.write_all(text.as_bytes())?;
                out.flush()?;
            }
            StreamEvent::Finished { text, reason, stats } => {
                writeln!(out, "{text}")?;
                out.flush()?;
                match reason {
                    FinishReason::Cancelled => eprintln!("(stopped)"),
                    FinishReason::ContextFull => eprintln!("(the context is full: /reset to go on)"),
                    _ => {}
                }
                if show_stats {
                    eprintln!(
                        "[prompt: {} tokens, {} cached, {} prefilled; reply: {} tokens, {:.1} tokens/s]",
                        stats.n_prompt,
                        stats.n_cached,
                        stats.n_prefilled,
                        stats.n_generated,
                        stats.decode_tps()
                    );
                }
            }
        }
    }
    Ok(())
}
