//! The period alternation of seed 004: a long period (plus a random jitter) ends in a
//! sample that opens a short window; the window's overflow closes it and starts the next
//! long period. The deltas of the leader between a window's two samples are its length.
//!
//! Owns: the state machine ([`Alternation`]: which sample is a window start or end, the
//! next period to program), the jitter generator, and [`AltCell`], the per-thread copy of
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
}

impl Kind {
    /// The kind a record's kind word names (anything unknown is Plain).
    pub fn from_word(w: u64) -> Kind {
        match w {
            1 => Kind::WindowStart,
            2 => Kind::WindowEnd,
            _ => Kind::Plain,
        }
    }
}

/// The periods, in the leader's units (ns for task-clock, events for a count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Periods {
    /// The long period.
    pub period: u64,
    /// A uniform random extra in `0..=jitter` on each long period (0: none).
    pub jitter: u64,
    /// The window (0: no windows, every sample is Plain at the long period).
    pub window: u64,
}

/// What the handler does for one overflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The sample's kind.
    pub kind: Kind,
    /// The period to program before re-arming.
    pub next_period: u64,
    /// For a window end: the leader's delta since the window start.
    pub window_delta: Option<u64>,
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
}

impl Alternation {
    /// The state of a thread whose first period is a long one.
    pub const fn new(seed: u64) -> Alternation {
        Alternation { in_window: false, rng: seed, window_start: 0 }
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

    /// The leader overflowed with value `leader`: what the sample is and what comes next.
    #[inline]
    pub fn on_overflow(&mut self, p: &Periods, leader: u64) -> Step {
        if p.window == 0 {
            let next_period = self.next_long(p);
            return Step { kind: Kind::Plain, next_period, window_delta: None };
        }
        if !self.in_window {
            self.window_start = leader;
            self.in_window = true;
            return Step { kind: Kind::WindowStart, next_period: p.window, window_delta: None };
        }
        self.in_window = false;
        let next_period = self.next_long(p);
        Step {
            kind: Kind::WindowEnd,
            next_period,
            window_delta: Some(leader.wrapping_sub(self.window_start)),
        }
    }

    /// An overflow that cannot be recorded (a late, asynchronous signal): abandon any open
    /// window and return the long period to program.
    #[inline]
    pub fn restart(&mut self, p: &Periods) -> u64 {
        self.in_window = false;
        self.next_long(p)
    }
}

/// A thread's [`Alternation`] and its window statistics, in atomics so the writer thread
/// may read the statistics while the owner runs. Only the owner (and its handler, on the
/// same thread) writes, so every access is Relaxed: the owner reads its own stores, and
/// the writer's reads are made exact by the slot's Release/Acquire of DEAD (and are
/// approximate, but whole words, for a live thread).
#[repr(C)]
#[derive(Debug)]
pub struct AltCell {
    in_window: AtomicU8,
    rng: AtomicU64,
    window_start: AtomicU64,
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
                windows: AtomicU64::new(0),
                window_sum: AtomicU64::new(0),
            }
        }
    }

    /// Starts a new owner's state (seeded jitter, long phase, no windows).
    pub fn reset(&self, seed: u64) {
        self.store(Alternation::new(seed));
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
        }
    }

    /// Saves the owner's state.
    #[inline]
    pub fn store(&self, a: Alternation) {
        self.in_window.store(u8::from(a.in_window), Ordering::Relaxed);
        self.rng.store(a.rng, Ordering::Relaxed);
        self.window_start.store(a.window_start, Ordering::Relaxed);
    }

    /// Runs one overflow through the state machine and counts a completed window.
    #[inline]
    pub fn on_overflow(&self, p: &Periods, leader: u64) -> Step {
        let mut a = self.load();
        let step = a.on_overflow(p, leader);
        self.store(a);
        if let Some(d) = step.window_delta {
            self.windows.store(self.windows.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            let sum = self.window_sum.load(Ordering::Relaxed).wrapping_add(d);
            self.window_sum.store(sum, Ordering::Relaxed);
        }
        step
    }

    /// [`Alternation::restart`] on the stored state.
    #[inline]
    pub fn restart(&self, p: &Periods) -> u64 {
        let mut a = self.load();
        let next = a.restart(p);
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

    const P: Periods = Periods { period: 1_000_000, jitter: 0, window: 20_000 };

    #[test]
    fn samples_alternate_start_and_end_and_windows_measure_the_leader() {
        let mut a = Alternation::new(1);
        let mut leader = 0;
        let mut kinds = Vec::new();
        for i in 0..6 {
            // The leader advances by the period just programmed (plus some handler noise).
            leader += if i % 2 == 0 { 1_000_000 } else { 20_000 + i };
            let s = a.on_overflow(&P, leader);
            kinds.push((s.kind, s.next_period, s.window_delta));
        }
        use Kind::*;
        assert_eq!(
            kinds,
            [
                (WindowStart, 20_000, None),
                (WindowEnd, 1_000_000, Some(20_001)),
                (WindowStart, 20_000, None),
                (WindowEnd, 1_000_000, Some(20_003)),
                (WindowStart, 20_000, None),
                (WindowEnd, 1_000_000, Some(20_005)),
            ]
        );
    }

    #[test]
    fn without_a_window_every_sample_is_plain_at_the_long_period() {
        let mut a = Alternation::new(1);
        let p = Periods { window: 0, ..P };
        for v in 0..5 {
            assert_eq!(
                a.on_overflow(&p, v),
                Step { kind: Kind::Plain, next_period: 1_000_000, window_delta: None }
            );
        }
    }

    #[test]
    fn jitter_stays_in_range_spreads_and_never_touches_the_window() {
        let p = Periods { period: 1_000, jitter: 99, window: 10 };
        let mut a = Alternation::new(0x1234_5678);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..2_000 {
            let start = a.on_overflow(&p, 0);
            assert_eq!(start.next_period, 10, "the window is never jittered");
            let end = a.on_overflow(&p, 10);
            assert!((1_000..=1_099).contains(&end.next_period), "{}", end.next_period);
            seen.insert(end.next_period);
        }
        assert!(seen.len() > 90, "jitter covers its range: {} distinct values", seen.len());
        // Edge: a jitter of u64::MAX neither divides by zero nor panics.
        let huge = Periods { period: 5, jitter: u64::MAX, window: 0 };
        a.next_long(&huge);
        // A zero seed still produces jitter (the state is forced odd).
        let mut z = Alternation::new(0);
        let j = Periods { period: 0, jitter: 1 << 20, window: 0 };
        assert!((0..8).map(|_| z.next_long(&j)).any(|v| v != 0));
    }

    #[test]
    fn a_late_signal_abandons_the_open_window() {
        let mut a = Alternation::new(3);
        assert_eq!(a.on_overflow(&P, 100).kind, Kind::WindowStart);
        assert_eq!(a.restart(&P), 1_000_000);
        // The next overflow ends a long period again: a start, not an end.
        let s = a.on_overflow(&P, 5_000);
        assert_eq!((s.kind, s.window_delta), (Kind::WindowStart, None));
    }

    #[test]
    fn the_cell_counts_windows_and_their_sum() {
        let c = AltCell::new();
        c.reset(9);
        for (i, v) in [10u64, 30, 100, 125, 200].into_iter().enumerate() {
            let s = c.on_overflow(&P, v);
            assert_eq!(s.kind, if i % 2 == 0 { Kind::WindowStart } else { Kind::WindowEnd });
        }
        assert_eq!(c.windows(), (2, 20 + 25));
        assert!(c.load().in_window, "the last window is still open");
        c.reset(9);
        assert_eq!(c.windows(), (0, 0));
        assert_eq!(c.on_overflow(&P, 1).kind, Kind::WindowStart);
        assert_eq!(Kind::from_word(Kind::WindowEnd as u64), Kind::WindowEnd);
        assert_eq!(Kind::from_word(77), Kind::Plain);
    }
}
