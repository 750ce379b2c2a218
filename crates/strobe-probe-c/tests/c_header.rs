//! The C header used from a C program (tests/c/probe_points.c), with the
//! library injected the way `strobe probe` does it: its hits are counted
//! exactly by the library's counting consumer (STROBE_PROBE_COUNT).

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Distinguishes the scratch directories of runs in concurrent tests.
static RUNS: AtomicUsize = AtomicUsize::new(0);

/// libstrobe_probe_c.so, built for the test programs by strobe-testprogs.
fn library() -> PathBuf {
    let so = strobe_testprogs::probe_library();
    assert!(so.exists(), "{} was not built", so.display());
    so
}

struct Count {
    hits: u64,
    exits: u64,
    total_ns: u64,
    hist_sum: u64,
}

fn parse_counts(text: &str) -> std::collections::HashMap<String, Count> {
    let mut m = std::collections::HashMap::new();
    for line in text.lines().filter(|l| l.contains("\"type\":\"count\"")) {
        let field = |k: &str| -> u64 {
            let key = format!("\"{k}\":");
            let rest =
                &line[line.find(&key).unwrap_or_else(|| panic!("no {k} in {line}")) + key.len()..];
            rest.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
        };
        let name_start = line.find("\"probe\":\"").unwrap() + 9;
        let name = line[name_start..].split('"').next().unwrap().to_string();
        let hist = &line[line.find("\"log2_ns\":[").unwrap() + 11..];
        let hist_sum =
            hist.split(']').next().unwrap().split(',').map(|x| x.parse::<u64>().unwrap()).sum();
        m.insert(
            name,
            Count {
                hits: field("hits"),
                exits: field("exits"),
                total_ns: field("total_ns"),
                hist_sum,
            },
        );
    }
    m
}

fn run(prog: &str, threads: u32, iters: u64, env: &[(&str, String)]) -> (String, String) {
    let dir = std::env::temp_dir().join(format!(
        "strobe-probe-c-{}-{prog}-{}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let out_file = dir.join("counts.jsonl");
    let _ = std::fs::remove_file(&out_file);
    let mut cmd = Command::new(strobe_testprogs::path(prog));
    cmd.arg(threads.to_string()).arg(iters.to_string());
    cmd.env("STROBE_PROBE_OUT", &out_file);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run probe_points");
    assert!(out.status.success(), "probe_points failed: {}", String::from_utf8_lossy(&out.stderr));
    let report = std::fs::read_to_string(&out_file).unwrap_or_default();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.is_empty() || !report.is_empty(), "the report went to stderr: {err}");
    let _ = std::fs::remove_dir_all(&dir);
    (String::from_utf8_lossy(&out.stdout).into_owned(), report)
}

fn counting_env() -> Vec<(&'static str, String)> {
    vec![
        ("STROBE_PROBE_COUNT", "c_tick,c_six,c_zero,c_scope,c_nope".to_string()),
        ("STROBE_PROBE_LIST", "1".to_string()),
    ]
}

/// A program linked against the library: every hit counted exactly.
#[test]
fn c_probe_points_are_counted_exactly() {
    let (threads, iters) = (4u32, 20_000u64);
    let (stdout, report) = run("probe_points", threads, iters, &counting_env());
    assert!(stdout.contains("library present"), "{stdout}");
    check_counts(threads, iters, &report);
}

/// The same program built without the library, which `strobe probe` injects.
#[test]
fn injected_library_counts_exactly() {
    let (threads, iters) = (3u32, 10_000u64);
    let mut env = counting_env();
    env.push(("LD_PRELOAD", library().display().to_string()));
    let (stdout, report) = run("probe_points_nolib", threads, iters, &env);
    assert!(stdout.contains("library present"), "{stdout}");
    check_counts(threads, iters, &report);
}

fn check_counts(threads: u32, iters: u64, report: &str) {
    let counts = parse_counts(report);
    for name in ["c_tick", "c_six", "c_zero", "c_scope", "c_nope"] {
        assert!(counts.contains_key(name), "no count for {name} in the report:\n{report}");
    }
    let n = u64::from(threads) * iters;
    assert_eq!(counts["c_tick"].hits, n, "{report}");
    assert_eq!(counts["c_six"].hits, n, "{report}");
    assert_eq!(counts["c_zero"].hits, n / 10, "{report}");
    let scope = &counts["c_scope"];
    assert_eq!(scope.hits, n / 10, "scope entries: {report}");
    assert_eq!(scope.exits, n / 10, "scope exits: {report}");
    assert_eq!(scope.hist_sum, n / 10, "every exit lands in one latency bucket");
    assert!(scope.total_ns > 0);
    assert_eq!(counts["c_nope"].hits, 0);
    assert!(
        report.contains("{\"type\":\"unknown\",\"probe\":\"c_nope\",\"hint\":\" (did you mean c_"),
        "unknown names are reported with close ones: {report}"
    );
    // Every site is listed with its file, line and argument count.
    for (name, nargs) in [("c_tick", 2), ("c_six", 6), ("c_zero", 0), ("c_scope", 1)] {
        let needle = format!("\"type\":\"site\",\"probe\":\"{name}\",\"file\":");
        let line = report
            .lines()
            .find(|l| l.contains(&needle))
            .unwrap_or_else(|| panic!("{name} not listed: {report}"));
        assert!(line.contains("probe_points.c"), "{line}");
        assert!(line.ends_with(&format!("\"nargs\":{nargs}}}")), "{line}");
    }
    // A site that never fired is listed too: its module's constructor registered it.
    let never = report
        .lines()
        .find(|l| l.contains("\"type\":\"site\",\"probe\":\"c_never\",\"file\":"))
        .unwrap_or_else(|| panic!("c_never (never fired) not listed: {report}"));
    assert!(never.contains("probe_points.c") && never.ends_with("\"nargs\":1}"), "{never}");
    assert_eq!(counts.get("c_never").map_or(0, |c| c.hits), 0, "{report}");
}

#[test]
fn c_program_runs_unchanged_without_the_library() {
    let (stdout, report) = run("probe_points_nolib", 2, 1000, &counting_env());
    assert!(stdout.contains("library absent"), "{stdout}");
    assert!(report.is_empty(), "nobody counts without the library: {report}");
}

#[test]
fn library_loaded_but_nothing_enabled_writes_nothing() {
    let (stdout, report) = run("probe_points", 2, 1000, &[]);
    assert!(stdout.contains("library present"), "{stdout}");
    assert!(report.is_empty(), "no STROBE_PROBE_* variable, no report: {report}");
}

/// STROBE_PROBE_TRACE: one line per hit, with thread, time, kind and arguments.
#[test]
fn traced_probe_points_write_one_line_per_hit() {
    let dir = std::env::temp_dir().join(format!("strobe-probe-c-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.jsonl");
    let (threads, iters) = (2u32, 500u64);
    let (stdout, _) = run(
        "probe_points",
        threads,
        iters,
        &[
            ("STROBE_PROBE_TRACE", "c_zero,c_scope".to_string()),
            ("STROBE_PROBE_TRACE_OUT", trace.display().to_string()),
        ],
    );
    assert!(stdout.contains("library present"), "{stdout}");
    let text = std::fs::read_to_string(&trace).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let n = u64::from(threads) * iters / 10;
    let zero: Vec<&str> = text.lines().filter(|l| l.contains("\"probe\":\"c_zero\"")).collect();
    assert_eq!(zero.len() as u64, n, "{text}");
    for l in &zero {
        assert!(l.starts_with("{\"type\":\"hit\",\"probe\":\"c_zero\",\"tid\":"), "{l}");
        assert!(l.ends_with(",\"kind\":\"fire\",\"args\":[]}"), "{l}");
    }
    let entries = text
        .lines()
        .filter(|l| l.contains("\"probe\":\"c_scope\"") && l.contains("\"kind\":\"entry\""))
        .count();
    let exits: Vec<&str> =
        text.lines().filter(|l| l.contains("\"kind\":\"exit\",\"dur_ns\":")).collect();
    assert_eq!(entries as u64, n);
    assert_eq!(exits.len() as u64, n);
    // Entries carry the loop index, a multiple of 10.
    let first_entry = text.lines().find(|l| l.contains("\"kind\":\"entry\"")).unwrap();
    let arg: u64 = first_entry.rsplit('[').next().unwrap().trim_end_matches("]}").parse().unwrap();
    assert_eq!(arg % 10, 0, "{first_entry}");
    let tids: std::collections::HashSet<&str> = zero
        .iter()
        .map(|l| l.split("\"tid\":").nth(1).unwrap().split(',').next().unwrap())
        .collect();
    assert_eq!(tids.len(), threads as usize, "one tid per thread");
}

/// Sites of a library loaded with dlopen are registered at load, counted, and still
/// listed at exit after the program unloaded the library: the probe library pins the
/// modules whose sites it registered, so it never reads unmapped memory.
#[test]
fn sites_of_an_unloaded_library_stay_readable() {
    let dir = std::env::temp_dir().join(format!("strobe-probe-c-dlclose-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out_file = dir.join("report.jsonl");
    let _ = std::fs::remove_file(&out_file);
    let out = Command::new(strobe_testprogs::path("probe_dlclose"))
        .arg(strobe_testprogs::shared_lib("probe_dllib"))
        .env("LD_PRELOAD", library())
        .env("STROBE_PROBE_LIST", "1")
        .env("STROBE_PROBE_COUNT", "dl_site")
        .env("STROBE_PROBE_OUT", &out_file)
        .output()
        .expect("run probe_dlclose");
    let report = std::fs::read_to_string(&out_file).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "probe_dlclose failed ({}): {}\n{report}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "closed\n");
    assert_eq!(parse_counts(&report)["dl_site"].hits, 2, "{report}");
    for name in ["dl_site", "dl_never"] {
        let needle = format!("\"type\":\"site\",\"probe\":\"{name}\",\"file\":");
        assert!(report.contains(&needle), "{name} not listed: {report}");
    }
}
