//! `strobe bench kernel-mode`: what recording from the kernel's ring buffers costs, beside
//! `perf record` doing the same, on the bundled workload, in one run.
//!
//! | variant | command |
//! |---|---|
//! | `bare` | the workload alone (`strobe workload --rounds N --threads 2`) |
//! | `strobe-kernel` | `strobe record --mode kernel -e '{task-clock/period=P/}' --call-graph fp` |
//! | `perf-record` | `perf record -e task-clock -c P -g` (frame-pointer call chains) |
//! | `strobe-kernel-default` | `strobe record --mode kernel -e task-clock` at the default period |
//! | `strobe-kernel-wakeup1` | the same with `--wakeup 1` |
//! | `strobe-kernel-dwarf` | `strobe-kernel` with `--call-graph dwarf` (8 KiB user stack copies walked by strobe record) |
//! | `perf-record-dwarf` | `perf record -e task-clock -c P --call-graph dwarf,8192` (unwound later, by `perf report`) |
//!
//! The first two sample the same event at the same period P, a quarter of kernel mode's
//! default (four times the samples, so their cost stands above this VM's noise), with
//! the same content (IP, thread, time, period, the kernel's frame-pointer call chain).
//!
//! - **Cost per sample**: the extra CPU time a recording takes over the bare workload
//!   (the workload's own extra CPU, which includes the kernel's sampling on its threads,
//!   plus the recorder's CPU: the children's CPU time beyond the workload's), over the
//!   samples taken. The workload does fixed work. The host's speed drifts, so each
//!   recorded run is compared with the mean of the bare runs just before and after it
//!   (every repeat runs bare, strobe, bare, perf, bare, in alternating order), and the
//!   medians of those paired differences are quoted.
//! - **Bytes per sample**: the file's size over its samples.
//! - **Wakeups per second**: how often the kernel woke the recorder (strobe counts its
//!   ring wakeups into the file; perf prints "Woken up N times"), at the default
//!   watermark and with `--wakeup 1`.
//! - **Report speed**: `strobe report` on a perf.data file against `perf report --stdio`
//!   on the same file, each timed end to end as a process (best of the repeats), in
//!   samples per second.
//!
//! This module must never be linked into the agent or a target; it drives commands.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::{json, Value};

use crate::drive::{children_cpu_s, find_perf, med, perf_samples, r3, run_quiet, Scratch};
use crate::report::{machine_summary, row};
use crate::{BenchError, BenchOpts, BenchReport};

/// Worker threads of the workload: as many as this VM has CPUs.
const THREADS: usize = 2;
/// Kernel mode's default period (strobe-record's `kernel::DEFAULT_PERIOD_NS`).
const DEFAULT_PERIOD_NS: u64 = 1_000_000;
/// The period of the cost comparison: four times the default rate.
const PERIOD_4X_NS: u64 = DEFAULT_PERIOD_NS / 4;
/// The period of the perf.data file the report speeds are measured on.
const REPORT_PERIOD_NS: u64 = 20_000;

/// The goals.
const GOAL_COST_RATIO: f64 = 1.1;
const GOAL_BYTES_RATIO: f64 = 0.5;
const GOAL_REPORT_RATIO: f64 = 10.0;

#[derive(Debug, Clone, Copy, PartialEq)]
struct Plan {
    rounds: u64,
    report_rounds: u64,
    repeats: usize,
}

/// One run of the workload, with or without a recorder.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Run {
    /// The workload's own CPU time (its truth file), s.
    cpu_s: f64,
    /// Its wall time, s.
    wall_s: f64,
    /// The recorder's CPU time (0 for the bare workload), s.
    recorder_s: f64,
    samples: u64,
    bytes: u64,
    wakeups: u64,
}

/// A recorded run and the mean CPU time of the bare runs beside it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Paired {
    run: Run,
    bare_cpu_s: f64,
}

impl Paired {
    fn new(run: Run, (a, b): (Run, Run)) -> Paired {
        Paired { run, bare_cpu_s: (a.cpu_s + b.cpu_s) / 2.0 }
    }

    /// The extra CPU time the recording took: the workload's and the recorder's.
    fn extra_s(&self) -> f64 {
        self.run.cpu_s - self.bare_cpu_s + self.run.recorder_s
    }
}

fn workload_args(exe: &Path, rounds: u64, truth: &Path) -> Vec<OsString> {
    vec![
        exe.into(),
        "workload".into(),
        "--rounds".into(),
        rounds.to_string().into(),
        "--threads".into(),
        THREADS.to_string().into(),
        "--truth".into(),
        truth.into(),
    ]
}

fn stderr_of(out: std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn read_truth(path: &Path) -> Result<(f64, f64), BenchError> {
    let text = std::fs::read(path)
        .map_err(|source| BenchError::Io { what: format!("reading {}", path.display()), source })?;
    let v: Value = serde_json::from_slice(&text).map_err(|e| {
        BenchError::Other(format!("{}: not the workload's truth: {e}", path.display()))
    })?;
    match (v["process_cpu_ns"].as_u64(), v["seconds"].as_f64()) {
        (Some(c), Some(w)) => Ok((c as f64 / 1e9, w)),
        _ => Err(BenchError::Other(format!("{}: no process_cpu_ns or seconds", path.display()))),
    }
}

/// Runs `prefix -- workload` (or the workload alone when `prefix` is empty) and measures.
fn measure(
    prefix: &[OsString],
    exe: &Path,
    rounds: u64,
    dir: &Path,
    what: &str,
) -> Result<(Run, String), BenchError> {
    let truth = dir.join(format!("{what}.truth.json"));
    let args = workload_args(exe, rounds, &truth);
    let before = children_cpu_s();
    let stderr = if prefix.is_empty() {
        stderr_of(run_quiet(Command::new(&args[0]).args(&args[1..]), what)?)
    } else {
        stderr_of(run_quiet(
            Command::new(&prefix[0]).args(&prefix[1..]).arg("--").args(&args),
            what,
        )?)
    };
    let children = children_cpu_s() - before;
    let (cpu_s, wall_s) = read_truth(&truth)?;
    let recorder_s = if prefix.is_empty() { 0.0 } else { (children - cpu_s).max(0.0) };
    Ok((Run { cpu_s, wall_s, recorder_s, ..Run::default() }, stderr))
}

/// The workload under `strobe record --mode kernel EXTRA`: samples, bytes and wakeups
/// from the file.
fn strobe_kernel(
    exe: &Path,
    dir: &Path,
    rounds: u64,
    what: &str,
    call_graph: &str,
    extra: &[&str],
) -> Result<Run, BenchError> {
    let file = dir.join(format!("{what}.strobe"));
    let mut prefix: Vec<OsString> =
        vec![exe.into(), "record".into(), "-o".into(), file.clone().into()];
    prefix.extend(["--mode", "kernel", "--call-graph", call_graph].iter().map(OsString::from));
    prefix.extend(extra.iter().map(OsString::from));
    let (mut run, _) = measure(&prefix, exe, rounds, dir, what)?;
    let rec = strobe_format::read_all(&file).map_err(|e| BenchError::Other(format!("{e}")))?;
    run.samples = rec.total_samples() as u64;
    run.bytes = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    run.wakeups = rec.processes.iter().filter_map(|p| p.end.map(|e| e.wakeups)).max().unwrap_or(0);
    let _ = std::fs::remove_file(&file);
    Ok(run)
}

/// The workload under `perf record -e task-clock -c PERIOD CALL_GRAPH` (`-g`, or
/// `--call-graph=dwarf,8192`).
fn perf_record(
    perf: &Path,
    exe: &Path,
    dir: &Path,
    rounds: u64,
    period: u64,
    call_graph: &str,
    keep: Option<&Path>,
) -> Result<Run, BenchError> {
    let file = keep.map_or_else(|| dir.join("perf.data"), Path::to_path_buf);
    let prefix: Vec<OsString> = vec![
        perf.into(),
        "record".into(),
        "-e".into(),
        "task-clock".into(),
        "-c".into(),
        period.to_string().into(),
        call_graph.into(),
        "-o".into(),
        file.clone().into(),
    ];
    let (mut run, stderr) = measure(&prefix, exe, rounds, dir, "perf-record")?;
    run.bytes = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
    run.samples = perf_samples(&file)?;
    // "[ perf record: Woken up 3 times to write data ]"
    run.wakeups = stderr
        .lines()
        .find_map(|l| l.split("Woken up ").nth(1)?.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    if keep.is_none() {
        let _ = std::fs::remove_file(&file);
    }
    Ok(run)
}

/// Seconds for `cmd` to run to its end (stdout to /dev/null), best of `repeats`.
fn best_time(
    repeats: usize,
    mut make: impl FnMut() -> Command,
    what: &str,
) -> Result<f64, BenchError> {
    let mut best = f64::INFINITY;
    for _ in 0..repeats.max(1) {
        let mut cmd = make();
        let t0 = Instant::now();
        run_quiet(&mut cmd, what)?;
        best = best.min(t0.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// Runs every variant of `strobe bench kernel-mode`.
pub(crate) fn run(opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    let exe = opts.strobe_exe.clone().ok_or_else(|| {
        BenchError::Other("the kernel-mode benchmark drives the strobe executable: run it as `strobe bench kernel-mode`".into())
    })?;
    let perf = find_perf().map_err(BenchError::Unsupported)?;
    let plan = if opts.quick {
        Plan { rounds: 20, report_rounds: 20, repeats: 1 }
    } else {
        Plan { rounds: 300, report_rounds: 300, repeats: opts.repeats.max(1) }
    };
    let scratch = Scratch::new("kernel")?;
    let dir = scratch.path();
    let period = format!("{{task-clock/period={PERIOD_4X_NS}/}}");
    let (mut bare, mut ours, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
    let (mut default, mut wakeup1) = (Vec::new(), Vec::new());
    let (mut ours_dwarf, mut theirs_dwarf) = (Vec::new(), Vec::new());
    for rep in 0..plan.repeats {
        eprintln!("strobe bench kernel-mode: repeat {} of {}", rep + 1, plan.repeats);
        // bare, A, bare, B, bare: A and B alternate, each between two bare runs.
        let b0 = measure(&[], &exe, plan.rounds, dir, "bare")?.0;
        let first = |strobe_first: bool| -> Result<Run, BenchError> {
            if strobe_first {
                strobe_kernel(&exe, dir, plan.rounds, "strobe-kernel", "fp", &["-e", &period])
            } else {
                perf_record(&perf, &exe, dir, plan.rounds, PERIOD_4X_NS, "-g", None)
            }
        };
        let a = first(rep % 2 == 0)?;
        let b1 = measure(&[], &exe, plan.rounds, dir, "bare")?.0;
        let b = first(rep % 2 != 0)?;
        let b2 = measure(&[], &exe, plan.rounds, dir, "bare")?.0;
        let (s, p) = if rep % 2 == 0 { (a, b) } else { (b, a) };
        let (bs, bp) = if rep % 2 == 0 { ((b0, b1), (b1, b2)) } else { ((b1, b2), (b0, b1)) };
        ours.push(Paired::new(s, bs));
        theirs.push(Paired::new(p, bp));
        bare.extend([b0, b1, b2]);
        let b3 = measure(&[], &exe, plan.rounds, dir, "bare")?.0;
        let d = strobe_kernel(&exe, dir, plan.rounds, "default", "fp", &["-e", "task-clock"])?;
        let w = strobe_kernel(
            &exe,
            dir,
            plan.rounds,
            "wakeup1",
            "fp",
            &["-e", "task-clock", "--wakeup", "1"],
        )?;
        let b4 = measure(&[], &exe, plan.rounds, dir, "bare")?.0;
        default.push(Paired::new(d, (b3, b4)));
        wakeup1.push(Paired::new(w, (b3, b4)));
        // The DWARF pair: strobe walks the copies as it records, perf keeps them for its
        // report (whose unwinding is not counted here).
        let sd = strobe_kernel(&exe, dir, plan.rounds, "strobe-dwarf", "dwarf", &["-e", &period])?;
        let b5 = measure(&[], &exe, plan.rounds, dir, "bare")?.0;
        let pd = perf_record(
            &perf,
            &exe,
            dir,
            plan.rounds,
            PERIOD_4X_NS,
            "--call-graph=dwarf,8192",
            None,
        )?;
        let b6 = measure(&[], &exe, plan.rounds, dir, "bare")?.0;
        ours_dwarf.push(Paired::new(sd, (b4, b5)));
        theirs_dwarf.push(Paired::new(pd, (b5, b6)));
    }

    // Report speed on one perf.data file.
    let pd = dir.join("report.data");
    let recorded =
        perf_record(&perf, &exe, dir, plan.report_rounds, REPORT_PERIOD_NS, "-g", Some(&pd))?;
    let n = recorded.samples as f64;
    let strobe_s = best_time(
        plan.repeats,
        || {
            let mut c = Command::new(&exe);
            c.arg("report").arg(&pd);
            c
        },
        "strobe report on perf.data",
    )?;
    let perf_s = best_time(
        plan.repeats,
        || {
            let mut c = Command::new(&perf);
            c.args(["report", "--stdio", "-i"]).arg(&pd);
            c
        },
        "perf report --stdio",
    )?;

    let bare_cpu = med(bare.iter().map(|r| r.cpu_s));
    // Per paired run: the extra CPU (the workload's beyond its neighbours' mean, plus the
    // recorder's) over its samples.
    let cost = |runs: &[Paired]| {
        med(runs.iter().map(|p| p.extra_s() / (p.run.samples as f64).max(1.0) * 1e6))
    };
    let per = |runs: &[Paired], f: fn(&Run) -> f64| med(runs.iter().map(|p| f(&p.run)));
    let mut report = BenchReport::new("kernel-mode");
    let mut line = |variant: &str, runs: &[Paired], period_ns: u64, wakeup: &str| -> Value {
        let samples = per(runs, |r| r.samples as f64);
        let r = row([
            ("variant", variant.into()),
            ("period_ns", period_ns.into()),
            ("wakeup", wakeup.into()),
            ("samples", (samples.round() as u64).into()),
            ("cost_per_sample_us", json!(r3(cost(runs)))),
            ("target_extra_cpu_s", json!(r3(med(runs.iter().map(|p| p.run.cpu_s - p.bare_cpu_s))))),
            ("recorder_cpu_s", json!(r3(per(runs, |r| r.recorder_s)))),
            ("bytes_per_sample", json!(r3(per(runs, |r| r.bytes as f64) / samples.max(1.0)))),
            ("wakeups_per_s", json!(r3(per(runs, |r| r.wakeups as f64 / r.wall_s.max(1e-9))))),
            ("wall_s", json!(r3(per(runs, |r| r.wall_s)))),
        ]);
        report.rows.push(r.clone());
        Value::Object(r)
    };
    let s4 = line("strobe-kernel", &ours, PERIOD_4X_NS, "default");
    let p4 = line("perf-record", &theirs, PERIOD_4X_NS, "perf's default");
    let sd = line("strobe-kernel-default", &default, DEFAULT_PERIOD_NS, "default");
    let s1 = line("strobe-kernel-wakeup1", &wakeup1, DEFAULT_PERIOD_NS, "1");
    let sdw = line("strobe-kernel-dwarf", &ours_dwarf, PERIOD_4X_NS, "default");
    let pdw = line("perf-record-dwarf", &theirs_dwarf, PERIOD_4X_NS, "perf's default");
    let bare_row = row([
        ("variant", "bare".into()),
        ("cpu_s", json!(r3(bare_cpu))),
        ("wall_s", json!(r3(med(bare.iter().map(|r| r.wall_s))))),
    ]);
    report.rows.push(bare_row);
    let strobe_rate = n / strobe_s;
    let perf_rate = n / perf_s;
    report.extra.insert("report_perf_data_samples_per_s".into(), json!(strobe_rate.round()));
    report.extra.insert("perf_report_samples_per_s".into(), json!(perf_rate.round()));
    report
        .extra
        .insert("report_perf_data_vs_perf_report".into(), json!(r3(strobe_rate / perf_rate)));
    report.extra.insert("report_perf_data_samples".into(), json!(recorded.samples));
    report.extra.insert("machine".into(), json!(machine_summary()));

    let f = |v: &Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let verdict = |ok: bool| if ok { "met" } else { "missed" };
    let mut t = String::new();
    let _ =
        writeln!(t, "strobe bench kernel-mode ({} repeats; {})", plan.repeats, machine_summary());
    let _ = writeln!(
        t,
        "workload: {} rounds x {THREADS} threads, bare {bare_cpu:.3} s CPU\n",
        plan.rounds
    );
    let _ = writeln!(
        t,
        "{:<24}{:>10}{:>9}{:>12}{:>12}{:>12}",
        "variant", "period", "samples", "us/sample", "bytes/smp", "wakeups/s"
    );
    for v in [&s4, &p4, &sd, &s1, &sdw, &pdw] {
        let _ = writeln!(
            t,
            "{:<24}{:>8}us{:>10}{:>12.2}{:>12.1}{:>12.1}",
            v["variant"].as_str().unwrap_or("?"),
            v["period_ns"].as_u64().unwrap_or(0) / 1000,
            v["samples"].as_u64().unwrap_or(0),
            f(v, "cost_per_sample_us"),
            f(v, "bytes_per_sample"),
            f(v, "wakeups_per_s")
        );
    }
    let cost_ratio = f(&s4, "cost_per_sample_us") / f(&p4, "cost_per_sample_us");
    let bytes_ratio = f(&s4, "bytes_per_sample") / f(&p4, "bytes_per_sample");
    let report_ratio = strobe_rate / perf_rate;
    let _ = writeln!(t, "\nreport on a perf.data of {} samples: strobe {:.0} samples/s ({strobe_s:.3} s), perf report --stdio {:.0} samples/s ({perf_s:.3} s)", recorded.samples, strobe_rate, perf_rate);
    let _ = writeln!(t, "\ngoals (strobe-kernel vs perf-record at {} us):", PERIOD_4X_NS / 1000);
    let _ = writeln!(
        t,
        "  cost per sample   {cost_ratio:.2}x perf's (goal <= {GOAL_COST_RATIO}x): {}",
        verdict(cost_ratio <= GOAL_COST_RATIO)
    );
    let _ = writeln!(
        t,
        "  bytes per sample  {bytes_ratio:.2}x perf's (goal <= {GOAL_BYTES_RATIO}x): {}",
        verdict(bytes_ratio <= GOAL_BYTES_RATIO)
    );
    let _ = writeln!(
        t,
        "  report speed      {report_ratio:.1}x perf report's (goal >= {GOAL_REPORT_RATIO}x): {}",
        verdict(report_ratio >= GOAL_REPORT_RATIO)
    );
    let _ = writeln!(
        t,
        "  wakeups/s at the default watermark {:.1}, with --wakeup 1 {:.1}",
        f(&sd, "wakeups_per_s"),
        f(&s1, "wakeups_per_s")
    );
    let _ = writeln!(
        t,
        "  with --call-graph dwarf: cost {:.2}x perf's (strobe unwinds while recording, perf \
         in its report), bytes {:.4}x",
        f(&sdw, "cost_per_sample_us") / f(&pdw, "cost_per_sample_us"),
        f(&sdw, "bytes_per_sample") / f(&pdw, "bytes_per_sample")
    );
    report.text = t;
    Ok(report)
}
