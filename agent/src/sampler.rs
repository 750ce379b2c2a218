//! Per-thread sampling: thread setup and teardown, and the overflow signal handler that
//! alternates the long period and the window, walks the stack and appends each sample
//! to the thread's block in the shared arena (where `strobe record` drains it).
//!
//! Owns: the SIGTRAP handler and what it may touch. The handler must never allocate, lock,
//! panic or unwind: it uses only atomics, fixed arrays read with `get`, the arena's
//! custody code, and the raw system calls read(2), ioctl(2), futex(2) (waking the
//! recorder), clock_gettime and tgkill callers; it saves and restores `errno`.
//!
//! # Why perf's `sigtrap` and not F_SETOWN_EX + F_SETSIG
//!
//! Both deliver the overflow to the thread that overflowed. `sigtrap=1` is synchronous by
//! construction (the kernel raises SIGTRAP in the overflowing task on its way back to user
//! space), needs no fcntl per fd, cannot be queued behind other realtime signals or hit
//! RLIMIT_SIGPENDING, and carries `attr.sig_data` in `si_perf_data`, which we use to name
//! the thread's slot: the handler finds its state with no thread-local lookup and no
//! `gettid`. The F_SETOWN_EX path costs three fcntl calls per thread and identifies the
//! event only by `si_fd`, which would need an fd -> slot map. The cost of the two paths is
//! the same signal delivery (measured here as the floor, see `calibrate`). The price of
//! sigtrap is SIGTRAP itself: a target that installs its own SIGTRAP handler after start
//! (a debugger-like program) takes our samples; non-perf SIGTRAPs are passed on to the
//! handler that was installed before ours.
//!
//! # Arming, and windows that begin inside system calls
//!
//! A long period runs without stopping: its overflow also writes the group's values at
//! that instant to the thread's one-page ring (`strobe_perf::overflow`), which the handler
//! reads. A window is one-shot (`PERF_EVENT_IOC_REFRESH 1`): at its overflow the group
//! stops, the timer is not re-armed, and the end handler takes the group's values from
//! the ring (no read), programs the long period on the stopped leader and enables it.
//! (A window that ran on past its overflow had its timer re-armed, which the end handler
//! then cancelled: on this VM a cancelled or started timer that is the CPU's next one
//! reprograms it, 5 us a time.) What the thread does between the window's overflow and
//! the end handler goes uncounted; the report counted it only once a cycle anyway.
//!
//! The ring is what lets a window begin inside a system call: the signal is delivered at
//! the call's return, so the handler's first act is a group read, and the leader's count
//! from the ring's values to it, less the delay of an overflow in user code (calibrated),
//! is the call's tail: the window begins at the overflow, the tail (signed: the delay
//! varies by several microseconds, calls can be shorter) is its first part, and its
//! remainder is shortened by as much (see `strobe_sampler::alternate`). A thread whose ring cannot be mapped samples as before,
//! its windows beginning at the handler; the recorder counts and reports such threads.
//!
//! # Where a window begins and ends
//!
//! Measured on this machine (a 2-vCPU VM whose timer and exceptions exit to the host):
//! setting the period of the running leader costs one or two timer reprogrammings (5-10
//! us of task-clock each), and the window's timer starts in the middle of that call; the
//! window's own timer interrupt reaches the thread about 17 us after its expiry, with
//! the target stopped in between. Measured from the handler's read to the interrupt's
//! values, a window therefore held 30-38 us of the sampler's time per 50 us asked for,
//! and how much depended on whether the cancelled timer was the CPU's next one: always
//! in the calibration's 1 ms periods, rarely at the target's 5-10 ms. Windows read page
//! faults per ms 20-30% high.
//!
//! So a window start stops the group (`PERF_EVENT_IOC_DISABLE`), reads it, programs the
//! window on the stopped leader and enables it, then reads the group again as the
//! handler's last system call. The first read is the leader's value when the window's
//! timer starts (nothing counts while the group is stopped), so the window expires at
//! exactly that value plus the programmed period; the second read is the window's start.
//! A window's end is its expiry: the leader's value there (the agent writes it in place
//! of the interrupt's late one), the members' as the interrupt read them (the target
//! does not run in between). Across a context switch the leader counts 4-6 us more than
//! the timer consumes (the leader restarts before the timer does), so a window the thread
//! was switched out of (its wall time exceeds what the leader counted) ends instead at
//! the interrupt's value less the thread's mean lateness, learnt from its other windows
//! (`Alternation::window_end`). What remains in a window that is not the target's is the
//! end of the handler after its last read and its `sigreturn` (2.5-3.5 us here), which
//! the calibration measures with the same handler and `strobe report` subtracts. The
//! window is programmed longer by what the leader counted from the timer's start to that
//! read (a running mean per thread, `Alternation::lead`), so the target gets about the
//! window asked for.
//!
//! # What a window's own timer costs a thread that switches
//!
//! A window's timer (150 us by default, well inside the 4 ms tick) is always the CPU's
//! next one, so every context switch inside a window cancels it (switch out) and starts
//! it again (switch in), each a timer reprogramming that the leader counts as the
//! thread's time. Measured here with a C loop
//! of 100 us `nanosleep`s and a second, counting task-clock (load average 4-6): 9.9 us of
//! task-clock a sleep with no sampling event, 10.3-13.3 us with a 10 ms one armed,
//! 14.4-19.6 us with a 50 us one. The program's own clock, outside windows, pays the first
//! figures; the windows the second: a thread of 100 us sleeps read 0.75-0.94x its switches
//! per ms under load, and 0.25x on a quiet machine, where its windows ran for hundreds of
//! microseconds of leader per 50 us asked for. The cost cannot be measured per window, but
//! its effect can per thread: windows fall at random in a thread's time, so without it
//! their leader per switch would be the thread's own (the group's counts since it
//! opened). Each window end adds the window, as the report will take it (from its start
//! read or its call's tail, net of the calibrated baseline), to the thread's sums, and a
//! window the thread was switched out of ends earlier by its switches times the excess of
//! the windows' leader per switch over the thread's (`Alternation::switch_excess`, 0 until
//! the estimate is good to a tenth of the window).
//!
//! That premise fails between threads that meet at a lock: a window begins just after the
//! thread stood still in the handler while the others ran on, and two threads contending
//! on `mmap_lock` held 2.3-2.8 times their own density of switches in windows (faults per
//! ms 0.34-0.41x), while fixed-period intervals read both right (docs/BENCHMARKS.md, "Two
//! threads contending on `mmap`/`munmap`"). The fit does not correct that.
//!
//! # A fair first period
//!
//! A thread's counters start at zero. If every thread's first period were a whole period,
//! a thread living less than one period would never be sampled, however many there are
//! (2000 threads of 1 ms at a 6 ms period gave 7 samples where 300 were due). Each new
//! thread's first period is instead drawn from the stationary residual of the sampling
//! cycle (long period + jitter + window), so the expected number of samples of any
//! thread is its CPU time over the mean cycle, however short its life.
//!
//! The draws of a process's successive new threads are not independent: they are the
//! points of a Weyl sequence (a fraction stepped by the golden ratio) from a random start,
//! each uniform as the start is, and together spread evenly over [0, 1). With independent
//! draws the number of short threads sampled was a Poisson count: 12000 threads of 1 ms
//! at a 10 ms cycle got 1200 +- 35 samples, a share of the process's CPU that varied by
//! 1.7-2 points where a long thread's varies by 1. Spread evenly, that count is their CPU
//! time over the mean cycle within a few. A forked child's first thread takes the
//! parent's next point (the parent takes it before the fork), so short children forked
//! one after another are spread the same way; the child's later threads follow a
//! sequence of their own.

use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU64, AtomicU8, Ordering};

use strobe_perf::spec::MAX_GROUP;
use strobe_perf::sys;
use strobe_perf::EventFd;
use strobe_protocol::CallGraph;
use strobe_sampler::custody::record::{Rec, FLAG_COMPLETE, FLAG_HAS_STACK, FLAG_TRUNCATED};
use strobe_sampler::custody::{self, Append, SharedSlot};
use strobe_sampler::{Alternation, Arm, Kind, Periods};
use strobe_unwind::WalkEnd;

use crate::clock::mono_ns;
use crate::slots::{self, Local, LOCAL};
use crate::stack;
use crate::{arena, Agent};

/// Set at exit: handlers stop recording and re-arming.
pub static STOPPING: AtomicBool = AtomicBool::new(false);

/// 0: normal. Other values: a calibration mode (see `calibrate`).
pub static CALIB_MODE: AtomicU8 = AtomicU8::new(0);

/// Words of a group read: nr, time_enabled, time_running, then the values.
pub const READ_HEAD: usize = 3;

/// The deepest stack a sample can keep.
pub const MAX_DEPTH: usize = strobe_sampler::custody::record::MAX_FRAMES;

/// Reads the slot's group into `words`, returning the number of counters read.
#[inline]
pub fn read_group(local: &Local, words: &mut [u64; READ_HEAD + MAX_GROUP]) -> usize {
    let fd = EventFd::from_raw(local.leader_fd.load(Ordering::Relaxed));
    match fd.read_into(words) {
        Ok(n) if n >= READ_HEAD => {}
        _ => return 0,
    }
    (words[0] as usize).min(MAX_GROUP)
}

/// The periods the handler alternates between.
#[inline]
pub fn periods(a: &Agent) -> Periods {
    // Relaxed: plain parameters, set before sampling starts (calibration swaps the
    // period on the calibrating thread itself).
    Periods {
        period: a.period.load(Ordering::Relaxed),
        jitter: a.jitter.load(Ordering::Relaxed),
        window: a.window,
        min_period: a.min_period,
        tail_dead: a.cfg.tail_dead,
        cycle_extra: a.cfg.cycle_extra,
        lateness: a.cfg.lateness,
        window_dead: a.cfg.window_dead,
    }
}

/// The leader's count from an overflow in user code to the handler's first read, a
/// running mean over this process's windows (0: none yet). It is what a call's tail is
/// measured against. The calibration measures it too, but in a loop that keeps the
/// handler's pages in the TLB: measured here, the delivery took 25 us at the
/// calibration's 1 ms periods and 51-56 us at 10 ms, and a program's own work evicts
/// the handler's pages as surely; against the calibrated figure, calls of a few
/// microseconds (an `mmap`) read tails of 16-23 us. Relaxed: a statistic several threads
/// may update at once (an update lost to a race is one sample fewer).
static DELIVERY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Folds one measured delivery into [`DELIVERY`] (an eighth of the way; a delivery past
/// a window, a stall of the host, is taken as a window).
#[inline]
fn note_delivery(d: u64, window: u64) {
    let d = d.min(window.max(1)) as i64;
    let old = DELIVERY.load(Ordering::Relaxed) as i64;
    let new = if old == 0 { d } else { old + (d - old) / 8 };
    DELIVERY.store(new.max(1) as u64, Ordering::Relaxed);
}

/// The delivery a call's tail is measured against: this process's measured mean, else
/// the calibrated `fallback`.
#[inline]
fn delivery(fallback: u64) -> u64 {
    match DELIVERY.load(Ordering::Relaxed) {
        0 => fallback,
        d => d,
    }
}

/// Programs the next period and arms the leader as the state machine says.
#[inline]
fn program(local: &Local, period: u64, arm: Arm) {
    // The owner's live leader (the slot is ACTIVE, checked by the caller). Errors are
    // ignored: a leader that cannot be re-armed stops sampling, which the recorder's
    // accounting shows.
    let fd = EventFd::from_raw(local.leader_fd.load(Ordering::Relaxed));
    let _ = fd.set_period(period);
    if local.paused.load(Ordering::Relaxed) {
        // Its owner paused it while this overflow was on its way (`pause`): the period
        // is the state machine's, so `arm` resumes where it stands, but nothing starts.
        return;
    }
    let _ = match arm {
        Arm::Running => Ok(()),
        Arm::OneShot => fd.refresh(1),
        Arm::Enable => fd.enable(),
    };
}

/// Stops the group (leader and members stop counting; the leader's timer is cancelled).
#[inline]
fn stop(local: &Local) {
    // The owner's live leader (the slot is ACTIVE, checked by the caller). An error leaves
    // the group running, which the next program_stopped re-arms as usual.
    let _ = EventFd::from_raw(local.leader_fd.load(Ordering::Relaxed)).disable();
}

/// Programs the period of a stopped leader and starts the group again: running, or
/// one-shot. A period set on a stopped event costs a fraction of one set on a running
/// one, whose timer is cancelled and started inside the call.
#[inline]
fn program_stopped(local: &Local, period: u64, arm: Arm) {
    // The owner's live leader (the slot is ACTIVE, checked by the caller). Errors are
    // ignored as in `program`: the recorder's accounting shows a leader that stopped.
    let fd = EventFd::from_raw(local.leader_fd.load(Ordering::Relaxed));
    let _ = fd.set_period(period);
    if local.paused.load(Ordering::Relaxed) {
        // Left stopped, as in `program`.
        return;
    }
    let _ = match arm {
        Arm::OneShot => fd.refresh(1),
        Arm::Running | Arm::Enable => fd.enable(),
    };
}

/// Overflows of one long period the handler can take at once (a system call longer
/// than several periods); older ones are dropped.
const MAX_OVERFLOWS: usize = 4;

/// The group's values at the overflows the ring holds for the current long period,
/// oldest first (stale records of the window that just ended are skipped).
struct Overflows {
    values: [[u64; MAX_GROUP]; MAX_OVERFLOWS],
    n: usize,
    /// The last overflow interrupted the kernel.
    kernel: bool,
}

impl Overflows {
    const EMPTY: Overflows =
        Overflows { values: [[0; MAX_GROUP]; MAX_OVERFLOWS], n: 0, kernel: false };

    /// The ring's records of the current period's overflows (long period or window),
    /// oldest first. After an overflow the timer fires again every period until the
    /// handler re-programs it: in a system call longer than a long period each such
    /// overflow is a sample of the call, kept; the re-firings of a short period (a first
    /// period, a window, anything shorter than half a long period) are not samples of the
    /// design, skipped.
    fn take(
        ring: &strobe_perf::overflow::OverflowRing,
        st: &Alternation,
        p: &Periods,
    ) -> Overflows {
        let mut o = Overflows::EMPTY;
        let spacing = p.period / 2;
        ring.drain(|kernel, w| {
            // nr, time_enabled, time_running, values.
            let vals = w.get(READ_HEAD..).unwrap_or(&[]);
            let Some(&leader) = vals.first() else { return };
            if !st.is_due(leader) {
                return;
            }
            if let Some(prev) = o.last() {
                if leader < prev[0].saturating_add(spacing) {
                    return;
                }
            }
            if o.n == MAX_OVERFLOWS {
                o.values.copy_within(1.., 0);
                o.n -= 1;
            }
            if let Some(dst) = o.values.get_mut(o.n) {
                let k = vals.len().min(MAX_GROUP);
                dst[..k].copy_from_slice(&vals[..k]);
                o.n += 1;
                o.kernel = kernel;
            }
        });
        o
    }

    fn first(&self) -> Option<&[u64; MAX_GROUP]> {
        self.values.get(..self.n).and_then(|v| v.first())
    }

    fn last(&self) -> Option<&[u64; MAX_GROUP]> {
        self.n.checked_sub(1).and_then(|i| self.values.get(i))
    }
}

/// What one handled overflow was, for the calibration.
pub struct Handled {
    /// The (last) sample's kind.
    pub kind: Kind,
    /// The group read by the handler, leader first.
    pub counters: [u64; MAX_GROUP],
    /// Counters read.
    pub n: usize,
    /// The group as the handler's first act read it, when it did (a window start in a
    /// call; every window start in calibration).
    pub entry: Option<[u64; MAX_GROUP]>,
    /// The group at the overflow itself (from the ring): where the window began, or
    /// ended (the leader's value where the window ended).
    pub overflow: Option<[u64; MAX_GROUP]>,
    /// For a window end: what the leader counted from the window's expiry to its
    /// interrupt's read.
    pub late: Option<u64>,
}

/// One sample record of the handler's.
fn rec<'r>(
    kind: Kind,
    time: u64,
    ip: u64,
    counters: &'r [u64],
    frames: &'r [u64],
    flags: u16,
) -> Rec<'r> {
    Rec { kind: kind as u8, flags, time, ip, counters, frames }
}

/// The handler's work for one overflow of `slot`'s leader, appending its samples to the
/// thread's block in the arena. Async-signal-safe. `None` when nothing was recorded.
#[inline]
pub fn take_sample(
    a: &Agent,
    ar: &strobe_protocol::Arena,
    index: usize,
    slot: &SharedSlot,
    local: &Local,
    uc: *mut libc::c_void,
    late: bool,
) -> Option<Handled> {
    let pool = ar.pool();
    let reserve = |words| {
        // SAFETY: as for the appends below.
        if let Some(true) = unsafe { custody::reserve(&pool, slot, index as u32, words) } {
            ar.wake_recorder();
        }
    };
    handle_overflow(a, slot, local, uc, late, reserve, |r| {
        // SAFETY: this handler is the slot's only producer: it runs on the slot's owner
        // thread (the caller's lookup checked the generation), and SIGTRAP is blocked
        // while it runs, so it does not re-enter itself.
        let appended = unsafe { custody::append(&pool, slot, index as u32, r) };
        if let Append::Stored { wake: true } | Append::Lost { wake: true } = appended {
            ar.wake_recorder();
        }
    })
}

/// The handler's work for one overflow of `slot`'s leader: take the overflow's values
/// from the ring, walk the stack (a window's end too: not a place where time went, but
/// the report needs which calls the window stayed inside), make room for the samples
/// (`reserve`, before a window begins: the first touch of a shared page faults, and that
/// fault is the sampler's, not the window's), read the group, program the next period,
/// and hand the samples to `put`. Async-signal-safe. `None` when nothing was recorded:
/// stopping, or a signal whose overflow an earlier handler already took.
///
/// A window begins with the group stopped (see the module note, "Where a window begins
/// and ends"): stop, read, program the window and restart, read again. The first read is
/// the leader's value when the window's timer starts, so the window's end in leader units
/// is known exactly; the second, the last system call before the handler returns, is the
/// window's start.
///
/// A `late` signal (the thread had SIGTRAP blocked) is still a time sample, near where
/// the time went (the blocked stretch is the code that blocked it), but no window: its
/// counters describe the unblocking, not the overflow. In windows mode it is recorded as
/// a plain sample and any open window is abandoned.
#[inline]
pub fn handle_overflow(
    a: &Agent,
    slot: &SharedSlot,
    local: &Local,
    uc: *mut libc::c_void,
    late: bool,
    mut reserve: impl FnMut(usize),
    mut put: impl FnMut(&Rec<'_>),
) -> Option<Handled> {
    if STOPPING.load(Ordering::Relaxed) {
        return None;
    }
    let p = periods(a);
    let mut st = slot.alt.load();
    if late && p.window > 0 {
        // A late signal whose overflow is not in the ring (as due in the current period)
        // is one an earlier handler took: its overflow came while that handler ran, with
        // SIGTRAP blocked, so the kernel flagged it asynchronous. Taking it as a sample
        // counted a time sample twice (in a loop of system calls, a third of the samples
        // of a 4 ms process were such doubles).
        if let Some(ring) = local.ring() {
            if Overflows::take(ring, &st, &p).n == 0 {
                return None;
            }
        }
        let r = stack::regs(uc);
        let mut frames = [0u64; MAX_DEPTH];
        let (depth, flags) = walk(a, local, &r, &mut frames);
        let mut words = [0u64; READ_HEAD + MAX_GROUP];
        let n = read_group(local, &mut words);
        let time = mono_ns();
        let counters = words.get(READ_HEAD..READ_HEAD + n).unwrap_or(&[]);
        // The overflow ended a long period (a time sample) or a window (not one: the
        // window is abandoned; the report counts it unpaired).
        let was_long = !st.in_window;
        let (next, arm) = st.restart(&p, counters.first().copied().unwrap_or(0));
        program(local, next, arm);
        slot.alt.store(st);
        if was_long {
            let frames = frames.get(..depth).unwrap_or(&[]);
            put(&rec(Kind::Plain, time, r.ip, counters, frames, flags));
        }
        return None;
    }
    let long = p.window > 0 && !st.in_window;
    let overflows = match local.ring() {
        Some(ring) => {
            let o = Overflows::take(ring, &st, &p);
            if p.window > 0 && o.n == 0 {
                // No overflow of the current period: the signal of one an earlier handler
                // took (its record written just before that handler read the ring), or of
                // a timer firing again before it was re-programmed. Nothing new.
                return None;
            }
            o
        }
        None => Overflows::EMPTY,
    };
    let r = stack::regs(uc);
    // The window begins at the overflow when it interrupted the kernel's work for the
    // thread, a system call or an exception such as a page fault: its remainder is the
    // target's work. After user code the delay is the sampler's own. (Begun at the
    // handler after a page fault, a window started where the fault ended, just before the
    // next one in a page-touching loop, and missed the fault's remaining kernel time: the
    // bundled workload's faulting function read 1.23-1.24x its own count at a 1 ms period
    // in three runs, 1.12-1.15x begun at the overflow.)
    let in_kernel = long && overflows.kernel;
    // A window start stops the group first: what it counts from here to the restart is
    // nobody's, and the leader's value now is both where a call ended, as near as the
    // handler can tell (after an overflow in user code the same value measures the
    // delivery itself, the interrupt's return and the signal's, which a call's tail is
    // measured against), and its value when the window's timer starts.
    if long {
        stop(local);
    }
    let mut words = [0u64; READ_HEAD + MAX_GROUP];
    let ring_end = !long && st.in_window && overflows.n > 0;
    let n = match overflows.first().filter(|_| ring_end) {
        // The one-shot window stopped the group at its overflow: the ring's values are
        // the group's now, and no read is needed.
        Some(o) => {
            let k = a.spec.events.len().min(MAX_GROUP);
            if let (Some(dst), Some(src)) = (words.get_mut(READ_HEAD..READ_HEAD + k), o.get(..k)) {
                dst.copy_from_slice(src);
            }
            k
        }
        None => read_group(local, &mut words),
    };
    let time = mono_ns();
    let counters = words.get(READ_HEAD..READ_HEAD + n).unwrap_or(&[]);
    let leader = counters.first().copied().unwrap_or(0);
    let entry_leader = (long && n > 0 && overflows.n > 0).then_some(leader);
    let mut p = p;
    if let (Some(e), Some(o)) = (entry_leader, overflows.last()) {
        if !in_kernel {
            note_delivery(e.wrapping_sub(o[0]), p.window);
        }
        if p.tail_dead > 0 {
            p.tail_dead = delivery(p.tail_dead);
        }
    }
    let mut frames = [0u64; MAX_DEPTH];
    // Every sample walks, a window's end too: the report needs where a window ended to
    // know which calls it stayed inside. (At a window start the group is stopped: the
    // walk is nobody's time.)
    let (depth, flags) = walk(a, local, &r, &mut frames);
    if long {
        // Room for this window start's samples (an overflow's values, the start, a tail
        // window's end; each a header, the counters and, for two, the stack).
        let per = strobe_sampler::custody::record::HEAD_WORDS + a.spec.events.len();
        reserve(3 * per + 2 * depth);
    }
    let since = match (overflows.last(), entry_leader) {
        (Some(o), Some(e)) if in_kernel => Some(e.wrapping_sub(o[0])),
        _ => None,
    };
    // Where the window this sample ends ended, in leader units (see
    // `Alternation::window_end`): its timer started with the leader at `armed_at` (the
    // group was stopped until then) and ran `armed_period` of the timer's time.
    let ending = st.in_window && !long;
    let at_interrupt = match overflows.first() {
        Some(o) => o[0],
        None => leader, // no ring: the one-shot window stopped itself
    };
    let expiry = st.armed_at.wrapping_add(st.armed_period);
    let switches = switch_counter(a);
    let ended_at = if ending {
        let at = switches.and_then(|k| match overflows.first() {
            Some(o) => o.get(k).copied(),
            None => counters.get(k).copied(),
        });
        let switched = st.switched(at, at_interrupt, time, delivery(p.tail_dead));
        st.window_end(&p, at_interrupt, switched, at)
    } else {
        expiry
    };
    let step = st.on_overflow(&p, leader, since);
    if !long {
        program(local, step.next_period, step.arm);
    }
    slot.alt.store(st);
    if let Some(d) = step.window_delta {
        slot.alt.count_window(d);
    }
    let frames = frames.get(..depth).unwrap_or(&[]);
    if step.kind == Kind::WindowStart && p.tail_dead > 0 && overflows.n > 1 {
        // A system call longer than a period: each earlier overflow is a time sample of
        // the call, and the stretch to the next overflow a window by itself.
        for i in 0..overflows.n - 1 {
            let (Some(from), Some(to)) = (overflows.values.get(i), overflows.values.get(i + 1))
            else {
                break;
            };
            // No handler ran between the two: the tail's baseline is added back.
            let mut from = *from;
            from[0] = from[0].wrapping_sub(a.cfg.tail_dead);
            let (from, to) = (from.get(..n).unwrap_or(&[]), to.get(..n).unwrap_or(&[]));
            put(&rec(Kind::CallTail, time, r.ip, from, &[], 0));
            put(&rec(Kind::WindowStart, time, r.ip, to, frames, flags));
            put(&rec(Kind::WindowEnd, time, r.ip, to, frames, flags));
        }
    }
    // The overflow this sample handled: where a window began (the last of a long
    // period's) or ended (a window's first). A window's end is its expiry: the values
    // the interrupt read, but the leader's at the expiry itself, which the interrupt
    // reads late by its delivery (the target does not run in between).
    let overflow = match (step.kind, overflows.first(), overflows.last()) {
        (Kind::WindowEnd, Some(o), _) => Some(expired(o, ended_at)),
        (Kind::WindowEnd, None, _) => {
            // No ring: the one-shot window stopped itself; its end is the read above.
            let mut o = [0u64; MAX_GROUP];
            if let Some(dst) = o.get_mut(..n) {
                dst.copy_from_slice(counters);
            }
            Some(expired(&o, ended_at))
        }
        (_, _, Some(o)) if long => Some(*o),
        _ => None,
    };
    // A window starts: restart the group, then read it as the handler's last system
    // call (what follows it to the target's first instruction is the baseline).
    let mut started = [0u64; READ_HEAD + MAX_GROUP];
    let start_counters = if long {
        program_stopped(local, step.next_period, step.arm);
        if step.close_now {
            counters
        } else {
            let m = read_group(local, &mut started).min(n);
            let now = started.get(READ_HEAD..READ_HEAD + m).unwrap_or(&[]);
            if let Some(&l) = now.first() {
                st.note_lead(&p, l.wrapping_sub(leader));
                let sw = switches.and_then(|k| now.get(k).copied()).unwrap_or(0);
                st.note_start(l, mono_ns(), sw);
                slot.alt.store(st);
            }
            now
        }
    } else {
        counters
    };
    if long && !step.close_now {
        // Where the report will take this window to begin, for the per-switch fit: the
        // start read, or a call's tail (the overflow, moved on as its record is below,
        // plus the calibrated delay the report takes off it).
        let start = start_counters.first().copied().unwrap_or(0);
        let sw_at = |v: &[u64]| switches.and_then(|k| v.get(k).copied()).unwrap_or(0);
        let (from, sw) = match overflow.as_ref().filter(|_| step.tail) {
            Some(o) => {
                let at = entry_leader.unwrap_or(start);
                (o[0].wrapping_add(start.wrapping_sub(at)).wrapping_add(p.tail_dead), sw_at(o))
            }
            None => (start, sw_at(start_counters)),
        };
        st.note_fit_start(from, sw);
        slot.alt.store(st);
    }
    if let Some(o) = overflow.as_ref().filter(|_| p.window > 0) {
        let mut v = *o;
        if step.tail {
            // A call's tail is measured to the handler's first read, not to the window's
            // start: the leader's count between the two is the sampler's, so the
            // record's leader is moved on by it (the start minus this record, less the
            // baseline's tail, is the call's remainder).
            let start = start_counters.first().copied().unwrap_or(0);
            // Also by the difference between this process's measured delivery and the
            // calibrated one the report subtracts, so the report's tail is this one.
            let at = entry_leader.unwrap_or(start);
            v[0] = v[0].wrapping_add(start.wrapping_sub(at));
            v[0] = v[0].wrapping_add(p.tail_dead).wrapping_sub(a.cfg.tail_dead);
        }
        let kind = if step.tail { Kind::CallTail } else { Kind::Overflow };
        put(&rec(kind, time, r.ip, v.get(..n).unwrap_or(&[]), &[], 0));
    }
    put(&rec(step.kind, time, r.ip, start_counters, frames, flags));
    if step.close_now {
        put(&rec(Kind::WindowEnd, time, r.ip, start_counters, frames, flags));
    }
    let mut out = Handled {
        kind: step.kind,
        counters: [0; MAX_GROUP],
        entry: entry_leader.map(|_| {
            let mut e = [0u64; MAX_GROUP];
            if let Some(dst) = e.get_mut(..n) {
                dst.copy_from_slice(counters);
            }
            e
        }),
        n,
        overflow,
        late: (step.kind == Kind::WindowEnd && expiry <= at_interrupt)
            .then(|| at_interrupt - expiry),
    };
    if let Some(dst) = out.counters.get_mut(..start_counters.len()) {
        dst.copy_from_slice(start_counters);
    }
    Some(out)
}

/// Where the group's count of context switches sits in its values, if it has one.
#[inline]
fn switch_counter(a: &Agent) -> Option<usize> {
    a.spec.events.iter().position(|e| {
        e.type_ == sys::PERF_TYPE_SOFTWARE
            && e.config == u64::from(sys::PERF_COUNT_SW_CONTEXT_SWITCHES)
    })
}

/// The group's values `o` at a window's overflow with the leader's replaced by its value
/// where the window ended (`Alternation::window_end`), when that is earlier (it always
/// is, by the interrupt's delivery).
#[inline]
fn expired(o: &[u64; MAX_GROUP], expiry: u64) -> [u64; MAX_GROUP] {
    let mut v = *o;
    if expiry <= v[0] {
        v[0] = expiry;
    }
    v
}

/// Walks the interrupted thread's stack into `frames` (when stacks are recorded): the
/// depth and the record flags saying how the walk ended.
#[inline]
fn walk(
    a: &Agent,
    local: &Local,
    r: &strobe_unwind::Regs,
    frames: &mut [u64; MAX_DEPTH],
) -> (usize, u16) {
    let walker = local.walker.load(Ordering::Relaxed);
    if a.call_graph == CallGraph::None || walker.is_null() {
        return (0, 0);
    }
    let limit = (a.max_depth as usize).min(MAX_DEPTH);
    let out = frames.get_mut(..limit).unwrap_or(&mut []);
    // SAFETY: the owner's walker, created by this thread at setup and dropped only by it
    // after its events are closed; the handler runs on the owner's thread.
    let w = unsafe { &mut *walker };
    let (depth, end) = stack::walk(a.call_graph, r, w, out);
    let flags = FLAG_HAS_STACK
        | match end {
            WalkEnd::Complete => FLAG_COMPLETE,
            WalkEnd::DepthLimit => FLAG_TRUNCATED,
            _ => 0,
        };
    (depth, flags)
}

/// Why a thread could not be set up.
pub enum SetupError {
    /// All slots are taken.
    NoSlot,
    /// The agent's descriptor budget is spent (`fds`).
    Budget,
    /// perf_event_open failed.
    Open(strobe_perf::OpenError),
}

/// The first period of a new thread: a draw from the stationary residual of the sampling
/// cycle, so a thread's expected samples are its CPU time over the mean cycle whatever
/// its length (see the module note). The cycle is what the leader counts from one time
/// sample to the next: the long period, the window, and what the leader counts of the
/// sampler itself beyond them (`cycle_extra`, calibrated). `u` is uniform in [0, 1).
pub fn first_period(p: &Periods, u: f64) -> u64 {
    let base = p.period as f64 + p.window as f64 + p.cycle_extra as f64;
    let j = p.jitter as f64;
    if base <= 0.0 {
        return 1;
    }
    let mean = base + j / 2.0;
    // The residual of a cycle uniform in [base, base + j] has density P(C > x) / mean:
    // flat up to `base`, then falling linearly to 0 at `base + j`.
    let flat = base / mean;
    let x = if u < flat || j == 0.0 {
        u / flat.max(f64::MIN_POSITIVE) * base
    } else {
        let v = ((u - flat) / (1.0 - flat)).clamp(0.0, 1.0);
        base + j * (1.0 - (1.0 - v).sqrt())
    };
    (x.round() as u64).clamp(1, (base + j) as u64)
}

/// The golden ratio's fraction in 64-bit fixed point: the Weyl sequence's step.
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// This process's sequence of first-period draws (see the module note): its random start
/// (0: not drawn yet), the index of its next point, and, in a forked child before its
/// first thread's draw, the point its parent took for it (`u64::MAX`: none).
static DRAW_START: AtomicU64 = AtomicU64::new(0);
static DRAW_NEXT: AtomicU64 = AtomicU64::new(0);
static DRAW_FORKED: AtomicU64 = AtomicU64::new(u64::MAX);
/// The point the last fork took for its child (the parent's `pthread_atfork` prepare).
static DRAW_FOR_CHILD: AtomicU64 = AtomicU64::new(u64::MAX);
// Relaxed throughout: each of these is a value on its own that publishes no other memory.
// The start is set once by a compare-exchange (threads racing for it agree on one), the
// index is a fetch_add (each thread its own point), and the fork handlers run on the
// forking thread, before and after fork(2), which orders them with the child's first read.

/// Point `k` of the sequence, as a 64-bit fraction.
fn weyl_point(k: u64) -> u64 {
    let mut start = DRAW_START.load(Ordering::Relaxed);
    if start == 0 {
        // The random start: a process's own, from its clock and pid.
        let mut seed = mono_ns() ^ (u64::from(std::process::id()) << 32);
        let fresh = ((uniform(&mut seed) * (1u64 << 53) as f64) as u64) << 11 | 1;
        start = match DRAW_START.compare_exchange(0, fresh, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => fresh,
            Err(other) => other,
        };
    }
    start.wrapping_add(k.wrapping_mul(GOLDEN))
}

/// The next first-period draw of this process, uniform in [0, 1).
fn next_draw() -> f64 {
    let x = match DRAW_FORKED.swap(u64::MAX, Ordering::Relaxed) {
        u64::MAX => weyl_point(DRAW_NEXT.fetch_add(1, Ordering::Relaxed)),
        x => x,
    };
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// Before a fork, in the parent: takes the sequence's next point for the child.
pub fn draw_before_fork() {
    let x = weyl_point(DRAW_NEXT.fetch_add(1, Ordering::Relaxed));
    DRAW_FOR_CHILD.store(x, Ordering::Relaxed);
}

/// After a fork, in the parent: the point taken for the child is not given again (to a
/// child made without the fork handlers, by a raw clone).
pub fn draw_after_fork_in_parent() {
    DRAW_FOR_CHILD.store(u64::MAX, Ordering::Relaxed);
}

/// After a fork, in the child (one thread): its first draw is the point its parent took
/// for it; its later ones a sequence of its own, from a new random start.
pub fn draw_after_fork_in_child() {
    DRAW_FORKED.store(DRAW_FOR_CHILD.swap(u64::MAX, Ordering::Relaxed), Ordering::Relaxed);
    DRAW_START.store(0, Ordering::Relaxed);
    DRAW_NEXT.store(0, Ordering::Relaxed);
}

/// A uniform draw in [0, 1) from a 64-bit state (xorshift64*).
fn uniform(seed: &mut u64) -> f64 {
    let mut x = *seed | 1;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *seed = x;
    (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
}

/// Claims a slot, opens its group on the calling thread and records its stack bounds.
/// The group is left disarmed with its first period already set: a residual draw
/// (`first_period`), or `period` when given (calibration). Returns the slot index.
pub fn open_slot(a: &Agent, period: Option<u64>) -> Result<usize, SetupError> {
    let ar = arena().ok_or(SetupError::NoSlot)?;
    let (idx, generation) = ar.claim_slot().ok_or(SetupError::NoSlot)?;
    let index = idx as usize;
    let (Some(slot), Some(local)) = (ar.slots().get(index), LOCAL.get(index)) else {
        return Err(SetupError::NoSlot);
    };
    let mut seed = mono_ns() ^ (index as u64).wrapping_mul(GOLDEN);
    let _ = uniform(&mut seed);
    let first = period.unwrap_or_else(|| first_period(&periods(a), next_draw()));
    // The descriptors come out of the agent's budget (see `fds`): a thread that does
    // not fit is left to the kernel floor.
    let n = a.spec.events.len() as u32;
    if !crate::fds::take(n) {
        slot.ctl.abandon();
        return Err(SetupError::Budget);
    }
    let group = match strobe_perf::EventGroup::open_sampling(
        &a.spec,
        strobe_perf::Target::CALLING_THREAD,
        first,
        slots::sig_data(index, generation),
        a.cfg.kernel,
        a.window > 0,
    ) {
        Ok(g) => g,
        Err(e) => {
            crate::fds::give_back(n);
            slot.ctl.abandon();
            return Err(SetupError::Open(e));
        }
    };
    // Into the agent's band, out of the program's way.
    let mut placed = [-1; MAX_GROUP];
    let mut all = true;
    for (i, fd) in group.into_raw_fds().into_iter().enumerate() {
        match (crate::fds::place(fd), placed.get_mut(i)) {
            (Some(f), Some(p)) => *p = f,
            (Some(f), None) => crate::fds::close_own(f),
            (None, _) => all = false,
        }
    }
    if !all {
        for f in placed.iter().filter(|&&f| f >= 0) {
            crate::fds::close_own(*f);
        }
        crate::fds::give_back(n);
        slot.ctl.abandon();
        return Err(SetupError::Budget);
    }
    // The handler's own stack (SA_ONSTACK): before the walker, which learns its range.
    crate::altstack::install(local);
    if local.walker.load(Ordering::Relaxed).is_null() {
        let w = Box::new(stack::thread_walker(a.call_graph, local.alt.range()));
        local.walker.store(Box::into_raw(w), Ordering::Relaxed);
    }
    if a.window > 0 && local.ring.load(Ordering::Relaxed).is_null() {
        match strobe_perf::overflow::OverflowRing::map(placed[0]) {
            Ok(ring) => local.ring.store(Box::into_raw(Box::new(ring)), Ordering::Relaxed),
            Err(_) => ar.count_thread_without_ring(),
        }
    }
    for (dst, &fd) in local.fds.iter().zip(&placed) {
        dst.store(fd, Ordering::Relaxed);
    }
    local.leader_fd.store(placed[0], Ordering::Relaxed);
    local.masked.store(false, Ordering::Relaxed);
    local.paused.store(false, Ordering::Relaxed);
    local.counted_blocked.store(false, Ordering::Relaxed);
    slot.reset_custody(a.pid as u32, sys::gettid() as u32, a.stream);
    slot.set_comm(&thread_name());
    slot.alt.reset(seed, first);
    // Release (in `activate`): the recorder (and our own handler, on this thread) that
    // sees ACTIVE sees the custody state and alternation above.
    slot.ctl.activate();
    Ok(index)
}

/// The calling thread's name (`comm`).
pub fn thread_name() -> [u8; 16] {
    let mut buf = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes into `buf`.
    unsafe { libc::prctl(libc::PR_GET_NAME, buf.as_mut_ptr(), 0, 0, 0) };
    buf
}

/// Clock `clock`'s value, ns (0 if the clock cannot be read).
fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer for the call.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// The calling thread's CPU time, ns.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Thread `tid`'s CPU time, ns (0 if it is gone), read from another thread of its process.
pub fn thread_cpu_ns_of(tid: u32) -> u64 {
    // The kernel's clock id for a thread's CPU time (CPUCLOCK_SCHED of a per-thread
    // clock), as glibc's pthread_getcpuclockid builds it.
    clock_ns((!(tid as libc::clockid_t) << 3) | 6)
}

/// Stops every other thread's sampling in this process, from the thread stepping aside for
/// a seccomp filter (`sandbox`), before the filter is in: each leader is disabled (no
/// overflow of ours comes to a thread that may be under the filter, or that execs) and
/// each served stretch ends (the kernel floor samples the thread from now on). Both are
/// the owner's to do; every owner does them under a pass of the sandbox gate, which the
/// caller has closed and waited out: no owner touches its slot, its events or their
/// descriptors again, so the caller is the only one left to.
pub fn stop_other_threads(own: Option<usize>) {
    let Some(ar) = arena() else { return };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    let high = ar.high_water().min(slots::MAX_SLOTS);
    for (i, slot) in ar.slots().iter().enumerate().take(high) {
        let Some(local) = LOCAL.get(i) else { continue };
        let leader = local.leader_fd.load(Ordering::Relaxed);
        if Some(i) == own || leader < 0 || slot.pid.load(Ordering::Relaxed) != pid {
            continue;
        }
        let _ = EventFd::from_raw(leader).disable();
        let cpu = thread_cpu_ns_of(slot.tid.load(Ordering::Relaxed));
        if cpu != 0 {
            slot.end_stretch(mono_ns(), cpu);
        }
    }
}

/// Starts slot `index`'s leader running (its first period was set at open), noting the
/// CPU time the thread ran before it could be sampled and, from `setup_from` (the
/// thread's CPU time when the agent began setting it up), what the agent's set-up cost.
/// The served stretch begins here: the recorder drops the kernel floor's samples of the
/// thread from now until it ends.
pub fn arm(index: usize, setup_from: Option<u64>) {
    let cpu = thread_cpu_ns().max(1);
    if let Some(slot) = arena().and_then(|ar| ar.slots().get(index)) {
        // Relaxed: read by the recorder after the slot is freed or the process ended. Only
        // the first arming counts (a failed exec re-arms).
        let _ = slot.cpu_before_ns.compare_exchange(0, cpu, Ordering::Relaxed, Ordering::Relaxed);
        if let Some(from) = setup_from {
            slot.setup_ns.store(cpu.saturating_sub(from), Ordering::Relaxed);
        }
        slot.begin_stretch(mono_ns(), cpu);
    }
    if let Some(local) = LOCAL.get(index) {
        // Same thread as the handler that reads it: a signal after this store may re-arm
        // the leader, which is what arming wants.
        local.paused.store(false, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        // The slot's live leader.
        let _ = EventFd::from_raw(local.leader_fd.load(Ordering::Relaxed)).enable();
    }
}

/// Stops slot `index`'s leader and ends its served stretch (an exec, or the thread
/// blocking the sampler's signal): from now on the kernel floor samples the thread.
/// `arm(index, None)` serves it again.
pub fn pause(index: usize) {
    if let Some(local) = LOCAL.get(index) {
        // The flag first, then the ioctl. An overflow just before the ioctl (or during
        // it) is delivered to our handler on its way back to user space; the handler
        // takes it, and without the flag it would arm the leader again (a window's
        // one-shot), whose next overflow then comes during the exec and kills the new
        // image with a SIGTRAP it has no handler for yet (seen as one exec'd child in
        // about 24,000 killed by signal 5; the trace showed DISABLE, the signal, the
        // handler's PERIOD and REFRESH, then execve). The handler runs on this thread,
        // so a compiler fence orders the store before the system call for it.
        local.paused.store(true, Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        // This thread's live leader. Once the ioctl returns, any overflow before it has
        // been delivered to our handler, which left the leader stopped.
        let _ = EventFd::from_raw(local.leader_fd.load(Ordering::Relaxed)).disable();
    }
    if let Some(slot) = arena().and_then(|ar| ar.slots().get(index)) {
        slot.end_stretch(mono_ns(), thread_cpu_ns());
    }
}

/// Closes slot `index`'s events from its owning thread, hands its last block to the
/// recorder and marks the slot DEAD (the recorder drains and frees it). With `discard`
/// (calibration: no recorder will read it) the slot is freed at once and its records
/// are left for the pool's next user to overwrite.
pub fn close_slot(index: usize, discard: bool) {
    let (Some(ar), Some(local)) = (arena(), LOCAL.get(index)) else { return };
    let Some(slot) = ar.slots().get(index) else { return };
    // Same-thread ordering: our handler sees CLOSING before the fds go away, and ignores us.
    if !slot.ctl.begin_close() {
        return;
    }
    // The served stretch ends here: closing the events is the agent's own work, counted
    // with its set-up.
    let cpu0 = thread_cpu_ns();
    slot.end_stretch(mono_ns(), cpu0);
    local.close_group();
    local.drop_ring();
    local.drop_walker();
    // No SIGTRAP of ours comes any more: the program's own signal stack, if it set one.
    crate::altstack::remove(local);
    slot.set_comm(&thread_name());
    let spent = thread_cpu_ns().saturating_sub(cpu0);
    slot.setup_ns
        .store(slot.setup_ns.load(Ordering::Relaxed).saturating_add(spent), Ordering::Relaxed);
    if discard {
        slot.ctl.finish_close(true);
        return;
    }
    // SAFETY: we are the slot's owner and our handler can no longer run for it (CLOSING,
    // events closed).
    unsafe { custody::close(&ar.pool(), slot) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first period's draws: within the cycle, and their mean is the stationary
    /// residual's (E[C^2] / 2E[C]), so a thread shorter than a period is sampled with the
    /// probability its length deserves.
    #[test]
    fn first_periods_follow_the_cycles_residual() {
        let p =
            Periods { period: 1_000_000, jitter: 200_000, window: 20_000, ..Periods::default() };
        let mut seed = 12345u64;
        let n = 200_000;
        let (mut sum, mut max, mut below_half) = (0f64, 0u64, 0u64);
        for _ in 0..n {
            let f = first_period(&p, uniform(&mut seed));
            assert!((1..=1_220_000).contains(&f), "{f}");
            sum += f as f64;
            max = max.max(f);
            if f < 100_000 {
                below_half += 1;
            }
        }
        let (b, j) = (1_020_000f64, 200_000f64);
        let mean_c = b + j / 2.0;
        let e_c2 = b * b + b * j + j * j / 3.0;
        let want = e_c2 / (2.0 * mean_c);
        let got = sum / n as f64;
        assert!((got - want).abs() / want < 0.01, "mean first period {got:.0}, want {want:.0}");
        // A 0.1 ms thread is sampled with probability 0.1 ms / the mean cycle (1.12 ms).
        let p_short = below_half as f64 / n as f64;
        assert!((p_short - 100_000.0 / mean_c).abs() < 0.005, "{p_short}");
        assert!(max > 1_150_000, "the jitter's tail is reached: {max}");
        // No jitter, no window: uniform over the period.
        let plain = Periods { period: 1000, jitter: 0, window: 0, ..Periods::default() };
        let m: f64 =
            (0..10_000).map(|_| first_period(&plain, uniform(&mut seed)) as f64).sum::<f64>() / 1e4;
        assert!((m - 500.0).abs() < 15.0, "{m}");
    }

    /// Successive draws spread evenly: of 12000 threads of 1 ms at a 10 ms cycle, the
    /// number sampled is 1200 within a few (independent draws: 1200 +- 35), in every
    /// stretch of the sequence, and the draws' mean is a uniform's.
    #[test]
    fn successive_draws_sample_short_threads_evenly() {
        let p =
            Periods { period: 9_500_000, jitter: 950_000, window: 25_000, ..Periods::default() };
        let mean_c = 9_525_000.0 + 475_000.0;
        for _ in 0..5 {
            let n = 12_000;
            let (mut sampled, mut sum) = (0u64, 0f64);
            for _ in 0..n {
                let u = next_draw();
                sum += u;
                if first_period(&p, u) < 1_000_000 {
                    sampled += 1;
                }
            }
            let want = n as f64 * 1e6 / mean_c;
            assert!((sampled as f64 - want).abs() < 5.0, "{sampled} sampled, want {want:.0}");
            assert!((sum / n as f64 - 0.5).abs() < 0.001, "{}", sum / n as f64);
        }
        // A forked child's first draw is the point its parent took for it; the parent's
        // next is the one after.
        let k = DRAW_NEXT.load(Ordering::Relaxed);
        draw_before_fork();
        let child = weyl_point(k);
        draw_after_fork_in_child();
        assert_eq!(next_draw(), (child >> 11) as f64 / (1u64 << 53) as f64);
        assert_eq!(DRAW_NEXT.load(Ordering::Relaxed), 0, "the child's own sequence is untouched");
    }
}
