//! The benchmarks behind `strobe bench NAME`.
//!
//! Each benchmark runs every variant side by side in one process run (ours, the
//! naive version, the library or kernel alternative) and returns a
//! [`BenchReport`]: rows for machines (`--json`) and a rendered table with
//! ratios for people. The CLI only parses flags into a [`BenchOpts`] and prints
//! the report; all measuring lives here.
//!
//! This crate must never be linked into the agent or into a profiled target: it
//! pulls in comparison crates (crossbeam-epoch, seize, arc-swap) that strobe's
//! own mechanisms replace.

mod report;
mod stats;

mod drive;

mod accuracy;
mod breakpoint;
mod coverage;
mod export;
mod handler_calls;
mod kernel_mode;
mod probe;
mod probe_uprobe;
mod readside;
mod reclaim;
mod sampling;
mod slotmaps;
mod stacks;
mod views;

pub use report::{BenchOpts, BenchReport, Row};

// The rest is private to the benchmarks; these are the pieces other crates use: the
// slot tables the breakpoint benchmark compares, checked by strobe-watch's contract test
// (tests/slotmaps.rs), and the kernel-uprobe rows of `strobe bench probe`, runnable alone
// (examples/probe_uprobe.rs).
pub use probe_uprobe::rows as probe_uprobe_rows;
pub use slotmaps::{ArrayMap, ListMap, MutexHashMap};

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// This machine lacks something the benchmark needs (a PMU, a permission,
    /// a tool); the message says what and how to get it.
    #[error("{0}")]
    Unsupported(String),
    /// An I/O or system call failed; the message names the operation.
    #[error("{what}: {source}")]
    Io {
        /// The operation that failed.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Anything else, already phrased for the user.
    #[error("{0}")]
    Other(String),
}

/// The benchmark names `strobe bench` accepts, with a one-line description each.
pub const BENCHES: &[(&str, &str)] = &[
    (
        "accuracy",
        "strobe's numbers against the programs' own: window metrics, shares, short threads, crashes, interval coverage",
    ),
    (
        "sampling",
        "alternating windows vs short period only: slowdown, bytes, wakeups, report speed",
    ),
    (
        "reclaim",
        "deferred freeing, Mobj/s and RSS: strobe-rcu bulk vs per-object, crossbeam, seize",
    ),
    (
        "readside",
        "ns per read-side section: strobe-rcu vs crossbeam-epoch, seize, arc-swap, RwLock",
    ),
    ("probe", "probe triggers/s, 1..8 threads: RCU registry vs Mutex/RwLock, disabled, uprobes"),
    ("breakpoint", "breakpoint slot reservation at 1..4096 threads: kernel, list, hash multimap"),
    ("report", "1 M samples as flame graph, pprof, HTML vs perf script | inferno (seconds, bytes)"),
    (
        "kernel-mode",
        "kernel-ring recording vs perf record: cost and bytes per sample, wakeups, report speed",
    ),
    (
        "coverage",
        "the coverage zoo: each function's share at the defaults vs perf and samply, accounted CPU, fds",
    ),
    (
        "export",
        "a recording as OTLP profiles vs pprof vs strobe's file: bytes/sample, CPU to encode and send",
    ),
    (
        "stacks",
        "--call-graph none vs fp vs dwarf: cost, bytes, complete stacks; report vs perf report -g",
    ),
];

/// Runs the benchmark called `name`.
pub fn run(name: &str, opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    match name {
        "accuracy" => accuracy::run(opts),
        "sampling" => sampling::run(opts),
        "reclaim" => reclaim::run(opts),
        "readside" => readside::run(opts),
        "probe" => probe::run(opts),
        "breakpoint" => breakpoint::run(opts),
        "report" => views::run(opts),
        "kernel-mode" => kernel_mode::run(opts),
        "stacks" => stacks::run(opts),
        "coverage" => coverage::run(opts),
        "export" => export::run(opts),
        other => {
            let names: Vec<&str> = BENCHES.iter().map(|(n, _)| *n).collect();
            Err(BenchError::Other(format!(
                "unknown benchmark '{other}'; choose one of: {}",
                names.join(", ")
            )))
        }
    }
}
