//! loom models of the agent's lock-free protocols, run by `ci/loom.sh`. Each runs the
//! crate's real code (its atomics and ring cells are loom's under `cfg(loom)`), so a
//! record read while it is being written, or a missing happens-before edge, is reported
//! as a causality violation; the assertions check what a user would see:
//!
//! 1. `spsc_wraparound_and_loss`: a producer pushes through a ring of two records that a
//!    consumer drains concurrently: every record arrives once, whole and in order, or is
//!    counted lost (produced = consumed + lost).
//! 2. `wakeup_is_never_missed`: with thresholds 1 and 2, whenever the ring holds at least
//!    the threshold, a wakeup is pending for the consumer.
//! 3. `slot_reuse_by_a_new_owner`: an owner closes its slot, the writer drains and frees
//!    it, a new owner claims and fills it, and a late signal of the old owner arrives: the
//!    writer gets the old owner's records and final lost count, the late signal never reaches the new
//!    owner's ring, the new owner's ring starts empty.
//! 4. `mpsc_no_record_lost_below_capacity` and `mpsc_wraparound`: the watchpoint hit ring
//!    with two producers and a consumer.
#![cfg(loom)]

use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use strobe_sampler::slot::{ACTIVE, DEAD};
use strobe_sampler::{MpscRing, Push, SampleRing, SlotCtl, RECORD_HEAD};

const STRIDE: usize = RECORD_HEAD + 1;

/// A record whose words all derive from `i`, so a torn or stale record shows.
fn push(r: &SampleRing, i: u64) -> Push {
    // SAFETY: each model has one producer per ring (what the models check).
    unsafe { r.push(i, i * 3 + 1, 1, &[!i]) }
}

/// Drains `r`, checking each record is whole, appending its number to `out`.
fn drain(r: &SampleRing, out: &mut Vec<u64>) -> u64 {
    // SAFETY: each model has one consumer per ring at a time.
    unsafe {
        r.consume(|rec| {
            let i = rec[0];
            assert_eq!(rec, [i, i * 3 + 1, 1, !i], "a torn record");
            out.push(i);
        })
    }
}

fn ring(capacity: u64, threshold: u64) -> SampleRing {
    let r = SampleRing::new();
    // SAFETY: a fresh ring, before any thread shares it.
    unsafe { r.prepare(capacity, STRIDE, threshold) };
    r
}

#[test]
fn spsc_wraparound_and_loss() {
    loom::model(|| {
        const N: u64 = 4;
        let r = Arc::new(ring(2, 2));
        let p = r.clone();
        let producer = thread::spawn(move || {
            for i in 0..N {
                push(&p, i);
            }
        });
        let mut seen = Vec::new();
        drain(&r, &mut seen);
        drain(&r, &mut seen);
        producer.join().unwrap();
        drain(&r, &mut seen);
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "order: {seen:?}");
        assert_eq!(seen.len() as u64 + r.lost(), N, "seen {seen:?}, lost {}", r.lost());
        assert_eq!(r.occupancy(), 0);
    });
}

#[test]
fn wakeup_is_never_missed() {
    for threshold in [1, 2] {
        loom::model(move || {
            // The writer's eventfd: a counter the producer adds to and the writer takes.
            let doorbell = Arc::new(AtomicU64::new(0));
            let r = Arc::new(ring(4, threshold));
            let (p, bell) = (r.clone(), doorbell.clone());
            let producer = thread::spawn(move || {
                for i in 0..3 {
                    if let Push::Stored { wake: true, .. } = push(&p, i) {
                        // Release (eventfd write is a full barrier in the agent).
                        bell.fetch_add(1, Ordering::Release);
                    }
                }
            });
            let mut seen = Vec::new();
            for _ in 0..2 {
                // The writer thread: sleep until rung, then drain.
                if doorbell.swap(0, Ordering::Acquire) > 0 {
                    drain(&r, &mut seen);
                }
            }
            producer.join().unwrap();
            let waiting = r.occupancy();
            assert!(
                waiting < threshold || doorbell.load(Ordering::Relaxed) > 0,
                "{waiting} records wait (threshold {threshold}) and no wakeup is pending"
            );
        });
    }
}

struct Slot {
    ctl: SlotCtl,
    ring: SampleRing,
}

#[test]
fn slot_reuse_by_a_new_owner() {
    loom::model(|| {
        let slot = Arc::new(Slot { ctl: SlotCtl::new(), ring: SampleRing::new() });
        // The old owner's set-up (before the others start, as its thread was running
        // before the new owner's was created).
        let old_gen = slot.ctl.try_claim().expect("a fresh slot is free");
        // SAFETY: claimed: nobody else uses the ring.
        unsafe { slot.ring.prepare(2, STRIDE, 2) };
        slot.ctl.activate();
        // The old owner: samples, exit, then a late signal on its thread.
        let o = slot.clone();
        let old_owner = thread::spawn(move || {
            assert!(o.ctl.lookup(old_gen));
            // The ring holds two: 9 is counted lost.
            for i in [7, 8, 9] {
                push(&o.ring, i);
            }
            assert!(o.ctl.begin_close());
            o.ctl.finish_close(false);
            let late = o.ctl.lookup(old_gen);
            assert!(!late, "a late signal of the old owner found the new owner's slot");
        });
        // The writer: drain a dead slot and free it; drain a live one.
        let w = slot.clone();
        let writer = thread::spawn(move || {
            let mut seen = Vec::new();
            let mut freed = false;
            for _ in 0..2 {
                match w.ctl.state() {
                    DEAD => {
                        drain(&w.ring, &mut seen);
                        // After the drain of a DEAD slot, every sample of the old owner is
                        // either consumed or in the final lost count.
                        let lost = w.ring.take_lost();
                        assert_eq!(seen.len() as u64 + lost, 3, "{seen:?} + {lost} lost");
                        w.ctl.release();
                        freed = true;
                    }
                    ACTIVE => {
                        drain(&w.ring, &mut seen);
                    }
                    _ => {}
                }
            }
            (seen, freed)
        });
        // The new owner: claim once it is free, set up, take one sample.
        let n = slot.clone();
        let owner = thread::spawn(move || {
            let g = n.ctl.try_claim()?;
            // SAFETY: claimed: the writer released the slot and nobody else uses the ring.
            unsafe { n.ring.prepare(2, STRIDE, 2) };
            n.ctl.activate();
            assert!(n.ctl.lookup(g));
            push(&n.ring, 10);
            Some(g)
        });
        old_owner.join().unwrap();
        let (seen, freed) = writer.join().unwrap();
        let new_owner = owner.join().unwrap();
        if freed {
            assert_eq!(seen.first(), Some(&7), "the old owner's records: {seen:?}");
        } else {
            assert!(new_owner.is_none(), "claimed a slot the writer never freed");
        }
        if let Some(g) = new_owner {
            assert_ne!(g, old_gen);
            assert!(freed, "claimed only after the writer freed it");
            // What the writer did not take of the new owner's ring is still there.
            let mut rest = Vec::new();
            drain(&slot.ring, &mut rest);
            let all: Vec<u64> = seen.iter().chain(&rest).copied().collect();
            assert_eq!(all.last(), Some(&10), "{all:?}");
            assert!(all.windows(2).all(|w| w[0] < w[1]), "the new owner's ring started empty");
        }
    });
}

#[test]
fn mpsc_no_record_lost_below_capacity() {
    loom::model(|| {
        let ring = Arc::new(MpscRing::<u64>::new(2));
        let producers: Vec<_> = [1u64, 2]
            .into_iter()
            .map(|v| {
                let r = ring.clone();
                thread::spawn(move || assert!(r.push(&v), "record {v} dropped"))
            })
            .collect();
        let mut seen = Vec::new();
        for _ in 0..2 {
            // SAFETY: the only consumer.
            if let Some(v) = unsafe { ring.pop() } {
                seen.push(v);
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        // SAFETY: the only consumer.
        while let Some(v) = unsafe { ring.pop() } {
            seen.push(v);
        }
        seen.sort();
        assert_eq!(seen, [1, 2]);
        assert_eq!(ring.lost(), 0);
    });
}

#[test]
fn mpsc_wraparound() {
    loom::model(|| {
        let ring = Arc::new(MpscRing::<[u64; 2]>::new(1));
        let producers: Vec<_> = [1u64, 2]
            .into_iter()
            .map(|v| {
                let r = ring.clone();
                thread::spawn(move || r.push(&[v, !v]))
            })
            .collect();
        let mut seen = Vec::new();
        for _ in 0..2 {
            // SAFETY: the only consumer.
            if let Some(v) = unsafe { ring.pop() } {
                seen.push(v);
            }
        }
        let stored = producers.into_iter().filter(|_| true).map(|p| p.join().unwrap());
        let stored = stored.filter(|&s| s).count() as u64;
        // SAFETY: the only consumer.
        while let Some(v) = unsafe { ring.pop() } {
            seen.push(v);
        }
        assert!(seen.iter().all(|r| r[1] == !r[0]), "a torn record: {seen:?}");
        assert_eq!(seen.len() as u64, stored);
        assert_eq!(stored + ring.lost(), 2, "stored {stored}, lost {}", ring.lost());
    });
}
