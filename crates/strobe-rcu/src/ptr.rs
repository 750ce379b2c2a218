//! [`RcuPtr`]: an owning pointer that readers load under a read section and
//! writers replace copy-on-write, retiring the old value.
//!
//! Ordering: `replace` swaps with `AcqRel`; its release half publishes the new
//! value's initialisation to readers, whose `Acquire` load (a "consume" in
//! effect) pairs with it. The acquire half orders our later retire of the old
//! value after every earlier writer's accesses to it. The old value is freed
//! only after a grace period, so a reader that loaded it just before the swap
//! keeps a valid reference until its section ends.
//!
//! Must never: free a value that a reader could still hold (only `Drop` and
//! `&mut self` methods free directly, when no reference can exist).

use std::marker::PhantomData;

use crate::domain::Domain;
use crate::domain::LocalHandle;
use crate::primitive::{AtomicPtr, Ordering};
use crate::reader::ReadGuard;
use crate::reclaim::drop_box;

/// An RCU-protected owning pointer to an immutable `T` (or nothing).
///
/// ```
/// use strobe_rcu::{read_lock, RcuPtr};
/// let p = RcuPtr::new(Some(Box::new(vec![1, 2, 3])));
/// {
///     let g = read_lock();
///     assert_eq!(p.load(&g).map(|v| v.len()), Some(3));
/// }
/// p.replace(Some(Box::new(vec![4]))); // the old Vec is freed after a grace period
/// ```
pub struct RcuPtr<T: Send + Sync + 'static> {
    ptr: AtomicPtr<T>,
    domain: &'static Domain,
    _owns: PhantomData<Box<T>>,
}

impl<T: Send + Sync + 'static> RcuPtr<T> {
    /// A pointer in the global domain holding `value`.
    #[cfg(not(loom))]
    pub fn new(value: Option<Box<T>>) -> Self {
        // SAFETY: guards of the global domain are the only ones `read_lock`
        // hands out.
        unsafe { Self::new_in(crate::global::global(), value) }
    }

    /// A pointer whose old values are retired in `domain`.
    ///
    /// # Safety
    /// Every guard later passed to [`load`](Self::load) comes from `domain`.
    pub unsafe fn new_in(domain: &'static Domain, value: Option<Box<T>>) -> Self {
        let p = value.map_or(std::ptr::null_mut(), Box::into_raw);
        Self { ptr: AtomicPtr::new(p), domain, _owns: PhantomData }
    }

    /// The current value, valid for as long as the guard (and `self`) is.
    /// Async-signal-safe.
    #[inline]
    pub fn load<'g>(&'g self, _guard: &'g ReadGuard<'_>) -> Option<&'g T> {
        // Acquire: pairs with the release half of `replace`.
        let p = self.ptr.load(Ordering::Acquire);
        // SAFETY: non-null values stay allocated until a grace period after
        // they are replaced, and the guard's section began before that.
        unsafe { p.as_ref() }
    }

    /// True when no value is held (a snapshot; it may change at once).
    pub fn is_none(&self) -> bool {
        // Acquire: as in `load` (a caller may go on to act on the answer).
        self.ptr.load(Ordering::Acquire).is_null()
    }

    /// Publishes `new` and retires the previous value (freed after a grace
    /// period). Concurrent `replace` calls are safe: each retires the value it
    /// swapped out. Not async-signal-safe.
    pub fn replace(&self, new: Option<Box<T>>) {
        let old = self.swap_raw(new);
        if !old.is_null() {
            // SAFETY: `old` is unpublished (swapped out) and ours alone to retire.
            unsafe { self.domain.retire_any(old.cast(), drop_box::<T>, std::ptr::null_mut()) };
        }
    }

    /// [`replace`](Self::replace) retiring through an explicit handle of this
    /// pointer's domain (for separate domains, which have no TLS handle).
    pub fn replace_in(&self, new: Option<Box<T>>, handle: &LocalHandle) {
        assert!(std::ptr::eq(handle.domain(), self.domain), "handle of another domain");
        let old = self.swap_raw(new);
        if !old.is_null() {
            // SAFETY: as in `replace`.
            unsafe { handle.retire_raw(old.cast(), drop_box::<T>) };
        }
    }

    fn swap_raw(&self, new: Option<Box<T>>) -> *mut T {
        let p = new.map_or(std::ptr::null_mut(), Box::into_raw);
        // AcqRel: see the module note.
        self.ptr.swap(p, Ordering::AcqRel)
    }

    /// Mutable access: no reader can hold a reference while we have `&mut`.
    pub fn get_mut(&mut self) -> Option<&mut T> {
        // SAFETY: `&mut self` excludes every reference derived from `&self`
        // (loaded references borrow `self`).
        unsafe { self.ptr.load(Ordering::Relaxed).as_mut() }
    }

    /// Takes the value out, leaving nothing.
    pub fn take(&mut self) -> Option<Box<T>> {
        // Relaxed: `&mut self` is exclusive; any other thread's accesses were
        // ordered before by whatever handed us the `&mut`.
        let p = self.ptr.swap(std::ptr::null_mut(), Ordering::Relaxed);
        // SAFETY: as in `get_mut`; `p` came from Box::into_raw.
        (!p.is_null()).then(|| unsafe { Box::from_raw(p) })
    }
}

impl<T: Send + Sync + 'static> Drop for RcuPtr<T> {
    fn drop(&mut self) {
        drop(self.take());
    }
}

impl<T: Send + Sync + 'static + std::fmt::Debug> std::fmt::Debug for RcuPtr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RcuPtr").field("is_none", &self.is_none()).finish_non_exhaustive()
    }
}

#[cfg(not(loom))]
impl<T: Send + Sync + 'static> Default for RcuPtr<T> {
    fn default() -> Self {
        Self::new(None)
    }
}
