//! `strobe probe`: count, time or trace calls with kernel uprobes.
//!
//! This module is the CLI and the glue: it parses probe arguments by scheme, converts the
//! flags into `strobe_uprobe::Options`, runs a session and renders its report (table or
//! JSON). All probing is in strobe-uprobe.
//!
//! # Extension point: other probe schemes
//!
//! Every probe argument is first classified by [`ProbeArg::parse`]. Kernel probes (`func`,
//! `lib:func`, `usdt:provider:name`) go to strobe-uprobe. `point:NAME` is reserved for
//! probe points declared inside the program (strobe-probe): a backend for them adds
//! (1) its variant's handling in [`run`] (inject the agent through
//! `strobe_uprobe::Command::env`, which the launcher passes to the target, and collect the
//! agent's counts), (2) rows in the same [`Row`] table (name, kind `point`, hits,
//! latency), and (3) a section in [`list`] for `--list -- cmd`. The table, JSON, exit-code
//! mirroring and `-o` stay shared.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::json;
use strobe_uprobe::elf::ElfFile;
use strobe_uprobe::latency::Summary;
use strobe_uprobe::libpath::{self, SearchEnv};
use strobe_uprobe::{Command, HitKind, Options, ProbeSpec, Resolver, Session};

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
  point:NAME                reserved for probe points declared in the program

The program runs after --; the binary (-x) defaults to its executable. strobe attaches
before the program's first instruction, counts every thread and child process, prints a
table when it exits (probe, hits, hits/s, and with --latency p50/p90/p99/max), and exits
with the program's exit status. Kernel uprobes need root or CAP_PERFMON. A probe costs
about 0.5-10 us per hit, depending on the first instruction; see `strobe bench probe`.

Examples:
  strobe probe 'counted_call' 'libprobelib.so:lib_counted_call' -- ./app 4 1000
  strobe probe --latency -x ./server handle_request -- ./server --port 8080
  strobe probe --trace 'libc:malloc' -- ls
  strobe probe 'usdt:myapp:request_start' --json -o probes.json -- ./myapp
  strobe probe --list --functions -x ./app";

/// Arguments of `strobe probe`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
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
    #[arg(long)]
    trace: bool,

    /// List what can be probed in the binary instead of running: its USDT probes and those
    /// of the libraries it loads (and its functions, with --functions).
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

    /// Ring-buffer size per CPU for --latency and --trace, in pages (a power of two).
    #[arg(long, default_value_t = 128, value_name = "PAGES")]
    ring_pages: usize,
}

/// One probe argument, classified by scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeArg {
    /// A kernel uprobe (function or USDT), handled by strobe-uprobe.
    Kernel {
        /// As typed.
        text: String,
        /// Parsed.
        spec: ProbeSpec,
    },
    /// A probe point declared inside the program (`point:NAME`).
    Point {
        /// The point's name.
        name: String,
    },
}

impl ProbeArg {
    /// Classifies and parses one probe argument.
    pub fn parse(text: &str) -> anyhow::Result<ProbeArg> {
        if let Some(name) = text.strip_prefix("point:") {
            if name.is_empty() {
                bail!("bad probe '{text}': write point:NAME");
            }
            return Ok(ProbeArg::Point { name: name.to_string() });
        }
        Ok(ProbeArg::Kernel { text: text.to_string(), spec: ProbeSpec::parse(text)? })
    }
}

/// One row of the end-of-run table, whatever backend produced it.
#[derive(Debug, Clone)]
pub struct Row {
    /// The probe as typed.
    pub probe: String,
    /// `uprobe`, `usdt` (later: `point`).
    pub kind: &'static str,
    /// What it resolved to.
    pub symbol: String,
    /// How many places it is attached to.
    pub sites: usize,
    /// Exact hits.
    pub hits: u64,
    /// Durations, when measured.
    pub latency: Option<Summary>,
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

fn command_of(args: &Args) -> Option<Command> {
    let (prog, rest) = args.command.split_first()?;
    Some(Command::new(prog.clone(), rest.iter().cloned()))
}

/// The binary unqualified probes refer to: -x, else the command's executable.
fn binary_of(args: &Args, cmd: Option<&Command>) -> anyhow::Result<PathBuf> {
    if let Some(x) = &args.exe {
        return Ok(x.clone());
    }
    match cmd {
        Some(c) => Ok(c.resolve_program()?),
        None => bail!("no binary to probe: give -x BIN or a command after --"),
    }
}

/// Runs `strobe probe`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cmd = command_of(&args);
    if args.list {
        let binary = binary_of(&args, cmd.as_ref())?;
        let env = SearchEnv::new(cmd.as_ref().and_then(Command::ld_library_path).as_deref());
        let mut out = open_output(args.output.as_ref())?;
        list(&binary, &env, args.functions, &mut out)?;
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.probes.is_empty() {
        bail!("nothing to probe: name at least one probe (e.g. strobe probe 'main' -- ./app), or use --list");
    }
    let parsed: Vec<ProbeArg> =
        args.probes.iter().map(|p| ProbeArg::parse(p)).collect::<anyhow::Result<_>>()?;
    if let Some(ProbeArg::Point { name }) =
        parsed.iter().find(|p| matches!(p, ProbeArg::Point { .. }))
    {
        bail!(
            "probe 'point:{name}': in-program probe points are not available in this build yet; \
             use kernel probes (FUNC, LIB:FUNC, usdt:PROVIDER:NAME)"
        );
    }
    let Some(cmd) = cmd else {
        bail!(
            "no program to run: put it after -- (e.g. strobe probe '{}' -- ./app)",
            args.probes[0]
        );
    };
    if !args.ring_pages.is_power_of_two() {
        bail!("--ring-pages {}: must be a power of two (1, 2, 4, ...)", args.ring_pages);
    }
    let binary = binary_of(&args, Some(&cmd))?;
    let env = SearchEnv::new(cmd.ld_library_path().as_deref());
    let mut resolver = Resolver::new(&binary, env, None)?;
    let mut probes = Vec::new();
    for p in &parsed {
        if let ProbeArg::Kernel { text, spec } = p {
            probes.push(resolver.resolve(text, spec)?);
        }
    }
    let opts = Options {
        latency: args.latency,
        trace: args.trace,
        ring_pages: args.ring_pages,
        flush: Duration::from_millis(100),
    };
    let mut out = open_output(args.output.as_ref())?;
    let mut session = Session::launch(&cmd, probes, opts)?;
    if args.trace && !args.json {
        writeln!(out, "{:>12}  {:>7}  PROBE", "TIME(s)", "TID")?;
        out.flush()?;
    }
    let mut write_err = None;
    let report = session.run(|hits| {
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
    let rows: Vec<Row> = report
        .probes
        .iter()
        .map(|p| Row {
            probe: p.name.clone(),
            kind: p.kind.as_str(),
            symbol: p.symbol.clone(),
            sites: p.sites,
            hits: p.hits,
            latency: p.latency,
        })
        .collect();
    let code = strobe_uprobe::launch::mirror_exit_code(report.status);
    if args.json {
        let v = json!({
            "command": args.command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>(),
            "exit_code": code,
            "elapsed_s": report.elapsed.as_secs_f64(),
            "lost": report.lost,
            "unmatched_returns": report.unmatched_returns,
            "unmatched_entries": report.unmatched_entries,
            "probes": rows.iter().map(|r| row_json(r, report.elapsed)).collect::<Vec<_>>(),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        if args.trace {
            writeln!(out)?;
        }
        write_table(&mut out, &rows, report.elapsed, args.latency)?;
        let mut notes = vec![format!(
            "{} exited with {} after {:.3} s",
            args.command[0].to_string_lossy(),
            describe_status(report.status),
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
        writeln!(out, "{}", notes.join("; "))?;
    }
    out.flush()?;
    if let Some(e) = write_err {
        return Err(anyhow::Error::new(e).context("writing trace output"));
    }
    // Closing the uprobes takes a kernel grace period each: do it after the report.
    drop(session);
    Ok(ExitCode::from(code))
}

fn describe_status(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("status {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => "an unknown status".to_string(),
    }
}

fn row_json(r: &Row, elapsed: Duration) -> serde_json::Value {
    json!({
        "probe": r.probe,
        "kind": r.kind,
        "symbol": r.symbol,
        "sites": r.sites,
        "hits": r.hits,
        "hits_per_s": per_s(r.hits, elapsed),
        "latency_ns": r.latency.map(|l| json!({
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
pub fn fmt_ns(ns: u64) -> String {
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
            r.kind,
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

/// `--list`: the USDT probes of the binary and of the libraries it loads, and with
/// `functions` the binary's functions.
fn list(
    binary: &std::path::Path,
    env: &SearchEnv,
    functions: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let exe = ElfFile::open(binary)?;
    let mut any = false;
    let mut objects: Vec<(Option<String>, ElfFile)> = Vec::new();
    for l in libpath::load_closure(&exe, env) {
        if let Ok(elf) = ElfFile::open(&l.path) {
            objects.push((Some(l.soname.unwrap_or(l.needed)), elf));
        }
    }
    writeln!(out, "USDT probes of {}:", binary.display())?;
    any |= list_usdt(None, &exe, out)?;
    for (lib, elf) in &objects {
        if !elf.usdt().is_empty() {
            writeln!(
                out,
                "USDT probes of {} ({}):",
                lib.as_deref().unwrap_or("?"),
                elf.path().display()
            )?;
            any |= list_usdt(lib.as_deref(), elf, out)?;
        }
    }
    if !any {
        writeln!(out, "  (none)")?;
    }
    if functions {
        writeln!(out, "Functions of {} (file offset, size, name):", binary.display())?;
        for f in exe.functions() {
            writeln!(out, "  {:#010x}  {:>6}  {}", f.file_offset, f.size, f.display_name())?;
        }
    }
    Ok(())
}

fn list_usdt(lib: Option<&str>, elf: &ElfFile, out: &mut dyn Write) -> anyhow::Result<bool> {
    let mut seen: Vec<String> = Vec::new();
    for n in elf.usdt() {
        let name = match lib {
            Some(l) => format!("usdt:{l}:{}:{}", n.provider, n.name),
            None => format!("usdt:{}:{}", n.provider, n.name),
        };
        if seen.contains(&name) {
            continue;
        }
        let sites =
            elf.usdt().iter().filter(|m| m.provider == n.provider && m.name == n.name).count();
        let mut extra = Vec::new();
        if sites > 1 {
            extra.push(format!("{sites} sites"));
        }
        if n.semaphore != 0 {
            extra.push("semaphore".to_string());
        }
        if !n.args.is_empty() {
            extra.push(format!("args: {}", n.args));
        }
        let extra =
            if extra.is_empty() { String::new() } else { format!("  ({})", extra.join(", ")) };
        writeln!(out, "  {name}{extra}")?;
        seen.push(name);
    }
    Ok(!seen.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_args_are_classified_by_scheme() {
        assert!(
            matches!(ProbeArg::parse("point:req").unwrap(), ProbeArg::Point { name } if name == "req")
        );
        assert!(matches!(ProbeArg::parse("usdt:a:b").unwrap(), ProbeArg::Kernel { .. }));
        assert!(matches!(ProbeArg::parse("libc:malloc").unwrap(), ProbeArg::Kernel { .. }));
        assert!(ProbeArg::parse("point:").is_err());
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(fmt_ns(812), "812ns");
        assert_eq!(fmt_ns(12_345), "12.3us");
        assert_eq!(fmt_ns(10_070_000), "10.07ms");
        assert_eq!(fmt_ns(1_234_000_000), "1.234s");
    }
}
