//! The SIGTRAP entry: installs strobe's handler in front of the target's (whose
//! disposition becomes virtual: the interposed `sigaction`, `signal`, `sysv_signal` and
//! `siginterrupt` record and report it without touching the kernel's), decides whose
//! each SIGTRAP is, and passes it on: a perf overflow tagged for this thread's slot to the
//! sampler (or, in a calibration process, to the calibration), anything else to the
//! target's own disposition exactly as the kernel would have.
//!
//! Owns: the handler's installation and dispatch, and the target's chained disposition.
//! Must never take a lock, allocate or panic on the signal path, run a sample on a slot
//! that is not the interrupted thread's, or leave the target's SIGTRAP semantics changed.
//! It sits above both `sampler` and `calibrate`, so neither imports the other's caller.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use strobe_perf::sys;

use crate::sampler::{take_sample, CALIB_MODE};
use crate::slots::{self, LOCAL};
use crate::{agent, arena};

/// The target's SIGTRAP disposition, for SIGTRAPs that are not perf's: the one before
/// ours, then whatever the target installs later through `sigaction`/`signal` (which the
/// agent interposes for SIGTRAP, keeping its own handler in front). Atomics, because the
/// handler reads them while another thread may be changing them.
static CHAIN_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
/// `sa_flags` of the chained disposition.
static CHAIN_FLAGS: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// Our handler is installed: SIGTRAP dispositions are virtual from then on.
static INSTALLED: AtomicBool = AtomicBool::new(false);

type SigactionFn =
    unsafe extern "C" fn(libc::c_int, *const libc::sigaction, *mut libc::sigaction) -> libc::c_int;

/// libc's `sigaction` (ours is interposed), resolved once at install.
fn real_sigaction() -> Option<SigactionFn> {
    static REAL: std::sync::atomic::AtomicPtr<libc::c_void> =
        std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
    let mut p = REAL.load(Ordering::Relaxed);
    if p.is_null() {
        // SAFETY: dlsym with a NUL-terminated name (never reached from the signal handler:
        // install resolves it first).
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, c"sigaction".as_ptr()) };
        REAL.store(p, Ordering::Relaxed);
    }
    // SAFETY: libc's sigaction has this signature.
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, SigactionFn>(p) })
}

/// The interposed `sigaction`'s work for SIGTRAP once our handler is installed: report
/// and record the target's disposition without touching the kernel's (ours stays).
/// Returns `None` when the call is not ours to virtualise.
pub fn virtual_sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> Option<libc::c_int> {
    if sig != libc::SIGTRAP || !INSTALLED.load(Ordering::Acquire) {
        return None;
    }
    if !old.is_null() {
        // SAFETY: the caller passes a writable sigaction (sigaction(2)'s contract).
        unsafe {
            let mut o: libc::sigaction = std::mem::zeroed();
            o.sa_sigaction = CHAIN_HANDLER.load(Ordering::Relaxed);
            o.sa_flags = CHAIN_FLAGS.load(Ordering::Relaxed);
            *old = o;
        }
    }
    if !act.is_null() {
        // SAFETY: the caller passes a readable sigaction.
        let a = unsafe { &*act };
        CHAIN_FLAGS.store(a.sa_flags, Ordering::Relaxed);
        CHAIN_HANDLER.store(a.sa_sigaction, Ordering::Release);
    }
    Some(0)
}

/// The interposed `signal`'s work for SIGTRAP once our handler is installed.
pub fn virtual_signal(sig: libc::c_int, handler: libc::sighandler_t) -> Option<libc::sighandler_t> {
    if sig != libc::SIGTRAP || !INSTALLED.load(Ordering::Acquire) {
        return None;
    }
    CHAIN_FLAGS.store(libc::SA_RESTART, Ordering::Relaxed);
    Some(CHAIN_HANDLER.swap(handler, Ordering::AcqRel))
}

/// The interposed `sysv_signal`'s work for SIGTRAP: `signal` with System V semantics
/// (the disposition resets after one signal, which is not blocked while it runs).
pub fn virtual_sysv_signal(
    sig: libc::c_int,
    handler: libc::sighandler_t,
) -> Option<libc::sighandler_t> {
    if sig != libc::SIGTRAP || !INSTALLED.load(Ordering::Acquire) {
        return None;
    }
    CHAIN_FLAGS.store(libc::SA_RESETHAND | libc::SA_NODEFER, Ordering::Relaxed);
    Some(CHAIN_HANDLER.swap(handler, Ordering::AcqRel))
}

/// The interposed `siginterrupt`'s work for SIGTRAP: whether a system call the target's
/// SIGTRAP handler interrupts restarts (`flag` 0) or fails with EINTR.
pub fn virtual_siginterrupt(sig: libc::c_int, flag: libc::c_int) -> Option<libc::c_int> {
    if sig != libc::SIGTRAP || !INSTALLED.load(Ordering::Acquire) {
        return None;
    }
    let f = CHAIN_FLAGS.load(Ordering::Relaxed);
    let f = if flag != 0 { f & !libc::SA_RESTART } else { f | libc::SA_RESTART };
    CHAIN_FLAGS.store(f, Ordering::Relaxed);
    Some(0)
}

/// Installs the SIGTRAP handler, keeping the previous disposition for chaining.
pub fn install_handler() -> std::io::Result<()> {
    // SAFETY: sigaction with a fully initialised struct; the handler is an
    // `extern "C" fn(c_int, *mut siginfo_t, *mut c_void)` as SA_SIGINFO requires. The old
    // action is stored before any SIGTRAP can reach our handler.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigtrap
            as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
            as usize;
        // SA_ONSTACK: on the stack the agent maps for each thread it serves (`altstack`),
        // never on the program's (a coroutine's small stack, or a small alternate stack
        // of the program's own, such as Rust's few KiB for its overflow message, which a
        // DWARF walk overflowed). A thread without one runs it on its own stack and
        // walks only with room to spare (`stack::walk`).
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
        // Every asynchronous signal waits while the handler runs: a target handler that
        // interrupted ours and jumped out (siglongjmp) would leave our walk's read
        // section open and the slot mid-update. The synchronous faults stay deliverable
        // (blocking them would turn a fault into a kill).
        libc::sigfillset(&mut sa.sa_mask);
        for s in [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE] {
            libc::sigdelset(&mut sa.sa_mask, s);
        }
        let real = real_sigaction().ok_or_else(|| std::io::Error::other("no sigaction"))?;
        let mut old: libc::sigaction = std::mem::zeroed();
        if real(libc::SIGTRAP, &sa, &mut old) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        CHAIN_FLAGS.store(old.sa_flags, Ordering::Relaxed);
        CHAIN_HANDLER.store(old.sa_sigaction, Ordering::Relaxed);
        INSTALLED.store(true, Ordering::Release);
    }
    Ok(())
}

extern "C" fn on_sigtrap(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: errno is thread-local; saving and restoring it keeps the interrupted code's
    // value intact across our system calls.
    let saved_errno = unsafe { *libc::__errno_location() };
    if info.is_null() {
        return;
    }
    // SAFETY: `info` is the siginfo_t the kernel passed to this SA_SIGINFO handler.
    let si = unsafe { sys::perf_siginfo(info) };
    let ours = (si.code == sys::TRAP_PERF).then(|| slots::decode(si.perf_data)).flatten();
    // Under the program's seccomp filter (or about to be) the agent makes no call: a
    // signal of ours that comes then is dropped.
    let pass = ours.and_then(|_| crate::sandbox::enter());
    if let (Some((index, generation)), Some(_pass)) = (ours, pass) {
        // Tagged as strobe's: the slot it names, if it is still that generation's and
        // belongs to this thread (a stale or foreign signal is dropped, never run on
        // another thread's slot).
        let found = (|| {
            let a = agent()?;
            let ar = arena()?;
            let slot = ar.slots().get(index)?;
            let local = LOCAL.get(index)?;
            let mine = slot.tid.load(Ordering::Relaxed) == sys::gettid() as u32;
            (mine && slot.ctl.lookup(generation)).then_some((a, ar, slot, local))
        })();
        if let Some((a, ar, slot, local)) = found {
            if CALIB_MODE.load(Ordering::Relaxed) != 0 {
                crate::calibrate::on_overflow(a, index, slot, local, uc);
            } else {
                // With ASYNC the thread had SIGTRAP blocked (glibc blocks every signal
                // while it creates a thread, for instance): the signal arrives where the
                // thread unblocked it, a little later than the overflow.
                let late = si.perf_flags & sys::TRAP_PERF_FLAG_ASYNC != 0;
                take_sample(a, ar, index, slot, local, uc, late);
            }
        }
    } else if ours.is_some() {
        // Ours, with the agent stepped aside: nothing to do.
    } else if si.code == libc::SI_TKILL && CALIB_MODE.load(Ordering::Relaxed) != 0 {
        crate::calibrate::on_tkill(uc);
    } else {
        chain(sig, info, uc);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// Passes a SIGTRAP that is not ours to the disposition installed before us.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // Acquire: pairs with the Release store of a handler the target installed.
    let handler = CHAIN_HANDLER.load(Ordering::Acquire);
    let flags = CHAIN_FLAGS.load(Ordering::Relaxed);
    if flags & libc::SA_RESETHAND != 0 && handler != libc::SIG_IGN && handler != libc::SIG_DFL {
        // A one-shot disposition (sysv_signal, SA_RESETHAND): the next SIGTRAP that is not
        // ours gets the default action, as the kernel would have reset it.
        CHAIN_HANDLER.store(libc::SIG_DFL, Ordering::Release);
    }
    match handler {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // Default action of SIGTRAP: terminate with a core. Restore it and re-raise, so
            // the target dies exactly as it would have without strobe.
            // SAFETY: sigaction and raise are async-signal-safe; `dfl` is a valid action.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                if let Some(real) = real_sigaction() {
                    real(sig, &dfl, std::ptr::null_mut());
                }
                libc::raise(sig);
            }
        }
        f if flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the target installed this handler with SA_SIGINFO, so it has this
            // signature.
            let h: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(f) };
            h(sig, info, uc);
        }
        f => {
            // SAFETY: a plain handler installed without SA_SIGINFO.
            let h: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(f) };
            h(sig);
        }
    }
}
