//! loom models of the three concurrent protocols, run by `ci/loom.sh`:
//!
//! 1. a grace period against a reader: no reader sees a freed object;
//! 2. retire batching and hand-off: an owner retiring through its bag while a
//!    `barrier` steals from it and a reader holds a retired object: every
//!    object freed exactly once, none while read;
//! 3. the multimap's resize against a concurrent lookup: a key present
//!    throughout is always found exactly once, across two resizes (the second
//!    reuses the link slot the first one's readers followed).
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
