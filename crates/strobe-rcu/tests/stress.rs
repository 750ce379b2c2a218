//! Multi-thread stress of the real code on real threads: readers (also inside
//! signal handlers) walk RCU-protected objects while writers replace, remove
//! and retire them as fast as they can. Every object carries a canary that its
//! destructor poisons before the memory goes back to the allocator, so a reader
//! that touches an object after it was freed sees a dead canary (or the
//! allocator's reuse of the bytes) and counts a violation. At the end every
//! retired object must have been dropped exactly once.
//!
//! Each test runs for a bounded time ([`run_for`], 2 s by default; set
//! `STROBE_RCU_STRESS_MS` to change it). The duration only bounds the work;
//! no assertion depends on timing.

use std::hash::{BuildHasherDefault, Hasher};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use strobe_rcu::{
    barrier, read_lock, register_current_thread, retire, stats, Domain, HashMultiMap, RcuPtr,
};

const LIVE: u64 = 0x5afe_c0de_5afe_c0de;
const POISON: u64 = 0xdead_dead_dead_dead;

/// Freed-object detector: a canary at both ends and a checksum of the payload.
#[repr(C)]
struct Canary {
    head: AtomicU64,
    gen: u64,
    payload: [u64; 6],
    tail: AtomicU64,
    drops: Arc<AtomicUsize>,
}

impl Canary {
    fn new(gen: u64, drops: &Arc<AtomicUsize>) -> Box<Self> {
        Box::new(Self {
            head: AtomicU64::new(LIVE),
            gen,
            payload: [gen.wrapping_mul(0x9e37_79b9_7f4a_7c15); 6],
            tail: AtomicU64::new(LIVE),
            drops: drops.clone(),
        })
    }

    /// True when the object is intact. Async-signal-safe (loads only).
    fn ok(&self) -> bool {
        let want = self.gen.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // Relaxed: the canaries change only in the destructor; any value but
        // LIVE, or a payload that no longer matches, means the memory is gone.
        self.head.load(Ordering::Relaxed) == LIVE
            && self.payload.iter().all(|&p| p == want)
            && self.tail.load(Ordering::Relaxed) == LIVE
    }
}

impl Drop for Canary {
    fn drop(&mut self) {
        self.head.store(POISON, Ordering::Relaxed);
        self.tail.store(POISON, Ordering::Relaxed);
        self.payload = [POISON; 6];
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

fn run_for() -> Duration {
    let ms = std::env::var("STROBE_RCU_STRESS_MS").ok().and_then(|s| s.parse().ok());
    Duration::from_millis(ms.unwrap_or(2_000))
}

/// Keys spread over few buckets with long chains (readers walk across nodes
/// being removed) while the table still grows and shrinks.
#[derive(Default)]
struct FewBuckets(u64);

impl Hasher for FewBuckets {
    fn finish(&self) -> u64 {
        self.0 % 61
    }
    fn write(&mut self, b: &[u8]) {
        for &x in b {
            self.0 = self.0.wrapping_mul(31).wrapping_add(u64::from(x));
        }
    }
}

type Map = HashMultiMap<u64, Box<Canary>, BuildHasherDefault<FewBuckets>>;

#[test]
fn readers_never_see_freed_objects_and_every_retire_is_dropped_once() {
    let drops = Arc::new(AtomicUsize::new(0));
    let made = Arc::new(AtomicUsize::new(0));
    let bad = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let ptr = Arc::new(RcuPtr::new(Some(Canary::new(0, &drops))));
    made.fetch_add(1, Ordering::SeqCst);
    let map: Arc<Map> = Arc::new(HashMultiMap::with_hasher(Default::default()));
    let stats_before = stats();

    let mut threads = Vec::new();
    for _ in 0..2 {
        let (ptr, map, bad, reads, stop) =
            (ptr.clone(), map.clone(), bad.clone(), reads.clone(), stop.clone());
        threads.push(thread::spawn(move || {
            let mut key = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let g = read_lock();
                if let Some(c) = ptr.load(&g) {
                    if !c.ok() {
                        bad.fetch_add(1, Ordering::SeqCst);
                    }
                    // Stay in the section a little, then look again: the
                    // object must still be intact.
                    std::hint::spin_loop();
                    if !c.ok() {
                        bad.fetch_add(1, Ordering::SeqCst);
                    }
                }
                key = (key + 1) % 512;
                map.for_each(&key, &g, |c| {
                    if !c.ok() {
                        bad.fetch_add(1, Ordering::SeqCst);
                    }
                });
                drop(g);
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }

    // Writer 1: replaces the pointer and churns the multimap (inserts and
    // removes, which grows and shrinks the table under the readers).
    {
        let (ptr, map, drops, made, stop) =
            (ptr.clone(), map.clone(), drops.clone(), made.clone(), stop.clone());
        threads.push(thread::spawn(move || {
            let mut gen = 1u64;
            while !stop.load(Ordering::Relaxed) {
                ptr.replace(Some(Canary::new(gen, &drops)));
                let key = gen % 512;
                map.insert(key, Canary::new(gen, &drops));
                made.fetch_add(2, Ordering::SeqCst);
                if gen % 3 != 0 {
                    map.remove_if(&key, |_| true);
                }
                if gen % 4096 == 0 {
                    // Empty the map now and then so it shrinks too.
                    for k in 0..512 {
                        while map.remove_if(&k, |_| true) {}
                    }
                }
                gen += 1;
            }
        }));
    }
    // Writer 2: plain retires of objects of varied sizes, as fast as possible
    // (fills blocks, seals batches, hits the ceiling).
    {
        let (drops, made, stop) = (drops.clone(), made.clone(), stop.clone());
        threads.push(thread::spawn(move || {
            let mut gen = 1u64 << 40;
            while !stop.load(Ordering::Relaxed) {
                for _ in 0..256 {
                    retire(Canary::new(gen, &drops));
                    retire(Box::new(vec![0u8; (gen % 500) as usize + 8]));
                    gen += 1;
                }
                made.fetch_add(256, Ordering::SeqCst);
            }
        }));
    }

    thread::sleep(run_for());
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    // Everything left: the pointer's value and the map's entries are dropped
    // with their owners, the rest by the barrier.
    assert_eq!((Arc::strong_count(&ptr), Arc::strong_count(&map)), (1, 1));
    drop(ptr);
    drop(map);
    barrier();

    assert_eq!(bad.load(Ordering::SeqCst), 0, "a reader saw a freed or poisoned object");
    assert!(reads.load(Ordering::Relaxed) > 0, "the readers never ran");
    assert_eq!(drops.load(Ordering::SeqCst), made.load(Ordering::SeqCst), "drops != objects made");
    let s = stats();
    assert!(s.grace_periods > stats_before.grace_periods, "{s:?}");
    assert!(s.freed > stats_before.freed, "{s:?}");
}

// --- readers in signal handlers ------------------------------------------------

static SIG_PTR: AtomicUsize = AtomicUsize::new(0);
static SIG_BAD: AtomicUsize = AtomicUsize::new(0);
static SIG_SEEN: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_sigusr1(_: libc::c_int) {
    // Async-signal-safe: read_lock on a registered thread, loads, atomics.
    let g = read_lock();
    let p = SIG_PTR.load(Ordering::Acquire) as *const RcuPtr<Canary>;
    // SAFETY: the test keeps the RcuPtr alive until every signal was handled
    // and the target threads joined.
    if let Some(ptr) = unsafe { p.as_ref() } {
        if let Some(c) = ptr.load(&g) {
            if !c.ok() {
                SIG_BAD.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
    drop(g);
    SIG_SEEN.fetch_add(1, Ordering::Relaxed);
}

#[test]
fn read_sections_in_signal_handlers_nested_in_interrupted_ones() {
    let drops = Arc::new(AtomicUsize::new(0));
    let ptr: &'static RcuPtr<Canary> =
        Box::leak(Box::new(RcuPtr::new(Some(Canary::new(0, &drops)))));
    SIG_PTR.store(ptr as *const _ as usize, Ordering::Release);
    // SAFETY: installing a handler that only does async-signal-safe work.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigusr1 as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, ptr::null_mut()), 0);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let bad = Arc::new(AtomicUsize::new(0));
    let retired = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    let mut readers = Vec::new();
    for _ in 0..2 {
        let (stop, bad, tx, drops, retired) =
            (stop.clone(), bad.clone(), tx.clone(), drops.clone(), retired.clone());
        readers.push(thread::spawn(move || {
            // Registration in normal context makes the handler's read_lock
            // allocation-free.
            register_current_thread();
            // SAFETY: pthread_self has no preconditions.
            tx.send(unsafe { libc::pthread_self() }).unwrap();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let g = read_lock();
                if let Some(c) = ptr.load(&g) {
                    for _ in 0..16 {
                        if !c.ok() {
                            bad.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                }
                drop(g);
                // Retire too, so that signals also land while this thread
                // runs (or waits for) grace periods of its own, offline.
                n += 1;
                if n % 4 == 0 {
                    retire(Canary::new(n, &drops));
                    retired.fetch_add(1, Ordering::SeqCst);
                }
            }
            // Block the signal before thread exit: a handler running during
            // TLS teardown would have to borrow a record (not signal-safe).
            // SAFETY: plain signal-mask calls on this thread.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGUSR1);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, ptr::null_mut());
            }
        }));
    }
    let targets: Vec<libc::pthread_t> = (0..2).map(|_| rx.recv().unwrap()).collect();
    let deadline = Instant::now() + run_for() / 2;
    let mut gen = 1;
    let mut sent = 0usize;
    while Instant::now() < deadline {
        ptr.replace(Some(Canary::new(gen, &drops)));
        gen += 1;
        for &t in &targets {
            // SAFETY: the target threads are alive until `stop` is set.
            if unsafe { libc::pthread_kill(t, libc::SIGUSR1) } == 0 {
                sent += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    barrier();
    assert!(sent > 0 && SIG_SEEN.load(Ordering::Relaxed) > 0, "no signal was handled");
    assert_eq!(SIG_BAD.load(Ordering::SeqCst), 0, "a handler saw a freed object");
    assert_eq!(bad.load(Ordering::SeqCst), 0, "a reader saw a freed object");
    // Every replaced value (gen 0 .. gen-2) was dropped, the current one
    // lives, and every object the readers retired was dropped.
    assert_eq!(drops.load(Ordering::SeqCst), gen as usize - 1 + retired.load(Ordering::SeqCst));
}

/// The fallback scheme (readers pay a `SeqCst` fence, no membarrier) under
/// the same churn, through explicit handles of a separate domain.
#[test]
fn fence_domain_readers_never_see_freed_objects() {
    let d = Domain::new_with_fences();
    let drops = Arc::new(AtomicUsize::new(0));
    let bad = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // SAFETY: every guard used with it comes from `d`'s handles.
    let ptr = Arc::new(unsafe { RcuPtr::new_in(d, Some(Canary::new(0, &drops))) });
    let mut readers = Vec::new();
    for _ in 0..2 {
        let (ptr, bad, stop) = (ptr.clone(), bad.clone(), stop.clone());
        readers.push(thread::spawn(move || {
            let h = d.register();
            while !stop.load(Ordering::Relaxed) {
                let g = h.read_lock();
                if let Some(c) = ptr.load(&g) {
                    if !c.ok() {
                        bad.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }));
    }
    let h = d.register();
    let deadline = Instant::now() + run_for() / 2;
    let mut gen = 1;
    while Instant::now() < deadline {
        ptr.replace_in(Some(Canary::new(gen, &drops)), &h);
        gen += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    drop(h);
    d.barrier();
    assert_eq!(bad.load(Ordering::SeqCst), 0, "a reader saw a freed object");
    assert_eq!(drops.load(Ordering::SeqCst), gen as usize - 1);
    assert!(!d.uses_membarrier());
    let s = d.stats();
    assert_eq!(s.freed as usize, gen as usize - 1, "{s:?}");
}
