//! The prompt options of the commands that run one prompt (`generate`, `profile`).

use std::path::PathBuf;

use anyhow::{Context as _, bail};

/// `-p TEXT` or `-f FILE`.
#[derive(clap::Args, Debug)]
pub struct PromptArgs {
    /// Prompt text.
    #[arg(short = 'p', long, conflicts_with = "file")]
    pub prompt: Option<String>,
    /// Read the prompt from a file.
    #[arg(short = 'f', long)]
    pub file: Option<PathBuf>,
}

impl PromptArgs {
    /// The prompt: `-p`'s text, else `-f`'s file, else `default` (an error without one).
    pub fn text(&self, default: Option<&str>) -> anyhow::Result<String> {
        match (&self.prompt, &self.file, default) {
            (Some(p), _, _) => Ok(p.clone()),
            (None, Some(f), _) => {
                std::fs::read_to_string(f).with_context(|| format!("reading prompt file {}", f.display()))
            }
            (None, None, Some(d)) => Ok(d.to_string()),
            (None, None, None) => bail!("give a prompt with -p TEXT or -f FILE"),
        }
    }
}
