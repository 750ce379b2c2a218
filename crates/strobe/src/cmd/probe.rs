//! `strobe probe`: count, time or trace calls with kernel uprobes, and count the probe
//! points a program declares with strobe-probe.
//!
//! This module is the CLI and the rendering: it converts the flags into
//! `strobe_uprobe::RunOptions` (or `ListOptions` for `--list`), runs the session
//! (`strobe_uprobe::Run`), and renders what it returns as trace lines, a table or JSON.
//! Kernel probing, probe points and the target live in strobe-uprobe and strobe-target.
//!
//! Must never: resolve, attach or launch anything itself, or hide the program's exit
//! status (strobe exits with it).

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::json;
use strobe_target::Command;
use strobe_uprobe::latency::Summary;
use strobe_uprobe::points::PointReport;
use strobe_uprobe::{
    HitKind, ListOptions, Listing, Options, Probe, Row, RowKind, Run, RunOptions, RunReport,
};

const AFTER_HELP: &str = "\
Probes:
  FUNC                      a function of the binary: C name, mangled name, or demangled
                            Rust/C++ name (app::run, ns::f, ns::f(int))
  FUNC+OFF                  OFF bytes (16 or 0x10) into FUNC
  LIB:FUNC                  a function of a shared library: a path (/usr/lib/libz.so.1), a
                            file name or soname (libc.so.6), or a short name (libc); found
                            like the dynamic linker finds the program's libraries
  usdt:PROVIDER:NAME        a USDT probe (sys/sdt.h) of the binary; semaphores are handled
  usdt:LIB:PROVIDER:NAME    a USDT probe of a shared library
  point:NAME                a probe point declared in the program with strobe-probe (Rust
                            probe!) or strobe_probe.h (C): its hits, and for a scoped probe
                            its durations (power-of-two buckets); needs no privileges

The program runs after --; the binary (-x) defaults to its executable. strobe attaches
before the program's first instruction, counts every thread and child process, prints a
table when it exits (probe, hits, hits/s, and with --latency p50/p90/p99/max), and exits
with the program's exit status. Kernel uprobes that follow the program's threads are
defined in tracefs, so strobe probe needs root (strobe mounts tracefs at
/sys/kernel/tracing when it is not mounted, and removes its definitions when it ends,
and those of a strobe that was killed on the next run). A probe costs about
0.5-10 us per hit, depending on the probed instruction; see `strobe bench probe`.

Examples:
  strobe probe 'counted_call' 'libprobelib.so:lib_counted_call' -- ./app 4 1000
  strobe probe --latency -x ./server handle_request -- ./server --port 8080
  strobe probe --trace 'libc:malloc' -- ls
  strobe probe 'usdt:myapp:request_start' --json -o probes.json -- ./myapp
  strobe probe --list --functions -x ./app
  strobe probe --list -- ./app            (runs it, then lists its probe points too)
  strobe probe point:request point:db_query -- ./app";

/// Arguments of `strobe probe`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct Args {
    /// What to probe (syntax below). At least one, unless --list.
    #[arg(value_name = "PROBE")]
    probes: Vec<String>,

    /// The program to run under the probes, and its arguments (after --).
    #[arg(last = true, value_name = "CMD")]
    command: Vec<OsString>,

    /// The ELF file that probes without a library part refer to [default: the command's
    /// executable, found in PATH like the shell does].
    #[arg(short = 'x', long = "exe", value_name = "BIN")]
    exe: Option<PathBuf>,

    /// Also measure how long each probed function runs (return probes, uretprobes): adds
    /// p50, p90, p99 and max to the table. USDT probes have no return and stay counts.
    #[arg(long)]
    latency: bool,

    /// Print every hit as it happens: seconds since start, thread id, probe (and, with
    /// --latency, each return with its duration).
    #[arg(long, conflicts_with = "json")]
    trace: bool,

    /// List what can be probed in the binary: its USDT probes and those of the libraries
    /// it loads (and its functions, with --functions). With a command after --, also runs
    /// it and lists the probe points it declares (point:NAME).
    #[arg(long)]
    list: bool,

    /// With --list: also list the binary's functions, with their file offsets.
    #[arg(long, requires = "list")]
    functions: bool,

    /// Print the end-of-run report as JSON instead of a table.
    #[arg(long)]
    json: bool,

    /// Write strobe's output (trace lines, table or JSON) to FILE; the program keeps the
    /// terminal.
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,

    /// Preload this probe library (libstrobe_probe_c.so) into the program, for programs
    /// whose probe points are compiled in but not linked (STROBE_PROBE_OPTIONAL).
    #[arg(long, value_name = "LIB")]
    probe_lib: Option<PathBuf>,

    /// Ring-buffer size per CPU for --latency and --trace, in pages (a power of two).
    #[arg(long, default_value_t = 128, value_name = "PAGES")]
    ring_pages: usize,
}

impl Args {
    fn command(&self) -> Option<Command> {
        let (prog, rest) = self.command.split_first()?;
        Some(Command::new(prog.clone(), rest.iter().cloned()))
    }
}

/// Where strobe's own output goes.
fn open_output(path: Option<&PathBuf>) -> anyhow::Result<Box<dyn Write>> {
    Ok(match path {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout())),
    })
}

/// Runs `strobe probe`.
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.list {
        return run_list(&args);
    }
    if args.probes.is_empty() {
        bail!("nothing to probe: name at least one probe (e.g. strobe probe 'main' -- ./app), or use --list");
    }
    let probes: Vec<Probe> =
        args.probes.iter().map(|p| Probe::parse(p)).collect::<Result<_, _>>()?;
    let Some(command) = args.command() else {
        bail!(
            "no program to run: put it after -- (e.g. strobe probe '{}' -- ./app)",
            args.probes[0]
        );
    };
    if !args.ring_pages.is_power_of_two() {
        bail!("--ring-pages {}: must be a power of two (1, 2, 4, ...)", args.ring_pages);
    }
    let opts = RunOptions {
        probes,
        command,
        binary: args.exe.clone(),
        session: Options {
            latency: args.latency,
            trace: args.trace,
            ring_pages: args.ring_pages,
            flush: Duration::from_millis(100),
        },
        probe_lib: args.probe_lib.clone(),
    };
    let mut out = open_output(args.output.as_ref())?;
    let mut run = Run::start(opts, |notice| eprintln!("strobe: {notice}"))?;
    if args.trace && !args.json {
        writeln!(out, "{:>12}  {:>7}  PROBE", "TIME(s)", "TID")?;
        out.flush()?;
    }
    let mut write_err = None;
    let report = run.wait(|hits| {
        if write_err.is_some() {
            return;
        }
        let r = (|| -> std::io::Result<()> {
            for h in hits {
                let t = h.time_ns as f64 / 1e9;
                match h.kind {
                    HitKind::Entry => writeln!(out, "{t:>12.6}  {:>7}  {}", h.tid, h.name)?,
                    HitKind::Return { duration_ns } => {
                        let d = duration_ns.map_or_else(|| "?".to_string(), fmt_ns);
                        writeln!(out, "{t:>12.6}  {:>7}  {} returned after {d}", h.tid, h.name)?
                    }
                }
            }
            out.flush()
        })();
        if let Err(e) = r {
            write_err = Some(e);
        }
    })?;
    for w in &report.warnings {
        // The flag that answers the warning, where one does.
        let flag = match w {
            strobe_uprobe::Warning::NoPointReport { .. } => " (with --probe-lib)",
            strobe_uprobe::Warning::TraceShowsKernelProbesOnly => " (--trace)",
            _ => "",
        };
        eprintln!("strobe: warning: {w}{flag}");
    }
    if args.json {
        write_json(&mut out, &args, &report)?;
    } else {
        if args.trace {
            writeln!(out)?;
        }
        let show_latency = args.latency
            || report.rows.iter().any(|r| r.kind == RowKind::Point && r.latency.is_some());
        write_table(&mut out, &report.rows, report.elapsed, show_latency)?;
        writeln!(out, "{}", notes(&args, &report).join("; "))?;
    }
    out.flush()?;
    if let Some(e) = write_err {
        return Err(anyhow::Error::new(e).context("writing trace output"));
    }
    // Closing the uprobes takes a kernel grace period each: do it after the report.
    drop(run);
    Ok(ExitCode::from(report.exit.code()))
}

/// `--list`: what the binary and its libraries offer, and with a command its probe points.
fn run_list(args: &Args) -> anyhow::Result<ExitCode> {
    let command = args.command();
    if args.exe.is_none() && command.is_none() {
        bail!("no binary to probe: give -x BIN or a command after --");
    }
    let listing = strobe_uprobe::run::list(ListOptions {
        binary: args.exe.clone(),
        command,
        functions: args.functions,
        probe_lib: args.probe_lib.clone(),
    })?;
    let mut out = open_output(args.output.as_ref())?;
    write_listing(&mut out, &listing)?;
    let mut code = ExitCode::SUCCESS;
    if let Some((points, exit)) = &listing.points {
        write_points(&mut out, points.as_ref())?;
        code = ExitCode::from(exit.code());
    }
    out.flush()?;
    Ok(code)
}

/// The line under the table: how the program ended, and what was lost.
fn notes(args: &Args, report: &RunReport) -> Vec<String> {
    let mut notes = vec![format!(
        "{} exited with {} after {:.3} s",
        args.command[0].to_string_lossy(),
        report.exit,
        report.elapsed.as_secs_f64()
    )];
    if report.lost > 0 {
        notes.push(format!(
            "{} hit records lost (ring full; counts stay exact; raise --ring-pages)",
            report.lost
        ));
    }
    if report.unmatched_returns + report.unmatched_entries > 0 && args.latency {
        notes.push(format!(
            "{} calls without both entry and return (running at exit, longjmp, or lost)",
            report.unmatched_returns + report.unmatched_entries
        ));
    }
    notes
}

fn write_json(out: &mut dyn Write, args: &Args, report: &RunReport) -> anyhow::Result<()> {
    let v = json!({
        "command": args.command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>(),
        "exit_code": report.exit.code(),
        "elapsed_s": report.elapsed.as_secs_f64(),
        "lost": report.lost,
        "unmatched_returns": report.unmatched_returns,
        "unmatched_entries": report.unmatched_entries,
        "probes": report.rows.iter().map(|r| row_json(r, report.elapsed)).collect::<Vec<_>>(),
    });
    writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    Ok(())
}

/// `--list -- cmd`: the probe points the program declared.
fn write_points(out: &mut dyn Write, points: Option<&PointReport>) -> std::io::Result<()> {
    writeln!(out, "Probe points of the program:")?;
    let Some(p) = points else {
        writeln!(out, "  (none: the program does not link strobe-probe or libstrobe_probe_c)")?;
        return Ok(());
    };
    if p.sites.is_empty() {
        writeln!(out, "  (none)")?;
    }
    let mut sites = p.sites.clone();
    sites.sort_by(|a, b| a.probe.cmp(&b.probe).then(a.file.cmp(&b.file)).then(a.line.cmp(&b.line)));
    for s in &sites {
        let args = if s.nargs == 1 { "arg" } else { "args" };
        writeln!(out, "  point:{}  ({}:{}, {} {args})", s.probe, s.file, s.line, s.nargs)?;
    }
    Ok(())
}

fn row_json(r: &Row, elapsed: Duration) -> serde_json::Value {
    json!({
        "probe": r.probe,
        "kind": r.kind.as_str(),
        "symbol": r.symbol,
        "sites": r.sites,
        "hits": r.hits,
        "hits_per_s": per_s(r.hits, elapsed),
        "latency_ns": r.latency.map(|l: Summary| json!({
            "count": l.count, "min": l.min, "mean": l.mean,
            "p50": l.p50, "p90": l.p90, "p99": l.p99, "max": l.max,
        })),
    })
}

fn per_s(hits: u64, elapsed: Duration) -> f64 {
    let s = elapsed.as_secs_f64();
    if s > 0.0 {
        hits as f64 / s
    } else {
        0.0
    }
}

/// `812ns`, `12.3us`, `10.07ms`, `1.234s`.
pub(crate) fn fmt_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{:.1}us", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.2}ms", f / 1e6)
    } else {
        format!("{:.3}s", f / 1e9)
    }
}

fn write_table(
    out: &mut dyn Write,
    rows: &[Row],
    elapsed: Duration,
    latency: bool,
) -> std::io::Result<()> {
    let w = rows.iter().map(|r| r.probe.len()).max().unwrap_or(5).max(5);
    let mut header = format!("{:<w$}  {:<6}  {:>10}  {:>12}", "PROBE", "KIND", "HITS", "HITS/S");
    if latency {
        header.push_str(&format!("  {:>9}  {:>9}  {:>9}  {:>9}", "P50", "P90", "P99", "MAX"));
    }
    writeln!(out, "{header}")?;
    for r in rows {
        let mut line = format!(
            "{:<w$}  {:<6}  {:>10}  {:>12.1}",
            r.probe,
            r.kind.as_str(),
            r.hits,
            per_s(r.hits, elapsed)
        );
        if latency {
            match r.latency {
                Some(l) => line.push_str(&format!(
                    "  {:>9}  {:>9}  {:>9}  {:>9}",
                    fmt_ns(l.p50),
                    fmt_ns(l.p90),
                    fmt_ns(l.p99),
                    fmt_ns(l.max)
                )),
                None => line.push_str(&format!("  {:>9}  {:>9}  {:>9}  {:>9}", "-", "-", "-", "-")),
            }
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// `--list`: the USDT probes of the binary and of the libraries it loads, and its
/// functions when asked for.
fn write_listing(out: &mut dyn Write, listing: &Listing) -> std::io::Result<()> {
    let mut any = false;
    for g in &listing.usdt {
        match &g.lib {
            None => writeln!(out, "USDT probes of {}:", listing.binary.display())?,
            Some(lib) => writeln!(out, "USDT probes of {lib} ({}):", g.path.display())?,
        }
        for p in &g.probes {
            any = true;
            let mut extra = Vec::new();
            if p.sites > 1 {
                extra.push(format!("{} sites", p.sites));
            }
            if p.semaphore {
                extra.push("semaphore".to_string());
            }
            if !p.args.is_empty() {
                extra.push(format!("args: {}", p.args));
            }
            let extra =
                if extra.is_empty() { String::new() } else { format!("  ({})", extra.join(", ")) };
            writeln!(out, "  {}{extra}", p.name)?;
        }
    }
    if !any {
        writeln!(out, "  (none)")?;
    }
    if let Some(functions) = &listing.functions {
        writeln!(out, "Functions of {} (file offset, size, name):", listing.binary.display())?;
        for f in functions {
            writeln!(out, "  {:#010x}  {:>6}  {}", f.file_offset, f.size, f.display_name())?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_naturally() {
        assert_eq!(fmt_ns(812), "812ns");
        assert_eq!(fmt_ns(12_345), "12.3us");
        assert_eq!(fmt_ns(10_070_000), "10.07ms");
        assert_eq!(fmt_ns(1_234_000_000), "1.234s");
    }
}
