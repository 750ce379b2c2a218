//! `strobe bench sampling`: what alternating sample windows cost and save, measured on
//! the bundled workload through the real `strobe record` and `strobe report`.
//!
//! Variants, side by side in one run (seeds 004 and 003):
//!
//! | variant | `strobe record` arguments |
//! |---|---|
//! | `windows` | none: the defaults (alternating windows, the overhead budget's period, a large wakeup threshold) |
//! | `windows-wakeup1` | `--wakeup 1`: the writer woken for every sample |
//! | `short-only` | the same events sampled at the window length only (`period=W,window=0`), as a profiler without alternation must to see windows that short |
//! | `windows-4x` | the defaults' events at a quarter of the default period: four times the samples, so their cost stands well above the noise |
//!
//! and, beside them, the workload without profiling (the baseline) and, when `perf` is
//! installed, `perf record -e task-clock` at the samples per CPU-second strobe's
//! `windows` run took.
//!
//! Slowdown is measured on fixed work (`strobe workload --rounds N`): the extra process
//! CPU time (which includes the agent's handler on every thread and its writer thread).
//! The host's speed drifts by tens of percent over minutes, so `windows` and `windows-4x`
//! are measured in *pairs*: every repeat runs the bare workload, `windows` and
//! `windows-4x` back to back, then the same three in reverse order, and each run is
//! compared with the bare run of its own triple. The slowdown quoted is the median of
//! those paired slowdowns, with a distribution-free 95% interval for the median; the
//! goal is called met only when the whole interval is under it, missed only when the
//! whole interval is over it, and undecided otherwise. The other variants are compared
//! with the median bare run. The wall-clock slowdown is shown beside it.
//! The agent's one-time start-up in the target is measured on a one-round run and taken
//! out for the steady-state slowdown, which the goal is judged on; the total is shown
//! too. The agent's cost calibration is not in it: `strobe record` runs it before the
//! target starts, in a process of its own (15-25 ms of CPU the target does not pay).
//! Bytes, writer wakeups (the file's END chunk), the agent's per-sample cost and the
//! floor it measured in the same run (the PROCESS chunk) are read from the record file;
//! The `windows` row also gives `effective_cost_us` (the steady-state extra CPU over the
//! samples taken: what one sample really cost the workload) beside `charged_cost_us` (what
//! the agent's budget model charged, recovered from its predicted overhead and period), so
//! the model's allowance for costs its calibration cannot see can be checked.
//! The handler's system calls are also timed one at a time in the bench's own thread
//! (`handler_calls`): what a window cycle's calls cost with every timer the CPU's next
//! one (the calibration's conditions) and with the long period's timer beyond the tick
//! (the target's), against the floor's one read, so the per-sample cost's distance from
//! the floor is split into calls and the rest.
//! `report_s` times `strobe report FILE --format json`. Report throughput is measured on
//! a large synthetic recording written through strobe-format's encoder (crate
//! strobe-report's `throughput::measure_file`), so it is not limited by a short run.
//!
//! Nothing is invented: if `strobe record` cannot run, the benchmark fails saying so.
//!
//! This module must never be linked into the agent or a target; it drives commands.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::{json, Map, Value};
use strobe_format::{ProcessOrigin, Reader, Record};

use crate::drive::{find_perf, last_line, med, r3, run_quiet, Scratch};
use crate::handler_calls::{self, HandlerCalls};
use crate::report::{machine_summary, row};
use crate::stats::{median, median_interval};
use crate::{BenchError, BenchOpts, BenchReport};

/// Worker threads of the workload: as many as this VM has CPUs.
const THREADS: usize = 2;

/// The issues' goals on the 2-vCPU VM (the cost goal is the trust issue's: the custody
/// path must bring a sample to at most 1.5x the floor; it was 2x before).
const GOAL_SLOWDOWN_PCT: f64 = 2.0;
const GOAL_COST_OVER_FLOOR: f64 = 1.5;
const GOAL_BYTES_RATIO: f64 = 25.0;
const GOAL_REPORT_SAMPLES_PER_S: f64 = 5e6;

/// How much to run.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Plan {
    /// Rounds of the workload per thread (each about 6 ms of CPU).
    rounds: u64,
    /// Repeats of every variant; medians are reported.
    repeats: usize,
    /// Samples in the synthetic recording for report throughput.
    synthetic_samples: u64,
    quick: bool,
}

impl Plan {
    fn new(opts: &BenchOpts) -> Plan {
        if opts.quick {
            Plan { rounds: 25, repeats: 1, synthetic_samples: 300_000, quick: true }
        } else {
            Plan {
                rounds: 300,
                repeats: opts.repeats.max(1),
                synthetic_samples: 2_000_000,
                quick: false,
            }
        }
    }
}

/// A workload run's own measurements (from its ground-truth file).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Run {
    cpu_s: f64,
    wall_s: f64,
}

/// What one `strobe record` run produced.
#[derive(Debug, Clone, PartialEq)]
struct Recorded {
    run: Run,
    bytes: u64,
    samples: u64,
    lost: u64,
    wakeups: u64,
    /// Seconds from the agent's start to its END chunk.
    span_s: f64,
    period_ns: u64,
    window_ns: u64,
    sample_cost_ns: u64,
    floor_cost_ns: u64,
    /// What the agent's budget model charged per sample (the calibrated cost plus what
    /// it adds for costs the calibration cannot see), recovered from its predicted
    /// overhead and period; 0 when the leader counts events rather than time.
    charged_cost_ns: u64,
    events: Vec<String>,
    report_s: f64,
}

/// `perf record` beside strobe, or why it was skipped.
#[derive(Debug, Clone, PartialEq)]
enum PerfResult {
    Ran { period_ns: u64, runs: Vec<(Run, u64, u64)> },
    Skipped(String),
}

/// Everything measured, before it is summarized.
#[derive(Debug, Clone, PartialEq)]
struct Measured {
    plan: Plan,
    /// The workload alone. `baseline[i]`, `windows[i]` and `amplified[i]` ran back to
    /// back: they are pair `i`.
    baseline: Vec<Run>,
    /// One round of the workload alone and under `strobe record` (defaults): the
    /// difference is the agent's one-time start-up cost in the target.
    startup_baseline: Vec<Run>,
    startup_recorded: Vec<Run>,
    windows: Vec<Recorded>,
    /// `windows-4x`: the default events at a quarter of the first `windows` run's period.
    amplified: Vec<Recorded>,
    wakeup1: Vec<Recorded>,
    short: Vec<Recorded>,
    perf: PerfResult,
    /// Report throughput on the synthetic recording: samples, seconds, file bytes.
    synthetic: Vec<(u64, f64, u64)>,
    /// The handler's system calls, one at a time, or why they could not be measured.
    calls: Result<HandlerCalls, String>,
}

/// Runs every variant of the `sampling` benchmark side by side.
pub(crate) fn run(opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    let exe = opts.strobe_exe.clone().ok_or_else(|| {
        BenchError::Other(
            "the sampling benchmark drives the strobe executable; run it as `strobe bench sampling`"
                .into(),
        )
    })?;
    let plan = Plan::new(opts);
    let dir = Scratch::new("sampling")?;
    probe_record(&exe, dir.path())?;
    let mut perf = find_perf();

    let mut m = Measured {
        plan,
        baseline: Vec::new(),
        startup_baseline: Vec::new(),
        startup_recorded: Vec::new(),
        windows: Vec::new(),
        amplified: Vec::new(),
        wakeup1: Vec::new(),
        short: Vec::new(),
        perf: PerfResult::Skipped(String::new()),
        synthetic: Vec::new(),
        calls: Err(String::new()),
    };
    let mut perf_runs = Vec::new();
    let mut perf_period = None;
    for rep in 0..plan.repeats {
        eprintln!("strobe bench sampling: repeat {} of {}", rep + 1, plan.repeats);
        // Two pairs (module note): bare, windows, windows-4x, then the reverse order.
        m.baseline.push(run_workload(&exe, dir.path(), &plan)?);
        let w = record(&exe, dir.path(), &plan, "windows", &[])?;
        let amplified = amplified_spec(m.windows.first().unwrap_or(&w))?;
        m.windows.push(w);
        for _ in 0..2 {
            m.amplified.push(record(&exe, dir.path(), &plan, "windows-4x", &["-e", &amplified])?);
        }
        m.windows.push(record(&exe, dir.path(), &plan, "windows", &[])?);
        m.baseline.push(run_workload(&exe, dir.path(), &plan)?);
        let one = Plan { rounds: 1, ..plan };
        m.startup_baseline.push(run_workload(&exe, dir.path(), &one)?);
        m.startup_recorded.push(record(&exe, dir.path(), &one, "startup", &[])?.run);
        m.wakeup1.push(record(&exe, dir.path(), &plan, "windows-wakeup1", &["--wakeup", "1"])?);
        let spec = short_only_spec(&m.windows[0])?;
        m.short.push(record(&exe, dir.path(), &plan, "short-only", &["-e", &spec])?);
        if let Ok(perf_exe) = &perf {
            // The samples per CPU-second strobe's first windows run took.
            let period = *perf_period.get_or_insert_with(|| {
                let w = &m.windows[0];
                let rate = w.samples as f64 / w.run.cpu_s.max(1e-9);
                (1e9 / rate.max(1.0)) as u64
            });
            // perf is the comparison, not the subject: if it cannot run here (a
            // stricter perf_event_paranoid, say), say why and go on without it.
            match perf_record(perf_exe, &exe, dir.path(), &plan, period) {
                Ok(r) => perf_runs.push(r),
                Err(e) => perf = Err(format!("perf record failed: {e}")),
            }
        }
    }
    m.calls = handler_calls::measure();
    m.perf = match (perf, perf_period) {
        (Ok(_), Some(period_ns)) if !perf_runs.is_empty() => {
            PerfResult::Ran { period_ns, runs: perf_runs }
        }
        (Ok(_), _) => PerfResult::Skipped("no strobe sample rate to match".into()),
        (Err(why), _) => PerfResult::Skipped(why),
    };
    for _ in 0..plan.repeats {
        let (t, bytes) =
            strobe_report::throughput::measure_file(plan.synthetic_samples, dir.path())
                .map_err(|e| BenchError::Other(format!("report throughput: {e}")))?;
        m.synthetic.push((t.samples, t.seconds, bytes));
    }
    Ok(summarize(&m))
}

fn workload_args(exe: &Path, plan: &Plan, truth: &Path) -> Vec<OsString> {
    vec![
        exe.into(),
        "workload".into(),
        "--rounds".into(),
        plan.rounds.to_string().into(),
        "--threads".into(),
        THREADS.to_string().into(),
        "--truth".into(),
        truth.into(),
    ]
}

/// Fails with [`BenchError::Unsupported`] unless `strobe record` can record a tiny run.
fn probe_record(exe: &Path, dir: &Path) -> Result<(), BenchError> {
    let file = dir.join("probe.strobe");
    let truth = dir.join("probe.truth.json");
    let plan = Plan { rounds: 1, repeats: 1, synthetic_samples: 0, quick: true };
    let out = Command::new(exe)
        .arg("record")
        .arg("-o")
        .arg(&file)
        .arg("--")
        .args(workload_args(exe, &plan, &truth))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|source| BenchError::Io { what: format!("starting {}", exe.display()), source })?;
    let readable = out.status.success() && Reader::open(&file).is_ok();
    if !readable {
        return Err(BenchError::Unsupported(format!(
            "strobe record is unavailable, so there is nothing to measure ({}: {}); \
             the sampling benchmark needs a working `strobe record`",
            out.status,
            last_line(&out.stderr)
        )));
    }
    Ok(())
}

fn read_truth(path: &Path) -> Result<Run, BenchError> {
    let text = std::fs::read(path)
        .map_err(|source| BenchError::Io { what: format!("reading {}", path.display()), source })?;
    let v: Value = serde_json::from_slice(&text).map_err(|e| {
        BenchError::Other(format!("{}: not the workload's truth: {e}", path.display()))
    })?;
    let cpu_ns = v["process_cpu_ns"].as_u64();
    let wall_s = v["seconds"].as_f64();
    match (cpu_ns, wall_s) {
        (Some(c), Some(w)) => Ok(Run { cpu_s: c as f64 / 1e9, wall_s: w }),
        _ => Err(BenchError::Other(format!(
            "{}: the workload's truth lacks process_cpu_ns or seconds",
            path.display()
        ))),
    }
}

/// The workload alone.
fn run_workload(exe: &Path, dir: &Path, plan: &Plan) -> Result<Run, BenchError> {
    let truth = dir.join("baseline.truth.json");
    let args = workload_args(exe, plan, &truth);
    run_quiet(Command::new(&args[0]).args(&args[1..]), "the workload")?;
    read_truth(&truth)
}

/// The workload under `strobe record EXTRA`, then `strobe report` of its file.
fn record(
    exe: &Path,
    dir: &Path,
    plan: &Plan,
    variant: &str,
    extra: &[&str],
) -> Result<Recorded, BenchError> {
    let file = dir.join(format!("{variant}.strobe"));
    let truth = dir.join(format!("{variant}.truth.json"));
    let _ = std::fs::remove_file(&file);
    run_quiet(
        Command::new(exe)
            .arg("record")
            .arg("-o")
            .arg(&file)
            .args(extra)
            .arg("--")
            .args(workload_args(exe, plan, &truth)),
        &format!("strobe record ({variant})"),
    )?;
    let run = read_truth(&truth)?;
    let mut r = read_recording(&file, run)?;
    let t0 = Instant::now();
    run_quiet(
        Command::new(exe).arg("report").arg(&file).args(["--format", "json"]),
        &format!("strobe report ({variant})"),
    )?;
    r.report_s = t0.elapsed().as_secs_f64();
    Ok(r)
}

/// Reads the figures of a record file without keeping its samples.
fn read_recording(path: &Path, run: Run) -> Result<Recorded, BenchError> {
    let bad = |e: strobe_format::FormatError| BenchError::Other(format!("{e}"));
    let bytes = std::fs::metadata(path)
        .map_err(|source| BenchError::Io { what: format!("reading {}", path.display()), source })?
        .len();
    let mut reader = Reader::open(path).map_err(bad)?;
    let events: Vec<String> = reader.header().events.iter().map(|e| e.name.clone()).collect();
    let leader_is_time = reader.header().events.first().is_some_and(|e| e.is_time);
    let mut r = Recorded {
        run,
        bytes,
        samples: 0,
        lost: 0,
        wakeups: 0,
        span_s: 0.0,
        period_ns: 0,
        window_ns: 0,
        sample_cost_ns: 0,
        floor_cost_ns: 0,
        charged_cost_ns: 0,
        events,
        report_s: 0.0,
    };
    let (mut start, mut end) = (None::<u64>, None::<u64>);
    let mut launched = false;
    let mut ends: Vec<(u32, strobe_format::ProcessEnd)> = Vec::new();
    for rec in reader.by_ref() {
        match rec.map_err(bad)? {
            Record::Process { info, .. } => {
                if !launched {
                    launched = info.origin == ProcessOrigin::Start;
                    r.period_ns = info.period;
                    r.window_ns = info.window;
                    r.sample_cost_ns = info.sample_cost_ns;
                    r.floor_cost_ns = info.floor_cost_ns;
                    if leader_is_time {
                        // predicted = samples per cycle * charged / mean cycle.
                        let cycle_ns =
                            info.period as f64 + info.jitter as f64 / 2.0 + info.window as f64;
                        let per_cycle = if info.window > 0 { 2.0 } else { 1.0 };
                        r.charged_cost_ns = (info.predicted_overhead_ppm as f64 / 1e6 * cycle_ns
                            / per_cycle)
                            .round() as u64;
                    }
                }
                start = Some(start.map_or(info.start_mono_ns, |s| s.min(info.start_mono_ns)));
            }
            Record::Samples(b) => r.samples += u64::from(b.count),
            Record::End { stream, end: e } => {
                // A later END of the same stream replaces an earlier one.
                match ends.iter_mut().find(|(s, _)| *s == stream) {
                    Some((_, prev)) => *prev = e,
                    None => ends.push((stream, e)),
                }
                end = Some(end.map_or(e.time_mono_ns, |t| t.max(e.time_mono_ns)));
            }
            Record::Truncated { offset } => {
                return Err(BenchError::Other(format!(
                    "{} is cut short at byte {offset}: strobe record did not finish its file",
                    path.display()
                )))
            }
            _ => {}
        }
    }
    // Every END carries the whole recording's wakeup count.
    r.wakeups = ends.iter().map(|(_, e)| e.wakeups).max().unwrap_or(0);
    r.lost = ends.iter().map(|(_, e)| e.lost).sum();
    match (start, end) {
        (Some(s), Some(e)) if e > s => r.span_s = (e - s) as f64 / 1e9,
        _ => {
            return Err(BenchError::Other(format!(
                "{} has no PROCESS and END chunks to time the recording by",
                path.display()
            )))
        }
    }
    Ok(r)
}

/// The windows run's events sampled at its window length only, no alternation:
/// `{task-clock/period=W,window=0/,page-faults,...}`.
fn short_only_spec(windows: &Recorded) -> Result<String, BenchError> {
    if windows.window_ns == 0 {
        return Err(BenchError::Other(
            "the windows recording did not alternate (window 0); nothing to compare".into(),
        ));
    }
    same_events_spec(windows, windows.window_ns, 0)
}

/// The windows run's event group with the leader's `period` and `window` replaced:
/// `{LEADER/period=P,window=W/,MEMBER,...}`.
fn same_events_spec(windows: &Recorded, period: u64, window: u64) -> Result<String, BenchError> {
    let Some((leader, members)) = windows.events.split_first() else {
        return Err(BenchError::Other("the windows recording names no events".into()));
    };
    let mut spec = format!("{{{leader}/period={period},window={window}/");
    for m in members {
        spec.push(',');
        spec.push_str(m);
    }
    spec.push('}');
    Ok(spec)
}

/// How many times more samples `windows-4x` takes than `windows`.
const AMPLIFY: u64 = 4;

/// The windows run's events with its period divided by [`AMPLIFY`] and the same window:
/// `{task-clock/period=P/4,window=W/,page-faults,...}`.
fn amplified_spec(windows: &Recorded) -> Result<String, BenchError> {
    if windows.period_ns < AMPLIFY {
        return Err(BenchError::Other(
            "the windows recording has no period to shorten; nothing to amplify".into(),
        ));
    }
    same_events_spec(windows, windows.period_ns / AMPLIFY, windows.window_ns)
}

/// The workload under `perf record -e task-clock -c PERIOD`: its run, the file's bytes
/// and the samples `perf report --stats` counts.
fn perf_record(
    perf: &Path,
    exe: &Path,
    dir: &Path,
    plan: &Plan,
    period_ns: u64,
) -> Result<(Run, u64, u64), BenchError> {
    let file = dir.join("perf.data");
    let truth = dir.join("perf.truth.json");
    run_quiet(
        Command::new(perf)
            .args(["record", "-q", "-e", "task-clock", "-c", &period_ns.to_string(), "-o"])
            .arg(&file)
            .arg("--")
            .args(workload_args(exe, plan, &truth)),
        "perf record",
    )?;
    let run = read_truth(&truth)?;
    let bytes = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    let stats = Command::new(perf)
        .args(["report", "--stats", "-i"])
        .arg(&file)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|source| BenchError::Io { what: "starting perf report".into(), source })?;
    let samples = String::from_utf8_lossy(&stats.stdout)
        .lines()
        .find_map(|l| {
            let rest = l.trim().strip_prefix("SAMPLE events:")?;
            rest.split_whitespace().next()?.parse::<u64>().ok()
        })
        .unwrap_or(0);
    let _ = std::fs::remove_file(&file);
    Ok((run, bytes, samples))
}

fn pct(over: f64, base: f64) -> f64 {
    100.0 * (over - base) / base.max(1e-12)
}

/// The median figures of one variant.
struct VariantFigures {
    slowdown_pct: f64,
    steady_slowdown_pct: f64,
    /// For variants measured in pairs: the 95% interval of the steady-state slowdown's
    /// median, its coverage, and how many pairs.
    steady_interval: Option<(f64, f64, f64, usize)>,
    /// The paired slowdowns (with the start-up), in run order, for variants measured in pairs.
    paired_pct: Vec<f64>,
    wall_slowdown_pct: f64,
    bytes: f64,
    report_s: f64,
    wakeups_per_s: f64,
    samples: f64,
    samples_per_cpu_s: f64,
    lost: f64,
    period_ns: f64,
    window_ns: f64,
}

/// Confidence asked of the interval around a paired median.
const CONFIDENCE: f64 = 0.95;

/// `startup_s`: the agent's one-time start-up CPU, taken out of the steady-state
/// slowdown. `pairs`: the bare run measured next to each of `runs` (same index); with
/// it, the slowdown is the median of the paired slowdowns, else it is taken against the
/// median bare run `base`.
fn figures(runs: &[Recorded], base: Run, startup_s: f64, pairs: Option<&[Run]>) -> VariantFigures {
    let cpu = med(runs.iter().map(|r| r.run.cpu_s));
    let startup_pct = 100.0 * startup_s / base.cpu_s.max(1e-12);
    let paired: Vec<f64> = pairs.map_or_else(Vec::new, |bare| {
        runs.iter().zip(bare).map(|(r, b)| pct(r.run.cpu_s, b.cpu_s)).collect()
    });
    let (slowdown_pct, steady_interval) = if pairs.is_some() {
        let interval = median_interval(&paired, CONFIDENCE)
            .map(|(lo, hi, cov)| (lo - startup_pct, hi - startup_pct, cov, paired.len()));
        (median(&paired), interval)
    } else {
        (pct(cpu, base.cpu_s), None)
    };
    VariantFigures {
        paired_pct: paired,
        slowdown_pct,
        steady_slowdown_pct: slowdown_pct - startup_pct,
        steady_interval,
        wall_slowdown_pct: pct(med(runs.iter().map(|r| r.run.wall_s)), base.wall_s),
        bytes: med(runs.iter().map(|r| r.bytes as f64)),
        report_s: med(runs.iter().map(|r| r.report_s)),
        wakeups_per_s: med(runs.iter().map(|r| r.wakeups as f64 / r.span_s.max(1e-9))),
        samples: med(runs.iter().map(|r| r.samples as f64)),
        samples_per_cpu_s: med(runs.iter().map(|r| r.samples as f64 / r.run.cpu_s.max(1e-9))),
        lost: med(runs.iter().map(|r| r.lost as f64)),
        period_ns: med(runs.iter().map(|r| r.period_ns as f64)),
        window_ns: med(runs.iter().map(|r| r.window_ns as f64)),
    }
}

fn variant_row(name: &str, f: &VariantFigures) -> Map<String, Value> {
    let mut r = row([
        ("variant", name.into()),
        ("slowdown_pct", r3(f.slowdown_pct).into()),
        ("steady_slowdown_pct", r3(f.steady_slowdown_pct).into()),
        ("bytes", (f.bytes.round() as u64).into()),
        ("report_s", r3(f.report_s).into()),
        ("wakeups_per_s", r3(f.wakeups_per_s).into()),
        ("wall_slowdown_pct", r3(f.wall_slowdown_pct).into()),
        ("samples", (f.samples.round() as u64).into()),
        ("samples_per_cpu_s", r3(f.samples_per_cpu_s).into()),
        ("lost_samples", (f.lost.round() as u64).into()),
        ("period_ns", (f.period_ns.round() as u64).into()),
        ("window_ns", (f.window_ns.round() as u64).into()),
    ]);
    if let Some((lo, hi, cov, n)) = f.steady_interval {
        r.insert("steady_slowdown_interval_pct".into(), json!([r3(lo), r3(hi)]));
        r.insert("interval_coverage".into(), r3(cov).into());
        r.insert("pairs".into(), n.into());
        let each: Vec<Value> = f.paired_pct.iter().map(|&p| r3(p).into()).collect();
        r.insert("paired_slowdowns_pct".into(), each.into());
    }
    r
}

fn mark(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "UNDECIDED",
    }
}

/// A goal judged on a measurement with an interval: `Some(true)` when the whole
/// interval meets it, `Some(false)` when none of it does, `None` (undecided) otherwise,
/// and undecided too when too few pairs give the interval its [`CONFIDENCE`].
fn verdict_at_most(
    interval: Option<(f64, f64, f64, usize)>,
    point: f64,
    goal: f64,
) -> Option<bool> {
    match interval {
        Some((_, _, coverage, _)) if coverage < CONFIDENCE => None,
        Some((_, hi, _, _)) if hi <= goal => Some(true),
        Some((lo, _, _, _)) if lo > goal => Some(false),
        Some(_) => None,
        None => Some(point <= goal),
    }
}

/// Turns the measurements into the report: rows, top-level figures, the table, the
/// ratios and the goals.
fn summarize(m: &Measured) -> BenchReport {
    let base = Run {
        cpu_s: med(m.baseline.iter().map(|r| r.cpu_s)),
        wall_s: med(m.baseline.iter().map(|r| r.wall_s)),
    };
    let startup_s = (med(m.startup_recorded.iter().map(|r| r.cpu_s))
        - med(m.startup_baseline.iter().map(|r| r.cpu_s)))
    .max(0.0);
    let w = figures(&m.windows, base, startup_s, Some(&m.baseline));
    let a = figures(&m.amplified, base, startup_s, Some(&m.baseline));
    let w1 = figures(&m.wakeup1, base, startup_s, None);
    let s = figures(&m.short, base, startup_s, None);
    let cost_us = med(m.windows.iter().map(|r| r.sample_cost_ns as f64)) / 1e3;
    let floor_us = med(m.windows.iter().map(|r| r.floor_cost_ns as f64)) / 1e3;
    let report_sps = med(m.synthetic.iter().map(|&(n, secs, _)| n as f64 / secs.max(1e-9)));
    let synthetic_samples = m.synthetic.first().map_or(0, |s| s.0);

    let mut report = BenchReport::new("sampling");
    let mut wrow = variant_row("windows", &w);
    wrow.insert("sample_cost_us".into(), r3(cost_us).into());
    wrow.insert("floor_cost_us".into(), r3(floor_us).into());
    // What one sample really cost the workload: the steady-state extra CPU over the
    // samples taken. Its ratio to the calibrated cost is what the agent's budget model
    // must charge on top of its calibration (agent: `INDIRECT_COST_FACTOR`).
    let effective_us = w.steady_slowdown_pct / 100.0 * base.cpu_s / w.samples.max(1.0) * 1e6;
    let effective_ratio = effective_us / cost_us.max(1e-9);
    let charged_us = med(m.windows.iter().map(|r| r.charged_cost_ns as f64)) / 1e3;
    wrow.insert("effective_cost_us".into(), r3(effective_us).into());
    wrow.insert("charged_cost_us".into(), r3(charged_us).into());
    report.rows.push(wrow);
    report.rows.push(variant_row("windows-wakeup1", &w1));
    report.rows.push(variant_row("short-only", &s));
    // The same cost per sample from the run with four times the samples, where it stands
    // well above the run-to-run noise, and the default-rate slowdown it predicts if the
    // cost is proportional to the samples taken.
    let amp_effective_us = a.steady_slowdown_pct / 100.0 * base.cpu_s / a.samples.max(1.0) * 1e6;
    let amp_predicted_pct = amp_effective_us * 1e-6 * w.samples_per_cpu_s * 100.0;
    let mut arow = variant_row("windows-4x", &a);
    arow.insert("effective_cost_us".into(), r3(amp_effective_us).into());
    arow.insert("predicted_default_slowdown_pct".into(), r3(amp_predicted_pct).into());
    report.rows.push(arow);

    let bytes_ratio = s.bytes / w.bytes.max(1.0);
    let report_ratio = s.report_s / w.report_s.max(1e-9);
    // No wakeup at all at the default threshold (the writer drained only at the end) makes
    // the ratio meaningless, not huge.
    let wakeup_ratio = (w.wakeups_per_s > 0.0).then(|| w1.wakeups_per_s / w.wakeups_per_s);
    let cost_ratio = cost_us / floor_us.max(1e-9);

    let perf_json = match &m.perf {
        PerfResult::Ran { period_ns, runs } => {
            let cpu = med(runs.iter().map(|r| r.0.cpu_s));
            let wall = med(runs.iter().map(|r| r.0.wall_s));
            let samples = med(runs.iter().map(|r| r.2 as f64));
            json!({
                "period_ns": period_ns,
                "slowdown_pct": r3(pct(cpu, base.cpu_s)),
                "wall_slowdown_pct": r3(pct(wall, base.wall_s)),
                "samples": samples.round() as u64,
                "samples_per_cpu_s": r3(samples / cpu.max(1e-9)),
                "bytes": med(runs.iter().map(|r| r.1 as f64)).round() as u64,
            })
        }
        PerfResult::Skipped(why) => json!({ "skipped": why }),
    };

    let goals = [
        (
            format!(
                "slowdown at the defaults <= {GOAL_SLOWDOWN_PCT}% (steady state: without the \
                 one-time start-up)"
            ),
            match w.steady_interval {
                Some((lo, hi, cov, n)) => format!(
                    "{:.2}% ({:.2}% with the start-up); median of {n} pairs, {:.0}% interval \
                     {lo:.2}% to {hi:.2}%",
                    w.steady_slowdown_pct,
                    w.slowdown_pct,
                    cov * 100.0
                ),
                None => format!(
                    "{:.2}% ({:.2}% with the start-up)",
                    w.steady_slowdown_pct, w.slowdown_pct
                ),
            },
            verdict_at_most(w.steady_interval, w.steady_slowdown_pct, GOAL_SLOWDOWN_PCT),
        ),
        (
            format!("per-sample cost <= {GOAL_COST_OVER_FLOOR}x the floor"),
            format!("{cost_ratio:.2}x ({cost_us:.1} us vs {floor_us:.1} us)"),
            Some(cost_ratio <= GOAL_COST_OVER_FLOOR),
        ),
        (
            format!("bytes short-only / windows >= {GOAL_BYTES_RATIO}x"),
            format!("{bytes_ratio:.1}x"),
            Some(bytes_ratio >= GOAL_BYTES_RATIO),
        ),
        (
            format!("report >= {:.0}M samples/s", GOAL_REPORT_SAMPLES_PER_S / 1e6),
            format!("{:.2}M samples/s", report_sps / 1e6),
            Some(report_sps >= GOAL_REPORT_SAMPLES_PER_S),
        ),
    ];

    let x = &mut report.extra;
    x.insert("report_samples_per_s".into(), (report_sps.round() as u64).into());
    x.insert("report_synthetic_samples".into(), synthetic_samples.into());
    x.insert("baseline_cpu_s".into(), r3(base.cpu_s).into());
    x.insert("baseline_wall_s".into(), r3(base.wall_s).into());
    x.insert("startup_cpu_s".into(), r3(startup_s).into());
    x.insert("workload_rounds".into(), m.plan.rounds.into());
    x.insert("repeats".into(), m.plan.repeats.into());
    x.insert("quick".into(), m.plan.quick.into());
    x.insert("perf_record".into(), perf_json.clone());
    x.insert(
        "ratios".into(),
        json!({
            "bytes_short_only_over_windows": r3(bytes_ratio),
            "report_s_short_only_over_windows": r3(report_ratio),
            "wakeups_wakeup1_over_windows": wakeup_ratio.map(r3),
            "sample_cost_over_floor": r3(cost_ratio),
            "effective_cost_over_calibrated": r3(effective_ratio),
        }),
    );
    x.insert(
        "goals".into(),
        Value::Array(
            goals
                .iter()
                .map(|(goal, value, met)| {
                    json!({ "goal": goal, "value": value, "met": met, "verdict": mark(*met) })
                })
                .collect(),
        ),
    );
    x.insert(
        "handler_calls".into(),
        match &m.calls {
            Ok(c) => c.json(),
            Err(why) => json!({ "skipped": why }),
        },
    );
    x.insert("machine".into(), machine_summary().into());

    let mut t = String::new();
    let _ = writeln!(t, "strobe bench sampling on {}", machine_summary());
    let _ = writeln!(
        t,
        "workload: strobe workload --rounds {} --threads {THREADS} (fixed work), median of {} \
         repeat(s) ({} paired runs for windows and windows-4x){}; baseline {:.3} s CPU, {:.3} s \
         wall",
        m.plan.rounds,
        m.plan.repeats,
        m.windows.len(),
        if m.plan.quick { ", --quick: figures not quotable" } else { "" },
        base.cpu_s,
        base.wall_s
    );
    let _ = writeln!(
        t,
        "slowdown = extra process CPU time of the fixed work; steady = without the agent's \
         one-time start-up ({:.3} s CPU, measured on one round); wall time beside\n",
        startup_s
    );
    let _ = writeln!(
        t,
        "{:<16} {:>10} {:>8} {:>8} {:>12} {:>9} {:>10} {:>9} {:>11} {:>6} {:>10} {:>9}",
        "variant",
        "slowdown%",
        "steady%",
        "wall%",
        "bytes",
        "report_s",
        "wakeups/s",
        "samples",
        "samples/cpu",
        "lost",
        "period",
        "window"
    );
    for (name, f) in
        [("windows", &w), ("windows-wakeup1", &w1), ("short-only", &s), ("windows-4x", &a)]
    {
        let _ = writeln!(
            t,
            "{:<16} {:>10.2} {:>8.2} {:>8.2} {:>12.0} {:>9.3} {:>10.1} {:>9.0} {:>11.0} {:>6.0} {:>8.1}us {:>7.1}us",
            name,
            f.slowdown_pct,
            f.steady_slowdown_pct,
            f.wall_slowdown_pct,
            f.bytes,
            f.report_s,
            f.wakeups_per_s,
            f.samples,
            f.samples_per_cpu_s,
            f.lost,
            f.period_ns / 1e3,
            f.window_ns / 1e3
        );
    }
    for (name, f) in [("windows", &w), ("windows-4x", &a)] {
        if let Some((lo, hi, cov, n)) = f.steady_interval {
            let _ = writeln!(
                t,
                "{name}: steady slowdown {:.2}%, median of {n} runs each paired with the bare run \
                 beside it; {:.0}% interval for the median {lo:.2}% to {hi:.2}%",
                f.steady_slowdown_pct,
                cov * 100.0
            );
            let each: Vec<String> = f.paired_pct.iter().map(|p| format!("{p:.1}")).collect();
            let _ =
                writeln!(t, "  each pair, in run order, with the start-up (%): {}", each.join(" "));
        }
    }
    let _ = writeln!(
        t,
        "\nper-sample cost (windows, measured by the agent at start): {cost_us:.1} us; \
         floor (signal delivery + one group read) {floor_us:.1} us"
    );
    let _ = writeln!(
        t,
        "effective cost per sample in the workload (steady extra CPU / samples): \
         {effective_us:.1} us, {effective_ratio:.2}x the calibrated cost; the agent's budget \
         charged {charged_us:.1} us ({:.2}x)",
        charged_us / cost_us.max(1e-9)
    );
    let _ = writeln!(
        t,
        "the same from windows-4x ({:.0} samples/CPU-s): {amp_effective_us:.1} us per sample, \
         {:.2}x the calibrated cost; at the default rate ({:.0} samples/CPU-s) that predicts a \
         steady slowdown of {amp_predicted_pct:.2}%",
        a.samples_per_cpu_s,
        amp_effective_us / cost_us.max(1e-9),
        w.samples_per_cpu_s
    );
    match &m.calls {
        Ok(c) => {
            let beyond = |cycle| HandlerCalls::per_sample_beyond_floor_us(cycle, c.read_us);
            let (next, far) = (beyond(c.cycle_next_us()), beyond(c.cycle_far_us()));
            let _ = writeln!(
                t,
                "the handler's system calls, one at a time (us): group read {:.2}; period on the \
                 stopped leader {:.2}; with the timer beyond the tick / the CPU's next: period \
                 on the running leader {:.2} / {:.2}, disable {:.2} / {:.2}, enable {:.2} / \
                 {:.2}; refresh (the window's timer, the CPU's next) {:.2}; a bare system call \
                 {:.2}",
                c.read_us,
                c.period_stopped_us,
                c.period_running_far_us,
                c.period_running_next_us,
                c.disable_far_us,
                c.disable_next_us,
                c.enable_far_us,
                c.enable_next_us,
                c.refresh_next_us,
                c.bare_us
            );
            let _ = writeln!(
                t,
                "  a window cycle's calls: {:.1} us with every timer the CPU's next (the \
                 calibration's 50 us periods), {:.1} us with the long period's beyond the tick \
                 (the default period); per sample beyond the floor's read: {next:.1} us \
                 ({:.2}x the floor with nothing else) and {far:.1} us ({:.2}x); the measured \
                 cost leaves {:.1} us a sample to the rest (interrupts, stack walk, records)",
                c.cycle_next_us(),
                c.cycle_far_us(),
                (floor_us + next) / floor_us.max(1e-9),
                (floor_us + far) / floor_us.max(1e-9),
                cost_us - floor_us - next
            );
        }
        Err(why) => {
            let _ = writeln!(t, "the handler's system calls: not measured: {why}");
        }
    }
    match &perf_json.get("skipped") {
        Some(why) => {
            let _ = writeln!(t, "perf record: skipped: {}", why.as_str().unwrap_or(""));
        }
        None => {
            let _ = writeln!(
                t,
                "perf record -e task-clock -c {} (same samples/CPU-s as windows): slowdown {:.2}% \
                 (wall {:.2}%), {} samples ({:.0}/CPU-s), {} bytes; strobe windows: {:.2}%",
                perf_json["period_ns"],
                perf_json["slowdown_pct"].as_f64().unwrap_or(0.0),
                perf_json["wall_slowdown_pct"].as_f64().unwrap_or(0.0),
                perf_json["samples"],
                perf_json["samples_per_cpu_s"].as_f64().unwrap_or(0.0),
                perf_json["bytes"],
                w.slowdown_pct
            );
        }
    }
    let _ = writeln!(
        t,
        "report throughput: {:.2}M samples/s ({synthetic_samples} synthetic samples through a \
         record file, median)",
        report_sps / 1e6
    );
    let _ = writeln!(t, "\nratios:");
    let _ = writeln!(t, "  bytes      short-only / windows      {bytes_ratio:8.1}x");
    let _ = writeln!(t, "  report_s   short-only / windows      {report_ratio:8.1}x");
    match wakeup_ratio {
        Some(r) => {
            let _ = writeln!(t, "  wakeups/s  windows-wakeup1 / windows {r:8.1}x");
        }
        None => {
            let _ = writeln!(
                t,
                "  wakeups/s  windows-wakeup1 / windows      n/a (no wakeup at the default threshold)"
            );
        }
    }
    let _ = writeln!(t, "  cost       sample / floor            {cost_ratio:8.2}x");
    let _ = writeln!(t, "\ngoals:");
    for (goal, value, met) in &goals {
        let _ = writeln!(t, "  {:<6} {goal}: {value}", mark(*met));
    }
    report.text = t;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(cpu_s: f64, bytes: u64, samples: u64, wakeups: u64, report_s: f64) -> Recorded {
        Recorded {
            run: Run { cpu_s, wall_s: cpu_s / 2.0 },
            bytes,
            samples,
            lost: 0,
            wakeups,
            span_s: 2.0,
            period_ns: 2_600_000,
            window_ns: 20_000,
            sample_cost_ns: 28_000,
            floor_cost_ns: 15_000,
            charged_cost_ns: 56_000,
            events: vec!["task-clock".into(), "page-faults".into()],
            report_s,
        }
    }

    /// Inputs made up for the arithmetic check below; nothing here is a measurement.
    /// Nine pairs: the fewest whose 95% interval for the median leaves out the extreme
    /// at each end (here the outlier run of 9 s).
    fn measured() -> Measured {
        let cpus = [4.06, 4.04, 9.0, 4.07, 4.05, 4.06, 4.04, 4.05, 4.06];
        Measured {
            plan: Plan { rounds: 10, repeats: 3, synthetic_samples: 100, quick: true },
            baseline: vec![Run { cpu_s: 4.0, wall_s: 2.0 }; 9],
            startup_baseline: vec![Run { cpu_s: 0.5, wall_s: 0.5 }; 3],
            startup_recorded: vec![Run { cpu_s: 0.54, wall_s: 0.5 }; 3],
            windows: cpus
                .iter()
                .enumerate()
                .map(|(i, &c)| recorded(c, if i == 2 { 5_000 } else { 1_200 }, 100, 4, 0.1))
                .collect(),
            amplified: vec![recorded(4.2, 4_000, 400, 4, 0.1); 9],
            wakeup1: vec![recorded(4.2, 1_000, 100, 100, 0.1); 3],
            short: vec![recorded(8.0, 40_000, 5_000, 40, 0.5); 3],
            perf: PerfResult::Skipped("perf is not installed".into()),
            synthetic: vec![(100, 1e-5, 10), (100, 2e-5, 10), (100, 5e-5, 10)],
            calls: Ok(handler_calls::EXAMPLE),
        }
    }

    #[test]
    fn json_has_the_issue_fields_and_medians() {
        let r = summarize(&measured());
        let v: Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["bench"], "sampling");
        let variants: Vec<&str> =
            v["rows"].as_array().unwrap().iter().map(|r| r["variant"].as_str().unwrap()).collect();
        assert_eq!(variants, ["windows", "windows-wakeup1", "short-only", "windows-4x"]);
        for row in v["rows"].as_array().unwrap() {
            for key in ["slowdown_pct", "bytes", "report_s", "wakeups_per_s"] {
                assert!(row[key].is_number(), "{key} in {row}");
            }
        }
        let w = &v["rows"][0];
        // Median paired slowdown 4.06 against 4.0: +1.5%; the outlier run of 9 s does not
        // count, and the interval for the median is the 2nd to the 8th of nine.
        assert_eq!(w["slowdown_pct"], 1.5);
        // Start-up: 0.54 - 0.5 = 0.04 s of CPU, 1% of the bare run, out of the steady state.
        assert_eq!(w["steady_slowdown_pct"], 0.5);
        assert_eq!(w["steady_slowdown_interval_pct"], json!([0.0, 0.75]));
        assert_eq!(w["pairs"], 9);
        // windows-4x: 5% paired, 4% steady, over 400 samples of a 4 s run: 400 us each;
        // at the windows run's 100 samples / 4.06 CPU-s (median) that predicts 0.985%.
        let a = &v["rows"][3];
        assert_eq!(a["steady_slowdown_pct"], 4.0);
        assert_eq!(a["effective_cost_us"], 400.0);
        assert_eq!(a["predicted_default_slowdown_pct"], 0.985);
        assert_eq!(v["startup_cpu_s"], 0.04);
        assert_eq!(w["bytes"], 1_200);
        assert_eq!(w["wakeups_per_s"], 2.0);
        assert_eq!(w["sample_cost_us"], 28.0);
        assert_eq!(w["floor_cost_us"], 15.0);
        assert!(v["rows"][1].get("sample_cost_us").is_none());
        assert_eq!(v["report_samples_per_s"], 5_000_000);
        assert_eq!(v["perf_record"]["skipped"], "perf is not installed");
        // The example calls: a cycle of 6 + 2 x 1 + 2 x 0.5 + 7 + 6.5 = 22.5 us with every
        // timer the CPU's next, 10.25 us a sample beyond the floor's read.
        let c = &v["handler_calls"];
        assert_eq!(c["cycle_every_timer_next_us"], 22.5);
        assert_eq!(c["per_sample_beyond_floor_every_timer_next_us"], 10.25);
    }

    #[test]
    fn text_splits_the_cost_into_calls_and_the_rest_or_says_why_not() {
        // Floor 15 us, cost 28 us: a 22.5 us cycle, 10.25 us of calls a sample (1.68x the
        // floor with nothing else), 2.75 us left to the rest.
        let r = summarize(&measured());
        assert!(r.text.contains("calls: 22.5 us with every timer the CPU's next"), "{}", r.text);
        assert!(r.text.contains("(1.68x the floor with nothing else)"), "{}", r.text);
        assert!(r.text.contains("us a sample to the rest"), "{}", r.text);
        let mut m = measured();
        m.calls = Err("EACCES".into());
        let r = summarize(&m);
        assert!(r.text.contains("the handler's system calls: not measured: EACCES"), "{}", r.text);
        let v: Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["handler_calls"]["skipped"], "EACCES");
    }

    #[test]
    fn text_shows_ratios_and_goals_met_or_missed() {
        let r = summarize(&measured());
        // bytes 40,000 / 1,200 = 33.3x: met; cost 28 / 15 = 1.87x: missed (goal 1.5x);
        // slowdown 1.5%: met; report 5M/s: met.
        assert!(r.text.contains("short-only / windows          33.3x"), "{}", r.text);
        assert!(r.text.contains("windows-wakeup1 / windows     25.0x"), "{}", r.text);
        assert_eq!(r.text.matches("  met    ").count(), 3, "{}", r.text);
        assert!(r.text.contains("MISSED per-sample cost <= 1.5x the floor: 1.87x"), "{}", r.text);
        assert!(r.text.contains("interval 0.00% to 0.75%"), "{}", r.text);
        assert!(r.text.contains("perf record: skipped: perf is not installed"), "{}", r.text);

        let mut m = measured();
        m.short = vec![recorded(8.0, 12_000, 5_000, 40, 0.5); 3];
        let r = summarize(&m);
        assert!(r.text.contains("MISSED bytes short-only / windows >= 25x: 10.0x"), "{}", r.text);
    }

    #[test]
    fn a_goal_with_an_interval_is_met_missed_or_undecided() {
        let i = |lo, hi| Some((lo, hi, 0.95, 10));
        assert_eq!(verdict_at_most(i(1.0, 1.9), 1.5, 2.0), Some(true));
        assert_eq!(verdict_at_most(i(2.1, 4.0), 3.0, 2.0), Some(false));
        // The median is over the goal but the interval reaches under it: undecided.
        assert_eq!(verdict_at_most(i(1.5, 3.0), 2.5, 2.0), None);
        assert_eq!(verdict_at_most(None, 2.5, 2.0), Some(false));
        // Two pairs cover the median only 50% of the time: never a verdict.
        assert_eq!(verdict_at_most(Some((0.1, 0.5, 0.5, 2)), 0.3, 2.0), None);
        assert_eq!(mark(None), "UNDECIDED");

        // A run whose pairs straddle the goal says so instead of calling it.
        let mut m = measured();
        for (k, r) in m.windows.iter_mut().enumerate() {
            r.run.cpu_s = 4.0 * (1.0 + (1.0 + 0.5 * k as f64) / 100.0);
        }
        let r = summarize(&m);
        assert!(r.text.contains("UNDECIDED slowdown at the defaults"), "{}", r.text);
    }

    #[test]
    fn amplified_runs_take_four_times_the_samples_of_the_same_events() {
        let w = recorded(1.0, 1, 1, 1, 0.1);
        assert_eq!(
            amplified_spec(&w).unwrap(),
            "{task-clock/period=650000,window=20000/,page-faults}"
        );
    }

    #[test]
    fn figures_are_read_from_a_real_record_file() {
        use strobe_format as f;
        let dir = Scratch::new("read").unwrap();
        let path = dir.path().join("run.strobe");
        let ev = |name: &str, is_time| f::EventDesc {
            name: name.into(),
            type_: 1,
            config: 0,
            is_time,
            is_hardware: false,
            exclude_user: false,
            exclude_kernel: false,
        };
        let mut e = f::Encoder::new();
        e.preamble();
        e.header(&f::Header {
            minor_version: f::MINOR_VERSION,
            strobe_version: "test".into(),
            start_unix_ns: 0,
            start_mono_ns: 0,
            command: vec!["w".into()],
            events: vec![ev("task-clock", true), ev("page-faults", false)],
            period: None,
            window: Some(20_000),
            jitter: None,
            wakeup: 512,
            buffer_bytes: 64 << 20,
            overhead_ppm: 20_000,
            follow_fork: false,
            mode: f::RecordMode::Agent,
            mode_reason: "test".into(),
            call_graph: f::CallGraph::None,
            max_depth: 0,
        });
        e.process(
            7,
            &f::ProcessInfo {
                pid: 1,
                ppid: 0,
                origin: ProcessOrigin::Start,
                exe: "w".into(),
                start_mono_ns: 1_000_000_000,
                period: 2_600_000,
                window: 20_000,
                jitter: 0,
                period_source: f::PeriodSource::Budget,
                sample_cost_ns: 27_500,
                floor_cost_ns: 15_000,
                predicted_overhead_ppm: 19_000,
                floor: false,
            },
        );
        let mut b = e.samples(7, 11, 2);
        for i in 0..10u64 {
            b.push(f::SampleKind::WindowStart, i * 10, 0x1000, 0, &[i * 100, 0]);
            b.push(f::SampleKind::WindowEnd, i * 10 + 1, 0x1000, 0, &[i * 100 + 20, 0]);
        }
        b.finish();
        let end = |wakeups| f::ProcessEnd {
            reason: f::EndReason::Exit,
            time_mono_ns: 3_000_000_000,
            samples: 20,
            lost: 1,
            wakeups,
            windows: 10,
            window_sum: 200,
            status: Some(0),
            unsampled_ns: 0,
            cpu_ns: None,
            tree_cpu_ns: None,
        };
        // A later END of a stream replaces an earlier one.
        e.end_process(7, &end(3));
        e.end_process(7, &end(4));
        std::fs::write(&path, e.as_bytes()).unwrap();

        let r = read_recording(&path, Run { cpu_s: 1.0, wall_s: 1.0 }).unwrap();
        assert_eq!(r.bytes, e.len() as u64);
        assert_eq!((r.samples, r.lost, r.wakeups), (20, 1, 4));
        assert_eq!(r.span_s, 2.0);
        assert_eq!((r.period_ns, r.window_ns), (2_600_000, 20_000));
        assert_eq!((r.sample_cost_ns, r.floor_cost_ns), (27_500, 15_000));
        // 1.9% of a 2.62 ms cycle (period + window) over its 2 samples.
        assert_eq!(r.charged_cost_ns, 24_890);
        assert_eq!(r.events, ["task-clock", "page-faults"]);

        // Cut short: the benchmark refuses it rather than quoting part of a run.
        std::fs::write(&path, &e.as_bytes()[..e.len() - 3]).unwrap();
        let err = read_recording(&path, Run { cpu_s: 1.0, wall_s: 1.0 }).unwrap_err();
        assert!(err.to_string().contains("cut short"), "{err}");
    }

    #[test]
    fn short_only_samples_the_same_events_at_the_window_length() {
        let w = recorded(1.0, 1, 1, 1, 0.1);
        assert_eq!(short_only_spec(&w).unwrap(), "{task-clock/period=20000,window=0/,page-faults}");
        let none = Recorded { window_ns: 0, ..w };
        assert!(short_only_spec(&none).is_err());
    }

    #[test]
    fn without_a_working_record_the_benchmark_says_so() {
        // A stand-in strobe executable that fails like an unbuilt `strobe record`.
        let dir = Scratch::new("fake").unwrap();
        let fake = dir.path().join("strobe");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho 'strobe: error: strobe record is not built yet' >&2\nexit 1\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let opts = BenchOpts { quick: true, repeats: 1, strobe_exe: Some(fake) };
        let err = run(&opts).unwrap_err();
        assert!(matches!(err, BenchError::Unsupported(_)), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains("strobe record is unavailable"), "{msg}");
        assert!(msg.contains("not built yet"), "{msg}");
    }
}
