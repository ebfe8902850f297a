//! `ferrolm pull` (in progress).

/// Arguments of `ferrolm pull`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs the command.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("'pull' is not implemented yet")
}
