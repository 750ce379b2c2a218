//! The figures a domain keeps about itself: the relaxed event counters its grace periods
//! and reclamation bump, and the [`Stats`] snapshot users read.
//!
//! Owns the counters and the snapshot type. It must never hold a counter that anything
//! depends on for correctness: every counter is a statistic, updated and read `Relaxed`.

use crate::primitive::AtomicU64;

/// Event counters of a domain (all relaxed: statistics only).
pub(crate) struct Counters {
    pub(crate) grace_periods: AtomicU64,
    pub(crate) lone_grace_periods: AtomicU64,
    pub(crate) polled_grace_periods: AtomicU64,
    pub(crate) blocks_allocated: AtomicU64,
    pub(crate) block_alloc_failures: AtomicU64,
    pub(crate) emergency: AtomicU64,
    pub(crate) headless_sync: AtomicU64,
    pub(crate) backpressure: AtomicU64,
    pub(crate) freed: AtomicU64,
    pub(crate) steals: AtomicU64,
}

macro_rules! counters_init {
    () => {
        crate::stats::Counters {
            grace_periods: AtomicU64::new(0),
            lone_grace_periods: AtomicU64::new(0),
            polled_grace_periods: AtomicU64::new(0),
            blocks_allocated: AtomicU64::new(0),
            block_alloc_failures: AtomicU64::new(0),
            emergency: AtomicU64::new(0),
            headless_sync: AtomicU64::new(0),
            backpressure: AtomicU64::new(0),
            freed: AtomicU64::new(0),
            steals: AtomicU64::new(0),
        }
    };
}
pub(crate) use counters_init;

/// A snapshot of a domain's reclamation figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Grace periods completed.
    pub grace_periods: u64,
    /// Of those, the ones that skipped the membarrier because no other thread
    /// held a reader record.
    pub lone_grace_periods: u64,
    /// Of those, the ones that completed without any barrier: every other
    /// reader was seen carrying the new epoch (this includes lone ones).
    pub polled_grace_periods: u64,
    /// Objects retired but not yet freed, as of each thread's last slow path
    /// (so it can lag by up to one block per thread).
    pub outstanding: usize,
    /// Record blocks allocated (steady state reuses a cached spare instead).
    pub blocks_allocated: u64,
    /// Block allocations that failed (really or by fault injection).
    pub block_alloc_failures: u64,
    /// Objects queued through their embedded [`RcuHead`](crate::RcuHead) because no block
    /// could be allocated.
    pub emergency: u64,
    /// Head-less objects freed synchronously because no block could be
    /// allocated.
    pub headless_sync: u64,
    /// Times `retire` hit the ceiling and waited for a grace period.
    pub backpressure_waits: u64,
    /// Objects freed after their grace period.
    pub freed: u64,
    /// Bags emptied by `barrier` or the idle scan.
    pub steals: u64,
}
