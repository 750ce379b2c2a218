//! Call stacks through the real `strobe record --call-graph` and `strobe report`: programs
//! built from tests/c and tests/rust without frame pointers measure their own CPU time per
//! function and print it; the report's total (inclusive) time of those functions must match
//! within 3 points, and the samples in libc, the C++ unwinder, a signal handler and a
//! library loaded with dlopen must carry their callers. `fp` is recorded beside `dwarf`
//! where it shows what a frame-pointer walk loses (printed, not asserted: it depends on how
//! the system's libraries were built).
//!
//! Sampling runs at a 250 us period (about 2,500 samples per CPU-second where the default
//! overhead budget takes about 200), so that a second of a program's CPU gives shares whose
//! 95% interval is under 2 points wide on each side: the 3-point tolerance is the sampling
//! error plus the program's own timing of its calls.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::util::{record_to, run, show, strobe, Scratch};

/// The default event group at a fast period, with jitter so that samples cannot lock onto
/// the programs' loops.
const EVENTS: &str = "{task-clock/period=250us,jitter=100us/,page-faults,context-switches}";

/// Points the report's total time may differ from the program's own measurement.
const TOLERANCE_POINTS: f64 = 3.0;

/// One recording of a test program.
struct Recorded {
    file: PathBuf,
    out: Output,
    /// The `key=value` pairs the program printed.
    truth: BTreeMap<String, f64>,
}

impl Recorded {
    /// The program's measured CPU time in `func` as a percentage of its process's.
    fn truth_pct(&self, func: &str) -> f64 {
        let key = format!("{func}_cpu_ns");
        let got = self.truth.get(&key).unwrap_or_else(|| panic!("no {key}: {}", show(&self.out)));
        100.0 * got / self.truth["process_cpu_ns"]
    }
}

/// `strobe record --call-graph MODE -e EVENTS -- PROGRAM ARGS`; the program's exit status
/// must be `status`.
fn record(dir: &Scratch, mode: &str, program: &Path, args: &[&str], status: i32) -> Recorded {
    record_with(dir, &["--call-graph", mode, "-e", EVENTS], mode, program, args, status)
}

/// `strobe record OPTIONS -- PROGRAM ARGS` into a file named for the program and `tag`.
fn record_with(
    dir: &Scratch,
    options: &[&str],
    tag: &str,
    program: &Path,
    args: &[&str],
    status: i32,
) -> Recorded {
    let name = program.file_name().unwrap().to_string_lossy();
    let file = dir.path(&format!("{name}-{tag}.strobe"));
    let out = run(record_to(&file).args(options).arg("--").arg(program).args(args));
    assert_eq!(out.status.code(), Some(status), "{}", show(&out));
    let truth = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect();
    Recorded { file, out, truth }
}

fn report_json(file: &Path) -> Value {
    let out = run(strobe().arg("report").arg(file).args(["--format", "json", "--quiet"]));
    assert!(out.status.success(), "{}", show(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", show(&out)))
}

fn function<'v>(json: &'v Value, name: &str) -> &'v Value {
    json["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == name)
        .unwrap_or_else(|| panic!("{name} missing from the report's functions"))
}

fn total_pct(json: &Value, name: &str) -> f64 {
    function(json, name)["total_pct"].as_f64().unwrap()
}

/// The recording's call paths from `strobe report --format folded`: frames outermost
/// first (the sampled function last) and samples. The row of unsampled time is left out.
fn paths(file: &Path) -> Vec<(Vec<String>, u64)> {
    let out = run(strobe().arg("report").arg(file).args(["--format", "folded", "--quiet"]));
    assert!(out.status.success(), "{}", show(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with("[not sampled]"))
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').unwrap_or_else(|| panic!("bad folded line {l:?}"));
            (stack.split(';').map(str::to_string).collect(), n.parse().unwrap())
        })
        .collect()
}

/// Samples on paths that pass `keep`, and the share of them that also pass `good`.
fn share(
    paths: &[(Vec<String>, u64)],
    keep: impl Fn(&[String]) -> bool,
    good: impl Fn(&[String]) -> bool,
) -> (u64, f64) {
    let (mut n, mut ok) = (0, 0);
    for (p, c) in paths {
        if keep(p) {
            n += c;
            if good(p) {
                ok += c;
            }
        }
    }
    (n, if n == 0 { 0.0 } else { ok as f64 / n as f64 })
}

/// True when `path` holds `seq` as consecutive frames.
/// A function's split-off part counts as the function: names come from the symbol table,
/// as perf gives them, where gcc's cold part of `f` is `f [clone .cold]` (`f.cold`), and a
/// frame in it stands where `f`'s would.
fn has_run(path: &[String], seq: &[&str]) -> bool {
    fn whole(f: &str) -> &str {
        f.split_once(" [clone .").map_or(f, |(base, _)| base)
    }
    path.windows(seq.len()).any(|w| w.iter().zip(seq).all(|(a, b)| whole(a) == *b))
}

/// True when `path` ends with `seq` (its last frame is the sampled function).
fn ends_with(path: &[String], seq: &[&str]) -> bool {
    path.len() >= seq.len() && path[path.len() - seq.len()..].iter().zip(seq).all(|(a, b)| a == b)
}

/// glibc's munmap, under whichever of its names the symbol tables give.
fn is_munmap(name: &str) -> bool {
    name == "munmap" || name.ends_with("_munmap")
}

/// True when the outermost frame is where a thread begins: `_start` for the main thread,
/// glibc's `clone3` (or `clone`) for the others; their unwind tables mark them outermost.
fn at_entry(path: &[String]) -> bool {
    path.first().is_some_and(|f| f == "_start" || f.ends_with("clone3") || f.ends_with("clone"))
}

/// True when the symbols of the libc this test runs with (its own, or a debug file found
/// by build id under /usr/lib/debug) include `name`.
fn libc_names(name: &str) -> bool {
    use object::{Object, ObjectSymbol};
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let Some(libc) = maps.lines().filter_map(|l| l.split_whitespace().nth(5)).find(|p| {
        Path::new(p).file_name().is_some_and(|n| n.to_string_lossy().starts_with("libc.so"))
    }) else {
        return false;
    };
    let has = |path: &Path| -> (bool, Option<Vec<u8>>) {
        let Ok(bytes) = std::fs::read(path) else { return (false, None) };
        let Ok(obj) = object::File::parse(&*bytes) else { return (false, None) };
        let found = obj.symbols().any(|s| s.name() == Ok(name));
        (found, obj.build_id().ok().flatten().map(<[u8]>::to_vec))
    };
    let (found, id) = has(Path::new(libc));
    found
        || id.is_some_and(|id| {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            let debug = format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]);
            has(Path::new(&debug)).0
        })
}

/// The munmap samples' callers (`good` of `in_munmap` carry b <- a <- main) and the share
/// of all samples whose stack reaches the thread's entry.
fn munmap_callers_and_entries(
    label: &str,
    paths: &[(Vec<String>, u64)],
    in_munmap: u64,
    good: f64,
) {
    let (all, complete) = share(paths, |_| true, at_entry);
    println!(
        "{label}: {all} samples, {:.1}% reach the entry; {in_munmap} in munmap, {:.1}% with \
         b <- a <- main",
        100.0 * complete,
        100.0 * good
    );
    assert!(in_munmap >= 30, "too few samples in munmap ({in_munmap}) to judge");
    assert!(good >= 0.95, "munmap samples with b <- a <- main: {:.1}%", 100.0 * good);
    assert!(complete >= 0.99, "samples whose stack reaches _start: {:.1}%", 100.0 * complete);
}

fn check_total(json: &Value, r: &Recorded, report_name: &str, truth_name: &str) {
    let got = total_pct(json, report_name);
    let want = r.truth_pct(truth_name);
    println!("{report_name}: total {got:.1}% in the report, {want:.1}% measured by the program");
    assert!(
        (got - want).abs() <= TOLERANCE_POINTS,
        "{report_name}: total time {got:.1}% against the program's own {want:.1}%"
    );
}

#[test]
fn c_without_frame_pointers_keeps_callers_through_libc() {
    let _quiet = crate::util::quiet();
    let dir = Scratch::new("stacks-nofp");
    let prog = strobe_testprogs::path("unwind_nofp");
    let r = record(&dir, "dwarf", &prog, &["1200"], 0);
    let paths = paths(&r.file);
    let (in_munmap, good) = share(
        &paths,
        |p| p.last().is_some_and(|f| is_munmap(f)),
        |p| has_run(p, &["main", "a", "b"]) && p.len() >= 4 && p[p.len() - 2] == "b",
    );
    munmap_callers_and_entries("dwarf", &paths, in_munmap, good);
    check_total(&report_json(&r.file), &r, "a", "a");

    // The frame-pointer walk beside it: libc and this program keep no frame pointers.
    let fp = record(&dir, "fp", &prog, &["500"], 0);
    let fp_paths = self::paths(&fp.file);
    let (n, fp_good) = share(
        &fp_paths,
        |p| p.last().is_some_and(|f| is_munmap(f)),
        |p| has_run(p, &["main", "a", "b"]),
    );
    let json = report_json(&fp.file);
    let a = json["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "a")
        .map_or(0.0, |f| f["total_pct"].as_f64().unwrap());
    println!(
        "fp: {n} samples in munmap, {:.1}% with b <- a <- main; a's total {a:.1}% against {:.1}% \
         measured",
        100.0 * fp_good,
        fp.truth_pct("a")
    );
}

/// Kernel mode (nothing injected) with `--call-graph dwarf`: the kernel copies each
/// sample's user stack and strobe record walks the copy, so the same program's munmap
/// samples carry their callers through libc, below the kernel's own frames.
#[test]
fn kernel_mode_walks_copied_stacks_through_code_without_frame_pointers() {
    let _quiet = crate::util::quiet();
    let dir = Scratch::new("stacks-kernel-dwarf");
    let prog = strobe_testprogs::path("unwind_nofp");
    let r = record_with(
        &dir,
        &[
            "--mode",
            "kernel",
            "--call-graph",
            "dwarf",
            "-e",
            "{task-clock/period=250us/,page-faults}",
        ],
        "kernel-dwarf",
        &prog,
        &["1200"],
        0,
    );
    let header = strobe_format::read_all(&r.file).unwrap().header;
    assert_eq!(header.call_graph, strobe_format::CallGraph::Dwarf);
    let paths = paths(&r.file);
    // The kernel's frames lie below munmap here: any frame of the path may be it.
    let (in_munmap, good) =
        share(&paths, |p| p.iter().any(|f| is_munmap(f)), |p| has_run(p, &["main", "a", "b"]));
    munmap_callers_and_entries("kernel dwarf", &paths, in_munmap, good);
    check_total(&report_json(&r.file), &r, "a", "a");
}

#[test]
fn rust_program_keeps_callers_through_libc() {
    let _quiet = crate::util::quiet();
    let dir = Scratch::new("stacks-rust");
    let prog = strobe_testprogs::path("unwind_rust");
    let r = record(&dir, "dwarf", &prog, &["1200"], 0);
    let paths = paths(&r.file);
    let callers = ["unwind_rust::worker", "unwind_rust::rs_a", "unwind_rust::rs_b"];
    let (in_munmap, good) = share(
        &paths,
        |p| p.last().is_some_and(|f| is_munmap(f)),
        |p| has_run(p, &callers) && p.len() >= 4 && p[p.len() - 2] == callers[2],
    );
    let (all, complete) = share(&paths, |_| true, at_entry);
    println!(
        "dwarf: {all} samples, {:.1}% reach the entry; {in_munmap} in munmap, {:.1}% with \
         rs_b <- rs_a <- worker",
        100.0 * complete,
        100.0 * good
    );
    assert!(in_munmap >= 30, "too few samples in munmap ({in_munmap}) to judge");
    assert!(good >= 0.95, "munmap samples with rs_b <- rs_a <- worker: {:.1}%", 100.0 * good);
    // The worker's stacks go through std's thread start and glibc's start_thread to clone3.
    assert!(complete >= 0.99, "samples whose stack reaches the entry: {:.1}%", 100.0 * complete);
    check_total(&report_json(&r.file), &r, "unwind_rust::rs_a", "rs_a");
}

#[test]
fn cxx_throw_and_catch_keeps_callers_across_the_unwinder() {
    let _quiet = crate::util::quiet();
    let dir = Scratch::new("stacks-cxx");
    let prog = strobe_testprogs::path("unwind_cxx");
    let r = record(&dir, "dwarf", &prog, &["1200"], 0);
    let json = report_json(&r.file);
    let paths = paths(&r.file);
    // Samples inside the throw: libstdc++'s __cxa_throw and libgcc's unwinder, both built
    // without frame pointers, reading the same kind of unwind tables strobe reads.
    let runtime: Vec<String> = json["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| {
            let m = f["module"].as_str().unwrap_or("");
            m.starts_with("libgcc_s") || m.starts_with("libstdc++")
        })
        .map(|f| f["function"].as_str().unwrap().to_string())
        .collect();
    // Every call into the runtime is made under outer: the throw (under thrower), the
    // catch (outer's landing pad calls __cxa_begin_catch and __cxa_end_catch).
    let (in_runtime, good) = share(
        &paths,
        |p| p.last().is_some_and(|f| runtime.contains(f)),
        |p| has_run(p, &["main", "outer(unsigned long)"]) && at_entry(p),
    );
    let chain = [
        "main",
        "outer(unsigned long)",
        "middle(unsigned long)",
        "thrower(unsigned long)",
        "__cxa_throw",
    ];
    let (in_throw, good_throw) =
        share(&paths, |p| p.iter().any(|f| f == "__cxa_throw"), |p| has_run(p, &chain));
    let (all, complete) = share(&paths, |_| true, at_entry);
    println!(
        "dwarf: {all} samples, {:.1}% reach the entry; {in_runtime} in libstdc++/libgcc, {:.1}% \
         with outer <- main; {in_throw} under __cxa_throw, {:.1}% with thrower <- middle <- \
         outer <- main",
        100.0 * complete,
        100.0 * good,
        100.0 * good_throw
    );
    assert!(in_runtime >= 30, "too few samples in the C++ runtime ({in_runtime}) to judge");
    // The rest are the samples libgcc takes while it installs the landing pad's context,
    // rewriting the frames above it (every unwinder loses those).
    assert!(good >= 0.95, "C++ runtime samples with outer <- main: {:.1}%", 100.0 * good);
    assert!(in_throw >= 30, "too few samples under __cxa_throw ({in_throw}) to judge");
    assert!(good_throw >= 0.99, "throws with their callers: {:.1}%", 100.0 * good_throw);
    check_total(&json, &r, "outer(unsigned long)", "outer");
}

#[test]
fn signal_handler_samples_carry_the_interrupted_functions_callers() {
    let _quiet = crate::util::quiet();
    let dir = Scratch::new("stacks-signal");
    let prog = strobe_testprogs::path("unwind_sighandler");
    let r = record(&dir, "dwarf", &prog, &["1200"], 0);
    let paths = paths(&r.file);
    // in_handler <- on_usr1 <- (the sigreturn trampoline) <- libc's raise <- victim <- main.
    let (in_handler, good) = share(
        &paths,
        |p| p.last().is_some_and(|f| f == "in_handler"),
        |p| {
            ends_with(p, &["on_usr1", "in_handler"])
                && has_run(p, &["main", "victim"])
                && at_entry(p)
        },
    );
    let (all, complete) = share(&paths, |_| true, at_entry);
    println!(
        "dwarf: {all} samples, {:.1}% reach the entry; {in_handler} in in_handler, {:.1}% with \
         the interrupted victim <- main",
        100.0 * complete,
        100.0 * good
    );
    assert!(in_handler >= 30, "too few samples in the handler ({in_handler}) to judge");
    assert!(good >= 0.95, "handler samples with victim <- main: {:.1}%", 100.0 * good);
    // The frame under the handler is the trampoline, named as libc's symbols name it.
    let mut under: BTreeMap<&str, u64> = BTreeMap::new();
    for (p, n) in paths.iter().filter(|(p, _)| ends_with(p, &["on_usr1", "in_handler"])) {
        *under.entry(p[p.len() - 3].as_str()).or_default() += n;
    }
    println!("frames under on_usr1: {under:?}");
    if libc_names("__restore_rt") {
        assert_eq!(under.keys().copied().collect::<Vec<_>>(), ["__restore_rt"]);
    } else {
        println!("libc's symbols here do not name __restore_rt: its name is not checked");
    }
    assert!(complete >= 0.99, "samples whose stack reaches _start: {:.1}%", 100.0 * complete);
    let json = report_json(&r.file);
    // victim's calls include the handler's time: the walk must cross the trampoline.
    check_total(&json, &r, "victim", "victim");
    check_total(&json, &r, "in_handler", "in_handler");
}

#[test]
fn library_loaded_with_dlopen_is_named_with_its_callers() {
    let _quiet = crate::util::quiet();
    let dir = Scratch::new("stacks-dlopen");
    let prog = strobe_testprogs::path("unwind_dlopen");
    let lib = strobe_testprogs::shared_lib("unwind_dllib");
    let r = record(&dir, "dwarf", &prog, &[lib.to_str().unwrap(), "1200"], 0);
    let json = report_json(&r.file);
    let inner = function(&json, "dllib_inner");
    assert_eq!(inner["module"], "libunwind_dllib.so", "{inner:#}");
    let paths = paths(&r.file);
    let (in_lib, good) = share(
        &paths,
        |p| p.last().is_some_and(|f| f == "dllib_inner"),
        |p| ends_with(p, &["main", "run_lib", "dllib_work", "dllib_inner"]) && at_entry(p),
    );
    let (all, complete) = share(&paths, |_| true, at_entry);
    println!(
        "dwarf: {all} samples, {:.1}% reach the entry; {in_lib} in dllib_inner, {:.1}% with \
         dllib_work <- run_lib <- main",
        100.0 * complete,
        100.0 * good
    );
    assert!(in_lib >= 30, "too few samples in the library ({in_lib}) to judge");
    assert!(good >= 0.95, "library samples with their callers: {:.1}%", 100.0 * good);
    assert!(complete >= 0.99, "samples whose stack reaches _start: {:.1}%", 100.0 * complete);
    check_total(&json, &r, "run_lib", "run_lib");
}

#[test]
fn a_smashed_frame_ends_the_walk_and_changes_nothing_in_the_target() {
    let _quiet = crate::util::quiet();
    let dir = Scratch::new("stacks-smash");
    let prog = strobe_testprogs::path("unwind_smash");
    // What the program prints and returns on its own (status 3, so that a profiler which
    // replaced it with its own would show).
    let bare = run(std::process::Command::new(&prog).args(["100", "3"]));
    assert_eq!(bare.status.code(), Some(3), "{}", show(&bare));
    let fixed = |out: &Output| -> Vec<String> {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.contains("_cpu_ns="))
            .map(str::to_string)
            .collect()
    };
    for mode in ["dwarf", "fp"] {
        let ms = if mode == "dwarf" { "1000" } else { "400" };
        let r = record(&dir, mode, &prog, &[ms, "3"], 3);
        assert_eq!(fixed(&r.out), fixed(&bare), "{mode}: the program's output changed");
        assert!(r.truth.contains_key("smash_cpu_ns"), "{}", show(&r.out));
        let json = report_json(&r.file);
        assert_eq!(json["lost_samples"], 0, "{mode}");
        let paths = paths(&r.file);
        let (smashed, clean_end) = share(
            &paths,
            |p| p.last().is_some_and(|f| f == "smash" || f == "beneath"),
            // The walk keeps the frames inside the smashed one and stops at it. A sample in
            // smash's first or last few instructions, before the frame is smashed or after
            // it is put back, has an intact stack (a dozen instructions of about 1.6 M
            // cycles a call: a run of 1,500 samples meets one about once in 100; one run
            // of eight here failed without this): its walk reaches the entry through main.
            |p| {
                p == ["smash"]
                    || p == ["smash", "beneath"]
                    || (ends_with(p, &["main", "smash"]) && at_entry(p))
            },
        );
        let (clean, complete) = share(
            &paths,
            |p| p.last().is_some_and(|f| f == "clean"),
            |p| ends_with(p, &["main", "clean"]) && at_entry(p),
        );
        let mut shapes: Vec<(String, u64)> = paths
            .iter()
            .filter(|(p, _)| p.last().is_some_and(|f| f == "smash" || f == "beneath"))
            .map(|(p, n)| (p.join(";"), *n))
            .collect();
        shapes.sort_by_key(|s| std::cmp::Reverse(s.1));
        println!(
            "{mode}: {smashed} samples in smash or beneath, {:.1}% ending at smash; {clean} in \
             clean, {:.1}% reaching _start; their paths: {:?}",
            100.0 * clean_end,
            100.0 * complete,
            &shapes[..shapes.len().min(4)]
        );
        assert!(smashed >= 30, "{mode}: too few samples under the smashed frame ({smashed})");
        if mode == "dwarf" {
            assert_eq!(clean_end, 1.0, "{mode}: a walk went past the smashed frame: {shapes:?}");
            assert!(complete >= 0.99, "{mode}: clean's stacks reaching _start: {complete}");
            // Every sample under the smashed frame is kept, attributed to smash.
            check_total(&json, &r, "smash", "smash");
        }
    }
}
