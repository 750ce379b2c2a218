//! Failed `perf_event_open` calls, diagnosed into one sentence that says what went wrong
//! and what to do about it.
//!
//! Owns [`OpenError`] and the diagnosis: from the errno, the attr and the machine's
//! settings (`perf_event_paranoid`, PMU types read through [`pmu`]) to the one variant
//! that names the cause and the fix. It must never open an event itself or retry one
//! (the caller decides what to do), and never panic on an errno it does not know (that is
//! [`OpenError::Rejected`]).

use std::io;

use crate::names;
use crate::pmu;
use crate::sys::{self, perf_event_attr};

/// Why an event could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// `kernel.perf_event_paranoid` forbids this kind of event for unprivileged users.
    #[error(
        "{what}: not permitted while kernel.perf_event_paranoid is {level}; this needs {needed} \
         or lower (as root: sysctl -w kernel.perf_event_paranoid={needed}), or run strobe with \
         CAP_PERFMON"
    )]
    Paranoid {
        /// The event, as the user named it.
        what: String,
        /// The current sysctl value.
        level: i32,
        /// The highest value that permits the event.
        needed: i32,
    },
    /// The event needs a capability whatever the paranoid level (uprobes, for instance).
    #[error("{what}: not permitted: {why}; run strobe as root or grant it CAP_PERFMON")]
    NeedsCapability {
        /// The event, as the user named it.
        what: String,
        /// Which rule applies.
        why: &'static str,
    },
    /// A hardware event on a machine without a (virtualised) hardware PMU.
    #[error(
        "{what}: this machine has no hardware PMU for this event (perf_event_open says ENOENT); \
         use the software event '{substitute}' instead ({reason})"
    )]
    NoHardwarePmu {
        /// The event, as the user named it.
        what: String,
        /// The software event to use instead.
        substitute: &'static str,
        /// Why that substitute.
        reason: &'static str,
    },
    /// A breakpoint when all debug registers of the thread are taken.
    #[error(
        "{what}: no free hardware debug register (x86 has 4 per thread and all are in use); \
         watch fewer locations or let strobe multiplex them"
    )]
    NoDebugRegisters {
        /// The event, as the user named it.
        what: String,
    },
    /// The target task vanished.
    #[error("{what}: thread or process {pid} does not exist (it may have exited)")]
    NoSuchTask {
        /// The event, as the user named it.
        what: String,
        /// The pid/tid that was targeted.
        pid: i32,
    },
    /// The process is out of file descriptors.
    #[error(
        "{what}: out of file descriptors (each event needs one); raise the limit with ulimit -n"
    )]
    TooManyFiles {
        /// The event, as the user named it.
        what: String,
    },
    /// Anything else the kernel rejected.
    #[error("{what}: the kernel rejected the event ({source}){hint}")]
    Rejected {
        /// The event, as the user named it.
        what: String,
        /// A hint derived from the errno, possibly empty.
        hint: &'static str,
        /// The errno.
        source: io::Error,
    },
}

impl OpenError {
    /// Classifies `err` from opening `attr` on task `pid` (perf_event_open's `pid`: a
    /// thread or process, 0 for the calling thread, -1 for every task on a CPU).
    pub fn diagnose(err: io::Error, attr: &perf_event_attr, pid: libc::pid_t, what: &str) -> Self {
        let what = what.to_string();
        let errno = err.raw_os_error().unwrap_or(0);
        let is_hw = matches!(
            attr.type_,
            sys::PERF_TYPE_HARDWARE | sys::PERF_TYPE_HW_CACHE | sys::PERF_TYPE_RAW
        );
        let is_probe =
            ["uprobe", "kprobe"].iter().any(|p| pmu::pmu_type(p).ok() == Some(attr.type_))
                || attr.type_ == sys::PERF_TYPE_TRACEPOINT;
        match errno {
            libc::EACCES | libc::EPERM => {
                if is_probe {
                    return OpenError::NeedsCapability {
                        what,
                        why: "kernel uprobes, kprobes and tracepoints need CAP_PERFMON or \
                              CAP_SYS_ADMIN",
                    };
                }
                let needed = if pid == -1 {
                    0
                } else if attr.exclude_kernel() == 0 {
                    1
                } else {
                    2
                };
                match pmu::paranoid_level() {
                    Some(level) if level > needed => OpenError::Paranoid { what, level, needed },
                    _ => OpenError::NeedsCapability {
                        what,
                        why: "the kernel refused although perf_event_paranoid allows it (a \
                              seccomp filter or container policy may block perf_event_open)",
                    },
                }
            }
            libc::ENOENT | libc::EOPNOTSUPP if is_hw => {
                let name = hardware_name(attr.config).unwrap_or("hardware event");
                let (substitute, reason) = names::software_substitute(name);
                OpenError::NoHardwarePmu { what, substitute, reason }
            }
            libc::ENOSPC if attr.type_ == sys::PERF_TYPE_BREAKPOINT => {
                OpenError::NoDebugRegisters { what }
            }
            libc::ESRCH => OpenError::NoSuchTask { what, pid },
            libc::EMFILE | libc::ENFILE => OpenError::TooManyFiles { what },
            _ => {
                let hint = match errno {
                    libc::ENOENT => "; this kernel does not offer the event",
                    libc::EOPNOTSUPP => {
                        "; the event does not support the requested mode (sampling or a flag)"
                    }
                    libc::EINVAL => {
                        "; a setting is invalid for this event (period, flags or group)"
                    }
                    libc::E2BIG => "; this kernel is older than strobe's perf ABI",
                    libc::EBUSY => "; the PMU is in exclusive use by another tool",
                    _ => "",
                };
                OpenError::Rejected { what, hint, source: err }
            }
        }
    }
}

fn hardware_name(config: u64) -> Option<&'static str> {
    names::EVENTS
        .iter()
        .find(|e| e.kind == names::EventKind::Hardware && e.config == config)
        .map(|e| e.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(type_: u32, config: u64) -> perf_event_attr {
        sys::new_attr(type_, config)
    }

    #[test]
    fn enoent_on_cycles_suggests_task_clock() {
        let e = OpenError::diagnose(
            io::Error::from_raw_os_error(libc::ENOENT),
            &attr(sys::PERF_TYPE_HARDWARE, sys::PERF_COUNT_HW_CPU_CYCLES as u64),
            0,
            "cycles",
        );
        let msg = e.to_string();
        assert!(msg.contains("no hardware PMU") && msg.contains("'task-clock'"), "{msg}");
    }

    #[test]
    fn enospc_on_breakpoint_names_debug_registers() {
        let e = OpenError::diagnose(
            io::Error::from_raw_os_error(libc::ENOSPC),
            &attr(sys::PERF_TYPE_BREAKPOINT, 0),
            0,
            "watch counter:w",
        );
        assert!(matches!(e, OpenError::NoDebugRegisters { .. }));
    }

    #[test]
    fn eacces_names_the_sysctl_when_paranoid_is_the_cause() {
        let e = OpenError::diagnose(
            io::Error::from_raw_os_error(libc::EACCES),
            &attr(sys::PERF_TYPE_SOFTWARE, 0),
            -1,
            "cpu-clock",
        );
        // Whatever this machine's level, a CPU-wide event needs 0: either the sysctl is
        // named (level > 0) or the message says something else blocked it.
        let msg = e.to_string();
        match pmu::paranoid_level() {
            Some(l) if l > 0 => assert!(msg.contains("kernel.perf_event_paranoid"), "{msg}"),
            _ => assert!(msg.contains("not permitted"), "{msg}"),
        }
    }
}
