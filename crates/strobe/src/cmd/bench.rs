//! `strobe bench NAME`: runs one benchmark from strobe-bench and prints its
//! side-by-side table, or its JSON with `--json`.
//!
//! Must never measure anything itself.
//!
//! strobe-bench is linked only with the default-on cargo feature `bench`: a build with
//! `--no-default-features` leaves its 7.5k lines (and crossbeam-epoch, seize, arc-swap)
//! out, and `strobe bench` then says so in one line.

use std::process::ExitCode;

/// Arguments of `strobe bench` (the same with or without benchmarks, so a script's
/// command line parses either way).
#[derive(Debug, clap::Args)]
#[cfg_attr(not(feature = "bench"), allow(dead_code))]
#[command(after_help = bench_list())]
pub(crate) struct Args {
    /// The benchmark to run (see the list below).
    name: String,
    /// Print the results as JSON (`{"bench": NAME, "rows": [...]}`) instead of a table.
    #[arg(long)]
    json: bool,
    /// Shrink iteration counts so the run takes seconds; figures are not quotable.
    #[arg(long)]
    quick: bool,
    /// How many times each variant is measured; the median is reported.
    #[arg(long, default_value_t = 5, value_name = "N")]
    repeats: usize,
}

#[cfg(feature = "bench")]
fn bench_list() -> String {
    let mut s = String::from("Benchmarks:\n");
    for (name, what) in strobe_bench::BENCHES {
        s.push_str(&format!("  {name:<11} {what}\n"));
    }
    s.push_str("\nExample:\n  strobe bench reclaim --json > reclaim.json");
    s
}

#[cfg(not(feature = "bench"))]
fn bench_list() -> String {
    format!("{NO_BENCHES}.\n\nExample:\n  cargo build --release -p strobe   # the default features include `bench`")
}

/// What `strobe bench` says in a build without the `bench` feature.
#[cfg(not(feature = "bench"))]
const NO_BENCHES: &str =
    "this build of strobe has no benchmarks (it was built without the cargo feature `bench`)";

/// Runs `strobe bench NAME`.
#[cfg(not(feature = "bench"))]
pub(crate) fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!(NO_BENCHES)
}

/// Runs `strobe bench NAME`.
#[cfg(feature = "bench")]
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    let opts = strobe_bench::BenchOpts {
        quick: args.quick,
        repeats: args.repeats.max(1),
        strobe_exe: std::env::current_exe().ok(),
    };
    let report = strobe_bench::run(&args.name, &opts)
        .with_context(|| format!("strobe bench {}", args.name))?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.text);
    }
    Ok(ExitCode::SUCCESS)
}
