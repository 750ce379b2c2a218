//! The SIGTRAP side of `strobe watch` in the target: the handler that turns a watchpoint
//! hit into a [`Hit`](super::ring::Hit), and the chaining that keeps the target's own
//! SIGTRAP handling intact.
//!
//! It owns the process's SIGTRAP disposition while watching. The target still believes it
//! owns it: `sigaction` and `signal` are interposed (this library is preloaded, so its
//! definitions come first), and a target's SIGTRAP action is stored here instead of in
//! the kernel. A SIGTRAP that is not one of ours (`si_code != TRAP_PERF`, another event
//! type, or a `si_perf_data` without our tag: an `int3`, a `kill`, a debugger, the
//! target's own perf events) is handed to the target's action exactly as the kernel
//! would have: its `SA_SIGINFO` handler with the same arguments, its plain handler, an
//! ignore, or the default (the action is reset and the signal re-raised, so the process
//! ends as it would have without strobe).
//!
//! Must never, in the handler: allocate, lock, panic, or touch memory it cannot prove
//! mapped (stack frames and read-watched words are read with `process_vm_readv`, which
//! fails cleanly on a bad address and, being a kernel access, does not re-trigger a
//! user-space watchpoint). `errno` is saved and restored around it.

use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};

use strobe_perf::sys;
use strobe_watch::bp::PerfTrap;

use super::decode;
use super::mem::safe_read;
use super::ring::{Hit, HIT_IMPRECISE, HIT_OLD_UNKNOWN, MAX_FRAMES};
use super::state::{state, SIG_TAG};

/// Set once our handler is installed: from then on SIGTRAP actions are kept here.
static ACTIVE: AtomicUsize = AtomicUsize::new(0);
/// The target's SIGTRAP action: handler (`SIG_DFL` = 0), `sa_flags`, and its mask's first
/// word (signals 1-64, all glibc's `sigset_t` carries in practice).
static CHAIN_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static CHAIN_FLAGS: AtomicI32 = AtomicI32::new(0);
static CHAIN_MASK: AtomicU64 = AtomicU64::new(0);
/// SIGTRAPs handed on to the target.
pub static CHAINED: AtomicU64 = AtomicU64::new(0);
/// The real `sigaction` (the next definition after the agent's interposer).
static REAL_SIGACTION: AtomicUsize = AtomicUsize::new(0);

type SigactionFn =
    unsafe extern "C" fn(libc::c_int, *const libc::sigaction, *mut libc::sigaction) -> libc::c_int;

fn next_symbol(cache: &AtomicUsize, name: &std::ffi::CStr) -> usize {
    // Relaxed: the cached value is a pure function of the loaded libraries; racing
    // resolvers store the same address.
    let f = cache.load(Ordering::Relaxed);
    if f != 0 {
        return f;
    }
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name; it returns the next
    // definition of the symbol after this library, or null.
    let f = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) } as usize;
    cache.store(f, Ordering::Relaxed);
    f
}

/// Resolves the C library's `sigaction` now (normal context), so watch code never calls
/// `dlsym` later, possibly from a signal handler.
pub fn resolve_next() {
    next_symbol(&REAL_SIGACTION, c"sigaction");
}

/// Calls the C library's `sigaction`, bypassing the interposer below.
///
/// # Safety
/// As `sigaction(2)`: `act` and `old` are null or valid.
pub unsafe fn real_sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    let f = next_symbol(&REAL_SIGACTION, c"sigaction");
    if f == 0 {
        // SAFETY: as the caller promised; the raw system call with the kernel's sigset size.
        return unsafe {
            libc::syscall(libc::SYS_rt_sigaction, sig, act, old, 8usize) as libc::c_int
        };
    }
    // SAFETY: `f` is libc's sigaction, whose signature this is.
    unsafe { std::mem::transmute::<usize, SigactionFn>(f)(sig, act, old) }
}

/// Installs the watch handler for SIGTRAP, keeping the action that was there as the one to
/// chain to. Not async-signal-safe; called once at start.
pub fn install() -> Result<(), String> {
    // SAFETY: a zeroed sigaction is valid; the calls read/write through valid pointers.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        let h: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = on_sigtrap;
        sa.sa_sigaction = h as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if real_sigaction(libc::SIGTRAP, &sa, &mut old) != 0 {
            return Err("cannot install the SIGTRAP handler".into());
        }
        store_chain(&old);
    }
    // Release: the chain stored above is visible to an interposed call that sees ACTIVE.
    ACTIVE.store(1, Ordering::Release);
    Ok(())
}

fn store_chain(a: &libc::sigaction) {
    // SAFETY: reading the first 8 bytes of a sigset_t (128 bytes on glibc).
    let mask = unsafe { (&a.sa_mask as *const libc::sigset_t).cast::<u64>().read_unaligned() };
    // Relaxed: a target changing its SIGTRAP action while a trap is being chained races
    // with itself exactly as it would with the kernel; each field is read whole.
    CHAIN_MASK.store(mask, Ordering::Relaxed);
    CHAIN_FLAGS.store(a.sa_flags, Ordering::Relaxed);
    CHAIN_HANDLER.store(a.sa_sigaction, Ordering::Relaxed);
}

fn load_chain(a: &mut libc::sigaction) {
    a.sa_sigaction = CHAIN_HANDLER.load(Ordering::Relaxed);
    a.sa_flags = CHAIN_FLAGS.load(Ordering::Relaxed);
    // SAFETY: writing the first 8 bytes of a sigset_t after emptying it.
    unsafe {
        libc::sigemptyset(&mut a.sa_mask);
        (&mut a.sa_mask as *mut libc::sigset_t)
            .cast::<u64>()
            .write_unaligned(CHAIN_MASK.load(Ordering::Relaxed));
    }
}

fn watching_sigtrap(sig: libc::c_int) -> bool {
    // Acquire: pairs with `install`'s Release.
    sig == libc::SIGTRAP && ACTIVE.load(Ordering::Acquire) != 0
}

/// The SIGTRAP part of the agent's `sigaction` interposer (lib.rs): while strobe watches,
/// SIGTRAP actions are kept here for chaining and `Some(0)` is returned; otherwise `None`
/// (the caller forwards to the C library).
///
/// # Safety
/// As `sigaction(2)`.
pub unsafe fn virtual_sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> Option<libc::c_int> {
    if !watching_sigtrap(sig) {
        return None;
    }
    // SAFETY: the caller passes null or valid pointers, as sigaction(2) requires.
    unsafe {
        if let Some(o) = old.as_mut() {
            load_chain(o);
        }
        if let Some(a) = act.as_ref() {
            store_chain(a);
        }
    }
    Some(0)
}

/// The SIGTRAP part of the agent's `signal` interposer, as [`virtual_sigaction`]: the
/// previous handler while strobe watches, `None` otherwise.
pub fn virtual_signal(sig: libc::c_int, handler: libc::sighandler_t) -> Option<libc::sighandler_t> {
    if !watching_sigtrap(sig) {
        return None;
    }
    // glibc's signal() has BSD semantics: SA_RESTART, handler not reset.
    let old = CHAIN_HANDLER.swap(handler, Ordering::Relaxed);
    CHAIN_FLAGS.store(libc::SA_RESTART, Ordering::Relaxed);
    CHAIN_MASK.store(0, Ordering::Relaxed);
    Some(old)
}

#[cfg(target_arch = "x86_64")]
fn regs(uc: *mut libc::c_void) -> (u64, u64) {
    if uc.is_null() {
        return (0, 0);
    }
    // SAFETY: an SA_SIGINFO handler's third argument is the interrupted ucontext_t.
    let uc = unsafe { &*(uc as *const libc::ucontext_t) };
    let g = &uc.uc_mcontext.gregs;
    let ip = g.get(libc::REG_RIP as usize).map_or(0, |r| *r as u64);
    let fp = g.get(libc::REG_RBP as usize).map_or(0, |r| *r as u64);
    (ip, fp)
}

#[cfg(not(target_arch = "x86_64"))]
fn regs(_uc: *mut libc::c_void) -> (u64, u64) {
    (0, 0)
}

/// Walks frame pointers from `fp`: at most [`MAX_FRAMES`] return addresses, each frame
/// read with [`safe_read`], stopping at a null, misaligned or non-ascending frame.
fn walk(mut fp: u64, out: &mut [u64; MAX_FRAMES]) -> u32 {
    let mut n = 0;
    while n < MAX_FRAMES {
        if fp == 0 || fp % 8 != 0 {
            break;
        }
        let mut frame = [0u8; 16];
        if !safe_read(fp, &mut frame) {
            break;
        }
        let next = u64::from_ne_bytes([
            frame[0], frame[1], frame[2], frame[3], frame[4], frame[5], frame[6], frame[7],
        ]);
        let ret = u64::from_ne_bytes([
            frame[8], frame[9], frame[10], frame[11], frame[12], frame[13], frame[14], frame[15],
        ]);
        if ret == 0 {
            break;
        }
        if let Some(slot) = out.get_mut(n) {
            *slot = ret;
        }
        n += 1;
        if next <= fp {
            break;
        }
        fp = next;
    }
    n as u32
}

/// The watched value now, `len` bytes little-endian zero-extended. Write watchpoints are
/// read directly (a read does not trigger them; the thread has just written the word, so
/// it is mapped); read/write ones through the kernel, so reading does not hit again.
fn read_value(addr: u64, len: u64, direct: bool) -> u64 {
    let len = len.min(8) as usize;
    let mut b = [0u8; 8];
    if direct {
        for (i, byte) in b.iter_mut().enumerate().take(len) {
            // SAFETY: the accessing thread has just written these bytes (a write watchpoint
            // fires after the store), so they are mapped and readable.
            *byte = unsafe { std::ptr::read_volatile((addr as *const u8).add(i)) };
        }
    } else if !safe_read(addr, &mut b[..len]) {
        return 0;
    }
    u64::from_le_bytes(b)
}

extern "C" fn on_sigtrap(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: __errno_location returns this thread's errno slot.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: the kernel passes a valid siginfo_t to an SA_SIGINFO handler.
    let trap = unsafe { PerfTrap::from_siginfo(info) };
    match trap {
        Some(t) if t.type_ == sys::PERF_TYPE_BREAKPOINT && t.data >> 32 == SIG_TAG => on_hit(t, uc),
        _ => chain(sig, info, uc),
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

fn on_hit(t: PerfTrap, uc: *mut libc::c_void) {
    let Some(st) = state() else { return };
    let wp = (t.data & 0xffff_ffff) as u32;
    let Some(w) = st.wps.get(wp as usize) else { return };
    st.hits.record(wp as usize);
    let (ip, fp) = regs(uc);
    let mut hit = Hit { wp, tid: sys::gettid(), ip, ..Hit::default() };
    if t.is_async() {
        hit.flags |= HIT_IMPRECISE;
    }
    // The stored value from the instruction and registers when it is a plain store (exact
    // even when other threads write the word meanwhile), else from memory.
    let mut code = [0u8; 15];
    // An imprecise hit's IP is not the store (and its page neighbours may be unmapped).
    let exact = match decode::gprs(uc) {
        Some(regs) if !t.is_async() && decode::code_before(ip, &mut code) => {
            decode::stored_value(&code, ip, &regs, w.addr, w.len)
        }
        _ => None,
    };
    hit.new = match exact {
        Some(v) => v,
        None => read_value(w.addr, w.len, w.write_only),
    };
    // AcqRel on the shadow: each hit takes the previous hit's value as its old one, in the
    // order the hits were handled (one total order per shadow word).
    let old = w.shadow.swap(hit.new, Ordering::AcqRel);
    if w.shadow_valid.swap(1, Ordering::AcqRel) == 0 {
        hit.flags |= HIT_OLD_UNKNOWN;
    }
    hit.old = old;
    if st.stack {
        hit.nframes = walk(fp, &mut hit.frames);
    }
    st.ring.push(&hit);
}

/// Hands a SIGTRAP that is not ours to the target's action.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // Relaxed: see `store_chain`.
    let h = CHAIN_HANDLER.load(Ordering::Relaxed);
    let flags = CHAIN_FLAGS.load(Ordering::Relaxed);
    CHAINED.fetch_add(1, Ordering::Relaxed);
    if h == libc::SIG_IGN {
        return;
    }
    if h == libc::SIG_DFL {
        // What the kernel would have done: the default action (terminate with a core).
        // SAFETY: a zeroed sigaction is SIG_DFL; the re-raised signal is blocked until this
        // handler returns, then delivered with the default action.
        unsafe {
            let dfl: libc::sigaction = std::mem::zeroed();
            real_sigaction(libc::SIGTRAP, &dfl, std::ptr::null_mut());
            libc::raise(libc::SIGTRAP);
        }
        return;
    }
    // The target's sa_mask applies while its handler runs, as the kernel would apply it.
    let mask = CHAIN_MASK.load(Ordering::Relaxed);
    let mut saved = 0u64;
    if mask != 0 {
        // SAFETY: rt_sigprocmask with 8-byte kernel sigsets on valid locals; a system call
        // is async-signal-safe.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_BLOCK,
                &mask as *const u64,
                &mut saved as *mut u64,
                8usize,
            )
        };
    }
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the target installed `h` as an SA_SIGINFO handler; it gets the kernel's
        // own arguments.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(h) };
        f(sig, info, uc);
    } else {
        // SAFETY: the target installed `h` as a plain handler.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(h) };
        f(sig);
    }
    if mask != 0 {
        // SAFETY: as above; restores the mask the handler started with.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigprocmask,
                libc::SIG_SETMASK,
                &saved as *const u64,
                std::ptr::null_mut::<u64>(),
                8usize,
            )
        };
    }
    if flags & libc::SA_RESETHAND as libc::c_int != 0 {
        CHAIN_HANDLER.store(libc::SIG_DFL, Ordering::Relaxed);
    }
}
