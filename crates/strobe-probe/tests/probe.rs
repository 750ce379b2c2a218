//! Behaviour of probe points as a user of the crate sees it: exact counts,
//! arguments, filters, handler-requested removal, scopes, detach while other
//! threads fire, and churn.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use strobe_probe::{
    attach, attach_existing, probe, probe_scope, Action, Consumer, HitKind, ProbeError,
};

fn counter(n: &Arc<AtomicU64>) -> Consumer {
    let n = n.clone();
    Consumer::new(move |_| {
        n.fetch_add(1, Ordering::Relaxed);
        Action::Keep
    })
}

#[inline(never)]
fn fire_basic(i: u64) {
    probe!(t_basic, i, -1i32, &i as *const u64, true);
}

#[test]
fn counts_hits_exactly_and_passes_arguments() {
    fire_basic(0); // disabled: nobody sees it
    let n = Arc::new(AtomicU64::new(0));
    let sum = Arc::new(AtomicU64::new(0));
    let s2 = sum.clone();
    let a = attach("t_basic", counter(&n)).unwrap();
    let b = attach(
        "t_basic",
        Consumer::new(move |hit| {
            assert_eq!(hit.name(), "t_basic");
            assert_eq!(hit.kind, HitKind::Fire);
            assert_eq!(hit.args.len(), 4);
            assert_eq!(hit.arg(1), u64::MAX, "signed arguments are sign-extended");
            assert_ne!(hit.arg(2), 0);
            assert_eq!(hit.arg(3), 1);
            s2.fetch_add(hit.arg(0), Ordering::Relaxed);
            Action::Keep
        }),
    )
    .unwrap();
    for i in 1..=1000 {
        fire_basic(i);
    }
    a.detach();
    fire_basic(5000);
    b.detach();
    fire_basic(7000);
    assert_eq!(n.load(Ordering::Relaxed), 1000);
    assert_eq!(sum.load(Ordering::Relaxed), 1000 * 1001 / 2 + 5000);
}

#[inline(never)]
fn fire_filtered(i: u64) {
    probe!("t:filtered", i);
}

#[test]
fn filter_selects_the_hits_the_handler_sees() {
    let n = Arc::new(AtomicU64::new(0));
    let n2 = n.clone();
    let a = attach(
        "t:filtered",
        Consumer::new(move |hit| {
            assert_eq!(hit.arg(0) % 3, 0, "the filter let through a hit it rejects");
            n2.fetch_add(1, Ordering::Relaxed);
            Action::Keep
        })
        .with_filter(|hit| hit.arg(0) % 3 == 0),
    )
    .unwrap();
    for i in 0..300 {
        fire_filtered(i);
    }
    drop(a);
    assert_eq!(n.load(Ordering::Relaxed), 100);
}

#[inline(never)]
fn fire_remove(i: u64) {
    probe!(t_remove, i);
}

#[test]
fn handler_removal_is_honoured_only_when_the_filter_confirms() {
    // Consistent consumer: wants 10 hits; after the 10th its filter declines.
    let budget = Arc::new(AtomicU64::new(10));
    let (b1, b2) = (budget.clone(), budget.clone());
    let done = attach(
        "t_remove",
        Consumer::new(move |_| {
            if b1.fetch_sub(1, Ordering::Relaxed) == 1 {
                Action::Remove
            } else {
                Action::Keep
            }
        })
        .with_filter(move |_| b2.load(Ordering::Relaxed) > 0),
    )
    .unwrap();
    // Inconsistent consumer: asks for removal but its filter still wants hits.
    let stubborn_n = Arc::new(AtomicU64::new(0));
    let sn = stubborn_n.clone();
    let stubborn = attach(
        "t_remove",
        Consumer::new(move |_| {
            sn.fetch_add(1, Ordering::Relaxed);
            Action::Remove
        })
        .with_filter(|_| true),
    )
    .unwrap();
    // No filter: removal requests are ignored (it wants every hit).
    let nofilter_n = Arc::new(AtomicU64::new(0));
    let nn = nofilter_n.clone();
    let nofilter = attach(
        "t_remove",
        Consumer::new(move |_| {
            nn.fetch_add(1, Ordering::Relaxed);
            Action::Remove
        }),
    )
    .unwrap();

    for i in 0..50 {
        fire_remove(i);
    }
    assert!(done.is_removed());
    assert_eq!(budget.load(Ordering::Relaxed), 0, "the handler ran after its confirmed removal");
    assert!(!stubborn.is_removed());
    assert!(!nofilter.is_removed());
    assert_eq!(stubborn_n.load(Ordering::Relaxed), 50);
    assert_eq!(nofilter_n.load(Ordering::Relaxed), 50);
    assert_eq!(strobe_probe::consumer_count("t_remove"), 3, "unlinking waits for a writer");
    drop(done);
    assert_eq!(strobe_probe::consumer_count("t_remove"), 2);
    strobe_probe::detach_all([stubborn, nofilter]);
    assert_eq!(strobe_probe::consumer_count("t_remove"), 0);
}

#[inline(never)]
fn scoped(spin: u64) -> u64 {
    let _s = probe_scope!(t_scope, spin);
    let mut x = 0u64;
    for i in 0..spin {
        x = std::hint::black_box(x.wrapping_add(i));
    }
    x
}

#[test]
fn scoped_probes_report_entry_and_exit_with_durations() {
    let entries = Arc::new(AtomicU64::new(0));
    let exits = Arc::new(AtomicU64::new(0));
    let ns = Arc::new(AtomicU64::new(0));
    let (e, x, t) = (entries.clone(), exits.clone(), ns.clone());
    let a = attach(
        "t_scope",
        Consumer::new(move |hit| {
            match hit.kind {
                HitKind::Entry => {
                    assert_eq!(hit.arg(0), 100_000);
                    e.fetch_add(1, Ordering::Relaxed);
                }
                HitKind::Exit { ns } => {
                    x.fetch_add(1, Ordering::Relaxed);
                    t.fetch_add(ns, Ordering::Relaxed);
                }
                HitKind::Fire => panic!("a scope fires entry and exit only"),
            }
            Action::Keep
        }),
    )
    .unwrap();
    for _ in 0..20 {
        scoped(100_000);
    }
    a.detach();
    scoped(100_000);
    assert_eq!(entries.load(Ordering::Relaxed), 20);
    assert_eq!(exits.load(Ordering::Relaxed), 20);
    assert!(ns.load(Ordering::Relaxed) > 0, "100k loop iterations take some nanoseconds");
}

#[inline(never)]
fn fire_race(i: u64) {
    probe!(t_race, i);
}

/// The guarantee of detach: once it returns, the handler never runs again,
/// even while other threads keep firing.
#[test]
fn no_handler_runs_after_detach_returns() {
    const THREADS: usize = 3;
    const ROUNDS: usize = 100;
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(THREADS + 1));
    let fired = Arc::new(AtomicU64::new(0));
    let firers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (stop, start, fired) = (stop.clone(), start.clone(), fired.clone());
            thread::spawn(move || {
                start.wait();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    fire_race(i);
                    i += 1;
                }
                fired.fetch_add(i, Ordering::Relaxed);
            })
        })
        .collect();
    start.wait();
    let mut total_calls = 0;
    for _ in 0..ROUNDS {
        let detached = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(AtomicU64::new(0));
        let (d, c) = (detached.clone(), calls.clone());
        let a = attach(
            "t_race",
            Consumer::new(move |_| {
                assert!(!d.load(Ordering::SeqCst), "handler ran after detach returned");
                c.fetch_add(1, Ordering::Relaxed);
                Action::Keep
            }),
        )
        .unwrap();
        // Let the firing threads reach the handler before detaching.
        while calls.load(Ordering::Relaxed) < 10 {
            thread::yield_now();
        }
        a.detach();
        detached.store(true, Ordering::SeqCst);
        total_calls += calls.load(Ordering::Relaxed);
    }
    stop.store(true, Ordering::Relaxed);
    for t in firers {
        t.join().expect("a handler saw itself called after detach");
    }
    assert!(total_calls >= 10 * ROUNDS as u64);
    assert_eq!(strobe_probe::consumer_count("t_race"), 0);
}

#[test]
fn sites_are_listed_before_they_fire_and_unknown_names_suggest_close_ones() {
    #[allow(dead_code)]
    fn never_called() {
        probe!(t_listed_never_fired, 1u8, 2u16);
    }
    let sites = strobe_probe::sites();
    let s = sites
        .iter()
        .find(|s| s.name == "t_listed_never_fired")
        .expect("listed through the linker section");
    assert_eq!(s.nargs, 2);
    assert!(s.file.ends_with("probe.rs"));
    assert!(strobe_probe::probe_names().contains(&"t_basic".to_string()));
    let e = attach_existing("t_basik", Consumer::new(|_| Action::Keep)).unwrap_err();
    match &e {
        ProbeError::UnknownProbe { hint, .. } => assert!(hint.contains("t_basic"), "{e}"),
        other => panic!("unexpected {other:?}"),
    }
    // A library's error says what to do in words: it knows no command line.
    let msg = e.to_string();
    assert!(msg.contains("list the probe points the program has"), "{msg}");
    assert!(!msg.contains("--") && !msg.contains("strobe probe"), "{msg}");
    let empty = attach("", Consumer::new(|_| Action::Keep)).unwrap_err();
    assert_eq!(empty, ProbeError::BadName);
    assert!(!empty.to_string().contains("--"), "{empty}");
}

#[inline(never)]
fn fire_churn(i: u64) {
    probe!(t_churn, i);
}

/// Stress: two threads fire while two others attach and detach consumers
/// that each check they are never called after their detach; every consumer
/// is dropped exactly once. One churner detaches with paced grace periods,
/// the other with expedited ones, so each kind also completes (or finds
/// completed) grace periods the other started.
#[test]
fn churn_stress() {
    struct DropCount(Arc<AtomicUsize>);
    impl Drop for DropCount {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let iters = if cfg!(debug_assertions) { 300 } else { 2000 };
    let stop = Arc::new(AtomicBool::new(false));
    let drops = Arc::new(AtomicUsize::new(0));
    let firers: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    fire_churn(i);
                    i += 1;
                }
            })
        })
        .collect();
    let churners: Vec<_> = [false, true]
        .into_iter()
        .map(|expedited| {
            let drops = drops.clone();
            thread::spawn(move || {
                for k in 0..iters {
                    let detached = Arc::new(AtomicBool::new(false));
                    let d = detached.clone();
                    let token = DropCount(drops.clone());
                    let a = attach(
                        "t_churn",
                        Consumer::new(move |_| {
                            let _ = &token;
                            assert!(!d.load(Ordering::SeqCst), "handler ran after detach returned");
                            Action::Keep
                        }),
                    )
                    .unwrap();
                    if k % 2 == 0 {
                        thread::yield_now();
                    }
                    if expedited {
                        a.detach_expedited();
                    } else {
                        a.detach();
                    }
                    detached.store(true, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for c in churners {
        c.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for f in firers {
        f.join().expect("a handler ran after its detach returned");
    }
    strobe_rcu::barrier();
    assert_eq!(drops.load(Ordering::SeqCst), 2 * iters, "every consumer freed exactly once");
    assert_eq!(strobe_probe::consumer_count("t_churn"), 0);
}

static SIGNAL_HITS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_sigusr2(_: libc::c_int) {
    probe!(t_in_signal, 7u8);
}

/// A registered site fires from a signal handler: the trigger path takes no
/// lock and allocates nothing, so it may interrupt anything, including a
/// probe firing on the same thread.
#[test]
fn probes_fire_inside_signal_handlers() {
    strobe_rcu::register_current_thread();
    let a = attach(
        "t_in_signal",
        Consumer::new(|hit| {
            SIGNAL_HITS.fetch_add(hit.arg(0), Ordering::Relaxed);
            Action::Keep
        }),
    )
    .unwrap();
    // SAFETY: installs a handler that only fires a probe (async-signal-safe
    // on this registered thread with this consumer).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigusr2 as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()), 0);
    }
    for _ in 0..100 {
        // SAFETY: signals this thread; the handler above is installed.
        unsafe { libc::pthread_kill(libc::pthread_self(), libc::SIGUSR2) };
        on_sigusr2(0); // and a hit of the same site outside the handler
    }
    a.detach();
    assert_eq!(SIGNAL_HITS.load(Ordering::Relaxed), 2 * 700);
}

#[inline(never)]
fn fire_inner(i: u64) {
    probe!(t_inner, i);
}

/// A hit nested in a read section (a consumer firing another probe, or a
/// program holding its own strobe-rcu section) takes the nested path and is
/// counted like any other.
#[test]
fn hits_inside_read_sections_are_counted() {
    let inner = Arc::new(AtomicU64::new(0));
    let outer = Arc::new(AtomicU64::new(0));
    let o = outer.clone();
    let a = attach("t_inner", counter(&inner)).unwrap();
    let b = attach(
        "t_outer",
        Consumer::new(move |hit| {
            o.fetch_add(1, Ordering::Relaxed);
            fire_inner(hit.arg(0));
            Action::Keep
        }),
    )
    .unwrap();
    for i in 0..100u64 {
        probe!(t_outer, i);
    }
    {
        let _section = strobe_rcu::read_lock();
        for i in 0..50u64 {
            fire_inner(i);
        }
    }
    b.detach();
    a.detach();
    assert_eq!(outer.load(Ordering::Relaxed), 100);
    assert_eq!(inner.load(Ordering::Relaxed), 150);
}
