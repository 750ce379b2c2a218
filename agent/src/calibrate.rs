//! Calibration, run by the agent in a process of its own before the target starts
//! (`strobe record` launches `strobe __costs` with the agent preloaded and a small arena
//! in calibration mode), so the target pays none of it:
//!
//! - the **cost** of one sample, which the overhead budget turns into a period;
//! - the **baseline**: what every counter counts in a window (or, in fixed-period
//!   sampling, an interval between two samples) that is not the target's own work.
//!
//! Owns: both measurements and the handler's calibration modes. Must never run in a
//! target, and its handler side obeys the handler's rules (no allocation, no lock).
//!
//! # The baseline, and why it is needed
//!
//! A window's start is the handler's last group read and its end is the window timer's
//! expiry (see `sampler`, "Where a window begins and ends"); between the read and the
//! target's next instruction the handler finishes (its last record), returns and calls
//! `sigreturn`: time the leader counts that is not the target's. Measured here: 2.5-3.5
//! us, with a spread of about 2.5 us between windows; `strobe record -- true` every 16 s
//! for 25 minutes at load averages 3.8-15 printed 2.3-11.9 us, median 3.6 us (89 runs; the
//! loaded runs higher). The golden report files' 34-47 us come from recordings made
//! before the window rework, not from this calibration. (Before the window began at the
//! timer's start with the group stopped, a window's sampler time was 30-38 us, 22-38 us
//! from one run to the next, and depended on the timer queue: see `sampler`.)
//!
//! So the calibration runs the real handler over a loop that stores `CLOCK_MONOTONIC`
//! on every iteration (from the vDSO, about 30 ns an iteration): at each window start
//! the handler asks for the loop's first time-stamp after it returns, at each window end
//! it reads the loop's last one. The loop's running time in the window is the difference
//! (a window in which the thread was switched out, whose wall time exceeds what the
//! leader counted, is dropped); each counter's baseline is its mean delta per window
//! minus what the loop itself makes of that counter in that time (its rate, measured over
//! an unsampled stretch of the same loop). The loop makes no page faults or context
//! switches, so those counters' baselines are their counts in an empty window; the
//! leader's is the dead time. The report subtracts windows x baseline from every
//! function's sums.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use strobe_perf::spec::MAX_GROUP;
use strobe_perf::sys;
use strobe_protocol::calibration::{Baseline, Calibration, Costs, CounterBaseline};
use strobe_sampler::custody::SharedSlot;
use strobe_sampler::Kind;

use crate::clock::mono_ns;
use crate::sampler::{self, close_slot, open_slot, read_group, take_sample, READ_HEAD};
use crate::slots::{Local, LOCAL};
use crate::{arena, Agent};

/// Handler modes (`sampler::CALIB_MODE`).
const MODE_FLOOR: u8 = 1;
const MODE_TKILL_FULL: u8 = 2;
const MODE_FULL: u8 = 3;
const MODE_BASELINE: u8 = 4;

/// The slot the calibration runs on.
static CALIB_SLOT: AtomicUsize = AtomicUsize::new(0);
/// Overflows handled in the current mode.
static HITS: AtomicU64 = AtomicU64::new(0);

/// Period of the cost runs: short, so one calibration spin takes about fifty samples.
const CALIB_PERIOD_NS: u64 = 50_000;
/// Thread CPU time of one cost spin (two to four spins per figure: about 15 ms in all).
const CALIB_SPIN_NS: u64 = 2_500_000;
/// Two runs that agree within this fraction are taken as stable.
const CALIB_STABLE: f64 = 0.1;

/// The calling thread's CPU time (user + system), ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// A fixed amount of integer work; returns the thread CPU time it took.
#[inline(never)]
fn spin(iters: u64) -> u64 {
    let t0 = thread_cpu_ns();
    let mut x = std::hint::black_box(0x9e37_79b9_7f4a_7c15u64);
    for i in 0..iters {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i);
        x = std::hint::black_box(x);
    }
    std::hint::black_box(x);
    thread_cpu_ns().saturating_sub(t0)
}

/// Runs `f` (a measurement that noise can only inflate) until two results agree within
/// [`CALIB_STABLE`], at most four times, and returns the smallest result.
fn stable_min(mut f: impl FnMut() -> Option<u64>) -> Option<u64> {
    let mut best: Option<u64> = None;
    for n in 0..4 {
        let Some(v) = f() else { continue };
        if let Some(b) = best {
            let (lo, hi) = (b.min(v) as f64, b.max(v) as f64);
            best = Some(b.min(v));
            if n >= 1 && hi - lo <= CALIB_STABLE * hi {
                break;
            }
        } else {
            best = Some(v);
        }
    }
    best
}

/// The handler in a calibration mode (called by `signal::on_sigtrap`).
pub fn on_overflow(
    a: &Agent,
    index: usize,
    slot: &SharedSlot,
    local: &Local,
    uc: *mut libc::c_void,
) {
    match sampler::CALIB_MODE.load(Ordering::Relaxed) {
        MODE_FLOOR if index == CALIB_SLOT.load(Ordering::Relaxed) => {
            // Signal delivery and one group read, nothing else.
            let mut words = [0u64; READ_HEAD + MAX_GROUP];
            std::hint::black_box(read_group(local, &mut words));
            HITS.fetch_add(1, Ordering::Relaxed);
        }
        MODE_FULL => {
            if let Some(ar) = arena() {
                take_sample(a, ar, index, slot, local, uc, false);
                HITS.fetch_add(1, Ordering::Relaxed);
            }
        }
        MODE_BASELINE => {
            // The real handler, appends included: their cost is in every window.
            let taken = arena().and_then(|ar| take_sample(a, ar, index, slot, local, uc, false));
            if let Some(h) = taken {
                baseline_sample(&h);
            }
        }
        _ => {}
    }
}

/// A SIGTRAP the calibration sent itself (tgkill).
pub fn on_tkill(uc: *mut libc::c_void) {
    let index = CALIB_SLOT.load(Ordering::Relaxed);
    let (Some(local), Some(a), Some(ar)) = (LOCAL.get(index), crate::agent(), arena()) else {
        return;
    };
    match sampler::CALIB_MODE.load(Ordering::Relaxed) {
        MODE_FLOOR => {
            let mut words = [0u64; READ_HEAD + MAX_GROUP];
            std::hint::black_box(read_group(local, &mut words));
        }
        MODE_TKILL_FULL => {
            if let Some(slot) = ar.slots().get(index) {
                take_sample(a, ar, index, slot, local, uc, false);
                HITS.fetch_add(1, Ordering::Relaxed);
            }
        }
        _ => {}
    }
}

/// Measures what sampling costs the target, the way the target pays it: the extra thread
/// CPU time of a fixed spin with real overflows every 50 us, over the same spin
/// unsampled, divided by the overflows taken. Two figures: the floor (a plain periodic
/// leader whose handler only reads the group) and the real path (the one-shot leader with
/// the full handler). Needs a time leader; for a count leader (cycles) it falls back to
/// signals sent with tgkill, which miss the overflow interrupt's share.
pub fn costs(a: &Agent) -> Option<Costs> {
    let probe_iters = 1u64 << 16;
    let probe = spin(probe_iters).min(spin(probe_iters)).max(1);
    let iters = (probe_iters as u128 * CALIB_SPIN_NS as u128 / probe as u128)
        .clamp(probe_iters as u128, 1 << 34) as u64;
    let base = stable_min(|| Some(spin(iters))).unwrap_or(0);
    if !a.spec.leader().is_time {
        return costs_tkill(a, 300);
    }
    let saved =
        (a.period.swap(CALIB_PERIOD_NS, Ordering::Relaxed), a.jitter.swap(0, Ordering::Relaxed));
    let run = |mode: u8| -> Option<u64> {
        let idx = open_slot(a, Some(CALIB_PERIOD_NS)).ok()?;
        CALIB_SLOT.store(idx, Ordering::Relaxed);
        HITS.store(0, Ordering::Relaxed);
        sampler::CALIB_MODE.store(mode, Ordering::SeqCst);
        if mode == MODE_FLOOR {
            // A plain periodic leader: enabled, not one-shot.
            // The slot's live leader.
            let fd = LOCAL.get(idx)?.leader_fd.load(Ordering::Relaxed);
            let _ = strobe_perf::EventFd::from_raw(fd).enable();
        } else {
            sampler::arm(idx, None);
        }
        let t = spin(iters);
        close_slot(idx, true);
        sampler::CALIB_MODE.store(0, Ordering::SeqCst);
        let hits = HITS.load(Ordering::Relaxed);
        (hits > 10).then(|| t.saturating_sub(base) / hits)
    };
    let floor = stable_min(|| run(MODE_FLOOR));
    let full = stable_min(|| run(MODE_FULL));
    a.period.store(saved.0, Ordering::Relaxed);
    a.jitter.store(saved.1, Ordering::Relaxed);
    match (full, floor) {
        (Some(s), Some(f)) if s > 0 && f > 0 => {
            Some(Costs { sample_ns: s, floor_ns: f, leader_per_ns: 1.0 })
        }
        _ => costs_tkill(a, 300),
    }
}

/// The fallback: runs the real handler path `n` times on the calling thread with signals
/// it sends itself (tgkill), and the floor, and returns the mean wall time of each.
fn costs_tkill(a: &Agent, n: u32) -> Option<Costs> {
    let idx = open_slot(a, Some(a.period.load(Ordering::Relaxed))).ok()?;
    let local = LOCAL.get(idx)?;
    CALIB_SLOT.store(idx, Ordering::Relaxed);
    // SAFETY: getpid has no preconditions.
    let (pid, tid) = (unsafe { libc::getpid() }, sys::gettid());
    let tkill = || {
        // SAFETY: sends SIGTRAP to this very thread; our handler is installed.
        unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGTRAP) };
    };
    let run = |mode: u8| -> u64 {
        sampler::CALIB_MODE.store(mode, Ordering::SeqCst);
        for _ in 0..n / 10 {
            tkill(); // warm up caches and the timer paths
        }
        let t0 = mono_ns();
        for _ in 0..n {
            tkill();
        }
        let dt = mono_ns() - t0;
        sampler::CALIB_MODE.store(0, Ordering::SeqCst);
        dt
    };
    sampler::arm(idx, None);
    let floor_dt = run(MODE_FLOOR);
    let full_dt = run(MODE_TKILL_FULL);
    let mut words = [0u64; READ_HEAD + MAX_GROUP];
    let nread = read_group(local, &mut words);
    let leader_per_ns =
        if nread > 0 && words[2] > 0 { words[READ_HEAD] as f64 / words[2] as f64 } else { 1.0 };
    close_slot(idx, true);
    Some(Costs {
        sample_ns: full_dt / u64::from(n.max(1)),
        floor_ns: floor_dt / u64::from(n.max(1)),
        leader_per_ns,
    })
}

// ---------------------------------------------------------------------------------
// The baseline.

/// Intervals the baseline keeps (windows, or fixed-period intervals).
const MAX_INTERVALS: usize = 400;
/// Words kept per interval: the work, then each counter's delta.
const STRIDE: usize = 1 + MAX_GROUP;

/// The loop's progress: its first time-stamp after a window started, its last one.
static FIRST: AtomicU64 = AtomicU64::new(0);
static LAST: AtomicU64 = AtomicU64::new(0);
static WANT_FIRST: AtomicBool = AtomicBool::new(false);
/// The counters at the open interval's start, and whether one is open.
static START: [AtomicU64; MAX_GROUP] = [const { AtomicU64::new(0) }; MAX_GROUP];
static OPEN: AtomicBool = AtomicBool::new(false);
/// Completed intervals: `STRIDE` words each.
static INTERVALS: [AtomicU64; MAX_INTERVALS * STRIDE] =
    [const { AtomicU64::new(0) }; MAX_INTERVALS * STRIDE];
static COUNT: AtomicUsize = AtomicUsize::new(0);
/// Counters the group reads.
static NCOUNTERS: AtomicUsize = AtomicUsize::new(0);

/// Window tails the baseline keeps (the delay between an overflow and the handler's read).
static TAILS: [AtomicU64; MAX_INTERVALS * MAX_GROUP] =
    [const { AtomicU64::new(0) }; MAX_INTERVALS * MAX_GROUP];
static TAIL_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Window end boundaries the baseline keeps (from a window's overflow to the read).
static ENDS: [AtomicU64; MAX_INTERVALS * MAX_GROUP] =
    [const { AtomicU64::new(0) }; MAX_INTERVALS * MAX_GROUP];
static END_COUNT: AtomicUsize = AtomicUsize::new(0);
/// The windows' lateness (see `Handled::late`), summed, and how many.
static LATE_SUM: AtomicU64 = AtomicU64::new(0);
static LATE_COUNT: AtomicU64 = AtomicU64::new(0);
/// Time samples (window starts, plain samples) the baseline's run took.
static TIME_SAMPLES: AtomicU64 = AtomicU64::new(0);

/// The handler in baseline mode, after the real handler path ran: every interval's
/// counter deltas and the loop's running time kept, and every window start's delay from
/// its overflow. Relaxed throughout: the handler and the loop run on one thread.
fn baseline_sample(h: &sampler::Handled) {
    let last = LAST.load(Ordering::Relaxed);
    let n = h.n;
    NCOUNTERS.store(n, Ordering::Relaxed);
    let counters = h.counters.get(..n).unwrap_or(&[]);
    // An interval ends here if one was open and this sample ends it: every sample in
    // fixed-period sampling, a window's end otherwise.
    let ends = OPEN.load(Ordering::Relaxed) && h.kind != Kind::WindowStart;
    if ends {
        let i = COUNT.load(Ordering::Relaxed);
        let first = FIRST.load(Ordering::Relaxed);
        // A window's interior ends at its overflow, when the ring gave its values (the
        // loop's last time-stamp is from just before it); the rest, to the handler's
        // read, is the window's end boundary.
        let end: &[u64] = match (&h.overflow, h.kind) {
            (Some(o), Kind::WindowEnd) => o.get(..n).unwrap_or(&[]),
            _ => counters,
        };
        // The loop ran longer than the leader counted: the thread was switched out.
        let away = last.saturating_sub(first)
            > end.first().map_or(0, |&e| e.saturating_sub(START[0].load(Ordering::Relaxed)));
        if i < MAX_INTERVALS && first != 0 && last >= first && !away {
            INTERVALS[i * STRIDE].store(last - first, Ordering::Relaxed);
            for (k, &c) in end.iter().enumerate() {
                // Saturating: a counter read before its start value (a rare reordering under
                // load) wrapped to 2^64 and one such window put 9e16 ns in a run's mean.
                let d = c.saturating_sub(START[k].load(Ordering::Relaxed));
                INTERVALS[i * STRIDE + 1 + k].store(d, Ordering::Relaxed);
            }
            COUNT.store(i + 1, Ordering::Relaxed);
            if h.kind == Kind::WindowEnd && h.overflow.is_some() && i < MAX_INTERVALS {
                for (k, (&c, &e)) in counters.iter().zip(end).enumerate() {
                    ENDS[i * MAX_GROUP + k].store(c.saturating_sub(e), Ordering::Relaxed);
                }
                END_COUNT.store(END_COUNT.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
        }
        OPEN.store(false, Ordering::Relaxed);
    }
    if h.kind == Kind::WindowStart {
        if let (Some(o), Some(entry)) = (&h.overflow, &h.entry) {
            let i = TAIL_COUNT.load(Ordering::Relaxed);
            if i < MAX_INTERVALS {
                // To the handler's first read, where it measures a call's tail (`since`).
                for (k, &c) in entry.get(..n).unwrap_or(&[]).iter().enumerate() {
                    TAILS[i * MAX_GROUP + k].store(c.saturating_sub(o[k]), Ordering::Relaxed);
                }
                TAIL_COUNT.store(i + 1, Ordering::Relaxed);
            }
        }
    }
    if let Some(late) = h.late {
        LATE_SUM.fetch_add(late, Ordering::Relaxed);
        LATE_COUNT.fetch_add(1, Ordering::Relaxed);
    }
    if h.kind != Kind::WindowEnd {
        TIME_SAMPLES.fetch_add(1, Ordering::Relaxed);
        for (k, &c) in counters.iter().enumerate() {
            START[k].store(c, Ordering::Relaxed);
        }
        FIRST.store(0, Ordering::Relaxed);
        WANT_FIRST.store(true, Ordering::Relaxed);
        OPEN.store(true, Ordering::Relaxed);
    }
}

/// Iterations of the loop so far (the mean iteration time corrects its timestamps).
static ITERATIONS: AtomicU64 = AtomicU64::new(0);

/// The loop whose progress the handler reads, until `intervals` intervals are kept or
/// `deadline` (thread CPU ns) passes. It time-stamps itself with `CLOCK_MONOTONIC` from
/// the vDSO (about 30 ns an iteration here, so a window's edges are known to a few tens
/// of ns; the thread's CPU clock is a system call, 0.8 us an iteration, and an
/// iteration's worth of doubt at each edge was a third of what the baseline measures).
/// A wall clock counts time the thread spent switched out as work: the handler drops
/// an interval whose loop time exceeds what the leader counted (only time away can do
/// that).
#[inline(never)]
fn timestamp_loop(intervals: usize, deadline: u64) {
    let mut n = 0u64;
    loop {
        if WANT_FIRST.load(Ordering::Relaxed) {
            WANT_FIRST.store(false, Ordering::Relaxed);
            FIRST.store(mono_ns(), Ordering::Relaxed);
        }
        LAST.store(mono_ns(), Ordering::Relaxed);
        n += 1;
        ITERATIONS.store(n, Ordering::Relaxed);
        if n % 4096 == 0
            && (thread_cpu_ns() > deadline || COUNT.load(Ordering::Relaxed) >= intervals)
        {
            return;
        }
    }
}

/// Each counter's count per ns of the loop running unsampled (1 for task-clock), and the
/// loop's mean iteration time (ns).
fn loop_rates(a: &Agent, n_expected: usize) -> Option<(Vec<f64>, f64)> {
    let idx = open_slot(a, Some(u64::MAX >> 2)).ok()?;
    let local = LOCAL.get(idx)?;
    // The slot's live leader (its period is too long to overflow here).
    let _ = strobe_perf::EventFd::from_raw(local.leader_fd.load(Ordering::Relaxed)).enable();
    let mut w0 = [0u64; READ_HEAD + MAX_GROUP];
    let mut w1 = [0u64; READ_HEAD + MAX_GROUP];
    let n0 = read_group(local, &mut w0);
    let t0 = thread_cpu_ns();
    ITERATIONS.store(0, Ordering::Relaxed);
    timestamp_loop(usize::MAX, t0 + 5_000_000);
    let t1 = thread_cpu_ns();
    let iters = ITERATIONS.load(Ordering::Relaxed).max(1);
    let n1 = read_group(local, &mut w1);
    close_slot(idx, true);
    if n0 != n_expected || n1 != n_expected || t1 <= t0 {
        return None;
    }
    let dt = (t1 - t0) as f64;
    let rates =
        (0..n0).map(|k| w1[READ_HEAD + k].wrapping_sub(w0[READ_HEAD + k]) as f64 / dt).collect();
    Some((rates, dt / iters as f64))
}

/// Mean and standard deviation of `v` without its lowest and highest 5%.
fn trimmed(v: &mut [f64]) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let cut = v.len() / 20;
    let t = &v[cut..v.len() - cut];
    let n = t.len().max(1) as f64;
    let mean = t.iter().sum::<f64>() / n;
    let var = t.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

/// Measures the baseline with the recording's own events, window and (for fixed-period
/// sampling) period. Needs a time leader (the loop time-stamps itself in ns).
pub fn baseline(a: &Agent) -> Result<Baseline, String> {
    if !a.spec.leader().is_time {
        return Err("the baseline needs a time leader (task-clock or cpu-clock); the report's \
                    window metrics include the sampler's own counts"
            .into());
    }
    let windows = a.window > 0;
    // Fixed-period sampling: the intervals are the period the recording asked for (the
    // agent's own period is not derived yet while it calibrates).
    let requested = if windows {
        a.window
    } else {
        match a.spec.period {
            Some(p) => p,
            None => {
                return Err("fixed-period sampling with no period= has nothing to calibrate".into())
            }
        }
    };
    let n = a.spec.events.len();
    let (rates, iteration_ns) =
        loop_rates(a, n).ok_or("could not read the group over an unsampled loop")?;
    // Windows: long periods of 1 ms (the dead time does not depend on them) and 200
    // windows; fixed-period sampling: 400 intervals at the recording's own period.
    let (want, long) = if windows { (200, 1_000_000) } else { (MAX_INTERVALS, requested) };
    let saved = (a.period.swap(long, Ordering::Relaxed), a.jitter.swap(0, Ordering::Relaxed));
    COUNT.store(0, Ordering::Relaxed);
    TAIL_COUNT.store(0, Ordering::Relaxed);
    END_COUNT.store(0, Ordering::Relaxed);
    LATE_SUM.store(0, Ordering::Relaxed);
    LATE_COUNT.store(0, Ordering::Relaxed);
    TIME_SAMPLES.store(0, Ordering::Relaxed);
    OPEN.store(false, Ordering::Relaxed);
    let result = (|| {
        let idx = open_slot(a, Some(long)).map_err(|_| "could not open the event group")?;
        CALIB_SLOT.store(idx, Ordering::Relaxed);
        sampler::CALIB_MODE.store(MODE_BASELINE, Ordering::SeqCst);
        let cpu0 = thread_cpu_ns();
        sampler::arm(idx, None);
        timestamp_loop(want, thread_cpu_ns() + 2_000_000_000);
        // What the leader did not count: the thread's CPU time since arming minus the
        // leader's count (the window's end handler runs with the group stopped).
        sampler::CALIB_MODE.store(0, Ordering::SeqCst);
        let mut words = [0u64; READ_HEAD + MAX_GROUP];
        let read = LOCAL.get(idx).map_or(0, |l| read_group(l, &mut words));
        let cpu = thread_cpu_ns().saturating_sub(cpu0);
        close_slot(idx, true);
        let samples = TIME_SAMPLES.load(Ordering::Relaxed);
        let uncounted = if read > 0 && samples > 0 {
            (cpu as f64 - words[READ_HEAD] as f64).max(0.0) / samples as f64
        } else {
            0.0
        };
        Ok::<f64, &str>(uncounted)
    })();
    a.period.store(saved.0, Ordering::Relaxed);
    a.jitter.store(saved.1, Ordering::Relaxed);
    let uncounted = result?;
    let count = COUNT.load(Ordering::Relaxed);
    if count < 20 {
        return Err(format!("only {count} intervals were measured"));
    }
    // The loop's timestamps miss about one iteration per window: half of the one the
    // overflow cut short, half of the first one after the handler returned.
    let work: Vec<f64> = (0..count)
        .map(|i| INTERVALS[i * STRIDE].load(Ordering::Relaxed) as f64 + iteration_ns)
        .collect();
    let counters = (0..n.min(NCOUNTERS.load(Ordering::Relaxed)))
        .map(|k| {
            let e = &a.spec.events[k];
            // What the loop itself makes of the counter per ns: a clock counts every ns
            // it runs; a software event (faults, switches) is nothing the loop does (a
            // switch while it ran unsampled is the scheduler's, not a rate); a hardware
            // counter (cycles, instructions) is measured.
            let rate = if e.is_time {
                1.0
            } else if e.kind == strobe_perf::names::EventKind::Software {
                0.0
            } else {
                rates.get(k).copied().unwrap_or(0.0)
            };
            let v: Vec<f64> = (0..count)
                .map(|i| {
                    INTERVALS[i * STRIDE + 1 + k].load(Ordering::Relaxed) as f64 - rate * work[i]
                })
                .collect();
            if e.is_time {
                // The dead time's whole distribution, tail included: an overflow path
                // slowed by an interrupt happens in the target's windows too. (The loop's
                // CPU clock makes preemption harmless.)
                let nv = v.len().max(1) as f64;
                let mean = v.iter().sum::<f64>() / nv;
                let var =
                    v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (nv - 1.0).max(1.0);
                CounterBaseline { mean, sd: var.sqrt() }
            } else {
                // Events are rare and each one counts: no trimming.
                let nv = v.len().max(1) as f64;
                let mean = v.iter().sum::<f64>() / nv;
                let var =
                    v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (nv - 1.0).max(1.0);
                // Context switches and migrations are the scheduler's, not the sampler's
                // (the handler never blocks): what the loop saw of them is the load on the
                // machine while it ran, which says nothing of the load while the target
                // runs (measured: a busy machine during calibration made short-only
                // sampling subtract 0.5 switches/ms from a target's 0.67). Page faults
                // are the sampler's (the first touch of each shared buffer page): kept
                // when they stand clear of noise (three standard errors).
                let significant = !scheduler_event(e)
                    && (e.kind != strobe_perf::names::EventKind::Software
                        || mean.abs() > 3.0 * var.sqrt() / nv.sqrt());
                CounterBaseline { mean: if significant { mean } else { 0.0 }, sd: var.sqrt() }
            }
        })
        .collect();
    let mut w = work.clone();
    let (work_ns, _) = trimmed(&mut w);
    // The tails: the delay from each window start's overflow to the handler's read, in a
    // loop that makes no system calls. The leader's whole distribution (its spread sets
    // how much longer a delay must be to mean a system call); other counters' means.
    let boundary = |store: &[AtomicU64], count: usize| -> Vec<CounterBaseline> {
        let count = count.min(MAX_INTERVALS);
        if count < 20 {
            return Vec::new();
        }
        (0..n.min(NCOUNTERS.load(Ordering::Relaxed)))
            .map(|k| {
                let mut v: Vec<f64> = (0..count)
                    .map(|i| store[i * MAX_GROUP + k].load(Ordering::Relaxed) as f64)
                    .collect();
                let (trimmed_mean, sd) = trimmed(&mut v);
                // The leader's start delay is subtracted from every call's tail, signed:
                // its whole distribution's mean, tail included, keeps tails right on
                // average (a trimmed mean read 1-2 us low here).
                let mean = if k == 0 && store.as_ptr() == TAILS.as_ptr() {
                    v.iter().sum::<f64>() / v.len().max(1) as f64
                } else {
                    trimmed_mean
                };
                // As for windows: what the scheduler does is not the sampler's.
                let mean = if scheduler_event(&a.spec.events[k]) { 0.0 } else { mean };
                CounterBaseline { mean, sd }
            })
            .collect()
    };
    let tail = boundary(&TAILS, TAIL_COUNT.load(Ordering::Relaxed));
    let end = boundary(&ENDS, END_COUNT.load(Ordering::Relaxed));
    Ok(Baseline {
        windows,
        requested,
        intervals: count as u64,
        work_ns,
        counters,
        tail,
        end,
        uncounted,
    })
}

/// Context switches and migrations: the scheduler's, never the sampler's (its handler
/// never blocks), so no baseline of theirs is subtracted.
fn scheduler_event(e: &strobe_perf::spec::EventSpec) -> bool {
    e.kind == strobe_perf::names::EventKind::Software
        && (e.config == u64::from(sys::PERF_COUNT_SW_CONTEXT_SWITCHES)
            || e.config == u64::from(sys::PERF_COUNT_SW_CPU_MIGRATIONS))
}

/// Runs the whole calibration and stores the result in the arena.
pub fn run(a: &Agent) {
    let mut c = Calibration { costs: costs(a), ..Default::default() };
    if c.costs.is_none() {
        c.notes.push("could not measure the per-sample cost; the period is a guess".into());
    }
    match baseline(a) {
        Ok(b) => {
            c.baseline = Some(b);
            c.lateness = LATE_SUM.load(Ordering::Relaxed) as f64
                / LATE_COUNT.load(Ordering::Relaxed).max(1) as f64;
        }
        Err(why) => c.notes.push(format!("no window baseline: {why}")),
    }
    if let Some(ar) = arena() {
        ar.set_calibration(&c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trimmed_mean_drops_the_tails() {
        let mut v: Vec<f64> = (0..100).map(f64::from).collect();
        v[0] = -1e9;
        v[99] = 1e9;
        let (m, sd) = trimmed(&mut v);
        assert!((m - 49.5).abs() < 1e-9, "{m}");
        assert!(sd > 20.0 && sd < 30.0, "{sd}");
    }
}
