//! Each served thread's own alternate signal stack.
//!
//! The sampler's handler runs with `SA_ONSTACK` on a stack the agent maps for each thread
//! it serves (64 KiB above a guard page), never on the stack the thread was running on:
//! a coroutine's small stack without a guard page, or a program's small alternate stack,
//! would otherwise take the handler's frame and its stack walk.
//!
//! The program's own `sigaltstack` calls are virtual for a served thread: the agent's
//! stack stays installed, the program is told what it set (and, from a handler running
//! on the agent's stack, that it is on its alternate stack), and its own `SA_ONSTACK`
//! handlers run on the agent's stack, which is larger than any it would set. When the
//! thread stops being served, the program's stack is installed for real.
//!
//! Owns: those mappings and the interposed `sigaltstack`. Must never allocate or lock in
//! the interposer (it may run in a signal handler), and never unmap a stack a handler may
//! be running on.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::slots::{Local, LOCAL};
use crate::{own_agent, own_slot};

/// Usable bytes of each stack.
pub const SIZE: usize = 64 << 10;
/// The guard page below it.
const GUARD: usize = 4096;
/// The top of it, faulted in at install.
const PREFAULT: usize = 24 << 10;

/// What a thread's stack and its program's virtual setting are (in its [`Local`]).
#[derive(Debug)]
pub struct AltState {
    /// The mapping's base (guard page included); 0 when none.
    base: AtomicUsize,
    /// The program's own setting: `ss_sp`, `ss_size`, `ss_flags`.
    sp: AtomicUsize,
    size: AtomicUsize,
    flags: AtomicUsize,
}

impl AltState {
    /// None mapped.
    pub const fn empty() -> AltState {
        AltState {
            base: AtomicUsize::new(0),
            sp: AtomicUsize::new(0),
            size: AtomicUsize::new(0),
            flags: AtomicUsize::new(libc::SS_DISABLE as usize),
        }
    }

    /// The usable range `[lo, hi)` of the agent's stack (0, 0 when none).
    #[inline]
    pub fn range(&self) -> (u64, u64) {
        // Relaxed: the owner's own field, read by its handler on the same thread.
        match self.base.load(Ordering::Relaxed) {
            0 => (0, 0),
            b => ((b + GUARD) as u64, (b + GUARD + SIZE) as u64),
        }
    }
}

fn raw_sigaltstack(ss: *const libc::stack_t, old: *mut libc::stack_t) -> libc::c_long {
    // SAFETY: the kernel reads `ss` and writes `old` when non-null; both are valid or null
    // (the callers' contract).
    unsafe { libc::syscall(libc::SYS_sigaltstack, ss, old) }
}

/// Maps and installs the calling thread's stack (thread setup, normal context),
/// remembering the program's own setting as its virtual one. `false` when it could not
/// (then the handler runs on the thread's stack, as it does for unserved threads).
pub fn install(local: &Local) -> bool {
    let a = &local.alt;
    if a.base.load(Ordering::Relaxed) != 0 {
        return true;
    }
    // SAFETY: a zeroed stack_t is a valid out-parameter.
    let mut cur: libc::stack_t = unsafe { std::mem::zeroed() };
    if raw_sigaltstack(std::ptr::null(), &mut cur) != 0 || cur.ss_flags & libc::SS_ONSTACK != 0 {
        return false;
    }
    // SAFETY: an anonymous private mapping; the result is checked.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            SIZE + GUARD,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return false;
    }
    // SAFETY: the first page of our own mapping.
    unsafe { libc::mprotect(base, GUARD, libc::PROT_NONE) };
    // The pages a handler's frame and walk use, faulted in now: a page fault inside the
    // handler would be counted in the thread's window.
    // SAFETY: the top PREFAULT bytes of our writable mapping.
    unsafe {
        let top = base.cast::<u8>().add(GUARD + SIZE);
        std::ptr::write_bytes(top.sub(PREFAULT), 0, PREFAULT);
    }
    let ours = libc::stack_t {
        // SAFETY: GUARD bytes into our mapping, whose usable SIZE bytes follow.
        ss_sp: unsafe { base.cast::<u8>().add(GUARD) }.cast(),
        ss_flags: 0,
        ss_size: SIZE,
    };
    if raw_sigaltstack(&ours, std::ptr::null_mut()) != 0 {
        // SAFETY: unmapping the mapping just made.
        unsafe { libc::munmap(base, SIZE + GUARD) };
        return false;
    }
    // Relaxed: owner-only fields (its handler runs on the same thread).
    a.sp.store(cur.ss_sp as usize, Ordering::Relaxed);
    a.size.store(cur.ss_size, Ordering::Relaxed);
    a.flags.store(cur.ss_flags as usize, Ordering::Relaxed);
    a.base.store(base as usize, Ordering::Relaxed);
    true
}

/// Installs the program's own setting for real and unmaps the agent's stack (the owner,
/// when the thread stops being served; never from a handler running on it).
pub fn remove(local: &Local) {
    let a = &local.alt;
    let base = a.base.swap(0, Ordering::Relaxed);
    if base == 0 {
        return;
    }
    let theirs = libc::stack_t {
        ss_sp: a.sp.load(Ordering::Relaxed) as *mut libc::c_void,
        ss_flags: a.flags.load(Ordering::Relaxed) as libc::c_int,
        ss_size: a.size.load(Ordering::Relaxed),
    };
    if raw_sigaltstack(&theirs, std::ptr::null_mut()) != 0 {
        let off =
            libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
        raw_sigaltstack(&off, std::ptr::null_mut());
    }
    // SAFETY: our mapping, installed no more.
    unsafe { libc::munmap(base as *mut libc::c_void, SIZE + GUARD) };
}

/// A forked child: the parent's threads' stacks were copied into it. The forking thread's
/// own (if it was served) gives way to its program's setting; every copy is unmapped.
pub fn forget_in_child(own: Option<usize>) {
    for (i, local) in LOCAL.iter().enumerate() {
        if local.alt.base.load(Ordering::Relaxed) == 0 {
            continue;
        }
        if Some(i) == own {
            remove(local);
        } else {
            let base = local.alt.base.swap(0, Ordering::Relaxed);
            // SAFETY: the child's copy of another thread's mapping; no thread here runs on it.
            unsafe { libc::munmap(base as *mut libc::c_void, SIZE + GUARD) };
        }
    }
}

/// Interposes `sigaltstack`: virtual for a thread the agent serves with its own stack.
///
/// # Safety
/// Same contract as libc's `sigaltstack`.
#[no_mangle]
pub unsafe extern "C" fn sigaltstack(
    ss: *const libc::stack_t,
    old: *mut libc::stack_t,
) -> libc::c_int {
    let local = own_agent().and_then(|_| own_slot()).and_then(|i| LOCAL.get(i));
    let Some(local) = local.filter(|l| l.alt.base.load(Ordering::Relaxed) != 0) else {
        return raw_sigaltstack(ss, old) as libc::c_int;
    };
    let a = &local.alt;
    let (lo, hi) = a.range();
    let here = std::ptr::addr_of!(lo) as u64;
    let on_ours = (lo..hi).contains(&here);
    if !old.is_null() {
        let mut flags = a.flags.load(Ordering::Relaxed) as libc::c_int;
        if on_ours && flags & libc::SS_DISABLE == 0 {
            flags |= libc::SS_ONSTACK;
        }
        // SAFETY: the caller passes a writable stack_t (sigaltstack(2)'s contract).
        unsafe {
            *old = libc::stack_t {
                ss_sp: a.sp.load(Ordering::Relaxed) as *mut libc::c_void,
                ss_flags: flags,
                ss_size: a.size.load(Ordering::Relaxed),
            }
        };
    }
    if ss.is_null() {
        return 0;
    }
    // SAFETY: the caller passes a readable stack_t.
    let new = unsafe { &*ss };
    let errno = |e| {
        // SAFETY: errno is thread-local.
        unsafe { *libc::__errno_location() = e };
        -1
    };
    if on_ours {
        return errno(libc::EPERM);
    }
    const SS_AUTODISARM: libc::c_int = 1 << 31;
    let kind = new.ss_flags & !SS_AUTODISARM;
    if kind != 0 && kind != libc::SS_DISABLE {
        return errno(libc::EINVAL);
    }
    if kind == 0 && new.ss_size < libc::MINSIGSTKSZ {
        return errno(libc::ENOMEM);
    }
    a.sp.store(new.ss_sp as usize, Ordering::Relaxed);
    a.size.store(new.ss_size, Ordering::Relaxed);
    a.flags.store(new.ss_flags as usize, Ordering::Relaxed);
    0
}
