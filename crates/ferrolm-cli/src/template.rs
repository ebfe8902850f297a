//! `ferrolm template`: work with chat templates.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use ferrolm::chat::{CalendarDate, ChatTemplate, Message, RenderOptions};

/// Arguments of `ferrolm template`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Render a conversation with a chat template and print the prompt exactly (no newline added).
    Render(RenderArgs),
}

/// Arguments of `ferrolm template render`.
#[derive(clap::Args)]
struct RenderArgs {
    /// Jinja template file.
    #[arg(long, required_unless_present = "model", conflicts_with = "model")]
    template: Option<PathBuf>,
    /// Use this model's own template (GGUF file, Hugging Face folder, or catalog name); its BOS and
    /// EOS token texts become the defaults of --bos and --eos.
    #[arg(short = 'm', long)]
    model: Option<String>,
    /// JSON file: an array of messages, or an object with a "messages" array.
    #[arg(long)]
    messages: PathBuf,
    /// Do not end with the header of an assistant turn.
    #[arg(long)]
    no_generation_prompt: bool,
    /// Text of `bos_token`.
    #[arg(long)]
    bos: Option<String>,
    /// Text of `eos_token`.
    #[arg(long)]
    eos: Option<String>,
    /// JSON file with an array of tool definitions (`tools`).
    #[arg(long)]
    tools: Option<PathBuf>,
    /// More template variables as a JSON object, e.g. '{"enable_thinking": false}'.
    #[arg(long)]
    kwargs: Option<String>,
    /// Date for `strftime_now`, YYYY-MM-DD (default: today, UTC).
    #[arg(long, value_parser = parse_date)]
    date: Option<CalendarDate>,
}

fn parse_date(s: &str) -> Result<CalendarDate, String> {
    CalendarDate::parse(s).ok_or_else(|| format!("'{s}' is not a date in the form YYYY-MM-DD"))
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        Command::Render(a) => render(a),
    }
}

fn read_json(path: &Path, what: &str) -> anyhow::Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {what} {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {what} {}", path.display()))
}

/// The template source and the default BOS/EOS texts.
fn load_template(args: &RenderArgs) -> anyhow::Result<(String, String, String)> {
    if let Some(file) = &args.template {
        let source = std::fs::read_to_string(file)
            .with_context(|| format!("reading the template {}", file.display()))?;
        return Ok((source, String::new(), String::new()));
    }
    let Some(model) = &args.model else { bail!("give --template FILE or -m MODEL") };
    let path = crate::pull::resolve_model(Some(model))?;
    // Only the tokenizer is needed: it holds the template and the special tokens.
    let tok = crate::tokenize::load_tokenizer(&path)?;
    let Some(source) = tok.chat_template() else {
        bail!("{} has no chat template; give one with --template", path.display())
    };
    let text = |id: Option<u32>| id.and_then(|id| tok.token_text(id)).unwrap_or_default().to_string();
    Ok((source.to_string(), text(tok.bos()), text(tok.eos())))
}

fn render(args: RenderArgs) -> anyhow::Result<()> {
    let (source, bos, eos) = load_template(&args)?;
    let template = ChatTemplate::new(&source)?;

    let messages = match read_json(&args.messages, "the messages")? {
        serde_json::Value::Object(mut obj) => obj
            .remove("messages")
            .with_context(|| format!("{}: an object needs a \"messages\" array", args.messages.display()))?,
        v => v,
    };
    let messages: Vec<Message> = serde_json::from_value(messages)
        .with_context(|| format!("{}: not a list of messages with a \"role\"", args.messages.display()))?;

    let tools = match &args.tools {
        Some(file) => match read_json(file, "the tools")? {
            serde_json::Value::Array(tools) => Some(tools),
            _ => bail!("{}: tools must be a JSON array", file.display()),
        },
        None => None,
    };
    let kwargs = match &args.kwargs {
        Some(text) => match serde_json::from_str(text).context("parsing --kwargs")? {
            serde_json::Value::Object(map) => map,
            _ => bail!("--kwargs must be a JSON object"),
        },
        None => serde_json::Map::new(),
    };
    let opts = RenderOptions {
        add_generation_prompt: !args.no_generation_prompt,
        bos_token: args.bos.unwrap_or(bos),
        eos_token: args.eos.unwrap_or(eos),
        tools,
        kwargs,
        today: args.date,
    };
    let text = template.render(&messages, &opts)?;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}
