//! The period alternation of seed 004: a long period (plus a random jitter) ends in a
//! sample that opens a short window; the window's overflow closes it and starts the next
//! long period. The deltas of the leader between a window's two samples are its length.
//!
//! # Windows that begin inside system calls
//!
//! The overflow signal reaches the thread only on its way back to user space, so an
//! overflow inside a system call is handled when the call returns. A window opened by the
//! handler would therefore never begin inside a call, and functions that spend part of
//! their time in long calls (an `munmap` after touching pages) would have that part
//! under-represented in their windows (measured: +27% page faults per ms on such a
//! function, against the program's own count). So during a long period the leader runs
//! without stopping and writes the group's values at its overflow to a small ring (see
//! `strobe_perf::overflow`), with the mode it interrupted. When the overflow interrupted
//! the kernel's work for the thread (kernel mode: a system call, or an exception such as
//! a page fault, whose rest is delivered the same way), the window begins at the
//! overflow: the handler's read minus the overflow's values,
//! less the sampler's usual delay between the two ([`Periods::tail_dead`], calibrated),
//! is the call's remaining part (its *tail*), which becomes the window's first part, and
//! the window's programmed length is shortened by it, so every window covers about the
//! same amount of the target's time wherever it began. A tail longer than the window is
//! a window by itself (its end is the handler's read), which the report scales to a
//! window's length. (The delays after page faults, 10-20 us here against 7-9 us after
//! user code, are the faults' remaining kernel time: begun at the handler, a window
//! missed it and started just before the next fault of a page-touching loop, and the
//! bundled workload's faulting function read 1.23-1.24x its own count, 1.12-1.15x begun
//! at the overflow.)
//!
//! # Overflows as boundaries
//!
//! The sampler's own interrupts are preemption points: a CPU-bound thread that the
//! scheduler wants to switch out is switched out at the next return to user space, which
//! the overflow's interrupt provides. So context switches cluster at the overflows that
//! start and end windows. A window's start carries what happened between its overflow
//! and the handler (its start *boundary*, an `Overflow` sample), which the report counts
//! once per sampling cycle rather than per window. A window is one-shot: at its own
//! overflow the group stops (so its timer is not re-armed and need not be cancelled, a
//! timer reprogramming on the VM strobe is developed on), and what follows it until the
//! end handler restarts the group is not counted. Re-programming a running timer races
//! with its expiry (a second overflow of the old period); the ring's records make that
//! harmless (a second record of the same timer is recognised and skipped).
//!
//! # Where a window ends
//!
//! The handler starts a window's timer on a stopped group with the leader at
//! `armed_at`, so the window expires at `armed_at + armed_period` in leader units
//! exactly, however late its interrupt arrives (about 17 us on the VM strobe is
//! developed on, with the target stopped): that value, not the interrupt's, ends the
//! window. The window is programmed longer than asked by [`Alternation::lead`], the
//! running mean of what the leader counts from the timer's start to the handler's read
//! that starts the window (the enable's own timer reprogramming, 10-15 us there).
//!
//! A window the thread was switched out of ends at its interrupt less the thread's mean
//! lateness, and earlier again by its switches times what a switch inside a window costs
//! the thread beyond what one costs it outside windows ([`Alternation::switch_excess`]:
//! the window's timer, always the CPU's next one, is cancelled and restarted at each
//! switch), fitted per thread from its own windows and its own counts.
//!
//! Owns: the state machine ([`Alternation`]: which sample is a window start or end, the
//! next period to program and how to arm it, whether an overflow record belongs to the
//! current long period), the jitter generator, and [`AltCell`], the per-thread copy of
//! that state the signal handler keeps between overflows. Must never allocate, lock or
//! panic: the handler runs every function here.

use crate::sync::{AtomicU64, AtomicU8, Ordering};

/// What a sample is, as stored in a record's kind word (the record file's codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub enum Kind {
    /// A fixed-period sample (no windows).
    Plain = 0,
    /// The end of a long period: a window begins here.
    WindowStart = 1,
    /// The end of a window: its counters minus the window start's are the window's deltas.
    WindowEnd = 2,
    /// The group's values at the overflow that the next `WindowStart` handled, when the
    /// overflow was inside a system call: the window begins there.
    CallTail = 3,
    /// The group's values at the overflow the next sample handled, when the delay to the
    /// handler was the sampler's own: a boundary of the window (see the module note).
    Overflow = 4,
}

impl Kind {
    /// The kind a record's kind word names (anything unknown is Plain).
    pub fn from_word(w: u64) -> Kind {
        match w {
            1 => Kind::WindowStart,
            2 => Kind::WindowEnd,
            3 => Kind::CallTail,
            4 => Kind::Overflow,
            _ => Kind::Plain,
        }
    }
}

/// The periods, in the leader's units (ns for task-clock, events for a count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Periods {
    /// The long period.
    pub period: u64,
    /// A uniform random extra in `0..=jitter` on each long period (0: none).
    pub jitter: u64,
    /// The window (0: no windows, every sample is Plain at the long period).
    pub window: u64,
    /// The shortest period the kernel honours for this leader (10 us for task-clock).
    pub min_period: u64,
    /// What the leader counts between the end of a system call (or an overflow in user
    /// code) and the handler's group read, as the calibration measured it; 0 turns tails
    /// off.
    pub tail_dead: u64,
    /// What the leader counts per cycle beyond the long period and the window: the
    /// sampler's own time while the group counts, and the delays before each switch
    /// (calibrated; 0 when unknown). Only a new thread's first period uses it.
    pub cycle_extra: u64,
    /// What the leader counts from a window's expiry to its interrupt's read in a window
    /// the thread spent on its CPU (calibrated; each thread then keeps its own running
    /// mean, [`Alternation::late`]).
    pub lateness: u64,
    /// What the leader counts in every window that is not the target's (the calibrated
    /// baseline the report subtracts; 0: unknown). The per-switch fit
    /// ([`Alternation::switch_excess`]) takes windows net of it, as the report will.
    pub window_dead: u64,
}

/// Switches a thread's windows must have held, and the thread in all, before the
/// per-switch fit ([`Alternation::switch_excess`]) is used: below, its error (the spread
/// of a window's leader per switch over that many switches) exceeds what it corrects.
pub const MIN_FIT_SWITCHES: u64 = 32;

/// Wall time minus leader time over a window above which the thread was off its CPU in
/// it (a context switch away and back takes more than this; the two clocks' reads at
/// either end differ by well under a microsecond).
pub const OFF_CPU_NS: u64 = 3_000;

/// How the handler arms the leader after programming the next period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arm {
    /// The leader is running: programming the period restarts it from now.
    Running,
    /// One-shot: enable for one overflow, after which the leader stops (a window).
    OneShot,
    /// The leader stopped at a one-shot overflow: enable it, running.
    Enable,
}

/// What the handler does for one overflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The sample's kind.
    pub kind: Kind,
    /// The period to program.
    pub next_period: u64,
    /// How to arm the leader after programming it.
    pub arm: Arm,
    /// For a window end: the leader's delta since the window start.
    pub window_delta: Option<u64>,
    /// A window start whose window begins at the overflow: record the overflow's values
    /// (a `CallTail`) before the start.
    pub tail: bool,
    /// A window start whose tail is a whole window: close it at once (a `WindowEnd` with
    /// the start's own values).
    pub close_now: bool,
}

/// One thread's alternation state between overflows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alternation {
    /// The current period is the window (its overflow ends it).
    pub in_window: bool,
    /// xorshift64 state for the jitter.
    pub rng: u64,
    /// The leader's value at the last window start.
    pub window_start: u64,
    /// The leader's value when the current period (long, or the window) was programmed.
    pub armed_at: u64,
    /// The period programmed then.
    pub armed_period: u64,
    /// What the leader counts from a window's timer start to the handler's read that
    /// starts the window (a running mean): the window is programmed that much longer, so
    /// the target's part of it is the window asked for, less the baseline.
    pub lead: u64,
    /// The leader's value at the read that started the current window.
    pub start_read: u64,
    /// `CLOCK_MONOTONIC` at that read.
    pub start_wall: u64,
    /// The group's count of context switches at that read (0 when it has none).
    pub start_switches: u64,
    /// What the leader counted from a window's expiry to its interrupt's read, in this
    /// thread's windows spent on its CPU (a running mean; 0: none yet, the calibrated
    /// [`Periods::lateness`] stands in).
    pub late: u64,
    /// Where the report will take the current window to begin, in leader units (a call's
    /// tail: the overflow less the delivery; else the start read), and the group's count
    /// of context switches there.
    pub fit_from: u64,
    /// The group's context switches at `fit_from`.
    pub fit_switches_from: u64,
    /// The thread's windows so far, as the report will take them before the per-switch
    /// correction: their leader counts net of [`Periods::window_dead`], summed, and the
    /// context switches they held.
    pub fit_leader: u64,
    /// The context switches those windows held.
    pub fit_switches: u64,
}

impl Alternation {
    /// The state of a thread whose first period, `first`, is a long one.
    pub const fn new(seed: u64, first: u64) -> Alternation {
        Alternation {
            in_window: false,
            rng: seed,
            window_start: 0,
            armed_at: 0,
            armed_period: first,
            lead: 0,
            start_read: 0,
            start_wall: 0,
            start_switches: 0,
            late: 0,
            fit_from: 0,
            fit_switches_from: 0,
            fit_leader: 0,
            fit_switches: 0,
        }
    }

    /// Notes where the report will take the current window to begin (see
    /// [`Alternation::fit_from`]) and the group's context switches there.
    #[inline]
    pub fn note_fit_start(&mut self, leader: u64, switches: u64) {
        self.fit_from = leader;
        self.fit_switches_from = switches;
    }

    /// What a context switch inside a window costs the thread beyond what one costs it
    /// outside windows, in leader units, from this thread's own counts: its windows'
    /// leader per switch less the thread's (`leader_total` over `switches_total`, the
    /// group's counts since it opened, of which windows are a small part). A window's
    /// timer is always the CPU's next one, so every switch in a window cancels and starts
    /// it again, a timer reprogramming that the leader counts and the program's own
    /// clock, outside windows, mostly does not (measured on the VM strobe is developed
    /// on: 9.9 us of task-clock per 100 us sleep with no timer, 10.3-13.3 us with a 10 ms
    /// one, 14.4-19.6 us with a 50 us one). Windows are placed at random in the thread's
    /// time, so without that cost their leader per switch is the thread's. Signed (only
    /// the signed estimate is right on average); 0 until the thread's windows held
    /// [`MIN_FIT_SWITCHES`], and 0 while the estimate's standard error (the thread's
    /// leader per switch over the square root of the windows' switches, the windows'
    /// count of switches being Poisson-like) exceeds a tenth of the window: a thread
    /// that switches rarely (a preempted computation, one switch every 500 us) would need
    /// 10,000 switches in its windows (a correction of that noise moved its few switched
    /// windows by hundreds of microseconds), a thread of 100 us sleeps (20 us of leader a
    /// switch) 16.
    #[inline]
    pub fn switch_excess(&self, p: &Periods, leader_total: u64, switches_total: u64) -> f64 {
        if self.fit_switches < MIN_FIT_SWITCHES || switches_total < MIN_FIT_SWITCHES {
            return 0.0;
        }
        let windows = self.fit_leader as f64 / self.fit_switches as f64;
        let thread = leader_total as f64 / switches_total as f64;
        let bound = p.window as f64 / 10.0;
        if thread * thread > bound * bound * self.fit_switches as f64 {
            return 0.0;
        }
        (windows - thread).max(-(p.window as f64)).min(p.window as f64)
    }

    /// Notes the read that started the current window: the leader's value, the wall time
    /// and the group's count of context switches (0 when it has none).
    #[inline]
    pub fn note_start(&mut self, read: u64, wall: u64, switches: u64) {
        self.start_read = read;
        self.start_wall = wall;
        self.start_switches = switches;
    }

    /// Whether the thread was switched out in the current window, given the group's count
    /// of context switches at the window's overflow (`None`: the group has no such
    /// counter), the leader's value there, the wall time now and the mean delay from an
    /// overflow to the handler (`delivery`). Without a switch counter: when the wall time
    /// since the window's start read exceeds what the leader counted, the delivery and
    /// [`OFF_CPU_NS`] (a switch away and back takes longer).
    #[inline]
    pub fn switched(
        &self,
        switches: Option<u64>,
        at_interrupt: u64,
        wall: u64,
        delivery: u64,
    ) -> bool {
        match switches {
            Some(s) => s != self.start_switches,
            None => {
                let on_wall = wall.wrapping_sub(self.start_wall);
                let counted = at_interrupt.wrapping_sub(self.start_read);
                on_wall > counted.saturating_add(delivery).saturating_add(OFF_CPU_NS)
            }
        }
    }

    /// Where the window that an overflow ends ended, in leader units, given the leader's
    /// value its interrupt read (`at_interrupt`) and whether the thread was switched out
    /// in it ([`switched`](Self::switched)). Call before [`on_overflow`](Self::on_overflow)
    /// (it needs the window's arming).
    ///
    /// The window's timer expired at `armed_at + armed_period` in leader units, and its
    /// interrupt reads the leader later, the target stopped in between (17 us here). That
    /// holds while the thread stays on its CPU. Across a context switch the leader counts
    /// 4-6 us more than the timer consumes (measured with a bare task-clock event on this
    /// VM: the leader starts counting before the timer is started again), so a window in
    /// which the thread was switched out expired later than that value by as much per
    /// switch: its end is the interrupt's value less the thread's mean lateness, learnt
    /// from its windows spent on the CPU (where the lateness is the interrupt's value
    /// less the expiry).
    ///
    /// With the group's count of context switches at the interrupt (`switches`), the
    /// window is also fitted: it joins the thread's sums, and a window the thread was
    /// switched out of ends earlier by its switches times the thread's
    /// [`switch_excess`](Self::switch_excess) (never before its start read, never after
    /// its interrupt).
    #[inline]
    pub fn window_end(
        &mut self,
        p: &Periods,
        at_interrupt: u64,
        switched: bool,
        switches: Option<u64>,
    ) -> u64 {
        let end = self.window_end_raw(p, at_interrupt, switched);
        let Some(now) = switches else { return end };
        let k = now.saturating_sub(self.fit_switches_from);
        let excess = self.switch_excess(p, at_interrupt, now);
        let w = end.saturating_sub(self.fit_from).saturating_sub(p.window_dead);
        self.fit_leader = self.fit_leader.saturating_add(w);
        self.fit_switches = self.fit_switches.saturating_add(k);
        if k == 0 || !switched {
            return end;
        }
        // `as` saturates (a NaN is 0): no rounding needed for nanoseconds.
        let cut = k as f64 * excess;
        let moved = if cut >= 0.0 {
            end.saturating_sub(cut as u64)
        } else {
            end.saturating_add((-cut) as u64)
        };
        moved.max(self.start_read.min(at_interrupt)).min(at_interrupt)
    }

    /// [`window_end`](Self::window_end) before the per-switch fit.
    #[inline]
    fn window_end_raw(&mut self, p: &Periods, at_interrupt: u64, switched: bool) -> u64 {
        let expiry = self.armed_at.wrapping_add(self.armed_period);
        if expiry > at_interrupt {
            return at_interrupt;
        }
        if !switched {
            let x = (at_interrupt - expiry).min(p.window) as i64;
            let late = if self.late == 0 { x } else { self.late as i64 };
            self.late = (late + (x - late) / 8).max(1) as u64;
            return expiry;
        }
        let late = if self.late == 0 { p.lateness } else { self.late };
        at_interrupt.saturating_sub(late).max(expiry)
    }

    /// Folds one window's measured lead (see [`Alternation::lead`]) into the running mean
    /// (an eighth of the way each time; a lead past half the window, a preemption or a
    /// host's stall, is taken as half a window).
    #[inline]
    pub fn note_lead(&mut self, p: &Periods, d: u64) {
        let d = d.min(p.window / 2) as i64;
        let lead = self.lead as i64;
        self.lead = (lead + (d - lead) / 8).max(0) as u64;
    }

    /// The next long period: the base plus a uniform jitter in `0..=jitter` (xorshift64).
    #[inline]
    pub fn next_long(&mut self, p: &Periods) -> u64 {
        if p.jitter == 0 {
            return p.period;
        }
        let mut x = self.rng | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        // checked_add: a jitter of u64::MAX must not become a division by zero here.
        p.period.wrapping_add(p.jitter.checked_add(1).map_or(x, |m| x % m))
    }

    /// Whether an overflow record with leader value `leader` is the current period's own
    /// overflow. A record below half the period past the arming is stale: the previous
    /// period's timer firing again before the handler re-programmed it.
    #[inline]
    pub fn is_due(&self, leader: u64) -> bool {
        leader >= self.armed_at.saturating_add(self.armed_period / 2)
    }

    /// The part of a system call that ran after the overflow, given the leader's count
    /// `since` between the overflow and the handler's first read: `since` less the
    /// calibrated delay of an overflow in user code (the interrupt's return and the
    /// signal's delivery). Signed: the delay varies (a standard deviation of 6-9 us on the
    /// VM strobe is developed on, against calls of a microsecond), and only the signed
    /// difference is right on average; a tail counted only when positive was its noise's
    /// upper half (measured: 6.6 us a window in a loop of 0.75 us `getppid` calls).
    /// `None` when the delay is unknown (no calibration): no tails.
    #[inline]
    pub fn tail_of(p: &Periods, since: u64) -> Option<i64> {
        if p.tail_dead == 0 {
            None
        } else {
            Some((since as i64).wrapping_sub(p.tail_dead as i64))
        }
    }

    /// The leader overflowed and reads `leader` now; `since` is the leader's count since
    /// the overflow when the overflow interrupted a system call and its values are known;
    /// `ring`: the thread has its overflow ring (windows run on instead of stopping).
    /// What the sample is and how to continue.
    #[inline]
    pub fn on_overflow(&mut self, p: &Periods, leader: u64, since: Option<u64>) -> Step {
        let step = |kind, next_period, arm| Step {
            kind,
            next_period,
            arm,
            window_delta: None,
            tail: false,
            close_now: false,
        };
        if p.window == 0 {
            let next = self.long(p, leader);
            return step(Kind::Plain, next, Arm::Running);
        }
        if self.in_window {
            self.in_window = false;
            let delta = leader.wrapping_sub(self.window_start);
            let next = self.long(p, leader);
            // The one-shot window stopped the leader at its overflow.
            return Step { window_delta: Some(delta), ..step(Kind::WindowEnd, next, Arm::Enable) };
        }
        let tail = since.and_then(|s| Self::tail_of(p, s));
        let shortest = (p.window / 5).max(p.min_period).max(1);
        let t = tail.unwrap_or(0);
        if t > 0 && (t as u64).saturating_add(shortest) >= p.window {
            // The tail is a whole window: it ends here; the long period runs on.
            let next = self.long(p, leader);
            return Step {
                tail: true,
                close_now: true,
                ..step(Kind::WindowStart, next, Arm::Running)
            };
        }
        self.in_window = true;
        self.window_start = leader;
        // The window's remainder: a tail (of either sign) takes its place, so every
        // window weighs about the same; the lead is the handler's (see `lead`).
        let remainder =
            (p.window as i64 - t).clamp(shortest as i64, (p.window + p.window / 2) as i64);
        let part = remainder as u64 + self.lead.min(p.window / 2);
        self.armed_at = leader;
        self.armed_period = part;
        Step { tail: tail.is_some(), ..step(Kind::WindowStart, part, Arm::OneShot) }
    }

    /// A new long period programmed at leader value `leader`.
    #[inline]
    fn long(&mut self, p: &Periods, leader: u64) -> u64 {
        let next = self.next_long(p);
        self.armed_at = leader;
        self.armed_period = next;
        next
    }

    /// An overflow that cannot be recorded (a late, asynchronous signal) with the leader
    /// at `leader`: abandon any open window; the long period to program and how to arm
    /// (`ring` as in [`on_overflow`](Self::on_overflow)).
    #[inline]
    pub fn restart(&mut self, p: &Periods, leader: u64) -> (u64, Arm) {
        let arm = if self.in_window { Arm::Enable } else { Arm::Running };
        self.in_window = false;
        (self.long(p, leader), arm)
    }
}

/// A thread's [`Alternation`] and its window statistics, in atomics so the recorder may
/// read the statistics while the owner runs. Only the owner (and its handler, on the same
/// thread) writes, so every access is Relaxed: the owner reads its own stores, and the
/// recorder's reads are made exact by the slot's Release/Acquire of DEAD (and are
/// approximate, but whole words, for a live thread).
#[repr(C)]
#[derive(Debug)]
pub struct AltCell {
    in_window: AtomicU8,
    rng: AtomicU64,
    window_start: AtomicU64,
    armed_at: AtomicU64,
    armed_period: AtomicU64,
    lead: AtomicU64,
    start_read: AtomicU64,
    start_wall: AtomicU64,
    start_switches: AtomicU64,
    late: AtomicU64,
    fit_from: AtomicU64,
    fit_switches_from: AtomicU64,
    fit_leader: AtomicU64,
    fit_switches: AtomicU64,
    windows: AtomicU64,
    window_sum: AtomicU64,
}

impl AltCell {
    crate::sync::const_fn! {
        /// A zeroed cell.
        #[allow(clippy::new_without_default)]
        pub fn new() -> AltCell {
            AltCell {
                in_window: AtomicU8::new(0),
                rng: AtomicU64::new(0),
                window_start: AtomicU64::new(0),
                armed_at: AtomicU64::new(0),
                armed_period: AtomicU64::new(0),
                lead: AtomicU64::new(0),
                start_read: AtomicU64::new(0),
                start_wall: AtomicU64::new(0),
                start_switches: AtomicU64::new(0),
                late: AtomicU64::new(0),
                fit_from: AtomicU64::new(0),
                fit_switches_from: AtomicU64::new(0),
                fit_leader: AtomicU64::new(0),
                fit_switches: AtomicU64::new(0),
                windows: AtomicU64::new(0),
                window_sum: AtomicU64::new(0),
            }
        }
    }

    /// Starts a new owner's state (seeded jitter, a first long period `first`, no windows).
    pub fn reset(&self, seed: u64, first: u64) {
        self.store(Alternation::new(seed, first));
        self.windows.store(0, Ordering::Relaxed);
        self.window_sum.store(0, Ordering::Relaxed);
    }

    /// The owner's state.
    #[inline]
    pub fn load(&self) -> Alternation {
        Alternation {
            in_window: self.in_window.load(Ordering::Relaxed) != 0,
            rng: self.rng.load(Ordering::Relaxed),
            window_start: self.window_start.load(Ordering::Relaxed),
            armed_at: self.armed_at.load(Ordering::Relaxed),
            armed_period: self.armed_period.load(Ordering::Relaxed),
            lead: self.lead.load(Ordering::Relaxed),
            start_read: self.start_read.load(Ordering::Relaxed),
            start_wall: self.start_wall.load(Ordering::Relaxed),
            start_switches: self.start_switches.load(Ordering::Relaxed),
            late: self.late.load(Ordering::Relaxed),
            fit_from: self.fit_from.load(Ordering::Relaxed),
            fit_switches_from: self.fit_switches_from.load(Ordering::Relaxed),
            fit_leader: self.fit_leader.load(Ordering::Relaxed),
            fit_switches: self.fit_switches.load(Ordering::Relaxed),
        }
    }

    /// Saves the owner's state.
    #[inline]
    pub fn store(&self, a: Alternation) {
        self.in_window.store(u8::from(a.in_window), Ordering::Relaxed);
        self.rng.store(a.rng, Ordering::Relaxed);
        self.window_start.store(a.window_start, Ordering::Relaxed);
        self.armed_at.store(a.armed_at, Ordering::Relaxed);
        self.armed_period.store(a.armed_period, Ordering::Relaxed);
        self.lead.store(a.lead, Ordering::Relaxed);
        self.start_read.store(a.start_read, Ordering::Relaxed);
        self.start_wall.store(a.start_wall, Ordering::Relaxed);
        self.start_switches.store(a.start_switches, Ordering::Relaxed);
        self.late.store(a.late, Ordering::Relaxed);
        self.fit_from.store(a.fit_from, Ordering::Relaxed);
        self.fit_switches_from.store(a.fit_switches_from, Ordering::Relaxed);
        self.fit_leader.store(a.fit_leader, Ordering::Relaxed);
        self.fit_switches.store(a.fit_switches, Ordering::Relaxed);
    }

    /// Counts a completed window of leader length `delta`.
    #[inline]
    pub fn count_window(&self, delta: u64) {
        self.windows.store(self.windows.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        let sum = self.window_sum.load(Ordering::Relaxed).wrapping_add(delta);
        self.window_sum.store(sum, Ordering::Relaxed);
    }

    /// Runs one overflow through the state machine and counts a completed window.
    #[inline]
    pub fn on_overflow(&self, p: &Periods, leader: u64, since: Option<u64>) -> Step {
        let mut a = self.load();
        let step = a.on_overflow(p, leader, since);
        self.store(a);
        if let Some(d) = step.window_delta {
            self.count_window(d);
        }
        step
    }

    /// [`Alternation::restart`] on the stored state.
    #[inline]
    pub fn restart(&self, p: &Periods, leader: u64) -> (u64, Arm) {
        let mut a = self.load();
        let next = a.restart(p, leader);
        self.store(a);
        next
    }

    /// Completed windows and the sum of their leader deltas.
    pub fn windows(&self) -> (u64, u64) {
        (self.windows.load(Ordering::Relaxed), self.window_sum.load(Ordering::Relaxed))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    const P: Periods = Periods {
        period: 1_000_000,
        jitter: 0,
        window: 20_000,
        min_period: 10_000,
        tail_dead: 0,
        cycle_extra: 0,
        lateness: 0,
        window_dead: 0,
    };

    #[test]
    fn samples_alternate_start_and_end_and_windows_measure_the_leader() {
        let mut a = Alternation::new(1, 1_000_000);
        let mut leader = 0;
        let mut kinds = Vec::new();
        for i in 0..6 {
            // The leader advances by the period just programmed (plus some handler noise).
            leader += if i % 2 == 0 { 1_000_000 } else { 20_000 + i };
            let s = a.on_overflow(&P, leader, None);
            kinds.push((s.kind, s.next_period, s.arm, s.window_delta));
        }
        use Arm::*;
        use Kind::*;
        assert_eq!(
            kinds,
            [
                (WindowStart, 20_000, OneShot, None),
                (WindowEnd, 1_000_000, Enable, Some(20_001)),
                (WindowStart, 20_000, OneShot, None),
                (WindowEnd, 1_000_000, Enable, Some(20_003)),
                (WindowStart, 20_000, OneShot, None),
                (WindowEnd, 1_000_000, Enable, Some(20_005)),
            ]
        );
    }

    #[test]
    fn without_a_window_every_sample_is_plain_at_the_long_period_running() {
        let mut a = Alternation::new(1, 1_000_000);
        let p = Periods { window: 0, ..P };
        for v in 0..5 {
            let s = a.on_overflow(&p, v, Some(v));
            assert_eq!((s.kind, s.next_period, s.arm), (Kind::Plain, 1_000_000, Arm::Running));
            assert!(!s.tail && !s.close_now);
        }
    }

    #[test]
    fn jitter_stays_in_range_spreads_and_never_touches_the_window() {
        let p = Periods { period: 1_000, jitter: 99, window: 10, min_period: 1, ..P };
        let mut a = Alternation::new(0x1234_5678, 1_000);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..2_000 {
            let start = a.on_overflow(&p, 0, None);
            assert_eq!(start.next_period, 10, "the window is never jittered");
            let end = a.on_overflow(&p, 10, None);
            assert!((1_000..=1_099).contains(&end.next_period), "{}", end.next_period);
            seen.insert(end.next_period);
        }
        assert!(seen.len() > 90, "jitter covers its range: {} distinct values", seen.len());
        // Edge: a jitter of u64::MAX neither divides by zero nor panics.
        let huge = Periods { period: 5, jitter: u64::MAX, window: 0, ..P };
        a.next_long(&huge);
        // A zero seed still produces jitter (the state is forced odd).
        let mut z = Alternation::new(0, 0);
        let j = Periods { period: 0, jitter: 1 << 20, window: 0, ..P };
        assert!((0..8).map(|_| z.next_long(&j)).any(|v| v != 0));
    }

    #[test]
    fn a_late_signal_abandons_the_open_window() {
        let mut a = Alternation::new(3, 1_000_000);
        assert_eq!(a.on_overflow(&P, 100, None).kind, Kind::WindowStart);
        // The window's one-shot leader stopped: it must be enabled again.
        assert_eq!(a.restart(&P, 150), (1_000_000, Arm::Enable));
        assert_eq!(a.restart(&P, 160), (1_000_000, Arm::Running));
        // A window is always one-shot: abandoning one enables the leader again.
        a.on_overflow(&P, 200, None);
        assert_eq!(a.restart(&P, 250), (1_000_000, Arm::Enable));
        // The next overflow ends a long period again: a start, not an end.
        let s = a.on_overflow(&P, 5_000, None);
        assert_eq!((s.kind, s.window_delta), (Kind::WindowStart, None));
    }

    /// A window whose overflow interrupted a system call begins there: the call's tail
    /// shortens the window; a tail as long as a window is one.
    #[test]
    fn a_tail_shortens_the_window_or_is_a_window_by_itself() {
        let p = Periods { window: 50_000, tail_dead: 9_000, ..P };
        let run = |since| {
            let mut a = Alternation::new(1, 1_000_000);
            let s = a.on_overflow(&p, 2_000_000, Some(since));
            (s.kind, s.next_period, s.arm, s.tail, s.close_now, a.in_window)
        };
        use Arm::*;
        use Kind::*;
        // A delay below the usual one is a tail too, of negative length (the delay's own
        // spread): the remainder grows by as much, so windows weigh alike and tails are
        // right on average.
        assert_eq!(run(8_000), (WindowStart, 51_000, OneShot, true, false, true));
        assert_eq!(run(9_000), (WindowStart, 50_000, OneShot, true, false, true));
        assert_eq!(run(0), (WindowStart, 59_000, OneShot, true, false, true));
        // 30 us since the overflow: 21 us of it was the call's.
        assert_eq!(run(30_000), (WindowStart, 29_000, OneShot, true, false, true));
        assert_eq!(run(45_000), (WindowStart, 14_000, OneShot, true, false, true));
        // The window's remainder would be shorter than the kernel allows: the tail is the
        // window, closed at once, and the long period runs on.
        assert_eq!(run(50_000), (WindowStart, 1_000_000, Running, true, true, false));
        assert_eq!(run(900_000), (WindowStart, 1_000_000, Running, true, true, false));
        // Unknown delay (no calibration): never a tail.
        let off = Periods { tail_dead: 0, ..p };
        let mut a = Alternation::new(1, 1_000_000);
        let s = a.on_overflow(&off, 2_000_000, Some(900_000));
        assert_eq!((s.next_period, s.tail), (50_000, false));
        // Without the overflow's values (no ring): never a tail.
        let mut a = Alternation::new(1, 1_000_000);
        assert!(!a.on_overflow(&p, 2_000_000, None).tail);
    }

    /// The lead (what the leader counts from a window's timer start to the read that
    /// starts it) lengthens the programmed window, so the target's part is about the
    /// window asked for; it is a running mean, and never more than half a window.
    #[test]
    fn the_window_is_programmed_longer_by_its_measured_lead() {
        let mut a = Alternation::new(1, 1_000_000);
        for _ in 0..200 {
            a.note_lead(&P, 8_000);
        }
        assert!((7_900..=8_000).contains(&a.lead), "{}", a.lead);
        let s = a.on_overflow(&P, 1_000_000, None);
        assert_eq!(s.next_period, 20_000 + a.lead);
        assert_eq!(a.armed_at + a.armed_period, 1_000_000 + 20_000 + a.lead, "the expiry");
        // A stall is taken as half a window.
        let mut b = Alternation::new(1, 1_000_000);
        for _ in 0..200 {
            b.note_lead(&P, 900_000);
        }
        assert!((9_900..=10_000).contains(&b.lead), "{}", b.lead);
        // A tail shortens the window as before, the lead lengthens it.
        let p = Periods { window: 50_000, tail_dead: 9_000, ..P };
        let mut c = Alternation::new(1, 1_000_000);
        c.lead = 5_000;
        let s = c.on_overflow(&p, 2_000_000, Some(30_000));
        assert_eq!((s.next_period, s.tail), (29_000 + 5_000, true));
    }

    /// A window spent on the CPU ends at its expiry, and teaches the thread its lateness;
    /// one the thread was switched out of ends at its interrupt less that lateness (the
    /// leader counts more than the timer across a switch).
    #[test]
    fn a_window_ends_at_its_expiry_or_at_its_interrupt_less_the_lateness() {
        let p = Periods { lateness: 15_000, ..P };
        let mut a = Alternation::new(1, 1_000_000);
        a.on_overflow(&p, 1_000_000, None);
        a.note_start(1_004_000, 7_000_000, 3);
        assert_eq!((a.armed_at, a.armed_period), (1_000_000, 20_000));
        // Interrupt 17 us late, on the CPU: the expiry, and the thread learns its
        // lateness.
        assert!(!a.switched(Some(3), 1_037_000, 7_060_000, 20_000));
        assert_eq!(a.window_end(&p, 1_037_000, false, None), 1_020_000);
        assert_eq!(a.late, 17_000, "the first on-CPU window sets the mean");
        // Switched out, 25 us past the expiry: the interrupt less the thread's own
        // lateness, never before the expiry.
        assert!(a.switched(Some(4), 1_045_000, 7_060_000, 20_000));
        assert_eq!(a.window_end(&p, 1_045_000, true, None), 1_028_000);
        assert_eq!(a.window_end(&p, 1_030_000, true, None), 1_020_000);
        // Without a switch counter: wall time past what the leader counted, the delivery
        // and a margin.
        assert!(!a.switched(None, 1_037_000, 7_000_000 + 33_000 + 20_000 + 2_000, 20_000));
        assert!(a.switched(None, 1_037_000, 7_000_000 + 33_000 + 20_000 + 4_000, 20_000));
        // Before any on-CPU window, the calibrated lateness stands in.
        let mut b = Alternation::new(1, 1_000_000);
        b.on_overflow(&p, 1_000_000, None);
        b.note_start(1_004_000, 7_000_000, 0);
        assert_eq!(b.window_end(&p, 1_060_000, true, None), 1_045_000);
        // An interrupt "before" the expiry (a timer restarted short) ends the window.
        assert_eq!(b.window_end(&p, 1_010_000, false, None), 1_010_000);
    }

    /// The per-switch fit: a thread whose windows count more leader per switch than the
    /// thread does has its switched windows ended earlier by that excess per switch; a
    /// thread that switches rarely gets no correction (its estimate is noise).
    #[test]
    fn switched_windows_lose_the_windows_excess_per_switch() {
        let p = Periods { window: 50_000, lateness: 10_000, window_dead: 3_000, ..P };
        // The thread: 20 us of leader a switch; its windows: 25 us a switch (3 switches
        // and 78 us of leader each, 3 of it the baseline).
        let mut a = Alternation::new(1, 1_000_000);
        let (mut leader, mut switches) = (0u64, 0u64);
        for i in 0..20 {
            leader += 1_000_000;
            switches += 50;
            a.on_overflow(&p, leader, None);
            a.note_start(leader, 0, switches);
            a.note_fit_start(leader, switches);
            let at = leader + 78_000 + 10_000;
            let end = a.window_end(&p, at, true, Some(switches + 3));
            if i < 11 {
                // Fewer than 32 switches fitted before this window: no correction.
                assert_eq!(end, at - 10_000, "window {i}");
            } else {
                let excess = a.switch_excess(&p, at, switches + 3);
                assert!((excess - 5_000.0).abs() < 1_500.0, "{excess}");
                assert_eq!(end, at - 10_000 - (3.0 * excess) as u64, "window {i}");
            }
            a.on_overflow(&p, at, None);
            leader = at;
            switches += 3;
        }
        assert_eq!(a.fit_switches, 60);
        assert_eq!(a.fit_leader, 20 * 75_000);
        // A window spent on the CPU is never moved, and still fitted.
        a.on_overflow(&p, leader + 1_000_000, None);
        a.note_start(leader + 1_000_000, 0, switches);
        a.note_fit_start(leader + 1_000_000, switches);
        let expiry = a.armed_at + a.armed_period;
        assert_eq!(a.window_end(&p, expiry + 9_000, false, Some(switches)), expiry);
        assert_eq!(a.fit_switches, 60);
        // A thread that switches once every 500 us: the estimate's error (500 us over the
        // square root of its windows' switches) is far above a tenth of the window.
        let mut b = Alternation::new(1, 1_000_000);
        b.fit_leader = 60 * 600_000;
        b.fit_switches = 60;
        assert_eq!(b.switch_excess(&p, 500_000 * 1_000, 1_000), 0.0);
        b.fit_switches = 20;
        assert_eq!(b.switch_excess(&p, 20_000 * 1_000, 1_000), 0.0, "too few switches");
    }

    /// Records of a timer that fired again before the handler re-programmed it are not
    /// taken for the next period's overflow; the long period runs on, the window is
    /// one-shot.
    #[test]
    fn stale_overflow_records_are_told_apart() {
        let mut a = Alternation::new(1, 1_000_000);
        assert!(a.is_due(1_000_000), "the first period's overflow");
        assert!(a.is_due(600_000), "late half of the first period");
        assert!(!a.is_due(400_000));
        let s = a.on_overflow(&P, 1_000_000, None);
        assert_eq!((s.next_period, s.arm), (20_000, Arm::OneShot));
        assert!(!a.is_due(1_005_000), "the long period's timer again, in the window");
        assert!(a.is_due(1_020_000), "the window's own overflow");
        let s = a.on_overflow(&P, 1_020_000, None);
        assert_eq!((s.kind, s.arm), (Kind::WindowEnd, Arm::Enable));
        assert!(!a.is_due(1_040_000), "the window's timer again");
        assert!(a.is_due(2_020_000));
    }

    #[test]
    fn the_cell_counts_windows_and_their_sum() {
        let c = AltCell::new();
        c.reset(9, 1_000_000);
        for (i, v) in [10u64, 30, 100, 125, 200].into_iter().enumerate() {
            let s = c.on_overflow(&P, v, None);
            assert_eq!(s.kind, if i % 2 == 0 { Kind::WindowStart } else { Kind::WindowEnd });
        }
        assert_eq!(c.windows(), (2, 20 + 25));
        assert!(c.load().in_window, "the last window is still open");
        c.reset(9, 1_000_000);
        assert_eq!(c.windows(), (0, 0));
        assert_eq!(c.on_overflow(&P, 1, None).kind, Kind::WindowStart);
        assert_eq!(Kind::from_word(Kind::WindowEnd as u64), Kind::WindowEnd);
        assert_eq!(Kind::from_word(Kind::CallTail as u64), Kind::CallTail);
        assert_eq!(Kind::from_word(Kind::Overflow as u64), Kind::Overflow);
        assert_eq!(Kind::from_word(77), Kind::Plain);
    }
}
