//! `strobe workload`. (Being built.)

use std::process::ExitCode;

/// Arguments of `strobe workload`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Everything after the subcommand (placeholder until the command exists).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<String>,
}

/// Runs `strobe workload`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("strobe workload is not built yet")
}
