//! Real hardware watchpoints on this process's own threads: counting, re-targeting a slot,
//! synchronous SIGTRAP with the watchpoint's index, the asynchronous flag when SIGTRAP is
//! blocked, and the fifth breakpoint refused with a clear error.
//!
//! Every event is opened on the calling test thread only, and the SIGTRAP handler records
//! into thread-locals, so the tests can run in parallel.

use std::cell::Cell;
use std::ptr::{addr_of, addr_of_mut};
use std::sync::Once;

use strobe_perf::{OpenError, PerfEvent, Target};
use strobe_watch::bp::{self, Breakpoint, Mode, PerfTrap, Scope};
use strobe_watch::{Access, Len};

const THREAD: Target = Target::CALLING_THREAD;

/// Each test watches its own variables, so parallel tests never hit each other's.
#[repr(align(64))]
struct Vars([u64; 8]);

fn wbp(addr: *const u64) -> Breakpoint {
    Breakpoint { addr: addr as u64, len: Len::B8, access: Access::Write }
}

fn write(p: *mut u64, v: u64) {
    // SAFETY: `p` points into a live `Vars` owned by the calling test.
    unsafe { p.write_volatile(v) }
}

/// Opens a watchpoint, or explains why this machine cannot and returns None.
fn open(b: Breakpoint, mode: Mode) -> Option<PerfEvent> {
    match bp::open(b, mode, Scope::Thread, THREAD, "test watchpoint") {
        Ok(ev) => Some(ev),
        Err(e @ (OpenError::Paranoid { .. } | OpenError::NeedsCapability { .. })) => {
            eprintln!("skipping: hardware breakpoints are not permitted here: {e}");
            None
        }
        Err(OpenError::Rejected { source, .. }) if source.raw_os_error() == Some(libc::ENODEV) => {
            eprintln!("skipping: this machine has no hardware breakpoints");
            None
        }
        Err(e) => panic!("opening a watchpoint failed: {e}"),
    }
}

#[test]
fn counts_every_write_and_nothing_else() {
    let mut v = Vars([0; 8]);
    let p = addr_of_mut!(v.0[0]);
    let Some(ev) = open(wbp(p), Mode::Count) else { return };
    ev.enable().unwrap();
    for i in 0..1000 {
        write(p, i);
        write(addr_of_mut!(v.0[1]), i); // the neighbour is not watched
    }
    // A read does not trigger a write watchpoint.
    // SAFETY: reading our own live variable.
    let _ = unsafe { addr_of!(v.0[0]).read_volatile() };
    ev.disable().unwrap();
    assert_eq!(ev.read_count().unwrap(), 1000);
}

#[test]
fn the_fifth_breakpoint_of_a_thread_is_refused_clearly() {
    let mut v = Vars([0; 8]);
    let mut held = Vec::new();
    for i in 0..4 {
        let Some(ev) = open(wbp(addr_of_mut!(v.0[i])), Mode::Count) else { return };
        held.push(ev);
    }
    let e = bp::open(wbp(addr_of_mut!(v.0[4])), Mode::Count, Scope::Thread, THREAD, "lanes+32")
        .unwrap_err();
    assert!(matches!(e, OpenError::NoDebugRegisters { .. }), "{e}");
    assert!(e.to_string().contains("no free hardware debug register"), "{e}");
    drop(held.pop());
    assert!(open(wbp(addr_of_mut!(v.0[4])), Mode::Count).is_some(), "a freed slot is usable");
}

#[test]
fn retargeting_moves_the_slot_to_another_variable() {
    let mut v = Vars([0; 8]);
    let (a, b) = (addr_of_mut!(v.0[0]), addr_of_mut!(v.0[2]));
    let Some(ev) = open(wbp(a), Mode::Count) else { return };
    ev.enable().unwrap();
    write(a, 1);
    bp::retarget(&ev, wbp(b), Mode::Count, Scope::Thread).expect("MODIFY_ATTRIBUTES");
    write(a, 2);
    write(b, 3);
    write(b, 4);
    ev.disable().unwrap();
    assert_eq!(ev.read_count().unwrap(), 3, "1 write to a before, 2 to b after");
    // A different length and access are accepted too.
    let rw =
        Breakpoint { addr: addr_of!(v.0[3]) as u64 + 4, len: Len::B4, access: Access::ReadWrite };
    bp::retarget(&ev, rw, Mode::Count, Scope::Thread).expect("retarget to a 4-byte rw watch");
}

thread_local! {
    static HITS: Cell<u64> = const { Cell::new(0) };
    static LAST_DATA: Cell<u64> = const { Cell::new(u64::MAX) };
    static ASYNC_HITS: Cell<u64> = const { Cell::new(0) };
    static OTHER_TRAPS: Cell<u64> = const { Cell::new(0) };
}

extern "C" fn on_trap(_sig: libc::c_int, info: *mut libc::siginfo_t, _uc: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    match unsafe { PerfTrap::from_siginfo(info) } {
        Some(t) => {
            HITS.with(|h| h.set(h.get() + 1));
            LAST_DATA.with(|d| d.set(t.data));
            if t.is_async() {
                ASYNC_HITS.with(|h| h.set(h.get() + 1));
            }
        }
        None => OTHER_TRAPS.with(|h| h.set(h.get() + 1)),
    }
}

fn install_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction is valid; we set the handler and flags, then install
        // it. The handler only touches const-initialised thread-locals without destructors.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                on_trap;
            sa.sa_sigaction = handler as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            assert_eq!(libc::sigaction(libc::SIGTRAP, &sa, std::ptr::null_mut()), 0);
        }
    });
}

fn reset_counts() {
    HITS.with(|c| c.set(0));
    ASYNC_HITS.with(|c| c.set(0));
    OTHER_TRAPS.with(|c| c.set(0));
    LAST_DATA.with(|c| c.set(u64::MAX));
}

#[test]
fn every_hit_raises_a_synchronous_sigtrap_carrying_the_watchpoint_index() {
    install_handler();
    reset_counts();
    let mut v = Vars([0; 8]);
    let (a, b) = (addr_of_mut!(v.0[0]), addr_of_mut!(v.0[5]));
    let Some(ev) = open(wbp(a), Mode::Trap { sig_data: 3 }) else { return };
    ev.enable().unwrap();
    for i in 0..100 {
        write(a, i);
        // Synchronous: the handler has run before the next statement.
        assert_eq!(HITS.with(Cell::get), i + 1);
    }
    assert_eq!(LAST_DATA.with(Cell::get), 3);
    // Re-targeting changes the address and the index the handler sees.
    bp::retarget(&ev, wbp(b), Mode::Trap { sig_data: 6 }, Scope::Thread).expect("retarget");
    write(a, 0);
    assert_eq!(HITS.with(Cell::get), 100, "the old address no longer traps");
    write(b, 1);
    assert_eq!((HITS.with(Cell::get), LAST_DATA.with(Cell::get)), (101, 6));
    ev.disable().unwrap();
    assert_eq!((ASYNC_HITS.with(Cell::get), OTHER_TRAPS.with(Cell::get)), (0, 0));
}

#[test]
fn a_thread_that_blocks_sigtrap_gets_the_hit_late_and_flagged_async_not_killed() {
    install_handler();
    reset_counts();
    let mut v = Vars([0; 8]);
    let p = addr_of_mut!(v.0[0]);
    let Some(ev) = open(wbp(p), Mode::Trap { sig_data: 9 }) else { return };
    ev.enable().unwrap();
    // SAFETY: plain signal-mask calls on this thread with valid sigset pointers.
    let old = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTRAP);
        assert_eq!(libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old), 0);
        old
    };
    write(p, 1);
    write(p, 2);
    assert_eq!(HITS.with(Cell::get), 0, "blocked: nothing delivered yet");
    // SAFETY: restoring this thread's previous mask.
    unsafe { assert_eq!(libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()), 0) };
    ev.disable().unwrap();
    // Standard signals do not queue: the two hits arrive as one pending SIGTRAP.
    assert!(HITS.with(Cell::get) >= 1, "the pending SIGTRAP is delivered on unblock");
    assert_eq!(ASYNC_HITS.with(Cell::get), HITS.with(Cell::get), "and flagged asynchronous");
    assert_eq!(LAST_DATA.with(Cell::get), 9);
}
