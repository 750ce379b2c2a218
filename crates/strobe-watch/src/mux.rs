//! Multiplexing more logical watchpoints than a thread has debug registers.
//!
//! With `N` watchpoints and `K` slots (`N > K`), the [`Multiplexer`] arms `K` of them and,
//! at each [`rotate`](Multiplexer::rotate), swaps one: the slot armed longest ago is given
//! the next watchpoint in round-robin order, like perf's event rotation moving the head of
//! the flexible list to its tail. Changing one slot per rotation keeps a rotation to a single
//! `PERF_EVENT_IOC_MODIFY_ATTRIBUTES`; over `N` rotations every watchpoint is armed for `K`
//! rotation intervals, so each is armed `K/N` of the time.
//!
//! Per watchpoint it keeps the nanoseconds armed and how often it was armed; hits are
//! counted apart, in [`HitCounters`], because they arrive in signal handlers on the
//! target's threads while rotation happens elsewhere. The report's
//! [`WatchStats::armed_fraction`] tells how much of the time each watchpoint was watched
//! and [`WatchStats::scaled_hits`] extrapolates its hits to the whole time, as perf scales
//! counts by `time_enabled / time_running`.
//!
//! The multiplexer only decides; the caller applies each [`SlotChange`] to the hardware
//! (a perf event per slot) through a callback, and reports whether it took. Time is passed
//! in, so the schedule is pure logic and testable without a clock.
//!
//! Must never allocate or lock on the hit path: [`HitCounters::record`] is one relaxed
//! atomic add on a preallocated counter. Rotation allocates nothing either.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How often to rotate by default: perf's default multiplexing interval
/// (`perf_event_mux_interval_ms`), 4 ms.
pub const DEFAULT_ROTATION: Duration = Duration::from_millis(4);

/// What to do with more watchpoints than slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Rotate them through the slots (the default).
    Multiplex,
    /// Refuse (`--no-multiplex`): every watchpoint armed all the time, or an error.
    NoMultiplex,
}

/// Why a schedule could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MuxError {
    /// Multiplexing turned off with more watchpoints than slots.
    #[error(
        "{requested} watchpoints but a thread has only {slots} hardware debug registers, and \
         multiplexing is off, which forbids rotating them; watch at most {slots} locations, or \
         let strobe multiplex them to arm them in turn (the report then gives each one's armed \
         fraction)"
    )]
    TooMany {
        /// Watchpoints asked for.
        requested: usize,
        /// Slots available.
        slots: u32,
    },
    /// No slots at all to arm anything in.
    #[error(
        "no hardware debug register is free in this thread (another debugger or watcher holds \
         them all)"
    )]
    NoSlots,
}

/// One change the caller must make to a slot's hardware event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotChange {
    /// The slot (0-based).
    pub slot: u32,
    /// The watchpoint leaving the slot, if one was armed there.
    pub disarm: Option<usize>,
    /// The watchpoint to arm in the slot, if any (`None` empties it).
    pub arm: Option<usize>,
}

/// Hit counts per watchpoint, shared with the signal handlers that record them.
#[derive(Debug)]
pub struct HitCounters {
    counts: Box<[AtomicU64]>,
}

impl HitCounters {
    /// Counters for `n` watchpoints, all zero. Allocates; do it before arming.
    pub fn new(n: usize) -> Self {
        HitCounters { counts: (0..n).map(|_| AtomicU64::new(0)).collect() }
    }

    /// Counts one hit of watchpoint `wp`; ignores an unknown index. Async-signal-safe: no
    /// allocation, no lock, no panic.
    #[inline]
    pub fn record(&self, wp: usize) {
        if let Some(c) = self.counts.get(wp) {
            // Relaxed: a count is a statistic read after the run (or as an estimate while
            // it runs); no other memory is published through it, and fetch_add never loses
            // an increment whatever the ordering.
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Hits of `wp` so far (0 for an unknown index).
    pub fn get(&self, wp: usize) -> u64 {
        // Relaxed: see `record`.
        self.counts.get(wp).map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// How many watchpoints are counted.
    pub fn len(&self) -> usize {
        self.counts.len()
    }

    /// True when there are no watchpoints.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }
}

/// One watchpoint's figures for the report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WatchStats {
    /// Hits recorded while it was armed.
    pub hits: u64,
    /// Nanoseconds it was armed.
    pub armed_ns: u64,
    /// Nanoseconds the session has run (since [`Multiplexer::start`]).
    pub enabled_ns: u64,
    /// How many times it was armed.
    pub times_armed: u64,
}

impl WatchStats {
    /// The fraction of the session it was armed, 0..=1 (1 when the session has not
    /// advanced yet and it is armed from the start).
    pub fn armed_fraction(&self) -> f64 {
        if self.enabled_ns == 0 {
            return if self.times_armed > 0 { 1.0 } else { 0.0 };
        }
        self.armed_ns as f64 / self.enabled_ns as f64
    }

    /// Hits extrapolated to the whole session (`hits * enabled / armed`); `None` if it was
    /// never armed for a measurable time.
    pub fn scaled_hits(&self) -> Option<f64> {
        if self.armed_ns == 0 {
            return (self.enabled_ns == 0 && self.times_armed > 0).then_some(self.hits as f64);
        }
        Some(self.hits as f64 * self.enabled_ns as f64 / self.armed_ns as f64)
    }
}

/// The round-robin schedule of watchpoints over slots.
#[derive(Debug)]
pub struct Multiplexer {
    /// Slot -> the watchpoint armed in it.
    slots: Box<[Option<usize>]>,
    /// Watchpoint -> when it was last armed (meaningful while it is armed).
    armed_at: Box<[u64]>,
    /// Watchpoint -> its slot while armed.
    slot_of: Box<[Option<u32>]>,
    /// Watchpoint -> nanoseconds armed, over completed arm periods.
    armed_ns: Box<[u64]>,
    /// Watchpoint -> times armed.
    times_armed: Box<[u64]>,
    /// The next watchpoint to arm (round-robin cursor).
    next_wp: usize,
    /// The next slot to re-use (the one armed longest ago).
    victim: usize,
    started_at: Option<u64>,
    stopped_at: Option<u64>,
}

impl Multiplexer {
    /// A schedule for `watchpoints` logical watchpoints over `slots` debug registers.
    pub fn new(watchpoints: usize, slots: u32, policy: Policy) -> Result<Self, MuxError> {
        if slots == 0 && watchpoints > 0 {
            return Err(MuxError::NoSlots);
        }
        if policy == Policy::NoMultiplex && watchpoints > slots as usize {
            return Err(MuxError::TooMany { requested: watchpoints, slots });
        }
        let k = (slots as usize).min(watchpoints);
        Ok(Multiplexer {
            slots: vec![None; k].into(),
            armed_at: vec![0; watchpoints].into(),
            slot_of: vec![None; watchpoints].into(),
            armed_ns: vec![0; watchpoints].into(),
            times_armed: vec![0; watchpoints].into(),
            next_wp: 0,
            victim: 0,
            started_at: None,
            stopped_at: None,
        })
    }

    /// The number of logical watchpoints.
    pub fn watchpoints(&self) -> usize {
        self.armed_ns.len()
    }

    /// The number of slots in use (at most the slots given, at most the watchpoints).
    pub fn slots(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Whether watchpoints take turns (more of them than slots).
    pub fn is_multiplexed(&self) -> bool {
        self.watchpoints() > self.slots.len()
    }

    /// The watchpoint armed in `slot` now.
    pub fn armed_in(&self, slot: u32) -> Option<usize> {
        self.slots.get(slot as usize).copied().flatten()
    }

    /// The slot `wp` is armed in now, if it is armed.
    pub fn slot_of(&self, wp: usize) -> Option<u32> {
        self.slot_of.get(wp).copied().flatten()
    }

    /// Arms the first watchpoints, one per slot, at time `now` (nanoseconds, any monotonic
    /// clock). `apply` makes each change on the hardware; a slot whose change fails stays
    /// empty and is filled at a later rotation. Returns the first error, after trying every
    /// slot.
    pub fn start<E>(
        &mut self,
        now: u64,
        mut apply: impl FnMut(SlotChange) -> Result<(), E>,
    ) -> Result<(), E> {
        self.started_at = Some(now);
        self.stopped_at = None;
        let mut first_err = None;
        for slot in 0..self.slots.len() {
            let Some(wp) = self.next_unarmed() else { break };
            let change = SlotChange { slot: slot as u32, disarm: None, arm: Some(wp) };
            match apply(change) {
                Ok(()) => self.commit(now, change),
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
            self.next_wp = (wp + 1) % self.watchpoints();
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Moves the schedule one step at time `now`: the slot armed longest ago gets the next
    /// watchpoint in round-robin order. Returns `Ok(false)` when there is nothing to rotate
    /// (no more watchpoints than slots, or not started).
    ///
    /// `apply` must make the change completely or not at all (as
    /// `PERF_EVENT_IOC_MODIFY_ATTRIBUTES` does); on an error the schedule is unchanged, the
    /// old watchpoint is taken to be still armed, and the error is returned.
    pub fn rotate<E>(
        &mut self,
        now: u64,
        mut apply: impl FnMut(SlotChange) -> Result<(), E>,
    ) -> Result<bool, E> {
        if !self.is_multiplexed() || self.started_at.is_none() || self.stopped_at.is_some() {
            return Ok(false);
        }
        let Some(wp) = self.next_unarmed() else { return Ok(false) };
        let slot = self.victim;
        let change = SlotChange { slot: slot as u32, disarm: self.slots[slot], arm: Some(wp) };
        apply(change)?;
        self.commit(now, change);
        self.next_wp = (wp + 1) % self.watchpoints();
        self.victim = (slot + 1) % self.slots.len();
        Ok(true)
    }

    /// Disarms every slot at time `now`, closing the armed-time accounting. Slots whose
    /// change fails are still taken as disarmed (the caller is tearing down); the first
    /// error is returned.
    pub fn stop<E>(
        &mut self,
        now: u64,
        mut apply: impl FnMut(SlotChange) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut first_err = None;
        for slot in 0..self.slots.len() {
            let Some(wp) = self.slots[slot] else { continue };
            let change = SlotChange { slot: slot as u32, disarm: Some(wp), arm: None };
            if let Err(e) = apply(change) {
                first_err.get_or_insert(e);
            }
            self.commit(now, change);
        }
        if self.started_at.is_some() {
            self.stopped_at = Some(now);
        }
        first_err.map_or(Ok(()), Err)
    }

    /// The figures of watchpoint `wp` as of `now` (after [`stop`](Self::stop), as of the
    /// stop), with its hits from `hits`.
    pub fn stats(&self, wp: usize, now: u64, hits: &HitCounters) -> Option<WatchStats> {
        let armed_done = *self.armed_ns.get(wp)?;
        let until = self.stopped_at.unwrap_or(now);
        let current = match self.slot_of(wp) {
            Some(_) => until.saturating_sub(self.armed_at[wp]),
            None => 0,
        };
        let enabled_ns = self.started_at.map_or(0, |s| until.saturating_sub(s));
        Some(WatchStats {
            hits: hits.get(wp),
            armed_ns: armed_done + current,
            enabled_ns,
            times_armed: self.times_armed[wp],
        })
    }

    /// The next watchpoint at or after the cursor that is not armed.
    fn next_unarmed(&self) -> Option<usize> {
        let n = self.watchpoints();
        (0..n).map(|i| (self.next_wp + i) % n).find(|&wp| self.slot_of[wp].is_none())
    }

    /// Records that `change` took effect at `now`.
    fn commit(&mut self, now: u64, change: SlotChange) {
        let slot = change.slot as usize;
        if let Some(old) = change.disarm {
            self.armed_ns[old] += now.saturating_sub(self.armed_at[old]);
            self.slot_of[old] = None;
        }
        self.slots[slot] = change.arm;
        if let Some(new) = change.arm {
            self.armed_at[new] = now;
            self.slot_of[new] = Some(change.slot);
            self.times_armed[new] += 1;
        }
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock the agent rotates by. Async-signal-safe.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through the pointer, which is valid for the
    // call; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    fn ok(_: SlotChange) -> Result<(), Infallible> {
        Ok(())
    }

    #[test]
    fn fewer_watchpoints_than_slots_are_armed_all_the_time() {
        let mut m = Multiplexer::new(3, 4, Policy::NoMultiplex).unwrap();
        assert_eq!(m.slots(), 3);
        assert!(!m.is_multiplexed());
        let mut changes = Vec::new();
        m.start(1_000, |c| {
            changes.push(c);
            Ok::<_, Infallible>(())
        })
        .unwrap();
        assert_eq!(
            changes.iter().map(|c| (c.slot, c.arm)).collect::<Vec<_>>(),
            [(0, Some(0)), (1, Some(1)), (2, Some(2))]
        );
        assert!(!m.rotate(2_000, ok).unwrap(), "nothing to rotate");
        let h = HitCounters::new(3);
        h.record(1);
        h.record(1);
        let s = m.stats(1, 11_000, &h).unwrap();
        assert_eq!((s.hits, s.armed_ns, s.enabled_ns), (2, 10_000, 10_000));
        assert_eq!(s.armed_fraction(), 1.0);
        assert_eq!(s.scaled_hits(), Some(2.0));
    }

    #[test]
    fn no_multiplex_refuses_more_than_the_slots() {
        let e = Multiplexer::new(5, 4, Policy::NoMultiplex).unwrap_err();
        assert_eq!(e, MuxError::TooMany { requested: 5, slots: 4 });
        assert!(e.to_string().contains("let strobe multiplex them"), "{e}");
        assert!(Multiplexer::new(5, 4, Policy::Multiplex).is_ok());
        assert_eq!(Multiplexer::new(1, 0, Policy::Multiplex).unwrap_err(), MuxError::NoSlots);
    }

    #[test]
    fn rotation_is_round_robin_one_slot_at_a_time() {
        let mut m = Multiplexer::new(6, 4, Policy::Multiplex).unwrap();
        m.start(0, ok).unwrap();
        let mut seen = Vec::new();
        for t in 1..=6 {
            m.rotate(t, |c| {
                seen.push((c.slot, c.disarm, c.arm));
                Ok::<_, Infallible>(())
            })
            .unwrap();
        }
        assert_eq!(
            seen,
            [
                (0, Some(0), Some(4)),
                (1, Some(1), Some(5)),
                (2, Some(2), Some(0)),
                (3, Some(3), Some(1)),
                (0, Some(4), Some(2)),
                (1, Some(5), Some(3)),
            ]
        );
        // Every watchpoint's slot is consistent with the slot table.
        for slot in 0..4 {
            let wp = m.armed_in(slot).unwrap();
            assert_eq!(m.slot_of(wp), Some(slot));
        }
    }

    #[test]
    fn eight_over_four_share_time_equally_and_fractions_sum_to_the_slots() {
        let (n, k, step) = (8usize, 4u32, 4_000_000u64);
        let mut m = Multiplexer::new(n, k, Policy::Multiplex).unwrap();
        m.start(0, ok).unwrap();
        let rounds = 10 * n as u64;
        for r in 1..=rounds {
            m.rotate(r * step, ok).unwrap();
        }
        let end = rounds * step;
        m.stop(end, ok).unwrap();
        let h = HitCounters::new(n);
        let stats: Vec<WatchStats> = (0..n).map(|wp| m.stats(wp, end + 999, &h).unwrap()).collect();
        let sum: f64 = stats.iter().map(WatchStats::armed_fraction).sum();
        assert!((sum - k as f64).abs() < 1e-9, "fractions sum to {sum}");
        for s in &stats {
            assert_eq!(s.enabled_ns, end, "stats freeze at stop");
            assert!((s.armed_fraction() - 0.5).abs() < 1e-9, "{s:?}");
            // 4 arms at start + 80 rotations = 84 arms over 8: ten or eleven each (the
            // last rotation arms one just before the stop).
            assert!((10..=11).contains(&s.times_armed), "{s:?}");
        }
    }

    #[test]
    fn scaling_extrapolates_hits_to_the_whole_session() {
        let mut m = Multiplexer::new(2, 1, Policy::Multiplex).unwrap();
        m.start(0, ok).unwrap();
        m.rotate(100, ok).unwrap(); // wp 0 armed 0..100, wp 1 from 100
        m.rotate(400, ok).unwrap(); // wp 1 armed 100..400, wp 0 from 400
        let h = HitCounters::new(2);
        for _ in 0..5 {
            h.record(0);
        }
        h.record(7); // unknown watchpoint: ignored, no panic
        let s0 = m.stats(0, 500, &h).unwrap();
        assert_eq!((s0.armed_ns, s0.enabled_ns, s0.times_armed), (200, 500, 2));
        assert_eq!(s0.scaled_hits(), Some(12.5));
        let s1 = m.stats(1, 500, &h).unwrap();
        assert_eq!((s1.armed_ns, s1.hits), (300, 0));
        assert!(m.stats(2, 500, &h).is_none());
    }

    #[test]
    fn a_failed_change_leaves_the_schedule_as_it_was() {
        let mut m = Multiplexer::new(3, 2, Policy::Multiplex).unwrap();
        // Slot 1 fails to arm at start: it stays empty, wp 1 is never counted as armed.
        let r = m.start(0, |c| if c.slot == 1 { Err("busy") } else { Ok(()) });
        assert_eq!(r, Err("busy"));
        assert_eq!((m.armed_in(0), m.armed_in(1)), (Some(0), None));
        // A failed rotation changes nothing.
        assert_eq!(m.rotate(10, |_| Err("EBUSY")), Err("EBUSY"));
        assert_eq!((m.armed_in(0), m.slot_of(2)), (Some(0), None));
        // The next one works: slot 0 gets wp 2; then the empty slot 1 gets the next
        // unarmed watchpoint after the cursor, wp 0 (wp 1 comes round next).
        assert!(m.rotate(20, ok).unwrap());
        assert_eq!(m.armed_in(0), Some(2));
        assert!(m.rotate(30, ok).unwrap());
        assert_eq!(m.armed_in(1), Some(0));
        let h = HitCounters::new(3);
        let s0 = m.stats(0, 40, &h).unwrap();
        assert_eq!(s0.armed_ns, 20 + 10, "0..20 in slot 0, then 30..40 in slot 1");
        assert_eq!(m.stats(1, 40, &h).unwrap().armed_ns, 0);
    }

    #[test]
    fn unstarted_schedules_report_zero() {
        let m = Multiplexer::new(2, 4, Policy::Multiplex).unwrap();
        let s = m.stats(0, 1_000, &HitCounters::new(2)).unwrap();
        assert_eq!(
            (s.armed_ns, s.enabled_ns, s.armed_fraction(), s.scaled_hits()),
            (0, 0, 0.0, None)
        );
    }

    #[test]
    fn monotonic_clock_advances() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0 && b >= a);
    }
}
