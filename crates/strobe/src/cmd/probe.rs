//! `strobe probe`: count, time or trace calls with kernel uprobes, and count the probe
//! points a program declares with strobe-probe.
//!
//! This module is the CLI and the glue: it parses probe arguments by scheme, converts the
//! flags into `strobe_uprobe::Options`, runs a session and renders its report (table or
//! JSON). All kernel probing is in strobe-uprobe.
//!
//! # In-program probe points (`point:NAME`)
//!
//! Probe points are declared inside the program with strobe-probe (Rust macro) or
//! `strobe_probe.h` (C), and the probe library itself attaches the consumers: it reads
//! `STROBE_PROBE_COUNT=a,b` (attach counting consumers), `STROBE_PROBE_LIST=1` (list
//! every site) and `STROBE_PROBE_OUT=FILE` when it loads, and at exit writes JSON lines
//! to FILE: `{"type":"count","probe","hits","exits","total_ns","log2_ns":[...]}`,
//! `{"type":"site","probe","file","line","nargs"}` and `{"type":"unknown","probe","hint"}`.
//! strobe sets those variables in the target's environment (through
//! `strobe_uprobe::Command::env`; `--probe-lib` adds the library to `LD_PRELOAD` for
//! programs built with `STROBE_PROBE_OPTIONAL`), and reads the file after the target
//! exits. Point rows share the table with kernel rows; their latencies come from the
//! library's power-of-two histogram, so their percentiles are bucket upper bounds.

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
  point:NAME                a probe point declared in the program with strobe-probe (Rust
                            probe!) or strobe_probe.h (C): its hits, and for a scoped probe
                            its durations (power-of-two buckets); needs no privileges

The program runs after --; the binary (-x) defaults to its executable. strobe attaches
before the program's first instruction, counts every thread and child process, prints a
table when it exits (probe, hits, hits/s, and with --latency p50/p90/p99/max), and exits
with the program's exit status. Kernel uprobes that follow the program's threads are
defined in tracefs, so strobe probe needs root (strobe removes its definitions when it
ends, and those of a strobe that was killed on the next run). A probe costs about
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
    /// `uprobe`, `usdt` or `point`.
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
        // The file's own listing first, so a bad binary fails before anything runs.
        let mut listing = Vec::new();
        list(&binary, &env, args.functions, &mut listing)?;
        // Probe points are known only to the running program: run it, with the probe
        // library asked to list its sites at exit.
        let points = match cmd {
            Some(mut cmd) => {
                let file = PointsFile::create()?;
                file.configure(&mut cmd, None, true, args.probe_lib.as_deref());
                let mut session = Session::launch(&cmd, Vec::new(), Options::default())?;
                let report = session.run(|_| {})?;
                Some((file.read()?, report.status))
            }
            None => None,
        };
        let mut out = open_output(args.output.as_ref())?;
        out.write_all(&listing)?;
        let mut code = ExitCode::SUCCESS;
        if let Some((points, status)) = points {
            list_points(points.as_ref(), &mut out)?;
            code = ExitCode::from(strobe_uprobe::launch::mirror_exit_code(status));
        }
        out.flush()?;
        return Ok(code);
    }
    if args.probes.is_empty() {
        bail!("nothing to probe: name at least one probe (e.g. strobe probe 'main' -- ./app), or use --list");
    }
    let parsed: Vec<ProbeArg> =
        args.probes.iter().map(|p| ProbeArg::parse(p)).collect::<anyhow::Result<_>>()?;
    let points: Vec<&str> = parsed
        .iter()
        .filter_map(|p| match p {
            ProbeArg::Point { name } => Some(name.as_str()),
            ProbeArg::Kernel { .. } => None,
        })
        .collect();
    let any_kernel = parsed.iter().any(|p| matches!(p, ProbeArg::Kernel { .. }));
    let Some(mut cmd) = cmd else {
        bail!(
            "no program to run: put it after -- (e.g. strobe probe '{}' -- ./app)",
            args.probes[0]
        );
    };
    if !args.ring_pages.is_power_of_two() {
        bail!("--ring-pages {}: must be a power of two (1, 2, 4, ...)", args.ring_pages);
    }
    let mut probes = Vec::new();
    if any_kernel {
        let binary = binary_of(&args, Some(&cmd))?;
        let env = SearchEnv::new(cmd.ld_library_path().as_deref());
        let mut resolver = Resolver::new(&binary, env, None)?;
        for p in &parsed {
            if let ProbeArg::Kernel { text, spec } = p {
                probes.push(resolver.resolve(text, spec)?);
            }
        }
    }
    let points_file = if points.is_empty() {
        None
    } else {
        let file = PointsFile::create()?;
        file.configure(&mut cmd, Some(&points), false, args.probe_lib.as_deref());
        Some(file)
    };
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
    let mut kernel_rows = report.probes.iter().map(|p| Row {
        probe: p.name.clone(),
        kind: p.kind.as_str(),
        symbol: p.symbol.clone(),
        sites: p.sites,
        hits: p.hits,
        latency: p.latency,
    });
    let point_report = match &points_file {
        Some(f) => f.read()?,
        None => None,
    };
    let mut warnings = Vec::new();
    if points_file.is_some() && point_report.is_none() {
        warnings.push(format!(
            "{} wrote no probe-point report: it does not link strobe-probe (Rust) or \
             libstrobe_probe_c (C); for a C program built with STROBE_PROBE_OPTIONAL, give \
             --probe-lib PATH/libstrobe_probe_c.so",
            args.command[0].to_string_lossy()
        ));
    }
    // Rows in the order the probes were given.
    let mut rows: Vec<Row> = Vec::new();
    for p in &parsed {
        match p {
            ProbeArg::Kernel { .. } => rows.extend(kernel_rows.next()),
            ProbeArg::Point { name } => {
                let Some(pr) = &point_report else { continue };
                if let Some(hint) = pr.unknown.iter().find(|(n, _)| n == name).map(|(_, h)| h) {
                    warnings.push(format!(
                        "probe 'point:{name}' is unknown: the program declares no probe \
                         point of that name{hint}"
                    ));
                    continue;
                }
                let c = pr.counts.iter().find(|c| c.probe == *name);
                rows.push(Row {
                    probe: format!("point:{name}"),
                    kind: "point",
                    symbol: name.clone(),
                    sites: 1,
                    hits: c.map_or(0, |c| c.hits),
                    latency: c.and_then(PointCount::summary),
                });
            }
        }
    }
    if args.trace && !points.is_empty() {
        warnings.push(
            "--trace shows kernel probes only: probe points are counted by the probe library, \
             which reports at exit"
                .to_string(),
        );
    }
    for w in &warnings {
        eprintln!("strobe: warning: {w}");
    }
    let show_latency =
        args.latency || rows.iter().any(|r| r.kind == "point" && r.latency.is_some());
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
        write_table(&mut out, &rows, report.elapsed, show_latency)?;
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

/// The file the probe library writes its exit report to, created by strobe (exclusively,
/// so nobody else's file is overwritten) and removed when dropped.
struct PointsFile {
    path: PathBuf,
}

impl PointsFile {
    fn create() -> anyhow::Result<PointsFile> {
        let dir = std::env::temp_dir();
        for i in 0..100u32 {
            let path = dir.join(format!("strobe-points-{}-{i}.jsonl", std::process::id()));
            match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(_) => return Ok(PointsFile { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(anyhow::Error::new(e).context(format!(
                        "creating {} for the probe-point report",
                        path.display()
                    )))
                }
            }
        }
        bail!("cannot create a probe-point report file in {}", dir.display())
    }

    /// Sets the variables the probe library reads at load time.
    fn configure(
        &self,
        cmd: &mut Command,
        count: Option<&[&str]>,
        list: bool,
        lib: Option<&std::path::Path>,
    ) {
        if let Some(names) = count {
            cmd.env.push(("STROBE_PROBE_COUNT".into(), names.join(",").into()));
        }
        if list {
            cmd.env.push(("STROBE_PROBE_LIST".into(), "1".into()));
        }
        cmd.env.push(("STROBE_PROBE_OUT".into(), self.path.clone().into_os_string()));
        if let Some(lib) = lib {
            let mut preload = OsString::from(lib.as_os_str());
            if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
                preload.push(":");
                preload.push(old);
            }
            cmd.env.push(("LD_PRELOAD".into(), preload));
        }
    }

    /// The report, or None when the program wrote none (no probe library in it).
    fn read(&self) -> anyhow::Result<Option<PointReport>> {
        let text = std::fs::read_to_string(&self.path)
            .with_context(|| format!("reading the probe-point report {}", self.path.display()))?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        Ok(Some(PointReport::parse(&text)?))
    }
}

impl Drop for PointsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One probe point's counts, as the probe library reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointCount {
    /// The point's name.
    pub probe: String,
    /// Plain hits and scope entries.
    pub hits: u64,
    /// Scope exits.
    pub exits: u64,
    /// Sum of the scopes' durations.
    pub total_ns: u64,
    /// `log2_ns[i]`: exits that took `[2^i, 2^(i+1))` ns (bucket 0 also holds 0 ns).
    pub log2_ns: Vec<u64>,
}

impl PointCount {
    /// Percentiles from the histogram: each is the upper bound of the bucket that holds
    /// that rank; the mean is exact. None without exits (not a scoped probe).
    pub fn summary(&self) -> Option<Summary> {
        let count: u64 = self.log2_ns.iter().sum();
        if count == 0 {
            return None;
        }
        let upper = |i: usize| if i >= 63 { u64::MAX } else { (1u64 << (i + 1)) - 1 };
        let lower = |i: usize| if i == 0 { 0 } else { 1u64 << i.min(63) };
        let rank = |q: f64| {
            let want = ((q * count as f64).ceil() as u64).clamp(1, count);
            let mut seen = 0;
            for (i, &n) in self.log2_ns.iter().enumerate() {
                seen += n;
                if seen >= want {
                    return upper(i);
                }
            }
            upper(self.log2_ns.len().saturating_sub(1))
        };
        let first = self.log2_ns.iter().position(|&n| n > 0)?;
        let last = self.log2_ns.iter().rposition(|&n| n > 0)?;
        Some(Summary {
            count,
            min: lower(first),
            mean: self.total_ns / count,
            p50: rank(0.5),
            p90: rank(0.9),
            p99: rank(0.99),
            max: upper(last),
        })
    }
}

/// A probe point declared by the program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointSite {
    /// The point's name.
    pub probe: String,
    /// Where it is declared.
    pub file: String,
    /// The line.
    pub line: u64,
    /// How many arguments it passes.
    pub nargs: u64,
}

/// What the probe library wrote at the program's exit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PointReport {
    /// Counts of the requested points.
    pub counts: Vec<PointCount>,
    /// Every site (with `STROBE_PROBE_LIST`).
    pub sites: Vec<PointSite>,
    /// Requested names the program does not declare, with a "did you mean" hint.
    pub unknown: Vec<(String, String)>,
}

impl PointReport {
    /// Parses the JSON lines; lines of unknown types are skipped (a newer library).
    pub fn parse(text: &str) -> anyhow::Result<PointReport> {
        let mut r = PointReport::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("bad line in the probe-point report: {line}"))?;
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            let n = |k: &str| v[k].as_u64().unwrap_or(0);
            match v["type"].as_str() {
                Some("count") => r.counts.push(PointCount {
                    probe: s("probe"),
                    hits: n("hits"),
                    exits: n("exits"),
                    total_ns: n("total_ns"),
                    log2_ns: v["log2_ns"]
                        .as_array()
                        .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(0)).collect())
                        .unwrap_or_default(),
                }),
                Some("site") => r.sites.push(PointSite {
                    probe: s("probe"),
                    file: s("file"),
                    line: n("line"),
                    nargs: n("nargs"),
                }),
                Some("unknown") => r.unknown.push((s("probe"), s("hint"))),
                _ => {}
            }
        }
        Ok(r)
    }
}

/// `--list -- cmd`: the probe points the program declared.
fn list_points(points: Option<&PointReport>, out: &mut dyn Write) -> anyhow::Result<()> {
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
    fn point_reports_parse_and_histograms_give_bucket_bounds() {
        let mut hist = vec![0u64; 64];
        hist[10] = 90; // [1024, 2048)
        hist[20] = 10; // [1 Mi, 2 Mi)
        let count = serde_json::json!({
            "type": "count", "probe": "req", "hits": 100, "exits": 100,
            "total_ns": 12_345_600u64, "log2_ns": hist,
        });
        let text = format!(
            "{count}\n\
             {{\"type\":\"site\",\"probe\":\"req\",\"file\":\"a.c\",\"line\":7,\"nargs\":2}}\n\
             {{\"type\":\"unknown\",\"probe\":\"rq\",\"hint\":\" (did you mean req?)\"}}\n\
             {{\"type\":\"future\"}}\n"
        );
        let r = PointReport::parse(&text).unwrap();
        assert_eq!(r.counts.len(), 1);
        let site = PointSite { probe: "req".into(), file: "a.c".into(), line: 7, nargs: 2 };
        assert_eq!(r.sites, vec![site]);
        assert_eq!(r.unknown, vec![("rq".to_string(), " (did you mean req?)".to_string())]);
        let s = r.counts[0].summary().unwrap();
        assert_eq!((s.count, s.min, s.mean), (100, 1024, 123_456));
        assert_eq!((s.p50, s.p90, s.p99, s.max), (2047, 2047, (1 << 21) - 1, (1 << 21) - 1));
        let plain =
            PointCount { probe: "x".into(), hits: 5, exits: 0, total_ns: 0, log2_ns: vec![0; 64] };
        assert_eq!(plain.summary(), None);
        assert!(PointReport::parse("not json").is_err());
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(fmt_ns(812), "812ns");
        assert_eq!(fmt_ns(12_345), "12.3us");
        assert_eq!(fmt_ns(10_070_000), "10.07ms");
        assert_eq!(fmt_ns(1_234_000_000), "1.234s");
    }
}
