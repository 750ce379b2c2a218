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
//! 5. `born_hand_over` and `born_hand_over_with_failed_arming`: threads made by
//!    `pthread_create` arm themselves through a one-entry hand-over table while the writer
//!    lists them, reads the pending count and adopts: no thread ever gets two sets of
//!    events, a thread that armed itself is adopted in the first pass that listed it and
//!    read 0 pending, and every thread ends with exactly one set.
//! 6. `gate_closer_waits_out_every_pass`: the seccomp gate (`gate`): after the closer's
//!    wait, no code that passed is still running and none passes again.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::AtomicBool;
use loom::sync::atomic::{AtomicU64, Ordering};
use loom::sync::Arc;
use loom::thread;
use strobe_sampler::born::BornTable;
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

/// One thread of the target in the hand-over model.
struct Born {
    /// It appears in `/proc/self/task`: set by the clone, after the parent counted it.
    /// Release/Acquire stands for the kernel's task-list lock between the clone and the
    /// writer's listing.
    exists: AtomicBool,
    /// Sets of watchpoint events opened on it (a plain write: opened by the thread itself
    /// or by the writer; two unordered openings are a data race loom reports).
    sets: UnsafeCell<u32>,
}

/// What the writer did for one thread.
#[derive(Clone, Copy, Default, Debug)]
struct Seen {
    /// The pass that adopted its self-opened events.
    adopted: Option<u32>,
    /// The writer opened its events itself.
    armed: bool,
    /// The first pass that listed it and read 0 pending.
    zero_after_listing: Option<u32>,
}

/// `threads` threads made by `pthread_create` (the last `failing` of them fail to open
/// their events after claiming an entry) and the writer's polling: two passes while they
/// start, one after.
fn born_model(threads: usize, failing: usize, passes: u32) {
    loom::model(move || {
        let table = Arc::new(BornTable::<1>::new());
        let born: Arc<Vec<Born>> = Arc::new(
            (0..threads)
                .map(|_| Born { exists: AtomicBool::new(false), sets: UnsafeCell::new(0) })
                .collect(),
        );
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (table, born) = (table.clone(), born.clone());
                thread::spawn(move || {
                    let tid = i as i32 + 1;
                    // The parent: counted before the clone, which makes the thread visible.
                    table.coming();
                    born[i].exists.store(true, Ordering::Release);
                    // The new thread, before its start routine (agent: `arm_self`).
                    let mut armed_self = false;
                    if let Some(claim) = table.claim() {
                        if i < threads - failing {
                            // SAFETY: loom checks this write against the writer's.
                            born[i].sets.with_mut(|n| unsafe { *n += 1 });
                            claim.put(0, 100 + tid, 7);
                            armed_self = true;
                        }
                        claim.publish(tid);
                    }
                    table.done();
                    armed_self
                })
            })
            .collect();

        let mut seen = vec![Seen::default(); threads];
        // The writer's pass (agent: `follow_threads` and `adopt_born`).
        let pass = |n: u32, seen: &mut Vec<Seen>| {
            let listed: Vec<bool> = born.iter().map(|b| b.exists.load(Ordering::Acquire)).collect();
            let pending = table.pending();
            table.adopt(|a| {
                let i = (a.tid - 1) as usize;
                if a.opened == 0 {
                    return; // its arming failed: the writer arms it below
                }
                assert_eq!(a.opened, 1);
                assert_eq!(a.fds[0], (100 + a.tid, 7), "the entry's fd and aim");
                let s = &mut seen[i];
                assert!(s.adopted.is_none() && !s.armed, "thread {} handed over twice", a.tid);
                s.adopted = Some(n);
            });
            if pending > 0 {
                return;
            }
            for (i, s) in seen.iter_mut().enumerate() {
                if !listed[i] {
                    continue;
                }
                s.zero_after_listing.get_or_insert(n);
                if s.adopted.is_none() && !s.armed {
                    // SAFETY: loom checks this write against the thread's own.
                    born[i].sets.with_mut(|n| unsafe { *n += 1 });
                    s.armed = true;
                }
            }
        };
        for n in 0..passes {
            pass(n, &mut seen);
        }
        let armed_self: Vec<bool> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        pass(passes, &mut seen);

        for (i, s) in seen.iter().enumerate() {
            // SAFETY: every thread is joined.
            let sets = born[i].sets.with(|n| unsafe { *n });
            assert_eq!(sets, 1, "thread {}: {sets} sets of events ({s:?})", i + 1);
            if armed_self[i] {
                assert!(!s.armed, "thread {} armed itself and by the writer", i + 1);
                let (adopted, zero) = (s.adopted.unwrap(), s.zero_after_listing.unwrap());
                assert!(adopted <= zero, "thread {} missed in pass {zero} ({s:?})", i + 1);
            } else {
                assert!(s.armed && s.adopted.is_none(), "thread {}: {s:?}", i + 1);
            }
        }
        assert_eq!(table.pending(), 0);
    });
}

#[test]
fn born_hand_over() {
    born_model(2, 0, 1);
}

#[test]
fn born_hand_over_with_failed_arming() {
    born_model(2, 1, 1);
}

/// 6. `gate_closer_waits_out_every_pass`: two threads enter the seccomp gate and, with a
///    pass, write a plain cell each (a system call the filter would forbid); the closer
///    closes the gate, waits for no pass in flight, then writes both cells (the filter
///    going in). Any write with a pass not ordered before the closer's is a data race
///    loom reports; a pass taken after the close would be one.
#[test]
fn gate_closer_waits_out_every_pass() {
    use strobe_sampler::gate::Gate;
    loom::model(|| {
        let gate = Arc::new(Gate::new());
        let cells: Arc<[UnsafeCell<u64>; 2]> = Arc::new([UnsafeCell::new(0), UnsafeCell::new(0)]);
        let enterers: Vec<_> = (0..2)
            .map(|i| {
                let (gate, cells) = (gate.clone(), cells.clone());
                thread::spawn(move || {
                    if let Some(_p) = gate.enter() {
                        // SAFETY: what the model checks: no other access overlaps.
                        cells[i].with_mut(|c| unsafe { *c += 1 });
                    }
                })
            })
            .collect();
        assert!(gate.close());
        while gate.in_flight() != 0 {
            thread::yield_now();
        }
        for c in cells.iter() {
            // SAFETY: as above.
            c.with_mut(|c| unsafe { *c = 100 });
        }
        assert!(gate.enter().is_none());
        for t in enterers {
            t.join().unwrap();
        }
    });
}

// ---------------------------------------------------------------------------------
// Custody: the shared block pool (src/custody).

mod custody_models {
    use loom::sync::Arc;
    use loom::thread;
    use strobe_sampler::custody::record::Rec;
    use strobe_sampler::custody::{self, Append, Drain, HeapPool, SharedSlot, SlotEvent};

    /// A record whose words derive from `i` (two caller frames), so a torn one shows.
    fn rec_words(i: u64) -> [u64; 2] {
        [i * 3 + 1, !i]
    }

    fn append(pool: &HeapPool, slots: &[SharedSlot], s: usize, i: u64) -> Append {
        let frames = rec_words(i);
        let r = Rec { kind: 0, flags: 0, time: i, ip: s as u64, counters: &[], frames: &frames };
        // SAFETY: each model has one producer per slot.
        unsafe { custody::append(&pool.pool(), &slots[s], s as u32, &r) }
    }

    /// One recorder pass: checks every record is whole and under its slot; returns
    /// (slot, record number) in arrival order, losses, and freed slots.
    fn pass(
        d: &mut Drain,
        pool: &HeapPool,
        slots: &[SharedSlot],
        seen: &mut Vec<(u32, u64)>,
        lost: &mut u64,
        freed: &mut Vec<u32>,
    ) {
        // SAFETY: one recorder per model.
        unsafe {
            d.pass(
                &pool.pool(),
                slots,
                slots.len(),
                |_| false,
                |s, _, ev| match ev {
                    SlotEvent::Record(r) => {
                        assert_eq!(r.ip, u64::from(s), "a record under the wrong slot");
                        assert_eq!(r.frames, rec_words(r.time), "a torn record");
                        seen.push((s, r.time));
                    }
                    SlotEvent::Lost(n) => *lost += n,
                    SlotEvent::Freed => freed.push(s),
                },
            )
        };
    }

    fn activated(n: usize) -> Arc<Vec<SharedSlot>> {
        let slots: Vec<SharedSlot> = (0..n).map(|_| SharedSlot::new()).collect();
        for s in &slots {
            s.ctl.try_claim().expect("fresh");
            s.ctl.activate();
        }
        Arc::new(slots)
    }

    /// The free stack's tag: one thread pops twice while another pops two blocks and
    /// pushes the first back (changing its link). Without the tag, the first thread's
    /// exchange can succeed on the stale head and put a block the other owns back on top
    /// (ABA), and a block gets two owners.
    #[test]
    fn free_stack_aba() {
        use loom::sync::atomic::{AtomicU32, Ordering};
        loom::model(|| {
            let pool = Arc::new(HeapPool::new(3, 5, 100));
            let owned: Arc<Vec<AtomicU32>> = Arc::new((0..3).map(|_| AtomicU32::new(0)).collect());
            let take = |p: &HeapPool, o: &[AtomicU32], who: u32| -> Option<u32> {
                let b = p.pool().pop_free()?;
                let prev = o[b as usize].swap(who, Ordering::Relaxed);
                assert_eq!(prev, 0, "block {b} popped by {who} while {prev} owns it");
                Some(b)
            };
            let (p, o) = (pool.clone(), owned.clone());
            let a = thread::spawn(move || {
                let x = take(&p, &o, 1);
                let y = take(&p, &o, 1);
                (x, y)
            });
            let first = take(&pool, &owned, 2);
            let _second = take(&pool, &owned, 2);
            if let Some(b) = first {
                owned[b as usize].store(0, Ordering::Relaxed);
                pool.pool().push_free(b);
            }
            let _ = a.join().unwrap();
        });
    }

    /// Two producers take blocks from a pool of three while the recorder frees the ones
    /// they hand over: no block is ever written by two producers (loom reports the race
    /// on the block's words), every record arrives once, whole, in its producer's order,
    /// or is counted lost.
    #[test]
    fn pool_no_block_has_two_owners() {
        loom::model(|| {
            // Blocks of 5 words hold one 5-word record each.
            let pool = Arc::new(HeapPool::new(3, 5, 100));
            let slots = activated(2);
            let producers: Vec<_> = (0..2)
                .map(|s| {
                    let (p, sl) = (pool.clone(), slots.clone());
                    thread::spawn(move || {
                        for i in 0..2 {
                            append(&p, &sl, s, i);
                        }
                    })
                })
                .collect();
            let mut d = Drain::new(3, 2);
            let (mut seen, mut lost, mut freed) = (Vec::new(), 0, Vec::new());
            pass(&mut d, &pool, &slots, &mut seen, &mut lost, &mut freed);
            for p in producers {
                p.join().unwrap();
            }
            pass(&mut d, &pool, &slots, &mut seen, &mut lost, &mut freed);
            for s in 0..2u32 {
                let mine: Vec<u64> = seen.iter().filter(|x| x.0 == s).map(|x| x.1).collect();
                assert!(mine.windows(2).all(|w| w[0] < w[1]), "slot {s}: {mine:?}");
            }
            assert_eq!(seen.len() as u64 + lost, 4, "seen {seen:?}, lost {lost}");
        });
    }

    /// A producer fills a block the recorder is reading partially, hands it over and
    /// takes the block the recorder just freed: records arrive once and in order, and
    /// the partial read is continued, not repeated.
    #[test]
    fn custody_partial_drain_and_reuse() {
        loom::model(|| {
            // Blocks of 10 words: two records each.
            let pool = Arc::new(HeapPool::new(2, 10, 100));
            let slots = activated(1);
            let (p, sl) = (pool.clone(), slots.clone());
            let producer = thread::spawn(move || {
                for i in 0..5 {
                    append(&p, &sl, 0, i);
                }
            });
            let mut d = Drain::new(2, 1);
            let (mut seen, mut lost, mut freed) = (Vec::new(), 0, Vec::new());
            pass(&mut d, &pool, &slots, &mut seen, &mut lost, &mut freed);
            pass(&mut d, &pool, &slots, &mut seen, &mut lost, &mut freed);
            producer.join().unwrap();
            pass(&mut d, &pool, &slots, &mut seen, &mut lost, &mut freed);
            let times: Vec<u64> = seen.iter().map(|x| x.1).collect();
            assert!(times.windows(2).all(|w| w[0] < w[1]), "order: {times:?}");
            assert_eq!(times.len() as u64 + lost, 5, "seen {times:?}, lost {lost}");
        });
    }

    /// An owner appends and exits while the recorder passes; a new owner claims the slot
    /// once freed: the old owner's records are all read (or counted lost) before the slot
    /// is freed, and the new owner's come after.
    #[test]
    fn custody_dead_slot_is_drained_before_freed() {
        loom::model(|| {
            let pool = Arc::new(HeapPool::new(2, 10, 100));
            let slots = activated(1);
            let (p, sl) = (pool.clone(), slots.clone());
            let old_owner = thread::spawn(move || {
                append(&p, &sl, 0, 1);
                append(&p, &sl, 0, 2);
                append(&p, &sl, 0, 3);
                assert!(sl[0].ctl.begin_close());
                // SAFETY: the owner, done producing.
                unsafe { custody::close(&p.pool(), &sl[0]) };
            });
            let (p, sl) = (pool.clone(), slots.clone());
            let new_owner = thread::spawn(move || {
                sl[0].ctl.try_claim()?;
                sl[0].reset_custody(2, 2, 2);
                sl[0].ctl.activate();
                append(&p, &sl, 0, 10);
                Some(())
            });
            let mut d = Drain::new(2, 1);
            let (mut seen, mut lost, mut freed) = (Vec::new(), 0, Vec::new());
            let mut at_free = None;
            for _ in 0..2 {
                pass(&mut d, &pool, &slots, &mut seen, &mut lost, &mut freed);
                if !freed.is_empty() && at_free.is_none() {
                    at_free = Some((seen.len(), lost));
                }
            }
            old_owner.join().unwrap();
            let claimed = new_owner.join().unwrap().is_some();
            pass(&mut d, &pool, &slots, &mut seen, &mut lost, &mut freed);
            if let Some((n, l)) = at_free {
                let old: Vec<u64> = seen[..n].iter().map(|x| x.1).collect();
                assert_eq!(
                    old.len() as u64 + l,
                    3,
                    "freed before the old owner was drained: {old:?} + {l}"
                );
            }
            if claimed {
                assert!(at_free.is_some(), "a new owner claimed a slot that was never freed");
                assert_eq!(seen.last().map(|x| x.1), Some(10), "{seen:?}");
            }
        });
    }

    /// With thresholds 1 and 2, whenever the pool holds at least the threshold of
    /// undrained records, a wakeup is pending for the recorder.
    #[test]
    fn custody_wakeup_is_never_missed() {
        use loom::sync::atomic::Ordering;
        for threshold in [1, 2] {
            loom::model(move || {
                let pool = Arc::new(HeapPool::new(2, 10, threshold));
                let slots = activated(1);
                let (p, sl) = (pool.clone(), slots.clone());
                let producer = thread::spawn(move || {
                    for i in 0..3 {
                        append(&p, &sl, 0, i);
                    }
                });
                let word = pool.pool().head.wake_word();
                let mut d = Drain::new(2, 1);
                let (mut seen, mut lost, mut freed) = (Vec::new(), 0, Vec::new());
                let mut last = 0;
                for _ in 0..2 {
                    // The recorder: wake when the futex word moved, then drain.
                    let now = word.load(Ordering::Acquire);
                    if now != last {
                        last = now;
                        pass(&mut d, &pool, &slots, &mut seen, &mut lost, &mut freed);
                    }
                }
                producer.join().unwrap();
                let waiting = pool.pool().pending();
                assert!(
                    waiting < threshold || word.load(Ordering::Relaxed) != last,
                    "{waiting} records wait (threshold {threshold}) and no wakeup is pending"
                );
            });
        }
    }
}
