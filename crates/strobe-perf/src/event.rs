//! One perf event fd and the operations strobe performs on it.
//!
//! Every method is a single system call on a raw fd and allocates nothing, so the agent
//! may call [`PerfEvent::read_into`], [`PerfEvent::set_period`], [`PerfEvent::refresh`]
//! and friends from a signal handler. Opening an event is not signal-safe (it may format
//! an error message); do it in normal context.
//!
//! Owns the fd of an open event ([`PerfEvent`], closed on drop), the per-fd operations
//! (enable, disable, refresh, period, id, reads) and the layout of a group read
//! ([`GroupRead`]). It must never allocate or lock in an operation on an open event, never
//! build attrs (that is `spec.rs` and its callers') and never decide what a failure means
//! beyond naming it ([`OpenError`] diagnoses an open).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::OpenError;
use crate::sys::{self, ioctl, perf_event_attr};

/// Which task(s) and CPU(s) an event counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// A thread id, a process id (with `inherit`), `0` for the calling thread, or `-1` for
    /// all tasks (CPU-wide, needs privilege).
    pub pid: libc::pid_t,
    /// A CPU number, or `-1` for any CPU the task runs on.
    pub cpu: libc::c_int,
}

impl Target {
    /// The calling thread, on whatever CPU it runs.
    pub const CALLING_THREAD: Target = Target { pid: 0, cpu: -1 };

    /// A given thread (or process), on whatever CPU it runs.
    pub fn thread(tid: libc::pid_t) -> Target {
        Target { pid: tid, cpu: -1 }
    }
}

/// An open perf event. Closing the fd (drop) removes the event.
#[derive(Debug)]
pub struct PerfEvent {
    fd: OwnedFd,
}

impl PerfEvent {
    /// Opens an event described by `attr` on `target`, as a member of `group`'s group when
    /// given (the group leader must be opened first). `what` names the event in errors
    /// (e.g. `"task-clock"` or `"uprobe ./a.out:main"`).
    ///
    /// The fd is close-on-exec.
    pub fn open(
        attr: &perf_event_attr,
        target: Target,
        group: Option<&PerfEvent>,
        what: &str,
    ) -> Result<PerfEvent, OpenError> {
        let mut attr = *attr;
        let group_fd = group.map_or(-1, |g| g.fd.as_raw_fd());
        // SAFETY: `attr` is a valid, initialised local copy whose size field was set by
        // `sys::new_attr` (or by the caller for a hand-built attr); pointers inside it are
        // the caller's responsibility and are documented on the builders that set them.
        let fd = unsafe {
            sys::perf_event_open(
                &mut attr,
                target.pid,
                target.cpu,
                group_fd,
                sys::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
            )
        };
        if fd < 0 {
            let err = io::Error::last_os_error();
            return Err(OpenError::diagnose(err, &attr, target.pid, what));
        }
        // SAFETY: the kernel just returned this fd to us and nothing else owns it.
        Ok(PerfEvent { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    /// The raw fd (for poll, mmap, fcntl). The event keeps ownership.
    #[inline]
    pub fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// This event's descriptor by number, for the async-signal-safe operations.
    #[inline]
    pub fn handle(&self) -> EventFd {
        EventFd(self.raw_fd())
    }

    /// Moves the event to the lowest free descriptor number at or above `min`
    /// (close-on-exec, like every event fd) and closes the old number: the event itself
    /// is unchanged. Returns the new number. For code that must keep its descriptors
    /// out of a program's way (the agent places its own high).
    pub fn relocate(&mut self, min: RawFd) -> io::Result<RawFd> {
        // SAFETY: F_DUPFD_CLOEXEC takes a plain minimum and returns a new fd we own.
        let fd = unsafe { libc::fcntl(self.raw_fd(), libc::F_DUPFD_CLOEXEC, min) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just returned `fd`, a duplicate nothing else owns; the old
        // OwnedFd is dropped (closed) by the assignment.
        self.fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(fd)
    }

    /// Gives up ownership: the caller closes the descriptor (the event lives until it is
    /// closed).
    pub fn into_raw_fd(self) -> RawFd {
        std::os::fd::IntoRawFd::into_raw_fd(self.fd)
    }

    /// Starts counting (`PERF_EVENT_IOC_ENABLE`). Async-signal-safe.
    #[inline]
    pub fn enable(&self) -> io::Result<()> {
        self.handle().enable()
    }

    /// Starts counting for the whole group this event leads. Async-signal-safe.
    #[inline]
    pub fn enable_group(&self) -> io::Result<()> {
        self.handle().enable_group()
    }

    /// Stops counting (`PERF_EVENT_IOC_DISABLE`). Async-signal-safe.
    #[inline]
    pub fn disable(&self) -> io::Result<()> {
        self.handle().disable()
    }

    /// Stops counting for the whole group this event leads. Async-signal-safe.
    #[inline]
    pub fn disable_group(&self) -> io::Result<()> {
        self.handle().disable_group()
    }

    /// Zeroes the count (`PERF_EVENT_IOC_RESET`). Async-signal-safe.
    #[inline]
    pub fn reset(&self) -> io::Result<()> {
        self.handle().reset()
    }

    /// Lets a sampling event overflow `n` more times before it disables itself
    /// (`PERF_EVENT_IOC_REFRESH`); with `n = 1` the event is armed one-shot. Also enables
    /// the event. Async-signal-safe.
    #[inline]
    pub fn refresh(&self, n: i32) -> io::Result<()> {
        self.handle().refresh(n)
    }

    /// Changes the sample period (`PERF_EVENT_IOC_PERIOD`); takes effect at the next
    /// overflow (or at once if the event is stopped). Async-signal-safe.
    #[inline]
    pub fn set_period(&self, period: u64) -> io::Result<()> {
        self.handle().set_period(period)
    }

    /// The kernel's unique id of this event (`PERF_EVENT_IOC_ID`), as found in group reads
    /// with `PERF_FORMAT_ID` and in ring-buffer samples.
    pub fn id(&self) -> io::Result<u64> {
        let mut id = 0u64;
        // SAFETY: ID writes one u64 through the pointer during the call; `id` outlives it.
        ioctl_result(unsafe { libc::ioctl(self.raw_fd(), ioctl::ID, &mut id as *mut u64) })?;
        Ok(id)
    }

    /// Reads the event (or its group, with `PERF_FORMAT_GROUP`) into `buf` with one
    /// `read(2)`, returning the number of u64 words filled. Async-signal-safe.
    #[inline]
    pub fn read_into(&self, buf: &mut [u64]) -> io::Result<usize> {
        self.handle().read_into(buf)
    }

    /// Reads a single non-group counter (read_format 0). Async-signal-safe.
    #[inline]
    pub fn read_count(&self) -> io::Result<u64> {
        let mut buf = [0u64; 1];
        match self.read_into(&mut buf)? {
            1 => Ok(buf[0]),
            n => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("perf read returned {n} words, expected 1 (read_format must be 0)"),
            )),
        }
    }

    /// Sends this event's ring-buffer records into `target`'s ring buffer
    /// (`PERF_EVENT_IOC_SET_OUTPUT`), so many events on one CPU share one mapping. Both
    /// events must be on the same CPU (or follow the same task) and use the same clock.
    pub fn set_output(&self, target: &PerfEvent) -> io::Result<()> {
        // SAFETY: SET_OUTPUT takes the target event's fd as a plain integer; both fds are
        // live perf events.
        ioctl_result(unsafe {
            libc::ioctl(self.raw_fd(), ioctl::SET_OUTPUT, target.raw_fd() as libc::c_ulong)
        })
    }

    /// Routes this event's overflow signal to thread `tid` as signal `sig` (with `si_fd`
    /// set): `F_SETOWN_EX(F_OWNER_TID)`, `F_SETSIG`, and `O_ASYNC`. The per-thread
    /// alternative to `sigtrap=1`.
    pub fn route_signal_to_thread(&self, tid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
        let fd = self.raw_fd();
        let owner = sys::FOwnerEx { type_: sys::F_OWNER_TID, pid: tid };
        // SAFETY: F_SETOWN_EX reads a struct f_owner_ex through the pointer during the call.
        if unsafe { libc::fcntl(fd, sys::F_SETOWN_EX, &owner as *const sys::FOwnerEx) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: F_SETSIG takes a plain signal number.
        if unsafe { libc::fcntl(fd, sys::F_SETSIG, sig) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: F_GETFL/F_SETFL take and return plain flag words.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_ASYNC) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[inline]
fn ioctl_result(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A perf event's descriptor by number, not owned: the async-signal-safe operations of
/// [`PerfEvent`] for code that keeps the number in an atomic (a signal handler finds it
/// there). The caller keeps the event open while it uses the handle; an operation on a
/// number that is no longer a perf event fails with the kernel's error (or, if the
/// number was reused by another file, acts on that file: the caller's to prevent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventFd(RawFd);

impl EventFd {
    /// The event whose descriptor is `fd`.
    #[inline]
    pub const fn from_raw(fd: RawFd) -> EventFd {
        EventFd(fd)
    }

    /// The number.
    #[inline]
    pub const fn raw(self) -> RawFd {
        self.0
    }

    /// `PERF_EVENT_IOC_ENABLE`. Async-signal-safe.
    #[inline]
    pub fn enable(self) -> io::Result<()> {
        // SAFETY: ENABLE takes an integer flag argument.
        ioctl_result(unsafe { libc::ioctl(self.0, ioctl::ENABLE, 0) })
    }

    /// `PERF_EVENT_IOC_ENABLE` for the group this event leads. Async-signal-safe.
    #[inline]
    pub fn enable_group(self) -> io::Result<()> {
        // SAFETY: as `enable`, with PERF_IOC_FLAG_GROUP (1).
        ioctl_result(unsafe { libc::ioctl(self.0, ioctl::ENABLE, ioctl::FLAG_GROUP) })
    }

    /// `PERF_EVENT_IOC_DISABLE`. Async-signal-safe.
    #[inline]
    pub fn disable(self) -> io::Result<()> {
        // SAFETY: DISABLE takes an integer flag argument.
        ioctl_result(unsafe { libc::ioctl(self.0, ioctl::DISABLE, 0) })
    }

    /// `PERF_EVENT_IOC_DISABLE` for the group this event leads. Async-signal-safe.
    #[inline]
    pub fn disable_group(self) -> io::Result<()> {
        // SAFETY: as `disable`, with PERF_IOC_FLAG_GROUP (1).
        ioctl_result(unsafe { libc::ioctl(self.0, ioctl::DISABLE, ioctl::FLAG_GROUP) })
    }

    /// `PERF_EVENT_IOC_RESET`. Async-signal-safe.
    #[inline]
    pub fn reset(self) -> io::Result<()> {
        // SAFETY: RESET takes an integer flag argument.
        ioctl_result(unsafe { libc::ioctl(self.0, ioctl::RESET, 0) })
    }

    /// `PERF_EVENT_IOC_REFRESH`: `n` more overflows, then the event disables itself (it
    /// is enabled too). Async-signal-safe.
    #[inline]
    pub fn refresh(self, n: i32) -> io::Result<()> {
        // SAFETY: REFRESH takes an integer count.
        ioctl_result(unsafe { libc::ioctl(self.0, ioctl::REFRESH, n) })
    }

    /// `PERF_EVENT_IOC_PERIOD`: the next period. Async-signal-safe.
    #[inline]
    pub fn set_period(self, period: u64) -> io::Result<()> {
        let mut p = period;
        // The kernel copies the new period from user memory, hence the pointer.
        // SAFETY: PERIOD reads a u64 through the pointer during the call; `p` outlives it.
        ioctl_result(unsafe { libc::ioctl(self.0, ioctl::PERIOD, &mut p as *mut u64) })
    }

    /// Reads the event (or its group) into `buf` with one `read(2)`: the u64 words
    /// filled. Async-signal-safe.
    #[inline]
    pub fn read_into(self, buf: &mut [u64]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of its full byte length for the call.
        let n = unsafe { libc::read(self.0, buf.as_mut_ptr().cast(), std::mem::size_of_val(buf)) };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize / 8)
        }
    }
}

impl AsRawFd for PerfEvent {
    fn as_raw_fd(&self) -> RawFd {
        self.raw_fd()
    }
}

/// A parsed group read with `read_format = GROUP | TOTAL_TIME_ENABLED |
/// TOTAL_TIME_RUNNING` (optionally `| ID`), borrowing the words `read_into` filled.
///
/// Layout: `nr, time_enabled, time_running, { value[, id] } * nr`.
#[derive(Debug, Clone, Copy)]
pub struct GroupRead<'a> {
    words: &'a [u64],
    with_ids: bool,
}

impl<'a> GroupRead<'a> {
    /// Interprets `words`; `None` if they are too short for the count they announce.
    pub fn parse(words: &'a [u64], with_ids: bool) -> Option<GroupRead<'a>> {
        let nr = *words.first()? as usize;
        let stride = if with_ids { 2 } else { 1 };
        let need = nr.checked_mul(stride)?.checked_add(3)?;
        if words.len() < need {
            return None;
        }
        Some(GroupRead { words: &words[..need], with_ids })
    }

    /// The number of events in the group.
    pub fn len(&self) -> usize {
        self.words[0] as usize
    }

    /// True for an empty group (never produced by the kernel).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Nanoseconds the group was enabled.
    pub fn time_enabled(&self) -> u64 {
        self.words[1]
    }

    /// Nanoseconds the group was actually counting (less than enabled when multiplexed).
    pub fn time_running(&self) -> u64 {
        self.words[2]
    }

    /// The `i`th event's value (leader first), if present.
    pub fn value(&self, i: usize) -> Option<u64> {
        let stride = if self.with_ids { 2 } else { 1 };
        self.words.get(3 + i * stride).copied().filter(|_| i < self.len())
    }

    /// The `i`th event's id, with `PERF_FORMAT_ID`.
    pub fn id(&self, i: usize) -> Option<u64> {
        if !self.with_ids || i >= self.len() {
            return None;
        }
        self.words.get(4 + i * 2).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::{new_attr, PERF_COUNT_SW_TASK_CLOCK, PERF_TYPE_SOFTWARE};

    #[test]
    fn group_read_layout() {
        let w = [2u64, 100, 90, 7, 70, 8, 80];
        let g = GroupRead::parse(&w, true).unwrap();
        assert_eq!((g.len(), g.time_enabled(), g.time_running()), (2, 100, 90));
        assert_eq!(
            (g.value(0), g.id(0), g.value(1), g.id(1)),
            (Some(7), Some(70), Some(8), Some(80))
        );
        assert_eq!(g.value(2), None);
        assert!(GroupRead::parse(&w[..5], true).is_none());
        let g = GroupRead::parse(&[1, 5, 5, 42], false).unwrap();
        assert_eq!((g.value(0), g.id(0)), (Some(42), None));
    }

    #[test]
    fn task_clock_counts_own_thread() {
        let attr = new_attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK as u64);
        let ev = PerfEvent::open(&attr, Target::CALLING_THREAD, None, "task-clock")
            .expect("software events work at the default perf_event_paranoid");
        ev.enable().unwrap();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        ev.disable().unwrap();
        assert!(ev.read_count().unwrap() > 0, "task-clock must have advanced while we spun");
    }

    #[test]
    fn period_and_refresh_ioctls_are_accepted() {
        let mut attr = new_attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK as u64);
        attr.__bindgen_anon_1.sample_period = 1_000_000_000;
        let ev = PerfEvent::open(&attr, Target::CALLING_THREAD, None, "task-clock").unwrap();
        // A wrong ioctl encoding (value instead of pointer) fails here with EFAULT.
        ev.set_period(2_000_000).expect("PERF_EVENT_IOC_PERIOD");
        ev.refresh(1).expect("PERF_EVENT_IOC_REFRESH");
        ev.disable().unwrap();
        assert!(ev.id().unwrap() > 0);
        assert!(ev.set_period(0).is_err(), "a zero period is rejected by the kernel");
    }

    #[test]
    fn real_hardware_open_is_diagnosed_when_absent() {
        if crate::pmu::hardware_pmu_available() {
            eprintln!("skipping: this machine has a hardware PMU, so cycles opens fine");
            return;
        }
        let a = new_attr(sys::PERF_TYPE_HARDWARE, sys::PERF_COUNT_HW_INSTRUCTIONS as u64);
        let err = PerfEvent::open(&a, Target::CALLING_THREAD, None, "instructions").unwrap_err();
        assert!(matches!(err, OpenError::NoHardwarePmu { .. }), "{err}");
    }
}
