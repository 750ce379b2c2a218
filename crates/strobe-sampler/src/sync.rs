//! The atomics and the data cell every concurrent structure of this crate goes through:
//! loom's under `cfg(loom)` (so `tests/loom.rs` models the very code the agent runs),
//! `core`'s otherwise.
//!
//! Owns: nothing but the choice of implementation. Must never add behaviour: the non-loom
//! cell is a transparent `core::cell::UnsafeCell` with loom's closure-style access.

#[cfg(loom)]
pub use loom::cell::UnsafeCell;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize,
};

pub(crate) use core::sync::atomic::Ordering;

/// `core::cell::UnsafeCell` with loom's access API (`with`, `with_mut`), so ring storage
/// is written the same way in the agent and in the models.
#[cfg(not(loom))]
#[repr(transparent)]
#[derive(Debug)]
pub struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    /// A cell holding `v`.
    pub const fn new(v: T) -> Self {
        UnsafeCell(core::cell::UnsafeCell::new(v))
    }

    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Declares a function `const` outside loom (the agent's slot table is a `static`) and
/// plain under loom (whose atomics have no `const` constructors).
macro_rules! const_fn {
    ($(#[$m:meta])* $v:vis fn $name:ident() -> $r:ty $body:block) => {
        #[cfg(not(loom))]
        $(#[$m])*
        $v const fn $name() -> $r $body
        #[cfg(loom)]
        $(#[$m])*
        $v fn $name() -> $r $body
    };
}
pub(crate) use const_fn;
