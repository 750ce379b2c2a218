//! `strobe bench stacks`: what call stacks cost in the target and in the file, how often
//! they reach the thread's entry, and how fast `strobe report` reads them, side by side in
//! one run through the real `strobe record` and `strobe report`.
//!
//! | variant | `strobe record` arguments |
//! |---|---|
//! | `none` | `--call-graph none` |
//! | `fp` | `--call-graph fp`: the frame-pointer chain |
//! | `dwarf` | `--call-graph dwarf` (the default): the modules' unwind tables |
//!
//! each with `-e {task-clock/period=250us,jitter=100us/}` (windows at their default
//! length, about 20 times the default budget's sample rate so that the walks' cost stands
//! above this VM's noise; no counters beside the leader, whose own cost per page fault or
//! switch is not a cost per sample and would dilute the ratios), on two targets:
//!
//! - `workload`: the bundled workload (`strobe workload --rounds N --threads 2`), Rust built
//!   as strobe is (no frame pointers), two worker threads, fixed work;
//! - `unwind_nofp`: the C test program `tests/c/unwind_nofp.c` (main -> a -> b calling libc's
//!   mmap, memset and munmap, beside main -> c), compiled here with the flags of its
//!   `// strobe-testprogs:` line (`-O2 -fomit-frame-pointer`), which runs for a fixed CPU
//!   time and prints its loops.
//!
//! Figures:
//!
//! - **Cost per sample** (`sample_cost_us`): the extra CPU time of the target's work under
//!   the recording, over the samples the agent's handler took (window starts and ends: a
//!   walk each). The C program's work is its loops: extra = CPU - loops x the bare run's
//!   CPU per loop. The host's speed drifts by tens of percent over minutes, so every repeat
//!   runs each target bare, none, fp, dwarf, then dwarf, fp, none, bare, and each recorded
//!   run is compared with the bare run of its own four. Quoted: the medians of those paired
//!   costs and of the paired ratios fp/none and dwarf/none, with distribution-free 95%
//!   intervals for the medians; a ratio goal is met only when its whole interval is under
//!   it, missed when all of it is over, undecided otherwise. The recorder's own CPU per
//!   sample (the `strobe record` process: draining, interning stacks, writing; its ~20 ms
//!   calibration run included) is shown beside it, not judged.
//! - **Bytes per sample**: the record file's size over those samples.
//! - **Complete** (`complete_pct`): the share of the time samples in `strobe report
//!   --format folded` whose outermost frame is where a thread begins: `_start` for the main
//!   thread, glibc's `clone3` (or `clone`) for the others, the frames glibc's unwind tables
//!   mark outermost. A walk that stops early (a frame it cannot read, garbage, the depth
//!   limit) ends elsewhere, and so does every stack of `none`.
//! - **Report throughput**: strobe bench report's C program (20 calls deep, 1024 distinct
//!   paths, two threads; built with frame pointers so that perf's walk sees every frame too)
//!   recorded for the same wall time by `strobe record --call-graph dwarf -e
//!   {task-clock/period=50us,window=0/,page-faults,context-switches}` and by `perf record
//!   -g -e task-clock:u -c 50000`. `strobe report FILE` (its table: self and total time
//!   from the stacks) and `perf report -g --stdio` on perf's file are each timed end to end
//!   as a process (median of the repeats), in samples per second; `strobe report` on perf's
//!   own file is shown beside. Without perf that comparison is skipped, saying why.
//!
//! `STROBE_BENCH_KEEP=1` keeps the scratch directory (programs, record files, perf.data).
//!
//! Nothing is invented: when `strobe record` or the compiler cannot run, the benchmark
//! fails saying so. This module must never be linked into the agent or a target; it drives
//! commands.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::{json, Map, Value};
use strobe_format::SampleKind;

use crate::drive::{
    children_cpu_s, find_perf, io, last_line, med, perf_samples, r3, run_stdout, Scratch,
};
use crate::report::{machine_summary, row};
use crate::stats::{median, median_interval};
use crate::{BenchError, BenchOpts, BenchReport};

/// The variants, in the order of a forward run.
const VARIANTS: [&str; 3] = ["none", "fp", "dwarf"];
/// The event group of the cost runs.
const EVENTS: &str = "{task-clock/period=250us,jitter=100us/}";
/// The event group of the report-throughput recording.
const DEEP_EVENTS: &str = "{task-clock/period=50us,window=0/,page-faults,context-switches}";
/// perf's period for the same program, ns of task-clock.
const DEEP_PERF_PERIOD: u64 = 50_000;
/// Worker threads of the workload: as many as this VM has CPUs.
const THREADS: usize = 2;
/// The C test program, compiled here.
const C_SOURCE: &str = include_str!("../../../tests/c/unwind_nofp.c");

/// The goals.
const GOAL_FP_RATIO: f64 = 1.1;
const GOAL_DWARF_RATIO: f64 = 1.3;
const GOAL_BYTES_RATIO: f64 = 2.0;
const GOAL_COMPLETE_PCT: f64 = 99.0;
const GOAL_REPORT_SAMPLES_PER_S: f64 = 2e6;
const GOAL_REPORT_VS_PERF: f64 = 10.0;
/// Confidence asked of the interval around a paired median.
const CONFIDENCE: f64 = 0.95;

/// How much to run.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Plan {
    /// Rounds of the workload per thread (each about 6 ms of CPU).
    rounds: u64,
    /// CPU milliseconds of the C program.
    c_ms: u64,
    repeats: usize,
    /// Wall seconds of the deep program's recordings.
    deep_s: f64,
    quick: bool,
}

impl Plan {
    fn new(opts: &BenchOpts) -> Plan {
        if opts.quick {
            Plan { rounds: 30, c_ms: 300, repeats: 1, deep_s: 1.0, quick: true }
        } else {
            Plan {
                rounds: 150,
                c_ms: 1500,
                repeats: opts.repeats.max(1),
                deep_s: 6.0,
                quick: false,
            }
        }
    }
}

/// A target's own measurement of one run.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Run {
    /// The target's process CPU time, s.
    cpu_s: f64,
    /// Its work: 1 for the workload's fixed rounds, the C program's loops.
    work: f64,
}

/// One recorded run.
#[derive(Debug, Clone, PartialEq)]
struct Recorded {
    run: Run,
    /// Samples the handler took (plain, window starts and ends).
    samples: u64,
    bytes: u64,
    /// `strobe record`'s own CPU time, s.
    recorder_s: f64,
    /// Share of the folded time samples whose stack reaches the thread's entry, 0..1.
    complete: f64,
    /// Mean frames per sample (the sampled function and its callers).
    depth: f64,
}

/// A bare run and the three variants measured beside it.
#[derive(Debug, Clone, PartialEq)]
struct Group {
    bare: Run,
    /// In [`VARIANTS`] order.
    rec: Vec<Recorded>,
}

/// The report-throughput comparison.
#[derive(Debug, Clone, PartialEq)]
struct Speed {
    strobe_samples: u64,
    strobe_depth: f64,
    strobe_s: Vec<f64>,
    perf: Result<PerfSpeed, String>,
}

#[derive(Debug, Clone, PartialEq)]
struct PerfSpeed {
    samples: u64,
    perf_report_s: Vec<f64>,
    strobe_on_perf_s: Vec<f64>,
}

/// Everything measured, before it is summarized.
#[derive(Debug, Clone, PartialEq)]
struct Measured {
    plan: Plan,
    /// Per target (`workload`, `unwind_nofp`), its groups in run order.
    targets: Vec<(&'static str, Vec<Group>)>,
    speed: Speed,
}

/// The target programs.
enum Target {
    Workload,
    C(PathBuf),
}

impl Target {
    fn name(&self) -> &'static str {
        match self {
            Target::Workload => "workload",
            Target::C(_) => "unwind_nofp",
        }
    }
}

/// Runs `strobe bench stacks`.
pub(crate) fn run(opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    let exe = opts.strobe_exe.clone().ok_or_else(|| {
        BenchError::Other(
            "the stacks benchmark drives the strobe executable; run it as `strobe bench stacks`"
                .into(),
        )
    })?;
    let plan = Plan::new(opts);
    let scratch = Scratch::new("stacks")?;
    let dir = scratch.path();
    let c_prog = compile_c(dir)?;
    let targets = [Target::Workload, Target::C(c_prog)];
    let mut measured: Vec<(&'static str, Vec<Group>)> =
        targets.iter().map(|t| (t.name(), Vec::new())).collect();
    for rep in 0..plan.repeats {
        eprintln!("strobe bench stacks: repeat {} of {}", rep + 1, plan.repeats);
        for (t, target) in targets.iter().enumerate() {
            for reverse in [false, true] {
                let g = group(&exe, dir, target, &plan, reverse)?;
                measured[t].1.push(g);
            }
        }
    }
    eprintln!("strobe bench stacks: report throughput");
    let speed = report_speed(&exe, dir, &plan, opts.repeats.max(1))?;
    Ok(summarize(&Measured { plan, targets: measured, speed }))
}

/// The compiler flags of a test program's `// strobe-testprogs:` line.
fn marker_flags(source: &str) -> Vec<String> {
    source
        .lines()
        .find_map(|l| l.trim().strip_prefix("// strobe-testprogs:"))
        .map(|f| f.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Compiles tests/c/unwind_nofp.c as strobe-testprogs does.
fn compile_c(dir: &Path) -> Result<PathBuf, BenchError> {
    let src = dir.join("unwind_nofp.c");
    let exe = dir.join("unwind_nofp");
    std::fs::write(&src, C_SOURCE).map_err(io("writing unwind_nofp.c"))?;
    let out = Command::new("cc")
        .args(["-g", "-pthread", "-Wall"])
        .args(marker_flags(C_SOURCE))
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .map_err(|e| {
            BenchError::Unsupported(format!("cannot run cc ({e}): install gcc (ci/setup.sh does)"))
        })?;
    if !out.status.success() {
        return Err(BenchError::Other(format!(
            "compiling unwind_nofp.c failed: {}",
            last_line(&out.stderr)
        )));
    }
    Ok(exe)
}

/// `key=value` pairs a test program prints.
fn fields(stdout: &[u8]) -> Vec<(String, f64)> {
    String::from_utf8_lossy(stdout)
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

fn field(stdout: &[u8], key: &str, what: &str) -> Result<f64, BenchError> {
    fields(stdout)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
        .ok_or_else(|| BenchError::Other(format!("{what} printed no {key}= (its output changed?)")))
}

/// The target's command line; for the workload, its truth file.
fn target_args(exe: &Path, target: &Target, plan: &Plan, truth: &Path) -> Vec<OsString> {
    match target {
        Target::Workload => vec![
            exe.into(),
            "workload".into(),
            "--rounds".into(),
            plan.rounds.to_string().into(),
            "--threads".into(),
            THREADS.to_string().into(),
            "--truth".into(),
            truth.into(),
        ],
        Target::C(p) => vec![p.into(), plan.c_ms.to_string().into()],
    }
}

/// The target's own measurement of the run that just ended.
fn target_run(target: &Target, stdout: &[u8], truth: &Path) -> Result<Run, BenchError> {
    match target {
        Target::Workload => {
            let text = std::fs::read(truth).map_err(io("reading the workload's truth"))?;
            let v: Value = serde_json::from_slice(&text).map_err(|e| {
                BenchError::Other(format!("{}: not the workload's truth: {e}", truth.display()))
            })?;
            let cpu = v["process_cpu_ns"].as_u64().ok_or_else(|| {
                BenchError::Other(format!("{}: no process_cpu_ns", truth.display()))
            })?;
            Ok(Run { cpu_s: cpu as f64 / 1e9, work: 1.0 })
        }
        Target::C(_) => Ok(Run {
            cpu_s: field(stdout, "process_cpu_ns", "unwind_nofp")? / 1e9,
            work: field(stdout, "loops", "unwind_nofp")?,
        }),
    }
}

/// bare, none, fp, dwarf (or the reverse) of one target.
fn group(
    exe: &Path,
    dir: &Path,
    target: &Target,
    plan: &Plan,
    reverse: bool,
) -> Result<Group, BenchError> {
    let mut order: Vec<Option<&str>> = vec![None];
    order.extend(VARIANTS.iter().map(|v| Some(*v)));
    if reverse {
        order.reverse();
    }
    let mut bare = None;
    let mut rec: Vec<(usize, Recorded)> = Vec::new();
    for step in order {
        match step {
            None => bare = Some(run_bare(exe, dir, target, plan)?),
            Some(v) => {
                let i = VARIANTS.iter().position(|x| *x == v).unwrap_or(0);
                rec.push((i, record(exe, dir, target, plan, v)?));
            }
        }
    }
    rec.sort_by_key(|(i, _)| *i);
    let bare = bare.ok_or_else(|| BenchError::Other("no bare run in a group".into()))?;
    Ok(Group { bare, rec: rec.into_iter().map(|(_, r)| r).collect() })
}

fn run_bare(exe: &Path, dir: &Path, target: &Target, plan: &Plan) -> Result<Run, BenchError> {
    let truth = dir.join("bare.truth.json");
    let args = target_args(exe, target, plan, &truth);
    let stdout = run_stdout(Command::new(&args[0]).args(&args[1..]), target.name())?;
    target_run(target, &stdout, &truth)
}

/// The target under `strobe record --call-graph VARIANT -e EVENTS`, then its file's figures.
fn record(
    exe: &Path,
    dir: &Path,
    target: &Target,
    plan: &Plan,
    variant: &str,
) -> Result<Recorded, BenchError> {
    let file = dir.join(format!("{}-{variant}.strobe", target.name()));
    let truth = dir.join(format!("{variant}.truth.json"));
    let _ = std::fs::remove_file(&file);
    let before = children_cpu_s();
    let stdout = run_stdout(
        Command::new(exe)
            .arg("record")
            .arg("-o")
            .arg(&file)
            .args(["--call-graph", variant, "-e", EVENTS, "--"])
            .args(target_args(exe, target, plan, &truth)),
        &format!("strobe record --call-graph {variant} ({})", target.name()),
    )?;
    let children = children_cpu_s() - before;
    let run = target_run(target, &stdout, &truth)?;
    let (samples, depth) = file_samples(&file)?;
    let bytes = std::fs::metadata(&file).map_err(io("reading the record file's size"))?.len();
    let folded = run_stdout(
        Command::new(exe).arg("report").arg(&file).args(["--format", "folded", "--quiet"]),
        &format!("strobe report --format folded ({})", target.name()),
    )?;
    Ok(Recorded {
        run,
        samples,
        bytes,
        recorder_s: (children - run.cpu_s).max(0.0),
        complete: complete_share(&folded),
        depth,
    })
}

/// The handler's samples in a record file (plain, window starts and ends) and their mean
/// frames (the sampled function and its callers in the stack table).
fn file_samples(file: &Path) -> Result<(u64, f64), BenchError> {
    let rec = strobe_format::read_all(file)
        .map_err(|e| BenchError::Other(format!("reading {}: {e}", file.display())))?;
    if let Some(at) = rec.truncated_at {
        return Err(BenchError::Other(format!(
            "{} is cut short at byte {at}: strobe record did not finish its file",
            file.display()
        )));
    }
    let (mut n, mut frames) = (0u64, 0u64);
    for p in &rec.processes {
        // Depth of every node, parents first (ids are handed out parents first).
        let mut depth = vec![0u64; p.stacks.len() + 1];
        for (i, node) in p.stacks.iter().enumerate() {
            depth[i + 1] = depth.get(node.parent as usize).copied().unwrap_or(0) + 1;
        }
        for s in &p.samples {
            if matches!(s.kind, SampleKind::Plain | SampleKind::WindowStart | SampleKind::WindowEnd)
            {
                n += 1;
                frames += 1 + depth.get(s.stack as usize).copied().unwrap_or(0);
            }
        }
    }
    Ok((n, frames as f64 / n.max(1) as f64))
}

/// True when `frame`, the outermost of a path, is where a thread begins (module note).
fn is_entry(frame: &str) -> bool {
    frame == "_start" || frame.ends_with("clone3") || frame.ends_with("clone")
}

/// Share of the folded lines' samples whose outermost frame is a thread's entry; the row
/// of unsampled time is left out.
fn complete_share(folded: &[u8]) -> f64 {
    let (mut all, mut complete) = (0u64, 0u64);
    for line in String::from_utf8_lossy(folded).lines() {
        if line.starts_with("[not sampled]") {
            continue;
        }
        let Some((stack, n)) = line.rsplit_once(' ') else { continue };
        let Ok(n) = n.parse::<u64>() else { continue };
        all += n;
        if stack.split(';').next().is_some_and(is_entry) {
            complete += n;
        }
    }
    complete as f64 / all.max(1) as f64
}

/// Seconds `make()`'s command takes to its end (stdout discarded), each of `repeats` runs.
fn times(
    repeats: usize,
    mut make: impl FnMut() -> Command,
    what: &str,
) -> Result<Vec<f64>, BenchError> {
    let mut v = Vec::with_capacity(repeats);
    for _ in 0..repeats.max(1) {
        let mut cmd = make();
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let t0 = Instant::now();
        let out = cmd.output().map_err(|source| BenchError::Io { what: what.into(), source })?;
        let t = t0.elapsed().as_secs_f64();
        if !out.status.success() {
            return Err(BenchError::Other(format!(
                "{what} failed ({}): {}",
                out.status,
                last_line(&out.stderr)
            )));
        }
        v.push(t);
    }
    Ok(v)
}

/// The report-throughput comparison (module note).
fn report_speed(exe: &Path, dir: &Path, plan: &Plan, repeats: usize) -> Result<Speed, BenchError> {
    let src = dir.join("deep.c");
    let deep = dir.join("deep");
    std::fs::write(&src, crate::views::program_source()).map_err(io("writing deep.c"))?;
    let out = Command::new("cc")
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-fno-optimize-sibling-calls", "-pthread"])
        .arg("-o")
        .arg(&deep)
        .arg(&src)
        .output()
        .map_err(io("running cc"))?;
    if !out.status.success() {
        return Err(BenchError::Other(format!("cc deep.c failed: {}", last_line(&out.stderr))));
    }
    let seconds = format!("{:.2}", plan.deep_s);
    let file = dir.join("deep.strobe");
    run_stdout(
        Command::new(exe)
            .arg("record")
            .arg("-o")
            .arg(&file)
            .args(["--call-graph", "dwarf", "-e", DEEP_EVENTS, "--"])
            .arg(&deep)
            .arg(&seconds),
        "strobe record of the deep program",
    )?;
    let (strobe_samples, strobe_depth) = file_samples(&file)?;
    let strobe_s = times(
        repeats,
        || {
            let mut c = Command::new(exe);
            c.arg("report").arg(&file).arg("--quiet");
            c
        },
        "strobe report of the deep program",
    )?;
    let perf = find_perf().and_then(|perf| {
        let data = dir.join("deep.perf.data");
        let recorded = Command::new(&perf)
            .args(["record", "-q", "-g", "-e", "task-clock:u", "-c"])
            .arg(DEEP_PERF_PERIOD.to_string())
            .arg("-o")
            .arg(&data)
            .arg("--")
            .arg(&deep)
            .arg(&seconds)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("perf record could not start: {e}"))?;
        if !recorded.status.success() {
            return Err(format!("perf record failed: {}", last_line(&recorded.stderr)));
        }
        let samples = perf_samples(&data).map_err(|e| e.to_string())?;
        let report = |strobe: bool| {
            times(
                repeats,
                || {
                    let mut c = if strobe { Command::new(exe) } else { Command::new(&perf) };
                    if strobe {
                        c.arg("report").arg(&data).arg("--quiet");
                    } else {
                        c.args(["report", "-g", "--stdio", "-i"]).arg(&data);
                    }
                    c
                },
                if strobe { "strobe report of perf.data" } else { "perf report -g --stdio" },
            )
            .map_err(|e| e.to_string())
        };
        Ok(PerfSpeed { samples, perf_report_s: report(false)?, strobe_on_perf_s: report(true)? })
    });
    Ok(Speed { strobe_samples, strobe_depth, strobe_s, perf })
}

fn mark(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "UNDECIDED",
    }
}

/// A goal `value <= goal` judged on a median with its interval `(low, high, coverage)`:
/// met when the whole interval is under it, missed when all of it is over, undecided
/// otherwise or when too few pairs give the interval its [`CONFIDENCE`].
fn verdict_at_most(interval: Option<(f64, f64, f64)>, goal: f64) -> Option<bool> {
    match interval {
        Some((_, _, coverage)) if coverage < CONFIDENCE => None,
        Some((_, hi, _)) if hi <= goal => Some(true),
        Some((lo, _, _)) if lo > goal => Some(false),
        _ => None,
    }
}

/// The figures of one target's variant.
struct Figures {
    cost_us: f64,
    cost_interval: Option<(f64, f64, f64)>,
    /// Paired ratio to `none`'s cost (1 for `none` itself).
    ratio: f64,
    ratio_interval: Option<(f64, f64, f64)>,
    bytes_per_sample: f64,
    complete_pct: f64,
    depth: f64,
    recorder_us: f64,
    samples: f64,
    pairs: usize,
}

/// The extra CPU time of a recorded run over its bare run's pace, s.
fn extra_s(bare: Run, r: &Recorded) -> f64 {
    r.run.cpu_s - r.run.work * bare.cpu_s / bare.work.max(1e-12)
}

fn figures(groups: &[Group], v: usize) -> Figures {
    let cost: Vec<f64> = groups
        .iter()
        .map(|g| 1e6 * extra_s(g.bare, &g.rec[v]) / g.rec[v].samples.max(1) as f64)
        .collect();
    let ratios: Vec<f64> = groups
        .iter()
        .map(|g| {
            let none = extra_s(g.bare, &g.rec[0]) / g.rec[0].samples.max(1) as f64;
            let this = extra_s(g.bare, &g.rec[v]) / g.rec[v].samples.max(1) as f64;
            this / none
        })
        .collect();
    let recs = || groups.iter().map(|g| &g.rec[v]);
    Figures {
        cost_us: median(&cost),
        cost_interval: median_interval(&cost, CONFIDENCE),
        ratio: median(&ratios),
        ratio_interval: if v == 0 { None } else { median_interval(&ratios, CONFIDENCE) },
        bytes_per_sample: med(recs().map(|r| r.bytes as f64 / r.samples.max(1) as f64)),
        complete_pct: 100.0 * med(recs().map(|r| r.complete)),
        depth: med(recs().map(|r| r.depth)),
        recorder_us: med(recs().map(|r| 1e6 * r.recorder_s / r.samples.max(1) as f64)),
        samples: med(recs().map(|r| r.samples as f64)),
        pairs: groups.len(),
    }
}

fn interval_json(i: Option<(f64, f64, f64)>) -> Value {
    i.map_or(Value::Null, |(lo, hi, _)| json!([r3(lo), r3(hi)]))
}

/// Turns the measurements into the report: rows, top-level figures, the table and goals.
fn summarize(m: &Measured) -> BenchReport {
    let mut report = BenchReport::new("stacks");
    let mut t = String::new();
    let _ = writeln!(
        t,
        "strobe bench stacks{}: call stacks walked in the target's signal handler, none vs fp \
         vs dwarf\nmachine: {}\nevents: -e '{EVENTS}'; workload: {} rounds x {THREADS} \
         threads; unwind_nofp: {} ms of CPU; {} pairs per target (each recorded run against \
         the bare run beside it), medians\n",
        if m.plan.quick { " (--quick: figures not quotable)" } else { "" },
        machine_summary(),
        m.plan.rounds,
        m.plan.c_ms,
        m.targets.first().map_or(0, |(_, g)| g.len()),
    );
    let _ = writeln!(
        t,
        "{:<12} {:<6} {:>10} {:>17} {:>7} {:>15} {:>9} {:>9} {:>6} {:>10} {:>8}",
        "target",
        "walk",
        "cost_us",
        "95% interval",
        "x none",
        "95% interval",
        "bytes/s",
        "complete",
        "depth",
        "recorder",
        "samples"
    );
    let mut goals: Vec<(String, String, Option<bool>)> = Vec::new();
    for (name, groups) in &m.targets {
        let fs: Vec<Figures> = (0..VARIANTS.len()).map(|v| figures(groups, v)).collect();
        for (v, f) in fs.iter().enumerate() {
            let iv = |i: Option<(f64, f64, f64)>, p: usize| {
                i.map_or_else(String::new, |(lo, hi, _)| format!("{lo:.*} to {hi:.*}", p, p))
            };
            let _ = writeln!(
                t,
                "{:<12} {:<6} {:>10.2} {:>17} {:>7.2} {:>15} {:>9.1} {:>8.1}% {:>6.1} {:>8.2}us {:>8.0}",
                name,
                VARIANTS[v],
                f.cost_us,
                iv(f.cost_interval, 2),
                f.ratio,
                iv(f.ratio_interval, 2),
                f.bytes_per_sample,
                f.complete_pct,
                f.depth,
                f.recorder_us,
                f.samples
            );
            let mut r = row([
                ("variant", VARIANTS[v].into()),
                ("target", (*name).into()),
                ("sample_cost_us", r3(f.cost_us).into()),
                ("sample_cost_interval_us", interval_json(f.cost_interval)),
                ("cost_ratio_to_none", r3(f.ratio).into()),
                ("cost_ratio_interval", interval_json(f.ratio_interval)),
                ("bytes_per_sample", r3(f.bytes_per_sample).into()),
                ("complete_pct", r3(f.complete_pct).into()),
                ("mean_depth", r3(f.depth).into()),
                ("recorder_us_per_sample", r3(f.recorder_us).into()),
                ("samples", r3(f.samples).into()),
                ("pairs", f.pairs.into()),
            ]);
            if v == 0 {
                r.remove("cost_ratio_interval");
            }
            report.rows.push(r);
        }
        let (fp, dwarf, none) = (&fs[1], &fs[2], &fs[0]);
        goals.push((
            format!("{name}: fp cost <= {GOAL_FP_RATIO}x none"),
            format!("{:.2}x", fp.ratio),
            verdict_at_most(fp.ratio_interval, GOAL_FP_RATIO),
        ));
        goals.push((
            format!("{name}: dwarf cost <= {GOAL_DWARF_RATIO}x none"),
            format!("{:.2}x", dwarf.ratio),
            verdict_at_most(dwarf.ratio_interval, GOAL_DWARF_RATIO),
        ));
        let bytes = dwarf.bytes_per_sample / none.bytes_per_sample.max(1e-12);
        goals.push((
            format!("{name}: dwarf bytes/sample <= {GOAL_BYTES_RATIO}x none"),
            format!("{bytes:.2}x"),
            Some(bytes <= GOAL_BYTES_RATIO),
        ));
        goals.push((
            format!("{name}: dwarf stacks reaching the entry >= {GOAL_COMPLETE_PCT}%"),
            format!("{:.2}% (fp {:.2}%)", dwarf.complete_pct, fp.complete_pct),
            Some(dwarf.complete_pct >= GOAL_COMPLETE_PCT),
        ));
    }
    let _ = writeln!(
        t,
        "\ncost_us: the target's extra CPU per sample (a handler run: window starts and ends); \
         x none: the paired ratio to none; bytes/s: file bytes per sample; complete: time \
         samples whose outermost frame is _start or clone3; depth: mean frames per sample; \
         recorder: strobe record's own CPU per sample (its calibration included)"
    );

    let s = &m.speed;
    let strobe_s = median(&s.strobe_s);
    let sps = s.strobe_samples as f64 / strobe_s.max(1e-12);
    let _ = writeln!(
        t,
        "\nreport throughput, depth {:.1} (strobe bench report's program, {} s recorded):",
        s.strobe_depth, m.plan.deep_s
    );
    let _ = writeln!(
        t,
        "  strobe report (table, self and total)   {:>8} samples {:>8.3} s {:>7.2} M samples/s",
        s.strobe_samples,
        strobe_s,
        sps / 1e6
    );
    report.extra.insert("report_samples_per_s".into(), json!(sps.round()));
    report.extra.insert("report_mean_depth".into(), json!(r3(s.strobe_depth)));
    report.extra.insert("report_samples".into(), json!(s.strobe_samples));
    goals.push((
        format!("strobe report >= {} M samples/s at depth ~20", GOAL_REPORT_SAMPLES_PER_S / 1e6),
        format!("{:.2} M/s", sps / 1e6),
        Some(sps >= GOAL_REPORT_SAMPLES_PER_S),
    ));
    match &s.perf {
        Ok(p) => {
            let perf_s = median(&p.perf_report_s);
            let perf_sps = p.samples as f64 / perf_s.max(1e-12);
            let ours_s = median(&p.strobe_on_perf_s);
            let ours_sps = p.samples as f64 / ours_s.max(1e-12);
            let _ = writeln!(
                t,
                "  perf report -g --stdio (perf record -g) {:>8} samples {:>8.3} s {:>7.2} M samples/s",
                p.samples,
                perf_s,
                perf_sps / 1e6
            );
            let _ = writeln!(
                t,
                "  strobe report of the same perf.data     {:>8} samples {:>8.3} s {:>7.2} M samples/s",
                p.samples,
                ours_s,
                ours_sps / 1e6
            );
            report.extra.insert("perf_report_samples_per_s".into(), json!(perf_sps.round()));
            // The same names as strobe bench kernel-mode's for the same figures.
            report.extra.insert("report_perf_data_samples_per_s".into(), json!(ours_sps.round()));
            report.extra.insert(
                "report_perf_data_vs_perf_report".into(),
                json!(r3(ours_sps / perf_sps.max(1e-12))),
            );
            let ratio = sps / perf_sps.max(1e-12);
            goals.push((
                format!("strobe report >= {GOAL_REPORT_VS_PERF}x perf report's samples/s"),
                format!("{ratio:.1}x"),
                Some(ratio >= GOAL_REPORT_VS_PERF),
            ));
        }
        Err(why) => {
            let _ = writeln!(t, "  perf report -g --stdio: skipped: {why}");
            report.extra.insert("perf_report_samples_per_s".into(), Value::Null);
            report.extra.insert("perf_skipped".into(), json!(why));
        }
    }
    let _ = writeln!(t, "\ngoals:");
    let mut goal_json = Map::new();
    for (goal, value, met) in &goals {
        let _ = writeln!(t, "  {:<9} {goal}: {value}", mark(*met));
        goal_json.insert(goal.clone(), json!({"value": value, "verdict": mark(*met)}));
    }
    report.extra.insert("events".into(), json!(EVENTS));
    report.extra.insert("goals".into(), Value::Object(goal_json));
    report.text = t;
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(cpu_s: f64, work: f64, samples: u64, bytes: u64, complete: f64) -> Recorded {
        Recorded {
            run: Run { cpu_s, work },
            samples,
            bytes,
            recorder_s: 0.01,
            complete,
            depth: 9.0,
        }
    }

    /// Inputs made up for the arithmetic checks below; nothing here is a measurement.
    /// Nine groups of the C program: a bare run of 100 loops in 1 s, and recorded runs of
    /// 1 s that did 90 (none), 89 (fp) and 88 (dwarf) loops with 2,000 samples each.
    fn measured() -> Measured {
        let group = |k: usize| Group {
            bare: Run { cpu_s: 1.0, work: 100.0 },
            rec: vec![
                rec(1.0, 90.0, 2000, 20_000, 0.0),
                rec(1.0, 89.0, 2000, 22_000, 0.2),
                rec(1.0, if k == 4 { 50.0 } else { 88.0 }, 2000, 30_000, 0.995),
            ],
        };
        Measured {
            plan: Plan { rounds: 10, c_ms: 1000, repeats: 5, deep_s: 1.0, quick: false },
            targets: vec![("unwind_nofp", (0..9).map(group).collect())],
            speed: Speed {
                strobe_samples: 300_000,
                strobe_depth: 21.0,
                strobe_s: vec![0.1, 0.12, 0.5],
                perf: Ok(PerfSpeed {
                    samples: 200_000,
                    perf_report_s: vec![2.0, 2.0, 2.0],
                    strobe_on_perf_s: vec![0.2, 0.2, 0.2],
                }),
            },
        }
    }

    #[test]
    fn costs_are_paired_per_unit_of_work_and_ratios_judged_on_their_intervals() {
        let r = summarize(&measured());
        let v: Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(v["bench"], "stacks");
        let rows = v["rows"].as_array().unwrap();
        let names: Vec<&str> = rows.iter().map(|r| r["variant"].as_str().unwrap()).collect();
        assert_eq!(names, ["none", "fp", "dwarf"]);
        // none: 1 s - 90 loops x 10 ms = 0.1 s over 2,000 samples = 50 us.
        assert_eq!(rows[0]["sample_cost_us"], 50.0);
        // fp: 0.11 s / 2000 = 55 us, 1.1x; dwarf: 0.12 s / 2000 = 60 us, 1.2x (the
        // outlier group with 50 loops is one of nine and stays outside the median).
        assert_eq!(rows[1]["sample_cost_us"], 55.0);
        assert_eq!(rows[2]["sample_cost_us"], 60.0);
        assert_eq!(rows[2]["cost_ratio_to_none"], 1.2);
        assert_eq!(rows[0]["bytes_per_sample"], 10.0);
        assert_eq!(rows[2]["bytes_per_sample"], 15.0);
        assert_eq!(rows[2]["complete_pct"], 99.5);
        // 300,000 samples in the median 0.12 s: 2.5 M/s; perf 0.1 M/s.
        assert_eq!(v["report_samples_per_s"], 2_500_000.0);
        assert_eq!(v["perf_report_samples_per_s"], 100_000.0);
        let text = &r.text;
        // fp's ratio is 1.1 in every group: its interval touches the goal, met.
        assert!(text.contains("met       unwind_nofp: fp cost <= 1.1x none: 1.10x"), "{text}");
        assert!(text.contains("met       unwind_nofp: dwarf cost <= 1.3x none: 1.20x"), "{text}");
        assert!(text.contains("met       unwind_nofp: dwarf bytes/sample <= 2x none: 1.50x"));
        assert!(text.contains("reaching the entry >= 99%: 99.50% (fp 20.00%)"), "{text}");
        assert!(text.contains("strobe report >= 10x perf report's samples/s: 25.0x"), "{text}");
    }

    #[test]
    fn a_ratio_whose_interval_straddles_the_goal_is_undecided() {
        let mut m = measured();
        for (k, g) in m.targets[0].1.iter_mut().enumerate() {
            // dwarf's extra CPU 0.11 .. 0.15 s: ratios 1.1 .. 1.5 around the 1.3 goal.
            g.rec[2].run.work = 89.0 - 0.5 * k as f64;
        }
        let text = summarize(&m).text;
        assert!(text.contains("UNDECIDED unwind_nofp: dwarf cost <= 1.3x none"), "{text}");
        assert_eq!(verdict_at_most(Some((1.4, 1.6, 0.96)), 1.3), Some(false));
        assert_eq!(verdict_at_most(Some((1.0, 1.2, 0.5)), 1.3), None);
    }

    #[test]
    fn without_perf_the_comparison_says_why() {
        let mut m = measured();
        m.speed.perf = Err("perf is not installed".into());
        let r = summarize(&m);
        assert!(r.text.contains("perf report -g --stdio: skipped: perf is not installed"));
        let v: Value = serde_json::from_str(&r.to_json()).unwrap();
        assert!(v["perf_report_samples_per_s"].is_null());
    }

    #[test]
    fn complete_stacks_are_those_that_start_at_a_thread_entry() {
        let folded = b"_start;__libc_start_main;main;a 6\nclone3;start_thread;w;f 3\n\
                       f 1\n[not sampled] 40\n";
        assert_eq!(complete_share(folded), 0.9);
        assert_eq!(complete_share(b""), 0.0);
    }

    #[test]
    fn the_c_program_is_compiled_with_its_own_flags_and_prints_its_work() {
        assert_eq!(marker_flags(C_SOURCE), ["-O2", "-fomit-frame-pointer"]);
        let out = b"a_cpu_ns=650 process_cpu_ns=1000000000 loops=250\n";
        let r = target_run(&Target::C(PathBuf::new()), out, Path::new("")).unwrap();
        assert_eq!(r, Run { cpu_s: 1.0, work: 250.0 });
        assert!(target_run(&Target::C(PathBuf::new()), b"", Path::new("")).is_err());
    }
}
