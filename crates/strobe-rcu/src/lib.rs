//! strobe-rcu: read-mostly synchronization and batched deferred reclamation.
//!
//! The shared foundation of strobe's probe registry (a probe's consumer list is
//! an RCU-protected immutable array, replaced copy-on-write; seed 001) and its
//! watchpoint slot table (a hash multimap keyed by thread; seed 000), with the
//! kfree_rcu-style bulk reclamation of seed 002.
//!
//! # The pieces
//!
//! - **Read sections** ([`read_lock`] → [`ReadGuard`]): a load and a store on
//!   the thread's own cache line plus a compiler fence (the liburcu "memb"
//!   flavour): writers pay with `sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`,
//!   registered once per process. If the kernel lacks it, the domain falls back
//!   to readers executing a `SeqCst` fence (about 10-20 ns more per section);
//!   [`Domain::uses_membarrier`] says which scheme runs. Sections nest, guards
//!   are `!Send`, references loaded under a guard cannot outlive it.
//! - **Grace periods** ([`synchronize`], or [`try_synchronize`] which returns
//!   [`Error::InReadSection`] instead of panicking when called inside a read
//!   section; [`start_poll_synchronize`]/[`poll_synchronize`] to start one
//!   and check it later without waiting; [`synchronize_lazy`] for writers that
//!   may wait longer but must not interrupt readers' CPUs):
//!   concurrent callers share them. The
//!   expensive barrier is paid once per grace period; reclamation asks for one
//!   per batch of about two thousand objects, never per object.
//! - **Deferred reclamation** ([`retire`], [`retire_raw`], [`retire_head`],
//!   [`flush`], [`barrier`]): per-thread page-sized record blocks sealed into
//!   batches, freed in bulk after their grace period, an intrusive emergency
//!   list when a block cannot be allocated, a background reclaimer, and a hard
//!   per-thread ceiling ([`MAX_OUTSTANDING_PER_THREAD`]) with synchronous
//!   reclamation past it. See the `reclaim` module notes for the design
//!   (`src/reclaim.rs`; the code that runs it is in `src/domain/`).
//! - **[`RcuPtr`]**: an owning pointer readers load and writers replace.
//! - **[`HashMultiMap`]**: several values per key, lock-free lookups,
//!   resizing that never blocks readers.
//!
//! # Async-signal safety
//!
//! These may be called from a signal handler, on a thread that has called
//! [`register_current_thread`] (or already used any function of this crate
//! that registers it: `read_lock`, `retire`, ...) in normal context:
//!
//! | function | signal-safe |
//! |---|---|
//! | [`read_lock`], dropping a [`ReadGuard`], [`read_depth`] | yes, precondition above |
//! | [`try_read_lock`], [`try_read_lock_outermost`] | yes, on any thread (an unregistered one gets `None`) |
//! | [`RcuPtr::load`] | yes |
//! | [`HashMultiMap::for_each`] / [`get`](HashMultiMap::get) / [`count`](HashMultiMap::count) | yes, if the key's `Hash`/`Eq` and the callback are |
//! | [`LocalHandle::read_lock`] | yes |
//! | everything else ([`register_current_thread`], [`synchronize`], [`retire`], [`barrier`], [`flush`], their `try_` forms, writers) | **no**: they may allocate, lock or sleep |
//!
//! A handler's read section nested inside an interrupted one on the same
//! thread is correct (the nesting counter update is signal-atomic; see
//! `reader.rs`). Without the precondition, the first `read_lock` on a thread
//! registers it and may allocate. After a thread's TLS destructors ran, read
//! sections still work but each outermost one claims a record (not
//! signal-safe).
//!
//! Must never: allocate, lock or make a system call inside a read section.

#![cfg_attr(not(loom), deny(unsafe_op_in_unsafe_fn))]

mod domain;
mod error;
#[cfg(not(loom))]
mod global;
mod multimap;
mod primitive;
mod ptr;
mod reader;
mod reclaim;
mod stats;
#[cfg(not(loom))]
mod sys;

pub use domain::{Domain, LocalHandle, LAZY_PATIENCE};
pub use error::Error;
#[cfg(not(loom))]
pub use global::{
    barrier, flush, global, poll_synchronize, read_depth, read_lock, register_current_thread,
    retire, retire_head, retire_raw, start_poll_synchronize, stats, synchronize, synchronize_lazy,
    try_barrier, try_read_lock, try_read_lock_outermost, try_synchronize, try_synchronize_lazy,
    SCAN_PERIOD,
};
pub use multimap::HashMultiMap;
pub use ptr::RcuPtr;
pub use reader::ReadGuard;
pub use reclaim::{
    fail_next_block_allocs, DropFn, RcuHead, BATCH_BLOCKS, EMERGENCY_LIMIT, LIMIT_BLOCKS,
    MAX_OUTSTANDING_PER_THREAD, RECORDS_PER_BLOCK,
};
pub use stats::Stats;
