//! `strobe report FILE.data` on files written by Linux perf (Debian's linux-perf, which
//! ci/setup.sh installs) while it profiles test programs built from source: every
//! function's sample count must equal the one `perf report --stdio --no-children` gives
//! for the same file, exactly.
//!
//! Both sides are parsed: perf's table (`--sort dso,sym -n`: the rows of `--sort sym`,
//! which perf keeps apart per file, with the file named) and strobe's JSON, and compared
//! by (module, name) exactly: strobe names code as perf does (the debug file's symbol
//! table, perf's choice among aliases, `f.constprop.0` and `clock_gettime@@GLIBC_2.17`
//! as spelled, PLT entries, the stretched `_init` that covers them). Kernel samples (named
//! from /proc/kallsyms when the file was recorded on this kernel, else one row) are
//! compared as one sum, `[kernel]`, with the sum of perf's `[k]` rows
//! (tests/it/kernel.rs compares them function by function). Addresses no symbol names
//! (perf prints them, strobe says `[unknown in MODULE]` or splits them at FDEs) are one
//! bucket per module on both sides.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::util::{run, show, strobe, Scratch};

/// True when `perf` runs; otherwise says why the test skips.
fn have_perf() -> bool {
    let ok = Command::new("perf").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipped: `perf` does not run here (install linux-perf: ci/setup.sh)");
    }
    ok
}

/// `perf record -q -o DIR/NAME.data ARGS -- PROG PROG_ARGS`.
fn perf_record(
    dir: &Scratch,
    name: &str,
    args: &[&str],
    prog: &str,
    prog_args: &[&str],
) -> PathBuf {
    let out = dir.path(&format!("{name}.data"));
    let o = Command::new("perf")
        .args(["record", "-q", "-o"])
        .arg(&out)
        .args(args)
        .arg("--")
        .arg(strobe_testprogs::path(prog))
        .args(prog_args)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "perf record {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// (module, function) -> samples.
type Counts = BTreeMap<(String, String), u64>;

const KERNEL: &str = "[kernel]";

/// perf's sample counts per (dso, symbol), one map per event section, in file order.
fn perf_report(file: &Path) -> Vec<(String, Counts)> {
    let o = Command::new("perf")
        .args(["report", "--stdio", "--no-children", "--sort", "dso,sym", "-n", "-g", "none", "-i"])
        .arg(file)
        .output()
        .unwrap();
    assert!(o.status.success(), "perf report failed: {}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    let mut sections: Vec<(String, Counts)> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# Samples: ") {
            let name = rest.split_once(" '").map_or("", |(_, n)| n.trim_end_matches('\''));
            sections.push((name.to_string(), Counts::new()));
            continue;
        }
        // "  66.59%  845  spin  [.] work_b": percentages, as many sample counts (the
        // first is the event's, or the group leader's), the dso, the mode, the symbol.
        // The mode: [.] user, [k] kernel, [g] guest kernel, [u] guest user, [H] hypervisor.
        let Some((at, mode)) = [".", "k", "g", "u", "H"]
            .iter()
            .find_map(|m| line.find(&format!(" [{m}] ")).map(|i| (i, *m)))
        else {
            continue;
        };
        let symbol = line[at + 5..].trim();
        let cols: Vec<&str> = line[..at].split_whitespace().collect();
        let pct = cols.iter().take_while(|c| c.ends_with('%')).count();
        if pct == 0 || cols.len() != 2 * pct + 1 {
            continue;
        }
        let samples: u64 = cols[pct].parse().unwrap();
        let key = if mode == "k" {
            (KERNEL.to_string(), KERNEL.to_string())
        } else {
            (cols[2 * pct].to_string(), symbol.to_string())
        };
        let (_, counts) = sections.last_mut().expect("a row before any '# Samples:' line");
        *counts.entry(key).or_default() += samples;
    }
    sections
}

/// strobe's JSON report of `file` (with `extra` arguments).
fn strobe_json(file: &Path, extra: &[&str]) -> serde_json::Value {
    let out = run(strobe().arg("report").arg(file).args(["--format", "json"]).args(extra));
    assert!(out.status.success(), "{}", show(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn strobe_counts(json: &serde_json::Value) -> Counts {
    let mut counts = Counts::new();
    for f in json["functions"].as_array().unwrap() {
        let module = f["module"].as_str().unwrap().to_string();
        let function = f["function"].as_str().unwrap().to_string();
        let key = if module == KERNEL { (module.clone(), module) } else { (module, function) };
        // Functions met only as callers (call chains) have no samples of their own; perf's
        // self counts do not list them.
        let n = f["samples"].as_u64().unwrap();
        if n > 0 {
            *counts.entry(key).or_default() += n;
        }
    }
    counts
}

/// The key a row is compared under: its (module, name), except that addresses no symbol
/// names (perf prints the address, strobe `[unknown in MODULE]` or `MODULE+0xSTART`, an
/// FDE's start) are one bucket per module on both sides.
fn key((module, name): &(String, String)) -> (String, String) {
    let unnamed = name.starts_with("0x")
        || name.starts_with("[unknown in ")
        || name.starts_with(&format!("{module}+0x"));
    if unnamed {
        (module.clone(), "[unnamed]".into())
    } else {
        (module.clone(), name.clone())
    }
}

fn keyed(counts: &Counts) -> Counts {
    let mut out = Counts::new();
    for (k, n) in counts {
        *out.entry(key(k)).or_default() += n;
    }
    out
}

/// Asserts strobe's counts equal perf's, function by function; returns the total.
fn assert_same_counts(file: &Path, perf: &Counts, strobe: &Counts) -> u64 {
    let (p, s) = (keyed(perf), keyed(strobe));
    let diff: Vec<String> = p
        .keys()
        .chain(s.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| p.get(*k) != s.get(*k))
        .map(|k| format!("{k:?}: perf {:?}, strobe {:?}", p.get(k), s.get(k)))
        .collect();
    assert!(
        diff.is_empty(),
        "{}: per-function samples differ:\n{}\nperf: {perf:#?}\nstrobe: {strobe:#?}",
        file.display(),
        diff.join("\n")
    );
    let total: u64 = p.values().sum();
    assert!(total > 0, "no samples in {}", file.display());
    total
}

/// True when /proc/kallsyms shows addresses here.
fn strobe_target_kallsyms_readable() -> bool {
    std::fs::read_to_string("/proc/kallsyms")
        .is_ok_and(|t| t.lines().next().is_some_and(|l| !l.starts_with("0000000000000000")))
}

/// The one event section of perf's report.
fn only_section(file: &Path) -> Counts {
    let mut sections = perf_report(file);
    assert_eq!(sections.len(), 1, "{sections:?}");
    sections.pop().unwrap().1
}

fn samples_of(json: &serde_json::Value, function: &str) -> u64 {
    json["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["function"] == function)
        .map(|f| f["samples"].as_u64().unwrap())
        .sum()
}

#[test]
fn task_clock_cpu_clock_and_frequency_mode_count_as_perf_report() {
    if !have_perf() {
        return;
    }
    let dir = Scratch::new("perfdata-clocks");
    for (name, args) in [
        ("task", &["-e", "task-clock:u", "-c", "50000"][..]),
        ("cpu", &["-e", "cpu-clock:u", "-c", "50000"][..]),
        ("freq", &["-e", "task-clock:u", "-F", "5000"][..]),
    ] {
        let file = perf_record(&dir, name, args, "perf_mix", &["30"]);
        let json = strobe_json(&file, &[]);
        let total = assert_same_counts(&file, &only_section(&file), &strobe_counts(&json));
        assert_eq!(json["samples"], total);
        // perf_mix spends 2 units in work_b for each in work_a and in leaf.
        let (a, b, leaf) =
            (samples_of(&json, "work_a"), samples_of(&json, "work_b"), samples_of(&json, "leaf"));
        assert!(a > 50 && b > a && leaf > 50, "{name}: work_a {a}, work_b {b}, leaf {leaf}");
        assert_eq!(json["events"][0], args[1], "{name}");
        if name == "freq" {
            let source = json["source"].as_str().unwrap();
            assert!(source.contains("-F 5000 Hz"), "{source}");
            assert!(json["period"].as_u64().unwrap() > 0);
        } else {
            assert_eq!(json["period"], 50000, "{name}");
        }
    }
}

#[test]
fn leader_sampling_group_counts_as_perf_report_with_its_counters() {
    if !have_perf() {
        return;
    }
    let dir = Scratch::new("perfdata-group");
    // Debian's perf 6.1 does not follow threads for a :S group: a single-threaded target.
    let file = perf_record(
        &dir,
        "group",
        &["-e", "{task-clock,page-faults}:S", "-c", "50000"],
        "perf_mix",
        &["30"],
    );
    let json = strobe_json(&file, &[]);
    assert_eq!(json["events"], serde_json::json!(["task-clock", "page-faults"]));
    let perf = only_section(&file);
    assert!(
        perf.contains_key(&(KERNEL.into(), KERNEL.into())),
        "a group without :u samples the kernel too"
    );
    assert_same_counts(&file, &perf, &strobe_counts(&json));
    // A member stands for its group: the report is the leader's.
    assert_eq!(strobe_json(&file, &["--event", "page-faults"]), json);
    // Kernel samples: named from /proc/kallsyms, as this kernel recorded them, or, where
    // it hides addresses, one row the user is told about.
    let out = run(strobe().arg("report").arg(&file));
    let err = String::from_utf8_lossy(&out.stderr);
    let kernel_rows: Vec<&str> = json["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["module"] == KERNEL)
        .map(|f| f["function"].as_str().unwrap())
        .collect();
    if strobe_target_kallsyms_readable() {
        assert!(kernel_rows.iter().all(|f| !f.starts_with("[unknown")), "{kernel_rows:?}");
    } else {
        assert!(err.contains("kernel samples are reported as one row"), "{}", show(&out));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("events:   task-clock (sampling leader), page-faults"), "{text}");
    assert!(text.contains("group counters read at each sample"), "{text}");
}

#[test]
fn callchain_recording_counts_as_perf_report() {
    if !have_perf() {
        return;
    }
    let dir = Scratch::new("perfdata-callchain");
    let file =
        perf_record(&dir, "g", &["-g", "-e", "task-clock:u", "-c", "50000"], "perf_mix", &["30"]);
    let json = strobe_json(&file, &[]);
    assert_same_counts(&file, &only_section(&file), &strobe_counts(&json));
    assert!(samples_of(&json, "leaf") > 50);
    // The chains are the samples' stacks: leaf runs only under main -> outer -> middle, so
    // the total (inclusive) counts of outer and main hold every sample of leaf. (Not
    // middle's: leaf sets up no frame, so a frame-pointer chain taken in it skips its
    // caller, in perf as anywhere.)
    let total = |name: &str| {
        let f = json["functions"].as_array().unwrap().iter().find(|f| f["function"] == name);
        f.map_or(0, |f| f["total_samples"].as_u64().unwrap())
    };
    let leaf = samples_of(&json, "leaf");
    assert!(total("outer") >= leaf && total("main") >= leaf, "{json:#}");
}

/// Names perf gives that a symbolizer reading DWARF, or picking another alias, does not:
/// the vDSO's `__vdso_clock_gettime` (a strong symbol beside the weak `clock_gettime`),
/// libc's versioned `clock_gettime@@GLIBC_2.17` (from its debug file), PLT stubs (named
/// by perf 6.1 after the unsized `_init` stretched over them), ld.so's local
/// `*.constprop.0` functions at startup (a short period catches some).
#[test]
fn vdso_libc_plt_and_ld_so_names_count_as_perf_report() {
    if !have_perf() {
        return;
    }
    let dir = Scratch::new("perfdata-names");
    let file = perf_record(
        &dir,
        "clock",
        &["-e", "task-clock", "-c", "20000"],
        "clock_loop",
        &["2000000"],
    );
    let json = strobe_json(&file, &[]);
    let perf = only_section(&file);
    assert_same_counts(&file, &perf, &strobe_counts(&json));
    let vdso = samples_of(&json, "__vdso_clock_gettime");
    let total = json["samples"].as_u64().unwrap();
    eprintln!("__vdso_clock_gettime: {vdso} of {total} samples; perf: {perf:?}");
    // Where the clocksource cannot be read from user space the vDSO falls back to the
    // system call, and the time goes to the kernel instead.
    if strobe_counts(&json).keys().any(|(m, _)| m == "[vdso]") {
        assert!(vdso > 0, "{json:#}");
    }
}

#[test]
fn each_of_two_events_counts_as_perf_report() {
    if !have_perf() {
        return;
    }
    let dir = Scratch::new("perfdata-two");
    let clock = "task-clock/period=50000/u";
    let faults = "page-faults/period=4/u";
    let file = perf_record(&dir, "two", &["-e", clock, "-e", faults], "perf_mix", &["30"]);
    let sections = perf_report(&file);
    let names: Vec<&str> = sections.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, [clock, faults]);

    // The first sampling event by default, the other on request (full name or base).
    let json = strobe_json(&file, &[]);
    assert_eq!(json["events"], serde_json::json!([clock]));
    let source = json["source"].as_str().unwrap();
    assert!(
        source.contains(&format!("also in the file: {faults} (choose one by its event name)")),
        "{source}"
    );
    assert_same_counts(&file, &sections[0].1, &strobe_counts(&json));
    for pick in [faults, "page-faults"] {
        let json = strobe_json(&file, &["--event", pick]);
        assert_eq!(json["events"], serde_json::json!([faults]));
        assert_same_counts(&file, &sections[1].1, &strobe_counts(&json));
        assert!(samples_of(&json, "fault_pages") > 10, "faults are taken in fault_pages");
    }

    let out = run(strobe().arg("report").arg(&file).args(["--event", "cycles"]));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no event 'cycles'") && err.contains(clock) && err.contains(faults),
        "{err}"
    );
}

#[test]
fn threads_forks_and_execs_count_as_perf_report() {
    if !have_perf() {
        return;
    }
    let dir = Scratch::new("perfdata-tasks");
    let file = perf_record(
        &dir,
        "threads",
        &["-e", "task-clock:u", "-c", "50000"],
        "perf_threads",
        &["10"],
    );
    let json = strobe_json(&file, &[]);
    assert_same_counts(&file, &only_section(&file), &strobe_counts(&json));
    let lanes: Vec<u64> = (1..=4).map(|i| samples_of(&json, &format!("lane_{i}"))).collect();
    assert!(lanes.iter().all(|&n| n > 20) && lanes[3] > lanes[0], "{lanes:?}");

    // A forked child has no mappings of its own; an exec replaces the image.
    let file =
        perf_record(&dir, "forks", &["-e", "task-clock:u", "-c", "50000"], "perf_forks", &[]);
    let json = strobe_json(&file, &[]);
    assert_same_counts(&file, &only_section(&file), &strobe_counts(&json));
    for f in ["parent_work", "child_work", "stage2_work"] {
        assert!(samples_of(&json, f) > 20, "{f}: {json}");
    }
}

#[test]
fn pipe_mode_counts_as_perf_report() {
    if !have_perf() {
        return;
    }
    let dir = Scratch::new("perfdata-pipe");
    let file = dir.path("pipe.data");
    let st = Command::new("perf")
        .args(["record", "-q", "-o", "-", "-e", "task-clock:u", "-c", "50000", "--"])
        .arg(strobe_testprogs::path("perf_mix"))
        .arg("30")
        .stdout(std::fs::File::create(&file).unwrap())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let json = strobe_json(&file, &[]);
    assert!(json["source"].as_str().unwrap().contains("pipe mode"));
    assert_same_counts(&file, &only_section(&file), &strobe_counts(&json));
}

/// `perf record -z`: the records zstd-compressed (COMPRESSED records, as Debian's perf
/// writes them), in a file and in a pipe, read with the counts perf gives.
#[test]
fn compressed_records_count_as_perf_report() {
    if !have_perf() {
        return;
    }
    let dir = Scratch::new("perfdata-compressed");
    let file = perf_record(
        &dir,
        "z",
        &["-z", "-g", "-e", "task-clock:u", "-c", "50000"],
        "perf_threads",
        &["10"],
    );
    let bytes = std::fs::read(&file).unwrap();
    assert!(
        strobe_perfdata::decompress(&bytes).unwrap().is_some(),
        "perf record -z wrote compressed records"
    );
    let json = strobe_json(&file, &[]);
    let total = assert_same_counts(&file, &only_section(&file), &strobe_counts(&json));
    assert_eq!(json["samples"], total);
    assert!(samples_of(&json, "lane_4") > 20, "{json}");

    let pipe = dir.path("zpipe.data");
    let st = Command::new("perf")
        .args(["record", "-q", "-z", "-o", "-", "-e", "task-clock:u", "-c", "50000", "--"])
        .arg(strobe_testprogs::path("perf_mix"))
        .arg("30")
        .stdout(std::fs::File::create(&pipe).unwrap())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    let json = strobe_json(&pipe, &[]);
    assert!(json["source"].as_str().unwrap().contains("pipe mode"));
    assert_same_counts(&pipe, &only_section(&pipe), &strobe_counts(&json));
}

#[test]
fn cut_and_corrupt_perf_data_are_one_line_messages() {
    if !have_perf() {
        return;
    }
    let dir = Scratch::new("perfdata-damage");
    let file =
        perf_record(&dir, "whole", &["-e", "task-clock:u", "-c", "50000"], "perf_mix", &["20"]);
    let good = std::fs::read(&file).unwrap();
    let data_start = u64::from_le_bytes(good[40..48].try_into().unwrap()) as usize;
    let data_size = u64::from_le_bytes(good[48..56].try_into().unwrap()) as usize;

    // Cut inside the last record (perf killed as it wrote): what comes before the cut is
    // reported, with a warning naming the byte. (A cut further in may lose the mappings:
    // perf writes each CPU's buffer in turn, and the exec's mappings can come after
    // samples taken on the other CPU.)
    let cut = dir.path("cut.data");
    let at = data_start + data_size - 12;
    std::fs::write(&cut, &good[..at]).unwrap();
    let out = run(strobe().arg("report").arg(&cut));
    assert!(out.status.success(), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cut short at byte"), "{err}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("work_b"), "{text}");
    let whole: u64 = only_section(&file).values().sum();
    let reported = strobe_json(&cut, &[])["samples"].as_u64().unwrap();
    assert!(
        reported + 1 >= whole && reported <= whole,
        "{reported} of {whole} samples before the cut"
    );

    let expect_error = |bytes: &[u8], needles: &[&str]| {
        let f = dir.path("bad.data");
        std::fs::write(&f, bytes).unwrap();
        let out = run(strobe().arg("report").arg(&f));
        assert_eq!(out.status.code(), Some(1), "{}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{}", show(&out));
        assert!(!err.contains("panicked"), "{err}");
        for n in needles {
            assert!(err.contains(n), "{n:?} not in {err}");
        }
    };
    // Cut inside the header.
    expect_error(&good[..60], &["bad.data", "cut short", "the file header"]);
    // Cut inside the attr section.
    expect_error(&good[..110], &["bad.data", "cut short", "attr section"]);
    // A record whose size is smaller than its header.
    let mut bad = good.clone();
    bad[data_start + 6..data_start + 8].copy_from_slice(&4u16.to_le_bytes());
    expect_error(&bad, &["bad.data", "corrupt perf.data", &format!("byte {data_start}")]);
}

#[test]
fn perf_report_throughput_is_measured_on_a_real_file() {
    if !have_perf() {
        return;
    }
    let dir = Scratch::new("perfdata-throughput");
    let file =
        perf_record(&dir, "t", &["-e", "task-clock:u", "-c", "20000"], "perf_threads", &["10"]);
    let t = strobe_report::perfdata::measure(&file, &Default::default()).unwrap();
    let perf = only_section(&file).values().sum::<u64>();
    assert_eq!(t.samples, perf, "every sample perf counts is read");
    assert!(t.samples_per_s() > 0.0 && t.bytes > 0);
}
