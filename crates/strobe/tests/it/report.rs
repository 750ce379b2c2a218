//! Integration tests of `strobe report` (and `strobe workload`).
//!
//! Two kinds:
//!
//! - Record files written here with strobe-format's encoder, whose samples are IPs of
//!   functions of this very test binary with its real /proc/self/maps: `strobe report`
//!   must read, symbolize and attribute them, and handle truncated, corrupt and missing
//!   files as a user would expect.
//! - End to end: `strobe record` of the bundled workload, checked against the ground
//!   truth the workload measures itself.

use std::path::Path;

use strobe_format::{
    EventDesc, Header, LostCount, Mapping, MapsSnapshot, PeriodSource, ProcessInfo, ProcessOrigin,
    SampleKind, MINOR_VERSION,
};

use crate::util::{record_to, run, show, strobe, Scratch};

// Functions whose addresses are the recorded IPs. Each has a loop so that the offsets
// added to its start stay inside it.
macro_rules! sampled_fn {
    ($name:ident, $mul:expr) => {
        #[inline(never)]
        #[no_mangle]
        pub(crate) extern "C" fn $name(n: u64) -> u64 {
            let mut acc = n;
            let mut i = 0;
            while i < n {
                acc = (acc ^ (acc >> 3)).wrapping_mul($mul) ^ i;
                i += 1;
            }
            acc
        }
    };
}

sampled_fn!(it_report_compute, 0x9e37_79b9);
sampled_fn!(it_report_faulting, 0x85eb_ca6b);
sampled_fn!(it_report_tiny, 0xc2b2_ae35);

fn addr(f: extern "C" fn(u64) -> u64) -> u64 {
    std::hint::black_box(f(2));
    f as usize as u64
}

const STREAM: u32 = 0x5eed;
const TID: u32 = 777;

fn event(name: &str, config: u64, is_time: bool) -> EventDesc {
    EventDesc {
        name: name.into(),
        type_: 1,
        config,
        is_time,
        is_hardware: false,
        exclude_user: false,
        exclude_kernel: false,
    }
}

/// Writes a recording: 60 windows in it_report_compute (no faults), 30 in
/// it_report_faulting (4 faults each), 10 starting in it_report_tiny and ending in
/// it_report_compute, and `lost` lost samples. Returns the file's bytes.
fn write_recording(path: &Path, lost: u64) -> Vec<u8> {
    let maps_text = std::fs::read_to_string("/proc/self/maps").unwrap();
    let maps: Vec<Mapping> = strobe_report::input::parse_proc_maps(&maps_text)
        .into_iter()
        .map(|m| Mapping { start: m.start, end: m.end, file_offset: m.offset, path: m.path.into() })
        .collect();
    let mut e = strobe_format::Encoder::new();
    e.preamble();
    e.header(&Header {
        minor_version: MINOR_VERSION,
        strobe_version: "test".into(),
        start_unix_ns: 1,
        start_mono_ns: 1,
        command: vec!["./prog".into(), "--flag".into()],
        events: vec![
            event("task-clock", 1, true),
            event("page-faults", 2, false),
            event("context-switches", 3, false),
        ],
        period: None,
        window: Some(20_000),
        jitter: None,
        wakeup: 512,
        buffer_bytes: 64 << 20,
        overhead_ppm: 20_000,
        follow_fork: false,
        mode: strobe_format::RecordMode::Agent,
        mode_reason: "built by a test".into(),
        call_graph: strobe_format::CallGraph::None,
        max_depth: 0,
    });
    e.process(
        STREAM,
        &ProcessInfo {
            pid: std::process::id(),
            ppid: 1,
            origin: ProcessOrigin::Start,
            exe: std::env::current_exe().unwrap(),
            start_mono_ns: 2,
            period: 2_500_000,
            window: 20_000,
            jitter: 250_000,
            period_source: PeriodSource::Budget,
            sample_cost_ns: 25_000,
            floor_cost_ns: 15_000,
            predicted_overhead_ppm: 19_000,
            floor: false,
        },
    );
    e.maps(STREAM, &MapsSnapshot { time_mono_ns: 3, maps });
    let (compute, faulting, tiny) =
        (addr(it_report_compute), addr(it_report_faulting), addr(it_report_tiny));
    let mut c = [0u64; 3];
    let mut t = 10u64;
    let mut b = e.samples(STREAM, TID, 3);
    let mut window = |b: &mut strobe_format::SampleBatchEncoder<'_>, s, e, faults| {
        t += 2_500_000;
        c[0] += 2_500_000;
        b.push(SampleKind::WindowStart, t, s, 0, &c);
        t += 25_000;
        c[0] += 25_000;
        c[1] += faults;
        b.push(SampleKind::WindowEnd, t, e, 0, &c);
    };
    for i in 0..100 {
        match i % 10 {
            0..=5 => window(&mut b, compute + 4, compute + 8, 0),
            6..=8 => window(&mut b, faulting + 4, faulting + 8, 4),
            _ => window(&mut b, tiny, compute + 4, 0),
        }
    }
    b.finish();
    if lost > 0 {
        e.lost(STREAM, &[LostCount { tid: TID, lost }]);
    }
    let bytes = e.as_bytes().to_vec();
    std::fs::write(path, &bytes).unwrap();
    bytes
}

fn report_json(path: &Path, extra: &[&str]) -> serde_json::Value {
    let out = run(strobe().arg("report").arg(path).args(["--format", "json"]).args(extra));
    assert!(out.status.success(), "{}", show(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&out)))
}

fn function<'v>(json: &'v serde_json::Value, name: &str) -> &'v serde_json::Value {
    json["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == name)
        .unwrap_or_else(|| panic!("{name} missing from {json:#}"))
}

#[test]
fn samples_in_the_vdso_are_named() {
    let dir = Scratch::new("report-vdso");
    let file = dir.path("clock.strobe");
    let out = run(record_to(&file).arg("--").arg(strobe_testprogs::path("clock_loop")));
    assert!(out.status.success(), "{}", show(&out));
    let json = report_json(&file, &[]);
    let funcs = json["functions"].as_array().unwrap();
    let in_vdso: Vec<_> = funcs.iter().filter(|f| f["module"] == "[vdso]").collect();
    let samples = |fs: &[&serde_json::Value]| -> u64 {
        fs.iter().map(|f| f["samples"].as_u64().unwrap_or(0)).sum()
    };
    if in_vdso.is_empty() {
        let clock = std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .unwrap_or_default();
        eprintln!(
            "skipped: clock_gettime did not run in the vDSO here (clocksource {}), so there is \
             nothing to name",
            clock.trim()
        );
        return;
    }
    // The vDSO's clock_gettime is named from the image strobe record saved. (A helper
    // the vDSO keeps out of line has no symbol of its own and may stay unknown.)
    let clock: Vec<_> = in_vdso
        .iter()
        .copied()
        .filter(|f| f["function"].as_str().unwrap_or("").contains("clock_gettime"))
        .collect();
    assert!(samples(&clock) > 0, "no vDSO sample named clock_gettime: {json:#}");
}

#[test]
fn table_names_the_functions_of_a_real_binary_with_their_metrics() {
    let dir = Scratch::new("report-table");
    let file = dir.path("run.strobe");
    write_recording(&file, 0);
    let out = run(strobe().arg("report").arg(&file));
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    // Header: the period actually used and the mean measured window.
    assert!(text.contains("period:   2.500 ms"), "{text}");
    assert!(text.contains("25.0 us measured (mean)"), "{text}");
    assert!(text.contains("windows: 90 used, 10 discarded"), "{text}");
    assert!(!text.contains("WARNING"), "no lost samples, no warning: {text}");
    // Rows in sample order, with faults/ms only where faults happened.
    let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("it_report_")).collect();
    assert_eq!(rows.len(), 3, "{text}");
    // Values without their ± half-widths (the intervals have their own tests).
    let cols = |row: &str| {
        row.split_whitespace().map(|c| c.split('±').next().unwrap().to_string()).collect::<Vec<_>>()
    };
    assert_eq!(cols(rows[0])[..4], ["it_report_compute", "60", "60.0", "60"]);
    assert_eq!(cols(rows[1])[..5], ["it_report_faulting", "30", "30.0", "30", "160.00"]);
    assert_eq!(cols(rows[2])[..4], ["it_report_tiny", "10", "10.0", "0"]);
    // The time share's interval: Wilson's for 60 of 100 samples.
    assert!(rows[0].contains("60.0±9.8"), "{text}");
    assert!(text.contains("faults/ms") && text.contains("cs/ms"), "{text}");
    assert!(!text.contains("CPI"), "no hardware counters recorded, no CPI: {text}");
}

#[test]
fn json_has_the_documented_fields_and_fold_moves_crossing_windows() {
    let dir = Scratch::new("report-json");
    let file = dir.path("run.strobe");
    write_recording(&file, 0);
    let v = report_json(&file, &[]);
    for key in ["lost_samples", "windows_used", "windows_discarded", "period", "mean_window"] {
        assert!(v.get(key).is_some(), "top-level {key} missing: {v:#}");
    }
    assert_eq!(v["period"], 2_500_000);
    assert_eq!(v["mean_window"], 25_000.0);
    assert_eq!((v["windows_used"].as_u64(), v["windows_discarded"].as_u64()), (Some(90), Some(10)));
    let f = function(&v, "it_report_faulting");
    assert_eq!(f["samples"], 30);
    assert_eq!(f["time_pct"], 30.0);
    assert_eq!(f["page_faults_per_ms"], 160.0);
    assert_eq!(f["context_switches_per_ms"], 0.0);
    assert!(f["module"].as_str().unwrap().starts_with("it-"), "{f}");
    assert!(f["source"].as_str().unwrap().contains("report.rs:"), "DWARF line: {f}");
    assert!(function(&v, "it_report_tiny")["page_faults_per_ms"].is_null());

    let folded = report_json(&file, &["--window-policy", "fold"]);
    assert_eq!(folded["windows_discarded"], 0);
    assert_eq!(function(&folded, "it_report_compute")["windows"], 70);
    assert_eq!(function(&folded, "it_report_tiny")["samples"], 10, "samples never move");
}

#[test]
fn sort_top_and_csv() {
    let dir = Scratch::new("report-sort");
    let file = dir.path("run.strobe");
    write_recording(&file, 0);
    let v = report_json(&file, &["--sort", "faults/ms", "--top", "1"]);
    let names: Vec<&str> = v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["it_report_faulting"]);

    let out =
        run(strobe().arg("report").arg(&file).args(["--format", "csv", "--sort", "function"]));
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    assert!(lines.next().unwrap().starts_with(
        "function,module,samples,time_pct,time_pct_low,time_pct_high,total_samples,total_pct,windows,"
    ));
    let first: Vec<&str> = lines.map(|l| l.split(',').next().unwrap()).collect();
    assert_eq!(first, ["it_report_compute", "it_report_faulting", "it_report_tiny"]);

    let out = run(strobe().arg("report").arg(&file).args(["--sort", "cpi"]));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cycles, instructions"), "{err}");
}

#[test]
fn lost_samples_are_printed_prominently() {
    let dir = Scratch::new("report-lost");
    let file = dir.path("run.strobe");
    write_recording(&file, 42);
    let out = run(strobe().arg("report").arg(&file));
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("WARNING: 42 samples were lost"), "{text}");
    assert!(first.contains(&format!("thread {TID}: 42")), "per thread: {text}");
    let v = report_json(&file, &[]);
    assert_eq!(v["lost_samples"], 42);
    assert_eq!(v["lost_by_thread"], serde_json::json!([{ "tid": TID, "lost": 42 }]));
}

#[test]
fn a_truncated_file_reports_everything_before_the_cut() {
    let dir = Scratch::new("report-truncated");
    let file = dir.path("run.strobe");
    let bytes = write_recording(&file, 0);
    // Append a second, partial sample chunk, as a writer killed mid-write leaves.
    let whole = bytes.len();
    let mut e = strobe_format::Encoder::new();
    let mut b = e.samples(STREAM, TID, 3);
    b.push(SampleKind::WindowStart, u64::MAX >> 3, addr(it_report_tiny), 0, &[u64::MAX >> 2, 0, 0]);
    b.finish();
    let partial = &e.as_bytes()[..e.len() - 3];
    let mut cut = bytes.clone();
    cut.extend_from_slice(partial);
    std::fs::write(&file, &cut).unwrap();

    let out = run(strobe().arg("report").arg(&file));
    assert!(out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one warning line: {err}");
    assert!(err.contains("warning") && err.contains(&format!("byte {whole}")), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("samples:  100 (0 lost)"), "{text}");
}

#[test]
fn corrupt_missing_and_foreign_files_are_one_line_errors() {
    let dir = Scratch::new("report-corrupt");
    let file = dir.path("run.strobe");
    let mut bytes = write_recording(&file, 0);
    // Damage a byte inside the sample chunk (the last chunk): its checksum fails.
    let at = bytes.len() - 10;
    bytes[at] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let expect_one_line = |args: &[&std::ffi::OsStr], needles: &[&str]| {
        let out = run(strobe().arg("report").args(args));
        assert_eq!(out.status.code(), Some(1), "{}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{}", show(&out));
        for n in needles {
            assert!(err.contains(n), "{n:?} not in {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
    };
    let name = file.display().to_string();
    expect_one_line(&[file.as_os_str()], &[&name, "corrupt", "byte"]);

    let missing = dir.path("missing.strobe");
    expect_one_line(&[missing.as_os_str()], &[&missing.display().to_string()]);

    let foreign = dir.path("foreign.strobe");
    std::fs::write(&foreign, b"this is not a recording").unwrap();
    expect_one_line(&[foreign.as_os_str()], &[&foreign.display().to_string(), "not a strobe"]);
}

#[test]
fn stats_prints_the_throughput() {
    let dir = Scratch::new("report-stats");
    let file = dir.path("run.strobe");
    write_recording(&file, 0);
    let out = run(strobe().arg("report").arg(&file).arg("--stats"));
    assert!(out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("report read 200 samples") && err.contains("M samples/s"), "{err}");
}

#[test]
fn workload_writes_its_ground_truth() {
    let dir = Scratch::new("workload-truth");
    let truth = dir.path("truth.json");
    let out =
        run(strobe().args(["workload", "--seconds", "1", "--threads", "1", "--truth"]).arg(&truth));
    assert!(out.status.success(), "{}", show(&out));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&truth).unwrap()).unwrap();
    assert_eq!(v["threads"], 1);
    let names: Vec<&str> = v["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap())
        .collect();
    for f in strobe_workload::FUNCTIONS {
        assert!(names.contains(&f), "{f} missing from {v:#}");
    }
    let pf =
        v["functions"].as_array().unwrap().iter().find(|f| f["function"] == "workload_page_faults");
    assert!(pf.unwrap()["page_faults"].as_u64().unwrap() > 0, "{v:#}");

    let out = run(strobe().args(["workload", "--threads", "0"]));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1, "{}", show(&out));
}

// ---------------------------------------------------------------------------------
// End to end: `strobe record` of the bundled workload against its own ground truth.
//
// How much to record. The accuracy check allows 3 percentage points between a
// function's share of samples and its share of CPU time. A share p estimated from N
// time samples has a standard error of sqrt(p(1-p)/N) (less in fact: samples are
// periodic with jitter, not independent draws). The workload's CPU-bound functions
// have p of about 0.2, so take the worst case p = 0.25 (a function briefly taking
// more): sqrt(0.25 * 0.75 / N).
//
// N is made independent of the machine's load: the workload does fixed work
// (`--rounds`: each thread calls every function E2E_ROUNDS times, about 3.5 ms of CPU
// per round) and the period is fixed at 1 ms of task-clock, so N is the CPU time
// spent divided by the sampling cycle (the period, the window and the sampler's own
// counted time: about 1.1 ms) however long the run takes on a busy machine: 2 threads
// x 750 rounds x ~3.5 ms = ~5 s of CPU, ~4,500 time samples. That is a standard error of
// at most 0.65 points, so 3 points lie beyond 4.6 standard errors (a chance below 1e-5
// per function). The test asserts at least 3,500 samples (3 points = 4.1 standard
// errors even then), so a recording that lost its samples fails with that message
// rather than with a noisy share.
//
// A 1 ms period costs about 6% here (two ~30 us samples per period). The handler's time
// falls where the samples are taken, in proportion to each function's own time, in the
// truth's clocks as in the leader's count: it moves no share.

const E2E_ROUNDS: &str = "750";
const E2E_SPEC: &str = "{task-clock/period=1ms/,page-faults,context-switches}";
const E2E_MIN_SAMPLES: u64 = 3_500;

struct Recorded {
    report: serde_json::Value,
    truth: serde_json::Value,
    table: String,
}

/// Records the workload once and shares the result between the end-to-end tests.
fn recorded_workload() -> &'static Recorded {
    static RUN: std::sync::OnceLock<Recorded> = std::sync::OnceLock::new();
    RUN.get_or_init(|| {
        // Kept for the life of the test process; a leaked Scratch is never removed, so
        // use a directory of our own under the target's tmp dir.
        let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("report-e2e-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("workload.strobe");
        let truth = dir.join("truth.json");
        let out = run(record_to(&file)
            .args(["-e", E2E_SPEC, "--"])
            .arg(env!("CARGO_BIN_EXE_strobe"))
            .args(["workload", "--rounds", E2E_ROUNDS, "--threads", "2", "--truth"])
            .arg(&truth));
        assert!(out.status.success(), "strobe record failed: {}", show(&out));
        let truth: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&truth).expect("the workload wrote its truth"))
                .unwrap();
        let report = report_json(&file, &[]);
        let out = run(strobe().arg("report").arg(&file));
        assert!(out.status.success(), "{}", show(&out));
        let table = String::from_utf8_lossy(&out.stdout).into_owned();
        let _ = std::fs::remove_dir_all(&dir);
        Recorded { report, truth, table }
    })
}

fn truth_functions(r: &Recorded) -> Vec<(String, f64)> {
    r.truth["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["function"].as_str().unwrap().to_string(), f["cpu_pct"].as_f64().unwrap()))
        .collect()
}

fn reported<'r>(r: &'r Recorded, name: &str) -> Option<&'r serde_json::Value> {
    r.report["functions"].as_array().unwrap().iter().find(|f| f["function"] == name)
}

#[test]
fn recorded_workload_has_every_function_above_two_percent() {
    let r = recorded_workload();
    let samples = r.report["samples"].as_u64().unwrap();
    assert!(
        samples >= E2E_MIN_SAMPLES,
        "only {samples} samples from {E2E_ROUNDS} rounds at {E2E_SPEC}: too few for an accuracy check\n{}",
        r.table
    );
    assert_eq!(r.report["lost_samples"], 0, "{}", r.table);
    for (name, pct) in truth_functions(r) {
        if pct >= 2.0 {
            let f = reported(r, &name).unwrap_or_else(|| {
                panic!("{name} used {pct:.1}% of CPU but is not in the report\n{}", r.table)
            });
            assert!(f["samples"].as_u64().unwrap() > 0, "{f}");
        }
    }
}

#[test]
fn recorded_time_shares_match_the_ground_truth_within_3_points() {
    let r = recorded_workload();
    let mut lines = Vec::new();
    let mut worst = (String::new(), 0.0f64);
    for (name, truth_pct) in truth_functions(r) {
        let got = reported(r, &name).map_or(0.0, |f| f["time_pct"].as_f64().unwrap());
        let diff = (got - truth_pct).abs();
        lines.push(format!(
            "{name:<24} sampled {got:6.2}%  truth {truth_pct:6.2}%  diff {diff:5.2}"
        ));
        if diff > worst.1 {
            worst = (name.clone(), diff);
        }
    }
    let comparison = lines.join("\n");
    assert!(
        worst.1 <= 3.0,
        "{} is off by {:.2} points (more than 3):\n{comparison}\n{}",
        worst.0,
        worst.1,
        r.table
    );
    eprintln!("{comparison}\nlargest time-share error: {} by {:.2} points", worst.0, worst.1);
}

/// The page-faulting function's faults per ms of its CPU against the workload's own
/// count around every call: within 25% (the precise error is `strobe bench accuracy`'s).
#[test]
fn recorded_page_faulting_function_has_its_own_page_fault_rate() {
    let r = recorded_workload();
    let pf = reported(r, "workload_page_faults").expect("workload_page_faults reported");
    let got = pf["page_faults_per_ms"].as_f64().expect("it has windows with faults");
    let truth = r.truth["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "workload_page_faults")
        .and_then(|f| f["page_faults_per_ms"].as_f64())
        .unwrap();
    assert!(
        (got - truth).abs() <= 0.25 * truth,
        "{got:.1} faults/ms, truth {truth:.1}\n{}",
        r.table
    );
}
