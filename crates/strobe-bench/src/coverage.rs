//! `strobe bench coverage`: the coverage zoo (issue 21) recorded by strobe at its
//! defaults, by `perf record` and by samply at the same rate, side by side in one run,
//! each profiler's share of every named function against the truth the program measured
//! itself in the same run.
//!
//! The cases are those of the zoo's tests (`crates/strobe/tests/it/coverage.rs`), with the
//! same programs and sizes (`--quick` shrinks them):
//!
//! | case | program | rows |
//! |---|---|---|
//! | `sigwait` | `zoo_sigwait`: every thread blocks every signal, one sigwaits | `worker_spin`, `main_work` |
//! | `mainexit` | `zoo_mainexit`: main calls pthread_exit, the workers go on | `worker_spin` |
//! | `children-HOW` | `zoo_children`: 3000 children of 3 ms made by fork, fork+exec, vfork, posix_spawn, exec of /proc/self/exe | `child_work`, `parent_work` |
//! | `children-HOW-30ms` | the same with 100 children of 30 ms (kernel mode's case) | the same |
//! | `short-threads` | `short_threads`: 12000 threads of 1 ms | `short_worker`, `main_work` |
//! | `fds` | `zoo_fds`: 400 threads holding 2 descriptors under a 1024 limit | `fd_work`; peak descriptors |
//! | `sh`, `bash` | `sh -c 'zoo_spin 7000; zoo_spin 7000'` under the `zoo_tree` wrapper | `spin_work`; the `zoo_spin` processes' share |
//! | `make` | `make -j2` of 40 C files, each compile under `zoo_tree` | make's, the shells' and the wrappers' share |
//! | `pool` | `python3 zoo_pool.py`: a multiprocessing Pool of 2 forked workers | the workers' processes' share |
//! | `xz` | `xz -T2 -3 -c` of 60 MB under `zoo_tree` (liblzma's workers block every signal) | xz's share |
//!
//! Each case runs once unprofiled (the reference for "program changed": exit status, and
//! output with its measured times and the descriptor count masked), then under `strobe
//! record` at the defaults (and `--mode kernel` where the tests run it), under `perf
//! record -e task-clock -F RATE` (with `--call-graph dwarf` where rows name functions)
//! and under `samply record -r RATE`, where RATE is the samples per CPU-second of strobe's
//! recording of the case (1e9 over its mean cycle: period, half the jitter, the window).
//! Every run's truth is the program's own report of that run (its `CLOCK_THREAD_CPUTIME_ID`
//! around calls and its `RUSAGE_CHILDREN`, or the `wait4` rusage `zoo_tree` logs), so each
//! profiler is judged against the run it recorded.
//!
//! Shares are percent of the tree's CPU time as each tool shows them to its user: strobe's
//! `total_pct` (self and callees) and the command's `pct` from `strobe report --format
//! json`; perf's `Children` column of `perf report --children --sort sym` and the
//! `Overhead` of `--sort comm`/`--sort pid` (period-weighted); samply's share of samples
//! whose stack holds the function (symbols from its `--unstable-presymbolicate` sidecar),
//! as its call tree counts them. The "pool workers" row is every process but the launched
//! one: strobe's from the record file's time samples by process (as the test reads it),
//! perf's by pid (the launched one is the first exec in its file), samply's by process
//! (the launched one starts first).
//!
//! Accounted (strobe only) is the CPU time strobe attributes to processes and threads,
//! its samples times the sampling cycle plus the remainders it names per command and
//! thread (`[not sampled]`, `[strobe agent]`: the JSON `processes` array's samples' worth),
//! over the truth's tree CPU time. `sampled` is the part from samples alone.
//!
//! samply is installed on first use with `cargo install --locked samply` into
//! `TARGET/bench-tools` (never the user's `~/.cargo`, never when `CI` is set), and needs
//! `kernel.perf_event_paranoid` at most 1: as root the bench lowers it for each samply
//! run and restores it; otherwise samply is skipped, saying why. Without perf its column
//! is skipped the same way. samply exits 0 whatever the program did, so only its output is
//! compared with the unprofiled run.
//!
//! `STROBE_BENCH_KEEP=1` keeps the scratch directory (record files, perf.data, profiles);
//! `STROBE_BENCH_CASES=fds,children-fork` runs only the cases whose names start so.
//!
//! Owns the zoo's side-by-side comparison. Must never be linked into the agent or a
//! target, never change the zoo programs' behaviour, and never judge strobe against a
//! truth from another run than the one it recorded.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Instant;

use serde_json::{json, Map, Value};

use crate::drive::{find_perf, io, last_line, perf_samples, r3, Scratch};
use crate::report::machine_summary;
use crate::{BenchError, BenchOpts, BenchReport};

/// The issue's goals.
const GOAL_SHARE_POINTS: f64 = 3.0;
const GOAL_ACCOUNTED: f64 = 0.98;

/// The Python case's program.
const POOL_SCRIPT: &str = include_str!("../../../tests/python/zoo_pool.py");

/// How strobe records a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The defaults: the agent and the kernel floor.
    Defaults,
    /// `--mode kernel`.
    Kernel,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Defaults => "defaults",
            Mode::Kernel => "kernel",
        }
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            Mode::Defaults => &[],
            Mode::Kernel => &["--mode", "kernel"],
        }
    }
}

/// What a row compares.
#[derive(Debug, Clone, PartialEq)]
enum Measure {
    /// A function's total share (self and callees).
    Function(&'static str),
    /// The share of the processes running one of these commands.
    Commands(&'static [&'static str]),
    /// The share of every process but the launched one.
    Children,
}

/// The commands of make's case that are not a compile's tree.
const MAKE_OUTSIDE: &[&str] = &["make", "sh", "dash", "bash", "zoo_tree"];

/// The shape of a case: which rows it has and how its truth is read.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Sigwait,
    MainExit,
    Children,
    ShortThreads,
    Fds,
    Shell,
    /// The build's source directory and the compiles' log.
    Make {
        src: PathBuf,
        cc_log: PathBuf,
    },
    Pool,
    Xz,
}

impl Kind {
    /// The rows: (label, what is measured).
    fn measures(&self) -> Vec<(&'static str, Measure)> {
        use Measure::*;
        match self {
            Kind::Sigwait => {
                vec![("worker_spin", Function("worker_spin")), ("main_work", Function("main_work"))]
            }
            Kind::MainExit => vec![("worker_spin", Function("worker_spin"))],
            Kind::Children => {
                vec![
                    ("child_work", Function("child_work")),
                    ("parent_work", Function("parent_work")),
                ]
            }
            Kind::ShortThreads => vec![
                ("short_worker", Function("short_worker")),
                ("main_work", Function("main_work")),
            ],
            Kind::Fds => vec![("fd_work", Function("fd_work"))],
            Kind::Shell => vec![
                ("spin_work", Function("spin_work")),
                ("zoo_spin processes", Commands(&["zoo_spin"])),
            ],
            Kind::Make { .. } => vec![("make, shells, wrappers", Commands(MAKE_OUTSIDE))],
            Kind::Pool => vec![("pool workers", Children)],
            Kind::Xz => vec![("xz process", Commands(&["xz"]))],
        }
    }

    /// Whether perf needs call stacks for this case's rows.
    fn stacks(&self) -> bool {
        self.measures().iter().any(|(_, m)| matches!(m, Measure::Function(_)))
    }
}

/// One case of the zoo.
#[derive(Debug, Clone)]
struct Case {
    name: String,
    kind: Kind,
    command: Vec<OsString>,
    modes: Vec<Mode>,
    /// The log `zoo_tree` writes when the command is wrapped.
    tree_log: Option<PathBuf>,
}

/// What a run of a case printed and left.
#[derive(Debug, Clone, PartialEq)]
struct RunOut {
    /// `None` where the tool hides it (samply exits 0 whatever the program did).
    status: Option<ExitStatus>,
    stdout: Vec<u8>,
    /// The `zoo_tree` log, when wrapped.
    tree_log: String,
    /// The compiles' log (make's case).
    cc_log: String,
    seconds: f64,
}

/// A run's truth: each row's share (percent of the tree), the tree's CPU time.
#[derive(Debug, Clone, PartialEq)]
struct Truth {
    shares: Vec<f64>,
    tree_ns: f64,
    peak_fds: Option<f64>,
}

/// What one profiler said about one run.
#[derive(Debug, Clone, Default, PartialEq)]
struct Shares {
    /// Total share (percent) by function name.
    functions: HashMap<String, f64>,
    /// Share (percent) by command.
    commands: HashMap<String, f64>,
    /// Share (percent) of the processes other than the launched one.
    children: Option<f64>,
    samples: u64,
}

impl Shares {
    fn get(&self, m: &Measure) -> Option<f64> {
        match m {
            Measure::Function(f) => Some(self.functions.get(*f).copied().unwrap_or(0.0)),
            Measure::Commands(cs) => Some(cs.iter().filter_map(|c| self.commands.get(*c)).sum()),
            Measure::Children => self.children,
        }
    }
}

/// A strobe recording of a case.
#[derive(Debug, Clone, PartialEq)]
struct StrobeRun {
    out: RunOut,
    shares: Shares,
    /// The mean sampling cycle, ns: period, half the jitter, the window.
    cycle_ns: f64,
    /// CPU time attributed to processes and threads (samples and named remainders), ns.
    accounted_ns: f64,
    /// CPU time the samples alone stand for, ns.
    sampled_ns: f64,
    not_sampled_pct: f64,
    agent_pct: f64,
}

/// A perf or samply recording of a case.
#[derive(Debug, Clone, PartialEq)]
struct OtherRun {
    out: RunOut,
    shares: Shares,
}

/// Everything measured about one case.
#[derive(Debug, Clone)]
struct CaseResult {
    name: String,
    kind: Kind,
    plain: RunOut,
    strobe: Vec<(Mode, Result<StrobeRun, String>)>,
    rate_hz: u64,
    perf: Result<OtherRun, String>,
    samply: Result<OtherRun, String>,
}

/// Everything measured, before it is summarized.
#[derive(Debug, Clone)]
struct Measured {
    quick: bool,
    cases: Vec<CaseResult>,
    load_before: String,
    load_after: String,
    seconds: f64,
}

/// Sizes of the cases.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Plan {
    quick: bool,
}

impl Plan {
    /// `full` in a full run, `quick` with `--quick`.
    fn pick<'a>(&self, full: &'a [&'a str], quick: &'a [&'a str]) -> &'a [&'a str] {
        if self.quick {
            quick
        } else {
            full
        }
    }
}

fn prog(name: &str) -> OsString {
    strobe_testprogs::path(name).into()
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// The zoo's cases, with their inputs written to `dir`.
fn cases(plan: Plan, dir: &Path) -> Result<Vec<Case>, BenchError> {
    let mut v = Vec::new();
    let simple = |name: &str, kind: Kind, program: &str, args: &[&str], modes: &[Mode]| {
        let mut command = vec![prog(program)];
        command.extend(os(args));
        Case { name: name.into(), kind, command, modes: modes.to_vec(), tree_log: None }
    };
    let both = [Mode::Defaults, Mode::Kernel];
    v.push(simple(
        "sigwait",
        Kind::Sigwait,
        "zoo_sigwait",
        plan.pick(&["2", "7000", "1500"], &["2", "1000", "300"]),
        &both,
    ));
    v.push(simple(
        "mainexit",
        Kind::MainExit,
        "zoo_mainexit",
        plan.pick(&["2", "8000"], &["2", "1200"]),
        &both,
    ));
    for how in ["fork", "exec", "vfork", "spawn", "selfexe"] {
        let mut args = vec![how];
        args.extend_from_slice(
            plan.pick(&["3000", "1", "3000", "2500"], &["300", "1", "3000", "300"]),
        );
        v.push(simple(
            &format!("children-{how}"),
            Kind::Children,
            "zoo_children",
            &args,
            &[Mode::Defaults],
        ));
        let mut args = vec![how];
        args.extend_from_slice(
            plan.pick(&["100", "1", "30000", "1000"], &["15", "1", "30000", "150"]),
        );
        v.push(simple(
            &format!("children-{how}-30ms"),
            Kind::Children,
            "zoo_children",
            &args,
            &[Mode::Kernel],
        ));
    }
    v.push(simple(
        "short-threads",
        Kind::ShortThreads,
        "short_threads",
        plan.pick(&["12000", "1000", "1", "3000"], &["1500", "1000", "1", "400"]),
        &[Mode::Defaults],
    ));
    v.push(simple(
        "fds",
        Kind::Fds,
        "zoo_fds",
        plan.pick(&["400", "2", "40"], &["400", "2", "5"]),
        &[Mode::Defaults],
    ));
    let wrapped = |name: &str, kind: Kind, command: Vec<OsString>| {
        let log = dir.join(format!("{name}.tree.log"));
        let mut c = vec![prog("zoo_tree"), log.clone().into()];
        c.extend(command);
        Case {
            name: name.into(),
            kind,
            command: c,
            modes: vec![Mode::Defaults],
            tree_log: Some(log),
        }
    };
    let spin = strobe_testprogs::path("zoo_spin").display().to_string();
    let ms = plan.pick(&["7000"], &["1000"])[0];
    for shell in ["sh", "bash"] {
        let script = format!("{spin} {ms}; {spin} {ms}");
        v.push(wrapped(shell, Kind::Shell, os(&[shell, "-c", &script])));
    }
    let src = dir.join("proj");
    let cc_log = dir.join("cc.log");
    write_project(&src, &cc_log, if plan.quick { 8 } else { 40 })?;
    v.push(wrapped(
        "make",
        Kind::Make { src: src.clone(), cc_log },
        vec!["make".into(), "-s".into(), "-j2".into(), "-C".into(), src.into()],
    ));
    let script = dir.join("zoo_pool.py");
    std::fs::write(&script, POOL_SCRIPT).map_err(io("writing zoo_pool.py"))?;
    let mut pool = vec![OsString::from("python3"), script.into()];
    pool.extend(os(plan.pick(&["2", "300", "50"], &["2", "40", "50"])));
    v.push(Case {
        name: "pool".into(),
        kind: Kind::Pool,
        command: pool,
        modes: vec![Mode::Defaults],
        tree_log: None,
    });
    let input = dir.join("xz-input");
    write_xz_input(&input, if plan.quick { 300_000 } else { 1_500_000 })?;
    v.push(wrapped(
        "xz",
        Kind::Xz,
        vec!["xz".into(), "-T2".into(), "-3".into(), "-c".into(), input.into()],
    ));
    Ok(v)
}

/// The make case's project (the test's): `files` C files of 60 functions each, compiled
/// through `zoo_tree CC_LOG gcc`.
fn write_project(src: &Path, cc_log: &Path, files: usize) -> Result<(), BenchError> {
    std::fs::create_dir_all(src).map_err(io("creating the make project"))?;
    let mut objs = Vec::new();
    for i in 0..files {
        let mut body = String::new();
        for j in 0..60 {
            let _ = writeln!(
                body,
                "double f{i}_{j}(double x) {{ double s = 0; for (int k = 0; k < 100; k++) \
                 s += __builtin_sin(x * k + {j}) / (k + 1.0); return s; }}"
            );
        }
        std::fs::write(src.join(format!("f{i}.c")), body).map_err(io("writing the project"))?;
        objs.push(format!("f{i}.o"));
    }
    std::fs::write(src.join("main.c"), "int main(void) { return 0; }\n")
        .map_err(io("writing the project"))?;
    let makefile = format!(
        "CC = {} {} gcc\nCFLAGS = -O2\nall: prog\nprog: main.o {}\n\t$(CC) -o $@ $^ -lm\nclean:\n\trm -f *.o prog\n",
        strobe_testprogs::path("zoo_tree").display(),
        cc_log.display(),
        objs.join(" ")
    );
    std::fs::write(src.join("Makefile"), makefile).map_err(io("writing the Makefile"))
}

/// xz's input (the test's): counted lines, compressible but not trivially.
fn write_xz_input(path: &Path, lines: u64) -> Result<(), BenchError> {
    let mut text = String::with_capacity(lines as usize * 17);
    for i in 0..lines {
        let _ = writeln!(text, "{i:>12} {}", i.wrapping_mul(2654435761) % 1000);
    }
    std::fs::write(path, text).map_err(io("writing xz's input"))
}

/// Puts the case's files back as before a run: no logs, a clean build tree.
fn prepare(case: &Case) {
    if let Some(log) = &case.tree_log {
        let _ = std::fs::remove_file(log);
    }
    if let Kind::Make { src, cc_log } = &case.kind {
        let _ = Command::new("make")
            .args(["-s", "-C"])
            .arg(src)
            .arg("clean")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_file(cc_log);
    }
}

/// Runs `cmd` (a case's command, bare or under a profiler) after [`prepare`], and
/// collects what the case left. `Err` when it could not start.
fn run_case(case: &Case, cmd: &mut Command, what: &str) -> Result<(RunOut, Vec<u8>), String> {
    prepare(case);
    let t = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("starting {what}: {e}"))?;
    let seconds = t.elapsed().as_secs_f64();
    let read =
        |p: Option<&PathBuf>| p.and_then(|p| std::fs::read_to_string(p).ok()).unwrap_or_default();
    let cc_log = match &case.kind {
        Kind::Make { cc_log, .. } => read(Some(cc_log)),
        _ => String::new(),
    };
    Ok((
        RunOut {
            status: Some(out.status),
            stdout: out.stdout,
            tree_log: read(case.tree_log.as_ref()),
            cc_log,
            seconds,
        },
        out.stderr,
    ))
}

/// `key=value` pairs of one line (or text).
fn fields(text: &str) -> BTreeMap<String, f64> {
    text.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

/// The `tree_ns` of the last line of a `zoo_tree` log.
fn last_tree_ns(log: &str) -> Option<f64> {
    log.lines().rev().find_map(|l| fields(l).get("tree_ns").copied())
}

/// A run's truth, from what the program printed and the logs it left.
fn truth(kind: &Kind, out: &RunOut) -> Result<Truth, String> {
    let text = String::from_utf8_lossy(&out.stdout);
    let f = fields(&text);
    let get = |k: &str| {
        f.get(k).copied().filter(|v| *v > 0.0).ok_or_else(|| format!("the program printed no {k}"))
    };
    let pct = |a: f64, b: f64| 100.0 * a / b;
    let (shares, tree_ns, peak_fds) = match kind {
        Kind::Sigwait => {
            let p = get("process_ns")?;
            (vec![pct(get("worker_ns")?, p), pct(get("main_ns")?, p)], p, None)
        }
        Kind::MainExit => {
            let p = get("process_ns")?;
            (vec![pct(get("worker_ns")?, p)], p, None)
        }
        Kind::Children => {
            let t = get("tree_ns")?;
            (vec![pct(get("child_ns")?, t), pct(get("parent_ns")?, t)], t, None)
        }
        Kind::ShortThreads => {
            let p = get("process_ns")?;
            (vec![pct(get("worker_ns")?, p), pct(get("main_ns")?, p)], p, None)
        }
        Kind::Fds => {
            let p = get("process_ns")?;
            (vec![pct(get("fd_ns")?, p)], p, f.get("peak_fds").copied())
        }
        Kind::Shell => {
            let tree = last_tree_ns(&out.tree_log).ok_or("zoo_tree logged no tree_ns")?;
            let lines: Vec<BTreeMap<String, f64>> = text.lines().map(fields).collect();
            let sum = |k: &str| lines.iter().filter_map(|l| l.get(k)).sum::<f64>();
            (vec![pct(sum("spin_ns"), tree), pct(sum("process_ns"), tree)], tree, None)
        }
        Kind::Make { .. } => {
            let tree = last_tree_ns(&out.tree_log).ok_or("zoo_tree logged no tree_ns")?;
            let compiles: f64 =
                out.cc_log.lines().filter_map(|l| fields(l).get("tree_ns").copied()).sum();
            (vec![pct(tree - compiles, tree)], tree, None)
        }
        Kind::Pool => {
            let t = get("tree_ns")?;
            (vec![pct(t - get("parent_ns")?, t)], t, None)
        }
        Kind::Xz => {
            let tree = last_tree_ns(&out.tree_log).ok_or("zoo_tree logged no tree_ns")?;
            (vec![100.0], tree, None)
        }
    };
    Ok(Truth { shares, tree_ns, peak_fds })
}

/// Output with what changes from run to run masked: measured times (`*_ns=`) and the
/// descriptor count (`peak_fds=`, compared on its own). Non-text output is compared as is.
fn normalized(stdout: &[u8]) -> Vec<u8> {
    let Ok(text) = std::str::from_utf8(stdout) else { return stdout.to_vec() };
    let mask = |tok: &str| match tok.split_once('=') {
        Some((k, _)) if k.ends_with("_ns") || k == "peak_fds" => format!("{k}=*"),
        _ => tok.to_string(),
    };
    text.split('\n')
        .map(|l| l.split(' ').map(mask).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("\n")
        .into_bytes()
}

fn describe(s: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit {c}"),
        (None, Some(sig)) => format!("signal {sig}"),
        _ => format!("{s}"),
    }
}

/// How a profiled run differs from the unprofiled one, if it does.
fn changed(plain: &RunOut, run: &RunOut) -> Option<String> {
    if let (Some(a), Some(b)) = (plain.status, run.status) {
        if a != b {
            return Some(format!("{} (unprofiled: {})", describe(&b), describe(&a)));
        }
    }
    if normalized(&plain.stdout) != normalized(&run.stdout) {
        return Some("output differs".into());
    }
    None
}

// ---- strobe ----

/// Runs a case under `strobe record` in `mode` and reads its report.
fn strobe_run(exe: &Path, dir: &Path, case: &Case, mode: Mode) -> Result<StrobeRun, String> {
    let file = dir.join(format!("{}-{}.strobe", case.name, mode.name()));
    let _ = std::fs::remove_file(&file);
    let (out, stderr) = run_case(
        case,
        Command::new(exe)
            .arg("record")
            .arg("-o")
            .arg(&file)
            .args(mode.args())
            .arg("--")
            .args(&case.command),
        "strobe record",
    )?;
    if !file.exists() {
        return Err(format!("strobe record wrote no file: {}", last_line(&stderr)));
    }
    let rep = Command::new(exe)
        .arg("report")
        .arg(&file)
        .args(["--format", "json", "--quiet"])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("starting strobe report: {e}"))?;
    if !rep.status.success() {
        return Err(format!("strobe report: {}", last_line(&rep.stderr)));
    }
    let report: Value =
        serde_json::from_slice(&rep.stdout).map_err(|e| format!("strobe report's JSON: {e}"))?;
    let children = case.kind.measures().iter().any(|(_, m)| *m == Measure::Children);
    strobe_figures(&report, out, &file_time(&file)?, children)
}

/// The time samples of a record file: each stream's time samples times its cycle (period,
/// half the jitter, the window), for the launched process and for the others, and their
/// number.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct FileTime {
    launched_ns: f64,
    others_ns: f64,
    samples: u64,
}

/// [`FileTime`] of a record file, as the pool test reads it.
fn file_time(file: &Path) -> Result<FileTime, String> {
    let rec = strobe_format::read_all(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let infos = || rec.processes.iter().filter_map(|p| p.info.as_ref());
    let launched = infos()
        .find(|i| i.origin == strobe_format::ProcessOrigin::Start && !i.floor)
        .or_else(|| infos().find(|i| i.origin == strobe_format::ProcessOrigin::Start))
        .map(|i| i.pid)
        .ok_or("no launched process in the record file")?;
    let mut t = FileTime::default();
    for p in &rec.processes {
        let Some(info) = &p.info else { continue };
        let cycle = info.period as f64 + info.jitter as f64 / 2.0 + info.window as f64;
        let n = p.samples.iter().filter(|s| s.kind.is_time_sample()).count() as u64;
        t.samples += n;
        if info.pid == launched {
            t.launched_ns += n as f64 * cycle;
        } else {
            t.others_ns += n as f64 * cycle;
        }
    }
    Ok(t)
}

/// strobe's figures from its JSON report and its file's time samples. The accounted time
/// is the CPU time the report's `processes` array says its samples and named remainders
/// (`[not sampled]`, `[strobe agent]`) stand for (`cpu_ns`; older reports: their
/// samples' worth times the file's mean cycle per time sample).
fn strobe_figures(
    report: &Value,
    out: RunOut,
    file: &FileTime,
    children: bool,
) -> Result<StrobeRun, String> {
    let num = |k: &str| report[k].as_f64().unwrap_or(0.0);
    let cycle_ns = num("period") + num("jitter") / 2.0 + num("window");
    if cycle_ns <= 0.0 {
        return Err("strobe's report has no sampling period".into());
    }
    let sampled_ns = file.launched_ns + file.others_ns;
    let unit = if file.samples > 0 { sampled_ns / file.samples as f64 } else { cycle_ns };
    let mut shares = Shares { samples: file.samples, ..Shares::default() };
    let (mut not_sampled, mut agent) = (0.0, 0.0);
    for f in report["functions"].as_array().into_iter().flatten() {
        let name = f["function"].as_str().unwrap_or("").to_string();
        let total = f["total_pct"].as_f64().unwrap_or(0.0);
        let own = f["time_pct"].as_f64().unwrap_or(0.0);
        match name.as_str() {
            "[not sampled]" => not_sampled += own,
            "[strobe agent]" => agent += own,
            _ => {}
        }
        let e = shares.functions.entry(name).or_insert(0.0);
        *e = e.max(total);
    }
    let mut accounted = 0.0;
    for p in report["processes"].as_array().into_iter().flatten() {
        let cmd = p["command"].as_str().unwrap_or("").to_string();
        *shares.commands.entry(cmd).or_insert(0.0) += p["pct"].as_f64().unwrap_or(0.0);
        accounted +=
            p["cpu_ns"].as_f64().unwrap_or_else(|| p["samples"].as_f64().unwrap_or(0.0) * unit);
    }
    if children {
        shares.children = Some(100.0 * file.others_ns / sampled_ns.max(1.0));
    }
    Ok(StrobeRun {
        out,
        cycle_ns,
        accounted_ns: accounted,
        sampled_ns,
        not_sampled_pct: not_sampled,
        agent_pct: agent,
        shares,
    })
}

// ---- perf ----

/// Runs a case under `perf record` at `rate_hz` and reads `perf report`.
fn perf_run(perf: &Path, dir: &Path, case: &Case, rate_hz: u64) -> Result<OtherRun, String> {
    let file = dir.join(format!("{}.perf.data", case.name));
    let mut cmd = Command::new(perf);
    cmd.args(["record", "-q", "-e", "task-clock", "-F", &rate_hz.to_string()]);
    if case.kind.stacks() {
        cmd.args(["--call-graph", "dwarf"]);
    }
    cmd.arg("-o").arg(&file).arg("--").args(&case.command);
    let (out, stderr) = run_case(case, &mut cmd, "perf record")?;
    if !file.exists() {
        return Err(format!("perf record wrote no file: {}", last_line(&stderr)));
    }
    let report = |sort: &str, children: bool| -> Result<String, String> {
        let o = Command::new(perf)
            .args(["report", "--stdio", "-g", "none", "--percent-limit", "0", "--sort", sort])
            .arg(if children { "--children" } else { "--no-children" })
            .arg("-i")
            .arg(&file)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("starting perf report: {e}"))?;
        if !o.status.success() {
            return Err(format!("perf report --sort {sort}: {}", last_line(&o.stderr)));
        }
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    };
    let mut shares =
        Shares { samples: perf_samples(&file).map_err(|e| e.to_string())?, ..Shares::default() };
    let measures = case.kind.measures();
    if case.kind.stacks() {
        shares.functions = perf_lines(&report("sym", true)?).into_iter().collect_max();
    }
    if measures.iter().any(|(_, m)| matches!(m, Measure::Commands(_))) {
        shares.commands = perf_lines(&report("comm", false)?).into_iter().collect_sum();
    }
    if measures.iter().any(|(_, m)| *m == Measure::Children) {
        let launched = perf_launched_pid(&file)?;
        let by_pid = perf_lines(&report("pid", false)?);
        let others: f64 = by_pid
            .iter()
            .filter(|(k, _)| {
                k.split(':').next().and_then(|p| p.parse::<u32>().ok()) != Some(launched)
            })
            .map(|(_, v)| v)
            .sum();
        shares.children = Some(others);
    }
    Ok(OtherRun { out, shares })
}

/// (key, percent) pairs of `perf report --stdio` lines: the first percentage column
/// (`Children` with `--children`, else `Overhead`), the key after the columns (a
/// symbol's `[.]`/`[k]` mark and an `(inlined)` suffix dropped).
fn perf_lines(text: &str) -> Vec<(String, f64)> {
    let mut v = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut toks = line.split_whitespace().peekable();
        let Some(first) = toks.next().and_then(|t| t.strip_suffix('%')?.parse::<f64>().ok()) else {
            continue;
        };
        while toks
            .peek()
            .is_some_and(|t| t.ends_with('%') && t[..t.len() - 1].parse::<f64>().is_ok())
        {
            toks.next();
        }
        if toks.peek().is_some_and(|t| t.starts_with('[') && t.ends_with(']') && t.len() == 3) {
            toks.next();
        }
        let key = toks.collect::<Vec<_>>().join(" ");
        let key = key.strip_suffix(" (inlined)").unwrap_or(&key).to_string();
        if !key.is_empty() {
            v.push((key, first));
        }
    }
    v
}

trait CollectShares {
    fn collect_max(self) -> HashMap<String, f64>;
    fn collect_sum(self) -> HashMap<String, f64>;
}

impl<I: Iterator<Item = (String, f64)>> CollectShares for I {
    /// A name listed twice (a symbol of two modules, an inlined copy): its largest share.
    fn collect_max(self) -> HashMap<String, f64> {
        let mut m: HashMap<String, f64> = HashMap::new();
        for (k, v) in self {
            let e = m.entry(k).or_insert(0.0);
            *e = e.max(v);
        }
        m
    }

    fn collect_sum(self) -> HashMap<String, f64> {
        let mut m: HashMap<String, f64> = HashMap::new();
        for (k, v) in self {
            *m.entry(k).or_insert(0.0) += v;
        }
        m
    }
}

/// The launched process of a perf.data file: the first that exec'd (perf forks the
/// command and execs it; a Pool's workers are forked without exec).
fn perf_launched_pid(file: &Path) -> Result<u32, String> {
    let bad = |e: &dyn std::fmt::Display| format!("{}: {e}", file.display());
    let f = strobe_perfdata::PerfFile::open(file).map_err(|e| bad(&e))?;
    let data = f.parse().map_err(|e| bad(&e))?;
    data.records()
        .filter_map(Result::ok)
        .find_map(|r| match r.event {
            strobe_perfdata::Event::Comm(c) if c.exec => Some(c.pid),
            _ => None,
        })
        .ok_or_else(|| format!("{}: no exec in the file", file.display()))
}

// ---- samply ----

/// Where the bench keeps the tools it installs: `TARGET/bench-tools`, beside the build
/// that made the test programs.
fn tools_dir() -> PathBuf {
    let p = strobe_testprogs::path("zoo_tree");
    p.ancestors().nth(5).map_or_else(std::env::temp_dir, Path::to_path_buf).join("bench-tools")
}

/// samply, installed on first use; or why not.
fn find_samply() -> Result<PathBuf, String> {
    let root = tools_dir();
    let bin = root.join("bin").join("samply");
    if bin.exists() {
        return Ok(bin);
    }
    if std::env::var_os("CI").is_some() {
        return Err(format!(
            "samply is not in {} and CI is set (the bench installs it only outside CI)",
            root.display()
        ));
    }
    eprintln!(
        "strobe bench coverage: installing samply: cargo install --locked samply --root {} \
         (once; a few minutes)",
        root.display()
    );
    let out = Command::new("cargo")
        .args(["install", "--locked", "samply", "--root"])
        .arg(&root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run cargo to install samply: {e}"))?;
    if !out.status.success() || !bin.exists() {
        return Err(format!("cargo install --locked samply failed: {}", last_line(&out.stderr)));
    }
    Ok(bin)
}

const PARANOID: &str = "/proc/sys/kernel/perf_event_paranoid";

/// `kernel.perf_event_paranoid` lowered to 1 while it lives, restored when dropped.
struct Paranoid {
    old: Option<String>,
}

impl Paranoid {
    /// Lowers the sysctl to 1 when it is higher (root only); `Err` says why samply cannot
    /// run.
    fn lower() -> Result<Paranoid, String> {
        let old =
            std::fs::read_to_string(PARANOID).map_err(|e| format!("reading {PARANOID}: {e}"))?;
        let level: i32 = old.trim().parse().map_err(|_| format!("{PARANOID}: {old:?}"))?;
        if level <= 1 {
            return Ok(Paranoid { old: None });
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(format!(
                "kernel.perf_event_paranoid is {level} and samply needs 1 or less; only root \
                 may lower it (run the bench as root, or sysctl kernel.perf_event_paranoid=1)"
            ));
        }
        std::fs::write(PARANOID, "1").map_err(|e| format!("lowering {PARANOID}: {e}"))?;
        Ok(Paranoid { old: Some(old) })
    }
}

impl Drop for Paranoid {
    fn drop(&mut self) {
        if let Some(old) = &self.old {
            if let Err(e) = std::fs::write(PARANOID, old.trim()) {
                eprintln!(
                    "strobe bench coverage: could not restore {PARANOID} to {}: {e}",
                    old.trim()
                );
            }
        }
    }
}

/// Runs a case under `samply record` at `rate_hz` and reads its profile.
fn samply_run(samply: &Path, dir: &Path, case: &Case, rate_hz: u64) -> Result<OtherRun, String> {
    let file = dir.join(format!("{}.samply.json.gz", case.name));
    let syms = dir.join(format!("{}.samply.json.syms.json", case.name));
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&syms);
    let (mut out, stderr) = {
        let _lowered = Paranoid::lower()?;
        run_case(
            case,
            Command::new(samply)
                .args(["record", "--save-only", "--unstable-presymbolicate", "-r"])
                .arg(rate_hz.to_string())
                .arg("-o")
                .arg(&file)
                .arg("--")
                .args(&case.command),
            "samply record",
        )?
    };
    // samply exits 0 whatever the program did.
    out.status = None;
    if !file.exists() {
        return Err(format!("samply wrote no profile: {}", last_line(&stderr)));
    }
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&file).map_err(|e| e.to_string())?)
        .read_to_end(&mut text)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    let profile: Value =
        serde_json::from_slice(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let symbols: Value = match std::fs::read(&syms) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| format!("{}: {e}", syms.display()))?,
        Err(e) => return Err(format!("samply wrote no symbol sidecar {}: {e}", syms.display())),
    };
    Ok(OtherRun { out, shares: samply_shares(&profile, &symbols)? })
}

/// One library's symbols from samply's sidecar: (start, end, name), sorted.
type SymTable = Vec<(u64, u64, String)>;

/// The sidecar's symbol tables, by code id and by debug name.
fn sidecar_tables(syms: &Value) -> HashMap<String, SymTable> {
    let strings: Vec<&str> = syms["string_table"]
        .as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap_or("")).collect())
        .unwrap_or_default();
    let mut out = HashMap::new();
    for lib in syms["data"].as_array().into_iter().flatten() {
        let mut t: SymTable = lib["symbol_table"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| {
                let rva = s["rva"].as_u64()?;
                let name = strings.get(s["symbol"].as_u64()? as usize)?;
                Some((rva, rva + s["size"].as_u64().unwrap_or(0).max(1), name.to_string()))
            })
            .collect();
        t.sort();
        for key in ["code_id", "debug_name"] {
            if let Some(k) = lib[key].as_str() {
                out.entry(k.to_string()).or_insert_with(|| t.clone());
            }
        }
    }
    out
}

fn lookup(t: &SymTable, addr: u64) -> Option<&str> {
    let i = t.partition_point(|s| s.0 <= addr).checked_sub(1)?;
    (addr < t[i].1).then(|| t[i].2.as_str())
}

/// samply's shares from its processed profile and symbol sidecar: each sample (its
/// `weight`, 1 for CPU samples) counts once for every function on its stack, for its
/// process's name, and for the launched process (the first to start) or the others.
fn samply_shares(profile: &Value, syms: &Value) -> Result<Shares, String> {
    let tables = sidecar_tables(syms);
    let libs: Vec<Option<&SymTable>> = profile["libs"]
        .as_array()
        .ok_or("samply's profile has no libs")?
        .iter()
        .map(|l| {
            ["codeId", "debugName"]
                .iter()
                .find_map(|k| l[*k].as_str().and_then(|id| tables.get(id)))
        })
        .collect();
    let threads = profile["threads"].as_array().ok_or("samply's profile has no threads")?;
    let pid_of = |t: &Value| -> String {
        let p = t["pid"].as_str().map(str::to_string).unwrap_or_else(|| t["pid"].to_string());
        p.split('.').next().unwrap_or("").to_string()
    };
    let launched = threads
        .iter()
        .filter(|t| t["processStartupTime"].is_number())
        .min_by(|a, b| {
            a["processStartupTime"]
                .as_f64()
                .unwrap_or(0.0)
                .total_cmp(&b["processStartupTime"].as_f64().unwrap_or(0.0))
        })
        .map(pid_of);
    let (mut total, mut others) = (0.0f64, 0.0f64);
    let mut functions: HashMap<String, f64> = HashMap::new();
    let mut commands: HashMap<String, f64> = HashMap::new();
    let mut samples = 0u64;
    let col = |v: &Value, k: &str| -> Vec<Option<u64>> {
        v[k].as_array().map(|a| a.iter().map(Value::as_u64).collect()).unwrap_or_default()
    };
    for t in threads {
        let s = &t["samples"];
        let stacks = col(s, "stack");
        if stacks.is_empty() {
            continue;
        }
        let weights: Vec<f64> = s["weight"]
            .as_array()
            .map(|a| a.iter().map(|w| w.as_f64().unwrap_or(1.0)).collect())
            .unwrap_or_else(|| vec![1.0; stacks.len()]);
        let strings: Vec<&str> = t["stringArray"]
            .as_array()
            .map(|a| a.iter().map(|s| s.as_str().unwrap_or("")).collect())
            .unwrap_or_default();
        let (func_name, func_res) =
            (col(&t["funcTable"], "name"), col(&t["funcTable"], "resource"));
        let res_lib = col(&t["resourceTable"], "lib");
        let (frame_addr, frame_func) =
            (col(&t["frameTable"], "address"), col(&t["frameTable"], "func"));
        let (prefix, stack_frame) =
            (col(&t["stackTable"], "prefix"), col(&t["stackTable"], "frame"));
        let frame_name = |fr: usize| -> String {
            let func = frame_func.get(fr).copied().flatten().map(|f| f as usize);
            let lib = func
                .and_then(|f| func_res.get(f).copied().flatten())
                .and_then(|r| res_lib.get(r as usize).copied().flatten())
                .and_then(|l| libs.get(l as usize).copied().flatten());
            let symbol =
                lib.zip(frame_addr.get(fr).copied().flatten()).and_then(|(t, a)| lookup(t, a));
            match symbol {
                Some(s) => s.to_string(),
                None => func
                    .and_then(|f| func_name.get(f).copied().flatten())
                    .and_then(|n| strings.get(n as usize))
                    .unwrap_or(&"")
                    .to_string(),
            }
        };
        let names: Vec<String> = (0..stack_frame.len())
            .map(|i| stack_frame[i].map(|f| frame_name(f as usize)).unwrap_or_default())
            .collect();
        let process = t["processName"].as_str().unwrap_or("").to_string();
        let mine = launched.as_ref() == Some(&pid_of(t));
        for (i, st) in stacks.iter().enumerate() {
            let w = weights.get(i).copied().unwrap_or(1.0);
            samples += 1;
            total += w;
            *commands.entry(process.clone()).or_insert(0.0) += w;
            if !mine {
                others += w;
            }
            let mut seen = BTreeSet::new();
            let mut at = st.map(|s| s as usize);
            let mut depth = 0;
            while let Some(s) = at.filter(|s| *s < names.len() && depth < 4096) {
                if seen.insert(names[s].as_str()) {
                    *functions.entry(names[s].clone()).or_insert(0.0) += w;
                }
                at = prefix.get(s).copied().flatten().map(|p| p as usize);
                depth += 1;
            }
        }
    }
    if total <= 0.0 {
        return Err("samply's profile has no samples".into());
    }
    let scale =
        |m: HashMap<String, f64>| m.into_iter().map(|(k, v)| (k, 100.0 * v / total)).collect();
    Ok(Shares {
        functions: scale(functions),
        commands: scale(commands),
        children: launched.map(|_| 100.0 * others / total),
        samples,
    })
}

// ---- the run ----

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Runs `strobe bench coverage`.
pub(crate) fn run(opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    let exe = opts.strobe_exe.clone().ok_or_else(|| {
        BenchError::Other(
            "the coverage benchmark drives the strobe executable; run it as `strobe bench \
             coverage`"
                .into(),
        )
    })?;
    let start = Instant::now();
    let load_before = loadavg();
    let plan = Plan { quick: opts.quick };
    let scratch = Scratch::new("coverage")?;
    let dir = scratch.path();
    let perf = find_perf();
    let samply = find_samply();
    if let Err(why) = &samply {
        eprintln!("strobe bench coverage: samply skipped: {why}");
    }
    let mut results = Vec::new();
    let only = std::env::var("STROBE_BENCH_CASES").ok();
    let wanted = |name: &str| {
        only.as_deref().is_none_or(|o| o.split(',').any(|w| !w.is_empty() && name.starts_with(w)))
    };
    for case in cases(plan, dir)?.into_iter().filter(|c| wanted(&c.name)) {
        eprintln!("strobe bench coverage: {}", case.name);
        let (plain, stderr) =
            run_case(&case, Command::new(&case.command[0]).args(&case.command[1..]), &case.name)
                .map_err(BenchError::Other)?;
        if let Err(e) = truth(&case.kind, &plain) {
            return Err(BenchError::Other(format!(
                "{} (unprofiled): {e}; {}",
                case.name,
                last_line(&stderr)
            )));
        }
        let strobe: Vec<(Mode, Result<StrobeRun, String>)> =
            case.modes.iter().map(|&m| (m, strobe_run(&exe, dir, &case, m))).collect();
        // The rate of the case's first recording: samples per CPU-second.
        let rate_hz = strobe
            .iter()
            .find_map(|(_, r)| r.as_ref().ok())
            .map_or(200, |r| (1e9 / r.cycle_ns).round().max(1.0) as u64);
        let perf_result = match &perf {
            Ok(p) => perf_run(p, dir, &case, rate_hz),
            Err(why) => Err(why.clone()),
        };
        let samply_result = match &samply {
            Ok(s) => samply_run(s, dir, &case, rate_hz),
            Err(why) => Err(why.clone()),
        };
        results.push(CaseResult {
            name: case.name.clone(),
            kind: case.kind.clone(),
            plain,
            strobe,
            rate_hz,
            perf: perf_result,
            samply: samply_result,
        });
    }
    let m = Measured {
        quick: opts.quick,
        cases: results,
        load_before,
        load_after: loadavg(),
        seconds: start.elapsed().as_secs_f64(),
    };
    Ok(summarize(&m))
}

// ---- the summary ----

/// One profiler's figure for one row: its share, its run's truth, the error.
fn judged(
    shares: &Shares,
    m: &Measure,
    truth: Option<&Truth>,
    i: usize,
) -> Option<(f64, f64, f64)> {
    let t = *truth?.shares.get(i)?;
    let s = shares.get(m)?;
    Some((s, t, s - t))
}

fn opt(v: Option<f64>) -> Value {
    v.filter(|v| v.is_finite()).map_or(Value::Null, |v| json!(r3(v)))
}

/// A row's error as a profiler's figure (NaN when it could not be measured).
fn abs_err(v: &Value) -> f64 {
    v.as_f64().map_or(f64::NAN, f64::abs)
}

fn summarize(m: &Measured) -> BenchReport {
    let mut rows: Vec<Map<String, Value>> = Vec::new();
    let mut runs: Vec<Value> = Vec::new();
    let mut changed_count = 0u64;
    let mut min_accounted = f64::INFINITY;
    // Above 1 is time counted twice: shown beside the goal, which bounds only the minimum.
    let mut max_accounted = 0.0f64;
    let mut failures: Vec<String> = Vec::new();
    let mut fds = Map::new();
    for c in &m.cases {
        let measures = c.kind.measures();
        let plain_truth = truth(&c.kind, &c.plain).ok();
        let perf_truth = c.perf.as_ref().ok().and_then(|r| truth(&c.kind, &r.out).ok());
        let samply_truth = c.samply.as_ref().ok().and_then(|r| truth(&c.kind, &r.out).ok());
        let mut other_runs = Vec::new();
        for (tool, r, t) in [("perf", &c.perf, &perf_truth), ("samply", &c.samply, &samply_truth)] {
            other_runs.push(match r {
                Ok(r) => json!({
                    "case": c.name, "tool": tool, "rate_hz": c.rate_hz, "samples": r.shares.samples,
                    "seconds": r3(r.out.seconds), "changed": changed(&c.plain, &r.out),
                    "tree_cpu_s": t.as_ref().map(|t| r3(t.tree_ns / 1e9)),
                }),
                Err(why) => json!({"case": c.name, "tool": tool, "skipped": why}),
            });
        }
        if c.kind == Kind::Fds {
            let peak = |t: &Option<Truth>| {
                t.as_ref().and_then(|t| t.peak_fds).map_or(Value::Null, |v| json!(v))
            };
            fds.insert("unprofiled".into(), peak(&plain_truth));
            fds.insert("perf".into(), peak(&perf_truth));
            fds.insert("samply".into(), peak(&samply_truth));
        }
        for (mode, r) in &c.strobe {
            let case = if *mode == Mode::Defaults {
                c.name.clone()
            } else {
                format!("{} (kernel)", c.name)
            };
            let run = match r {
                Err(why) => {
                    failures.push(format!("{case}: {why}"));
                    changed_count += 1;
                    runs.push(
                        json!({"case": case, "tool": "strobe", "mode": mode.name(), "error": why}),
                    );
                    for (label, _) in &measures {
                        let mut row = Map::new();
                        row.insert("case".into(), json!(case));
                        row.insert("function".into(), json!(label));
                        row.insert("failed".into(), json!(why));
                        rows.push(row);
                    }
                    continue;
                }
                Ok(r) => r,
            };
            let t = truth(&c.kind, &run.out);
            let diff = changed(&c.plain, &run.out);
            if diff.is_some() || t.is_err() {
                changed_count += 1;
            }
            let tree = t.as_ref().map(|t| t.tree_ns).unwrap_or(f64::NAN);
            let accounted = run.accounted_ns / tree;
            if accounted.is_finite() {
                min_accounted = min_accounted.min(accounted);
                max_accounted = max_accounted.max(accounted);
            } else {
                min_accounted = f64::NAN;
            }
            if c.kind == Kind::Fds && *mode == Mode::Defaults {
                fds.insert(
                    "strobe".into(),
                    t.as_ref().ok().and_then(|t| t.peak_fds).map_or(Value::Null, |v| json!(v)),
                );
            }
            runs.push(json!({
                "case": case, "tool": "strobe", "mode": mode.name(), "samples": run.shares.samples,
                "rate_hz": r3(1e9 / run.cycle_ns), "seconds": r3(run.out.seconds),
                "accounted": r3(accounted), "sampled": r3(run.sampled_ns / tree),
                "not_sampled_pct": r3(run.not_sampled_pct), "agent_pct": r3(run.agent_pct),
                "tree_cpu_s": r3(tree / 1e9), "changed": diff,
                "truth_error": t.as_ref().err(),
            }));
            let n = run.shares.samples.max(1) as f64;
            for (i, (label, measure)) in measures.iter().enumerate() {
                let own = judged(&run.shares, measure, t.as_ref().ok(), i);
                let perf = c
                    .perf
                    .as_ref()
                    .ok()
                    .and_then(|r| judged(&r.shares, measure, perf_truth.as_ref(), i));
                let samply = c
                    .samply
                    .as_ref()
                    .ok()
                    .and_then(|r| judged(&r.shares, measure, samply_truth.as_ref(), i));
                let truth_v = own.map(|o| o.1);
                let noise = truth_v.map(|p| {
                    let p = (p / 100.0).clamp(0.0, 1.0);
                    100.0 * (p * (1.0 - p) / n).sqrt()
                });
                let mut row = Map::new();
                row.insert("case".into(), json!(case));
                row.insert("function".into(), json!(label));
                row.insert("truth".into(), opt(truth_v));
                row.insert("strobe".into(), opt(own.map(|o| o.0)));
                row.insert("error".into(), opt(own.map(|o| o.2)));
                row.insert("noise".into(), opt(noise));
                row.insert("perf".into(), opt(perf.map(|o| o.0)));
                row.insert("perf_truth".into(), opt(perf.map(|o| o.1)));
                row.insert("perf_error".into(), opt(perf.map(|o| o.2)));
                row.insert("samply".into(), opt(samply.map(|o| o.0)));
                row.insert("samply_truth".into(), opt(samply.map(|o| o.1)));
                row.insert("samply_error".into(), opt(samply.map(|o| o.2)));
                row.insert("samples".into(), json!(run.shares.samples));
                rows.push(row);
            }
        }
        runs.extend(other_runs);
    }
    let max_of = |key: &str| {
        rows.iter().map(|r| r.get(key).map_or(f64::NAN, abs_err)).fold(0.0f64, |m, e| {
            if e.is_nan() || m.is_nan() {
                f64::NAN
            } else {
                m.max(e)
            }
        })
    };
    let max_err = if failures.is_empty() { max_of("error") } else { f64::NAN };
    let others_max = |key: &str| {
        rows.iter()
            .filter_map(|r| r.get(key).and_then(Value::as_f64))
            .fold(None, |m: Option<f64>, e| Some(m.unwrap_or(0.0).max(e.abs())))
    };
    // Rows where perf's or samply's error is above the goal: is strobe's below theirs?
    let (mut contested, mut beaten) = (0u64, 0u64);
    for r in &rows {
        let own = r.get("error").map_or(f64::NAN, abs_err);
        for key in ["perf_error", "samply_error"] {
            let theirs = r.get(key).map_or(f64::NAN, abs_err);
            if theirs > GOAL_SHARE_POINTS {
                contested += 1;
                if own < theirs {
                    beaten += 1;
                }
            }
        }
    }
    if min_accounted.is_infinite() {
        min_accounted = f64::NAN;
    }
    let mut rep = BenchReport::new("coverage");
    let x = &mut rep.extra;
    x.insert("max_share_error_points".into(), opt(Some(max_err)));
    x.insert("min_accounted_fraction".into(), opt(Some(min_accounted)));
    x.insert("max_accounted_fraction".into(), opt(Some(max_accounted)));
    x.insert("programs_changed".into(), json!(changed_count));
    x.insert("perf_max_share_error_points".into(), opt(others_max("perf_error")));
    x.insert("samply_max_share_error_points".into(), opt(others_max("samply_error")));
    x.insert("rows_where_others_miss".into(), json!(contested));
    x.insert("rows_where_strobe_beats_them".into(), json!(beaten));
    x.insert("peak_fds".into(), Value::Object(fds));
    x.insert("runs".into(), json!(runs));
    x.insert("failures".into(), json!(failures));
    x.insert("machine".into(), json!(machine_summary()));
    x.insert("load_before".into(), json!(m.load_before));
    x.insert("load_after".into(), json!(m.load_after));
    x.insert("seconds".into(), json!(r3(m.seconds)));
    x.insert("quick".into(), json!(m.quick));
    rep.text = render(&rows, &runs, &rep.extra);
    rep.rows = rows;
    rep
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

fn cell(v: Option<&Value>, signed: bool) -> String {
    match v.and_then(Value::as_f64) {
        Some(x) if signed => format!("{x:+.1}"),
        Some(x) => format!("{x:.1}"),
        None => "-".into(),
    }
}

fn render(rows: &[Map<String, Value>], runs: &[Value], x: &Map<String, Value>) -> String {
    let mut t = String::new();
    let s = |k: &str| x.get(k).and_then(Value::as_str).unwrap_or("");
    let g = |k: &str| x.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    let _ = writeln!(t, "strobe bench coverage ({})", s("machine"));
    if x.get("quick") == Some(&json!(true)) {
        let _ = writeln!(t, "(--quick: small cases, figures not quotable)");
    }
    let _ = writeln!(
        t,
        "load average before {}, after {}; {:.0} s. Each case runs unprofiled, under strobe \
         record (defaults; --mode kernel where the tests run it), perf record -e task-clock -F RATE \
         (--call-graph dwarf for functions) and samply record -r RATE, RATE = strobe's samples \
         per CPU-second. Shares are percent of the tree's CPU time; each tool's error is \
         against the truth the program measured in the run that tool recorded. noise: one \
         standard deviation of a share from strobe's samples.",
        s("load_before"),
        s("load_after"),
        g("seconds")
    );
    let _ = writeln!(
        t,
        "\n{:<26} {:<22} {:>6} {:>7} {:>6} {:>5} {:>6} {:>6} {:>7} {:>6}",
        "case", "row", "truth", "strobe", "error", "noise", "perf", "error", "samply", "error"
    );
    for r in rows {
        let case = r.get("case").and_then(Value::as_str).unwrap_or("");
        let func = r.get("function").and_then(Value::as_str).unwrap_or("");
        if let Some(why) = r.get("failed").and_then(Value::as_str) {
            let _ = writeln!(t, "{case:<26} {func:<22} strobe failed: {why}");
            continue;
        }
        let _ = writeln!(
            t,
            "{case:<26} {func:<22} {:>6} {:>7} {:>6} {:>5} {:>6} {:>6} {:>7} {:>6}",
            cell(r.get("truth"), false),
            cell(r.get("strobe"), false),
            cell(r.get("error"), true),
            cell(r.get("noise"), false),
            cell(r.get("perf"), false),
            cell(r.get("perf_error"), true),
            cell(r.get("samply"), false),
            cell(r.get("samply_error"), true),
        );
    }
    let _ = writeln!(
        t,
        "\n{:<26} {:<7} {:>8} {:>8} {:>8} {:>9} {:>8} {:>7} {:>7}  program",
        "run", "tool", "samples", "rate/s", "tree s", "accounted", "sampled", "[n.s.]%", "wall s",
    );
    for r in runs {
        let case = r["case"].as_str().unwrap_or("");
        let tool = r["tool"].as_str().unwrap_or("");
        if let Some(why) = r.get("skipped").and_then(Value::as_str) {
            let _ = writeln!(t, "{case:<26} {tool:<7} skipped: {why}");
            continue;
        }
        if let Some(why) = r.get("error").and_then(Value::as_str) {
            let _ = writeln!(t, "{case:<26} {tool:<7} failed: {why}");
            continue;
        }
        let f = |k: &str, d: usize| r[k].as_f64().map_or("-".into(), |v| format!("{v:.d$}"));
        let program = match r["changed"].as_str() {
            Some(why) => format!("CHANGED: {why}"),
            None => "as unprofiled".into(),
        };
        let _ = writeln!(
            t,
            "{case:<26} {tool:<7} {:>8} {:>8} {:>8} {:>9} {:>8} {:>7} {:>7}  {program}",
            r["samples"].as_u64().unwrap_or(0),
            f("rate_hz", 1),
            f("tree_cpu_s", 2),
            f("accounted", 3),
            f("sampled", 3),
            f("not_sampled_pct", 1),
            f("seconds", 1),
        );
    }
    if let Some(fds) = x.get("peak_fds").and_then(Value::as_object).filter(|m| !m.is_empty()) {
        let v =
            |k: &str| fds.get(k).and_then(Value::as_f64).map_or("-".into(), |v| format!("{v:.0}"));
        let _ = writeln!(
            t,
            "\nfds: the program's peak open descriptors: unprofiled {}, under strobe {}, perf {}, samply {}",
            v("unprofiled"),
            v("strobe"),
            v("perf"),
            v("samply")
        );
    }
    for f in x.get("failures").and_then(Value::as_array).into_iter().flatten() {
        let _ = writeln!(t, "strobe failed: {}", f.as_str().unwrap_or(""));
    }
    let contested = g("rows_where_others_miss");
    let beaten = g("rows_where_strobe_beats_them");
    let _ = writeln!(t, "\ngoals:");
    let lines = [
        (
            format!(
                "share error at most {GOAL_SHARE_POINTS} points on every case: {:.2} (perf {}, samply {})",
                g("max_share_error_points"),
                cell(x.get("perf_max_share_error_points"), false),
                cell(x.get("samply_max_share_error_points"), false)
            ),
            g("max_share_error_points") <= GOAL_SHARE_POINTS,
        ),
        (
            format!(
                "accounted at least {GOAL_ACCOUNTED} of the tree's CPU time: {:.3} (the most: {:.3}; \
                 above 1 is time counted twice)",
                g("min_accounted_fraction"),
                g("max_accounted_fraction")
            ),
            g("min_accounted_fraction") >= GOAL_ACCOUNTED,
        ),
        (
            format!("programs changed: {}", g("programs_changed")),
            g("programs_changed") == 0.0,
        ),
        (
            format!(
                "strobe's error below perf's and samply's where theirs is above {GOAL_SHARE_POINTS} points: \
                 {beaten} of {contested}"
            ),
            beaten == contested,
        ),
    ];
    for (text, ok) in lines {
        let _ = writeln!(t, "  {} {text}", verdict(ok));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn out(stdout: &str, code: i32) -> RunOut {
        RunOut {
            status: Some(ExitStatus::from_raw(code << 8)),
            stdout: stdout.as_bytes().to_vec(),
            tree_log: String::new(),
            cc_log: String::new(),
            seconds: 1.0,
        }
    }

    #[test]
    fn perf_report_lines_give_totals_by_symbol_and_shares_by_command() {
        let sym = "# Children      Self  Symbol\n#\n    89.52%    25.85%  [.] worker_spin\n    \
                   64.38%     0.00%  [.] zoo_now (inlined)\n    30.50%    30.50%  [k] _raw_spin_unlock_irqrestore\n\
                   \n    10.48%     2.13%  [.] main_work\n";
        let m = perf_lines(sym).into_iter().collect_max();
        assert_eq!(m["worker_spin"], 89.52);
        assert_eq!(m["zoo_now"], 64.38);
        assert_eq!(m["main_work"], 10.48);
        let comm =
            "# Overhead  Command\n    97.10%  zoo_spin\n     2.50%  sh\n     0.40%  zoo_tree\n";
        let c = perf_lines(comm).into_iter().collect_sum();
        let s = Shares { commands: c, ..Shares::default() };
        assert!((s.get(&Measure::Commands(&["sh", "zoo_tree"])).unwrap() - 2.9).abs() < 1e-9);
        assert_eq!(s.get(&Measure::Function("absent")), Some(0.0));
        let pid = perf_lines("    45.78%    19806:zoo_sigwait\n    10.48%  19804:zoo_sigwait\n");
        assert_eq!(pid[1], ("19804:zoo_sigwait".to_string(), 10.48));
    }

    #[test]
    fn output_is_compared_with_measured_times_and_descriptors_masked() {
        let a = out("failed=0 fd_ns=123 process_ns=456 peak_fds=803\n", 0);
        let b = out("failed=0 fd_ns=999 process_ns=1 peak_fds=900\n", 0);
        assert_eq!(changed(&a, &b), None);
        let c = out("failed=469 fd_ns=999 process_ns=1 peak_fds=1024\n", 1);
        assert_eq!(changed(&a, &c).unwrap(), "exit 1 (unprofiled: exit 0)");
        let d = out("failed=3 fd_ns=999 process_ns=1 peak_fds=1024\n", 0);
        assert_eq!(changed(&a, &d).unwrap(), "output differs");
        // Binary output is compared byte for byte; an unknown status is not compared.
        let mut e = out("", 0);
        e.stdout = vec![0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00, 0xff];
        let mut f = e.clone();
        f.status = None;
        assert_eq!(changed(&e, &f), None);
        f.stdout[6] = 0;
        assert!(changed(&e, &f).is_some());
    }

    #[test]
    fn truths_come_from_the_programs_own_report_and_the_wrappers_logs() {
        let t =
            truth(&Kind::Sigwait, &out("worker_ns=900 main_ns=90 process_ns=1000\n", 0)).unwrap();
        assert_eq!(t.shares, vec![90.0, 9.0]);
        let mut sh = out("spin_ns=300 process_ns=310\nspin_ns=500 process_ns=510\n", 0);
        sh.tree_log = "tree_ns=1000 command=sh\n".into();
        let t = truth(&Kind::Shell, &sh).unwrap();
        assert_eq!((t.shares[0], t.shares[1], t.tree_ns), (80.0, 82.0, 1000.0));
        let mut mk = out("", 0);
        mk.tree_log = "tree_ns=2000 command=make\n".into();
        mk.cc_log = "tree_ns=900 command=gcc\ntree_ns=900 command=gcc\n".into();
        let kind = Kind::Make { src: PathBuf::new(), cc_log: PathBuf::new() };
        assert_eq!(truth(&kind, &mk).unwrap().shares, vec![10.0]);
        assert!(truth(&Kind::Pool, &out("task_ns=1\n", 0)).is_err());
    }

    /// A profile in samply's processed format with its sidecar: two processes, the
    /// launched one (started first) with one thread of 3 samples in `parent_fn`, a forked
    /// one with 1 sample in `child_fn` called from `parent_fn`.
    fn samply_profile() -> (Value, Value) {
        let thread = |pid: &str, start: f64, stacks: Vec<Value>| {
            json!({
                "pid": pid, "processName": "prog", "processStartupTime": start,
                "stringArray": ["0x1010", "0x2010"],
                "funcTable": {"name": [0, 1], "resource": [0, 0]},
                "resourceTable": {"lib": [0]},
                "frameTable": {"address": [0x1010, 0x2010], "func": [0, 1]},
                "stackTable": {"prefix": [null, 0], "frame": [0, 1]},
                "samples": {"stack": stacks, "weight": null},
            })
        };
        let profile = json!({
            "libs": [{"debugName": "prog", "codeId": "abc"}],
            "threads": [
                thread("100", 1.0, vec![json!(0), json!(0), json!(0)]),
                thread("101", 5.0, vec![json!(1)]),
            ],
        });
        let syms = json!({
            "string_table": ["parent_fn", "child_fn"],
            "data": [{"debug_name": "prog", "code_id": "abc", "symbol_table": [
                {"rva": 0x1000, "size": 0x100, "symbol": 0},
                {"rva": 0x2000, "size": 0x100, "symbol": 1},
            ]}],
        });
        (profile, syms)
    }

    #[test]
    fn samply_profiles_are_symbolized_from_the_sidecar_and_counted_per_stack() {
        let (profile, syms) = samply_profile();
        let s = samply_shares(&profile, &syms).unwrap();
        assert_eq!(s.samples, 4);
        assert_eq!(s.functions["parent_fn"], 100.0);
        assert_eq!(s.functions["child_fn"], 25.0);
        assert_eq!(s.commands["prog"], 100.0);
        assert_eq!(s.children, Some(25.0));
    }

    fn case(name: &str, kind: Kind, strobe: Vec<(Mode, Result<StrobeRun, String>)>) -> CaseResult {
        CaseResult {
            name: name.into(),
            kind,
            plain: out("worker_ns=900 main_ns=100 process_ns=1000\n", 0),
            strobe,
            rate_hz: 190,
            perf: Ok(OtherRun {
                out: out("worker_ns=900 main_ns=100 process_ns=1000\n", 0),
                shares: Shares {
                    functions: [("worker_spin".to_string(), 85.0), ("main_work".to_string(), 10.0)]
                        .into(),
                    samples: 100,
                    ..Shares::default()
                },
            }),
            samply: Err("kernel.perf_event_paranoid is 2".into()),
        }
    }

    fn strobe_run(worker: f64, accounted_ns: f64, code: i32) -> StrobeRun {
        StrobeRun {
            out: out("worker_ns=900 main_ns=100 process_ns=1000\n", code),
            shares: Shares {
                functions: [("worker_spin".to_string(), worker), ("main_work".to_string(), 10.0)]
                    .into(),
                samples: 2000,
                ..Shares::default()
            },
            cycle_ns: 5e6,
            accounted_ns,
            sampled_ns: accounted_ns,
            not_sampled_pct: 0.5,
            agent_pct: 0.1,
        }
    }

    #[test]
    fn the_summary_judges_strobe_against_its_own_run_and_beside_the_others() {
        let m = Measured {
            quick: false,
            cases: vec![case(
                "sigwait",
                Kind::Sigwait,
                vec![
                    (Mode::Defaults, Ok(strobe_run(89.0, 995.0, 0))),
                    (Mode::Kernel, Ok(strobe_run(91.5, 990.0, 0))),
                ],
            )],
            load_before: "1.00 2.00 3.00".into(),
            load_after: "1.50 2.00 3.00".into(),
            seconds: 60.0,
        };
        let r = summarize(&m);
        assert_eq!(r.rows.len(), 4);
        assert_eq!(r.rows[0]["case"], "sigwait");
        assert_eq!(r.rows[2]["case"], "sigwait (kernel)");
        assert_eq!(r.rows[0]["truth"], 90.0);
        assert_eq!(r.rows[0]["error"], -1.0);
        assert_eq!(r.rows[0]["perf_error"], -5.0);
        assert_eq!(r.rows[0]["samply"], Value::Null);
        assert_eq!(r.extra["max_share_error_points"], 1.5);
        assert_eq!(r.extra["min_accounted_fraction"], 0.99);
        assert_eq!(r.extra["max_accounted_fraction"], 0.995);
        assert_eq!(r.extra["programs_changed"], 0);
        assert_eq!(r.extra["rows_where_others_miss"], 2);
        assert_eq!(r.extra["rows_where_strobe_beats_them"], 2);
        assert!(r.text.contains("met share error at most 3 points"), "{}", r.text);
        assert!(r.text.contains("samply  skipped: kernel.perf_event_paranoid is 2"), "{}", r.text);
        let v: Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["bench"], "coverage");
    }

    #[test]
    fn a_changed_program_or_a_failed_recording_misses_the_goals() {
        let m = Measured {
            quick: true,
            cases: vec![
                case(
                    "sigwait",
                    Kind::Sigwait,
                    vec![(Mode::Defaults, Ok(strobe_run(89.0, 1000.0, 1)))],
                ),
                case("mainexit", Kind::MainExit, vec![(Mode::Defaults, Err("no file".into()))]),
            ],
            load_before: String::new(),
            load_after: String::new(),
            seconds: 1.0,
        };
        let r = summarize(&m);
        assert_eq!(r.extra["programs_changed"], 2);
        assert_eq!(r.extra["max_share_error_points"], Value::Null);
        assert!(r.text.contains("MISSED programs changed: 2"), "{}", r.text);
        assert!(r.text.contains("MISSED share error"), "{}", r.text);
        assert!(r.text.contains("CHANGED: exit 1 (unprofiled: exit 0)"), "{}", r.text);
        assert!(r.text.contains("strobe failed: no file"), "{}", r.text);
    }

    /// perf's figures come from perf's own report of a real zoo run: the function a
    /// program spends nearly all its time in is found with its share.
    #[test]
    fn perf_reports_a_real_zoo_runs_share() {
        let Ok(perf) = find_perf() else {
            eprintln!("skipped: perf is not installed");
            return;
        };
        let dir = Scratch::new("coverage-test").unwrap();
        let case = Case {
            name: "mainexit".into(),
            kind: Kind::MainExit,
            command: vec![prog("zoo_mainexit"), "2".into(), "300".into()],
            modes: vec![],
            tree_log: None,
        };
        let r = match perf_run(&perf, dir.path(), &case, 1000) {
            Ok(r) => r,
            Err(e) if e.contains("perf_event_paranoid") || e.contains("ermission") => {
                eprintln!("skipped: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let t = truth(&case.kind, &r.out).unwrap();
        let got = r.shares.get(&Measure::Function("worker_spin")).unwrap();
        assert!(r.shares.samples >= 300, "{} samples", r.shares.samples);
        // 600 ms at 1 kHz: about 600 samples, a share near 100% within a few points.
        assert!((got - t.shares[0]).abs() < 5.0, "perf {got:.1}% against {:.1}%", t.shares[0]);
    }
}
