//! Threads that block the sampler's signal. perf's `sigtrap` raises SIGTRAP in the
//! overflowing thread; a thread that has it blocked keeps the signal pending and is never
//! sampled (many libraries start their workers with every signal blocked, and servers
//! block all signals in every thread but one that calls `sigwait`). Such a thread is left
//! to the kernel floor, which samples every task whatever its mask:
//!
//! - a thread whose mask blocks SIGTRAP when the agent sets it up gets its slot but is
//!   not armed (the recorder keeps the floor's samples of it);
//! - `sigprocmask` and `pthread_sigmask` are interposed: before a call that blocks
//!   SIGTRAP takes effect, the thread's sampling is paused (its events disabled while the
//!   signal can still be delivered, its served stretch ended), and after a call that
//!   unblocks it, sampling resumes.
//!
//! The target's mask is never changed: the calls pass through with their arguments.
//! Raw `rt_sigprocmask` system calls are not seen; a thread that blocks SIGTRAP that way
//! keeps its slot, and the report names the CPU time its samples miss.
//!
//! Owns: the interposers and the masked flag of each slot. Must never allocate or lock:
//! both functions are async-signal-safe and may be called from the target's handlers;
//! only ioctl, clock_gettime and atomics are used on the way.

use std::sync::atomic::{AtomicPtr, Ordering};

use crate::slots::LOCAL;
use crate::{arena, own_agent, own_slot, sampler};

type MaskFn =
    unsafe extern "C" fn(libc::c_int, *const libc::sigset_t, *mut libc::sigset_t) -> libc::c_int;

/// libc's function of this name, found once (dlsym is not async-signal-safe, but it is
/// called here only on the first call, made from normal context at agent start).
fn real(cache: &AtomicPtr<libc::c_void>, name: &std::ffi::CStr) -> Option<MaskFn> {
    let mut p = cache.load(Ordering::Relaxed);
    if p.is_null() {
        // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds libc's definition.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        cache.store(p, Ordering::Relaxed);
    }
    // SAFETY: both functions have this signature.
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, MaskFn>(p) })
}

static REAL_SIGPROCMASK: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());
static REAL_PTHREAD_SIGMASK: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Resolves both real functions (at agent start, in normal context).
pub fn resolve() {
    let _ = real(&REAL_SIGPROCMASK, c"sigprocmask");
    let _ = real(&REAL_PTHREAD_SIGMASK, c"pthread_sigmask");
}

/// Whether the calling thread's mask blocks SIGTRAP now.
pub fn trap_blocked_now() -> bool {
    // SAFETY: a zeroed sigset is a valid out-parameter; a null `set` only reads the mask.
    unsafe {
        let mut cur: libc::sigset_t = std::mem::zeroed();
        let Some(f) = real(&REAL_PTHREAD_SIGMASK, c"pthread_sigmask") else { return false };
        f(libc::SIG_BLOCK, std::ptr::null(), &mut cur) == 0
            && libc::sigismember(&cur, libc::SIGTRAP) == 1
    }
}

/// Whether SIGTRAP is blocked after `how` with `set` on a mask where it was `before`.
fn blocked_after(how: libc::c_int, set: &libc::sigset_t, before: bool) -> bool {
    // SAFETY: `set` is a valid sigset.
    let member = unsafe { libc::sigismember(set, libc::SIGTRAP) } == 1;
    match how {
        libc::SIG_BLOCK => before || member,
        libc::SIG_UNBLOCK => before && !member,
        libc::SIG_SETMASK => member,
        _ => before, // EINVAL from libc; nothing changes
    }
}

/// The shared body of both interposers.
///
/// # Safety
/// `set` and `old` as the real function's contract says.
unsafe fn interpose(
    f: Option<MaskFn>,
    how: libc::c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> libc::c_int {
    let Some(f) = f else {
        // SAFETY: errno is thread-local.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    };
    let idx = if set.is_null() || own_agent().is_none() { None } else { own_slot() };
    // Under the program's seccomp filter the agent makes no call: forwarded unchanged.
    let pass = idx.and_then(|_| crate::sandbox::enter());
    let idx = pass.as_ref().and(idx);
    let Some((idx, local)) = idx.and_then(|i| Some((i, LOCAL.get(i)?))) else {
        // SAFETY: forwarded unchanged.
        return unsafe { f(how, set, old) };
    };
    let was = local.masked.load(Ordering::Relaxed);
    // SAFETY: `set` is non-null and valid (the caller's contract).
    let will = blocked_after(how, unsafe { &*set }, was);
    if will && !was {
        // Paused while SIGTRAP can still be delivered: an overflow before the pause is
        // handled, none comes after.
        sampler::pause(idx);
        local.masked.store(true, Ordering::Relaxed);
        count_once(idx);
    }
    // SAFETY: forwarded unchanged.
    let rc = unsafe { f(how, set, old) };
    // SAFETY: errno is thread-local; kept across our re-arm.
    let errno = unsafe { *libc::__errno_location() };
    let now_blocked = if rc == 0 { will } else { was };
    if !now_blocked && local.masked.load(Ordering::Relaxed) {
        local.masked.store(false, Ordering::Relaxed);
        sampler::arm(idx, None);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    rc
}

/// Counts a thread in the arena's signal-blocked count, once per slot owner.
pub fn count_once(idx: usize) {
    if let Some(local) = LOCAL.get(idx) {
        if !local.counted_blocked.swap(true, Ordering::Relaxed) {
            if let Some(ar) = arena() {
                ar.count_signal_blocked();
            }
        }
    }
}

/// Interposes `sigprocmask`: see the module note.
///
/// # Safety
/// Same contract as libc's `sigprocmask`.
#[no_mangle]
pub unsafe extern "C" fn sigprocmask(
    how: libc::c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> libc::c_int {
    // SAFETY: forwarded under the caller's contract.
    unsafe { interpose(real(&REAL_SIGPROCMASK, c"sigprocmask"), how, set, old) }
}

/// Interposes `pthread_sigmask` (it returns an error number instead of setting errno).
///
/// # Safety
/// Same contract as libc's `pthread_sigmask`.
#[no_mangle]
pub unsafe extern "C" fn pthread_sigmask(
    how: libc::c_int,
    set: *const libc::sigset_t,
    old: *mut libc::sigset_t,
) -> libc::c_int {
    // SAFETY: forwarded under the caller's contract.
    unsafe { interpose(real(&REAL_PTHREAD_SIGMASK, c"pthread_sigmask"), how, set, old) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_of(sigs: &[libc::c_int]) -> libc::sigset_t {
        // SAFETY: sigemptyset/sigaddset on a local set.
        unsafe {
            let mut s: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut s);
            for &g in sigs {
                libc::sigaddset(&mut s, g);
            }
            s
        }
    }

    #[test]
    fn how_each_call_changes_whether_sigtrap_is_blocked() {
        let trap = set_of(&[libc::SIGTRAP, libc::SIGINT]);
        let other = set_of(&[libc::SIGINT]);
        assert!(blocked_after(libc::SIG_BLOCK, &trap, false));
        assert!(!blocked_after(libc::SIG_BLOCK, &other, false));
        assert!(blocked_after(libc::SIG_BLOCK, &other, true));
        assert!(!blocked_after(libc::SIG_UNBLOCK, &trap, true));
        assert!(blocked_after(libc::SIG_UNBLOCK, &other, true));
        assert!(blocked_after(libc::SIG_SETMASK, &trap, false));
        assert!(!blocked_after(libc::SIG_SETMASK, &other, true));
        assert!(blocked_after(999, &other, true), "a bad `how` changes nothing");
    }
}
