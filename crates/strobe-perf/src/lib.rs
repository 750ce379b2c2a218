//! strobe-perf: the perf_event ABI and a thin safe layer over it.
//!
//! - [`sys`] is the only place that speaks the raw kernel ABI: `perf_event_attr`, the
//!   `perf_event_open` syscall, the `PERF_EVENT_IOC_*` ioctls, fcntl signal routing.
//! - [`PerfEvent`] owns one event fd and offers the operations strobe uses, each one
//!   system call, none allocating, so the agent can call them from a signal handler.
//! - [`OpenError`] turns a failed `perf_event_open` into one sentence that says what
//!   went wrong and what to do (perf_event_paranoid, missing hardware PMU, no debug registers).
//! - [`pmu`] reads what this machine offers: dynamic PMU types (uprobe), whether a hardware
//!   PMU exists, the paranoid level.
//! - [`EventGroup`] opens a parsed group on one thread: a sampling leader that
//!   raises a synchronous SIGTRAP, and counted members read with it.
//! - [`names`] maps perf's event names to (type, config); [`spec`] parses event specs
//!   such as `{task-clock/period=1ms,window=20us/,page-faults}`; [`ring`] reads the mmap
//!   ring buffer.
//! - [`percpu::CpuRings`] opens a group on every CPU for a process tree (`inherit`) or the
//!   whole system, each CPU's events writing into one ring: sampling from the kernel's
//!   side, without injecting anything into the target.
//!
//! This crate must never know about record files, reports or the agent's policy.

mod error;
mod event;
mod group;
pub mod names;
pub mod overflow;
pub mod percpu;
pub mod pmu;
pub mod ring;
pub mod spec;
pub mod sys;

pub use error::OpenError;
pub use event::{EventFd, GroupRead, PerfEvent, Target};
pub use group::EventGroup;
