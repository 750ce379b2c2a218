//! Behaviour of the public API as its users see it: read sections, grace
//! periods, retire/barrier accounting, RcuPtr, the emergency path and the
//! ceiling. Timing-free: every assertion follows from the RCU guarantees.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use strobe_rcu::{
    barrier, read_depth, read_lock, register_current_thread, retire, retire_head, stats,
    synchronize, synchronize_lazy, try_read_lock, try_read_lock_outermost, RcuHead, RcuPtr,
    ReadGuard, MAX_OUTSTANDING_PER_THREAD,
};

/// Tests in this file share the global domain and the fault-injection switch;
/// the ones that inject faults or count globally run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts its own drops into a shared counter.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn read_sections_nest_and_unwind() {
    assert_eq!(read_depth(), 0);
    let a = read_lock();
    assert_eq!(a.depth(), 1);
    {
        let b = read_lock();
        assert_eq!(b.depth(), 2);
        assert_eq!(read_depth(), 2);
    }
    assert_eq!(read_depth(), 1);
    drop(a);
    assert_eq!(read_depth(), 0);
}

/// Starts a reader that holds a section open until told to leave, runs
/// `wait` (a grace period) on a writer thread meanwhile, and checks that
/// `wait` returned only after the reader's section ended (the reader sets a
/// flag inside its section, just before leaving).
fn grace_period_waits_for_an_earlier_reader(name: &'static str, wait: fn()) {
    let released = Arc::new(AtomicBool::new(false));
    let (in_section_tx, in_section_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let r2 = released.clone();
    let reader = thread::spawn(move || {
        let g = read_lock();
        in_section_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        r2.store(true, Ordering::SeqCst);
        drop(g);
    });
    in_section_rx.recv().unwrap();
    let r3 = released.clone();
    let writer = thread::spawn(move || {
        // This thread reads too: its own record must not hold the grace
        // period up while it waits.
        drop(read_lock());
        wait();
        assert!(r3.load(Ordering::SeqCst), "{name} returned during a section");
    });
    // Give the writer a chance to start waiting (not needed for correctness).
    thread::yield_now();
    go_tx.send(()).unwrap();
    reader.join().unwrap();
    writer.join().unwrap();
}

#[test]
fn synchronize_waits_for_a_reader_that_began_before_it() {
    grace_period_waits_for_an_earlier_reader("synchronize", synchronize);
}

#[test]
fn synchronize_lazy_waits_for_a_reader_that_began_before_it() {
    grace_period_waits_for_an_earlier_reader("synchronize_lazy", synchronize_lazy);
    let g = read_lock();
    assert_eq!(
        strobe_rcu::try_synchronize_lazy(),
        Err(strobe_rcu::Error::InReadSection { what: "synchronize_lazy", depth: 1 })
    );
    drop(g);
}

#[test]
#[should_panic(expected = "inside a read section")]
fn synchronize_inside_a_section_panics_instead_of_deadlocking() {
    let _g = read_lock();
    synchronize();
}

#[test]
fn try_synchronize_and_try_barrier_report_a_read_section_instead_of_waiting() {
    let g = read_lock();
    let g2 = read_lock();
    let e = strobe_rcu::try_synchronize().unwrap_err();
    assert_eq!(e, strobe_rcu::Error::InReadSection { what: "synchronize", depth: 2 });
    assert!(e.to_string().contains("drop every ReadGuard"), "{e}");
    assert!(matches!(
        strobe_rcu::try_barrier(),
        Err(strobe_rcu::Error::InReadSection { what: "barrier", depth: 2 })
    ));
    drop((g2, g));
    assert_eq!(strobe_rcu::try_synchronize(), Ok(()));
}

#[test]
fn a_started_grace_period_completes_without_the_caller_waiting_and_outlasts_readers() {
    let (in_section_tx, in_section_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let reader = thread::spawn(move || {
        let g = read_lock();
        in_section_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        drop(g);
    });
    in_section_rx.recv().unwrap();
    let cookie = strobe_rcu::start_poll_synchronize();
    // The reader's section began before the cookie: it cannot be complete.
    assert!(!strobe_rcu::poll_synchronize(cookie));
    go_tx.send(()).unwrap();
    reader.join().unwrap();
    // The background reclaimer completes it; nothing here runs a grace period.
    while !strobe_rcu::poll_synchronize(cookie) {
        thread::yield_now();
    }
}

#[test]
fn retired_objects_from_many_threads_are_freed_exactly_once_by_barrier() {
    let _s = serial();
    let drops = Arc::new(AtomicUsize::new(0));
    let per_thread = 10_000;
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let d = drops.clone();
            thread::spawn(move || {
                for _ in 0..per_thread {
                    retire(Box::new(Counted(d.clone())));
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // One more retire on this (still running) thread, left in a partial block.
    retire(Box::new(Counted(drops.clone())));
    barrier();
    assert_eq!(drops.load(Ordering::SeqCst), 4 * per_thread + 1);
}

#[test]
fn rcuptr_keeps_the_old_value_alive_for_a_reader_and_frees_it_after() {
    let _s = serial();
    let drops = Arc::new(AtomicUsize::new(0));
    let p = RcuPtr::new(Some(Box::new((7u64, Counted(drops.clone())))));
    let g = read_lock();
    let old = p.load(&g).unwrap();
    p.replace(Some(Box::new((8u64, Counted(drops.clone())))));
    // The reader still sees the value it loaded, and it is not freed.
    assert_eq!(old.0, 7);
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    assert_eq!(p.load(&g).unwrap().0, 8);
    drop(g);
    barrier();
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    drop(p);
    assert_eq!(drops.load(Ordering::SeqCst), 2);
}

#[repr(C)]
struct Headed {
    head: RcuHead,
    _c: Counted,
}

unsafe fn drop_headed(p: *mut ()) {
    // SAFETY: `p` is the head at offset 0 of a Box<Headed>.
    drop(unsafe { Box::from_raw(p.cast::<Headed>()) });
}

#[test]
fn emergency_path_loses_nothing_when_blocks_cannot_be_allocated() {
    let _s = serial();
    register_current_thread();
    barrier(); // start from an empty bag so the next retires need new blocks
    let drops = Arc::new(AtomicUsize::new(0));
    let before = stats();
    let n = 3 * strobe_rcu::RECORDS_PER_BLOCK;
    strobe_rcu::fail_next_block_allocs(usize::MAX);
    for _ in 0..n {
        let b =
            Box::into_raw(Box::new(Headed { head: RcuHead::new(), _c: Counted(drops.clone()) }));
        // SAFETY: the object was never published; the head is its first field.
        unsafe { retire_head(std::ptr::NonNull::new(b.cast::<RcuHead>()).unwrap(), drop_headed) };
    }
    // Head-less objects: freed synchronously after a grace period.
    for _ in 0..10 {
        retire(Box::new(Counted(drops.clone())));
    }
    strobe_rcu::fail_next_block_allocs(0);
    let mid = stats();
    assert!(mid.emergency - before.emergency >= n as u64, "{mid:?}");
    assert!(mid.headless_sync - before.headless_sync >= 10, "{mid:?}");
    barrier();
    assert_eq!(drops.load(Ordering::SeqCst), n + 10);
}

#[test]
fn outstanding_garbage_stays_under_the_ceiling_without_any_barrier() {
    let _s = serial();
    let live = Arc::new(AtomicUsize::new(0));
    struct Live(Arc<AtomicUsize>);
    impl Drop for Live {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let l2 = live.clone();
    let max_seen = thread::spawn(move || {
        let mut max = 0;
        for _ in 0..2_000 {
            for _ in 0..500 {
                l2.fetch_add(1, Ordering::SeqCst);
                retire(Box::new(Live(l2.clone())));
            }
            max = max.max(l2.load(Ordering::SeqCst));
        }
        max
    })
    .join()
    .unwrap();
    assert!(
        max_seen <= MAX_OUTSTANDING_PER_THREAD,
        "{max_seen} objects outstanding, ceiling {MAX_OUTSTANDING_PER_THREAD}"
    );
    barrier();
    assert_eq!(live.load(Ordering::SeqCst), 0);
}

/// A grace period that starts while another thread holds a section entered
/// by `enter` does not complete before that section ends.
fn grace_period_waits_for(enter: fn() -> Option<ReadGuard<'static>>) {
    let (entered_tx, entered_rx) = mpsc::channel();
    let (leave_tx, leave_rx) = mpsc::channel::<()>();
    let reader = thread::spawn(move || {
        register_current_thread();
        let g = enter().expect("a registered thread outside sections");
        entered_tx.send(()).unwrap();
        leave_rx.recv().unwrap();
        drop(g);
    });
    entered_rx.recv().unwrap();
    let (done_tx, done_rx) = mpsc::channel();
    let writer = thread::spawn(move || {
        synchronize();
        done_tx.send(()).unwrap();
    });
    // The wait only gives a broken grace period the time to show itself: a
    // correct one cannot complete while the section lasts, however long the
    // wait, so this cannot fail on a slow machine.
    assert!(
        done_rx.recv_timeout(Duration::from_millis(200)).is_err(),
        "synchronize returned while a read section was held"
    );
    leave_tx.send(()).unwrap();
    done_rx.recv().expect("synchronize completes once the section ends");
    writer.join().unwrap();
    reader.join().unwrap();
}

/// `try_read_lock_outermost` enters only the common case: a registered
/// thread outside any section. Inside a section (its own or another guard's)
/// and on an unregistered thread it enters nothing, and its section holds
/// off a grace period like any other.
#[test]
fn try_read_lock_outermost_enters_only_outside_sections() {
    thread::spawn(|| {
        assert!(try_read_lock_outermost().is_none(), "unregistered thread");
        assert_eq!(read_depth(), 0);
        register_current_thread();
        let outer = try_read_lock_outermost().expect("registered, outside sections");
        assert_eq!(read_depth(), 1);
        assert!(try_read_lock_outermost().is_none(), "nested in its own section");
        assert_eq!(read_depth(), 1);
        let inner = read_lock();
        assert_eq!(inner.depth(), 2);
        drop(inner);
        drop(outer);
        assert_eq!(read_depth(), 0);
        let g = read_lock();
        assert!(try_read_lock_outermost().is_none(), "nested in read_lock's section");
        drop(g);
        assert_eq!(read_depth(), 0);
    })
    .join()
    .unwrap();

    grace_period_waits_for(try_read_lock_outermost);
}

/// `try_read_lock` never registers: on a fresh thread it enters no section;
/// once the thread is registered it nests with `read_lock` like any guard, and
/// a grace period waits for its section.
#[test]
fn try_read_lock_enters_only_on_registered_threads() {
    thread::spawn(|| {
        assert!(try_read_lock().is_none());
        assert_eq!(read_depth(), 0);
        register_current_thread();
        let outer = try_read_lock().expect("registered thread");
        assert_eq!(read_depth(), 1);
        let inner = read_lock();
        let nested = try_read_lock().expect("registered thread");
        assert_eq!(nested.depth(), 3);
        drop(nested);
        drop(inner);
        assert_eq!(outer.depth(), 1);
        drop(outer);
        assert_eq!(read_depth(), 0);
    })
    .join()
    .unwrap();

    grace_period_waits_for(try_read_lock);
}

/// What a section run from a TLS destructor after strobe-rcu's own saw.
#[derive(Debug, PartialEq)]
struct LateSeen {
    try_before: bool,
    depth_outer: usize,
    depth_inner: usize,
    try_inside: Option<usize>,
    depth_after: usize,
    try_after: bool,
}

static LATE_SEEN: Mutex<Option<LateSeen>> = Mutex::new(None);

/// Runs read sections in its destructor.
struct LateReader;

impl Drop for LateReader {
    fn drop(&mut self) {
        let try_before = try_read_lock().is_some();
        let outer = read_lock();
        let depth_outer = read_depth();
        let inner = read_lock();
        let depth_inner = inner.depth();
        let try_inside = try_read_lock().map(|g| g.depth());
        // Out of order: the outer guard first.
        drop(outer);
        drop(inner);
        let seen = LateSeen {
            try_before,
            depth_outer,
            depth_inner,
            try_inside,
            depth_after: read_depth(),
            try_after: try_read_lock().is_some(),
        };
        *LATE_SEEN.lock().unwrap_or_else(|e| e.into_inner()) = Some(seen);
    }
}

thread_local! {
    static LATE: std::cell::RefCell<Option<LateReader>> = const { std::cell::RefCell::new(None) };
}

/// Code that runs after the thread's strobe-rcu state is gone (a later TLS
/// destructor) still gets read sections that nest, count their depth and
/// end in any order, while `try_read_lock` enters nothing; and grace periods
/// afterwards are not held up by the record such a section borrowed.
#[test]
fn read_sections_after_thread_teardown_nest_and_end() {
    thread::spawn(|| {
        // Installed first, so its destructor runs after strobe-rcu's
        // (thread-local destructors run in reverse order of registration).
        LATE.with(|l| *l.borrow_mut() = Some(LateReader));
        register_current_thread();
        drop(read_lock());
    })
    .join()
    .unwrap();
    let seen = LATE_SEEN.lock().unwrap().take();
    assert_eq!(
        seen,
        Some(LateSeen {
            try_before: false,
            depth_outer: 1,
            depth_inner: 2,
            try_inside: None,
            depth_after: 0,
            try_after: false,
        }),
        "sections after teardown"
    );
    synchronize();
    let p = RcuPtr::new(Some(Box::new(5u64)));
    let g = read_lock();
    assert_eq!(p.load(&g).copied(), Some(5));
    drop(g);
    p.replace(Some(Box::new(6)));
    synchronize();
}
