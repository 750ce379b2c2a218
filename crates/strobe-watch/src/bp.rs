//! Hardware breakpoint events: the `perf_event_attr` of a watchpoint, re-targeting a slot,
//! and decoding the SIGTRAP a hit raises.
//!
//! A watchpoint is a `PERF_TYPE_BREAKPOINT` event with `bp_addr`, `bp_len` and `bp_type`.
//! [`Mode::Count`] only counts hits. [`Mode::Trap`] has the kernel send a synchronous
//! SIGTRAP to the accessing thread on every hit (perf's `sigtrap`, `si_code == TRAP_PERF`),
//! carrying the attr's `sig_data` (strobe puts the logical watchpoint's index there); the
//! event is removed on exec, as the kernel requires of `sigtrap` events. With
//! [`Scope::Process`] it is inherited by every thread the target creates (`inherit` and
//! `inherit_thread`, which keeps it out of forked children).
//!
//! Every attr is a pure function of ([`Breakpoint`], [`Mode`], [`Scope`]), so a slot can
//! be pointed at another watchpoint with `PERF_EVENT_IOC_MODIFY_ATTRIBUTES` ([`retarget`]):
//! the kernel accepts a modification only when every field other than the address, length,
//! type, `disabled` and `sig_data` is unchanged.
//!
//! [`PerfTrap::from_siginfo`] and [`retarget`] are async-signal-safe. Opening is not.
//!
//! Must never allocate, lock or panic in the async-signal-safe functions above.

use std::io;
use std::os::fd::RawFd;

use strobe_perf::sys::{self, perf_event_attr};
use strobe_perf::{OpenError, PerfEvent, Target};

use crate::spec::{Access, Len};

/// Where a watchpoint is and what it traps on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breakpoint {
    /// The run-time address, aligned to `len`.
    pub addr: u64,
    /// Bytes covered.
    pub len: Len,
    /// Which accesses trigger it.
    pub access: Access,
}

/// What a hit does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Count hits; read the count with `read(2)`.
    Count,
    /// Raise a synchronous SIGTRAP in the accessing thread with `si_perf_data = sig_data`.
    Trap {
        /// Handed to the handler in `si_perf_data`.
        sig_data: u64,
    },
}

/// Which threads the event covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Only the thread it is opened on.
    Thread,
    /// That thread and every thread it (transitively) creates, not forked children.
    Process,
}

/// The attr of a watchpoint event, created disabled, user space only.
pub fn attr(bp: Breakpoint, mode: Mode, scope: Scope) -> perf_event_attr {
    let mut a = sys::new_attr(sys::PERF_TYPE_BREAKPOINT, 0);
    a.bp_type = bp.access.bp_type();
    a.__bindgen_anon_3.bp_addr = bp.addr;
    a.__bindgen_anon_4.bp_len = bp.len.bp_len();
    if let Mode::Trap { sig_data } = mode {
        // Overflow on every hit; the overflow raises the signal.
        a.__bindgen_anon_1.sample_period = 1;
        a.set_sigtrap(1);
        // The kernel refuses sigtrap without remove_on_exec: a new image has no handler.
        a.set_remove_on_exec(1);
        a.sig_data = sig_data;
    }
    if scope == Scope::Process {
        a.set_inherit(1);
        a.set_inherit_thread(1);
    }
    a
}

/// Opens a watchpoint event on `target`. `what` names it in errors (the watch spec).
///
/// ENOSPC (all debug registers of the thread in use) becomes
/// [`OpenError::NoDebugRegisters`]; a permission problem names `perf_event_paranoid`.
pub fn open(
    bp: Breakpoint,
    mode: Mode,
    scope: Scope,
    target: Target,
    what: &str,
) -> Result<PerfEvent, OpenError> {
    PerfEvent::open(&attr(bp, mode, scope), target, None, what)
}

/// Points an open watchpoint event at another location (and, in [`Mode::Trap`], another
/// `sig_data`) with `PERF_EVENT_IOC_MODIFY_ATTRIBUTES`. `mode` and `scope` must be the
/// ones it was opened with. With [`Scope::Process`] the kernel applies the change to the
/// inherited copies in every thread too. All or nothing. Async-signal-safe.
pub fn retarget(event: &PerfEvent, bp: Breakpoint, mode: Mode, scope: Scope) -> io::Result<()> {
    retarget_fd(event.raw_fd(), bp, mode, scope)
}

/// As [`retarget`], on the raw fd of a watchpoint event opened without [`open`] (the
/// agent's threads open their own with the `perf_event_open` system call, which allocates
/// nothing). `fd` must be a perf event fd. Async-signal-safe.
pub fn retarget_fd(fd: RawFd, bp: Breakpoint, mode: Mode, scope: Scope) -> io::Result<()> {
    let mut a = attr(bp, mode, scope);
    // The open attr was created disabled and then enabled with an ioctl; the kernel
    // compares `disabled` too, but also copies it, so keep the event enabled.
    a.set_disabled(0);
    // SAFETY: MODIFY_ATTRIBUTES reads one `perf_event_attr` through the pointer during the
    // call; `a` is a valid, initialised attr with its size set, and outlives the call.
    let r =
        unsafe { libc::ioctl(fd, sys::ioctl::MODIFY_ATTRIBUTES, &mut a as *mut perf_event_attr) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// What the kernel says about a SIGTRAP raised by a perf event (`si_code == TRAP_PERF`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerfTrap {
    /// `si_perf_data`: the attr's `sig_data` (strobe: the logical watchpoint index).
    pub data: u64,
    /// `si_perf_type`: the event's type (`PERF_TYPE_BREAKPOINT` for a watchpoint).
    pub type_: u32,
    /// `si_perf_flags`: [`sys::TRAP_PERF_FLAG_ASYNC`] when the signal could not be delivered
    /// synchronously (the thread had SIGTRAP blocked), so the interrupted context is not
    /// the access.
    pub flags: u32,
}

impl PerfTrap {
    /// Decodes `info`, or `None` when the SIGTRAP has another cause (a debugger, `int3`, a
    /// `kill`). Async-signal-safe.
    ///
    /// # Safety
    /// `info` must point to the `siginfo_t` the kernel passed to an `SA_SIGINFO` handler.
    pub unsafe fn from_siginfo(info: *const libc::siginfo_t) -> Option<PerfTrap> {
        // SAFETY: the caller passes a kernel-filled siginfo_t, which is 128 bytes; the
        // reads below stay inside it.
        let si = unsafe { &*info };
        if si.si_signo != libc::SIGTRAP || si.si_code != sys::TRAP_PERF {
            return None;
        }
        // The kernel's layout (x86-64 and arm64): signo, errno, code (3 x i32) and padding,
        // then `_sigfault { void *_addr; union { struct { unsigned long _data; u32 _type;
        // u32 _flags; } _perf; ... } }`, so `_data` is at 24, `_type` at 32, `_flags` at 36.
        let base = info.cast::<u8>();
        // SAFETY: offsets 24..40 lie within the 128-byte siginfo_t; unaligned reads make
        // no assumption about the pointer's alignment.
        unsafe {
            Some(PerfTrap {
                data: base.add(24).cast::<u64>().read_unaligned(),
                type_: base.add(32).cast::<u32>().read_unaligned(),
                flags: base.add(36).cast::<u32>().read_unaligned(),
            })
        }
    }

    /// True when the hit was reported asynchronously (SIGTRAP blocked in the thread): the
    /// handler's context is not the accessing instruction, so the report marks it
    /// imprecise.
    pub fn is_async(&self) -> bool {
        self.flags & sys::TRAP_PERF_FLAG_ASYNC != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attrs_encode_the_breakpoint() {
        let bp = Breakpoint { addr: 0x1000, len: Len::B4, access: Access::Write };
        let a = attr(bp, Mode::Count, Scope::Thread);
        // SAFETY: reading plain integer union fields this code just wrote.
        let (addr, len) = unsafe { (a.__bindgen_anon_3.bp_addr, a.__bindgen_anon_4.bp_len) };
        assert_eq!((a.type_, a.bp_type, addr, len), (sys::PERF_TYPE_BREAKPOINT, 2, 0x1000, 4));
        assert_eq!((a.sigtrap(), a.inherit(), a.exclude_kernel(), a.disabled()), (0, 0, 1, 1));
        let t = attr(bp, Mode::Trap { sig_data: 7 }, Scope::Process);
        // SAFETY: as above.
        let period = unsafe { t.__bindgen_anon_1.sample_period };
        assert_eq!((t.sigtrap(), t.remove_on_exec(), t.sig_data, period), (1, 1, 7, 1));
        assert_eq!((t.inherit(), t.inherit_thread()), (1, 1));
    }
}
