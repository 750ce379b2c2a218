//! `strobe bench reclaim`: deferred-reclamation throughput and memory, in the
//! style of the kernel's rcuscale kfree test that seed 002 reports.
//!
//! Each thread runs L loops; each loop allocates A objects (`malloc`, sizes
//! cycling from 16 to 512 bytes: 16 is the smallest object that can embed the
//! two-word callback head the `per-object` variant needs) and hands each one
//! to the variant's deferred free right away. Variants, side by side:
//!
//! - `immediate`: `free` at once, no deferral (the floor);
//! - `per-object`: one deferred callback per object, the pre-bulk kfree_rcu:
//!   a head embedded in the object is linked into a per-thread list, the list
//!   waits for a strobe-rcu grace period (one per 2,040 objects, started
//!   asynchronously and run by the background reclaimer: the same
//!   amortisation as `strobe-bulk`), then every callback is called in turn;
//! - `strobe-bulk`: [`strobe_rcu::retire_raw`], page-sized pointer blocks freed
//!   in bulk;
//! - `crossbeam-epoch`: one `pin` and one `defer_unchecked` per object;
//! - `seize-32`, `seize-512`: `Collector::retire` with those batch sizes.
//!
//! Figures per (variant, threads): `mobj_per_s` (objects of all threads per
//! second, including the final drain where the library offers one),
//! `peak_rss_mb` (the process's VmHWM during the run, reset before it through
//! `/proc/self/clear_refs`), and `peak_outstanding` (retired but not yet freed,
//! sampled every millisecond from per-thread counters).
//!
//! Owns only measuring; must never be linked into the agent.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::readside::{goal, num};
use crate::report::{machine_summary, row};
use crate::stats::median;
use crate::{BenchError, BenchOpts, BenchReport};

/// The variants, in table order.
pub(crate) const VARIANTS: &[&str] =
    &["immediate", "per-object", "strobe-bulk", "crossbeam-epoch", "seize-32", "seize-512"];

/// Objects allocated per loop (rcuscale's kfree_alloc_num default).
const PER_LOOP: usize = 1000;

// --- per-thread counters ------------------------------------------------------

const SLOTS: usize = 64;

#[repr(align(128))]
struct Slot {
    retired: AtomicU64,
    freed: AtomicU64,
}

static COUNTS: [Slot; SLOTS] =
    [const { Slot { retired: AtomicU64::new(0), freed: AtomicU64::new(0) } }; SLOTS];
static NEXT_SLOT: AtomicU64 = AtomicU64::new(0);

thread_local! {
    static MY_SLOT: usize = (NEXT_SLOT.fetch_add(1, Ordering::Relaxed) as usize) % SLOTS;
}

fn my_slot() -> &'static Slot {
    let i = MY_SLOT.with(|s| *s);
    &COUNTS[i % SLOTS]
}

/// Counts without a read-modify-write: a slot is written by one thread (a
/// thread index collision past 64 threads only blurs the statistics).
#[inline(always)]
fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

fn outstanding() -> i64 {
    let (mut r, mut f) = (0u64, 0u64);
    for s in &COUNTS {
        r += s.retired.load(Ordering::Relaxed);
        f += s.freed.load(Ordering::Relaxed);
    }
    r as i64 - f as i64
}

// --- objects --------------------------------------------------------------------

#[inline(always)]
fn alloc_obj(i: usize) -> *mut u8 {
    let size = 16 + (i * 16) % 497;
    // SAFETY: malloc with a non-zero size; a null result is handled below.
    let p = unsafe { libc::malloc(size) }.cast::<u8>();
    if p.is_null() {
        std::process::abort(); // out of memory: nothing sensible to measure
    }
    // SAFETY: at least 16 bytes were allocated. Touch the object like a user would.
    unsafe { p.write(i as u8) };
    p
}

/// The free every variant ends with.
#[inline(always)]
unsafe fn free_obj(p: *mut u8) {
    bump(&my_slot().freed);
    // SAFETY: `p` came from malloc and is freed once.
    unsafe { libc::free(p.cast()) }
}

unsafe fn free_obj_erased(p: *mut ()) {
    // SAFETY: forwarded.
    unsafe { free_obj(p.cast()) }
}

unsafe fn free_obj_seize(p: *mut u8, _: &seize::Collector) {
    // SAFETY: forwarded.
    unsafe { free_obj(p) }
}

struct SendPtr(*mut u8);
// SAFETY: the pointer is an exclusively owned malloc block, freed once.
unsafe impl Send for SendPtr {}

// --- the per-object baseline ------------------------------------------------------

/// The head a `per-object` object carries: the kernel's `rcu_head`.
#[repr(C)]
struct CbHead {
    next: *mut CbHead,
    func: unsafe fn(*mut CbHead),
}

unsafe fn cb_free(h: *mut CbHead) {
    // SAFETY: the head is at offset 0 of a malloc'd object.
    unsafe { free_obj(h.cast()) }
}

/// One thread's queue of callbacks: a list being filled and lists waiting for
/// their grace periods.
struct PerObject {
    cur: *mut CbHead,
    cur_len: usize,
    waiting: std::collections::VecDeque<(u64, *mut CbHead)>,
}

/// Objects per grace period, the same as a strobe-rcu batch (8 blocks of 255).
const PER_OBJECT_BATCH: usize = 8 * 255;
/// Lists that may wait before the thread waits for the oldest (one, like
/// strobe-rcu's ceiling of one pending batch).
const PER_OBJECT_WAITING: usize = 1;

impl PerObject {
    fn new() -> Self {
        Self { cur: std::ptr::null_mut(), cur_len: 0, waiting: Default::default() }
    }

    #[inline(always)]
    fn call_rcu(&mut self, p: *mut u8) {
        let h = p.cast::<CbHead>();
        // SAFETY: every object has room for the head (16 bytes or more) and is
        // owned by us until its callback runs.
        unsafe { h.write(CbHead { next: self.cur, func: cb_free }) };
        self.cur = h;
        self.cur_len += 1;
        if self.cur_len >= PER_OBJECT_BATCH {
            self.seal();
        }
    }

    #[cold]
    fn seal(&mut self) {
        let d = strobe_rcu::global();
        // The background reclaimer runs the grace period, as for strobe-bulk.
        self.waiting.push_back((strobe_rcu::start_poll_synchronize(), self.cur));
        self.cur = std::ptr::null_mut();
        self.cur_len = 0;
        while let Some(&(c, list)) = self.waiting.front() {
            if !d.poll(c) {
                if self.waiting.len() <= PER_OBJECT_WAITING {
                    break;
                }
                d.wait_for(c);
            }
            self.waiting.pop_front();
            // SAFETY: the list's grace period has completed; we own it.
            unsafe { run_callbacks(list) };
        }
    }

    fn drain(&mut self) {
        if !self.cur.is_null() {
            let d = strobe_rcu::global();
            self.waiting.push_back((d.snapshot(), self.cur));
            self.cur = std::ptr::null_mut();
            self.cur_len = 0;
        }
        while let Some((c, list)) = self.waiting.pop_front() {
            strobe_rcu::global().wait_for(c);
            // SAFETY: as in `seal`.
            unsafe { run_callbacks(list) };
        }
    }
}

/// # Safety
/// The list's grace period has completed and the caller owns it.
unsafe fn run_callbacks(mut h: *mut CbHead) {
    while !h.is_null() {
        // SAFETY: read the link before the callback frees the object.
        unsafe {
            let next = (*h).next;
            ((*h).func)(h);
            h = next;
        }
    }
}

// --- one run ----------------------------------------------------------------------

struct RunResult {
    mobj_per_s: f64,
    /// CPU time of the whole process (workers, reclaimers) per object: robust
    /// to other load on the machine, unlike wall-clock throughput.
    cpu_ns_per_obj: f64,
    peak_rss_mb: f64,
    peak_outstanding: i64,
}

fn process_cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn vm_hwm_kb() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    l.split_whitespace().nth(1)?.parse().ok()
}

/// Gives freed heap back to the kernel and resets the peak-RSS mark, so each
/// run's VmHWM is its own.
fn reset_memory() -> Result<(), BenchError> {
    // SAFETY: malloc_trim only releases free memory.
    unsafe { libc::malloc_trim(0) };
    std::fs::write("/proc/self/clear_refs", "5").map_err(|e| BenchError::Io {
        what: "resetting the peak RSS through /proc/self/clear_refs (needs Linux 4.0+)".into(),
        source: e,
    })
}

fn worker(variant: &str, loops: usize, seize32: &seize::Collector, seize512: &seize::Collector) {
    let slot = my_slot();
    match variant {
        "immediate" => {
            for _ in 0..loops {
                for i in 0..PER_LOOP {
                    let p = alloc_obj(i);
                    bump(&slot.retired);
                    // SAFETY: ours, freed once.
                    unsafe { free_obj(black_box(p)) };
                }
            }
        }
        "per-object" => {
            let mut q = PerObject::new();
            for _ in 0..loops {
                for i in 0..PER_LOOP {
                    let p = alloc_obj(i);
                    bump(&slot.retired);
                    q.call_rcu(p);
                }
            }
            q.drain();
        }
        "strobe-bulk" => {
            strobe_rcu::register_current_thread();
            for _ in 0..loops {
                for i in 0..PER_LOOP {
                    let p = alloc_obj(i);
                    bump(&slot.retired);
                    // SAFETY: never published; freed once by free_obj_erased.
                    unsafe { strobe_rcu::retire_raw(p.cast(), free_obj_erased) };
                }
            }
            strobe_rcu::flush();
        }
        "crossbeam-epoch" => {
            for _ in 0..loops {
                for i in 0..PER_LOOP {
                    let p = SendPtr(alloc_obj(i));
                    bump(&slot.retired);
                    let g = crossbeam_epoch::pin();
                    // SAFETY: never published; freed once by the closure.
                    unsafe {
                        g.defer_unchecked(move || {
                            let p = p;
                            free_obj(p.0)
                        })
                    };
                }
            }
            crossbeam_epoch::pin().flush();
        }
        v => {
            let c = if v == "seize-32" { seize32 } else { seize512 };
            for _ in 0..loops {
                for i in 0..PER_LOOP {
                    let p = alloc_obj(i);
                    bump(&slot.retired);
                    // SAFETY: never published; freed once by free_obj_seize.
                    unsafe { c.retire(p, free_obj_seize) };
                }
            }
        }
    }
}

fn run_once(variant: &str, threads: usize, loops: usize) -> Result<RunResult, BenchError> {
    let seize32 = Arc::new(seize::Collector::new().batch_size(32));
    let seize512 = Arc::new(seize::Collector::new().batch_size(512));
    reset_memory()?;
    let base = outstanding();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut peak = 0i64;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(outstanding() - base);
                std::thread::sleep(Duration::from_millis(1));
            }
            peak.max(outstanding() - base)
        })
    };
    let start = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (start, v, s32, s512) =
                (start.clone(), variant.to_string(), seize32.clone(), seize512.clone());
            std::thread::spawn(move || {
                start.wait();
                worker(&v, loops, &s32, &s512);
            })
        })
        .collect();
    start.wait();
    let cpu0 = process_cpu_s();
    let t = Instant::now();
    for h in handles {
        h.join().map_err(|_| BenchError::Other(format!("a {variant} worker panicked")))?;
    }
    if variant == "strobe-bulk" {
        strobe_rcu::barrier();
    }
    let secs = t.elapsed().as_secs_f64();
    let cpu = process_cpu_s() - cpu0;
    let peak_rss_kb = vm_hwm_kb().unwrap_or(0);
    stop.store(true, Ordering::Relaxed);
    let peak_outstanding =
        sampler.join().map_err(|_| BenchError::Other("the sampler panicked".into()))?;
    // Drop the collectors (seize frees what it still holds) before the next run.
    drop((seize32, seize512));
    let objects = (threads * loops * PER_LOOP) as f64;
    Ok(RunResult {
        mobj_per_s: objects / secs / 1e6,
        cpu_ns_per_obj: cpu * 1e9 / objects,
        peak_rss_mb: peak_rss_kb as f64 / 1024.0,
        peak_outstanding,
    })
}

/// Runs every variant of the `reclaim` benchmark side by side.
pub(crate) fn run(opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    let loops = if opts.quick { 500 } else { 4000 };
    let repeats = if opts.quick { 3 } else { opts.repeats.max(1) };
    let mut rep = BenchReport::new("reclaim");
    let mut res: Vec<(String, usize, RunResult)> = Vec::new();
    // STROBE_BENCH_VARIANTS=a,b runs only those variants (for profiling one).
    let only = std::env::var("STROBE_BENCH_VARIANTS").ok();
    let wanted = |v: &str| only.as_deref().is_none_or(|o| o.split(',').any(|x| x == v));
    let variants: Vec<&str> = VARIANTS.iter().copied().filter(|v| wanted(v)).collect();
    for &threads in &[1usize, 2] {
        // Repeats go round-robin over the variants, so a burst of other load
        // on the machine hits every variant alike.
        let mut runs: Vec<Vec<RunResult>> = variants.iter().map(|_| Vec::new()).collect();
        for _ in 0..repeats {
            for (i, v) in variants.iter().enumerate() {
                runs[i].push(run_once(v, threads, loops)?);
            }
        }
        for (v, rs) in variants.iter().zip(runs) {
            let rates: Vec<f64> = rs.iter().map(|r| r.mobj_per_s).collect();
            let cpus: Vec<f64> = rs.iter().map(|r| r.cpu_ns_per_obj).collect();
            res.push((
                v.to_string(),
                threads,
                RunResult {
                    mobj_per_s: median(&rates),
                    cpu_ns_per_obj: median(&cpus),
                    peak_rss_mb: rs.iter().map(|r| r.peak_rss_mb).fold(0.0, f64::max),
                    peak_outstanding: rs.iter().map(|r| r.peak_outstanding).max().unwrap_or(0),
                },
            ));
        }
    }
    for (v, threads, r) in &res {
        rep.rows.push(row([
            ("variant", Value::from(v.as_str())),
            ("threads", Value::from(*threads)),
            ("mobj_per_s", num(r.mobj_per_s, 2)),
            ("cpu_ns_per_obj", num(r.cpu_ns_per_obj, 1)),
            ("peak_rss_mb", num(r.peak_rss_mb, 1)),
            ("peak_outstanding", Value::from(r.peak_outstanding)),
        ]));
    }

    let get = |v: &str, th: usize| res.iter().find(|r| r.0 == v && r.1 == th).map(|r| &r.2);
    let mut t = String::new();
    t.push_str(&format!(
        "strobe bench reclaim: rcuscale-kfree style, {loops} loops x {PER_LOOP} objects \
         (16..512 B) per thread; median of {repeats} (peaks: max)\nmachine: {}\n\n",
        machine_summary()
    ));
    t.push_str(&format!(
        "{:<16} {:>7} {:>11} {:>12} {:>12} {:>12} {:>17}\n",
        "variant", "threads", "Mobj/s", "vs bulk", "CPU ns/obj", "peak RSS MB", "peak outstanding"
    ));
    for &threads in &[1usize, 2] {
        let base = get("strobe-bulk", threads).map_or(f64::NAN, |r| r.mobj_per_s);
        for (v, th, r) in res.iter().filter(|r| r.1 == threads) {
            t.push_str(&format!(
                "{v:<16} {th:>7} {:>11.2} {:>11.2}x {:>12.1} {:>12.1} {:>17}\n",
                r.mobj_per_s,
                r.mobj_per_s / base,
                r.cpu_ns_per_obj,
                r.peak_rss_mb,
                r.peak_outstanding
            ));
        }
    }
    let b1 = get("strobe-bulk", 1).map_or(f64::NAN, |r| r.mobj_per_s);
    let b2 = get("strobe-bulk", 2).map_or(f64::NAN, |r| r.mobj_per_s);
    let rss2 = get("strobe-bulk", 2).map_or(f64::NAN, |r| r.peak_rss_mb);
    let p1 = get("per-object", 1).map_or(f64::NAN, |r| r.mobj_per_s);
    let p2 = get("per-object", 2).map_or(f64::NAN, |r| r.mobj_per_s);
    t.push_str("\ngoals (issue 4):\n");
    t.push_str(&goal(b1 >= 40.0, &format!("strobe-bulk >= 40 Mobj/s on 1 thread: {b1:.1}")));
    t.push_str(&goal(b2 >= 35.0, &format!("strobe-bulk >= 35 Mobj/s total on 2 threads: {b2:.1}")));
    t.push_str(&goal(
        rss2 < 16.0,
        &format!("peak RSS < 16 MB in the 2-thread strobe-bulk run: {rss2:.1} MB"),
    ));
    t.push_str(&goal(
        b1 >= 2.0 * p1 && b2 >= 2.0 * p2,
        &format!("strobe-bulk >= 2x per-object: {:.2}x on 1 thread, {:.2}x on 2", b1 / p1, b2 / p2),
    ));
    t.push_str(&format!(
        "\noutstanding ceiling of strobe-rcu: {} objects per thread\n",
        strobe_rcu::MAX_OUTSTANDING_PER_THREAD
    ));
    if opts.quick {
        t.push_str("(--quick: figures are not quotable)\n");
    }
    rep.extra.insert("machine".into(), Value::from(machine_summary()));
    rep.text = t;
    Ok(rep)
}
