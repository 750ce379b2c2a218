//! `strobe bench NAME`: runs one benchmark from strobe-bench and prints its
//! side-by-side table, or its JSON with `--json`.
//!
//! Must never measure anything itself.

use std::process::ExitCode;

use anyhow::Context;
use strobe_bench::{BenchOpts, BENCHES};

/// Arguments of `strobe bench`.
#[derive(Debug, clap::Args)]
#[command(after_help = bench_list())]
pub struct Args {
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

fn bench_list() -> String {
    let mut s = String::from("Benchmarks:\n");
    for (name, what) in BENCHES {
        s.push_str(&format!("  {name:<11} {what}\n"));
    }
    s.push_str("\nExample:\n  strobe bench reclaim --json > reclaim.json");
    s
}

/// Runs `strobe bench NAME`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let opts = BenchOpts {
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
