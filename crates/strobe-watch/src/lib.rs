//! strobe-watch: hardware watchpoints.
//!
//! - [`spec`]: the watch spec grammar (`SYMBOL[+OFF][:LEN][:w|rw]`, `0xADDR[:LEN][:w|rw]`)
//!   and the checks that need no ELF file; [`spec::Watchpoint`] is a resolved, armable
//!   location.
//! - [`resolve`](mod@resolve) (feature `resolve`): data symbols of ELF modules (read by strobe-target),
//!   specs resolved to `(module, vaddr, len)`, close names on a miss.
//! - [`slots`]: the per-thread debug-register slot table of seed 000, over a
//!   [`slots::ThreadMultiMap`]: strobe's is a hash multimap keyed by thread (O(1) per
//!   reservation); the O(#threads) list it is measured against lives in strobe-bench.
//! - [`mux`]: round-robin multiplexing of more watchpoints than slots, with per-watchpoint
//!   armed time so counts can be scaled.
//! - [`bp`]: the `PERF_TYPE_BREAKPOINT` attrs (counting, or synchronous SIGTRAP per hit),
//!   re-targeting a slot, and decoding the SIGTRAP's `si_perf_*` fields.
//! - [`session`] (feature `session`, on by default): one `strobe watch` on the host:
//!   resolve, launch with the agent, read its hits ([`stream`]), name the code, report.
//!
//! The in-target half (arming events in the agent, the SIGTRAP handler) lives in the agent;
//! this crate holds the logic it runs. It must never allocate on the hit path: the pieces a
//! handler calls ([`mux::HitCounters::record`], [`bp::PerfTrap::from_siginfo`]) are
//! allocation-free and lock-free.

pub mod bp;
#[cfg(any(test, feature = "conformance"))]
pub mod conformance;
pub mod mux;
#[cfg(feature = "resolve")]
pub mod resolve;
#[cfg(feature = "session")]
pub mod session;
pub mod slots;
pub mod spec;
#[cfg(feature = "session")]
pub mod stream;

pub use mux::{HitCounters, Multiplexer, MuxError, Policy, WatchStats};
#[cfg(feature = "resolve")]
pub use resolve::{resolve, ElfSymbols, ResolveError};
pub use slots::{
    RcuHashMap, Reservation, ReservationOf, SlotError, SlotTable, ThreadMultiMap, Tid,
};
pub use spec::{Access, Len, Location, Place, SpecError, WatchSpec, Watchpoint};
