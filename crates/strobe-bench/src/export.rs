//! `strobe bench export`: what exporting a recording as OTLP profiles costs, beside the
//! other formats of the same recording.
//!
//! One recording of the bundled workload at strobe's defaults (2 threads, 10 s; 2 s with
//! `--quick`). Side by side, per format: its bytes and bytes per time sample, and the CPU
//! time (this thread's, `CLOCK_THREAD_CPUTIME_ID`, median of the repeats) to encode it
//! from the finished report, which is what `strobe record --every` will do once per
//! interval:
//!
//! - strobe's own record file (as `strobe record` wrote it: every sample, window ends
//!   included; no encode step, the recorder writes it as it goes);
//! - pprof (`strobe report --pprof`: profile.proto, gzipped);
//! - OTLP protobuf, and OTLP protobuf gzipped (what `--export` sends).
//!
//! Then the cost of sending one interval's request to a real OpenTelemetry Collector
//! (v0.161.0, tests/otelcol, built by ci/otelcol.sh; found beside the strobe binary's
//! target directory or at `$STROBE_OTELCOL`) on 127.0.0.1 with the file exporter: CPU
//! time and wall time per request on a kept-alive connection, gzipped and not.
//!
//! Then the continuous mode (`strobe record -a --every 10s --export URL`, no local file)
//! for 10 minutes (`--quick`: 1 minute at 5 s) on a busy machine: two threads of the
//! bundled workload keep both CPUs busy, and a shell starts a short process (`dd`, about
//! 10 ms of CPU) every 100 ms, so processes keep coming and going. Reported: the strobe
//! process's CPU share of one CPU from a tenth of the run to its end (and per thread:
//! the recorder, the interval cutter, the sender), its resident memory (the median over
//! one interval, read four times a second: it rises and falls within each) up to a tenth
//! of the run (minute 1) and up to its end (minute 10), the profiles sent and not sent, and the
//! process reports it built (one per process with samples per interval: the machine's
//! own processes count, so the share depends on what else runs) with the CPU per report.
//!
//! This module must never be linked into the agent; it drives strobe and the collector
//! as a user would.

use std::fmt::Write as _;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use strobe_otlp::profile::{build, ProcessProfile};
use strobe_otlp::resource::{attributes, ProcessFacts, ResourceConfig};
use strobe_otlp::transport::{Outcome, Transport};
use strobe_otlp::{ExportConfig, FileOptions, Payload, RetryPolicy};

use crate::drive::{check, io, r3, Scratch};
use crate::report::{machine_summary, row, BenchOpts, BenchReport};
use crate::stats::median;
use crate::BenchError;

/// This thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    // SAFETY: clock_gettime fills a valid timespec.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the clock id is a constant the kernel knows.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Median CPU time (us) of `f` over `repeats` runs.
fn cpu_us(repeats: usize, mut f: impl FnMut()) -> f64 {
    let mut xs = Vec::new();
    for _ in 0..repeats {
        let t = thread_cpu_ns();
        f();
        xs.push((thread_cpu_ns() - t) as f64 / 1e3);
    }
    median(&xs)
}

/// The collector binary, when it was built.
fn otelcol(strobe: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("STROBE_OTELCOL") {
        return Some(PathBuf::from(p));
    }
    // target/{release,debug}/strobe -> target/otelcol/otelcol
    let p = strobe.parent()?.parent()?.join("otelcol/otelcol");
    p.exists().then_some(p)
}

struct Collector(Child);

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_collector(bin: &Path, dir: &Path) -> Result<(Collector, u16), BenchError> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(io("finding a free port"))?
        .port();
    let cfg = dir.join("otelcol.yaml");
    std::fs::write(
        &cfg,
        format!(
            "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{port}\n{}",
            format_args!(
                "exporters:\n  file:\n    path: {}\nservice:\n  telemetry:\n    metrics:\n      level: none\n  pipelines:\n    profiles:\n      receivers: [otlp]\n      exporters: [file]\n",
                dir.join("received.jsonl").display()
            )
        ),
    )
    .map_err(io("writing the collector's config"))?;
    let child = Command::new(bin)
        .arg("--config")
        .arg(&cfg)
        .arg("--feature-gates=service.profilesSupport")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(io("starting the collector"))?;
    let mut c = Collector(child);
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = c.0.try_wait() {
            return Err(BenchError::Other(format!("the collector exited ({status})")));
        }
        if start.elapsed() > Duration::from_secs(30) {
            return Err(BenchError::Other("the collector did not listen within 30 s".into()));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok((c, port))
}

/// A send's median (CPU us, wall ms), or why it did not happen.
type Sent = Result<(f64, f64), String>;

/// One format's figures.
struct Line {
    name: String,
    bytes: u64,
    per_sample: f64,
    encode_us: Option<f64>,
    send: Option<(f64, f64)>,
    skipped: Option<String>,
}

/// One recording's figures: its description and one line per format.
struct Measured {
    what: String,
    samples: u64,
    profiles: u64,
    lines: Vec<Line>,
}

/// Records `cmd` into `rec` with strobe at its defaults.
fn record(strobe: &Path, rec: &Path, cmd: &[&std::ffi::OsStr]) -> Result<(), BenchError> {
    check(
        Command::new(strobe)
            .arg("record")
            .arg("-o")
            .arg(rec)
            .arg("--")
            .args(cmd)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(io("running strobe record"))?,
        "strobe record",
    )?;
    Ok(())
}

/// Measures every format of the recording `rec`.
fn measure(
    name: &str,
    rec: &Path,
    repeats: usize,
    seconds: u64,
    send_to: &Result<Transport, String>,
) -> Result<Measured, BenchError> {
    let strobe_bytes = std::fs::metadata(rec).map_err(io("reading the recording's size"))?.len();
    // The report, read once; the encodes below start from it, as a recorder that has an
    // interval's report would.
    let built = strobe_otlp::from_file(rec, &FileOptions::default())
        .map_err(|e| BenchError::Other(format!("reading the recording: {e}")))?;
    let loaded =
        built.reports.first().ok_or_else(|| BenchError::Other("no process recorded".into()))?;
    let report = &loaded.report;
    let samples = report.samples.max(1);
    let resource = attributes(
        &ResourceConfig::default(),
        &ProcessFacts { pid: 1, ppid: 0, exe: name.to_string(), container_id: None },
    );
    let parts = [ProcessProfile {
        report,
        resource,
        start_unix_ns: 0,
        duration_ns: seconds * 1_000_000_000,
    }];
    let request = build(&parts, "bench");
    let raw = Payload::encode(&request, false);
    let gz = Payload::encode(&request, true);
    let mut pprof = Vec::new();
    strobe_report::pprof::write(report, &mut pprof)
        .map_err(|e| BenchError::Other(format!("pprof: {e}")))?;

    let runs = repeats * 5;
    let enc_raw = cpu_us(runs, || {
        let r = build(&parts, "bench");
        std::hint::black_box(Payload::encode(&r, false));
    });
    let enc_gz = cpu_us(runs, || {
        let r = build(&parts, "bench");
        std::hint::black_box(Payload::encode(&r, true));
    });
    let enc_pprof = cpu_us(runs, || {
        let mut v = Vec::new();
        let _ = strobe_report::pprof::write(report, &mut v);
        std::hint::black_box(v);
    });

    let send = |p: &Payload| -> Sent {
        let t = send_to.as_ref().map_err(Clone::clone)?;
        // One unmeasured request opens the connection the measured ones reuse.
        let _ = t.send(&p.body, p.gzip);
        let (mut cpu, mut wall) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let (c0, w0) = (thread_cpu_ns(), Instant::now());
            let o = t.send(&p.body, p.gzip);
            cpu.push((thread_cpu_ns() - c0) as f64 / 1e3);
            wall.push(w0.elapsed().as_secs_f64() * 1e3);
            if !matches!(o, Outcome::Sent { rejected: 0, .. }) {
                return Err(format!("{o:?}"));
            }
        }
        Ok((median(&cpu), median(&wall)))
    };
    let per = |b: usize| b as f64 / samples as f64;
    let line = |name: &str, bytes: usize, encode_us: Option<f64>| Line {
        name: name.into(),
        bytes: bytes as u64,
        per_sample: per(bytes),
        encode_us,
        send: None,
        skipped: None,
    };
    let mut lines = vec![
        line("strobe record file", strobe_bytes as usize, None),
        line("pprof (gzipped)", pprof.len(), Some(enc_pprof)),
    ];
    for (fmt, p, enc) in [("OTLP protobuf", &raw, enc_raw), ("OTLP protobuf, gzipped", &gz, enc_gz)]
    {
        let (sent, skipped) = match send(p) {
            Ok(x) => (Some(x), None),
            Err(w) => (None, Some(w)),
        };
        lines.push(Line { send: sent, skipped, ..line(fmt, p.body.len(), Some(enc)) });
    }
    Ok(Measured {
        what: format!(
            "{name}: {} time samples, {} call paths, {} functions",
            report.samples,
            report.paths.len(),
            report.functions.len()
        ),
        samples: report.samples,
        profiles: gz.profiles,
        lines,
    })
}

/// Runs the benchmark.
pub(crate) fn run(opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    let strobe = opts.strobe_exe.clone().ok_or_else(|| {
        BenchError::Unsupported(
            "strobe bench export drives the strobe binary; run it through `strobe bench`".into(),
        )
    })?;
    let scratch = Scratch::new("export")?;
    let dir = scratch.path();
    let seconds: u64 = if opts.quick { 2 } else { 10 };
    let repeats = opts.repeats.max(1);

    // The collector, when it was built.
    let mut port = None;
    let (_collector, send_to): (Option<Collector>, Result<Transport, String>) =
        match otelcol(&strobe) {
            None => (None, Err("the collector is not built (bash ci/otelcol.sh builds it)".into())),
            Some(bin) => {
                let (c, p) = start_collector(&bin, dir)?;
                port = Some(p);
                let cfg = ExportConfig {
                    url: format!("http://127.0.0.1:{p}/v1development/profiles"),
                    headers: Vec::new(),
                    ca_file: None,
                    timeout: Duration::from_secs(10),
                    gzip: true,
                    retry: RetryPolicy::default(),
                    queue: 1,
                    spool: None,
                };
                let t = Transport::new(&cfg).map_err(|e| BenchError::Other(e.to_string()))?;
                (Some(c), Ok(t))
            }
        };

    // The bundled workload (few call paths), and the 1024-path program of `bench report`.
    let w = dir.join("workload.strobe");
    let secs = seconds.to_string();
    let args = ["workload", "--seconds", &secs, "--threads", "2"];
    let mut cmd: Vec<&std::ffi::OsStr> = vec![strobe.as_os_str()];
    cmd.extend(args.iter().map(std::ffi::OsStr::new));
    record(&strobe, &w, &cmd)?;
    let mut all = vec![measure("workload", &w, repeats, seconds, &send_to)?];
    let src = dir.join("deep.c");
    let exe = dir.join("deep");
    std::fs::write(&src, crate::views::program_source()).map_err(io("writing deep.c"))?;
    match Command::new("cc").args(["-O1", "-g", "-pthread", "-o"]).arg(&exe).arg(&src).output() {
        Ok(o) if o.status.success() => {
            let d = dir.join("deep.strobe");
            record(&strobe, &d, &[exe.as_os_str(), std::ffi::OsStr::new(&secs)])?;
            all.push(measure("deep (1024 call paths, 21 frames)", &d, repeats, seconds, &send_to)?);
        }
        _ => eprintln!("strobe bench export: no C compiler; measuring the workload only"),
    }

    let mut rows = Vec::new();
    let mut text = format!(
        "strobe bench export: recordings of {seconds} s at strobe's defaults, 2 threads; CPU \
         times are this thread's, median of {} runs; sends go to a Collector v0.161.0 on \
         127.0.0.1 over a kept-alive connection\nmachine: {}\n",
        repeats * 5,
        machine_summary()
    );
    let opt = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1}"));
    for m in &all {
        let _ = writeln!(text, "\n{}; {} profiles in the OTLP request", m.what, m.profiles);
        let _ = writeln!(
            text,
            "{:<26} {:>9} {:>12} {:>14} {:>13} {:>13}",
            "format", "bytes", "bytes/sample", "encode CPU us", "send CPU us", "send wall ms"
        );
        for l in &m.lines {
            let _ = writeln!(
                text,
                "{:<26} {:>9} {:>12.2} {:>14} {:>13} {:>13}",
                l.name,
                l.bytes,
                l.per_sample,
                opt(l.encode_us),
                opt(l.send.map(|x| x.0)),
                l.send.map_or("-".to_string(), |x| format!("{:.2}", x.1)),
            );
            let mut r = row([
                ("recording", json!(m.what)),
                ("samples", json!(m.samples)),
                ("variant", json!(l.name)),
                ("bytes", json!(l.bytes)),
                ("bytes_per_sample", json!(r3(l.per_sample))),
                ("encode_cpu_us", json!(l.encode_us.map(r3))),
                ("send_cpu_us", json!(l.send.map(|x| r3(x.0)))),
                ("send_wall_ms", json!(l.send.map(|x| r3(x.1)))),
            ]);
            if let Some(w) = &l.skipped {
                r.insert("send_skipped".into(), json!(w));
            }
            rows.push(r);
        }
        if let Some(w) = m.lines.iter().find_map(|l| l.skipped.as_ref()) {
            let _ = writeln!(text, "not sent: {w}");
        }
        let bytes = |n: &str| m.lines.iter().find(|l| l.name == n).map_or(1, |l| l.bytes.max(1));
        let _ = writeln!(
            text,
            "OTLP gzipped / pprof: {:.2}x the bytes; OTLP gzipped / strobe file: {:.3}x",
            bytes("OTLP protobuf, gzipped") as f64 / bytes("pprof (gzipped)") as f64,
            bytes("OTLP protobuf, gzipped") as f64 / bytes("strobe record file") as f64
        );
    }
    let mut out = BenchReport::new("export");
    match port {
        Some(p) => {
            let c = continuous(&strobe, dir, p, opts.quick)?;
            let _ = writeln!(text, "\n{}", c.text);
            for (k, v) in c.json {
                out.extra.insert(k, v);
            }
        }
        None => {
            let _ = writeln!(text, "\ncontinuous mode not measured: the collector is not built");
        }
    }
    out.rows = rows;
    out.text = text;
    Ok(out)
}

/// The continuous run's figures.
struct ContinuousRun {
    text: String,
    json: Vec<(String, serde_json::Value)>,
}

/// Ticks (utime + stime) of `/proc/PID/stat` or `/proc/PID/task/TID/stat`, and the comm.
fn ticks(stat: &Path) -> Option<(String, u64)> {
    let s = std::fs::read_to_string(stat).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s[open + 1..close].to_string();
    let f: Vec<&str> = s[close + 2..].split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the comm.
    Some((comm, f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?))
}

/// CPU ticks of each thread of `pid`, by thread name.
fn thread_ticks(pid: u32) -> std::collections::BTreeMap<String, u64> {
    let mut by = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        if let Some((comm, t)) = ticks(&e.path().join("stat")) {
            *by.entry(comm).or_insert(0) += t;
        }
    }
    by
}

/// Resident memory of `pid`, MiB.
fn rss_mb(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// The median of `pid`'s resident memory read four times a second for `over`, MiB.
fn rss_median(pid: u32, over: Duration) -> Option<f64> {
    let end = Instant::now() + over;
    let mut seen = Vec::new();
    while Instant::now() < end {
        seen.push(rss_mb(pid)?);
        std::thread::sleep(Duration::from_millis(250));
    }
    seen.sort_by(f64::total_cmp);
    seen.get(seen.len() / 2).copied()
}

/// Kills a child when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The continuous run: `strobe record -a --every` on a busy machine.
fn continuous(
    strobe: &Path,
    dir: &Path,
    port: u16,
    quick: bool,
) -> Result<ContinuousRun, BenchError> {
    let (seconds, every) = if quick { (60u64, 5u64) } else { (600, 10) };
    const USER_HZ: f64 = 100.0;
    let busy = Reaped(
        Command::new(strobe)
            .args(["workload", "--seconds", &(seconds + 60).to_string(), "--threads", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io("starting the busy workload"))?,
    );
    let churn = Reaped(
        Command::new("sh")
            .args([
                "-c",
                "while :; do dd if=/dev/zero of=/dev/null bs=4k count=20000 2>/dev/null; sleep 0.1; done",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io("starting the process churn"))?,
    );
    let err_path = dir.join("continuous.err");
    let rec = Command::new(strobe)
        .args(["record", "-a", "--every", &format!("{every}s"), "--duration", &seconds.to_string()])
        .arg("--export")
        .arg(format!("http://127.0.0.1:{port}"))
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).map_err(io("creating the run's log"))?)
        .spawn()
        .map_err(io("starting strobe record -a --every"))?;
    let mut rec = Reaped(rec);
    let pid = rec.0.id();
    let start = Instant::now();
    let at = |f: f64| Duration::from_secs_f64(seconds as f64 * f);
    // The resident memory moves within an interval (what it gathers, then the encoding,
    // then the trim after the send): each reading is the median over the last interval
    // before a tenth of the run (minute 1 of 10), and before the end.
    let cycle = Duration::from_secs(every);
    std::thread::sleep(at(0.1).saturating_sub(start.elapsed() + cycle));
    let rss1 = rss_median(pid, cycle);
    let t1 = thread_ticks(pid);
    let w1 = Instant::now();
    std::thread::sleep(at(1.0).saturating_sub(start.elapsed() + Duration::from_secs(3) + cycle));
    let rss10 = rss_median(pid, cycle);
    let t10 = thread_ticks(pid);
    let wall = w1.elapsed().as_secs_f64();
    let status = rec.0.wait().map_err(io("waiting for strobe record"))?;
    drop((busy, churn));
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    if !status.success() {
        return Err(BenchError::Other(format!(
            "strobe record -a --every failed ({status}): {}",
            err.lines().last().unwrap_or("")
        )));
    }
    let (Some(rss1), Some(rss10)) = (rss1, rss10) else {
        return Err(BenchError::Other("strobe record ended before its memory was read".into()));
    };
    let mut per_thread = Vec::new();
    let mut total = 0.0;
    for (name, t) in &t10 {
        let d = (t - t1.get(name).copied().unwrap_or(0)) as f64 / USER_HZ;
        total += d;
        per_thread.push((name.clone(), 100.0 * d / wall));
    }
    let share = 100.0 * total / wall;
    let num_before = |l: &str, key: &str| -> Option<u64> {
        let i = l.find(key)?;
        l[..i].split_whitespace().last()?.parse().ok()
    };
    let sent = err.lines().find_map(|l| num_before(l, " profiles sent to ")).unwrap_or(0);
    // The processes it handled: one report per process with samples per interval. The
    // CPU per report is the window's CPU over the reports of the window, taken as the
    // run's reports in proportion to the window's part of the run.
    let reports = err.lines().find_map(|l| num_before(l, " process reports")).unwrap_or(0);
    let per_interval = reports as f64 / (seconds / every) as f64;
    let window_reports = reports as f64 * wall / seconds as f64;
    let cpu_us_per_report = if window_reports > 0.0 { 1e6 * total / window_reports } else { 0.0 };
    let dropped = err
        .lines()
        .find(|l| l.contains("profiles could not be sent"))
        .and_then(|l| l.split("warning: ").nth(1)?.split_whitespace().next()?.parse().ok())
        .unwrap_or(0u64);
    let summary =
        err.lines().filter(|l| l.starts_with("strobe record:")).collect::<Vec<_>>().join("\n");
    let mut text = format!(
        "continuous: strobe record -a --every {every}s for {seconds} s (no local file), both CPUs \
         busy (strobe workload, 2 threads) and a short process every 100 ms\n"
    );
    let _ = writeln!(
        text,
        "CPU share of one CPU, from {:.0} s to the end: {share:.2}% (goal <= 1%: {})",
        seconds as f64 * 0.1,
        if share <= 1.0 { "met" } else { "missed" }
    );
    for (name, p) in &per_thread {
        let _ = writeln!(text, "  thread {name:<20} {p:.2}%");
    }
    let growth = 100.0 * (rss10 - rss1) / rss1;
    let _ = writeln!(
        text,
        "RSS (median over an interval) to {:.0} s {rss1:.1} MB, to {:.0} s {rss10:.1} MB \
         ({growth:+.1}%; goal within 10%: {})",
        seconds as f64 * 0.1,
        seconds as f64 - 3.0,
        if growth.abs() <= 10.0 { "met" } else { "missed" }
    );
    let _ = writeln!(
        text,
        "process reports {reports} ({per_interval:.0} per interval), CPU per process report {cpu_us_per_report:.0} us"
    );
    let _ = writeln!(text, "profiles sent {sent}, not sent {dropped}\n{summary}");
    let json = vec![
        ("continuous_seconds".to_string(), json!(seconds)),
        ("continuous_every_s".to_string(), json!(every)),
        ("continuous_cpu_share_pct".to_string(), json!(r3(share))),
        (
            "continuous_cpu_share_by_thread_pct".to_string(),
            json!(per_thread
                .iter()
                .map(|(n, p)| (n.clone(), json!(r3(*p))))
                .collect::<serde_json::Map<_, _>>()),
        ),
        ("rss_minute_1_mb".to_string(), json!(r3(rss1))),
        ("rss_minute_10_mb".to_string(), json!(r3(rss10))),
        ("profiles_sent".to_string(), json!(sent)),
        ("profiles_dropped".to_string(), json!(dropped)),
        ("process_reports".to_string(), json!(reports)),
        ("process_reports_per_interval".to_string(), json!(r3(per_interval))),
        ("cpu_us_per_process_report".to_string(), json!(r3(cpu_us_per_report))),
    ];
    Ok(ContinuousRun { text, json })
}
