//! The `strobe` command: CLI definition and glue.
//!
//! Each subcommand lives in `cmd/<name>.rs` as a clap `Args` struct plus a
//! `run` function that converts the arguments into the plain option struct of
//! the library that does the work. clap types never cross into the libraries.
//!
//! Errors reach `main` as `anyhow::Error` and are printed as one line,
//! `strobe: error: ...`, with exit code 1 (2 for usage errors, from clap). A
//! closed stdout (`strobe report | head`) is not an error. A panic prints one
//! line asking for a report, never a backtrace.

mod advice;
mod agent_lib;
mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// strobe: per-function metrics from short sample windows, dynamic probes with
/// a lock-free hot path, and hardware watchpoints, for native Linux programs.
#[derive(Debug, Parser)]
#[command(name = "strobe", version, propagate_version = true, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands. Record, report and workload carry `about` and `long_about` on their
/// Args structs: a doc comment on the variant would replace the long description.
#[derive(Debug, Subcommand)]
enum Command {
    Record(cmd::record::Args),
    Report(cmd::report::Args),
    /// Count, time or trace calls with kernel uprobes and in-program probe points.
    Probe(cmd::probe::Args),
    /// Report accesses to watched memory with hardware watchpoints.
    Watch(cmd::watch::Args),
    /// Run a benchmark that compares strobe's mechanisms with the alternatives.
    Bench(cmd::bench::Args),
    Workload(cmd::workload::Args),
    /// Internal: prints the cost per sample the preloaded agent measured (see `record`).
    #[command(name = cmd::record::COSTS_SUBCOMMAND, hide = true)]
    Costs,
}

fn main() -> ExitCode {
    install_panic_hook();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Record(a) => cmd::record::run(a),
        Command::Report(a) => cmd::report::run(a),
        Command::Probe(a) => cmd::probe::run(a),
        Command::Watch(a) => cmd::watch::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Workload(a) => cmd::workload::run(a),
        Command::Costs => cmd::record::print_costs(),
    };
    match result {
        Ok(code) => code,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            match advice::flags_for(&err) {
                Some(flags) => eprintln!("strobe: error: {err:#} ({flags})"),
                None => eprintln!("strobe: error: {err:#}"),
            }
            ExitCode::FAILURE
        }
    }
}

/// True when the error chain bottoms out in EPIPE: the reader went away
/// (`strobe report run.strobe | head`), which is how pipelines end.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Replaces the default panic output (a backtrace hint and multi-line dump)
/// with one line, so even a bug in strobe ends in a readable message.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        let at =
            info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        eprintln!("strobe: internal error: {msg}{at} (this is a bug in strobe; please report it)");
    }));
}
