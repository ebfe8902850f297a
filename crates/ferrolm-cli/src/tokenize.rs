//! `ferrolm tokenize` (in progress).

/// Arguments of `ferrolm tokenize`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs the command.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("'tokenize' is not implemented yet")
}
