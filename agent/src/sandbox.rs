//! Seccomp sandboxes: the agent steps aside before a program's filter can forbid its
//! system calls.
//!
//! A program may confine itself with a seccomp filter (OpenSSH's privilege separation,
//! libseccomp users such as QEMU and Tor, browsers' renderers), or be started under one
//! (bwrap, minijail, systemd's `SystemCallFilter=`, container runtimes). The agent makes
//! system calls in the program's threads: `ioctl` and `read` on its perf events at every
//! sample, `perf_event_open` for each new thread, `close` at thread exit. A filter that
//! forbids one kills the program (`SECCOMP_RET_KILL_*`), raises SIGSYS (`RET_TRAP`) or
//! fails the call (`RET_ERRNO`): measured here, a program whose filter kills on `ioctl`
//! died at its first sample (SIGSYS, exit 159), one whose filter refused it lost half its
//! samples. So:
//!
//! - `prctl(PR_SET_SECCOMP, ...)` and `syscall(SYS_seccomp, ...)`, the two ways libc
//!   offers (libseccomp's `seccomp_load` uses the second, OpenSSH and bwrap the first),
//!   are interposed. Before an install reaches the kernel the agent stops in the whole
//!   process: it says so (a NOTE, and `strobe record` prints it), stops setting up new
//!   threads, waits for every handler already past its check to finish, and closes the
//!   calling thread's events. From then on no code of the agent makes a system call in
//!   that process or the children it forks; the kernel floor (`strobe record`'s own
//!   events, outside the filter) samples it on, without windows.
//! - An image that starts under a filter `strobe record` itself does not run under (a
//!   launcher installed it, then exec'd) leaves the agent off from the start, with a note.
//!   A filter `strobe record` shares (a container's) is not the program's doing and allowed
//!   the recorder's own calls: the agent runs there.
//! - A filter installed by a raw system call (code that issues `seccomp` or `prctl` in its
//!   own assembly) passes neither wrapper: a documented limit.
//!
//! Owns: the gate (crate strobe-sampler's `gate`) that agent code passes before it makes
//! system calls ([`enter`]), the two interposed functions and the raw system call that
//! forwards them. Must never change what the program's call does or returns (arguments,
//! result and `errno` are the kernel's), allocate or lock on the paths a signal handler
//! takes, or make a system call of the agent's once the gate is closed.

use std::sync::atomic::Ordering;

use strobe_sampler::gate::{Gate, Pass};

/// Closed once, before the program's filter is installed (or at start, under a filter):
/// the agent makes no more system calls in this process. Agent code that may make one
/// (handlers, thread set-up, the mask and exec wrappers) runs under a pass.
static GATE: Gate = Gate::new();

/// Whether the agent has stepped aside in this process (a hint: [`enter`] is the check).
#[inline]
pub fn active() -> bool {
    GATE.is_closed()
}

/// Permission to make system calls, unless the agent has stepped aside. Async-signal-safe.
#[inline]
pub fn enter() -> Option<Pass<'static>> {
    GATE.enter()
}

/// The longest `step_aside` waits for code in flight (a handler of a thread that lost its
/// CPU mid-way): far beyond any handler's length, short of a user's patience.
const WAIT_NS: u64 = 1_000_000_000;

/// Stops the agent in this process before a seccomp filter goes in (`how`: the call).
/// Runs in the installing thread, before the kernel sees the filter.
fn step_aside(how: &str) {
    // A vfork child (our memory, its own pid, no events of ours) or an image the agent
    // never started in: nothing of ours runs in it, and a vfork parent's agent, whose
    // memory this is, must go on.
    let Some(a) = crate::own_agent() else { return };
    if GATE.is_closed() {
        return;
    }
    // Said first, while writing the record file is still allowed.
    crate::chunks::note(
        a,
        strobe_format::NoteLevel::Warning,
        format!(
            "pid {} ({}) installs a seccomp filter ({how}): the agent stops in it before the \
             filter can forbid its system calls; the kernel floor samples it on, without \
             window metrics",
            a.pid,
            strobe_protocol::status::Status::of_this_thread().name,
        ),
    );
    crate::ENABLED.store(false, Ordering::Release);
    if !GATE.close() {
        return;
    }
    let from = crate::clock::mono_ns();
    while GATE.in_flight() != 0 {
        if crate::clock::mono_ns().saturating_sub(from) > WAIT_NS {
            break;
        }
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
    // Every other thread's leader stops and its served stretch ends now: the kernel
    // floor samples them from here. This thread's own events: closed while it may still
    // (no filter yet), so no overflow of ours is delivered to it afterwards, and its last
    // block goes to the recorder now. Other threads' events stay open (disabled): their
    // blocks reach the recorder when the process ends.
    let own = crate::own_slot();
    crate::sampler::stop_other_threads(own);
    if let Some(i) = own {
        crate::sampler::close_slot(i, false);
    }
}

/// At start: whether this image runs under a filter `strobe record` does not (given the
/// thread's `status` and the recorder's count of filters); if so the agent stays off here,
/// and says so through the arena (`ar`), which needs no system call.
pub fn filtered_at_start(
    ar: &strobe_protocol::Arena,
    status: &strobe_protocol::status::Status,
    recorder_filters: u32,
) -> bool {
    let s = status.seccomp;
    if !s.beyond(recorder_filters) {
        return false;
    }
    GATE.close();
    ar.push_note(&format!(
        "pid {} ({}) started under a seccomp filter that strobe record does not run under \
         (it has {} seccomp filters, strobe record {recorder_filters}): the agent stays off \
         in it, so that its system calls cannot break the program; the kernel floor samples \
         it, without window metrics",
        // SAFETY: getpid has no preconditions.
        unsafe { libc::getpid() },
        status.name,
        s.filters,
    ));
    true
}

/// `seccomp(2)`'s operations that install (strict mode, a filter).
const SET_MODE_STRICT: u64 = 0;
const SET_MODE_FILTER: u64 = 1;
/// `prctl(PR_SET_SECCOMP, mode)`'s modes.
const MODE_STRICT: u64 = 1;
const MODE_FILTER: u64 = 2;

/// Whether `seccomp(op, flags, args)` would install something. Probes that the kernel
/// refuses before looking at a filter install nothing: strict mode with flags or
/// arguments (libseccomp's test for the call), a filter from a null program (a common
/// test of whether filters are supported).
fn seccomp_installs(op: u64, flags: u64, args: u64) -> bool {
    match op {
        SET_MODE_STRICT => flags == 0 && args == 0,
        SET_MODE_FILTER => args != 0,
        _ => false,
    }
}

/// Whether `prctl(option, a2, a3)` would install something (the same probes as above).
fn prctl_installs(option: u64, a2: u64, a3: u64) -> bool {
    option == libc::PR_SET_SECCOMP as u64
        && match a2 {
            MODE_STRICT => true,
            MODE_FILTER => a3 != 0,
            _ => false,
        }
}

/// The system call `nr` with six arguments, as libc's `syscall` makes it: the kernel's
/// result, or -1 with `errno` set from an error.
#[inline]
fn raw(nr: libc::c_long, a: [libc::c_long; 6]) -> libc::c_long {
    let r: libc::c_long;
    // SAFETY: a system call with the caller's arguments, exactly as libc's `syscall`
    // makes it; the registers the kernel clobbers are declared.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!(
            "syscall",
            inlateout("rax") nr => r,
            in("rdi") a[0], in("rsi") a[1], in("rdx") a[2],
            in("r10") a[3], in("r8") a[4], in("r9") a[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        core::arch::asm!(
            "svc 0",
            in("x8") nr,
            inlateout("x0") a[0] => r,
            in("x1") a[1], in("x2") a[2], in("x3") a[3], in("x4") a[4], in("x5") a[5],
            options(nostack),
        );
    }
    if (-4095..0).contains(&r) {
        // SAFETY: errno is thread-local.
        unsafe { *libc::__errno_location() = (-r) as libc::c_int };
        return -1;
    }
    r
}

/// Interposes `syscall`: a seccomp install first stops the agent; every call then goes to
/// the kernel unchanged, as libc's would.
///
/// Declared with six fixed arguments: on x86-64 and AArch64 Linux a variadic call passes
/// its integer arguments in the same registers (and stack slot) as a fixed one, and
/// libc's own `syscall` reads all six whatever the caller passed.
///
/// # Safety
/// Same contract as libc's `syscall`.
#[no_mangle]
pub unsafe extern "C" fn syscall(
    nr: libc::c_long,
    a1: libc::c_long,
    a2: libc::c_long,
    a3: libc::c_long,
    a4: libc::c_long,
    a5: libc::c_long,
    a6: libc::c_long,
) -> libc::c_long {
    if nr == libc::SYS_seccomp && seccomp_installs(a1 as u64, a2 as u64, a3 as u64) {
        step_aside(if a1 as u64 == SET_MODE_STRICT {
            "seccomp(2), strict mode"
        } else {
            "seccomp(2)"
        });
    }
    raw(nr, [a1, a2, a3, a4, a5, a6])
}

/// Interposes `prctl`: as [`syscall`] for `PR_SET_SECCOMP`.
///
/// # Safety
/// Same contract as libc's `prctl`.
#[no_mangle]
pub unsafe extern "C" fn prctl(
    option: libc::c_int,
    a2: libc::c_ulong,
    a3: libc::c_ulong,
    a4: libc::c_ulong,
    a5: libc::c_ulong,
) -> libc::c_int {
    if prctl_installs(option as u64, a2, a3) {
        step_aside(if a2 == MODE_STRICT { "prctl, strict mode" } else { "prctl" });
    }
    let a = [option as libc::c_long, a2 as _, a3 as _, a4 as _, a5 as _, 0];
    raw(libc::SYS_prctl, a) as libc::c_int
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installs_are_told_from_probes() {
        assert!(seccomp_installs(SET_MODE_STRICT, 0, 0));
        assert!(!seccomp_installs(SET_MODE_STRICT, 1, 0), "libseccomp's probe: EINVAL");
        assert!(seccomp_installs(SET_MODE_FILTER, 8, 0x1000), "TSYNC with a program");
        assert!(!seccomp_installs(SET_MODE_FILTER, 0, 0), "a null program: EFAULT");
        assert!(!seccomp_installs(2, 0, 0x1000), "SECCOMP_GET_ACTION_AVAIL");
        assert!(prctl_installs(libc::PR_SET_SECCOMP as u64, MODE_FILTER, 0x1000));
        assert!(prctl_installs(libc::PR_SET_SECCOMP as u64, MODE_STRICT, 0));
        assert!(!prctl_installs(libc::PR_SET_SECCOMP as u64, MODE_FILTER, 0));
        assert!(!prctl_installs(libc::PR_GET_SECCOMP as u64, 0, 0));
        assert!(!prctl_installs(libc::PR_SET_NAME as u64, MODE_FILTER, 0x1000));
    }

    /// The forwarding call gives the kernel's results and errors as libc does.
    #[test]
    fn the_raw_call_returns_results_and_sets_errno() {
        // SAFETY: getpid has no preconditions.
        assert_eq!(raw(libc::SYS_getpid, [0; 6]), unsafe { libc::getpid() } as libc::c_long);
        assert_eq!(raw(libc::SYS_close, [-1, 0, 0, 0, 0, 0]), -1);
        assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EBADF));
        let mut name = [0u8; 16];
        let a = [libc::PR_GET_NAME as libc::c_long, name.as_mut_ptr() as libc::c_long, 0, 0, 0, 0];
        assert_eq!(raw(libc::SYS_prctl, a), 0);
        assert!(name[0] != 0, "the thread's name");
    }
}
