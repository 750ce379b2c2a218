//! The signal-path core of strobe's capture agent (seeds 004 and 003): the period
//! alternation state machine, each thread's sample ring drained on a threshold, the slot
//! life cycle that lets a signal handler find its thread's state, and the multi-producer
//! ring the watchpoint handler fills; and the hand-over of the watchpoint events that
//! threads open on themselves at birth.
//!
//! Owns: these data structures and their memory-ordering arguments; the agent
//! (`agent/`) owns the system calls around them (perf events, signals, the eventfd, the
//! record file). Must never allocate, lock or panic on a producer path: `no_std` outside
//! tests, allocation only in constructors (`SampleRing::prepare`, `MpscRing::new`).
//!
//! Every atomic goes through `sync`, which is loom's under `cfg(loom)`: `tests/loom.rs`
//! models the very code the agent runs (`ci/loom.sh`).
//!
//! - [`alternate`]: long period + jitter, then a window; which sample starts or ends one.
//! - [`ring`]: the per-thread single-producer single-consumer sample ring, loss counting,
//!   and the wakeup threshold.
//! - [`slot`]: FREE -> CLAIMED -> ACTIVE -> CLOSING -> DEAD -> FREE, and the generation a
//!   late signal of an old owner fails.
//! - [`mpsc`]: the bounded multi-producer ring of watchpoint hits.
//! - [`gate`]: the one-way gate that keeps the agent's system calls before a program's
//!   seccomp filter: a closer waits out the code that passed it.
//! - [`born`]: FREE -> CLAIMED -> READY hand-over entries and the count of threads still
//!   arming themselves, which tells the writer when it may arm a thread itself.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

mod sync;

pub mod alternate;
pub mod born;
pub mod custody;
pub mod gate;
pub mod mpsc;
pub mod ring;
pub mod slot;

pub use alternate::{AltCell, Alternation, Arm, Kind, Periods, Step};
pub use mpsc::MpscRing;
pub use ring::{Push, SampleRing, MAX_COUNTERS, MAX_STRIDE, RECORD_HEAD};
pub use slot::SlotCtl;
