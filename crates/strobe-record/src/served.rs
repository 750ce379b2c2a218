//! Which thread the agent served when: the stretches of CLOCK_MONOTONIC time during which
//! an agent's sampler was armed on a thread (from the arming of its slot to the slot's
//! close, an exec, or the thread blocking the sampler's signal), as the slots in the
//! arena say.
//!
//! The kernel floor samples every task of the launched tree; where the agent served a
//! thread at a sample's time, the agent's own sample stands for that stretch and the
//! floor's is dropped, so no CPU time is sampled twice. A floor sample is kept for every
//! moment no agent served: threads the agent never saw (raw clone, static or Go images,
//! signal-blocking threads, threads beyond its descriptor budget), a thread's start-up
//! before its sampling was armed, and everything after the agent left.
//!
//! The recorder updates this table from the slots on every pass *before* it releases the
//! pass's floor records: every floor record released has a time before the scan, and a
//! thread served at that time had its slot's start stamped before it (the agent stamps
//! the start just before it arms the events), so the scan saw it, whether the slot was
//! still active or already dead (only the recorder frees a slot, after reading it).
//!
//! Owns: that table. Must never decide anything about a sample but whether its moment
//! was served.

use rustc_hash::FxHashMap;

/// One served stretch of one thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stretch {
    /// CLOCK_MONOTONIC ns when the agent armed the thread's sampling.
    pub from: u64,
    /// When it stopped (`u64::MAX`: still serving).
    pub to: u64,
}

/// The served stretches of every thread seen.
#[derive(Debug, Default)]
pub(crate) struct Served {
    /// Per slot index: its owner's tid and the stretch it serves now.
    slots: FxHashMap<usize, (u32, Stretch)>,
    /// Per tid: its stretches, current and ended (a thread has one slot at a time, so
    /// this is short: one per arming).
    by_tid: FxHashMap<u32, Vec<Stretch>>,
}

impl Served {
    /// Slot `index` (owned by `tid`) serves from `from` until `to` (0: still serving).
    /// A slot whose owner or start changed began a new stretch: the old one ended at the
    /// new start at the latest.
    pub(crate) fn slot(&mut self, index: usize, tid: u32, from: u64, to: u64) {
        if from == 0 {
            return; // claimed, not armed yet
        }
        let to = if to == 0 || to < from { u64::MAX } else { to };
        let now = Stretch { from, to };
        match self.slots.insert(index, (tid, now)) {
            Some((old_tid, old)) if (old_tid, old.from) == (tid, from) => {
                self.set(tid, now);
            }
            Some((old_tid, old)) => {
                if old.to == u64::MAX {
                    self.set(old_tid, Stretch { from: old.from, to: from.max(old.from) });
                }
                self.set(tid, now);
            }
            None => self.set(tid, now),
        }
    }

    /// Records `s` as `tid`'s stretch starting at `s.from` (replacing its end).
    fn set(&mut self, tid: u32, s: Stretch) {
        let v = self.by_tid.entry(tid).or_default();
        match v.iter_mut().find(|x| x.from == s.from) {
            Some(x) => x.to = s.to,
            None => v.push(s),
        }
    }

    /// Slot `index` was freed: its last stretch ended (at `to`, or, when the agent could
    /// not say, at `end`: its process died or replaced its image by then).
    pub(crate) fn freed(&mut self, index: usize, tid: u32, from: u64, to: u64, end: u64) {
        self.slot(index, tid, from, to);
        if let Some((tid, s)) = self.slots.remove(&index) {
            if s.to == u64::MAX {
                self.set(tid, Stretch { from: s.from, to: end.max(s.from) });
            }
        }
    }

    /// Forgets `tid`'s stretches that ended before `before` (no record of a time in them
    /// is still to come); a stretch still open, or of a thread that took the tid later,
    /// stays.
    pub(crate) fn forget_ended(&mut self, tid: u32, before: u64) {
        if let Some(v) = self.by_tid.get_mut(&tid) {
            v.retain(|s| s.to == u64::MAX || s.to >= before);
            if v.is_empty() {
                self.by_tid.remove(&tid);
            }
        }
    }

    /// Threads with stretches held.
    #[cfg(test)]
    pub(crate) fn threads_held(&self) -> usize {
        self.by_tid.len()
    }

    /// Whether the agent served `tid` at `time`.
    pub(crate) fn covers(&self, tid: u32, time: u64) -> bool {
        self.by_tid.get(&tid).is_some_and(|v| v.iter().any(|s| s.from <= time && time < s.to))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stretch_covers_its_thread_from_its_start_to_its_end() {
        let mut s = Served::default();
        assert!(!s.covers(7, 100));
        s.slot(3, 7, 0, 0); // claimed, not armed
        assert!(!s.covers(7, 100));
        s.slot(3, 7, 100, 0);
        assert!(!s.covers(7, 99) && s.covers(7, 100) && s.covers(7, 1 << 40));
        assert!(!s.covers(8, 150), "another thread");
        s.slot(3, 7, 100, 200);
        assert!(s.covers(7, 199) && !s.covers(7, 200));
        // A new stretch of the same slot (a failed exec re-armed it): the old one stays.
        s.slot(3, 7, 300, 0);
        assert!(s.covers(7, 150) && !s.covers(7, 250) && s.covers(7, 400));
        // Freed without an end stamp (the process was killed): it ends where the
        // recorder saw the process gone.
        s.freed(3, 7, 300, 0, 500);
        assert!(s.covers(7, 499) && !s.covers(7, 500));
        // The slot's next owner is another thread.
        s.slot(3, 9, 600, 0);
        assert!(s.covers(9, 600) && !s.covers(7, 600));
    }

    #[test]
    fn ended_stretches_are_forgotten_and_open_ones_stay() {
        let mut s = Served::default();
        s.slot(1, 7, 100, 200);
        s.freed(1, 7, 100, 200, 250);
        s.slot(2, 7, 300, 400); // the tid's next thread, ended later
        s.freed(2, 7, 300, 400, 450);
        s.forget_ended(7, 250);
        assert!(!s.covers(7, 150), "ended before 250: forgotten");
        assert!(s.covers(7, 350), "ends after 250: kept");
        s.slot(3, 7, 500, 0); // open
        s.forget_ended(7, 1_000);
        assert!(!s.covers(7, 350) && s.covers(7, 600));
        s.freed(3, 7, 500, 700, 800);
        s.forget_ended(7, 1_000);
        assert_eq!(s.threads_held(), 0);
    }

    #[test]
    fn a_reused_slot_ends_its_previous_owners_stretch() {
        let mut s = Served::default();
        s.slot(1, 7, 100, 0);
        // Seen next with a new owner (freed and claimed between two scans): the old
        // stretch ends no later than the new one began.
        s.slot(1, 8, 300, 0);
        assert!(s.covers(7, 299) && !s.covers(7, 300) && s.covers(8, 300));
    }
}
