//! The synchronization primitives the module table is written against.
//!
//! Normal builds use `std`; `--cfg loom` swaps in loom's instrumented types so
//! that `tests/loom.rs` explores the interleavings of the real
//! [`Registry`](crate::modules::Registry) code (strobe-rcu switches its own
//! primitives under the same flag). Owns nothing else and must never hold
//! logic: each item is a re-export with identical meaning.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::AtomicPtr;
#[cfg(loom)]
pub(crate) use loom::sync::Mutex;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::AtomicPtr;
#[cfg(not(loom))]
pub(crate) use std::sync::Mutex;

pub(crate) use std::sync::atomic::Ordering;
