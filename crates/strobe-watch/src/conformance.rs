//! The slot table's contract, as checks any [`ThreadMultiMap`] must pass: one sequence of
//! reserves, releases and forgets with known answers ([`behaves`]), and workers that
//! reserve and release concurrently while independent bookkeeping checks that no slot is
//! handed out twice and no thread holds more than it may ([`stress`]). strobe-watch runs
//! them on its own map, strobe-bench on the maps its breakpoint benchmark compares, so a
//! figure there is for a map that does the same job.
//!
//! Owns those checks. Must never be built into strobe or the agent: it exists in test
//! builds and behind the `conformance` feature only, and it panics by design.

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;

use crate::slots::DEBUG_REGISTERS;
use crate::{SlotError, SlotTable, ThreadMultiMap};

/// The table's answers to one known sequence, on map `M`.
pub fn behaves<M: ThreadMultiMap + Default>() {
    let t: SlotTable<M> = SlotTable::default();
    let a = t.reserve(100, 1).unwrap();
    assert_eq!(a.slots().collect::<Vec<_>>(), [0]);
    let b = t.reserve(100, 2).unwrap();
    assert_eq!(b.slots().collect::<Vec<_>>(), [1, 2]);
    // Another thread has its own four.
    let other = t.reserve(200, 4).unwrap();
    assert_eq!(other.mask(), 0b1111);
    let e = t.reserve(100, 2).unwrap_err();
    assert_eq!(e, SlotError::Exhausted { tid: 100, requested: 2, in_use: 3, capacity: 4 });
    assert!(e.to_string().contains("3 of its 4 are in use"), "{e}");
    let c = t.reserve(100, 1).unwrap();
    assert_eq!(c.slots().collect::<Vec<_>>(), [3]);
    assert_eq!(t.used(100), 0b1111);
    // Releasing the middle reservation frees exactly its slots, which are reused.
    t.release(b);
    assert_eq!(t.used(100), 0b1001);
    let d = t.reserve(100, 2).unwrap();
    assert_eq!(d.mask(), 0b0110);
    assert!(matches!(t.reserve(100, 1), Err(SlotError::Exhausted { .. })));
    assert!(matches!(t.reserve(100, 0), Err(SlotError::BadCount { .. })));
    assert!(matches!(t.reserve(100, 5), Err(SlotError::BadCount { .. })));
    assert!(!t.forget(100), "a thread holding slots is not forgotten");
    assert_eq!(t.used(100), 0b1111);
    for r in [a, c, d, other] {
        t.release(r);
    }
    assert_eq!((t.used(100), t.used(200)), (0, 0));
    assert!(t.forget(100) && t.forget(200) && t.forget(300));
    assert!(t.map().is_empty());
    // A forgotten thread comes back as a fresh one.
    let again = t.reserve(100, 3).unwrap();
    assert_eq!(again.mask(), 0b0111);
    t.release(again);
    assert!(t.forget(100));
    assert!(t.map().is_empty());
}

const TIDS: usize = 6;
const WORKERS: usize = 4;
const ROUNDS: usize = 20_000;

/// A small deterministic generator, one per worker.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Concurrent reserve/release on a shared table over map `M`, bounded by an iteration
/// count, not by time.
pub fn stress<M: ThreadMultiMap + Default + 'static>() {
    let table: Arc<SlotTable<M>> = Arc::new(SlotTable::default());
    // Independent bookkeeping of what the table handed out, per thread id.
    let held: Arc<Vec<AtomicU8>> = Arc::new((0..TIDS).map(|_| AtomicU8::new(0)).collect());
    let refusals = Arc::new(AtomicU32::new(0));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (table, held, refusals) = (table.clone(), held.clone(), refusals.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (w as u64 + 1));
                let mut mine = Vec::new();
                for _ in 0..ROUNDS {
                    let r = rng.next();
                    if mine.len() < 3 && r % 3 != 0 {
                        let tid = (r >> 8) as usize % TIDS;
                        let n = 1 + (r >> 16) as u32 % 2;
                        match table.reserve(tid as i32, n) {
                            Ok(res) => {
                                assert_eq!(res.mask().count_ones(), n);
                                // AcqRel: pairs with the release below so a slot given back
                                // by one worker is seen free before the table re-issues it.
                                let before = held[tid].fetch_or(res.mask(), Ordering::AcqRel);
                                assert_eq!(before & res.mask(), 0, "slot handed out twice");
                                assert!(
                                    (before | res.mask()).count_ones() <= DEBUG_REGISTERS,
                                    "more than 4 slots"
                                );
                                mine.push((tid, res));
                            }
                            Err(SlotError::Exhausted { .. }) => {
                                refusals.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("{e}"),
                        }
                    } else if mine.is_empty() {
                        // An idle moment: try to forget a thread id, as the agent does when
                        // a thread exits; it must fail while the id holds slots.
                        let tid = (r >> 8) as usize % TIDS;
                        table.forget(tid as i32);
                    } else {
                        let (tid, res) = mine.swap_remove(r as usize % mine.len());
                        // Clear our bookkeeping before the table can re-issue the slots.
                        held[tid].fetch_and(!res.mask(), Ordering::AcqRel);
                        table.release(res);
                    }
                }
                for (tid, res) in mine {
                    held[tid].fetch_and(!res.mask(), Ordering::AcqRel);
                    table.release(res);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a worker found a violation");
    }
    for tid in 0..TIDS {
        assert_eq!(table.used(tid as i32), 0, "every reservation was released");
        assert!(table.forget(tid as i32));
    }
    assert!(table.map().is_empty(), "every thread was forgotten");
    assert!(refusals.load(Ordering::Relaxed) > 0, "the test must reach the 4-slot limit");
}
