//! `strobe workload`: runs the bundled workload (crate strobe-workload), the program
//! `strobe record` profiles when given no command, and optionally writes its ground
//! truth.
//!
//! Must never change what the workload does: that is strobe-workload's.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `strobe workload`.
#[derive(Debug, clap::Args)]
#[command(
    about = "Run the bundled workload that `strobe record` profiles by default",
    long_about = "Run the bundled workload: worker threads rotating, in a new random order each \
round, through functions of distinct behaviour (workload_fp_math, workload_int_divide, \
workload_page_faults, workload_sleep, workload_branches, workload_pointer_chase). Each \
CPU-bound function takes a comparable share of CPU time; sleeping takes little.\n\n\
With --truth it writes what it measured itself: CPU time per function \
(CLOCK_THREAD_CPUTIME_ID around every call, which is what task-clock samples measure) and \
page faults per function (RUSAGE_THREAD), to check a report against.",
    after_help = "Examples:\n  \
strobe workload --seconds 10 --truth truth.json\n  \
strobe workload --rounds 500 --truth truth.json   # fixed work: compare run times\n  \
strobe record -o run.strobe -- strobe workload --threads 4   # what `strobe record` does by default, with 4 threads\n  \
strobe report run.strobe"
)]
pub(crate) struct Args {
    /// Wall-clock seconds to run.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    seconds: f64,
    /// Worker threads, each rotating through every function.
    #[arg(long, default_value_t = 2, value_name = "N")]
    threads: usize,
    /// Fixed work instead of a fixed time: each thread runs N rounds (one call of every
    /// function each) with fixed call sizes, so a profiler's overhead shows as a longer
    /// run. `strobe bench sampling` measures slowdown this way.
    #[arg(long, value_name = "N", conflicts_with = "seconds")]
    rounds: Option<u64>,
    /// Write the ground truth (CPU time, page faults and context switches per function)
    /// as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    truth: Option<PathBuf>,
    /// Run only these functions (comma-separated), e.g. workload_sleep.
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    only: Vec<String>,
}

/// The library's error in the terms of this command's flags: the library speaks of what
/// an option means, the line the user reads names the flag that set it.
fn in_flags(e: strobe_workload::WorkloadError) -> anyhow::Error {
    use strobe_workload::WorkloadError as E;
    let flag = match &e {
        E::Seconds(_) => "--seconds",
        E::NoThreads => "--threads",
        E::NoRounds => "--rounds",
        E::UnknownFunction { .. } => "--only",
        _ => return e.into(),
    };
    anyhow::anyhow!("{flag}: {e}")
}

/// Runs `strobe workload`.
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let opts = strobe_workload::Options {
        seconds: args.seconds,
        threads: args.threads,
        rounds: args.rounds,
        only: args.only.clone(),
    };
    let truth = strobe_workload::run(&opts).map_err(in_flags)?;
    if let Some(path) = &args.truth {
        truth.write(path)?;
    }
    let busy: u64 = truth.functions.iter().map(|f| f.cpu_ns).sum();
    eprintln!(
        "strobe workload: {} threads for {:.1} s, {:.2} s of CPU in the workload's functions{}",
        truth.threads,
        truth.seconds,
        busy as f64 / 1e9,
        args.truth
            .as_ref()
            .map(|p| format!("; ground truth in {}", p.display()))
            .unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}
