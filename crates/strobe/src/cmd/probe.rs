//! `strobe probe`. (Being built.)

use std::process::ExitCode;

/// Arguments of `strobe probe`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Everything after the subcommand (placeholder until the command exists).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}

/// Runs `strobe probe`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("strobe probe is not built yet")
}
