//! Allocation accounting with a counting global allocator: the trigger path
//! allocates nothing, and attach/detach cycles while other threads fire leak
//! nothing (every consumer and list is freed after its grace period).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

use strobe_probe::{attach, probe, Action, Consumer};

#[global_allocator]
static A: strobe_alloc_count::Counting = strobe_alloc_count::Counting;

/// Tests here read the process-wide live count: run them one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn mine() -> u64 {
    strobe_alloc_count::thread_calls()
}

#[inline(never)]
fn fire_alloc(i: u64) {
    probe!(a_fire, i, i + 1, i + 2);
}

#[inline(never)]
fn scope_alloc(i: u64) {
    let _s = strobe_probe::probe_scope!(a_scope, i);
}

#[test]
fn the_trigger_path_allocates_nothing() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let n = Arc::new(AtomicU64::new(0));
    let n2 = n.clone();
    let a = attach(
        "a_fire",
        Consumer::new(move |h| {
            n2.fetch_add(h.arg(2), Ordering::Relaxed);
            Action::Keep
        })
        .with_filter(|h| h.arg(0) % 2 == 0),
    )
    .unwrap();
    let b = attach("a_scope", Consumer::new(|_| Action::Keep)).unwrap();
    fire_alloc(0); // the first hit on this thread registers it with strobe-rcu
    scope_alloc(0);
    let before = mine();
    for i in 0..100_000 {
        fire_alloc(i);
        scope_alloc(i);
    }
    let during = mine() - before;
    drop((a, b));
    assert_eq!(during, 0, "200k triggers allocated {during} times");
    assert!(n.load(Ordering::Relaxed) > 0);
}

#[inline(never)]
fn fire_leak(i: u64) {
    probe!(a_leak, i);
}

fn cycles(n: usize) {
    for _ in 0..n {
        let payload = vec![0u8; 256]; // owned by the consumer, freed with it
        let a = attach(
            "a_leak",
            Consumer::new(move |h| {
                if payload.len() as u64 == h.arg(0) {
                    Action::Remove
                } else {
                    Action::Keep
                }
            })
            .with_filter(|_| true),
        )
        .unwrap();
        thread::yield_now();
        a.detach();
    }
}

fn settled_live() -> i64 {
    strobe_rcu::barrier();
    strobe_alloc_count::live()
}

#[test]
fn attach_detach_cycles_under_fire_leak_nothing() {
    let _s = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let stop = Arc::new(AtomicBool::new(false));
    let firers: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    fire_leak(i);
                    i += 1;
                }
            })
        })
        .collect();
    // Warm up: registry, probe entry, each thread's strobe-rcu records.
    cycles(100);
    let l1 = settled_live();
    cycles(400);
    let l2 = settled_live();
    cycles(400);
    let l3 = settled_live();
    stop.store(true, Ordering::Relaxed);
    for f in firers {
        f.join().unwrap();
    }
    // 400 cycles allocate at least 1200 objects (consumer, payload, lists);
    // what stays live must not grow with the number of cycles.
    assert!(l2 - l1 <= 16 && l3 - l2 <= 16, "live allocations grew: {l1} -> {l2} -> {l3}");
    assert_eq!(strobe_probe::consumer_count("a_leak"), 0);
}
