//! `strobe report`: reads a record file, or a perf.data file written by Linux perf
//! (recognized by its magic, `PERFILE2`), and prints per-function metrics, or writes its
//! views (flame graph, pprof, Firefox Profiler, HTML), or compares two recordings
//! (`--diff`). The work is in crate strobe-report; this module turns arguments into its
//! plain options, shows the progress bar (on a terminal only) and writes the files.
//!
//! Must never compute a metric: every figure comes from strobe-report.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use strobe_report::perfdata::PerfDataOptions;
use strobe_report::recording::{Loaded, ReadOptions};
use strobe_report::{Format, RenderOptions, Report, SymbolOptions, WindowPolicy};

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
strobe report run.strobe --flamegraph run.svg --color-by faults/ms\n  \
strobe report run.strobe --html run.html --pprof run.pb.gz --firefox run.json\n  \
strobe report run.strobe --export http://collector:4318   # OTLP profiles (docs/fleet.md)\n  \
strobe report --diff base.strobe new.strobe --flamegraph diff.svg\n  \
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
Windows begin at random points of each thread's time, so over a recording they count each \
counter at the rate the long periods between them do. Where they do not (by 20% or more, \
beyond chance), the report says so in a warning: the program ran differently inside its \
windows, and its window metrics are biased, on average by about as much. The JSON output \
gives each counter's ratio (`window_check`).\n\n\
A program the agent did not run in (a statically linked or setuid program a shell started, \
or one started under a seccomp filter, a tracer or in a PID namespace of its own, say) is \
sampled by the kernel floor, without windows: the report names such programs in a \
note, and the JSON lists them (`without_agent`).\n\n\
A perf.data file written by `perf record` is recognized by its magic: each function's \
samples are those of one event (--event, or the first that samples), counted as \
`perf report --no-children --sort sym` counts them; a leader-sampling group's counters \
are read with each sample.",
    after_help = after_help()
)]
pub(crate) struct Args {
    /// The record file written by `strobe record`, or a perf.data file written by
    /// `perf record`.
    #[arg(value_name = "FILE", required_unless_present = "diff")]
    file: Option<PathBuf>,
    /// perf.data only: the event whose samples make the report (as `perf evlist` names
    /// it, with or without its modifier: `task-clock:u` or `task-clock`). Default: the
    /// first event that samples.
    #[arg(long, value_name = "NAME")]
    event: Option<String>,
    /// Output format on stdout (default: table; with only file outputs such as
    /// --flamegraph asked for, nothing is printed unless --format is given).
    #[arg(long, value_enum)]
    format: Option<FormatArg>,
    /// Compare two recordings: each function's change in time share and in every window
    /// metric, flagged (!) only when it lies outside both runs' 95% intervals. With
    /// --flamegraph, a differential flame graph (red: grew, blue: shrank).
    #[arg(long, num_args = 2, value_names = ["BASE", "NEW"], conflicts_with_all = ["file", "pprof", "firefox", "html", "callers", "callees", "otlp", "export"])]
    diff: Option<Vec<PathBuf>>,
    /// Write an interactive SVG flame graph (inferno) to FILE (`-`: stdout).
    #[arg(long, value_name = "FILE")]
    flamegraph: Option<PathBuf>,
    /// Colour the flame graph (and the HTML page's, initially) by this window metric:
    /// each function's value over its windows, on a legend scale (faults/ms, cpi, ...).
    #[arg(long, value_name = "METRIC")]
    color_by: Option<String>,
    /// Write a gzipped pprof profile (profile.proto) to FILE: for `go tool pprof`,
    /// Pyroscope, Parca.
    #[arg(long, value_name = "FILE")]
    pprof: Option<PathBuf>,
    /// Write a Firefox Profiler profile (processed format, JSON) to FILE: open it at
    /// profiler.firefox.com or with `samply load`.
    #[arg(long, value_name = "FILE")]
    firefox: Option<PathBuf>,
    #[command(flatten)]
    otlp: Box<super::export::OtlpArgs>,
    /// Write one self-contained HTML page (flame graph, metrics table, callers and
    /// callees, source lines) to FILE.
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Show functions inlined at a sampled address as frames of their own (needs DWARF
    /// debug info in the profiled program).
    #[arg(long)]
    inline: bool,
    /// Also look for separate debug files (by build id: DIR/.build-id/ab/cdef.debug, or
    /// by debug link) here; repeatable. Default: /usr/lib/debug and /lib/debug.
    #[arg(long, value_name = "DIR")]
    debug_dir: Vec<PathBuf>,
    /// Read the recorded files (programs, libraries, their debug files, JIT symbol files)
    /// under DIR instead of /: DIR/usr/lib/libc.so.6 for /usr/lib/libc.so.6, as perf's
    /// --symfs. For a recording made on another machine.
    #[arg(long, value_name = "DIR")]
    symfs: Option<PathBuf>,
    /// perf.data only: name kernel addresses from FILE, a copy of /proc/kallsyms taken on
    /// the machine (and boot) the file was recorded on, as perf's --kallsyms. Default: the
    /// running kernel's, when the file was recorded on it.
    #[arg(long, value_name = "FILE")]
    kallsyms: Option<PathBuf>,
    /// Print nothing but the output: no progress, warnings or notes.
    #[arg(long, short)]
    quiet: bool,
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

/// Writes `what` to `path` (`-`: stdout) with `f`, and says so on stderr.
fn write_output(
    path: &Path,
    what: &str,
    quiet: bool,
    f: impl FnOnce(&mut dyn Write) -> Result<(), strobe_report::ReportError>,
) -> anyhow::Result<()> {
    if path == Path::new("-") {
        let mut out = std::io::stdout().lock();
        f(&mut out)?;
        out.flush()?;
        return Ok(());
    }
    let file = std::fs::File::create(path)
        .with_context(|| format!("cannot create {} for the {what}", path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    f(&mut w)?;
    w.flush().with_context(|| format!("cannot write {}", path.display()))?;
    if !quiet {
        let size = std::fs::metadata(path).map_or(0, |m| m.len());
        eprintln!("strobe: wrote the {what} to {} ({})", path.display(), super::human_bytes(size));
    }
    Ok(())
}

/// True when `path` starts with perf.data's magic (an unreadable file is left to the
/// record-file reader, whose error names it).
fn is_perf_data(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 8];
    std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut magic)).is_ok()
        && strobe_perfdata::is_perf_data(&magic)
}

/// Reads a recording (or a perf.data file, choosing `event`) with a progress bar on a
/// terminal (nothing when stderr is piped or with --quiet).
fn load(
    path: &Path,
    opts: &ReadOptions,
    event: Option<&str>,
    quiet: bool,
) -> anyhow::Result<Loaded> {
    if is_perf_data(path) {
        let popts =
            PerfDataOptions { event: event.map(str::to_string), symbols: opts.symbols.clone() };
        return Ok(strobe_report::perfdata::read(path, opts.policy, &popts)?);
    }
    if event.is_some() {
        anyhow::bail!(
            "--event chooses among the events of a perf.data file; {} is a strobe recording, \
             whose counters all make its report",
            path.display()
        );
    }
    let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
        let size = std::fs::metadata(path).map_or(0, |m| m.len());
        let bar = indicatif::ProgressBar::new(size);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} ({eta})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_message(format!("reading {}", path.display()));
        bar
    });
    let mut progress = |done: u64, total: u64| {
        if let Some(b) = &bar {
            b.set_position(done);
            if done >= total {
                b.set_message("naming functions and attributing windows");
            }
        }
    };
    let loaded = strobe_report::recording::read_with(path, opts, &mut progress);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(loaded?)
}

/// Warnings about a recording, one line each on stderr.
fn warn(loaded: &Loaded, file: &Path, table_on_stdout: bool) -> std::io::Result<()> {
    let mut err = std::io::stderr().lock();
    if let Some(at) = loaded.truncated_at {
        writeln!(
            err,
            "strobe: warning: {} is cut short at byte {at} (the recording was interrupted); \
             reporting everything before it",
            file.display()
        )?;
    }
    if loaded.report.lost_samples > 0 && !table_on_stdout {
        writeln!(err, "strobe: {}", strobe_report::render::lost_warning(&loaded.report))?;
    }
    if let Some(w) = strobe_report::window_check::warning(&loaded.report.window_check) {
        if !table_on_stdout {
            writeln!(err, "strobe: warning: {w}")?;
        }
    }
    if let Some(w) = strobe_report::render::without_agent_line(&loaded.report) {
        if !table_on_stdout {
            writeln!(err, "strobe: note: {w}")?;
        }
    }
    for note in &loaded.notes {
        writeln!(err, "strobe: {note}")?;
    }
    Ok(())
}

fn flame_options(
    report: &Report,
    color_by: Option<&str>,
) -> anyhow::Result<strobe_report::flamegraph::FlameOptions> {
    let color_by = match color_by {
        Some(m) => Some(strobe_report::flamegraph::find_metric(report, m)?),
        None => None,
    };
    Ok(strobe_report::flamegraph::FlameOptions { color_by, ..Default::default() })
}

/// `strobe report --diff BASE NEW`.
fn run_diff(args: &Args, files: &[PathBuf], opts: &ReadOptions) -> anyhow::Result<ExitCode> {
    let [base_file, new_file] = files else {
        anyhow::bail!("--diff takes two record files: BASE NEW");
    };
    let base = load(base_file, opts, args.event.as_deref(), args.quiet)?;
    let new = load(new_file, opts, args.event.as_deref(), args.quiet)?;
    if !args.quiet {
        warn(&base, base_file, false)?;
        warn(&new, new_file, false)?;
    }
    if let Some(path) = &args.flamegraph {
        let fo = flame_options(&new.report, None)?;
        write_output(path, "differential flame graph", args.quiet, |w| {
            strobe_report::flamegraph::diff_flamegraph(&base.report, &new.report, &fo, w)
        })?;
    }
    if args.flamegraph.is_none() || args.format.is_some() {
        let format = match args.format.unwrap_or(FormatArg::Table) {
            FormatArg::Table => Format::Table,
            FormatArg::Csv => Format::Csv,
            FormatArg::Json => Format::Json,
            FormatArg::Folded => anyhow::bail!("--diff prints a table, csv or json"),
        };
        let d = strobe_report::diff::diff(&base.report, &new.report);
        let text = strobe_report::diff::render(&d, format, args.top);
        std::io::stdout().lock().write_all(text.as_bytes())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `strobe report`.
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let policy = match args.window_policy {
        PolicyArg::Discard => WindowPolicy::Discard,
        PolicyArg::Fold => WindowPolicy::Fold,
    };
    let opts = ReadOptions {
        policy,
        symbols: SymbolOptions {
            inline: args.inline,
            debug_dirs: (!args.debug_dir.is_empty()).then(|| {
                let mut dirs = args.debug_dir.clone();
                dirs.extend(["/usr/lib/debug", "/lib/debug"].map(PathBuf::from));
                dirs
            }),
            no_jit: false,
            // Only csv, json, pprof and the HTML page show source lines.
            names_only: !matches!(args.format, Some(FormatArg::Csv | FormatArg::Json))
                && args.pprof.is_none()
                && args.html.is_none(),
            symfs: args.symfs.clone(),
            kallsyms: args.kallsyms.clone(),
        },
        timeline: args.firefox.is_some(),
        cache: None,
    };
    if let Some(files) = &args.diff {
        return run_diff(&args, files, &opts);
    }
    let Some(file) = args.file.clone() else {
        anyhow::bail!("name a record file (strobe report FILE), or two with --diff BASE NEW");
    };
    let outputs = args.flamegraph.is_some()
        || args.pprof.is_some()
        || args.firefox.is_some()
        || args.html.is_some()
        || args.otlp.any();
    let print =
        args.format.is_some() || !outputs || args.callers.is_some() || args.callees.is_some();
    let format_arg = args.format.unwrap_or(FormatArg::Table);
    let format = match format_arg {
        FormatArg::Table | FormatArg::Folded => Format::Table,
        FormatArg::Csv => Format::Csv,
        FormatArg::Json => Format::Json,
    };
    if args.metric.is_some() && format_arg != FormatArg::Folded {
        anyhow::bail!("--metric weights folded stacks: use it with --format folded");
    }
    if args.color_by.is_some() && args.flamegraph.is_none() && args.html.is_none() {
        anyhow::bail!("--color-by colours a flame graph: use it with --flamegraph or --html");
    }
    let started = Instant::now();
    let loaded = load(&file, &opts, args.event.as_deref(), args.quiet)?;
    let read_s = started.elapsed().as_secs_f64();
    let report = &loaded.report;

    // Problems with the data go to stderr first, one line each, so they are seen even
    // when stdout goes to a file or a JSON consumer.
    if !args.quiet {
        warn(&loaded, &file, print && format == Format::Table && format_arg == FormatArg::Table)?;
    }
    let name = file.display().to_string();
    if let Some(path) = &args.flamegraph {
        let fo = flame_options(report, args.color_by.as_deref())?;
        write_output(path, "flame graph", args.quiet, |w| {
            strobe_report::flamegraph::flamegraph(report, &fo, w)
        })?;
    }
    if let Some(path) = &args.pprof {
        write_output(path, "pprof profile", args.quiet, |w| {
            strobe_report::pprof::write(report, w)
        })?;
    }
    if let Some(path) = &args.firefox {
        write_output(path, "Firefox profile", args.quiet, |w| {
            strobe_report::firefox::write(report, Some(loaded.clock), w)
        })?;
    }
    if let Some(path) = &args.html {
        if let Some(m) = &args.color_by {
            strobe_report::flamegraph::find_metric(report, m)?;
        }
        write_output(path, "HTML report", args.quiet, |w| {
            strobe_report::html::write_with(report, Some(&name), args.color_by.as_deref(), w)
        })?;
    }
    if args.otlp.any() {
        super::export::run(&file, &opts, &args.otlp, args.quiet)?;
    }
    if !print {
        return Ok(ExitCode::SUCCESS);
    }

    if format_arg == FormatArg::Folded {
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
                file.display()
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
                file.display(),
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
        file: Some(file.display().to_string()),
    };
    let text = strobe_report::render(report, &opts)?;
    std::io::stdout().lock().write_all(text.as_bytes())?;
    if args.stats && !args.quiet {
        let mut err = std::io::stderr().lock();
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
