//! `strobe record`. (Being built.)

use std::process::ExitCode;

/// Arguments of `strobe record`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Everything after the subcommand (placeholder until the command exists).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}

/// Runs `strobe record`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("strobe record is not built yet")
}
