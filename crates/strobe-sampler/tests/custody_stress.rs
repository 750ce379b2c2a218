//! Stress test of custody on real memory and real threads: producers (each the owner of a
//! slot, some exiting and replaced by new owners of the same slots) append records of
//! varying length into a small pool while a recorder thread drains it; every record
//! arrives exactly once, whole and in its thread's order, or is counted lost, and nothing
//! else arrives. The loom models (tests/loom.rs) cover the interleavings exhaustively at a
//! small size; this covers the sizes and the timing of a real run.
#![cfg(not(loom))]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use strobe_sampler::custody::record::Rec;
use strobe_sampler::custody::{self, Append, Drain, HeapPool, SharedSlot, SlotEvent};

const SLOTS: usize = 6;
const OWNERS_PER_SLOT: u64 = 4;
/// Records each owner appends: 20,000, or `STROBE_CUSTODY_STRESS_RECORDS` (ci/san.sh runs
/// fewer under valgrind, which runs one thread at a time at a fiftieth of the speed).
fn records_per_owner() -> u64 {
    std::env::var("STROBE_CUSTODY_STRESS_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

struct World {
    pool: HeapPool,
    slots: Vec<SharedSlot>,
}

#[test]
fn every_record_arrives_once_in_order_or_is_counted_lost() {
    let records = records_per_owner();
    // 24 blocks of 64 words: small enough that the pool runs dry now and then.
    let world = Arc::new(World {
        pool: HeapPool::new(24, 64, 8),
        slots: (0..SLOTS).map(|_| SharedSlot::new()).collect(),
    });
    let done = Arc::new(AtomicBool::new(false));
    let mut producers = Vec::new();
    for s in 0..SLOTS {
        let w = world.clone();
        producers.push(std::thread::spawn(move || {
            let pool = w.pool.pool();
            let slot = &w.slots[s];
            for owner in 0..OWNERS_PER_SLOT {
                // Wait until the recorder freed the slot of the previous owner.
                let _generation = loop {
                    if let Some(g) = slot.ctl.try_claim() {
                        break g;
                    }
                    std::thread::yield_now();
                };
                let tid = (s as u32) << 8 | owner as u32;
                slot.reset_custody(1, tid, 7);
                slot.ctl.activate();
                let mut frames = [0u64; 40];
                for i in 0..records {
                    let nframes = (i % 41) as usize;
                    for (k, f) in frames.iter_mut().enumerate().take(nframes) {
                        *f = i.wrapping_mul(31).wrapping_add(k as u64);
                    }
                    let rec = Rec {
                        kind: (i % 3) as u8,
                        flags: 0,
                        time: i,
                        ip: u64::from(tid),
                        counters: &[i, !i],
                        frames: &frames[..nframes],
                    };
                    // Real handlers take a few thousand samples a second; these take them in
                    // bursts and yield now and then (always after a loss), so the pool is
                    // sometimes dry and mostly not.
                    // SAFETY: this thread is the slot's only producer.
                    let appended = unsafe { custody::append(&pool, slot, s as u32, &rec) };
                    if let Append::Lost { .. } = appended {
                        std::thread::yield_now();
                    } else if i % 16 == 0 {
                        std::thread::yield_now();
                    }
                }
                assert!(slot.ctl.begin_close());
                // SAFETY: the owner, done producing.
                unsafe { custody::close(&pool, slot) };
            }
        }));
    }
    let recorder = {
        let w = world.clone();
        let done = done.clone();
        std::thread::spawn(move || {
            let pool = w.pool.pool();
            let mut drain = Drain::new(pool.len(), SLOTS);
            // Per owner (tid): next expected record number, records seen, losses.
            let mut next: HashMap<u32, u64> = HashMap::new();
            let mut seen: HashMap<u32, u64> = HashMap::new();
            let mut lost: HashMap<u32, u64> = HashMap::new();
            let mut freed = 0u64;
            let mut check = |_slot: u32, s: &SharedSlot, ev: SlotEvent<'_>| {
                let tid = s.tid.load(Ordering::Relaxed);
                match ev {
                    SlotEvent::Record(r) => {
                        assert_eq!(r.ip, u64::from(tid), "a record under the wrong owner");
                        let i = r.time;
                        let want = next.entry(tid).or_insert(0);
                        assert!(
                            i >= *want,
                            "owner {tid:#x}: record {i} after {want}: out of order or twice"
                        );
                        *want = i + 1;
                        assert_eq!(r.counters, [i, !i], "a torn record");
                        assert_eq!(r.frames.len(), (i % 41) as usize);
                        for (k, f) in r.frames.iter().enumerate() {
                            assert_eq!(
                                *f,
                                i.wrapping_mul(31).wrapping_add(k as u64),
                                "a torn frame"
                            );
                        }
                        *seen.entry(tid).or_insert(0) += 1;
                    }
                    SlotEvent::Lost(n) => *lost.entry(tid).or_insert(0) += n,
                    SlotEvent::Freed => freed += 1,
                }
            };
            loop {
                let finished = done.load(Ordering::Acquire);
                // SAFETY: the only recorder, with its one Drain.
                unsafe { drain.pass(&pool, &w.slots, SLOTS, |_| false, &mut check) };
                if finished {
                    break;
                }
                std::thread::yield_now();
            }
            // SAFETY: as above; a last pass after every producer is done.
            unsafe { drain.pass(&pool, &w.slots, SLOTS, |_| false, &mut check) };
            (seen, lost, freed)
        })
    };
    for p in producers {
        p.join().unwrap();
    }
    done.store(true, Ordering::Release);
    let (seen, lost, freed) = recorder.join().unwrap();
    assert_eq!(freed, SLOTS as u64 * OWNERS_PER_SLOT, "every owner's slot was freed once");
    let mut total_lost = 0;
    for s in 0..SLOTS as u32 {
        for o in 0..OWNERS_PER_SLOT as u32 {
            let tid = s << 8 | o;
            let (got, l) =
                (seen.get(&tid).copied().unwrap_or(0), lost.get(&tid).copied().unwrap_or(0));
            assert_eq!(got + l, records, "owner {tid:#x}: {got} seen + {l} lost");
            total_lost += l;
        }
    }
    let total = SLOTS as u64 * OWNERS_PER_SLOT * records;
    eprintln!("{total_lost} of {total} records lost (a pool of 24 small blocks)");
    assert!(
        total_lost < total / 2,
        "{total_lost} of {total} lost: the recorder kept up with too little"
    );
    let pool = world.pool.pool();
    assert_eq!(pool.free_count() as usize, pool.len(), "every block is back on the free list");
    assert_eq!(pool.pending(), 0, "every published record was drained");
}
