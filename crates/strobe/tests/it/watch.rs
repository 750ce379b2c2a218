//! Integration tests of `strobe watch`: real hardware watchpoints in real C programs
//! (tests/c/watch_writers.c, tests/c/watch_sigtrap.c), real signals, real threads.

use std::collections::{HashMap, HashSet};
use std::process::Output;

use crate::util::{run, show, strobe};

/// Runs `strobe watch ARGS`; `None` (with the reason printed) when this machine refuses
/// hardware breakpoints, so the test skips instead of failing.
fn watch(args: &[&str]) -> Option<Output> {
    let out = run(strobe().arg("watch").args(args));
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("hardware breakpoints are not available") {
        eprintln!("skipping: {err}");
        return None;
    }
    Some(out)
}

fn prog(name: &str) -> String {
    strobe_testprogs::path(name).display().to_string()
}

/// One printed hit: `tid=T wp=LABEL [old=O] new=V at FUNC (FILE:LINE)[ imprecise]`.
#[derive(Debug)]
struct Hit {
    tid: i32,
    wp: String,
    old: Option<i64>,
    new: i64,
    func: String,
    imprecise: bool,
    stack: Vec<String>,
}

fn hits(stdout: &str) -> Vec<Hit> {
    let mut out: Vec<Hit> = Vec::new();
    for line in stdout.lines() {
        if let Some(frame) = line.strip_prefix("    <- ") {
            if let Some(h) = out.last_mut() {
                h.stack.push(frame.split(' ').next().unwrap_or("").to_string());
            }
            continue;
        }
        if !line.starts_with("tid=") {
            continue;
        }
        let field = |k: &str| line.split(' ').find_map(|f| f.strip_prefix(k)).map(str::to_string);
        let func = line.split(" at ").nth(1).and_then(|r| r.split(' ').next()).unwrap_or("");
        out.push(Hit {
            tid: field("tid=").unwrap().parse().unwrap(),
            wp: field("wp=").unwrap(),
            old: field("old=").map(|v| v.parse().unwrap()),
            new: field("new=").unwrap().parse().unwrap(),
            func: func.to_string(),
            imprecise: line.contains("[imprecise"),
            stack: Vec::new(),
        });
    }
    out
}

/// `armed LABEL: P% of the time (N turns), H hits, ...` -> label -> (fraction, turns, hits).
fn armed(stdout: &str) -> HashMap<String, (f64, u64, u64)> {
    stdout
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("armed ")?;
            let (label, rest) = rest.split_once(": ")?;
            let pct: f64 = rest.split('%').next()?.parse().ok()?;
            let turns: u64 = rest.split('(').nth(1)?.split(' ').next()?.parse().ok()?;
            let hits: u64 = rest.split("), ").nth(1)?.split(' ').next()?.parse().ok()?;
            Some((label.to_string(), (pct / 100.0, turns, hits)))
        })
        .collect()
}

#[test]
fn every_write_of_four_threads_is_reported_with_function_thread_and_new_value() {
    const WRITES: i64 = 300;
    let Some(out) = watch(&["counter", "--", &prog("watch_writers"), "4", &WRITES.to_string()])
    else {
        return;
    };
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for w in 0..4 {
        assert!(stdout.contains(&format!("writer_{w} wrote {WRITES} times")), "{}", show(&out));
    }
    let hits = hits(&stdout);
    assert_eq!(hits.len() as i64, 4 * WRITES, "one hit per write\n{}", show(&out));
    let mut seen = HashSet::new();
    let mut thread_of_writer: HashMap<i64, i32> = HashMap::new();
    let mut last_k: HashMap<i32, i64> = HashMap::new();
    for h in &hits {
        assert_eq!(h.wp, "counter");
        assert!(!h.imprecise, "{h:?}");
        // writer_W stores W * 1000000 + k: the value names the writing function.
        let (w, k) = (h.new / 1_000_000, h.new % 1_000_000);
        assert!((0..4).contains(&w) && (1..=WRITES).contains(&k), "{h:?}");
        assert_eq!(h.func, format!("writer_{w}"), "the accessing function: {h:?}");
        assert!(seen.insert(h.new), "each write reported once: {h:?}");
        // One thread per writer, and each thread's writes arrive in program order.
        assert_eq!(*thread_of_writer.entry(w).or_insert(h.tid), h.tid, "{h:?}");
        let prev = last_k.insert(h.tid, k).unwrap_or(0);
        assert_eq!(k, prev + 1, "writes of one thread in order: {h:?}");
        // The old value is one some writer stored (or the initial 0).
        let old = h.old.expect("old value of a write");
        assert!(old == 0 || (old % 1_000_000 >= 1 && old / 1_000_000 < 4), "{h:?}");
    }
    let tids: HashSet<i32> = thread_of_writer.values().copied().collect();
    assert_eq!(tids.len(), 4, "four distinct threads");
    let a = armed(&stdout);
    assert_eq!(a["counter"].0, 1.0, "a lone watchpoint is always armed\n{stdout}");
    assert_eq!(a["counter"].2 as i64, 4 * WRITES);
}

#[test]
fn eight_watchpoints_over_four_slots_are_all_reported_with_armed_fractions() {
    let lanes: Vec<String> = (0..8).map(|i| format!("lanes+{}", i * 8)).collect();
    let mut args: Vec<&str> = lanes.iter().map(String::as_str).collect();
    let p = prog("watch_writers");
    args.extend(["--count", "--rotate-ms", "1", "--", &p, "4", "4000"]);
    let Some(out) = watch(&args) else { return };
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("8 watchpoints took turns in 4 debug registers"), "{stdout}");
    let a = armed(&stdout);
    assert_eq!(a.len(), 8, "{stdout}");
    let mut sum = 0.0;
    for lane in &lanes {
        let (frac, turns, hits) = a[lane.as_str()];
        assert!(frac > 0.0 && frac < 1.0, "{lane} armed part of the time: {frac}\n{stdout}");
        assert!(turns >= 1 && hits > 0, "{lane} was armed and hit\n{stdout}");
        // Scaled by its armed fraction, a lane's count estimates its 4 x 4000 writes
        // (loosely: the writers' pace varies over the run).
        let scaled = hits as f64 / frac;
        assert!((8_000.0..=32_000.0).contains(&scaled), "{lane}: {scaled}\n{stdout}");
        // The per-function summary names the writers.
        let section = stdout.split(&format!("{lane}:\n")).nth(1).expect("a section per lane");
        assert!(section.lines().next().unwrap_or("").contains("writer_"), "{stdout}");
        sum += frac;
    }
    // Four slots shared by eight watchpoints: the fractions add up to about four.
    assert!((3.0..=4.05).contains(&sum), "armed fractions sum to {sum}\n{stdout}");
}

#[test]
fn no_multiplex_refuses_more_watchpoints_than_registers_before_running() {
    let p = prog("watch_writers");
    let out = run(strobe()
        .args(["watch", "lanes", "lanes+8", "lanes+16", "lanes+24", "lanes+32"])
        .args(["--no-multiplex", "--", &p, "1", "1"]));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("5 watchpoints but a thread has only 4"), "{err}");
    assert!(err.contains("--no-multiplex"), "the flag that turned multiplexing off: {err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("wrote"), "the program did not run");
}

#[test]
fn bad_specs_are_refused_with_what_to_do() {
    let p = prog("watch_writers");
    for (spec, want) in [
        ("no_such_variable", "no variable named 'no_such_variable'"),
        ("counter:3", "length 3 is not supported"),
        ("counter+4:8", "not aligned"),
    ] {
        let out = run(strobe().args(["watch", spec, "--", &p, "1", "1"]));
        assert_eq!(out.status.code(), Some(1), "{spec}: {}", show(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want) && err.lines().count() == 1, "{spec}: {err}");
    }
}

#[test]
fn a_program_with_its_own_sigtrap_handler_still_gets_its_traps() {
    for mode in ["sigaction", "signal"] {
        let Some(out) = watch(&["watched", "--stack", "--", &prog("watch_sigtrap"), mode, "5"])
        else {
            return;
        };
        assert!(out.status.success(), "{mode}: {}", show(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("own traps: 5\n"), "{mode}: {stdout}");
        assert!(stdout.contains("watched=5\n"), "{mode}: {stdout}");
        if mode == "sigaction" {
            assert!(stdout.contains("codes ok: 1"), "its handler got its own siginfo: {stdout}");
        }
        assert!(stdout.contains("5 SIGTRAPs passed to the program's own handler"), "{stdout}");
        let hits = hits(&stdout);
        let news: Vec<i64> = hits.iter().map(|h| h.new).collect();
        assert_eq!(news, [1, 2, 3, 4, 5], "{mode}: {stdout}");
        for h in &hits {
            assert_eq!(h.func, "store");
            assert_eq!(h.old, Some(h.new - 1));
            assert!(h.stack.len() >= 2 && h.stack[..2] == ["outer", "main"], "{h:?}");
        }
    }
}

#[test]
fn a_program_blocking_sigtrap_gets_imprecise_hits_and_is_not_killed() {
    let Some(out) = watch(&["watched", "--", &prog("watch_sigtrap"), "blocked", "3"]) else {
        return;
    };
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("done\n"), "{stdout}");
    let hits = hits(&stdout);
    assert!(!hits.is_empty(), "the pending hit is reported once unblocked: {stdout}");
    assert!(hits.iter().all(|h| h.imprecise), "{stdout}");
}

#[test]
fn the_programs_exit_status_is_strobes() {
    let Some(out) = watch(&["watched", "--", &prog("watch_sigtrap"), "nonsense"]) else {
        return;
    };
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
}

#[test]
fn per_thread_events_follow_every_thread() {
    // main stores hits32 once (armed from the constructor); the writers, found by the
    // agent while they sleep 100 ms, each store counter 50 times.
    let p = prog("watch_writers");
    let Some(out) = watch(&["hits32:4", "counter", "--thread", "--", &p, "4", "50", "100"]) else {
        return;
    };
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let hits = hits(&stdout);
    let main: Vec<_> = hits.iter().filter(|h| h.wp == "hits32:4").collect();
    assert_eq!(main.len(), 1, "{stdout}");
    assert_eq!((main[0].new, main[0].func.as_str()), (1, "main"));
    let writes: Vec<_> = hits.iter().filter(|h| h.wp == "counter").collect();
    assert_eq!(writes.len(), 200, "every writer's stores: {stdout}");
    assert!(writes.iter().all(|h| h.func == format!("writer_{}", h.new / 1_000_000)));
    let tids: HashSet<i32> = writes.iter().map(|h| h.tid).collect();
    assert_eq!(tids.len(), 4);
    assert!(stdout.contains("-- per-thread watchpoints in 5 threads"), "{stdout}");
}

/// With --thread, a thread made by pthread_create opens its own events before its start
/// routine runs: a store that is the routine's first instruction is caught in every thread.
#[test]
fn per_thread_events_catch_a_new_threads_first_instruction() {
    const THREADS: i64 = 20;
    let p = prog("watch_newthread");
    let Some(out) = watch(&["first_word", "--thread", "--", &p, &THREADS.to_string()]) else {
        return;
    };
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("threads={THREADS} last={THREADS}")), "{stdout}");
    let hits = hits(&stdout);
    let values: Vec<i64> = hits.iter().map(|h| h.new).collect();
    assert_eq!(values, (1..=THREADS).collect::<Vec<_>>(), "one hit per thread, in order\n{stdout}");
    assert!(hits.iter().all(|h| h.func == "first_write" && !h.imprecise), "{stdout}");
    let tids: HashSet<i32> = hits.iter().map(|h| h.tid).collect();
    assert_eq!(tids.len() as i64, THREADS, "each store from its own thread");
    // main and every thread it made, each armed once.
    let armed = format!("-- per-thread watchpoints in {} threads", THREADS + 1);
    assert!(stdout.contains(&armed), "{stdout}");
}

/// With --thread and more watchpoints than slots (rotating), 2,400 short threads made 8 at
/// a time each arm themselves exactly once (a second set of events would count a second
/// thread), and each one's single store is caught (the five watchpoints all overlap it,
/// so whichever four are armed, one fires).
#[test]
fn per_thread_events_of_churning_threads_are_armed_once_while_rotating() {
    let p = prog("thread_churn");
    let spec = ["sink", "sink:4", "sink+4:4", "sink:2", "sink:1"];
    let mut args = vec!["--count", "--thread"];
    args.extend(spec);
    args.extend(["--", &p]);
    let Some(out) = watch(&args) else { return };
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("-- 2400 hits"), "{stdout}");
    assert!(stdout.contains("took turns"), "multiplexed: {stdout}");
    assert!(stdout.contains("-- per-thread watchpoints in 2401 threads"), "{stdout}");
}

#[test]
fn a_forked_child_is_not_watched_and_not_harmed() {
    let Some(out) = watch(&["watched", "--", &prog("watch_sigtrap"), "fork"]) else { return };
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("child exit: 0\n"), "{stdout}");
    let news: Vec<i64> = hits(&stdout).iter().map(|h| h.new).collect();
    assert_eq!(news, [1, 2], "the parent's stores only: {stdout}");
}

#[test]
fn an_execd_image_runs_unwatched_with_its_own_traps() {
    let Some(out) = watch(&["watched", "--", &prog("watch_sigtrap"), "exec"]) else { return };
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("own traps: 2\n"), "{stdout}");
    // The new image's stores (1 and 2) are not watched: watchpoints end at exec.
    assert!(hits(&stdout).iter().all(|h| h.new == 1000), "{stdout}");
}

#[test]
fn a_raw_address_is_watched_in_a_position_dependent_program() {
    let p = strobe_testprogs::path("watch_writers_nopie");
    let syms = strobe_watch::ElfSymbols::open(&p).unwrap();
    let addr = syms.lookup("counter").unwrap().expect("counter in the program").vaddr;
    let spec = format!("{addr:#x}:8");
    let Some(out) = watch(&[&spec, "--", &p.display().to_string(), "2", "10"]) else { return };
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let hits = hits(&stdout);
    assert_eq!(hits.len(), 20, "{stdout}");
    assert!(hits.iter().all(|h| h.func == format!("writer_{}", h.new / 1_000_000)), "{stdout}");
}

/// A global of a shared library (tests/c/watchlib.c) is watched by `LIB:SYMBOL` and, when
/// the executable has no symbol by that name, by the bare name: every write is reported,
/// from the library's function, with its new value.
#[test]
fn a_shared_librarys_global_is_watched_by_library_and_by_bare_name() {
    const THREADS: i64 = 2;
    const WRITES: i64 = 50;
    let (t, w) = (THREADS.to_string(), WRITES.to_string());
    for spec in ["libwatchlib.so:lib_counter", "libwatchlib:lib_counter:8:w", "lib_counter"] {
        let Some(out) = watch(&[spec, "--", &prog("watch_libuser"), &t, &w]) else { return };
        assert!(out.status.success(), "{spec}: {}", show(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(&format!("writes={}", THREADS * WRITES)), "{}", show(&out));
        let hits = hits(&stdout);
        assert_eq!(hits.len() as i64, THREADS * WRITES, "{spec}: one hit per write\n{stdout}");
        let mut last: HashMap<i64, i64> = HashMap::new();
        for h in &hits {
            assert_eq!(h.wp, spec);
            assert_eq!(h.func, "lib_bump", "the library's function: {h:?}");
            let (thread, k) = (h.new / 1_000_000, h.new % 1_000_000);
            assert!((0..THREADS).contains(&thread), "{h:?}");
            let prev = last.insert(thread, k).unwrap_or(0);
            assert_eq!(k, prev + 1, "each write once, in order: {h:?}");
        }
    }
}

#[test]
fn a_library_the_program_does_not_load_is_refused_before_running() {
    let p = prog("watch_writers");
    let out = run(strobe().args(["watch", "libwatchlib.so:lib_counter", "--", &p, "1", "1"]));
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("libwatchlib.so") && err.contains("not found"), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("wrote"), "the program did not run");
}
