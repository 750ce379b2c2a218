//! `strobe bench breakpoint`: reserving hardware watchpoint slots when there are thousands
//! of threads (seed 000), and what a watch hit costs a target.
//!
//! Variants, side by side in one run (`usecs_per_op`, median of `opts.repeats`):
//!
//! - **list** / **array** / **hash** / **hash-mutex**: strobe's slot table
//!   ([`strobe_watch::SlotTable`], over strobe's map or one of [`crate::slotmaps`]). T
//!   thread ids are registered, each holding 3 of its 4 slots (3 reservations of one
//!   slot, as a thread watched at 3 locations); one op
//!   reserves the 4th slot of one of them and releases it. `list` is the kernel before the
//!   seed: one intrusive doubly linked list of every reservation, one heap node each (the
//!   kernel's `bp_task_head` of `perf_event`s), walked node by node to count the thread's
//!   slots under one mutex; `array` is the same O(T) scan over a contiguous slab, which the
//!   hardware prefetcher streams (a cheaper layout than the kernel ever had, shown so the
//!   reader can tell layout from complexity); `hash` is strobe-rcu's `HashMultiMap` keyed
//!   by thread (the kernel's `rhltable` after the seed), one entry per thread updated in
//!   place with atomics (a reserve is a lookup and a CAS, a release a lookup and an atomic
//!   AND: no allocation, lock or retirement); `hash-mutex` is a `std` `HashMap` from thread
//!   to slot mask behind a mutex. The speedup goal is judged on `list`, because a linked
//!   list is the structure the seed's patch replaced. The threads are registered ids, not
//!   live threads: the table's cost depends only on how many reservations it holds, and
//!   4096 live threads would only add scheduler noise to a sub-microsecond operation (the
//!   kernel rows below do use live threads). **VARIANT-lookup** rows time the lookup of
//!   one thread's used slots alone (`task_bp_pinned()`, the function the seed's patch
//!   changed).
//! - **kernel**: the same op done by the kernel: T live threads each hold 3 real
//!   `PERF_TYPE_BREAKPOINT` events opened on themselves; one op opens a 4th breakpoint on
//!   one of them with `perf_event_open` and closes it (reserve_bp_slot / release_bp_slot).
//! - **kernel-inherit**: `perf bench breakpoint thread` reproduced: a thread opens B = 4
//!   inheritable breakpoints, then P = 2 threads create and join batches of T threads,
//!   each of which inherits the 4 (4 slot reservations per thread). usecs per thread
//!   created and joined; **threads-only** is the same without breakpoints, so the
//!   difference is the breakpoint accounting. **perf-bench** is `perf bench breakpoint
//!   thread -b 4 -p 2 -t 512` itself when `perf` is installed, printed beside ours.
//! - **hit-count** / **hit-sigtrap** / **hit-sigtrap-agent**: what one watch hit costs the
//!   thread that makes it: a write to a watched word with a counting breakpoint; with a
//!   synchronous SIGTRAP to a handler that only counts; and with a handler doing what
//!   the watch agent does per hit (decode `si_perf_*`, count, read the new value and the
//!   interrupted IP, append a record to a preallocated buffer). The last two differ by the
//!   agent's own share. **watch-agent** is the real thing end to end: `strobe watch counter
//!   --count -- target N` on a small C target compiled here with `cc`, per hit =
//!   (time at N hits - time at 0 hits) / N, so it includes the agent's handler, its writer
//!   thread, the pipe and strobe's own reading and symbolizing.
//!
//! Must never be linked into the agent or a target.

use std::cell::Cell;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use strobe_perf::{OpenError, PerfEvent, Target};
use strobe_watch::bp::{self, Breakpoint, Mode, PerfTrap, Scope};
use strobe_watch::slots::DEBUG_REGISTERS;
use strobe_watch::{Access, HitCounters, Len, RcuHashMap, SlotTable, ThreadMultiMap};

use crate::report::{machine_summary, row};
use crate::slotmaps::{ArrayMap, ListMap, MutexHashMap};
use crate::stats::median;
use crate::{BenchError, BenchOpts, BenchReport};

/// Registered (or live) threads the reservation variants run at.
const THREADS: [usize; 4] = [1, 64, 512, 4096];
/// Slots each registered thread holds while one op takes the last one.
const HELD: u32 = DEBUG_REGISTERS - 1;
/// `perf bench breakpoint thread -b 4 -p 2 -t 512`, as measured in docs/DESIGN.
const PERF_B: usize = 4;
const PERF_P: usize = 2;
const PERF_T: usize = 512;
/// Goal: hash at 4096 threads within this factor of hash at 1 thread.
const FLAT_GOAL: f64 = 1.2;
/// Goal: hash at least this many times faster than list at 4096 threads.
const SPEEDUP_GOAL: f64 = 1000.0;

/// How much work each variant does; `quick` shrinks all of it.
struct Plan {
    /// Minimum time per slot-table measurement.
    table_min: Duration,
    /// perf_event_open + close ops per kernel measurement.
    kernel_ops: usize,
    /// Threads created per kernel-inherit measurement (at least 2 batches).
    inherit_threads: usize,
    /// Thread counts for kernel-inherit.
    inherit_ts: &'static [usize],
    /// `perf bench -r`.
    perf_repeat: usize,
    /// Runs of perf bench.
    perf_runs: usize,
    /// Hits per hit measurement.
    hits: u64,
}

impl Plan {
    fn new(opts: &BenchOpts) -> Plan {
        if opts.quick {
            Plan {
                table_min: Duration::from_millis(2),
                kernel_ops: 200,
                inherit_threads: 512,
                inherit_ts: &[1, 64, 512],
                perf_repeat: 2,
                perf_runs: 1,
                hits: 2_000,
            }
        } else {
            Plan {
                table_min: Duration::from_millis(20),
                kernel_ops: 2_000,
                inherit_threads: 5_120,
                inherit_ts: &THREADS,
                perf_repeat: 10,
                perf_runs: opts.repeats,
                hits: 20_000,
            }
        }
    }
}

/// Runs every variant of the `breakpoint` benchmark side by side.
pub(crate) fn run(opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    let plan = Plan::new(opts);
    let repeats = opts.repeats.max(1);
    let mut report = BenchReport::new("breakpoint");
    let mut notes: Vec<String> = Vec::new();

    // (b) strobe's slot table.
    let series: Vec<(&'static str, Vec<(f64, f64)>)> = vec![
        ("list", table_series::<ListMap>(&plan, repeats)),
        ("array", table_series::<ArrayMap>(&plan, repeats)),
        ("hash", table_series::<RcuHashMap>(&plan, repeats)),
        ("hash-mutex", table_series::<MutexHashMap>(&plan, repeats)),
    ];
    let table: Vec<(&'static str, Vec<f64>)> =
        series.iter().map(|(v, s)| (*v, s.iter().map(|x| x.0).collect())).collect();
    let lookups: Vec<(&'static str, Vec<f64>)> =
        series.iter().map(|(v, s)| (*v, s.iter().map(|x| x.1).collect())).collect();
    let hash_name = "hash";
    for (variant, series) in &table {
        for (t, us) in THREADS.iter().zip(series) {
            report.rows.push(row([
                ("variant", (*variant).into()),
                ("threads", (*t).into()),
                ("usecs_per_op", round(*us)),
                ("held_per_thread", HELD.into()),
            ]));
        }
    }
    for (variant, series) in &lookups {
        for (t, us) in THREADS.iter().zip(series) {
            report.rows.push(row([
                ("variant", format!("{variant}-lookup").into()),
                ("threads", (*t).into()),
                ("usecs_per_op", round(*us)),
                ("held_per_thread", HELD.into()),
            ]));
        }
    }

    // (a) the kernel: the same op on live threads, and perf's own benchmark.
    let mut kernel: Vec<Option<f64>> = Vec::new();
    for &t in &THREADS {
        match kernel_open_series(t, plan.kernel_ops, repeats) {
            Ok(us) => {
                report.rows.push(row([
                    ("variant", "kernel".into()),
                    ("threads", t.into()),
                    ("usecs_per_op", round(us)),
                    ("held_per_thread", HELD.into()),
                ]));
                kernel.push(Some(us));
            }
            Err(e) => {
                notes.push(format!("kernel at {t} threads not measured: {e}"));
                kernel.push(None);
            }
        }
    }
    let mut inherit: Vec<(usize, f64, f64)> = Vec::new();
    for &t in plan.inherit_ts {
        let batches = plan.inherit_threads.div_ceil(t).max(2);
        let with = median_of_results(repeats, || kernel_inherit(PERF_B, PERF_P, t, batches));
        let without = median_of_results(repeats, || kernel_inherit(0, PERF_P, t, batches));
        match (with, without) {
            (Ok(w), Ok(wo)) => {
                for (variant, us, b) in [("kernel-inherit", w, PERF_B), ("threads-only", wo, 0)] {
                    report.rows.push(row([
                        ("variant", variant.into()),
                        ("threads", t.into()),
                        ("usecs_per_op", round(us)),
                        ("breakpoints", b.into()),
                        ("parallel", PERF_P.into()),
                    ]));
                }
                inherit.push((t, w, wo));
            }
            (Err(e), _) | (_, Err(e)) => {
                notes.push(format!("kernel-inherit at {t} threads not measured: {e}"))
            }
        }
    }
    if opts.quick {
        notes.push("--quick: kernel-inherit skips 4096 threads".into());
    }
    let perf = match perf_bench_series(plan.perf_repeat, plan.perf_runs) {
        Some(Ok(us)) => {
            report.rows.push(row([
                ("variant", "perf-bench".into()),
                ("threads", PERF_T.into()),
                ("usecs_per_op", round(us)),
                ("breakpoints", PERF_B.into()),
                ("parallel", PERF_P.into()),
            ]));
            Some(us)
        }
        Some(Err(e)) => {
            notes.push(format!("perf bench breakpoint thread failed: {e}"));
            None
        }
        None => {
            notes.push("perf is not installed; install linux-perf to compare with it".into());
            None
        }
    };

    // Watch hits.
    let mut hits: Vec<(&'static str, f64)> = Vec::new();
    for kind in [HitKind::Count, HitKind::Trap, HitKind::TrapAgent] {
        match median_of_results(repeats, || hit_cost(kind, plan.hits)) {
            Ok(us) => {
                report.rows.push(row([
                    ("variant", kind.name().into()),
                    ("threads", 1.into()),
                    ("usecs_per_op", round(us)),
                    ("hits_per_s", (1e6 / us).round().into()),
                ]));
                hits.push((kind.name(), us));
            }
            Err(e) => notes.push(format!("{} not measured: {e}", kind.name())),
        }
    }
    match &opts.strobe_exe {
        Some(exe) => match watch_agent_cost(exe, plan.hits, repeats) {
            Ok(us) => {
                report.rows.push(row([
                    ("variant", "watch-agent".into()),
                    ("threads", 1.into()),
                    ("usecs_per_op", round(us)),
                    ("hits_per_s", (1e6 / us).round().into()),
                ]));
                hits.push(("watch-agent", us));
            }
            Err(e) => notes.push(format!("watch-agent not measured: {e}")),
        },
        None => notes.push("watch-agent not measured: no strobe executable given".into()),
    }

    // Goals.
    let hash = table.iter().find(|(v, _)| *v == hash_name).map(|(_, s)| s.clone());
    let list = table.iter().find(|(v, _)| *v == "list").map(|(_, s)| s.clone());
    let last = THREADS.len() - 1;
    let mut goals = Vec::new();
    if let (Some(hash), Some(list)) = (hash, list) {
        let flat = hash[last] / hash[0];
        let speedup = list[last] / hash[last];
        goals.push(json!({
            "goal": format!("{hash_name} at 4096 threads within {FLAT_GOAL}x of {hash_name} at 1 thread"),
            "value": round(flat), "met": flat <= FLAT_GOAL,
        }));
        goals.push(json!({
            "goal": format!(
                "{hash_name} >= {SPEEDUP_GOAL}x faster than list (the kernel's linked list) at \
                 4096 threads"
            ),
            "value": round(speedup), "met": speedup >= SPEEDUP_GOAL,
        }));
    }
    report.extra.insert("goals".into(), Value::Array(goals.clone()));
    report.extra.insert("notes".into(), json!(notes));
    report.extra.insert("machine".into(), machine_summary().into());

    report.text = render(&RenderInput {
        repeats,
        quick: opts.quick,
        table: &table,
        lookups: &lookups,
        kernel: &kernel,
        inherit: &inherit,
        perf,
        hits: &hits,
        goals: &goals,
        notes: &notes,
    });
    Ok(report)
}

fn round(x: f64) -> Value {
    if x.is_finite() {
        // Three significant decimals are plenty for usecs; keep tiny values readable.
        let digits = if x.abs() < 1.0 { 4 } else { 3 };
        let f = 10f64.powi(digits);
        ((x * f).round() / f).into()
    } else {
        Value::Null
    }
}

fn median_of_results(
    repeats: usize,
    mut f: impl FnMut() -> Result<f64, String>,
) -> Result<f64, String> {
    let mut xs = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        xs.push(f()?);
    }
    Ok(median(&xs))
}

// ---------------------------------------------------------------------------------------
// Slot table.

/// Runs `run(iters)` with doubling iteration counts until one run lasts `min`; returns
/// microseconds per iteration of that run.
fn usecs_per_iter(min: Duration, mut run: impl FnMut(u64)) -> f64 {
    run(1);
    let mut iters = 1u64;
    loop {
        let t = Instant::now();
        run(iters);
        let el = t.elapsed();
        if el >= min || iters >= 1 << 32 {
            return el.as_secs_f64() * 1e6 / iters as f64;
        }
        // Aim a little past `min` next time, at most 16x more work.
        let scale = (min.as_secs_f64() * 1.2 / el.as_secs_f64().max(1e-9)).clamp(2.0, 16.0);
        iters = (iters as f64 * scale) as u64;
    }
}

/// (reserve+release, lookup) usecs at each of [`THREADS`], medians of `repeats`. The
/// thread counts are timed in rounds (each round measures every T once, back to back), so
/// a noisy moment on a shared machine falls on every T alike rather than on one.
fn table_series<M: ThreadMultiMap + Default>(plan: &Plan, repeats: usize) -> Vec<(f64, f64)> {
    let tables: Vec<Filled<M>> = THREADS.iter().map(|&t| Filled::new(t)).collect();
    // Warm-up (first use of the map's read side registers the thread, first retirements
    // start the reclaimer): not part of any figure.
    for f in &tables {
        usecs_per_iter(plan.table_min, |n| f.reserve_release(n));
    }
    let mut ops = vec![Vec::with_capacity(repeats); tables.len()];
    let mut lookups = vec![Vec::with_capacity(repeats); tables.len()];
    for _ in 0..repeats {
        for (i, f) in tables.iter().enumerate() {
            ops[i].push(usecs_per_iter(plan.table_min, |n| f.reserve_release(n)));
            lookups[i].push(usecs_per_iter(plan.table_min, |n| f.lookup(n)));
        }
    }
    ops.iter().zip(&lookups).map(|(o, l)| (median(o), median(l))).collect()
}

/// A slot table holding [`HELD`] slots for each of `threads` registered thread ids.
struct Filled<M: ThreadMultiMap> {
    table: SlotTable<M>,
    held: Vec<strobe_watch::ReservationOf<M>>,
    /// The thread the timed ops work on (one in the middle).
    tid: i32,
}

impl<M: ThreadMultiMap + Default> Filled<M> {
    fn new(threads: usize) -> Self {
        const BASE: i32 = 10_000;
        let table: SlotTable<M> = SlotTable::default();
        let mut held = Vec::with_capacity(threads * HELD as usize);
        // Thread by thread, each thread's reservations back to back, in id order: the
        // list's nodes are allocated (and linked) in this order, so consecutive nodes tend
        // to sit next to each other in the heap and the walk, though a chain of dependent
        // loads, meets lines the prefetcher may already have brought in. That is the
        // list's best case, not the kernel's: its nodes are whole `perf_event`s (about a
        // kilobyte each, and `task_bp_pinned()` reads fields on more than one cache line
        // of each), the ones created by `perf bench breakpoint`'s parallel inheritance
        // come from several CPUs' slab pages interleaved, and distribution kernels
        // randomise slab free lists. We do not shuffle or pad to imitate that: the list
        // measured here is, if anything, faster per node than the kernel's, so the
        // speedup over it understates the seed's rather than inflating it.
        for t in 0..threads {
            for _ in 0..HELD {
                held.push(
                    table.reserve(BASE + t as i32, 1).expect("a fresh thread has free slots"),
                );
            }
        }
        Filled { table, held, tid: BASE + (threads / 2) as i32 }
    }
}

impl<M: ThreadMultiMap> Filled<M> {
    /// `n` ops: reserve the thread's last free slot and release it.
    fn reserve_release(&self, n: u64) {
        for _ in 0..n {
            let r =
                self.table.reserve(std::hint::black_box(self.tid), 1).expect("one slot is free");
            self.table.release(std::hint::black_box(r));
        }
    }

    /// `n` lookups of the thread's used slots alone (the `task_bp_pinned()` the seed's
    /// patch made O(1)).
    fn lookup(&self, n: u64) {
        for _ in 0..n {
            std::hint::black_box(self.table.used(std::hint::black_box(self.tid)));
        }
    }
}

impl<M: ThreadMultiMap> Drop for Filled<M> {
    fn drop(&mut self) {
        for r in self.held.drain(..) {
            self.table.release(r);
        }
    }
}

// ---------------------------------------------------------------------------------------
// The kernel, on live threads.

/// Words the kernel variants put breakpoints on. Nothing writes them, so no breakpoint
/// ever fires: only reservation is measured.
static IDLE_WORDS: [AtomicU64; 8] = [const { AtomicU64::new(0) }; 8];

fn idle_bp(i: usize, len: Len, access: Access) -> Breakpoint {
    Breakpoint { addr: &IDLE_WORDS[i % IDLE_WORDS.len()] as *const AtomicU64 as u64, len, access }
}

fn describe(e: OpenError) -> String {
    e.to_string()
}

/// Makes sure the process may hold `needed` more fds, raising the soft limit to the hard
/// one if it must.
fn ensure_fds(needed: u64) -> Result<(), String> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes one rlimit through the valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err("getrlimit(RLIMIT_NOFILE) failed".into());
    }
    let want = needed + 256;
    if lim.rlim_cur >= want {
        return Ok(());
    }
    if lim.rlim_max < want {
        return Err(format!(
            "needs {want} file descriptors but the hard limit is {}; raise it (ulimit -Hn)",
            lim.rlim_max
        ));
    }
    lim.rlim_cur = want;
    // SAFETY: setrlimit reads one rlimit through the valid pointer.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
        return Err("setrlimit(RLIMIT_NOFILE) failed".into());
    }
    Ok(())
}

/// Live threads parked until released; each holds what its setup returned.
struct Parked {
    done: Arc<AtomicBool>,
    handles: Vec<JoinHandle<()>>,
}

impl Parked {
    fn release(self) {
        // Release: the parked threads' Acquire load sees `true` after unpark.
        self.done.store(true, Ordering::Release);
        for h in &self.handles {
            h.thread().unpark();
        }
        for h in self.handles {
            let _ = h.join();
        }
    }
}

fn park_until(done: &AtomicBool) {
    // Acquire: pairs with the Release store in `Parked::release`.
    while !done.load(Ordering::Acquire) {
        std::thread::park();
    }
}

/// Median usecs of `perf_event_open` + `close` of one breakpoint on one of `threads` live
/// threads, each holding [`HELD`] breakpoints of its own.
fn kernel_open_series(threads: usize, ops: usize, repeats: usize) -> Result<f64, String> {
    ensure_fds(threads as u64 * HELD as u64 + 16)?;
    let done = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<Result<libc::pid_t, String>>();
    let mut parked = Parked { done: done.clone(), handles: Vec::with_capacity(threads) };
    let mut tids = Vec::with_capacity(threads);
    let mut failure = None;
    for _ in 0..threads {
        let (tx, done) = (tx.clone(), done.clone());
        let spawned = std::thread::Builder::new().stack_size(64 * 1024).spawn(move || {
            let mut held: Vec<PerfEvent> = Vec::new();
            for i in 0..HELD as usize {
                match bp::open(
                    idle_bp(i, Len::B8, Access::Write),
                    Mode::Count,
                    Scope::Thread,
                    Target::CALLING_THREAD,
                    "breakpoint",
                ) {
                    Ok(ev) => held.push(ev),
                    Err(e) => {
                        let _ = tx.send(Err(describe(e)));
                        return;
                    }
                }
            }
            let _ = tx.send(Ok(strobe_perf::sys::gettid()));
            park_until(&done);
            drop(held);
        });
        match spawned {
            Ok(h) => parked.handles.push(h),
            Err(e) => {
                failure = Some(format!("cannot create thread {} of {threads}: {e}", tids.len()));
                break;
            }
        }
        match rx.recv() {
            Ok(Ok(tid)) => tids.push(tid),
            Ok(Err(e)) => {
                failure = Some(e);
                break;
            }
            Err(_) => {
                failure = Some("a thread exited before reporting".into());
                break;
            }
        }
    }
    let result = match failure {
        Some(e) => Err(e),
        None => {
            let tid = tids[tids.len() / 2];
            let target = Target::thread(tid);
            let mut xs = Vec::with_capacity(repeats);
            let mut err = None;
            for _ in 0..repeats {
                let t = Instant::now();
                for _ in 0..ops {
                    let bp = idle_bp(HELD as usize, Len::B8, Access::Write);
                    match bp::open(bp, Mode::Count, Scope::Thread, target, "breakpoint") {
                        Ok(ev) => drop(std::hint::black_box(ev)),
                        Err(e) => {
                            err = Some(describe(e));
                            break;
                        }
                    }
                }
                if err.is_some() {
                    break;
                }
                xs.push(t.elapsed().as_secs_f64() * 1e6 / ops as f64);
            }
            match err {
                Some(e) => Err(e),
                None => Ok(median(&xs)),
            }
        }
    };
    parked.release();
    result
}

/// `perf bench breakpoint thread` reproduced: usecs per thread created and joined while
/// `b` inheritable breakpoints exist, with `p` threads each creating batches of `t`.
fn kernel_inherit(b: usize, p: usize, t: usize, batches: usize) -> Result<f64, String> {
    let root = std::thread::Builder::new().name("bp-inherit".into()).spawn(move || {
        // Opened on this thread only, so only its descendants inherit them.
        let mut bps = Vec::with_capacity(b);
        for i in 0..b {
            let mut attr =
                bp::attr(idle_bp(i, Len::B1, Access::ReadWrite), Mode::Count, Scope::Process);
            attr.set_disabled(0);
            let ev = PerfEvent::open(&attr, Target::CALLING_THREAD, None, "breakpoint")
                .map_err(describe)?;
            bps.push(ev);
        }
        let repeat = Arc::new(AtomicIsize::new(batches as isize));
        let start = Instant::now();
        let workers: Vec<_> = (0..p)
            .map(|_| {
                let repeat = repeat.clone();
                std::thread::spawn(move || -> Result<(), String> {
                    // Relaxed: the counter only hands out batch numbers.
                    while repeat.fetch_sub(1, Ordering::Relaxed) > 0 {
                        let mut parked =
                            Parked { done: Arc::new(AtomicBool::new(false)), handles: Vec::new() };
                        for _ in 0..t {
                            let done = parked.done.clone();
                            let h = std::thread::Builder::new()
                                .stack_size(64 * 1024)
                                .spawn(move || park_until(&done))
                                .map_err(|e| format!("cannot create a thread: {e}"));
                            match h {
                                Ok(h) => parked.handles.push(h),
                                Err(e) => {
                                    parked.release();
                                    return Err(e);
                                }
                            }
                        }
                        parked.release();
                    }
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join().map_err(|_| "a worker panicked".to_string())??;
        }
        let el = start.elapsed();
        drop(bps);
        Ok(el.as_secs_f64() * 1e6 / batches as f64 / t as f64)
    });
    root.map_err(|e| format!("cannot create a thread: {e}"))?
        .join()
        .map_err(|_| "the benchmark thread panicked".to_string())?
}

/// `perf bench -r R breakpoint thread -b 4 -p 2 -t 512`'s usecs/op, median of `runs`;
/// `None` when perf is not installed.
fn perf_bench_series(repeat: usize, runs: usize) -> Option<Result<f64, String>> {
    let mut xs = Vec::new();
    for _ in 0..runs.max(1) {
        let out = Command::new("perf")
            .args(["bench", "-r", &repeat.to_string(), "breakpoint", "thread"])
            .args(["-b", &PERF_B.to_string(), "-p", &PERF_P.to_string()])
            .args(["-t", &PERF_T.to_string()])
            .output();
        let out = match out {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => return Some(Err(format!("cannot run perf: {e}"))),
            Ok(o) => o,
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let us = text
            .lines()
            .find(|l| l.trim_end().ends_with("usecs/op"))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|n| n.parse::<f64>().ok());
        match us {
            Some(us) if out.status.success() => xs.push(us),
            _ => {
                let err = String::from_utf8_lossy(&out.stderr);
                let why = err.lines().chain(text.lines()).next().unwrap_or("no output").trim();
                return Some(Err(format!("exit {}: {why}", out.status)));
            }
        }
    }
    Some(Ok(median(&xs)))
}

// ---------------------------------------------------------------------------------------
// Watch hits.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HitKind {
    Count,
    Trap,
    TrapAgent,
}

impl HitKind {
    fn name(self) -> &'static str {
        match self {
            HitKind::Count => "hit-count",
            HitKind::Trap => "hit-sigtrap",
            HitKind::TrapAgent => "hit-sigtrap-agent",
        }
    }
}

/// The word the hit variants write to (watched).
static HIT_WORD: AtomicU64 = AtomicU64::new(0);
/// What the handler does: 0 count only, 1 the agent's per-hit work.
static HANDLER_MODE: AtomicU8 = AtomicU8::new(0);
/// Hits per watchpoint, as the agent keeps them.
static HIT_COUNTERS: OnceLock<HitCounters> = OnceLock::new();
/// SIGTRAPs the handler could not attribute (not from a perf event).
static FOREIGN_TRAPS: AtomicU64 = AtomicU64::new(0);
/// The agent's per-hit record buffer: (watchpoint, tid, ip, new value) words.
const RING_WORDS: usize = 4 * 1024;
static RING: [AtomicU64; RING_WORDS] = [const { AtomicU64::new(0) }; RING_WORDS];
static RING_HEAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The thread id, cached as the agent caches it (gettid is a system call).
    static TID: Cell<i32> = const { Cell::new(0) };
}

#[cfg(target_arch = "x86_64")]
fn interrupted_ip(uc: *mut libc::c_void) -> u64 {
    if uc.is_null() {
        return 0;
    }
    // SAFETY: for an SA_SIGINFO handler the third argument is the interrupted context, a
    // valid ucontext_t for the duration of the handler.
    let uc = unsafe { &*(uc as *const libc::ucontext_t) };
    uc.uc_mcontext.gregs.get(libc::REG_RIP as usize).map_or(0, |r| *r as u64)
}

#[cfg(not(target_arch = "x86_64"))]
fn interrupted_ip(_uc: *mut libc::c_void) -> u64 {
    0
}

/// The bench's SIGTRAP handler: no allocation, no lock, no panic.
extern "C" fn on_hit(_sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let Some(trap) = (unsafe { PerfTrap::from_siginfo(info) }) else {
        FOREIGN_TRAPS.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let wp = trap.data as usize;
    if let Some(c) = HIT_COUNTERS.get() {
        c.record(wp);
    }
    // Relaxed: the mode is set before the breakpoint is enabled (an ioctl, a full
    // barrier), and never changes while hits arrive.
    if HANDLER_MODE.load(Ordering::Relaxed) == 0 {
        return;
    }
    // The agent's share: the new value, the accessing instruction, the thread, one record.
    let value = HIT_WORD.load(Ordering::Relaxed);
    let ip = interrupted_ip(uc);
    let tid = TID
        .try_with(|t| {
            if t.get() == 0 {
                t.set(strobe_perf::sys::gettid());
            }
            t.get()
        })
        .unwrap_or(0);
    // Relaxed: the buffer is read only after the run, once the writing thread was joined.
    let at = RING_HEAD.fetch_add(4, Ordering::Relaxed) % RING_WORDS;
    for (i, w) in [wp as u64, tid as u64, ip, value].into_iter().enumerate() {
        if let Some(slot) = RING.get(at + i) {
            slot.store(w, Ordering::Relaxed);
        }
    }
}

/// Installs `on_hit` for SIGTRAP, returning the previous action to restore.
fn install_hit_handler() -> Result<libc::sigaction, String> {
    // SAFETY: a zeroed sigaction is a valid value; sigaction reads the new one and writes
    // the old one through valid pointers.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = on_hit;
        sa.sa_sigaction = handler as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGTRAP, &sa, &mut old) != 0 {
            return Err("sigaction(SIGTRAP) failed".into());
        }
        Ok(old)
    }
}

fn restore_handler(old: &libc::sigaction) {
    // SAFETY: restoring the action sigaction returned earlier.
    unsafe { libc::sigaction(libc::SIGTRAP, old, std::ptr::null_mut()) };
}

/// usecs per watch hit of `kind`, over `n` writes to a watched word, on a fresh thread.
fn hit_cost(kind: HitKind, n: u64) -> Result<f64, String> {
    std::thread::spawn(move || hit_cost_here(kind, n))
        .join()
        .map_err(|_| "the hit thread panicked".to_string())?
}

fn hit_cost_here(kind: HitKind, n: u64) -> Result<f64, String> {
    let counters = HIT_COUNTERS.get_or_init(|| HitCounters::new(1));
    let target = Breakpoint {
        addr: &HIT_WORD as *const AtomicU64 as u64,
        len: Len::B8,
        access: Access::Write,
    };
    let mode = match kind {
        HitKind::Count => Mode::Count,
        HitKind::Trap | HitKind::TrapAgent => Mode::Trap { sig_data: 0 },
    };
    HANDLER_MODE.store(u8::from(kind == HitKind::TrapAgent), Ordering::Relaxed);
    let old = match kind {
        HitKind::Count => None,
        _ => Some(install_hit_handler()?),
    };
    let result = (|| {
        let ev = bp::open(target, mode, Scope::Thread, Target::CALLING_THREAD, "watch hit")
            .map_err(describe)?;
        let before = counters.get(0);
        ev.enable().map_err(|e| format!("enabling the watchpoint: {e}"))?;
        let t = Instant::now();
        for i in 0..n {
            // A plain 8-byte store (an atomic store is a mov on x86-64): each one hits.
            HIT_WORD.store(i, Ordering::Relaxed);
        }
        let el = t.elapsed();
        ev.disable().map_err(|e| format!("disabling the watchpoint: {e}"))?;
        let seen = match kind {
            HitKind::Count => ev.read_count().map_err(|e| format!("reading the count: {e}"))?,
            _ => counters.get(0) - before,
        };
        if seen != n {
            return Err(format!("{n} writes but {seen} hits seen"));
        }
        Ok(el.as_secs_f64() * 1e6 / n as f64)
    })();
    if let Some(old) = old {
        restore_handler(&old);
    }
    result
}

/// The target `watch-agent` runs: stores `0..N` into a global.
const WATCH_TARGET_C: &str = "#include <stdlib.h>\n\
volatile long counter;\n\
int main(int argc, char **argv) {\n\
    long n = argc > 1 ? atol(argv[1]) : 0;\n\
    for (long i = 1; i <= n; i++) counter = i;\n\
    return 0;\n\
}\n";

/// usecs per hit of the real thing: `strobe watch counter --count -- target N`, the whole
/// pipeline (agent handler, ring, writer thread, pipe, strobe reading and symbolizing),
/// as (time at N hits - time at 0 hits) / N, medians of `repeats`. The target is compiled
/// here from [`WATCH_TARGET_C`] with `cc`.
fn watch_agent_cost(strobe: &std::path::Path, n: u64, repeats: usize) -> Result<f64, String> {
    let dir = std::env::temp_dir().join(format!("strobe-bench-watch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let src = dir.join("target.c");
    let exe = dir.join("target");
    let result = (|| {
        std::fs::write(&src, WATCH_TARGET_C)
            .map_err(|e| format!("writing {}: {e}", src.display()))?;
        let cc = Command::new("cc")
            .args(["-O1", "-g", "-o"])
            .arg(&exe)
            .arg(&src)
            .status()
            .map_err(|e| format!("cannot run cc (install gcc): {e}"))?;
        if !cc.success() {
            return Err("compiling the watch target failed".to_string());
        }
        let time = |hits: u64| -> Result<f64, String> {
            let t = Instant::now();
            let out = Command::new(strobe)
                .args(["watch", "counter", "--count", "--"])
                .arg(&exe)
                .arg(hits.to_string())
                .output()
                .map_err(|e| format!("cannot run strobe watch: {e}"))?;
            let el = t.elapsed().as_secs_f64();
            let text = String::from_utf8_lossy(&out.stdout);
            if !out.status.success() || !text.contains(&format!("-- {hits} hits")) {
                let err = String::from_utf8_lossy(&out.stderr);
                return Err(format!("strobe watch did not report {hits} hits: {}", err.trim()));
            }
            Ok(el)
        };
        let mut xs = Vec::with_capacity(repeats);
        for _ in 0..repeats {
            let base = time(0)?;
            let full = time(n)?;
            xs.push((full - base).max(0.0) * 1e6 / n as f64);
        }
        Ok(median(&xs))
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

// ---------------------------------------------------------------------------------------
// The text report.

struct RenderInput<'a> {
    repeats: usize,
    quick: bool,
    table: &'a [(&'static str, Vec<f64>)],
    lookups: &'a [(&'static str, Vec<f64>)],
    kernel: &'a [Option<f64>],
    inherit: &'a [(usize, f64, f64)],
    perf: Option<f64>,
    hits: &'a [(&'static str, f64)],
    goals: &'a [Value],
    notes: &'a [String],
}

fn fmt_us(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.1}")
    } else if x >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.4}")
    }
}

/// `variant / hash` at `THREADS[i]`, with `decimals`, or `-` when either is missing.
fn ratio(series: &[(&'static str, Vec<f64>)], variant: &str, i: usize, decimals: usize) -> String {
    let at = |name: &str| series.iter().find(|(v, _)| *v == name).and_then(|(_, x)| x.get(i));
    match (at(variant), at("hash")) {
        (Some(v), Some(h)) => format!("{:.*}x", decimals, v / h),
        _ => "-".into(),
    }
}

fn render(r: &RenderInput) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "strobe bench breakpoint: {}", machine_summary());
    let _ = writeln!(
        s,
        "medians of {} repeat{}{}\n",
        r.repeats,
        if r.repeats == 1 { "" } else { "s" },
        if r.quick { " (--quick: figures not quotable)" } else { "" }
    );
    let _ = writeln!(
        s,
        "Slot reservation: reserve 1 slot + release it, for one thread among T threads each \
         holding {HELD} of {DEBUG_REGISTERS} (usecs/op)"
    );
    let _ = write!(s, "{:>8}", "threads");
    for (v, _) in r.table {
        let _ = write!(s, " {v:>11}");
    }
    let _ = writeln!(s, " {:>11} {:>11} {:>11}", "kernel", "list/hash", "array/hash");
    for (i, t) in THREADS.iter().enumerate() {
        let _ = write!(s, "{t:>8}");
        for (_, series) in r.table {
            let _ = write!(s, " {:>11}", fmt_us(series[i]));
        }
        let k = r.kernel.get(i).copied().flatten().map_or("-".to_string(), fmt_us);
        let _ = writeln!(
            s,
            " {k:>11} {:>11} {:>11}",
            ratio(r.table, "list", i, 1),
            ratio(r.table, "array", i, 1)
        );
    }
    let _ = writeln!(
        s,
        "  list: one linked list of every reservation (a heap node each), walked per reserve \
         (O(threads)): the kernel's\n  bp_task_head before the seed, and what the goal is \
         judged on; array: the same scan over a contiguous slab,\n  which the prefetcher \
         streams; hash: strobe-rcu's HashMultiMap keyed by thread; hash-mutex: std HashMap \
         keyed\n  by thread behind a mutex; kernel: perf_event_open + close of a breakpoint on \
         one of T live threads (the\n  kernel's own table is a hash since 6.0)\n"
    );

    let _ = writeln!(
        s,
        "The lookup alone (a thread's used slots: task_bp_pinned(), what the seed made O(1)), \
         usecs"
    );
    let _ = write!(s, "{:>8}", "threads");
    for (v, _) in r.lookups {
        let _ = write!(s, " {v:>11}");
    }
    let _ = writeln!(s, " {:>11} {:>11}", "list/hash", "array/hash");
    for (i, t) in THREADS.iter().enumerate() {
        let _ = write!(s, "{t:>8}");
        for (_, series) in r.lookups {
            let _ = write!(s, " {:>11}", fmt_us(series[i]));
        }
        let _ = writeln!(
            s,
            " {:>11} {:>11}",
            ratio(r.lookups, "list", i, 0),
            ratio(r.lookups, "array", i, 0)
        );
    }
    let _ = writeln!(s);

    if !r.inherit.is_empty() {
        let _ = writeln!(
            s,
            "perf bench breakpoint thread, reproduced: {PERF_P} threads create and join batches \
             of T threads, each inheriting {PERF_B} breakpoints (usecs per thread)"
        );
        let _ = writeln!(
            s,
            "{:>8} {:>14} {:>14} {:>16}",
            "threads", "kernel-inherit", "threads-only", "breakpoint share"
        );
        for (t, w, wo) in r.inherit {
            let _ =
                writeln!(s, "{t:>8} {:>14} {:>14} {:>16}", fmt_us(*w), fmt_us(*wo), fmt_us(w - wo));
        }
        if let Some(p) = r.perf {
            let ours = r.inherit.iter().find(|(t, ..)| *t == PERF_T).map(|(_, w, _)| *w);
            let _ = writeln!(
                s,
                "  perf bench breakpoint thread -b {PERF_B} -p {PERF_P} -t {PERF_T}: {} usecs/op \
                 (ours at {PERF_T}: {})",
                fmt_us(p),
                ours.map_or("-".to_string(), fmt_us)
            );
        }
        let _ = writeln!(s);
    }

    if !r.hits.is_empty() {
        let _ = writeln!(s, "Watch hits: one write to a watched word, in the writing thread");
        let _ = writeln!(s, "{:>18} {:>10} {:>12}", "variant", "usecs/hit", "hits/s");
        for (v, us) in r.hits {
            let _ = writeln!(s, "{v:>18} {:>10} {:>12.0}", fmt_us(*us), 1e6 / us);
        }
        let trap = r.hits.iter().find(|(v, _)| *v == "hit-sigtrap").map(|x| x.1);
        let agent = r.hits.iter().find(|(v, _)| *v == "hit-sigtrap-agent").map(|x| x.1);
        let real = r.hits.iter().find(|(v, _)| *v == "watch-agent").map(|x| x.1);
        if let (Some(t), Some(w)) = (trap, real) {
            let _ = writeln!(
                s,
                "  strobe watch end to end: {} usecs per hit, {:.0} hits/s sustained; {} usecs \
                 ({:.0}%) above the bare synchronous signal",
                fmt_us(w),
                1e6 / w,
                fmt_us(w - t),
                100.0 * (w - t) / w
            );
        }
        if let (Some(t), Some(a)) = (trap, agent) {
            let _ = writeln!(
                s,
                "  the agent's own share per hit: {} usecs ({:.1}% of a hit)",
                fmt_us(a - t),
                100.0 * (a - t) / a
            );
        }
        let _ = writeln!(s);
    }

    let _ = writeln!(s, "Goals:");
    for g in r.goals {
        let met = g["met"].as_bool().unwrap_or(false);
        let _ = writeln!(
            s,
            "  [{}] {}: {}x",
            if met { "met" } else { "missed" },
            g["goal"].as_str().unwrap_or(""),
            g["value"]
        );
    }
    for n in r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_ops_are_measured_for_every_map() {
        fn once<M: ThreadMultiMap + Default>() -> (f64, f64) {
            let f = Filled::<M>::new(64);
            let min = Duration::from_micros(200);
            (usecs_per_iter(min, |n| f.reserve_release(n)), usecs_per_iter(min, |n| f.lookup(n)))
        }
        for (op, lookup) in
            [once::<ListMap>(), once::<ArrayMap>(), once::<MutexHashMap>(), once::<RcuHashMap>()]
        {
            assert!(op.is_finite() && op > 0.0 && lookup.is_finite() && lookup > 0.0);
        }
    }

    #[test]
    fn watch_hits_are_all_seen() {
        // A real breakpoint per variant; the function itself checks hits == writes.
        for kind in [HitKind::Count, HitKind::Trap, HitKind::TrapAgent] {
            match hit_cost(kind, 50) {
                Ok(us) => assert!(us > 0.0),
                Err(e) if e.contains("not permitted") || e.contains("no hardware") => {
                    eprintln!("skipping: {e}");
                    return;
                }
                Err(e) => panic!("{}: {e}", kind.name()),
            }
        }
        assert_eq!(FOREIGN_TRAPS.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_kernel_variants_run_on_live_threads() {
        match kernel_open_series(4, 10, 1) {
            Ok(us) => assert!(us > 0.0),
            Err(e) if e.contains("not permitted") => return eprintln!("skipping: {e}"),
            Err(e) => panic!("{e}"),
        }
        assert!(kernel_inherit(PERF_B, 2, 4, 2).unwrap() > 0.0);
        assert!(kernel_inherit(0, 2, 4, 2).unwrap() > 0.0);
    }
}
