//! `ferrolm inspect` (in progress).

/// Arguments of `ferrolm inspect`.
#[derive(clap::Args)]
pub struct Args {}

/// Runs the command.
pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("'inspect' is not implemented yet")
}
