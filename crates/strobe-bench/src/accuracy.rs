//! `strobe bench accuracy`: strobe's numbers against the ground truth the profiled
//! programs measure themselves, in one run.
//!
//! Cases, each through the real `strobe record` and `strobe report`:
//!
//! | case | program | what is compared |
//! |---|---|---|
//! | `workload-windows` | the bundled workload at the default options | each function's time share and window metrics with its own counts around every call |
//! | `workload-short` | the same, fixed-period sampling at the default window's length (short-only) | the same, and each metric with the windows run's (`modes`) |
//! | `own-rates-2t`, `-1t`, `-8t` | `own_rates` (tests/c), the second family: page touching (1-256 pages, anonymous and file), sleeps (5 us-1 ms), pipe calls, computation, mixed code, on 2, 1 and 8 threads, at the default options | each function's faults and switches per ms with its own counts around batches of calls |
//! | `short-threads-1ms`, `short-threads-300us` | `short_threads` (tests/c): 2000 threads of 1 ms, 3000 of 0.3 ms two at a time | the worker's and main's total shares with the CPU time the program measured |
//! | `crash` | `crash_end` (tests/c) ended by exit, SIGKILL, abort() and SIGSEGV after 0.5 s | the samples kept against an exit's |
//! | `coverage` | `own_rates` on two threads, 20 short runs (and the workload, 20) | how often the 95% intervals hold the truth |
//!
//! Every row names its `family` (`workload` or `own_rates`) and carries its case's
//! `correction_pct`: the share of the net window the report took out as the sampler's
//! (the baseline, and the signal's delivery from call tails). A metric's row also carries
//! the report's own check of its windows for the counter the metric rests on
//! (`check_ratio`: the windows' rate over the long periods', `check_flagged`), and the
//! summary gives the worst judged error where the report flagged it and where it did not
//! (`max_error_pct_by_check`).
//!
//! A program's own clocks count the sampler's time where it lands (inside the functions
//! it measures around); strobe's per-ms metrics are per ms of the program's own work. So
//! the truth a metric is compared with is the program's count over its CPU time less the
//! sampler's share of it (the overflows taken times the cost per overflow the agent
//! measured at start, over the process's CPU time); the rows keep the program's raw
//! figure too (`truth_raw`). Metrics are judged (`max_metric_error_pct`) only where the
//! windows hold at least [`MIN_EVENTS`] events at the truth's rate: below that a 10% error
//! is inside the counting noise itself, and the row says so (`judged: false`).
//!
//! Nothing is invented: a case that cannot run fails the benchmark saying why.
//!
//! This module must never be linked into the agent or a target; it drives commands.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Map, Value};
use strobe_format::{Reader, Record, SampleKind};

use crate::drive::{last_line, Scratch};
use crate::report::machine_summary;
use crate::{BenchError, BenchOpts, BenchReport};

/// The goals.
const GOAL_METRIC_PCT: f64 = 10.0;
const GOAL_SHARE_POINTS: f64 = 2.0;
const GOAL_SHORT_POINTS: f64 = 3.0;
const GOAL_CRASH_KEPT: f64 = 0.95;
const GOAL_COVERAGE: f64 = 0.90;

/// Events a metric's windows must hold (at the truth's rate) for its error to be judged
/// against 10%: with fewer, a Poisson count alone strays by more than 10% in one run of
/// twenty (two standard deviations, 2/sqrt(400)).
pub(crate) const MIN_EVENTS: f64 = 400.0;

/// Functions whose truth share is below this are not judged for time shares (their
/// error is a fraction of a point anyway).
const MIN_SHARE_PCT: f64 = 2.0;

/// Short-only at the default window's length: every sample ends one interval and starts
/// the next. (The windows runs take the default options: no `-e`.)
fn short_spec() -> String {
    let us = strobe_perf::spec::DEFAULT_TIME_WINDOW_NS / 1000;
    format!("{{task-clock/period={us}us,window=0/,page-faults,context-switches}}")
}

/// The second family's cases: (case, threads, CPU seconds per thread, functions).
const FAMILY: [(&str, u32, f64, &[&str]); 3] = [
    (
        "own-rates-2t",
        2,
        4.0,
        &[
            "touch_anon_1",
            "touch_anon_16",
            "touch_anon_256",
            "touch_file_16",
            "touch_file_256",
            "mixed",
            "compute",
        ],
    ),
    ("own-rates-1t", 1, 5.0, &["nap_5us", "nap_100us", "pipe_rw", "compute"]),
    (
        "own-rates-8t",
        8,
        1.0,
        &["touch_anon_1", "touch_anon_256", "nap_100us", "nap_1ms", "compute"],
    ),
];
/// The coverage runs of the second family: two threads, one of each kind.
const COVERAGE_FUNCS: &[&str] = &["touch_anon_16", "touch_file_256", "mixed", "nap_5us", "compute"];
/// The short-threads programs' period (the trust tests'): at 500 us each 0.3 ms thread
/// has a 55% chance of a sample, which keeps the worker's share within about a point.
const THREADS_SPEC: &str = "{task-clock/period=500us/,page-faults}";

/// How much to run.
#[derive(Debug, Clone, Copy)]
struct Plan {
    seconds: f64,
    coverage_runs: usize,
    coverage_seconds: f64,
    crash_ms: u32,
    /// The second family's CPU seconds, as a fraction of [`FAMILY`]'s.
    family_scale: f64,
}

impl Plan {
    fn new(opts: &BenchOpts) -> Plan {
        if opts.quick {
            Plan {
                seconds: 0.6,
                coverage_runs: 2,
                coverage_seconds: 0.5,
                crash_ms: 200,
                family_scale: 0.25,
            }
        } else {
            Plan {
                // At the default period a window per 7-10 ms of CPU: 12 s on two threads
                // give the page-faulting function (a fifth of the time) some 500 windows.
                seconds: 12.0,
                coverage_runs: 20,
                coverage_seconds: 3.0,
                crash_ms: 500,
                family_scale: 1.0,
            }
        }
    }
}

/// What a recording's file says beyond its report.
#[derive(Debug, Clone, Copy, Default)]
struct FileFacts {
    /// Overflows the agents handled: time samples and window ends.
    overflows: u64,
    /// The agent's measured cost of one overflow, ns.
    cost_ns: u64,
    /// The process's CPU time at its end, ns.
    cpu_ns: u64,
    /// Time samples.
    samples: u64,
}

impl FileFacts {
    /// The sampler's share of the process's CPU time.
    fn dilution(&self) -> f64 {
        if self.cpu_ns == 0 {
            return 0.0;
        }
        (self.overflows as f64 * self.cost_ns as f64 / self.cpu_ns as f64).clamp(0.0, 0.9)
    }
}

fn read_facts(path: &Path) -> Result<FileFacts, BenchError> {
    let bad = |e: strobe_format::FormatError| BenchError::Other(format!("{e}"));
    let reader = Reader::open(path).map_err(bad)?;
    let mut f = FileFacts::default();
    // A process's CPU time is in the END of each of its streams (the agent's and the
    // kernel floor's): once per process.
    let mut pid_of = std::collections::HashMap::new();
    let mut cpu_of = std::collections::HashMap::new();
    for r in reader {
        match r.map_err(bad)? {
            Record::Process { stream, info } => {
                f.cost_ns = f.cost_ns.max(info.sample_cost_ns);
                pid_of.insert(stream, info.pid);
            }
            Record::End { stream, end } => {
                let pid = pid_of.get(&stream).copied().unwrap_or(u32::MAX);
                let cpu: &mut u64 = cpu_of.entry(pid).or_default();
                *cpu = (*cpu).max(end.cpu_ns.unwrap_or(0));
            }
            Record::Samples(b) => {
                for s in b.iter() {
                    match s.map_err(bad)?.kind {
                        SampleKind::Plain | SampleKind::WindowStart => {
                            f.samples += 1;
                            f.overflows += 1;
                        }
                        SampleKind::WindowEnd => f.overflows += 1,
                        SampleKind::CallTail | SampleKind::Overflow => {}
                    }
                }
            }
            _ => {}
        }
    }
    f.cpu_ns = cpu_of.values().sum();
    Ok(f)
}

/// Runs `exe record -o FILE ARGS -- COMMAND`, returning the command's stdout.
fn record(
    exe: &Path,
    file: &Path,
    args: &[&str],
    command: &[OsString],
    what: &str,
) -> Result<(std::process::ExitStatus, String), BenchError> {
    let _ = std::fs::remove_file(file);
    let out = Command::new(exe)
        .arg("record")
        .arg("-o")
        .arg(file)
        .args(args)
        .arg("--")
        .args(command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|source| BenchError::Io { what: format!("starting {what}"), source })?;
    if !file.exists() {
        return Err(BenchError::Other(format!(
            "{what}: strobe record wrote no file ({}): {}",
            out.status,
            last_line(&out.stderr)
        )));
    }
    Ok((out.status, String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// `strobe report FILE --format json`, parsed.
fn report(exe: &Path, file: &Path) -> Result<Value, BenchError> {
    let out = Command::new(exe)
        .arg("report")
        .arg(file)
        .args(["--format", "json", "--quiet"])
        .stdin(Stdio::null())
        .output()
        .map_err(|source| BenchError::Io { what: "starting strobe report".into(), source })?;
    if !out.status.success() {
        return Err(BenchError::Other(format!(
            "strobe report {}: {}",
            file.display(),
            last_line(&out.stderr)
        )));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| BenchError::Other(format!("strobe report's JSON: {e}")))
}

fn read_json(path: &Path) -> Result<Value, BenchError> {
    let text = std::fs::read(path)
        .map_err(|source| BenchError::Io { what: format!("reading {}", path.display()), source })?;
    serde_json::from_slice(&text)
        .map_err(|e| BenchError::Other(format!("{}: not JSON: {e}", path.display())))
}

/// `key=value` fields of a test program's output line.
fn fields(text: &str) -> Map<String, Value> {
    text.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| v.parse::<f64>().ok().map(|v| (k.to_string(), json!(v))))
        .collect()
}

fn function<'v>(report: &'v Value, name: &str) -> Option<&'v Value> {
    report["functions"].as_array()?.iter().find(|f| f["function"] == name)
}

/// One workload recording: its report, the workload's truth and the file's facts.
struct WorkloadRun {
    report: Value,
    truth: Value,
    facts: FileFacts,
}

fn record_workload(
    exe: &Path,
    dir: &Path,
    spec: Option<&str>,
    seconds: f64,
    tag: &str,
) -> Result<WorkloadRun, BenchError> {
    let file = dir.join(format!("{tag}.strobe"));
    let truth_path = dir.join(format!("{tag}.truth.json"));
    let command: Vec<OsString> = vec![
        exe.into(),
        "workload".into(),
        "--seconds".into(),
        seconds.to_string().into(),
        "--truth".into(),
        truth_path.clone().into(),
    ];
    let args: Vec<&str> = spec.map_or(Vec::new(), |s| vec!["-e", s]);
    let (status, _) = record(exe, &file, &args, &command, &format!("workload ({tag})"))?;
    if !status.success() {
        return Err(BenchError::Other(format!("the workload ({tag}) failed: {status}")));
    }
    Ok(WorkloadRun {
        report: report(exe, &file)?,
        truth: read_json(&truth_path)?,
        facts: read_facts(&file)?,
    })
}

/// The truth's functions: (name, cpu %, truth function object).
fn truth_functions(truth: &Value) -> Vec<(String, f64, Value)> {
    truth["functions"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|f| {
                    (
                        f["function"].as_str().unwrap_or("").to_string(),
                        f["cpu_pct"].as_f64().unwrap_or(0.0),
                        f.clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The metrics compared, as (strobe's inclusive JSON key, the truth's key). Inclusive:
/// the truth is measured around every call, callees included.
const METRICS: [(&str, &str); 2] = [
    ("total_page_faults_per_ms", "page_faults_per_ms"),
    ("total_context_switches_per_ms", "context_switches_per_ms"),
];

/// The report's check of its windows (`window_check`) for the counter a metric rests on:
/// the windows' rate over the long periods', and whether the report flagged it.
fn check_of(report: &Value, metric: &str) -> (Option<f64>, bool) {
    let counter = if metric.contains("fault") { "page-faults" } else { "context-switches" };
    let c = report["window_check"]
        .as_array()
        .and_then(|list| list.iter().find(|c| c["counter"] == counter));
    match c {
        Some(c) => (c["ratio"].as_f64(), c["flagged"] == true),
        None => (None, false),
    }
}

/// Rows of one workload run: time shares and window metrics against the truth.
fn workload_rows(case: &str, run: &WorkloadRun, rows: &mut Vec<Value>) {
    let keep = 1.0 - run.facts.dilution();
    let net_window_ms = run.report["net_window"].as_f64().unwrap_or(0.0) / 1e6;
    let correction = run.report["correction_pct"].as_f64();
    let first = rows.len();
    for (name, cpu_pct, t) in truth_functions(&run.truth) {
        let f = function(&run.report, &name);
        let share = f.and_then(|f| f["time_pct"].as_f64()).unwrap_or(0.0);
        rows.push(json!({
            "case": case, "function": name, "metric": "time_pct", "unit": "points",
            "truth": cpu_pct, "strobe": share,
            "low": f.and_then(|f| f["time_pct_low"].as_f64()),
            "high": f.and_then(|f| f["time_pct_high"].as_f64()),
            "error": share - cpu_pct, "judged": cpu_pct >= MIN_SHARE_PCT,
        }));
        let Some(f) = f else { continue };
        let windows = f["total_windows"].as_u64().unwrap_or(0);
        for (key, truth_key) in METRICS {
            let raw = t[truth_key].as_f64().unwrap_or(0.0);
            let Some(got) = f[key].as_f64() else { continue };
            if raw <= 0.0 || windows == 0 {
                continue;
            }
            let truth = raw / keep.max(0.1);
            let expected = truth * windows as f64 * net_window_ms;
            let (check_ratio, check_flagged) = check_of(&run.report, key);
            rows.push(json!({
                "case": case, "function": name, "metric": key, "unit": "%",
                "truth": truth, "truth_raw": raw, "strobe": got,
                "low": f[format!("{key}_low")].as_f64(), "high": f[format!("{key}_high")].as_f64(),
                "error": 100.0 * (got - truth) / truth, "windows": windows,
                "expected_events": expected, "judged": windows >= 100 && expected >= MIN_EVENTS,
                "check_ratio": check_ratio, "check_flagged": check_flagged,
            }));
        }
    }
    for r in &mut rows[first..] {
        r["family"] = json!("workload");
        r["correction_pct"] = json!(correction);
    }
}

/// One run of the second family: its report, each function's truth line and the file's
/// facts.
struct FamilyRun {
    report: Value,
    truth: Vec<Map<String, Value>>,
    facts: FileFacts,
}

fn record_family(
    exe: &Path,
    dir: &Path,
    tag: &str,
    threads: u32,
    cpu_s: f64,
    funcs: &[&str],
) -> Result<FamilyRun, BenchError> {
    let file = dir.join(format!("{tag}.strobe"));
    let mut command: Vec<OsString> = vec![
        strobe_testprogs::path("own_rates").into(),
        threads.to_string().into(),
        format!("{cpu_s:.2}").into(),
    ];
    command.extend(funcs.iter().map(OsString::from));
    let (status, stdout) = record(exe, &file, &[], &command, &format!("own_rates ({tag})"))?;
    if !status.success() {
        return Err(BenchError::Other(format!("own_rates ({tag}) failed: {status}")));
    }
    let truth: Vec<Map<String, Value>> = stdout
        .lines()
        .filter(|l| l.starts_with("fn="))
        .map(|l| {
            let mut m = fields(l);
            if let Some(name) = l.split_whitespace().next().and_then(|kv| kv.strip_prefix("fn=")) {
                m.insert("fn".into(), json!(name));
            }
            m
        })
        .collect();
    Ok(FamilyRun { report: report(exe, &file)?, truth, facts: read_facts(&file)? })
}

/// Rows of one run of the second family: each function's faults and switches per ms.
fn family_rows(case: &str, run: &FamilyRun, rows: &mut Vec<Value>) {
    let keep = 1.0 - run.facts.dilution();
    let net_window_ms = run.report["net_window"].as_f64().unwrap_or(0.0) / 1e6;
    let correction = run.report["correction_pct"].as_f64();
    for t in &run.truth {
        let name = t.get("fn").and_then(Value::as_str).unwrap_or("");
        let Some(f) = function(&run.report, name) else { continue };
        let windows = f["total_windows"].as_u64().unwrap_or(0);
        for (key, truth_key) in [
            ("total_page_faults_per_ms", "faults_per_ms"),
            ("total_context_switches_per_ms", "switches_per_ms"),
        ] {
            let raw = t.get(truth_key).and_then(Value::as_f64).unwrap_or(0.0);
            let Some(got) = f[key].as_f64() else { continue };
            if raw <= 0.0 || windows == 0 {
                continue;
            }
            let truth = raw / keep.max(0.1);
            let expected = truth * windows as f64 * net_window_ms;
            let (check_ratio, check_flagged) = check_of(&run.report, key);
            rows.push(json!({
                "check_ratio": check_ratio, "check_flagged": check_flagged,
                "family": "own_rates", "case": case, "function": name, "metric": key,
                "unit": "%", "truth": truth, "truth_raw": raw, "strobe": got,
                "low": f[format!("{key}_low")].as_f64(), "high": f[format!("{key}_high")].as_f64(),
                "error": 100.0 * (got - truth) / truth, "windows": windows,
                "expected_events": expected, "judged": windows >= 100 && expected >= MIN_EVENTS,
                "correction_pct": correction,
            }));
        }
    }
}

/// The same metric in both modes: the windows run's value against short-only's.
fn modes_rows(w: &WorkloadRun, s: &WorkloadRun, rows: &mut Vec<Value>) {
    let judged: Vec<(String, String)> = rows
        .iter()
        .filter(|r| r["case"] == "workload-windows" && r["judged"] == true && r["unit"] == "%")
        .filter_map(|r| Some((r["function"].as_str()?.to_string(), r["metric"].as_str()?.into())))
        .collect();
    for (name, key) in judged {
        let (Some(a), Some(b)) = (
            function(&w.report, &name).and_then(|f| f[key.as_str()].as_f64()),
            function(&s.report, &name).and_then(|f| f[key.as_str()].as_f64()),
        ) else {
            continue;
        };
        if a > 0.0 {
            rows.push(json!({
                "case": "modes", "function": name, "metric": key, "unit": "%",
                "truth": a, "strobe": b, "error": 100.0 * (b - a) / a, "judged": true,
            }));
        }
    }
}

fn short_threads(
    exe: &Path,
    dir: &Path,
    case: &str,
    args: &[&str],
    rows: &mut Vec<Value>,
) -> Result<f64, BenchError> {
    let file = dir.join(format!("{case}.strobe"));
    let mut command: Vec<OsString> = vec![strobe_testprogs::path("short_threads").into()];
    command.extend(args.iter().map(OsString::from));
    let (status, stdout) = record(exe, &file, &["-e", THREADS_SPEC], &command, case)?;
    if !status.success() {
        return Err(BenchError::Other(format!("short_threads ({case}) failed: {status}")));
    }
    let truth = fields(&stdout);
    let r = report(exe, &file)?;
    let process = truth.get("process_ns").and_then(Value::as_f64).unwrap_or(0.0);
    let mut worst = 0.0f64;
    for (func, key) in [("short_worker", "worker_ns"), ("main_work", "main_ns")] {
        let want = 100.0 * truth.get(key).and_then(Value::as_f64).unwrap_or(0.0) / process.max(1.0);
        let f = function(&r, func);
        let got = f.and_then(|f| f["total_pct"].as_f64()).unwrap_or(0.0);
        worst = worst.max((got - want).abs());
        rows.push(json!({
            "case": case, "function": func, "metric": "total_pct", "unit": "points",
            "truth": want, "strobe": got, "error": got - want, "judged": true,
        }));
    }
    Ok(worst)
}

/// Samples kept by a program ended each way, against an exit's; returns the least kept
/// fraction of the abnormal ends.
fn crash(exe: &Path, dir: &Path, ms: u32, rows: &mut Vec<Value>) -> Result<f64, BenchError> {
    let spec = "{task-clock/period=1ms,jitter=0,window=0/}";
    let mut kept = Vec::new();
    for how in ["exit", "kill", "abort", "segv"] {
        let file = dir.join(format!("crash-{how}.strobe"));
        let command: Vec<OsString> =
            vec![strobe_testprogs::path("crash_end").into(), how.into(), ms.to_string().into()];
        record(exe, &file, &["-e", spec], &command, &format!("crash_end {how}"))?;
        kept.push((how, read_facts(&file)?.samples));
    }
    let normal = kept.first().map_or(0, |k| k.1).max(1) as f64;
    let mut least = f64::INFINITY;
    for &(how, n) in &kept {
        let frac = n as f64 / normal;
        if how != "exit" {
            least = least.min(frac);
        }
        rows.push(json!({
            "case": "crash", "function": how, "metric": "kept_fraction", "unit": "fraction",
            "truth": normal, "strobe": n, "error": frac - 1.0, "judged": how != "exit",
        }));
    }
    Ok(least)
}

/// Whether each judged quantity's interval holds its truth, over the runs' rows.
fn coverage(runs: &[Vec<Value>]) -> (u64, u64) {
    let (mut inside, mut total) = (0, 0);
    for rows in runs {
        for r in rows.iter().filter(|r| r["judged"] == true) {
            let (Some(lo), Some(hi), Some(t)) =
                (r["low"].as_f64(), r["high"].as_f64(), r["truth"].as_f64())
            else {
                continue;
            };
            total += 1;
            if lo <= t && t <= hi {
                inside += 1;
            }
        }
    }
    (inside, total)
}

/// Runs every case of the `accuracy` benchmark.
pub(crate) fn run(opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    let exe: PathBuf = opts.strobe_exe.clone().ok_or_else(|| {
        BenchError::Other(
            "the accuracy benchmark drives the strobe executable; run it as `strobe bench \
             accuracy`"
                .into(),
        )
    })?;
    let plan = Plan::new(opts);
    let scratch = Scratch::new("accuracy")?;
    let dir = scratch.path();
    let mut rows = Vec::new();

    eprintln!("strobe bench accuracy: the workload, windows (default options) and short-only");
    let windows = record_workload(&exe, dir, None, plan.seconds, "windows")?;
    workload_rows("workload-windows", &windows, &mut rows);
    // Short-only samples at the default window's length: a third of the time is enough.
    let short = record_workload(&exe, dir, Some(&short_spec()), plan.seconds / 3.0, "short")?;
    workload_rows("workload-short", &short, &mut rows);
    modes_rows(&windows, &short, &mut rows);

    eprintln!("strobe bench accuracy: the second family (own_rates), default options");
    for (case, threads, cpu_s, funcs) in FAMILY {
        let run = record_family(&exe, dir, case, threads, cpu_s * plan.family_scale, funcs)?;
        family_rows(case, &run, &mut rows);
    }

    eprintln!("strobe bench accuracy: short threads");
    let (n1, n3) = if opts.quick { ("400", "600") } else { ("2000", "3000") };
    let s1 = short_threads(&exe, dir, "short-threads-1ms", &[n1, "1000", "1", "400"], &mut rows)?;
    let s3 = short_threads(&exe, dir, "short-threads-300us", &[n3, "300", "2", "200"], &mut rows)?;

    eprintln!("strobe bench accuracy: ends of the target");
    let kept = crash(&exe, dir, plan.crash_ms, &mut rows)?;

    eprintln!(
        "strobe bench accuracy: {} runs of each family for interval coverage",
        plan.coverage_runs
    );
    let (mut fam_runs, mut wl_runs) = (Vec::new(), Vec::new());
    for i in 0..plan.coverage_runs {
        let tag = format!("cf{i}");
        let run = record_family(&exe, dir, &tag, 2, plan.coverage_seconds, COVERAGE_FUNCS)?;
        let mut r = Vec::new();
        family_rows("coverage", &run, &mut r);
        fam_runs.push(r);
        let run = record_workload(&exe, dir, None, plan.coverage_seconds, &format!("cw{i}"))?;
        let mut r = Vec::new();
        workload_rows("coverage", &run, &mut r);
        wl_runs.push(r);
    }
    let (inside, total) = coverage(&fam_runs);
    let only = |needle: &str| -> Vec<Vec<Value>> {
        fam_runs
            .iter()
            .map(|rows| {
                rows.iter()
                    .filter(|r| r["metric"].as_str().is_some_and(|m| m.contains(needle)))
                    .cloned()
                    .collect()
            })
            .collect()
    };
    let (faults_in, faults_total) = coverage(&only("fault"));
    let (switch_in, switch_total) = coverage(&only("switch"));
    let (wl_inside, wl_total) = coverage(&wl_runs);
    let coverage = if total > 0 { inside as f64 / total as f64 } else { 0.0 };

    let judged = |case: &str, unit: &str| {
        rows.iter()
            .filter(|r| r["judged"] == true && r["unit"] == unit)
            .filter(|r| r["case"].as_str().is_some_and(|c| c.starts_with(case)))
            .filter_map(|r| r["error"].as_f64())
            .fold(0.0f64, |m, e| m.max(e.abs()))
    };
    let max_metric = judged("workload", "%").max(judged("own-rates", "%"));
    let max_own = judged("own-rates", "%");
    let max_modes = judged("modes", "%");
    let max_share = judged("workload", "points");
    let short_pts = s1.max(s3);

    let mut rep = BenchReport::new("accuracy");
    rep.extra.insert("max_metric_error_pct".into(), json!(max_metric));
    rep.extra.insert("own_rates_max_error_pct".into(), json!(max_own));
    rep.extra.insert("workload_coverage".into(), json!(wl_inside as f64 / wl_total.max(1) as f64));
    rep.extra.insert("workload_coverage_checks".into(), json!(wl_total));
    let corrections: Vec<Value> = rows
        .iter()
        .filter_map(|r| Some((r["case"].as_str()?.to_string(), r["correction_pct"].as_f64()?)))
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_iter()
        .map(|(case, pct)| json!({"case": case, "correction_pct": pct}))
        .collect();
    rep.extra.insert("correction_pct".into(), json!(corrections));
    // The report's own check per case and counter, and the judged metrics it flagged.
    let checks: Vec<Value> = rows
        .iter()
        .filter_map(|r| {
            let counter =
                if r["metric"].as_str()?.contains("fault") { "faults" } else { "switches" };
            Some(((r["case"].as_str()?.to_string(), counter), r["check_ratio"].as_f64()?))
        })
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_iter()
        .map(|((case, counter), ratio)| json!({"case": case, "counter": counter, "ratio": ratio}))
        .collect();
    rep.extra.insert("window_check".into(), json!(checks));
    let flagged = |want: bool| {
        rows.iter()
            .filter(|r| r["judged"] == true && r["unit"] == "%" && r["check_flagged"] == want)
            .filter_map(|r| r["error"].as_f64())
            .fold(0.0f64, |m, e| m.max(e.abs()))
    };
    rep.extra.insert(
        "max_error_pct_by_check".into(),
        json!({"flagged": flagged(true), "not_flagged": flagged(false)}),
    );
    rep.extra.insert("modes_max_difference_pct".into(), json!(max_modes));
    rep.extra.insert("max_share_error_points".into(), json!(max_share));
    rep.extra.insert("short_threads_error_points".into(), json!(short_pts));
    rep.extra.insert("crash_kept_fraction".into(), json!(kept));
    rep.extra.insert("interval_coverage".into(), json!(coverage));
    rep.extra.insert("interval_checks".into(), json!(total));
    rep.extra.insert("coverage_runs".into(), json!(plan.coverage_runs));
    rep.extra
        .insert("coverage_faults".into(), json!({"inside": faults_in, "checks": faults_total}));
    rep.extra
        .insert("coverage_switches".into(), json!({"inside": switch_in, "checks": switch_total}));
    rep.extra.insert("sampler_share_windows".into(), json!(windows.facts.dilution()));
    rep.extra.insert("sampler_share_short".into(), json!(short.facts.dilution()));
    rep.extra.insert("machine".into(), json!(machine_summary()));
    rep.text = render(&rows, &rep.extra, opts.quick);
    rep.rows = rows.into_iter().filter_map(|r| r.as_object().cloned()).collect();
    Ok(rep)
}

fn goal(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}

fn render(rows: &[Value], extra: &Map<String, Value>, quick: bool) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "strobe bench accuracy ({})", machine_summary());
    if quick {
        let _ = writeln!(t, "(--quick: short runs, figures not quotable)");
    }
    let _ = writeln!(
        t,
        "\n{:<20} {:<24} {:<32} {:>10} {:>10} {:>21} {:>8}",
        "case", "function", "metric", "truth", "strobe", "95% interval", "error"
    );
    for r in rows {
        let num = |k: &str| r[k].as_f64();
        let interval = match (num("low"), num("high")) {
            (Some(l), Some(h)) => format!("[{l:.2}, {h:.2}]"),
            _ => String::new(),
        };
        let unit = r["unit"].as_str().unwrap_or("");
        let err = num("error").map_or(String::new(), |e| match unit {
            "%" => format!("{e:+.1}%"),
            "points" => format!("{e:+.2} pt"),
            _ => format!("{e:+.3}"),
        });
        let mark = if r["judged"] == true { "" } else { "  (not judged)" };
        let _ = writeln!(
            t,
            "{:<20} {:<24} {:<32} {:>10.2} {:>10.2} {:>21} {:>8}{mark}",
            r["case"].as_str().unwrap_or(""),
            r["function"].as_str().unwrap_or(""),
            r["metric"].as_str().unwrap_or(""),
            num("truth").unwrap_or(0.0),
            num("strobe").unwrap_or(0.0),
            interval,
            err
        );
    }
    let g = |k: &str| extra.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    let _ = writeln!(t, "\ngoals:");
    let lines = [
        (
            format!(
                "window metric error, both families (metrics with >= {MIN_EVENTS} events in windows) {:.1}% (goal <= {GOAL_METRIC_PCT}%)",
                g("max_metric_error_pct")
            ),
            g("max_metric_error_pct") <= GOAL_METRIC_PCT,
        ),
        (
            format!(
                "windows vs short-only {:.1}% (goal <= {GOAL_METRIC_PCT}%)",
                g("modes_max_difference_pct")
            ),
            g("modes_max_difference_pct") <= GOAL_METRIC_PCT,
        ),
        (
            format!(
                "time share error {:.2} points (goal <= {GOAL_SHARE_POINTS})",
                g("max_share_error_points")
            ),
            g("max_share_error_points") <= GOAL_SHARE_POINTS,
        ),
        (
            format!(
                "short threads {:.2} points (goal <= {GOAL_SHORT_POINTS})",
                g("short_threads_error_points")
            ),
            g("short_threads_error_points") <= GOAL_SHORT_POINTS,
        ),
        (
            format!(
                "samples kept by a crash {:.3} of an exit's (goal >= {GOAL_CRASH_KEPT})",
                g("crash_kept_fraction")
            ),
            g("crash_kept_fraction") >= GOAL_CRASH_KEPT,
        ),
        (
            format!(
                "interval coverage (own_rates, {} runs) {:.3} over {} checks (goal >= {GOAL_COVERAGE})",
                g("coverage_runs"),
                g("interval_coverage"),
                g("interval_checks")
            ),
            g("interval_coverage") >= GOAL_COVERAGE,
        ),
        (
            format!(
                "interval coverage (workload) {:.3} over {} checks (goal >= {GOAL_COVERAGE})",
                g("workload_coverage"),
                g("workload_coverage_checks")
            ),
            g("workload_coverage") >= GOAL_COVERAGE,
        ),
    ];
    for (text, ok) in lines {
        let _ = writeln!(t, "  {text}: {}", goal(ok));
    }
    let _ = writeln!(t, "  of which own_rates alone: {:.1}%", g("own_rates_max_error_pct"));
    for (what, key) in
        [("faults per ms", "coverage_faults"), ("switches per ms", "coverage_switches")]
    {
        if let Some(c) = extra.get(key) {
            let _ = writeln!(
                t,
                "  own_rates coverage of {what}: {} of {}",
                c["inside"].as_u64().unwrap_or(0),
                c["checks"].as_u64().unwrap_or(0)
            );
        }
    }
    if let Some(list) = extra.get("correction_pct").and_then(Value::as_array) {
        let _ = writeln!(
            t,
            "\ncorrection (share of the net window the report took out as the sampler's):"
        );
        for c in list {
            let _ = writeln!(
                t,
                "  {:<20} {:.1}%",
                c["case"].as_str().unwrap_or(""),
                c["correction_pct"].as_f64().unwrap_or(f64::NAN)
            );
        }
    }
    if let Some(list) = extra.get("window_check").and_then(Value::as_array) {
        let _ = writeln!(
            t,
            "\nwindow check (the report's: windows' rate over the long periods' between them):"
        );
        for c in list {
            let _ = writeln!(
                t,
                "  {:<20} {:<9} {:.2}x",
                c["case"].as_str().unwrap_or(""),
                c["counter"].as_str().unwrap_or(""),
                c["ratio"].as_f64().unwrap_or(f64::NAN)
            );
        }
        if let Some(by) = extra.get("max_error_pct_by_check") {
            let _ = writeln!(
                t,
                "  worst judged metric where the report flagged its counter {:.1}%, elsewhere \
                 {:.1}%",
                by["flagged"].as_f64().unwrap_or(0.0),
                by["not_flagged"].as_f64().unwrap_or(0.0)
            );
        }
    }
    let _ = writeln!(
        t,
        "\ntruth: each program's own count over its CPU time less the sampler's share \
         ({:.1}% with windows, {:.1}% short-only: overflows x the agent's measured cost)",
        100.0 * g("sampler_share_windows"),
        100.0 * g("sampler_share_short")
    );
    t
}
