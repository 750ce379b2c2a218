//! Integration tests of `strobe probe`: kernel uprobes on the test programs
//! `probe_target` (which links `libprobelib.so` and carries USDT probes) and `probe_nopie`.
//! Every expected count is the number of calls the program itself makes (and prints).

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::util::{run, show, strobe, Scratch};

/// True when strobe runs as root here.
fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Why kernel uprobes cannot run here, if they cannot (the test then prints it and skips).
/// As root, strobe mounts tracefs itself when it is absent.
fn uprobes_unavailable() -> Option<String> {
    if !Path::new("/sys/bus/event_source/devices/uprobe/type").exists() {
        return Some("no uprobe PMU (kernel without CONFIG_UPROBE_EVENTS)".into());
    }
    let tracefs = ["/sys/kernel/tracing/uprobe_events", "/sys/kernel/debug/tracing/uprobe_events"];
    let writable = tracefs.iter().any(|p| std::fs::OpenOptions::new().append(true).open(p).is_ok());
    let mountable = root() && Path::new("/sys/kernel/tracing").is_dir();
    if !(writable || mountable) {
        return Some(
            "tracefs uprobe_events is not writable (not root, or tracefs not mounted)".into(),
        );
    }
    None
}

macro_rules! require_uprobes {
    () => {
        if let Some(why) = uprobes_unavailable() {
            eprintln!("skipping: {why}");
            return;
        }
    };
}

/// Runs `strobe probe ARGS -- PROG PROG_ARGS` with the JSON report written to a file;
/// returns the process output and the parsed report.
fn probe_json(
    scratch: &Scratch,
    args: &[&str],
    prog: &Path,
    prog_args: &[&str],
) -> (Output, Value) {
    let json = scratch.path("report.json");
    let out = run(strobe()
        .arg("probe")
        .args(args)
        .args(["--json", "-o"])
        .arg(&json)
        .arg("--")
        .arg(prog)
        .args(prog_args));
    let text = std::fs::read_to_string(&json)
        .unwrap_or_else(|e| panic!("no report ({e}): {}", show(&out)));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("bad JSON ({e}): {text}"));
    (out, v)
}

/// The report's row for `probe`.
fn row<'a>(report: &'a Value, probe: &str) -> &'a Value {
    report["probes"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["probe"] == probe))
        .unwrap_or_else(|| panic!("no row for '{probe}' in {report:#}"))
}

fn hits(report: &Value, probe: &str) -> u64 {
    row(report, probe)["hits"].as_u64().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn counts_equal_the_calls_made_in_two_threads_in_the_program_and_its_library() {
    require_uprobes!();
    let scratch = Scratch::new("probe-counts");
    let prog = strobe_testprogs::path("probe_target");
    let probes = [
        "counted_call",
        "libprobelib.so:lib_counted_call",
        "usdt:strobe_test:tick",
        "usdt:strobe_test:guarded",
        "usdt:libprobelib.so:strobe_lib:hello",
    ];
    let (out, report) = probe_json(&scratch, &probes, &prog, &["calls", "2", "5000"]);
    assert!(out.status.success(), "{}", show(&out));
    // The program prints its own count; with the guarded probe attached, its semaphore is
    // set, so the program passes that probe on every iteration too.
    assert!(stdout(&out).contains("calls=10000 guarded=10000"), "{}", show(&out));
    for p in probes {
        assert_eq!(hits(&report, p), 10_000, "probe {p}: {report:#}");
    }
    assert_eq!(row(&report, "counted_call")["kind"], "uprobe");
    assert_eq!(row(&report, "usdt:strobe_test:tick")["kind"], "usdt");
    assert_eq!(report["exit_code"], 0);
}

#[test]
fn without_the_guarded_probe_its_semaphore_stays_clear() {
    require_uprobes!();
    let scratch = Scratch::new("probe-semaphore");
    let prog = strobe_testprogs::path("probe_target");
    let (out, report) =
        probe_json(&scratch, &["usdt:strobe_test:tick"], &prog, &["calls", "1", "300"]);
    assert!(stdout(&out).contains("calls=300 guarded=0"), "{}", show(&out));
    assert_eq!(hits(&report, "usdt:strobe_test:tick"), 300);
}

#[test]
fn a_position_dependent_program_is_counted_exactly() {
    require_uprobes!();
    let scratch = Scratch::new("probe-nopie");
    let prog = strobe_testprogs::path("probe_nopie");
    let (out, report) = probe_json(&scratch, &["nopie_call"], &prog, &["1234"]);
    assert!(stdout(&out).contains("calls=1234"), "{}", show(&out));
    assert_eq!(hits(&report, "nopie_call"), 1234);
}

/// `-x ./prog` and `-- ./prog`, as typed in the program's directory: the kernel takes only
/// absolute uprobe paths, so strobe makes them absolute.
#[test]
fn a_binary_given_by_a_relative_path_is_counted_exactly() {
    require_uprobes!();
    let scratch = Scratch::new("probe-relative");
    let prog = strobe_testprogs::path("probe_nopie");
    let dir = prog.parent().expect("the program's directory");
    let name = format!("./{}", prog.file_name().expect("a file name").to_string_lossy());
    let json = scratch.path("report.json");
    let out = run(strobe()
        .current_dir(dir)
        .args(["probe", "-x", &name, "nopie_call", "--json", "-o"])
        .arg(&json)
        .args(["--", &name, "321"]));
    assert!(out.status.success(), "{}", show(&out));
    assert!(stdout(&out).contains("calls=321"), "{}", show(&out));
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{e}: {}", show(&out)));
    let report: Value = serde_json::from_str(&text).expect("JSON report");
    assert_eq!(hits(&report, "nopie_call"), 321);
}

#[test]
fn the_table_names_every_probe_with_hits_and_rate() {
    require_uprobes!();
    let prog = strobe_testprogs::path("probe_target");
    let out = run(strobe()
        .args(["probe", "counted_call", "libprobelib:lib_counted_call", "--"])
        .arg(&prog)
        .args(["calls", "2", "50"]));
    assert!(out.status.success(), "{}", show(&out));
    let text = stdout(&out);
    let header = text.lines().find(|l| l.starts_with("PROBE")).unwrap_or_else(|| panic!("{text}"));
    for col in ["KIND", "HITS", "HITS/S"] {
        assert!(header.contains(col), "{header}");
    }
    for p in ["counted_call", "libprobelib:lib_counted_call"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{p} ")))
            .unwrap_or_else(|| panic!("{text}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cols[2], "100", "{line}");
        assert!(cols[3].parse::<f64>().unwrap() > 0.0, "{line}");
    }
}

#[test]
fn latency_percentiles_are_ordered_and_cover_the_sleep() {
    require_uprobes!();
    let scratch = Scratch::new("probe-latency");
    let prog = strobe_testprogs::path("probe_target");
    // Two threads call sleepy(20 ms) three times each: nanosleep never returns early, so
    // every duration is at least 20 ms.
    let (out, report) =
        probe_json(&scratch, &["--latency", "sleepy"], &prog, &["sleep", "2", "3", "20"]);
    assert!(out.status.success(), "{}", show(&out));
    let r = row(&report, "sleepy");
    assert_eq!(r["hits"], 6, "{report:#}");
    let l = &r["latency_ns"];
    assert_eq!(l["count"], 6, "{report:#}");
    let get = |k: &str| l[k].as_u64().unwrap_or_else(|| panic!("no {k} in {l}"));
    assert!(get("min") >= 20_000_000, "{l}");
    assert!(get("min") <= get("p50") && get("p50") <= get("p90"), "{l}");
    assert!(get("p90") <= get("p99") && get("p99") <= get("max"), "{l}");
    assert_eq!(report["unmatched_returns"], 0);
}

#[test]
fn latency_table_has_percentile_columns() {
    require_uprobes!();
    let prog = strobe_testprogs::path("probe_target");
    let out = run(strobe()
        .args(["probe", "--latency", "sleepy", "usdt:strobe_test:tick", "--"])
        .arg(&prog)
        .args(["sleep", "1", "2", "5"]));
    assert!(out.status.success(), "{}", show(&out));
    let text = stdout(&out);
    let header = text.lines().find(|l| l.starts_with("PROBE")).unwrap_or_else(|| panic!("{text}"));
    for col in ["P50", "P90", "P99", "MAX"] {
        assert!(header.contains(col), "{header}");
    }
    let sleepy =
        text.lines().find(|l| l.starts_with("sleepy ")).unwrap_or_else(|| panic!("{text}"));
    assert!(sleepy.contains("ms"), "{sleepy}");
    // A USDT probe has no return: its latency columns say so.
    let usdt = text
        .lines()
        .find(|l| l.starts_with("usdt:strobe_test:tick"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(usdt.trim_end().ends_with('-'), "{usdt}");
}

#[test]
fn trace_prints_every_hit_with_its_thread() {
    require_uprobes!();
    let scratch = Scratch::new("probe-trace");
    let prog = strobe_testprogs::path("probe_target");
    let log = scratch.path("trace.txt");
    let out = run(strobe()
        .args(["probe", "--trace", "counted_call", "-o"])
        .arg(&log)
        .arg("--")
        .arg(&prog)
        .args(["calls", "2", "7"]));
    assert!(out.status.success(), "{}", show(&out));
    let text = std::fs::read_to_string(&log).unwrap();
    let hits: Vec<Vec<&str>> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|c| c.len() == 3 && c[2] == "counted_call")
        .collect();
    assert_eq!(hits.len(), 14, "{text}");
    let mut tids: Vec<&str> = hits.iter().map(|c| c[1]).collect();
    tids.sort();
    tids.dedup();
    assert_eq!(tids.len(), 2, "two threads called it: {text}");
    for c in &hits {
        assert!(c[0].parse::<f64>().is_ok(), "time column: {c:?}");
    }
}

#[test]
fn the_programs_exit_status_is_strobes() {
    require_uprobes!();
    let prog = strobe_testprogs::path("probe_target");
    let out = run(strobe().args(["probe", "counted_call", "--"]).arg(&prog).args(["exit", "3"]));
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    let line = stdout(&out).lines().find(|l| l.starts_with("counted_call ")).map(str::to_string);
    assert!(line.is_some_and(|l| l.split_whitespace().nth(2) == Some("1")), "{}", show(&out));
}

#[test]
fn list_shows_usdt_probes_of_the_program_and_its_libraries_and_functions() {
    let prog = strobe_testprogs::path("probe_target");
    let out = run(strobe().args(["probe", "--list", "--functions", "-x"]).arg(&prog));
    assert!(out.status.success(), "{}", show(&out));
    let text = stdout(&out);
    for want in [
        "usdt:strobe_test:tick",
        "usdt:strobe_test:guarded",
        "usdt:libprobelib.so:strobe_lib:hello",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
    assert!(text.lines().any(|l| l.trim_end().ends_with(" counted_call")), "{text}");
    assert!(text.lines().any(|l| l.trim_end().ends_with(" sleepy")), "{text}");
}

/// Runs `strobe probe ARGS -- probe_target exit 0`, expects failure, returns stderr.
fn probe_error(args: &[&str]) -> String {
    let prog = strobe_testprogs::path("probe_target");
    let out = run(strobe().arg("probe").args(args).arg("--").arg(&prog).args(["exit", "0"]));
    assert!(!out.status.success(), "{}", show(&out));
    let err = stderr(&out);
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn an_unknown_function_names_close_ones() {
    let err = probe_error(&["counted_cal"]);
    assert!(err.contains("function 'counted_cal' not found"), "{err}");
    assert!(err.contains("did you mean") && err.contains("counted_call"), "{err}");
    let err = probe_error(&["libprobelib:lib_counted"]);
    assert!(err.contains("lib_counted_call"), "{err}");
}

#[test]
fn unknown_usdt_probe_and_library_are_named() {
    let err = probe_error(&["usdt:strobe_test:tock"]);
    assert!(err.contains("USDT probe 'strobe_test:tock' not found"), "{err}");
    assert!(err.contains("tick"), "{err}");
    let err = probe_error(&["libnosuch.so:f"]);
    assert!(err.contains("library 'libnosuch.so' not found"), "{err}");
    assert!(err.contains("libprobelib.so"), "names what it loads: {err}");
}

#[test]
fn a_binary_that_is_not_elf_is_refused() {
    let scratch = Scratch::new("probe-notelf");
    let file = scratch.path("script.sh");
    std::fs::write(&file, "#!/bin/sh\necho hi\n").unwrap();
    let out = run(strobe().args(["probe", "main", "-x"]).arg(&file).args(["--", "true"]));
    assert!(!out.status.success(), "{}", show(&out));
    assert!(stderr(&out).contains("not an ELF file"), "{}", show(&out));
}

#[test]
fn bad_probe_syntax_is_refused_clearly() {
    let err = probe_error(&["usdt:onlyone"]);
    assert!(err.contains("bad probe 'usdt:onlyone'"), "{err}");
    let err = probe_error(&["point:"]);
    assert!(err.contains("bad probe 'point:'"), "{err}");
}

#[test]
fn probe_points_of_a_program_without_the_probe_library_are_explained() {
    // probe_target declares no probe points and links no probe library: it runs, its
    // status is kept, and strobe says why there is nothing to count.
    let prog = strobe_testprogs::path("probe_target");
    let out = run(strobe().args(["probe", "point:request", "--"]).arg(&prog).args(["exit", "4"]));
    assert_eq!(out.status.code(), Some(4), "{}", show(&out));
    let err = stderr(&out);
    assert!(err.contains("wrote no probe-point report") && err.contains("--probe-lib"), "{err}");
}

#[test]
fn without_privilege_the_error_says_what_is_needed() {
    require_uprobes!();
    // Drop to an unprivileged user (needs root to do so, which require_uprobes implies).
    let prog = strobe_testprogs::path("probe_target");
    let out = run(std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--"])
        .arg(env!("CARGO_BIN_EXE_strobe"))
        .args(["probe", "counted_call", "--"])
        .arg(&prog)
        .args(["exit", "0"]));
    let err = stderr(&out);
    if !err.starts_with("strobe:") {
        // setpriv itself failed (absent, or strobe's directory is closed to that user).
        eprintln!("skipping: cannot run strobe as an unprivileged user here: {}", show(&out));
        return;
    }
    assert!(!out.status.success(), "{}", show(&out));
    assert!(err.contains("not permitted") && err.contains("root"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}

/// `probe_points` (tests/c/probe_points.c, with strobe-probe's C header and library): its
/// header says what it fires per run. Returns None, after saying why, where it is not built.
fn probe_points_program() -> Option<std::path::PathBuf> {
    if !strobe_testprogs::PROGRAMS.contains(&"probe_points") {
        eprintln!(
            "skipping: the probe_points test program (strobe-probe's C test) is not in this tree"
        );
        return None;
    }
    Some(strobe_testprogs::path("probe_points"))
}

#[test]
fn probe_points_declared_in_the_program_are_counted_exactly() {
    let Some(prog) = probe_points_program() else { return };
    let scratch = Scratch::new("probe-points");
    let probes = ["point:c_tick", "point:c_six", "point:c_zero", "point:c_scope"];
    let (out, report) = probe_json(&scratch, &probes, &prog, &["2", "1000"]);
    assert!(out.status.success(), "{}", show(&out));
    // 2 threads x 1000 iterations: c_tick and c_six every iteration, c_zero and the scoped
    // c_scope every 10th.
    assert_eq!(hits(&report, "point:c_tick"), 2000, "{report:#}");
    assert_eq!(hits(&report, "point:c_six"), 2000, "{report:#}");
    assert_eq!(hits(&report, "point:c_zero"), 200, "{report:#}");
    assert_eq!(hits(&report, "point:c_scope"), 200, "{report:#}");
    assert_eq!(row(&report, "point:c_tick")["kind"], "point");
    let l = &row(&report, "point:c_scope")["latency_ns"];
    assert_eq!(l["count"], 200, "a scoped probe has durations: {report:#}");
    assert!(l["p50"].as_u64() <= l["max"].as_u64(), "{l}");
    assert!(row(&report, "point:c_tick")["latency_ns"].is_null(), "{report:#}");
}

#[test]
fn an_unknown_probe_point_is_named_with_close_ones() {
    let Some(prog) = probe_points_program() else { return };
    let out = run(strobe().args(["probe", "point:c_tik", "--"]).arg(&prog).args(["1", "10"]));
    assert!(out.status.success(), "the program's status stays strobe's: {}", show(&out));
    let err = stderr(&out);
    assert!(err.contains("probe 'point:c_tik' is unknown") && err.contains("c_tick"), "{err}");
}

#[test]
fn list_with_a_command_shows_its_probe_points() {
    let Some(prog) = probe_points_program() else { return };
    let out = run(strobe().args(["probe", "--list", "--"]).arg(&prog).args(["1", "10"]));
    assert!(out.status.success(), "{}", show(&out));
    let text = stdout(&out);
    // c_never never fires in this run: it is listed all the same.
    for want in ["point:c_tick", "point:c_six", "point:c_zero", "point:c_scope", "point:c_never"] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
    assert!(text.contains("6 args"), "{text}");
}

#[test]
fn kernel_probes_and_probe_points_count_the_same_calls() {
    require_uprobes!();
    let Some(prog) = probe_points_program() else { return };
    let scratch = Scratch::new("probe-mixed");
    // scoped_work holds the c_scope probe: both must see every call.
    let (out, report) =
        probe_json(&scratch, &["scoped_work", "point:c_scope"], &prog, &["2", "500"]);
    assert!(out.status.success(), "{}", show(&out));
    assert_eq!(hits(&report, "scoped_work"), 100, "{report:#}");
    assert_eq!(hits(&report, "point:c_scope"), 100, "{report:#}");
}

/// Runs `strobe ARGS` in a private mount namespace where tracefs is not mounted (nor
/// debugfs, whose `tracing` directory would mount it on first use), as user `uid` once
/// the mounts are gone. Nothing outside that namespace sees the unmounting or strobe's own
/// mount, so the machine's mount state is what it was, whatever the test does.
fn strobe_without_tracefs(args: &[&std::ffi::OsStr], uid: Option<u32>) -> Output {
    use std::os::unix::process::CommandExt;
    let mut cmd = strobe();
    cmd.args(args);
    // SAFETY: between fork and exec the closure makes only system calls (unshare, mount,
    // umount2, setgroups, setresgid, setresuid) on static strings; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            let check = |r: libc::c_int| {
                if r == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            };
            check(libc::unshare(libc::CLONE_NEWNS))?;
            let root = c"/";
            check(libc::mount(
                std::ptr::null(),
                root.as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            for point in
                [c"/sys/kernel/debug/tracing", c"/sys/kernel/tracing", c"/sys/kernel/debug"]
            {
                // Stacked mounts come off one at a time; EINVAL: nothing (more) mounted.
                for _ in 0..16 {
                    if libc::umount2(point.as_ptr(), libc::MNT_DETACH) != 0 {
                        break;
                    }
                }
            }
            if let Some(uid) = uid {
                check(libc::setgroups(0, std::ptr::null()))?;
                check(libc::setresgid(uid, uid, uid))?;
                check(libc::setresuid(uid, uid, uid))?;
            }
            Ok(())
        });
    }
    run(&mut cmd)
}

/// As root, with tracefs not mounted, `strobe probe` mounts it at /sys/kernel/tracing
/// (as perf does), says so in one line on stderr, and counts every call.
#[test]
fn tracefs_is_mounted_when_absent_and_strobe_says_so() {
    require_uprobes!();
    if !root() {
        eprintln!("skipping: mounting tracefs needs root");
        return;
    }
    let scratch = Scratch::new("probe-mount");
    let json = scratch.path("report.json");
    let prog = strobe_testprogs::path("probe_nopie");
    let args: Vec<&std::ffi::OsStr> = vec![
        "probe".as_ref(),
        "nopie_call".as_ref(),
        "--json".as_ref(),
        "-o".as_ref(),
        json.as_os_str(),
        "--".as_ref(),
        prog.as_os_str(),
        "777".as_ref(),
    ];
    let out = strobe_without_tracefs(&args, None);
    assert!(out.status.success(), "{}", show(&out));
    let err = stderr(&out);
    assert_eq!(
        err,
        "strobe: mounted tracefs at /sys/kernel/tracing (it was not mounted; kernel uprobes \
         are defined there)\n",
        "exactly one line, saying what was mounted where: {}",
        show(&out)
    );
    assert!(stdout(&out).contains("calls=777"), "{}", show(&out));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(hits(&report, "nopie_call"), 777, "{report:#}");
}

/// Without privilege, with tracefs not mounted, nothing is mounted and the error says
/// what to do, in one line, before the program runs.
#[test]
fn unprivileged_without_tracefs_the_error_says_how_to_mount_it() {
    require_uprobes!();
    if !root() {
        eprintln!("skipping: making a mount namespace without tracefs needs root");
        return;
    }
    let prog = strobe_testprogs::path("probe_target");
    let args: Vec<&std::ffi::OsStr> = vec![
        "probe".as_ref(),
        "counted_call".as_ref(),
        "--".as_ref(),
        prog.as_os_str(),
        "calls".as_ref(),
        "1".as_ref(),
        "5".as_ref(),
    ];
    let out = strobe_without_tracefs(&args, Some(65534));
    let err = stderr(&out);
    if !err.starts_with("strobe:") {
        eprintln!("skipping: cannot run strobe as an unprivileged user here: {}", show(&out));
        return;
    }
    assert!(!out.status.success(), "{}", show(&out));
    assert!(err.contains("tracefs") && err.contains("not mounted"), "{err}");
    assert!(err.contains("mount -t tracefs nodev /sys/kernel/tracing"), "{err}");
    assert!(!err.contains("mounted tracefs at"), "nothing was mounted: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!stdout(&out).contains("calls="), "the program did not run: {}", show(&out));
}
