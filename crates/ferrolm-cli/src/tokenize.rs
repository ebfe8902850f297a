//! `ferrolm tokenize`: show how a model's tokenizer splits a text.

use anyhow::Context;
use ferrolm::format::gguf::GgufFile;
use ferrolm::tokenizer::Tokenizer;

/// Arguments of `ferrolm tokenize`.
#[derive(clap::Args)]
pub struct Args {
    /// GGUF file (a full model or a vocabulary-only file), Hugging Face model folder, or catalog
    /// name.
    #[arg(short = 'm', long = "model")]
    pub model: String,
    /// Text to tokenize.
    #[arg(short = 'p', long = "prompt")]
    pub prompt: String,
    /// Print one line per token, `id -> 'piece'`, instead of the id list.
    #[arg(long)]
    pub pieces: bool,
    /// Do not add BOS/EOS even where the model asks for them.
    #[arg(long)]
    pub no_add_special: bool,
    /// Treat special-token texts such as `<|im_start|>` as plain text.
    #[arg(long)]
    pub no_parse_special: bool,
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<()> {
    let path = crate::pull::resolve_model(Some(&args.model))?;
    let tok = load_tokenizer(&path)?;
    let ids = tok.encode(&args.prompt, !args.no_add_special, !args.no_parse_special)?;
    if args.pieces {
        for &id in &ids {
            println!("{id:6} -> '{}'", show_piece(&tok.token_to_piece(id)));
        }
    } else {
        let list: Vec<String> = ids.iter().map(u32::to_string).collect();
        println!("[{}]", list.join(", "));
    }
    Ok(())
}

/// Reads only the tokenizer of a GGUF file (a full model or a vocabulary-only file) or of a
/// Hugging Face folder.
pub fn load_tokenizer(path: &std::path::Path) -> anyhow::Result<Tokenizer> {
    let tok = if path.is_dir() {
        Tokenizer::from_hf_dir(path)
    } else {
        let gguf = GgufFile::open(path).with_context(|| format!("opening {}", path.display()))?;
        Tokenizer::from_gguf(&gguf)
    };
    tok.with_context(|| format!("reading the tokenizer of {}", path.display()))
}

/// A piece for display: escaped text, with bytes that are not UTF-8 on their own as `\xNN`.
fn show_piece(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) => s.escape_debug().to_string(),
        Err(_) => {
            bytes
                .iter()
                .map(|&b| {
                    if b.is_ascii() { (b as char).escape_debug().to_string() } else { format!("\\x{b:02X}") }
                })
                .collect()
        }
    }
}
