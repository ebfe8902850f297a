//! The `ferrolm` command-line tool.

mod bench;
mod cache_args;
mod chat;
mod check_model;
mod constraint_args;
mod convert;
mod cpu_args;
mod dashboard;
mod embed;
mod generate;
mod inspect;
mod mem;
mod micro_bench;
mod model_args;
mod models;
mod perplexity;
mod profile;
mod prompt_args;
mod pull;
mod rerank;
mod sampling_args;
mod serve;
mod speculative_args;
mod template;
mod test_backend;
mod tokenize;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// ferrolm: run small language models fast on CPUs.
#[derive(Parser)]
#[command(name = "ferrolm", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt (streams tokens as they are produced).
    Generate(generate::Args),
    /// Chat with a model interactively, using its chat template (Ctrl-C stops a reply).
    Chat(chat::Args),
    /// Download a model from the Hugging Face Hub or the built-in catalog into the cache.
    Pull(pull::Args),
    /// List the models in the Hub cache and the catalog's cache.
    List(models::ListArgs),
    /// Remove models from the caches (a Hub repository, or a catalog model).
    Rm(models::RmArgs),
    /// Show a GGUF file's metadata and tensor table.
    Inspect(inspect::Args),
    /// Tokenize text with a model's tokenizer.
    Tokenize(tokenize::Args),
    /// Print embedding vectors of texts (pooled final hidden states).
    Embed(embed::Args),
    /// Score documents' relevance to a query with a reranker model (Qwen3-Reranker, BERT / XLM-RoBERTa cross-encoders).
    Rerank(rerank::Args),
    /// Convert a Hugging Face model folder to GGUF (F16, BF16, F32 or quantized).
    Convert(convert::Args),
    /// Render conversations with chat templates.
    Template(template::Args),
    /// Measure prompt-processing and generation speed (like llama.cpp's llama-bench).
    Bench(bench::Args),
    /// Make an HTML page of plots from `bench -o jsonl` results of several runs and devices.
    Dashboard(dashboard::Args),
    /// Time one operator of the CPU backend (matmul per weight type, attention, rmsnorm, rope)
    /// at the sizes given, like bench does for whole models.
    MicroBench(micro_bench::Args),
    /// Time per operator type per forward pass (prompt and generation) of a generation.
    Profile(profile::Args),
    /// Check that a model runs sanely: finite logits, reproducible greedy text, batched prompt
    /// equal to token by token. Prints OK or FAIL (exit status 1).
    CheckModel(check_model::Args),
    /// Perplexity of a model over a text file, with any KV eviction policy and budget.
    Perplexity(perplexity::Args),
    /// Serve a model over an OpenAI-compatible HTTP API (Ctrl-C or SIGTERM stops it).
    Serve(Box<serve::Args>),
    /// Compare every operator of a GPU backend (OpenCL, CUDA) with the CPU on random inputs.
    TestBackend(test_backend::Args),
}

/// Whether log lines get ANSI colours: only on a terminal, and not when `NO_COLOR` is set to a
/// non-empty value (<https://no-color.org>).
fn log_colours(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_env("FERROLM_LOG").unwrap_or_else(|_| EnvFilter::new("warn")))
        .with_writer(std::io::stderr)
        .with_ansi(log_colours(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR"),
        ))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Generate(a) => generate::run(a),
        Command::Chat(a) => chat::run(a),
        Command::Pull(a) => pull::run(a),
        Command::List(a) => models::list(a),
        Command::Rm(a) => models::rm(a),
        Command::Inspect(a) => inspect::run(a),
        Command::Tokenize(a) => tokenize::run(a),
        Command::Convert(a) => convert::run(a),
        Command::Template(a) => template::run(a),
        Command::Embed(a) => embed::run(a),
        Command::Rerank(a) => rerank::run(a),
        Command::Bench(a) => bench::run(a),
        Command::MicroBench(a) => micro_bench::run(a),
        Command::Profile(a) => profile::run(a),
        Command::CheckModel(a) => check_model::run(a),
        Command::Dashboard(a) => dashboard::run(a),
        Command::TestBackend(a) => test_backend::run(a),
        Command::Perplexity(a) => perplexity::run(a),
        Command::Serve(a) => serve::run(*a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::log_colours;

    #[test]
    fn colours_only_on_a_terminal_without_no_color() {
        assert!(log_colours(true, None));
        assert!(!log_colours(false, None));
        assert!(!log_colours(true, Some("1".into())));
        assert!(log_colours(true, Some("".into())));
    }
}
