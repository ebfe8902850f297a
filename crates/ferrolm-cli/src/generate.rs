//! `ferrolm generate` (in progress).

/// Arguments of `ferrolm generate`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs the command.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("'generate' is not implemented yet")
}
