//! loom models of the three concurrent protocols, run by `ci/loom.sh`:
//!
//! 1. a grace period against a reader: no reader sees a freed object;
//! 2. retire batching and hand-off: an owner retiring through its bag while a
//!    `barrier` steals from it and a reader holds a retired object: every
//!    object freed exactly once, none while read;
//! 3. the multimap's resize against a concurrent lookup: a key present
//!    throughout is always found exactly once, across two resizes (the second
//!    reuses the link slot the first one's readers followed);
//! 4. `RcuPtr` publication and replacement against a reader: the reader sees
//!    a fully initialised value, old or new, never a freed one;
//! 5. multimap insert and remove against a reader walking the same chain:
//!    the removed entry's node stays valid for the reader, the surviving
//!    entry is always found, every removed node is freed exactly once;
//! 6. two `synchronize` callers sharing grace periods against a reader.
//!
//! Freed objects are detected through loom's `UnsafeCell`: each object's
//! destructor writes a cell every reader reads, so a free not ordered after a
//! read is reported as a causality violation. Membarrier cannot be modelled;
//! domains here use the `SeqCst`-fence scheme on both sides, which is the
//! fallback the crate runs without membarrier and the model of it.
#![cfg(loom)]

use std::hash::BuildHasherDefault;

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use strobe_rcu::{Domain, HashMultiMap, RcuPtr};

// Under loom the crate shrinks its constants so that models reach block,
// batch and ceiling boundaries with a handful of operations.
const _: () = assert!(strobe_rcu::RECORDS_PER_BLOCK == 2 && strobe_rcu::BATCH_BLOCKS == 1);

const LIVE: u64 = 0x11ce;
const DEAD: u64 = 0xdead;

/// An object whose destructor writes the cell readers read. The cell lives in
/// a leaked allocation so that a premature free is reported by loom as a
/// causality violation on the cell rather than as a crash inside loom.
struct Obj {
    val: &'static UnsafeCell<u64>,
    drops: Arc<AtomicUsize>,
}

// SAFETY: the cell is written only by the destructor, which the protocol
// under test orders after every read; loom checks exactly that.
unsafe impl Sync for Obj {}
// SAFETY: as above; the cell reference is the only non-Send part.
unsafe impl Send for Obj {}

impl Obj {
    fn new(drops: &Arc<AtomicUsize>) -> Box<Obj> {
        Box::new(Obj { val: Box::leak(Box::new(UnsafeCell::new(LIVE))), drops: drops.clone() })
    }
    fn check(&self) {
        self.val.with(|v| assert_eq!(unsafe { *v }, LIVE, "reader saw a freed object"));
    }
}

impl Drop for Obj {
    fn drop(&mut self) {
        self.val.with_mut(|v| unsafe { *v = DEAD });
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn grace_period_vs_reader() {
    loom::model(|| {
        let d = Domain::new_with_fences();
        let drops = Arc::new(AtomicUsize::new(0));
        let p = Arc::new(AtomicPtr::new(Box::into_raw(Obj::new(&drops))));

        let p2 = p.clone();
        let reader = thread::spawn(move || {
            let h = d.register();
            let g = h.read_lock();
            let o = p2.load(Ordering::Acquire);
            unsafe { (*o).check() };
            drop(g);
        });

        let h = d.register();
        let old = p.swap(Box::into_raw(Obj::new(&drops)), Ordering::AcqRel);
        d.synchronize();
        drop(unsafe { Box::from_raw(old) });
        drop(h);

        reader.join().unwrap();
        drop(unsafe { Box::from_raw(p.load(Ordering::Relaxed)) });
        assert_eq!(drops.load(Ordering::SeqCst), 2);
    });
}

#[test]
fn retire_batching_and_hand_off() {
    loom::model(|| {
        let d = Domain::new_with_fences();
        let drops = Arc::new(AtomicUsize::new(0));
        let p = Arc::new(unsafe { RcuPtr::new_in(d, Some(Obj::new(&drops))) });

        let p2 = p.clone();
        let reader = thread::spawn(move || {
            let h = d.register();
            let g = h.read_lock();
            if let Some(o) = p2.load(&g) {
                o.check();
            }
        });

        // The owner fills a block (2 records under loom), seals it (1 block a
        // batch) and keeps retiring, while the stealer empties its bag.
        let (d2, drops2, p3) = (d, drops.clone(), p.clone());
        let owner = thread::spawn(move || {
            let h = d2.register();
            p3.replace_in(Some(Obj::new(&drops2)), &h);
            h.retire(Obj::new(&drops2));
            h.retire(Obj::new(&drops2));
        });

        // Let the owner run first in some schedules (a yield is not a
        // preemption, so this does not spend the preemption bound).
        thread::yield_now();
        thread::yield_now();
        d.barrier();

        reader.join().unwrap();
        owner.join().unwrap();
        d.barrier();
        // Retired: the replaced original and two plain objects.
        assert_eq!(drops.load(Ordering::SeqCst), 3);
        drop(p);
    });
}

type Map = HashMultiMap<u32, u32, BuildHasherDefault<std::collections::hash_map::DefaultHasher>>;

#[test]
fn multimap_resize_vs_lookup() {
    loom::model(|| {
        let d = Domain::new_with_fences();
        let m: Arc<Map> = Arc::new(unsafe { HashMultiMap::with_hasher_in(d, Default::default()) });
        m.insert(1, 10);
        assert_eq!(m.buckets(), 2);

        let m2 = m.clone();
        let reader = thread::spawn(move || {
            let h = d.register();
            for _ in 0..2 {
                let g = h.read_lock();
                assert_eq!(m2.count(&1, &g), 1, "a present key was missed during a resize");
                assert_eq!(m2.get(&1, &g).copied(), Some(10));
                let n = m2.count(&2, &g);
                assert!(n <= 1);
            }
        });

        // Grow 2 -> 4 -> 8 buckets: the second resize relinks through the
        // slot the first one's readers followed.
        for k in 2..=5 {
            m.insert(k, k * 10);
        }
        assert!(m.remove(&2, &20));
        reader.join().unwrap();
        assert_eq!(m.buckets(), 8);
        d.barrier();
    });
}

#[test]
fn rcuptr_publish_and_replace_vs_reader() {
    loom::model(|| {
        let d = Domain::new_with_fences();
        let drops = Arc::new(AtomicUsize::new(0));
        let p = Arc::new(unsafe { RcuPtr::new_in(d, None::<Box<Obj>>) });

        let p2 = p.clone();
        let reader = thread::spawn(move || {
            let h = d.register();
            let g = h.read_lock();
            // Whatever the reader finds (nothing, the first or the second
            // value) is initialised and alive for the whole section.
            if let Some(o) = p2.load(&g) {
                o.check();
                thread::yield_now();
                o.check();
            }
        });

        let h = d.register();
        p.replace_in(Some(Obj::new(&drops)), &h);
        p.replace_in(Some(Obj::new(&drops)), &h);
        h.flush();
        drop(h);
        // Frees the replaced value while the reader may still be in its
        // section: the barrier's grace periods must wait for it.
        d.barrier();
        reader.join().unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 1, "the replaced value is freed exactly once");
        drop(p);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
    });
}

type ObjMap = HashMultiMap<u32, Box<Obj>, BuildHasherDefault<ZeroHasher>>;

/// Puts every key in one bucket, so the reader walks through the node that
/// the writer unlinks.
#[derive(Default)]
struct ZeroHasher;

impl std::hash::Hasher for ZeroHasher {
    fn finish(&self) -> u64 {
        0
    }
    fn write(&mut self, _: &[u8]) {}
}

#[test]
fn multimap_insert_remove_vs_reader() {
    loom::model(|| {
        let d = Domain::new_with_fences();
        let drops = Arc::new(AtomicUsize::new(0));
        let m: Arc<ObjMap> =
            Arc::new(unsafe { HashMultiMap::with_hasher_in(d, Default::default()) });
        // Chain (newest first): 2 -> 1. The reader looks up key 1, so it
        // walks across node 2, which the writer removes.
        m.insert(1, Obj::new(&drops));
        m.insert(2, Obj::new(&drops));

        let m2 = m.clone();
        let reader = thread::spawn(move || {
            let h = d.register();
            let g = h.read_lock();
            let mut n = 0;
            m2.for_each(&1, &g, |o| {
                o.check();
                n += 1;
            });
            assert_eq!(n, 1, "an entry present throughout was missed");
            m2.for_each(&2, &g, |o| o.check());
            m2.for_each(&3, &g, |o| o.check());
        });

        assert!(m.remove_if(&2, |_| true));
        m.insert(3, Obj::new(&drops));
        // Frees the removed node while the reader may still stand on it.
        d.barrier();
        reader.join().unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 1, "the removed entry is freed exactly once");
        drop(m);
        assert_eq!(drops.load(Ordering::SeqCst), 3);
    });
}

#[test]
fn concurrent_synchronize_calls_share_grace_periods() {
    loom::model(|| {
        let d = Domain::new_with_fences();
        let drops = Arc::new(AtomicUsize::new(0));
        let p = Arc::new(AtomicPtr::new(Box::into_raw(Obj::new(&drops))));
        let q = Arc::new(AtomicPtr::new(Box::into_raw(Obj::new(&drops))));

        let (p2, q2) = (p.clone(), q.clone());
        let reader = thread::spawn(move || {
            let h = d.register();
            let g = h.read_lock();
            let a = p2.load(Ordering::Acquire);
            let b = q2.load(Ordering::Acquire);
            if !a.is_null() {
                unsafe { (*a).check() };
            }
            if !b.is_null() {
                unsafe { (*b).check() };
            }
            drop(g);
        });

        let q3 = q.clone();
        let writer = thread::spawn(move || {
            let old = q3.swap(std::ptr::null_mut(), Ordering::AcqRel);
            d.synchronize();
            drop(unsafe { Box::from_raw(old) });
        });

        let old = p.swap(std::ptr::null_mut(), Ordering::AcqRel);
        d.synchronize();
        drop(unsafe { Box::from_raw(old) });

        reader.join().unwrap();
        writer.join().unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 2);
        // A caller's cookie names at most the second grace period after its
        // snapshot; whoever holds the lock advances it for both, so two
        // overlapping callers never run more than two in total.
        assert!(d.grace_periods() <= 2, "{} grace periods", d.grace_periods());
    });
}

#[test]
fn barrier_steal_vs_owner_fast_path() {
    loom::model(|| {
        let d = Domain::new_with_fences();
        let drops = Arc::new(AtomicUsize::new(0));

        // The owner's first retire takes the locked path (no block yet); the
        // second appends to the block on the lock-free fast path, which must
        // not overlap a taker emptying the bag.
        let drops2 = drops.clone();
        let owner = thread::spawn(move || {
            let h = d.register();
            h.retire(Obj::new(&drops2));
            h.retire(Obj::new(&drops2));
            thread::yield_now();
            h.retire(Obj::new(&drops2));
        });

        thread::yield_now();
        d.barrier();
        owner.join().unwrap();
        d.barrier();
        assert_eq!(drops.load(Ordering::SeqCst), 3, "every retired object freed exactly once");
    });
}
