//! The hit buffer: a bounded multi-producer, single-consumer ring of fixed-size records,
//! filled by the SIGTRAP handler on any target thread and drained by the agent's writer
//! thread.
//!
//! It owns the slots and the two cursors. It must never block, allocate or panic on the
//! producer side ([`Ring::push`] runs in a signal handler); a full ring drops the hit and
//! counts it as lost instead of waiting.
//!
//! # Design
//!
//! `head` counts slots ever claimed, `tail` slots ever consumed; slot `i` lives at
//! `i % CAP`. A producer claims index `h` with a CAS on `head`, only while `h - tail < CAP`
//! (so it never overwrites a record the consumer has not copied), writes the record, then
//! publishes it by storing `h + 1` in the slot's `seq` with `Release`. The consumer reads
//! slot `tail`: when its `seq` is `tail + 1` (`Acquire`, pairing with the publication) the
//! record is complete; it copies it and then advances `tail` with `Release`, which pairs
//! with the producers' `Acquire` load of `tail` so that a producer reusing the slot
//! writes only after the copy. A claimed but unpublished slot (a handler still running)
//! makes the consumer stop and retry later: records leave in claim order.
//!
//! A handler cannot be re-entered by SIGTRAP on its own thread (the signal is blocked
//! while it runs), and the CAS makes concurrent producers on other threads safe.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};

/// Return addresses kept per hit with `--stack`.
pub const MAX_FRAMES: usize = 8;

/// One watch hit, as the handler saw it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hit {
    /// The logical watchpoint.
    pub wp: u32,
    /// The accessing thread.
    pub tid: i32,
    /// `HIT_*` flags.
    pub flags: u32,
    /// Frames in `frames`.
    pub nframes: u32,
    /// The interrupted instruction pointer (just after the access).
    pub ip: u64,
    /// The value before the access (the watchpoint's shadow copy).
    pub old: u64,
    /// The value after the access.
    pub new: u64,
    /// Return addresses, innermost first.
    pub frames: [u64; MAX_FRAMES],
}

/// The hit was delivered asynchronously (SIGTRAP blocked): `ip` is not the access.
pub const HIT_IMPRECISE: u32 = 1;
/// `old` is not known (the watchpoint was just re-armed by the multiplexer).
pub const HIT_OLD_UNKNOWN: u32 = 2;

struct Slot {
    seq: AtomicU64,
    hit: UnsafeCell<Hit>,
}

/// The ring. `CAP` must be a power of two.
pub struct Ring {
    slots: Box<[Slot]>,
    head: AtomicU64,
    tail: AtomicU64,
    lost: AtomicU64,
}

// SAFETY: a slot's `hit` is written only by the producer that claimed it (the CAS hands
// each index to one producer) before its Release publication, and read only by the single
// consumer after the matching Acquire; see the module note.
unsafe impl Sync for Ring {}

impl Ring {
    /// A ring of `cap` slots (rounded up to a power of two). Allocates; call at start-up.
    pub fn new(cap: usize) -> Ring {
        let cap = cap.next_power_of_two();
        let slots = (0..cap)
            .map(|_| Slot { seq: AtomicU64::new(0), hit: UnsafeCell::new(Hit::default()) })
            .collect();
        Ring { slots, head: AtomicU64::new(0), tail: AtomicU64::new(0), lost: AtomicU64::new(0) }
    }

    fn slot(&self, i: u64) -> Option<&Slot> {
        self.slots.get((i as usize) & (self.slots.len() - 1))
    }

    /// Appends `hit`, or counts it lost when the ring is full. Async-signal-safe: no lock,
    /// no allocation, no panic.
    pub fn push(&self, hit: &Hit) {
        let cap = self.slots.len() as u64;
        // Relaxed: the CAS below is what claims; this is only its first guess.
        let mut h = self.head.load(Ordering::Relaxed);
        loop {
            // Acquire: pairs with the consumer's Release of `tail`, so the slot we may
            // claim has been copied out before we overwrite it.
            let t = self.tail.load(Ordering::Acquire);
            if h.wrapping_sub(t) >= cap {
                // Relaxed: a statistic, read after the run.
                self.lost.fetch_add(1, Ordering::Relaxed);
                return;
            }
            // Relaxed on both: the claim needs only atomicity; publication is `seq`.
            match self.head.compare_exchange_weak(h, h + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => h = now,
            }
        }
        let Some(slot) = self.slot(h) else { return };
        // SAFETY: index `h` was handed to this producer alone by the CAS, and the consumer
        // finished with the slot's previous record (the tail check above).
        unsafe { *slot.hit.get() = *hit };
        // Release: publishes the record written above.
        slot.seq.store(h + 1, Ordering::Release);
    }

    /// Copies out the next published record, if any. Single consumer only.
    pub fn pop(&self) -> Option<Hit> {
        // Relaxed: only the consumer stores `tail`.
        let t = self.tail.load(Ordering::Relaxed);
        let slot = self.slot(t)?;
        // Acquire: pairs with the producer's Release of `seq`.
        if slot.seq.load(Ordering::Acquire) != t + 1 {
            return None;
        }
        // SAFETY: published (seq == t + 1) and not reusable until `tail` moves past it.
        let hit = unsafe { *slot.hit.get() };
        // Release: see the module note.
        self.tail.store(t + 1, Ordering::Release);
        Some(hit)
    }

    /// Hits dropped because the ring was full.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn every_record_arrives_once_in_claim_order_or_is_counted_lost() {
        let ring = Arc::new(Ring::new(64));
        let producers: Vec<_> = (0..4)
            .map(|p| {
                let ring = ring.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        ring.push(&Hit { wp: p, new: i, ..Hit::default() });
                    }
                })
            })
            .collect();
        let mut seen = [0u64; 4];
        let mut last = [None::<u64>; 4];
        let mut done = false;
        while !done {
            done = producers.iter().all(|p| p.is_finished());
            while let Some(h) = ring.pop() {
                let p = h.wp as usize;
                assert!(last[p].is_none_or(|l| l < h.new), "per producer order kept");
                last[p] = Some(h.new);
                seen[p] += 1;
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        while let Some(h) = ring.pop() {
            seen[h.wp as usize] += 1;
        }
        assert_eq!(seen.iter().sum::<u64>() + ring.lost(), 40_000);
    }
}
