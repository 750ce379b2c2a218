//! Concurrent reserve/release on a shared slot table over strobe's RCU map: no thread is
//! ever given more slots than it has, and no slot is ever handed out twice. Bounded by an
//! iteration count, not by time. (strobe-bench's `tests/slotmaps.rs` runs the same on the
//! maps the benchmark compares against.)

use std::sync::atomic::{AtomicU32, AtomicU8, Ordering};
use std::sync::Arc;

use strobe_watch::slots::DEBUG_REGISTERS;
use strobe_watch::{RcuHashMap, SlotError, SlotTable, ThreadMultiMap};

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

fn stress<M: ThreadMultiMap + Default + 'static>() {
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

#[test]
fn rcu_hash_table_under_contention() {
    stress::<RcuHashMap>();
}
