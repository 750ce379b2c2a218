//! `strobe bench readside`: the cost of one read-side section.
//!
//! Each operation is what a probe hit does on the registry: enter a read
//! section, load a shared pointer, read a field of the object it points to,
//! leave. Measured side by side for strobe-rcu (membarrier scheme, and the
//! `SeqCst`-fence fallback it runs without membarrier), crossbeam-epoch,
//! seize, arc-swap and `std::sync::RwLock`, on 1 and 2 threads (all threads
//! read the same object; nobody writes). Figures: `ns_per_op` (wall time per
//! operation on one thread) and `mops_total` (operations per second of all
//! threads together); `scaling` is the 2-thread total over the 1-thread one.
//!
//! Owns only measuring; must never be linked into the agent.

use std::hint::black_box;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Barrier, RwLock};
use std::time::Instant;

use serde_json::Value;

use crate::report::{machine_summary, row};
use crate::stats::median;
use crate::{BenchError, BenchOpts, BenchReport};

/// The object readers look at.
struct Obj {
    field: u64,
    _pad: [u64; 7],
}

fn obj(v: u64) -> Obj {
    Obj { field: v, _pad: [0; 7] }
}

/// The variants, in table order.
pub(crate) const VARIANTS: &[&str] = &[
    "strobe-rcu",
    "memb-floor",
    "strobe-rcu-fences",
    "crossbeam-epoch",
    "seize",
    "arc-swap",
    "rwlock",
];

/// The shared state of one variant; `op` runs `n` read sections and returns
/// the sum of the fields read (kept alive with `black_box`).
trait Reader: Sync {
    fn run(&self, n: u64) -> u64;
}

struct StrobeGlobal(strobe_rcu::RcuPtr<Obj>);
impl Reader for StrobeGlobal {
    fn run(&self, n: u64) -> u64 {
        strobe_rcu::register_current_thread();
        let mut s = 0;
        for _ in 0..n {
            let g = strobe_rcu::read_lock();
            if let Some(o) = self.0.load(&g) {
                s += black_box(o.field);
            }
        }
        s
    }
}

/// The floor of the memb scheme (module note): strobe-rcu's entry and exit
/// on a thread-local word that no writer can see.
mod floor {
    use std::sync::atomic::{compiler_fence, AtomicUsize, Ordering};

    /// strobe-rcu's nesting bits (`reader.rs`).
    const NEST_MASK: usize = (1 << 20) - 1;

    /// The epoch outermost entries copy (strobe-rcu: the domain's reader
    /// epoch); one step above zero, like a domain after a grace period.
    pub(super) static EPOCH: AtomicUsize = AtomicUsize::new(1 << 20);

    thread_local! {
        /// Atomic (accessed with the orderings strobe-rcu uses) so that the
        /// compiler keeps every load and store, as it must for strobe-rcu's
        /// word that a writer reads.
        static CTR: AtomicUsize = const { AtomicUsize::new(0) };
    }

    /// Enters a section.
    #[inline(always)]
    pub(super) fn enter() {
        CTR.with(|c| {
            let v = c.load(Ordering::Relaxed);
            if v & NEST_MASK == 0 {
                let e = EPOCH.load(Ordering::Acquire);
                c.store(e | 1, Ordering::Release);
                compiler_fence(Ordering::SeqCst);
            } else {
                nested(c, v);
            }
        })
    }

    /// Out of line, as strobe-rcu's nested entry.
    #[cold]
    #[inline(never)]
    fn nested(c: &AtomicUsize, v: usize) {
        c.store(v + 1, Ordering::Relaxed);
    }

    /// Leaves a section.
    #[inline(always)]
    pub(super) fn exit() {
        CTR.with(|c| {
            let v = c.load(Ordering::Relaxed);
            c.store(v.wrapping_sub(1), Ordering::Release);
        })
    }
}

struct MembFloor(AtomicPtr<Obj>);
impl Reader for MembFloor {
    fn run(&self, n: u64) -> u64 {
        let mut s = 0;
        for _ in 0..n {
            floor::enter();
            // SAFETY: the object is never freed during the benchmark.
            if let Some(o) = unsafe { self.0.load(Ordering::Acquire).as_ref() } {
                s += black_box(o.field);
            }
            floor::exit();
        }
        s
    }
}

impl Drop for MembFloor {
    fn drop(&mut self) {
        let p = self.0.swap(std::ptr::null_mut(), Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: allocated with Box::into_raw; no reader is left.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

struct StrobeFences(&'static strobe_rcu::Domain, strobe_rcu::RcuPtr<Obj>);
impl Reader for StrobeFences {
    fn run(&self, n: u64) -> u64 {
        let h = self.0.register();
        let mut s = 0;
        for _ in 0..n {
            let g = h.read_lock();
            if let Some(o) = self.1.load(&g) {
                s += black_box(o.field);
            }
        }
        s
    }
}

struct Crossbeam(crossbeam_epoch::Atomic<Obj>);
impl Reader for Crossbeam {
    fn run(&self, n: u64) -> u64 {
        let mut s = 0;
        for _ in 0..n {
            let g = crossbeam_epoch::pin();
            let p = self.0.load(Ordering::Acquire, &g);
            // SAFETY: the object is never retired during the benchmark.
            if let Some(o) = unsafe { p.as_ref() } {
                s += black_box(o.field);
            }
        }
        s
    }
}

impl Drop for Crossbeam {
    fn drop(&mut self) {
        // SAFETY: no reader is left (the runs joined).
        unsafe {
            let g = crossbeam_epoch::unprotected();
            let p = self.0.swap(crossbeam_epoch::Shared::null(), Ordering::Relaxed, g);
            if !p.is_null() {
                drop(p.into_owned());
            }
        }
    }
}

struct Seize(seize::Collector, AtomicPtr<Obj>);
impl Reader for Seize {
    fn run(&self, n: u64) -> u64 {
        use seize::Guard;
        let mut s = 0;
        for _ in 0..n {
            let g = self.0.enter();
            let p = g.protect(&self.1, Ordering::Acquire);
            // SAFETY: the object is never retired during the benchmark.
            if let Some(o) = unsafe { p.as_ref() } {
                s += black_box(o.field);
            }
        }
        s
    }
}

impl Drop for Seize {
    fn drop(&mut self) {
        let p = self.1.swap(std::ptr::null_mut(), Ordering::Relaxed);
        if !p.is_null() {
            // SAFETY: allocated with Box::into_raw; no reader is left.
            drop(unsafe { Box::from_raw(p) });
        }
    }
}

struct ArcSwap(arc_swap::ArcSwap<Obj>);
impl Reader for ArcSwap {
    fn run(&self, n: u64) -> u64 {
        let mut s = 0;
        for _ in 0..n {
            let g = self.0.load();
            s += black_box(g.field);
        }
        s
    }
}

struct Rw(RwLock<Obj>);
impl Reader for Rw {
    fn run(&self, n: u64) -> u64 {
        let mut s = 0;
        for _ in 0..n {
            let g = self.0.read().unwrap_or_else(|e| e.into_inner());
            s += black_box(g.field);
        }
        s
    }
}

fn make(variant: &str) -> Arc<dyn Reader + Send> {
    match variant {
        "strobe-rcu" => Arc::new(StrobeGlobal(strobe_rcu::RcuPtr::new(Some(Box::new(obj(1)))))),
        "strobe-rcu-fences" => {
            let d = strobe_rcu::Domain::new_with_fences();
            // SAFETY: only guards of `d` are used with it.
            Arc::new(StrobeFences(d, unsafe {
                strobe_rcu::RcuPtr::new_in(d, Some(Box::new(obj(1))))
            }))
        }
        "memb-floor" => Arc::new(MembFloor(AtomicPtr::new(Box::into_raw(Box::new(obj(1)))))),
        "crossbeam-epoch" => Arc::new(Crossbeam(crossbeam_epoch::Atomic::new(obj(1)))),
        "seize" => Arc::new(Seize(
            seize::Collector::new(),
            AtomicPtr::new(Box::into_raw(Box::new(obj(1)))),
        )),
        "arc-swap" => Arc::new(ArcSwap(arc_swap::ArcSwap::from_pointee(obj(1)))),
        _ => Arc::new(Rw(RwLock::new(obj(1)))),
    }
}

/// Runs `n` operations on each of `threads` threads at once; returns the wall
/// time in seconds of the slowest thread.
fn measure(r: &Arc<dyn Reader + Send>, threads: usize, n: u64) -> Result<f64, BenchError> {
    let start = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (r, start) = (r.clone(), start.clone());
            std::thread::spawn(move || {
                // Warm up (registration, TLS, caches) before the clock starts.
                black_box(r.run(n / 20 + 1));
                start.wait();
                let t = Instant::now();
                black_box(r.run(n));
                t.elapsed().as_secs_f64()
            })
        })
        .collect();
    let mut worst = 0.0f64;
    for h in handles {
        let s = h.join().map_err(|_| BenchError::Other("a reader thread panicked".into()))?;
        worst = worst.max(s);
    }
    Ok(worst)
}

/// Runs every variant of the `readside` benchmark side by side.
pub(crate) fn run(opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    let n: u64 = if opts.quick { 3_000_000 } else { 10_000_000 };
    let repeats = if opts.quick { 3 } else { opts.repeats.max(1) };
    let mut rep = BenchReport::new("readside");
    // (variant, threads) -> ns_per_op, mops_total
    let mut res: Vec<(String, usize, f64, f64)> = Vec::new();
    // Repeats go round-robin over the variants, so a burst of other load on
    // the machine hits every variant alike instead of one variant's repeats.
    let readers: Vec<_> = VARIANTS.iter().map(|v| make(v)).collect();
    for &threads in &[1usize, 2] {
        let mut secs = vec![Vec::new(); VARIANTS.len()];
        for _ in 0..repeats {
            for (i, r) in readers.iter().enumerate() {
                secs[i].push(measure(r, threads, n)?);
            }
        }
        for (i, &v) in VARIANTS.iter().enumerate() {
            let s = median(&secs[i]);
            let ns = s * 1e9 / n as f64;
            let mops = (threads as f64 * n as f64) / s / 1e6;
            res.push((v.to_string(), threads, ns, mops));
        }
    }
    let one = |v: &str| res.iter().find(|r| r.0 == v && r.1 == 1).map(|r| r.3);
    for (v, threads, ns, mops) in &res {
        let scaling = one(v).map(|m1| mops / m1).unwrap_or(f64::NAN);
        rep.rows.push(row([
            ("variant", Value::from(v.as_str())),
            ("threads", Value::from(*threads)),
            ("ns_per_op", num(*ns, 3)),
            ("mops_total", num(*mops, 1)),
            ("scaling", num(scaling, 2)),
        ]));
    }

    let mut t = String::new();
    t.push_str(&format!(
        "strobe bench readside: enter, load a pointer, read a field, exit; {n} ops per thread, \
         median of {repeats}\nmachine: {}\nstrobe-rcu scheme: {}\n\n",
        machine_summary(),
        if strobe_rcu::global().uses_membarrier() {
            "membarrier"
        } else {
            "fences (no membarrier)"
        }
    ));
    t.push_str(&format!(
        "{:<18} {:>7} {:>10} {:>11} {:>10} {:>9}\n",
        "variant", "threads", "ns_per_op", "Mops total", "vs strobe", "scaling"
    ));
    for &threads in &[1usize, 2] {
        let base = res.iter().find(|r| r.0 == "strobe-rcu" && r.1 == threads).map(|r| r.2);
        for (v, th, ns, mops) in res.iter().filter(|r| r.1 == threads) {
            let ratio = base.map(|b| ns / b).unwrap_or(f64::NAN);
            let scaling = one(v).map(|m1| mops / m1).unwrap_or(f64::NAN);
            t.push_str(&format!(
                "{v:<18} {th:>7} {ns:>10.2} {mops:>11.1} {:>9.1}x {:>8.2}x\n",
                ratio, scaling
            ));
        }
    }
    let ns1 = res.iter().find(|r| r.0 == "strobe-rcu" && r.1 == 1).map_or(f64::NAN, |r| r.2);
    let sc = res
        .iter()
        .find(|r| r.0 == "strobe-rcu" && r.1 == 2)
        .and_then(|r| one("strobe-rcu").map(|m1| r.3 / m1))
        .unwrap_or(f64::NAN);
    t.push_str("\ngoals (issue 4):\n");
    t.push_str(&goal(
        ns1 <= 1.0,
        &format!("strobe-rcu read section <= 1 ns on 1 thread: {ns1:.2} ns"),
    ));
    t.push_str(&goal(
        sc >= 1.9,
        &format!("strobe-rcu 2-thread throughput >= 1.9x 1-thread: {sc:.2}x"),
    ));
    let floor1 = res.iter().find(|r| r.0 == "memb-floor" && r.1 == 1).map_or(f64::NAN, |r| r.2);
    t.push_str(&format!(
        "  floor of the scheme (memb-floor): {floor1:.2} ns; strobe-rcu is {:.2}x the floor\n",
        ns1 / floor1
    ));
    if opts.quick {
        t.push_str("(--quick: figures are not quotable)\n");
    }
    rep.extra.insert("machine".into(), Value::from(machine_summary()));
    rep.text = t;
    Ok(rep)
}

/// A goal line marked met or missed.
pub(crate) fn goal(met: bool, what: &str) -> String {
    format!("  [{}] {what}\n", if met { "met" } else { "MISSED" })
}

/// A JSON number rounded to `digits` decimals (null when not finite).
pub(crate) fn num(x: f64, digits: i32) -> Value {
    if !x.is_finite() {
        return Value::Null;
    }
    let m = 10f64.powi(digits);
    Value::from((x * m).round() / m)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant, the floor included, runs real sections that read the
    /// object: `n` sections sum the field (1) `n` times, on a fresh thread and
    /// again on the same one.
    #[test]
    fn every_variant_reads_the_field_once_per_section() {
        for &v in VARIANTS {
            let r = make(v);
            let sums =
                std::thread::spawn(move || (r.run(1000), r.run(10))).join().expect("reader thread");
            assert_eq!(sums, (1000, 10), "{v}");
        }
    }
}
