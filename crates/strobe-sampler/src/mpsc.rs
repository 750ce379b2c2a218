//! A bounded multi-producer, single-consumer ring of `Copy` records, filled from signal
//! handlers on any thread and drained by one consumer thread (the agent's watchpoint
//! hits: every target thread traps into the same ring).
//!
//! Owns: the slots and the two cursors. Must never block, allocate or panic on the
//! producer side ([`MpscRing::push`] runs in a signal handler); a full ring drops the
//! record and counts it as lost instead of waiting.
//!
//! # Design
//!
//! `head` counts slots ever claimed, `tail` slots ever consumed; slot `i` lives at
//! `i % CAP` (`CAP` a power of two). A producer claims index `h` with a CAS on `head`, only
//! while `h - tail < CAP` (so it never overwrites a record the consumer has not copied),
//! writes the record, then publishes it by storing `h + 1` in the slot's `seq` with
//! Release. The consumer reads slot `tail`: when its `seq` is `tail + 1` (Acquire, pairing
//! with the publication) the record is complete; it copies it and then advances `tail`
//! with Release, which pairs with the producers' Acquire load of `tail`, so a producer
//! reusing the slot writes only after the copy. A claimed but unpublished slot (a handler
//! still running) makes the consumer stop and retry later: records leave in claim order.
//!
//! A producer reads `head` before `tail`, so between the two loads other producers may
//! claim, and the consumer consume, past its `head`: `head - tail` then wraps below zero.
//! Counting that as a full ring would drop a record with the ring nearly empty, so the
//! producer re-reads `head` and retries. Its second read is at least the `tail` it read:
//! that `tail` was stored after the consumer saw slot `tail - 1` published (Acquire), which
//! a producer did after claiming it, so the claim happens before our `tail` load, and
//! coherence gives the later `head` load that value or a newer one. `tests/loom.rs`
//! (`mpsc_no_record_lost_below_capacity`) checks that no record is dropped when the ring
//! never holds more than its capacity.

use crate::sync::{AtomicU64, Ordering, UnsafeCell};

struct Slot<T> {
    seq: AtomicU64,
    val: UnsafeCell<T>,
}

/// The ring. See the module note.
pub struct MpscRing<T: Copy> {
    slots: alloc::boxed::Box<[Slot<T>]>,
    head: AtomicU64,
    tail: AtomicU64,
    lost: AtomicU64,
}

// SAFETY: a slot's value is written only by the producer that claimed it (the CAS hands
// each index to one producer) before its Release publication, and read only by the single
// consumer after the matching Acquire; see the module note. `T: Send` because records move
// between threads by copy.
unsafe impl<T: Copy + Send> Sync for MpscRing<T> {}
// SAFETY: the ring owns its records.
unsafe impl<T: Copy + Send> Send for MpscRing<T> {}

impl<T: Copy + Default> MpscRing<T> {
    /// A ring of `cap` slots (rounded up to a power of two, at least 1). Allocates; call at
    /// start-up, never in a signal handler.
    pub fn new(cap: usize) -> MpscRing<T> {
        let cap = cap.max(1).next_power_of_two();
        let slots = (0..cap)
            .map(|_| Slot { seq: AtomicU64::new(0), val: UnsafeCell::new(T::default()) })
            .collect();
        MpscRing {
            slots,
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            lost: AtomicU64::new(0),
        }
    }
}

impl<T: Copy> MpscRing<T> {
    fn slot(&self, i: u64) -> Option<&Slot<T>> {
        self.slots.get((i as usize) & (self.slots.len().wrapping_sub(1)))
    }

    /// Appends `rec`, or counts it lost when the ring is full. Returns true if stored.
    /// Async-signal-safe: no lock, no allocation, no panic. Any number of threads may
    /// push at once.
    pub fn push(&self, rec: &T) -> bool {
        let cap = self.slots.len() as u64;
        // Relaxed: the CAS below is what claims; this is only its first guess.
        let mut h = self.head.load(Ordering::Relaxed);
        loop {
            // Acquire: pairs with the consumer's Release of `tail`, so the slot we may
            // claim has been copied out before we overwrite it.
            let t = self.tail.load(Ordering::Acquire);
            if h.wrapping_sub(t) >= cap {
                // Full, or `h` is older than `t` (module note): re-read `head`, which is
                // now at least `t`. Relaxed: as the first guess.
                let now = self.head.load(Ordering::Relaxed);
                if now != h {
                    h = now;
                    continue;
                }
                // Relaxed: a statistic, read after the run.
                self.lost.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            // Relaxed on both: the claim needs only atomicity; publication is `seq`.
            match self.head.compare_exchange_weak(
                h,
                h.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => h = now,
            }
        }
        let Some(slot) = self.slot(h) else { return false };
        // SAFETY: index `h` was handed to this producer alone by the CAS, and the consumer
        // finished with the slot's previous record (the tail check above).
        slot.val.with_mut(|p| unsafe { p.write(*rec) });
        // Release: publishes the record written above.
        slot.seq.store(h.wrapping_add(1), Ordering::Release);
        true
    }

    /// Copies out the next published record, if any.
    ///
    /// # Safety
    ///
    /// Single consumer: no two threads pop at once.
    pub unsafe fn pop(&self) -> Option<T> {
        // Relaxed: only the consumer stores `tail`.
        let t = self.tail.load(Ordering::Relaxed);
        let slot = self.slot(t)?;
        // Acquire: pairs with the producer's Release of `seq`.
        if slot.seq.load(Ordering::Acquire) != t.wrapping_add(1) {
            return None;
        }
        // SAFETY: published (seq == t + 1) and not reusable until `tail` moves past it.
        let rec = slot.val.with(|p| unsafe { p.read() });
        // Release: see the module note.
        self.tail.store(t.wrapping_add(1), Ordering::Release);
        Some(rec)
    }

    /// Records dropped because the ring was full.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// Slots in the ring.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Debug, Clone, Copy, Default)]
    struct Rec {
        producer: u32,
        n: u64,
        check: u64,
    }

    /// Four producers race one consumer: every record arrives once, whole, in each
    /// producer's order, or is counted lost.
    #[test]
    fn every_record_arrives_once_in_claim_order_or_is_counted_lost() {
        let ring = Arc::new(MpscRing::<Rec>::new(64));
        let producers: Vec<_> = (0..4)
            .map(|p| {
                let ring = ring.clone();
                std::thread::spawn(move || {
                    for n in 0..10_000u64 {
                        ring.push(&Rec { producer: p, n, check: !n });
                    }
                })
            })
            .collect();
        let mut seen = [0u64; 4];
        let mut last = [None::<u64>; 4];
        let mut take = |h: Rec| {
            let p = h.producer as usize;
            assert_eq!(h.check, !h.n, "a torn record");
            assert!(last[p].is_none_or(|l| l < h.n), "per producer order kept");
            last[p] = Some(h.n);
            seen[p] += 1;
        };
        let mut done = false;
        while !done {
            done = producers.iter().all(|p| p.is_finished());
            // SAFETY: the only consumer.
            while let Some(h) = unsafe { ring.pop() } {
                take(h);
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        // SAFETY: the only consumer.
        while let Some(h) = unsafe { ring.pop() } {
            take(h);
        }
        assert_eq!(seen.iter().sum::<u64>() + ring.lost(), 40_000);
    }

    #[test]
    fn a_full_ring_counts_and_frees_space_in_order() {
        let ring = MpscRing::<u64>::new(3);
        assert_eq!(ring.capacity(), 4);
        let stored: Vec<bool> = (0..6).map(|i| ring.push(&i)).collect();
        assert_eq!(stored, [true, true, true, true, false, false]);
        assert_eq!(ring.lost(), 2);
        // SAFETY: one thread.
        unsafe {
            assert_eq!(ring.pop(), Some(0));
            assert!(ring.push(&9));
            let rest: Vec<u64> = std::iter::from_fn(|| ring.pop()).collect();
            assert_eq!(rest, [1, 2, 3, 9]);
        }
    }
}
