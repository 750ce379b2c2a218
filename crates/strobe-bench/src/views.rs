//! `strobe bench report`: how fast `strobe report` renders a large recording as a flame
//! graph, pprof and HTML, beside the classic pipeline on the same samples
//! (`perf script | inferno-collapse-perf | inferno-flamegraph`).
//!
//! The samples: a C program built here (20 levels of calls, 1024 distinct paths, two
//! threads of CPU-bound leaves, frame pointers kept) recorded once by Debian's
//! `perf record -g -e task-clock:u` until about a million samples are taken (50 k with
//! `--quick`). The same perf.data feeds both sides:
//!
//! - the perf pipeline: `perf script` (a subprocess, as in the shell pipeline), its text
//!   folded by inferno's `collapse-perf` and drawn by inferno's `flamegraph` (the library
//!   API of the inferno binaries, in this process: no pipe or process start counted);
//! - strobe: the same samples and call chains written as a strobe record file (not
//!   timed). `perf script` prints each frame as an address relative to its object (the
//!   link-time address) and the object's path; each object gets a synthetic mapping of
//!   the whole file at a base of its own, so the report resolves the same addresses
//!   (for these objects the link-time address is the file offset, as `ld` lays out
//!   PIE executables and libraries). Then
//!   then `strobe report FILE --flamegraph` / `--pprof` / `--html`, each timed as a
//!   whole command (reading, symbolizing, rendering, writing).
//!
//! When Chromium is installed, the HTML page is also opened headless and its own render
//! time (script start to table and flame graph drawn) is reported.
//!
//! Goals: the flame graph in at most 1 s and at least 5x faster than the perf pipeline;
//! the HTML at most 10 MB.
//!
//! `STROBE_BENCH_KEEP=1` keeps the scratch directory (the program, perf.data, the
//! recording and the outputs) for a look afterwards.
//!
//! This module must never be linked into the agent; it drives perf and strobe as a user
//! would.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use inferno::collapse::Collapse;
use serde_json::json;
use strobe_format::{
    CallGraph, Encoder, Header, MapsSnapshot, PeriodSource, ProcessInfo, ProcessOrigin, RecordMode,
    SampleKind, StackNode,
};

use crate::drive::{check, io, Scratch};
use crate::report::{machine_summary, row, BenchOpts, BenchReport};
use crate::stats::median;
use crate::BenchError;

const LEVELS: usize = 20;
/// Levels whose callee depends on the iteration (2^10 = 1024 distinct paths).
const BRANCHING: usize = 10;
/// perf's sampling period, ns of task-clock.
const PERIOD_NS: u64 = 50_000;

/// The C source of the program both sides profile (`strobe bench stacks` times its
/// reports on it too).
pub(crate) fn program_source() -> String {
    let mut s = String::from(
        "#include <pthread.h>\n#include <stdio.h>\n#include <stdlib.h>\n#include <time.h>\n\
         static volatile unsigned long sink;\n\
         __attribute__((noinline)) void leaf(unsigned long k) {\n\
           unsigned long n = 3000 + (k % 7) * 500;\n\
           for (unsigned long j = 0; j < n; j++) sink = sink * 31 + j;\n}\n",
    );
    for i in (0..LEVELS).rev() {
        for v in ["a", "b"] {
            let next = |w: &str| {
                if i + 1 == LEVELS {
                    "leaf(k)".to_string()
                } else {
                    format!("lv{}_{w}(k)", i + 1)
                }
            };
            let body = if i < BRANCHING {
                format!("if ((k >> {i}) & 1) {}; else {};", next("a"), next("b"))
            } else {
                format!("{};", next("b"))
            };
            let _ = writeln!(
                s,
                "__attribute__((noinline)) void lv{i}_{v}(unsigned long k) {{ {body} sink += k; }}"
            );
        }
    }
    s.push_str(
        "static double secs;\n\
         static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }\n\
         static void *run(void *arg) { unsigned long k = (unsigned long)arg; double end = now() + secs;\n\
           while (now() < end) for (int r = 0; r < 64; r++) lv0_a(k++); return NULL; }\n\
         int main(int argc, char **argv) {\n\
           secs = argc > 1 ? atof(argv[1]) : 1; pthread_t t[2];\n\
           for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, run, (void *)(i << 20));\n\
           for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);\n\
           return 0; }\n",
    );
    s
}

/// One sample of `perf script -F tid,time,ip,dso`: thread, time (ns) and its call chain,
/// leaf first, each frame placed in its object's synthetic mapping.
struct ScriptSample {
    tid: u32,
    time: u64,
    chain: Vec<u64>,
}

/// Each object's synthetic mapping: 2^40 bytes from `(index + 1) << 40`.
const SLOT_BITS: u32 = 40;

fn parse_script(text: &[u8], objects: &mut Vec<String>) -> Vec<ScriptSample> {
    let mut out = Vec::new();
    let mut cur: Option<ScriptSample> = None;
    for line in text.lines().map_while(Result::ok) {
        if line.starts_with('\t') {
            // "\t    1229 (/tmp/deep)"
            let mut parts = line.split_whitespace();
            let (Some(ip), Some(dso)) = (parts.next(), parts.next()) else { continue };
            let dso = dso.trim_start_matches('(').trim_end_matches(')');
            let (Some(s), Ok(ip)) = (&mut cur, u64::from_str_radix(ip, 16)) else { continue };
            if !dso.starts_with('/') || ip >= 1 << SLOT_BITS {
                continue; // [unknown], the kernel
            }
            let i = match objects.iter().position(|o| o == dso) {
                Some(i) => i,
                None => {
                    objects.push(dso.to_string());
                    objects.len() - 1
                }
            };
            s.chain.push(((i as u64 + 1) << SLOT_BITS) + ip);
            continue;
        }
        if let Some(s) = cur.take() {
            if !s.chain.is_empty() {
                out.push(s);
            }
        }
        // "  21462  5866.911717: "
        let mut parts = line.split_whitespace();
        let (Some(tid), Some(time)) = (parts.next(), parts.next()) else { continue };
        let (Ok(tid), Ok(time)) = (tid.parse::<u32>(), time.trim_end_matches(':').parse::<f64>())
        else {
            continue;
        };
        cur = Some(ScriptSample { tid, time: (time * 1e9) as u64, chain: Vec::new() });
    }
    if let Some(s) = cur.filter(|s| !s.chain.is_empty()) {
        out.push(s);
    }
    out
}

/// Writes the samples as a strobe record file (fixed-period, task-clock leader).
fn write_strobe(
    path: &Path,
    samples: &[ScriptSample],
    objects: &[String],
    exe: &Path,
) -> Result<(), BenchError> {
    const STREAM: u32 = 1;
    let mut e = Encoder::new();
    e.preamble();
    e.header(&Header {
        strobe_version: "bench".into(),
        command: vec![exe.display().to_string()],
        period: Some(PERIOD_NS),
        mode: RecordMode::Agent,
        mode_reason: "converted from perf.data by strobe bench report".into(),
        call_graph: CallGraph::Fp,
        max_depth: 128,
        ..Header::task_clock()
    });
    e.process(
        STREAM,
        &ProcessInfo {
            pid: 1,
            ppid: 0,
            origin: ProcessOrigin::Start,
            exe: exe.to_path_buf(),
            start_mono_ns: 0,
            period: PERIOD_NS,
            window: 0,
            jitter: 0,
            period_source: PeriodSource::Explicit,
            sample_cost_ns: 0,
            floor_cost_ns: 0,
            predicted_overhead_ppm: 0,
            floor: false,
        },
    );
    let maps = objects
        .iter()
        .enumerate()
        .map(|(i, o)| strobe_format::Mapping {
            start: (i as u64 + 1) << SLOT_BITS,
            end: (i as u64 + 2) << SLOT_BITS,
            file_offset: 0,
            path: o.into(),
        })
        .collect();
    e.maps(STREAM, &MapsSnapshot { time_mono_ns: 0, maps });
    // Callers (the chain past the leaf) interned into one stack table.
    let mut ids: HashMap<(u32, u64), u32> = HashMap::new();
    let mut nodes: Vec<StackNode> = Vec::new();
    let mut stack_of = |callers: &[u64]| -> u32 {
        let mut parent = 0;
        for &addr in callers.iter().rev() {
            parent = *ids.entry((parent, addr)).or_insert_with(|| {
                nodes.push(StackNode { parent, addr });
                nodes.len() as u32
            });
        }
        parent
    };
    let mut by_thread: HashMap<u32, Vec<(u64, u64, u32)>> = HashMap::new();
    for s in samples {
        let stack = stack_of(&s.chain[1..]);
        by_thread.entry(s.tid).or_default().push((s.time, s.chain[0], stack));
    }
    e.stacks(STREAM, 1, &nodes);
    for (tid, v) in &by_thread {
        for (i, chunk) in v.chunks(4096).enumerate() {
            let mut b = e.samples(STREAM, *tid, 1);
            for (j, &(time, ip, stack)) in chunk.iter().enumerate() {
                let n = (i * 4096 + j + 1) as u64;
                b.push(SampleKind::Plain, time, ip, stack, &[n * PERIOD_NS]);
            }
            b.finish();
        }
    }
    std::fs::write(path, e.as_bytes()).map_err(io("writing the strobe recording"))
}

/// Runs `strobe bench report`.
pub(crate) fn run(opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    let strobe = opts
        .strobe_exe
        .clone()
        .ok_or_else(|| BenchError::Other("the strobe executable is unknown".into()))?;
    for tool in ["cc", "perf"] {
        let ok = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            return Err(BenchError::Unsupported(format!(
                "`{tool}` is not installed; run ci/setup.sh (it installs gcc and linux-perf)"
            )));
        }
    }
    let scratch = Scratch::new("report")?;
    run_in(opts, &strobe, scratch.path())
}

fn run_in(opts: &BenchOpts, strobe: &Path, dir: &Path) -> Result<BenchReport, BenchError> {
    let target = if opts.quick { 50_000.0 } else { 1_000_000.0 };
    // Two threads on two CPUs, each sampled every PERIOD_NS of its CPU time, less what
    // perf's own cost per sample takes from them: 25-40 k samples per second of wall time
    // on the 2-CPU VM this was written on, depending on its load. So the run lasts
    // 0.6 x target x period, and the count actually taken is reported.
    let seconds = 0.6 * target * PERIOD_NS as f64 / 1e9;
    let src = dir.join("deep.c");
    let exe = dir.join("deep");
    std::fs::write(&src, program_source()).map_err(io("writing deep.c"))?;
    check(
        Command::new("cc")
            .args([
                "-O1",
                "-g",
                "-fno-omit-frame-pointer",
                "-fno-optimize-sibling-calls",
                "-pthread",
                "-o",
            ])
            .arg(&exe)
            .arg(&src)
            .output()
            .map_err(io("running cc"))?,
        "cc deep.c",
    )?;
    let data = dir.join("perf.data");
    check(
        Command::new("perf")
            .args(["record", "-q", "-g", "-e", "task-clock:u", "-c"])
            .arg(PERIOD_NS.to_string())
            .arg("-o")
            .arg(&data)
            .arg("--")
            .arg(&exe)
            .arg(format!("{seconds:.2}"))
            .stdout(Stdio::null())
            .output()
            .map_err(io("running perf record"))?,
        "perf record",
    )?;

    let mut report = BenchReport::new("report");
    let repeats = opts.repeats.max(1);

    // The perf pipeline, whole: perf script, collapse, flame graph.
    let mut perf_times = Vec::new();
    let mut script_bytes = Vec::new();
    let mut perf_svg = 0u64;
    for _ in 0..repeats {
        let t = Instant::now();
        let out = check(
            Command::new("perf")
                .arg("script")
                .arg("-i")
                .arg(&data)
                .stderr(Stdio::piped())
                .output()
                .map_err(io("running perf script"))?,
            "perf script",
        )?;
        let mut folded = Vec::new();
        inferno::collapse::perf::Folder::default()
            .collapse(out.stdout.as_slice(), &mut folded)
            .map_err(io("inferno collapse-perf"))?;
        let mut svg = Vec::new();
        let mut o = inferno::flamegraph::Options::default();
        inferno::flamegraph::from_lines(&mut o, String::from_utf8_lossy(&folded).lines(), &mut svg)
            .map_err(io("inferno flamegraph"))?;
        perf_times.push(t.elapsed().as_secs_f64());
        perf_svg = svg.len() as u64;
        script_bytes = out.stdout;
    }

    // The same samples as a strobe recording.
    let short = check(
        Command::new("perf")
            .args(["script", "-F", "tid,time,ip,dso", "-i"])
            .arg(&data)
            .stderr(Stdio::piped())
            .output()
            .map_err(io("running perf script -F tid,time,ip"))?,
        "perf script",
    )?;
    let mut objects = Vec::new();
    let samples = parse_script(&short.stdout, &mut objects);
    drop(script_bytes);
    let rec = dir.join("deep.strobe");
    write_strobe(&rec, &samples, &objects, &exe)?;
    let depth =
        samples.iter().map(|s| s.chain.len()).sum::<usize>() as f64 / samples.len().max(1) as f64;

    let mut rows = vec![row([
        ("variant", "perf script | inferno-collapse-perf | inferno-flamegraph".into()),
        ("seconds", json!(median(&perf_times.clone()))),
        ("bytes", perf_svg.into()),
    ])];
    let mut figures: Vec<(String, f64, u64)> = Vec::new();
    for (variant, flag, name) in [
        ("strobe report --flamegraph", "--flamegraph", "out.svg"),
        ("strobe report --pprof", "--pprof", "out.pb.gz"),
        ("strobe report --html", "--html", "out.html"),
    ] {
        let out_path = dir.join(name);
        let mut times = Vec::new();
        for _ in 0..repeats {
            let t = Instant::now();
            check(
                Command::new(strobe)
                    .arg("report")
                    .arg(&rec)
                    .arg(flag)
                    .arg(&out_path)
                    .arg("--quiet")
                    .output()
                    .map_err(io("running strobe report"))?,
                variant,
            )?;
            times.push(t.elapsed().as_secs_f64());
        }
        let bytes = std::fs::metadata(&out_path).map_or(0, |m| m.len());
        let secs = median(&times);
        rows.push(row([
            ("variant", variant.into()),
            ("seconds", json!(secs)),
            ("bytes", bytes.into()),
        ]));
        figures.push((variant.to_string(), secs, bytes));
    }
    // The page's own render time in headless Chromium, when it is installed.
    let html_ms = open_in_chromium(&dir.join("out.html"), dir);
    if let Some(ms) = html_ms {
        rows.push(row([
            ("variant", "HTML opened in headless Chromium (page's own render time)".into()),
            ("seconds", json!(ms / 1e3)),
            ("bytes", json!(null)),
        ]));
    }

    let perf_s = median(&perf_times);
    let (flame_s, html_bytes) = (figures[0].1, figures[2].2);
    let mut text = format!(
        "strobe bench report: {} samples at mean stack depth {depth:.1} ({} distinct paths), \
         {repeats} runs each, median\nmachine: {}\n\n",
        samples.len(),
        1usize << BRANCHING,
        machine_summary()
    );
    let _ = writeln!(text, "{:<62} {:>9} {:>12}", "variant", "seconds", "bytes");
    let _ = writeln!(
        text,
        "{:<62} {:>9.3} {:>12}",
        rows[0]["variant"].as_str().unwrap_or(""),
        perf_s,
        perf_svg
    );
    for (v, s, b) in &figures {
        let _ = writeln!(text, "{v:<62} {s:>9.3} {b:>12}");
    }
    if let Some(ms) = html_ms {
        let _ = writeln!(text, "{:<62} {:>9.3}", "HTML opened in headless Chromium", ms / 1e3);
    }
    let mark = |ok: bool| if ok { "met" } else { "MISSED" };
    let _ = writeln!(
        text,
        "\ngoals: flame graph <= 1 s: {:.3} s ({}); >= 5x faster than the perf pipeline: {:.1}x ({}); \
         HTML <= 10 MB: {:.1} MB ({})",
        flame_s,
        mark(flame_s <= 1.0),
        perf_s / flame_s,
        mark(perf_s / flame_s >= 5.0),
        html_bytes as f64 / 1048576.0,
        mark(html_bytes <= 10 << 20)
    );
    report.rows = rows;
    report.extra.insert("samples".into(), samples.len().into());
    report.extra.insert("mean_depth".into(), json!(depth));
    report.extra.insert("speedup_vs_perf".into(), json!(perf_s / flame_s));
    report.text = text;
    let _ = std::io::stderr().flush();
    Ok(report)
}

/// The page's own render time (ms) in headless Chromium, or `None` without Chromium.
fn open_in_chromium(page: &Path, dir: &Path) -> Option<f64> {
    let profile: PathBuf = dir.join("chromium-profile");
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}#selftest", page.display()))
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let dom = String::from_utf8_lossy(&out.stdout);
    // The self-check's JSON is the text of a <pre>: quotes as they are (or escaped).
    let at = ["\"render_ms\":", "render_ms&quot;:"]
        .iter()
        .find_map(|k| dom.find(k).map(|i| i + k.len()))?;
    dom[at..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}
