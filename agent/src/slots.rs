//! The fixed-size table of per-thread sampling state, and each thread's single-producer
//! single-consumer sample ring.
//!
//! Owns: the slots a thread claims at setup (before its event is armed) and the ring its
//! signal handler appends to. Must never allocate or lock on the producer side (the signal
//! handler), and never let a slot be reused while its old owner may still touch it.
//!
//! # Design
//!
//! The handler finds its slot without thread-local storage: the leader's `sig_data`
//! (delivered in `si_perf_data`) carries `generation << 16 | index`. A slot is
//! `FREE -> CLAIMED` (CAS by the thread setting itself up, which then allocates its ring and
//! opens its events) `-> ACTIVE` (store Release: the writer thread sees the ring and tid
//! once it sees ACTIVE) `-> DEAD` (the owning thread at exit, store Release after its
//! events are closed: the writer then sees the final head and lost count) `-> FREE` (the
//! writer, after draining the ring and freeing it). The generation is bumped at every
//! claim, so a late signal of an old owner (delivered after the slot was reused) fails
//! the generation check and touches nothing.
//!
//! The ring: the producer (the owning thread's handler) writes a record's words, then
//! publishes it with `head.store(Release)`; the consumer (the writer thread, under the
//! drain lock) reads `head` with Acquire, copies the records, and hands the space back
//! with `tail.store(Release)`; the producer reads `tail` with Acquire before reusing space,
//! so the consumer's reads of a record happen before the producer overwrites it. A full
//! ring counts the sample in `lost` (a counter only the producer increments) and drops it:
//! never silently.

use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Slots in the table: threads beyond this many alive at once are not profiled (a note
/// says so).
pub const MAX_SLOTS: usize = 1024;

/// Slot states.
pub const FREE: u32 = 0;
/// Being set up by its thread.
pub const CLAIMED: u32 = 1;
/// Sampling.
pub const ACTIVE: u32 = 2;
/// Its thread is closing its events; the handler must ignore it.
pub const CLOSING: u32 = 3;
/// Its thread exited; the writer drains and frees it.
pub const DEAD: u32 = 4;

/// Words of a record before the counters: time, ip, kind.
pub const RECORD_HEAD: usize = 3;

/// The handler's phase: the current period is the long one (its overflow starts a window).
pub const PHASE_LONG: u8 = 0;
/// The current period is the window (its overflow ends it).
pub const PHASE_WINDOW: u8 = 1;

/// One thread's sampling state. Every field is an atomic so the writer thread may read it
/// while the owner runs; fields only the owner (and its handler, on the same thread) write
/// use Relaxed.
pub struct Slot {
    /// FREE, CLAIMED, ACTIVE, CLOSING or DEAD.
    pub state: AtomicU32,
    /// Bumped at each claim; checked against the signal's `si_perf_data`.
    pub generation: AtomicU32,
    /// The owning thread.
    pub tid: AtomicU32,
    /// The group leader's fd (-1 when none).
    pub leader_fd: AtomicI32,
    /// The ring storage: `capacity * stride` words, owned by the slot while not FREE.
    pub buf: AtomicPtr<u64>,
    /// Records published by the producer.
    pub head: AtomicU64,
    /// Records consumed by the writer.
    pub tail: AtomicU64,
    /// Samples dropped because the ring was full (producer only).
    pub lost: AtomicU64,
    /// Lost samples already written to the file (writer only).
    pub lost_reported: AtomicU64,
    /// PHASE_LONG or PHASE_WINDOW (owner only).
    pub phase: AtomicU8,
    /// xorshift state for the jitter (owner only).
    pub rng: AtomicU64,
    /// The leader's value at the last window start (owner only).
    pub window_start: AtomicU64,
    /// Completed windows (owner only).
    pub windows: AtomicU64,
    /// Sum of the leader's deltas over completed windows (owner only).
    pub window_sum: AtomicU64,
    /// The thread's name was written to the file (writer only).
    pub named: AtomicU8,
    /// The `Box<EventGroup>` of the owner, as a raw pointer (owner only).
    pub group: AtomicPtr<strobe_perf::EventGroup>,
}

impl Slot {
    #[allow(clippy::declare_interior_mutable_const)]
    const EMPTY: Slot = Slot {
        state: AtomicU32::new(FREE),
        generation: AtomicU32::new(0),
        tid: AtomicU32::new(0),
        leader_fd: AtomicI32::new(-1),
        buf: AtomicPtr::new(std::ptr::null_mut()),
        head: AtomicU64::new(0),
        tail: AtomicU64::new(0),
        lost: AtomicU64::new(0),
        lost_reported: AtomicU64::new(0),
        phase: AtomicU8::new(PHASE_LONG),
        rng: AtomicU64::new(0),
        window_start: AtomicU64::new(0),
        windows: AtomicU64::new(0),
        window_sum: AtomicU64::new(0),
        named: AtomicU8::new(0),
        group: AtomicPtr::new(std::ptr::null_mut()),
    };

    /// Appends one record (producer side, async-signal-safe). Returns the ring's occupancy
    /// after the push, or `None` when it was full and the sample was counted as lost.
    #[inline]
    pub fn push(
        &self,
        capacity: u64,
        stride: usize,
        time: u64,
        ip: u64,
        kind: u64,
        counters: &[u64],
    ) -> Option<u64> {
        let buf = self.buf.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Relaxed);
        // Acquire: the writer's reads of the records it consumed happen before we reuse them.
        let tail = self.tail.load(Ordering::Acquire);
        if buf.is_null() || head.wrapping_sub(tail) >= capacity {
            self.lost.store(self.lost.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            return None;
        }
        let at = (head % capacity) as usize * stride;
        // SAFETY: `buf` holds `capacity * stride` words (allocated at setup, freed only after
        // the slot is DEAD, which the owner sets after its last handler ran); `at + stride`
        // is within it because `head % capacity < capacity`. Record `head` is not visible to
        // the consumer until the Release store below, and the consumer is done with it (the
        // ring is not full), so nothing else accesses these words.
        unsafe {
            let rec = buf.add(at);
            rec.write(time);
            rec.add(1).write(ip);
            rec.add(2).write(kind);
            for i in 0..stride - RECORD_HEAD {
                rec.add(RECORD_HEAD + i).write(counters.get(i).copied().unwrap_or(0));
            }
        }
        // Release: the record's words are visible to a consumer that sees the new head.
        self.head.store(head + 1, Ordering::Release);
        Some(head + 1 - tail)
    }
}

impl Slot {
    /// Hands every published record to `f`, oldest first, then gives their space back
    /// (consumer side: one consumer at a time, the drain lock's holder). Returns the
    /// number of records consumed.
    pub fn consume(&self, capacity: u64, stride: usize, mut f: impl FnMut(&[u64])) -> u64 {
        let buf = self.buf.load(Ordering::Relaxed);
        // Acquire: pairs with the producer's Release store of `head`: the records up to
        // it are fully written.
        let head = self.head.load(Ordering::Acquire);
        let tail = self.tail.load(Ordering::Relaxed);
        if buf.is_null() || head == tail {
            return 0;
        }
        for r in tail..head {
            let at = (r % capacity) as usize * stride;
            // SAFETY: records tail..head were published (Acquire above) and are not
            // overwritten until we store `tail` below; `at + stride` is within the ring
            // of `capacity * stride` words.
            let rec = unsafe { std::slice::from_raw_parts(buf.add(at), stride) };
            f(rec);
        }
        // Release: our reads of the records happen before the producer reuses them.
        self.tail.store(head, Ordering::Release);
        head - tail
    }
}

/// The table. A plain static: zero-initialised, no allocation, reachable from the handler.
pub static SLOTS: [Slot; MAX_SLOTS] = [Slot::EMPTY; MAX_SLOTS];

/// One past the highest slot index ever claimed, so scans stop early.
pub static HIGH_WATER: AtomicU32 = AtomicU32::new(0);

/// Claims a free slot, returning its index and new generation.
pub fn claim() -> Option<(usize, u32)> {
    for (i, s) in SLOTS.iter().enumerate() {
        // Acquire on success: the writer's release of the slot (freeing its ring) happens
        // before we reuse it.
        if s.state.compare_exchange(FREE, CLAIMED, Ordering::Acquire, Ordering::Relaxed).is_ok() {
            let generation = s.generation.load(Ordering::Relaxed).wrapping_add(1);
            s.generation.store(generation, Ordering::Relaxed);
            HIGH_WATER.fetch_max(i as u32 + 1, Ordering::Relaxed);
            return Some((i, generation));
        }
    }
    None
}

/// The `sig_data` naming slot `index` at `generation`.
pub fn sig_data(index: usize, generation: u32) -> u64 {
    (u64::from(generation) << 16) | index as u64
}

/// The slot a `sig_data` names, if it is still that generation and active.
#[inline]
pub fn lookup(sig_data: u64) -> Option<&'static Slot> {
    let slot = SLOTS.get((sig_data & 0xffff) as usize)?;
    if slot.state.load(Ordering::Relaxed) != ACTIVE
        || u64::from(slot.generation.load(Ordering::Relaxed)) != sig_data >> 16
    {
        return None;
    }
    Some(slot)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A producer thread pushes records as fast as it can while a consumer drains: every
    /// record arrives once, in order, intact, or is counted as lost; none vanishes.
    #[test]
    fn ring_stress_delivers_or_counts_every_record() {
        const CAP: u64 = 64;
        const STRIDE: usize = RECORD_HEAD + 2;
        const N: u64 = 200_000;
        let slot: &'static Slot = Box::leak(Box::new(Slot::EMPTY));
        let ring: Box<[u64]> = vec![0u64; CAP as usize * STRIDE].into_boxed_slice();
        slot.buf.store(Box::into_raw(ring).cast::<u64>(), Ordering::Relaxed);
        let producer = std::thread::spawn(move || {
            for i in 0..N {
                slot.push(CAP, STRIDE, i, i * 3, 1, &[i ^ 0x55, !i]);
            }
        });
        let mut seen = 0u64;
        let mut last: Option<u64> = None;
        let mut check = |rec: &[u64]| {
            let t = rec[0];
            assert_eq!(rec[1..], [t * 3, 1, t ^ 0x55, !t], "a torn record");
            assert!(last.is_none_or(|l| t > l), "out of order: {t} after {last:?}");
            last = Some(t);
            seen += 1;
        };
        while !producer.is_finished() {
            slot.consume(CAP, STRIDE, &mut check);
        }
        producer.join().unwrap();
        slot.consume(CAP, STRIDE, &mut check);
        let lost = slot.lost.load(Ordering::Relaxed);
        assert_eq!(seen + lost, N, "seen {seen}, lost {lost}");
        assert!(seen > 0);
    }

    #[test]
    fn a_full_ring_counts_losses_and_push_reports_the_occupancy() {
        let slot = Slot::EMPTY;
        let ring: Box<[u64]> = vec![0u64; 4 * (RECORD_HEAD + 1)].into_boxed_slice();
        slot.buf.store(Box::into_raw(ring).cast::<u64>(), Ordering::Relaxed);
        let occ: Vec<_> = (0..6).map(|i| slot.push(4, RECORD_HEAD + 1, i, 0, 0, &[i])).collect();
        assert_eq!(occ, [Some(1), Some(2), Some(3), Some(4), None, None]);
        assert_eq!(slot.lost.load(Ordering::Relaxed), 2);
        let mut times = Vec::new();
        assert_eq!(slot.consume(4, RECORD_HEAD + 1, |r| times.push(r[0])), 4);
        assert_eq!(times, [0, 1, 2, 3]);
        assert_eq!(slot.push(4, RECORD_HEAD + 1, 9, 0, 0, &[]), Some(1));
    }

    #[test]
    fn sig_data_names_slot_and_generation() {
        let (i, g) = claim().expect("a free slot");
        let data = sig_data(i, g);
        assert!(lookup(data).is_none(), "a claimed slot is not active yet");
        SLOTS[i].state.store(ACTIVE, Ordering::Relaxed);
        assert!(std::ptr::eq(lookup(data).unwrap(), &SLOTS[i]));
        assert!(lookup(sig_data(i, g.wrapping_add(1))).is_none(), "stale generation");
        SLOTS[i].state.store(FREE, Ordering::Relaxed);
    }
}
