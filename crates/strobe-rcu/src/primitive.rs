//! The synchronization primitives the crate is written against.
//!
//! Normal builds use `std`; `--cfg loom` swaps in loom's instrumented types so
//! the models in `tests/loom.rs` explore every interleaving of the real code
//! (the crossbeam-epoch arrangement). Owns nothing else and must never hold
//! logic: each item is a re-export or a thin adapter with identical meaning.
//!
//! Under loom there is no `sys_membarrier`: the reader's compiler fence and
//! the writer's membarrier are both modelled as `SeqCst` fences, which is the
//! heavier fallback scheme the crate also runs when membarrier is unavailable.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};
#[cfg(loom)]
pub(crate) use loom::sync::{Mutex, MutexGuard};

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize};
#[cfg(not(loom))]
pub(crate) use std::sync::{Mutex, MutexGuard};

pub(crate) use std::sync::atomic::Ordering;

/// The reader-side "light" fence: a compiler fence when the writer side pays
/// with membarrier; loom cannot model asymmetric fences, so there it is a real
/// `SeqCst` fence (the fallback scheme).
#[inline(always)]
pub(crate) fn light_fence() {
    #[cfg(loom)]
    fence(Ordering::SeqCst);
    #[cfg(not(loom))]
    std::sync::atomic::compiler_fence(Ordering::SeqCst);
}

/// One step of a polite wait: spin briefly, then yield, then sleep with a
/// growing period so a waiter on a busy 2-CPU machine does not steal the CPU
/// from the very reader it waits for.
pub(crate) fn backoff(step: &mut u32) {
    #[cfg(loom)]
    {
        let _ = step;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        *step = step.saturating_add(1);
        if *step < 64 {
            std::hint::spin_loop();
        } else if *step < 96 {
            std::thread::yield_now();
        } else {
            let us = 1u64 << (*step - 96).min(10);
            std::thread::sleep(std::time::Duration::from_micros(us));
        }
    }
}

/// Locks a mutex, ignoring poisoning: the data the crate guards with mutexes
/// stays consistent across a panic (every critical section either completes
/// its pointer moves or makes none).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `UnsafeCell` with loom's `with_mut` closure API, so the same code checks for data races
/// under loom.
#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// `UnsafeCell` with loom's `with_mut` closure API, so the same code checks for data races
/// under loom.
#[cfg(not(loom))]
#[derive(Debug, Default)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(v: T) -> Self {
        Self(std::cell::UnsafeCell::new(v))
    }
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
