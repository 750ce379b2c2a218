//! Custody of samples: the shared-memory block pool that signal handlers in the target
//! write samples into and that `strobe record` drains, so a sample leaves the target's
//! address space the moment it is taken and outlives the target however it ends.
//!
//! Owns: the layout of the pool (a [`PoolHead`], one [`BlockHead`] per block, the block
//! words), the per-thread [`SharedSlot`] the handler writes through, the record encoding
//! inside a block ([`record`]), the producer's [`append`] and hand-over, and the
//! recorder's [`Drain`]. Must never allocate, lock, block or panic on the producer side
//! (it runs in a signal handler, in the target), never drop a sample without counting it
//! in its slot's `lost`, and never let the recorder reuse a block a producer may still
//! write.
//!
//! # Why blocks from a pool, not a ring per thread
//!
//! A ring per thread sized for the busiest thread costs that size for every thread: the
//! agent's old 8192-record rings were 720 KiB a thread, 7 GiB at 10,000 threads. Here a
//! thread holds one block (4 KiB by default) only once it has taken a sample, hands it
//! over when full and takes another from the pool. Memory is bounded by the pool (the
//! ceiling is stated by `strobe record --help`), whatever the number of threads; when the
//! pool is empty a sample is counted lost in its thread's slot, exactly.
//!
//! # The memory: one mapping shared by processes
//!
//! The pool lives in a `MAP_SHARED` mapping that `strobe record` creates and every
//! profiled process (the launched one, forked children, exec'd images) maps. Everything
//! in it is an atomic of a lock-free width, so the protocol below holds across processes
//! exactly as across threads. A target killed by any signal leaves its published records
//! in the mapping, where the recorder still finds them.
//!
//! # Protocol
//!
//! Lists: `free` is a Treiber stack of free blocks whose head carries a 32-bit tag bumped
//! by every successful exchange (producers pop concurrently, the recorder pushes: a plain
//! index would suffer ABA, a block popped and pushed back between another popper's load
//! and its exchange). `full` is a stack of blocks handed over by producers; only the
//! recorder takes from it, and it takes the whole list with one swap, so it needs no tag
//! (a push that loses a race retries; a push onto a head that was taken and pushed again
//! links to that head, which is right).
//!
//! A block goes FREE -> WRITING (popped by a producer, which sets owner, seq and head
//! before publishing it in its slot with Release) -> FULL (handed over: the producer
//! stores its final head, clears its slot's block and pushes it on `full` with Release)
//! -> FREE (the recorder, after reading it, pushes it on `free` with Release; the next
//! popper's Acquire orders our reads before its writes).
//!
//! Records are published by a Release store of the block's `head` (in words) after their
//! words are written; the recorder reads up to an Acquire load of `head`. It reads a
//! block while it is still WRITING (a partial drain) and remembers how far it got; a block
//! is reused only after the recorder frees it, and only the recorder frees.
//!
//! Order: a slot's blocks carry consecutive sequence numbers. A pass of the recorder
//! (1) clears the wake flag, (2) notes which slots are DEAD (Acquire), (3) swaps the whole
//! `full` list (Acquire) and reads its blocks in (slot, seq) order, freeing each, then
//! (4) reads each live slot's current block if its seq is the next one expected for that
//! slot (an earlier block of the slot may have been handed over after step 3: it is read
//! first, next pass), and (5) frees the slots noted DEAD in step 2: their owner handed
//! over its last block before storing DEAD (Release), so step 3 had it.
//!
//! Wakeups (seed 003: many records per wakeup): producers count published records in
//! `pending`; the one whose record brings `pending` to the threshold, or whose pop leaves
//! fewer than a quarter of the blocks free, or who finds the pool empty, sets
//! `wake_pending` with an AcqRel swap and, if it was clear, bumps the futex word and wakes
//! the recorder. The recorder clears `wake_pending` (AcqRel swap) before it reads and
//! subtracts what it drained from `pending` after: the level-triggered rule of
//! `ring.rs`, whose argument carries over (a producer that finds the flag set published
//! before the recorder's clear, so the drain that follows the clear reads its record).
//!
//! `tests/loom.rs` models pop/push under contention (`pool_no_block_has_two_owners`), a
//! partial drain racing a hand-over and reuse (`custody_partial_drain_and_reuse`), thread
//! exit racing a pass (`custody_dead_slot_is_drained_before_freed`) and the wakeup rule
//! (`custody_wakeup_is_never_missed`); `tests/custody_stress.rs` runs threads and a
//! recorder against real memory.

mod drain;
mod pool;
pub mod record;

pub use drain::{Drain, PassStats, SlotEvent};
pub use pool::{
    append, close, reserve, Append, BlockHead, HeapPool, Pool, PoolHead, SharedSlot, Word,
};

/// A block is on the free list.
pub const BLOCK_FREE: u32 = 0;
/// A producer owns the block and appends to it.
pub const BLOCK_WRITING: u32 = 1;
/// Handed over: its head is final; it waits on the full list.
pub const BLOCK_FULL: u32 = 2;

/// Words per block by default (4 KiB).
pub const DEFAULT_BLOCK_WORDS: u32 = 512;
