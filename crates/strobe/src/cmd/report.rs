//! `strobe report`: reads a record file, or a perf.data file written by Linux perf
//! (recognized by its magic, `PERFILE2`), and prints per-function metrics. The work is in
//! crate strobe-report; this module turns arguments into its plain options.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use strobe_report::perfdata::PerfDataOptions;
use strobe_report::{Format, RenderOptions, WindowPolicy};

/// Output format of `strobe report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FormatArg {
    /// An aligned table with the recording's totals above it.
    Table,
    /// Comma-separated values, one row per function.
    Csv,
    /// A JSON object with a `functions` array and the totals.
    Json,
    /// One `outermost;...;function N` line per call path: the input of flame graph tools
    /// (N: samples, or the --metric counter's window total).
    Folded,
}

/// What to do with a window whose start and end fall in different functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum PolicyArg {
    /// Drop its counter deltas (its samples still count).
    Discard,
    /// Attribute its deltas to the function where it ended.
    Fold,
}

fn after_help() -> String {
    format!(
        "Columns: samples (time samples in the function), time% (its share of all time \
samples), windows (windows attributed to it), then every metric whose counters were \
recorded:\n{}\nExamples:\n  \
strobe report run.strobe\n  \
strobe report run.strobe --sort faults/ms --top 10\n  \
strobe report run.strobe --format json --window-policy fold > report.json\n  \
strobe report perf.data --event task-clock:u",
        strobe_report::metrics::help_table()
    )
}

/// Arguments of `strobe report`.
#[derive(Debug, clap::Args)]
#[command(
    about = "Print per-function metrics from a record file (or a perf.data file)",
    long_about = "Print per-function metrics from a record file (or a perf.data file).\n\n\
Each function's share of time comes from its sample count. Its metrics come from the short \
windows that started and ended in it: the counter deltas of each window (end sample minus \
start sample of the same thread) are attributed to a function only when both samples fall \
in it (--window-policy discard, the default) or to the function where the window ended \
(fold). A function too small to hold whole windows keeps its sample count and rank.\n\n\
A perf.data file written by `perf record` is recognized by its magic: each function's \
samples are those of one event (--event, or the first that samples), counted as \
`perf report --no-children --sort sym` counts them; a leader-sampling group's counters \
are read with each sample.",
    after_help = after_help()
)]
pub struct Args {
    /// The record file written by `strobe record`, or a perf.data file written by
    /// `perf record`.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// perf.data only: the event whose samples make the report (as `perf evlist` names
    /// it, with or without its modifier: `task-clock:u` or `task-clock`). Default: the
    /// first event that samples.
    #[arg(long, value_name = "NAME")]
    event: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = FormatArg::Table)]
    format: FormatArg,
    /// Sort by this column: samples (default), time_pct, windows, function, module, or a
    /// metric by key or header (cpi, CPI, page_faults_per_ms, faults/ms, ...).
    #[arg(long, value_name = "COLUMN")]
    sort: Option<String>,
    /// Show only the first N functions after sorting.
    #[arg(long, value_name = "N")]
    top: Option<usize>,
    /// Windows whose start and end fall in different functions: discard their counter
    /// deltas, or fold them into the function where the window ended.
    #[arg(long, value_enum, default_value_t = PolicyArg::Discard, value_name = "POLICY")]
    window_policy: PolicyArg,
    /// Print on stderr how long the report took and how many samples per second it
    /// processed.
    #[arg(long)]
    stats: bool,
    /// Show who called FUNC: the tree of its call paths, each with its share of FUNC's
    /// samples and the window metrics measured on that path.
    #[arg(long, value_name = "FUNC", conflicts_with = "callees")]
    callers: Option<String>,
    /// Show what FUNC called: the tree of its callees with their shares and metrics.
    #[arg(long, value_name = "FUNC")]
    callees: Option<String>,
    /// In --callers/--callees trees, hide paths below this share of FUNC's samples.
    #[arg(long, value_name = "PERCENT", default_value_t = 0.5)]
    min_share: f64,
    /// With --format folded: weight each line by this counter's total over the path's
    /// windows (e.g. page-faults) instead of by samples; or, for a recording with
    /// off-CPU intervals (strobe record --off-cpu), by on-cpu, off-cpu or wall time (us).
    #[arg(long, value_name = "COUNTER")]
    metric: Option<String>,
}

/// True when `path` starts with perf.data's magic (an unreadable file is left to the
/// record-file reader, whose error names it).
fn is_perf_data(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 8];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok()
        && strobe_perfdata::is_perf_data(&magic)
}

/// Runs `strobe report`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let policy = match args.window_policy {
        PolicyArg::Discard => WindowPolicy::Discard,
        PolicyArg::Fold => WindowPolicy::Fold,
    };
    let format = match args.format {
        FormatArg::Table | FormatArg::Folded => Format::Table,
        FormatArg::Csv => Format::Csv,
        FormatArg::Json => Format::Json,
    };
    if args.metric.is_some() && args.format != FormatArg::Folded {
        anyhow::bail!("--metric weights folded stacks: use it with --format folded");
    }
    let started = Instant::now();
    let loaded = if is_perf_data(&args.file) {
        let opts = PerfDataOptions { event: args.event.clone() };
        strobe_report::perfdata::read(&args.file, policy, &opts)?
    } else {
        if args.event.is_some() {
            anyhow::bail!(
                "--event chooses among the events of a perf.data file; {} is a strobe recording, \
                 whose counters all make its report",
                args.file.display()
            );
        }
        strobe_report::recording::read(&args.file, policy)?
    };
    let read_s = started.elapsed().as_secs_f64();
    let report = &loaded.report;

    // Problems with the data go to stderr first, one line each, so they are seen even
    // when stdout goes to a file or a JSON consumer.
    let mut err = std::io::stderr().lock();
    if let Some(at) = loaded.truncated_at {
        writeln!(
            err,
            "strobe: warning: {} is cut short at byte {at} (the recording was interrupted); \
             reporting everything before it",
            args.file.display()
        )?;
    }
    if report.lost_samples > 0 && format != Format::Table {
        writeln!(err, "strobe: {}", strobe_report::render::lost_warning(report))?;
    }
    for note in &loaded.notes {
        writeln!(err, "strobe: {note}")?;
    }

    if args.format == FormatArg::Folded {
        if let Some(w) = args.metric.as_deref().and_then(strobe_report::calltree::TimeWeight::parse)
        {
            let text = strobe_report::calltree::folded_time(report, w);
            std::io::stdout().lock().write_all(text.as_bytes())?;
            return Ok(ExitCode::SUCCESS);
        }
        let counter = match &args.metric {
            None => None,
            Some(m) => Some(report.info.events.iter().position(|e| e == m).ok_or_else(|| {
                anyhow::anyhow!(
                    "--metric {m}: the recording's counters are {}",
                    report.info.events.join(", ")
                )
            })?),
        };
        let text = strobe_report::calltree::folded(report, counter);
        std::io::stdout().lock().write_all(text.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    for (name, dir) in [
        (&args.callers, strobe_report::calltree::Direction::Callers),
        (&args.callees, strobe_report::calltree::Direction::Callees),
    ] {
        let Some(name) = name else { continue };
        if !report.has_stacks {
            anyhow::bail!(
                "{} has no call stacks: record with --call-graph dwarf (the default) or fp",
                args.file.display()
            );
        }
        let Some(i) = report.function_index(name) else {
            let mut close: Vec<&str> = report
                .functions
                .iter()
                .map(|f| f.function.as_str())
                .filter(|f| f.contains(name.as_str()))
                .take(5)
                .collect();
            close.sort();
            anyhow::bail!(
                "no function named '{name}' in {}{}",
                args.file.display(),
                if close.is_empty() {
                    String::new()
                } else {
                    format!(" (similar: {})", close.join(", "))
                }
            );
        };
        let tree = strobe_report::calltree::tree(report, i, dir);
        let text = strobe_report::calltree::render_tree(report, &tree, dir, args.min_share);
        std::io::stdout().lock().write_all(text.as_bytes())?;
        return Ok(ExitCode::SUCCESS);
    }
    let opts = RenderOptions {
        format,
        sort: args.sort,
        top: args.top,
        file: Some(args.file.display().to_string()),
    };
    let text = strobe_report::render(report, &opts)?;
    std::io::stdout().lock().write_all(text.as_bytes())?;
    if args.stats {
        let total = started.elapsed().as_secs_f64();
        let n = loaded.samples_read;
        writeln!(
            err,
            "strobe: report read {n} samples in {read_s:.3} s and finished in {total:.3} s: {:.2} M samples/s",
            n as f64 / total.max(1e-9) / 1e6
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
