//! The consumer list a site points at, and what running it means: consumers
//! ([`Consumer`]: a handler and an optional filter), the published list (an immutable
//! header and array of entries in one allocation), and the calls a hit makes through it.
//!
//! # Design
//!
//! The consumer list is an immutable array of entries behind one pointer, replaced
//! copy-on-write by the registry's writers (attach, detach). The probe owns the current
//! list and every site of the probe holds a copy of the pointer, so the trigger path goes
//! from the site it already has to the entries in one load: it enters a read section,
//! loads the site's list (`Acquire`, paired with the writer's `Release` stores), and calls
//! each consumer through a plain function pointer (a monomorphic trampoline and the
//! closure's address, no vtable). The entries sit in the same allocation as the list's
//! header. Running a list takes no lock, no reference count, allocates nothing and does no
//! bounds check; the `Arc`s that keep consumers alive sit in the list's `owners`, touched
//! by writers only, so list arrays can share consumers. A retired list, once reclaimed
//! (after a grace period), drops its `Arc` clones, and with them the consumers' memory.
//!
//! *Handler-requested removal* (`UPROBE_HANDLER_REMOVE`): a handler returns
//! [`Action::Remove`]; the trigger path then asks the consumer's filter again with the
//! same hit. Only if the filter now declines (the handler changed the state the filter
//! reads, as the kernel expects of `filter()`) is the request honoured: the consumer is
//! marked dead with one atomic store and skipped by every later trigger, and a writer
//! unlinks it. A consumer without a filter wants every hit, so its removal requests are
//! ignored, as in the kernel, where a consumer without `filter()` always keeps its
//! breakpoint.
//!
//! It owns the list's layout and its running; which list a probe has, and when an old
//! one is retired, is the registry's. It must never lock, allocate or touch a reference
//! count while running a list, nor change a list after it is published.

use std::alloc::Layout;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::Hit;

/// What a handler asks for after a hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Keep calling me.
    Keep,
    /// Remove me, if my filter confirms (see [`Consumer::with_filter`]).
    Remove,
}

type HandlerFn = dyn Fn(&Hit<'_>) -> Action + Send + Sync;
type FilterFn = dyn Fn(&Hit<'_>) -> bool + Send + Sync;
/// A handler called through a plain function pointer: the monomorphic
/// trampoline of the closure's type and a pointer to the closure.
type CallFn = unsafe fn(*const (), &Hit<'_>) -> Action;
type FilterCallFn = unsafe fn(*const (), &Hit<'_>) -> bool;

/// # Safety
/// `data` points at a live `F`.
unsafe fn call_handler<F: Fn(&Hit<'_>) -> Action>(data: *const (), hit: &Hit<'_>) -> Action {
    // SAFETY: forwarded contract.
    unsafe { (*data.cast::<F>())(hit) }
}

/// # Safety
/// `data` points at a live `F`.
unsafe fn call_filter<F: Fn(&Hit<'_>) -> bool>(data: *const (), hit: &Hit<'_>) -> bool {
    // SAFETY: forwarded contract.
    unsafe { (*data.cast::<F>())(hit) }
}

/// A consumer to attach to a probe: a handler and an optional filter.
pub struct Consumer {
    /// Owns the handler; `call`/`data` reach it without the vtable.
    _handler: Box<HandlerFn>,
    call: CallFn,
    data: *const (),
    filter: Option<(Box<FilterFn>, FilterCallFn, *const ())>,
}

// SAFETY: the raw pointers point into the boxes the consumer owns, whose
// targets are `Send + Sync`; nothing mutates through them.
unsafe impl Send for Consumer {}
// SAFETY: as above.
unsafe impl Sync for Consumer {}

impl Consumer {
    /// A consumer calling `handler` on every hit of its probe.
    ///
    /// Handlers run on the triggering thread, inside a read section: they
    /// must not call [`Attachment::detach`](crate::Attachment::detach) or anything that waits for a
    /// grace period (return [`Action::Remove`] instead), and if probes fire in
    /// signal handlers, the handler must be async-signal-safe.
    pub fn new<F>(handler: F) -> Self
    where
        F: Fn(&Hit<'_>) -> Action + Send + Sync + 'static,
    {
        let b = Box::new(handler);
        // The box's heap address does not change when the box moves.
        let data = (&*b as *const F).cast::<()>();
        Consumer { _handler: b, call: call_handler::<F>, data, filter: None }
    }

    /// Adds a filter: the handler runs only for hits the filter accepts.
    ///
    /// The filter also confirms removal requests: when the handler returns
    /// [`Action::Remove`], the filter is asked again with the same hit and
    /// the consumer is removed only if it now returns `false`.
    pub fn with_filter<F>(mut self, filter: F) -> Self
    where
        F: Fn(&Hit<'_>) -> bool + Send + Sync + 'static,
    {
        let b = Box::new(filter);
        let data = (&*b as *const F).cast::<()>();
        self.filter = Some((b, call_filter::<F>, data));
        self
    }
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer").field("has_filter", &self.filter.is_some()).finish()
    }
}

/// A consumer as lists hold it: shared by every list that has it, with the flag that
/// marks a confirmed removal request.
pub(crate) struct ConsumerInner {
    c: Consumer,
    /// Set once a removal request was confirmed; never cleared.
    dead: AtomicBool,
}

impl ConsumerInner {
    pub(crate) fn new(c: Consumer) -> Self {
        ConsumerInner { c, dead: AtomicBool::new(false) }
    }

    /// True once a removal the handler requested was confirmed by its filter.
    pub(crate) fn is_dead(&self) -> bool {
        // Relaxed: `dead` guards no data (see `run_filtered`).
        self.dead.load(Ordering::Relaxed)
    }
}

/// One consumer in a published list: plain pointers into a consumer that
/// the list's `owners` keep alive, so a trigger calls the handler with one
/// load of the function pointer and no vtable.
#[derive(Clone, Copy)]
struct Entry {
    call: CallFn,
    data: *const (),
    /// `None` for a consumer without a filter (the hot case).
    filter: Option<FilterCallFn>,
    filter_data: *const (),
    dead: *const AtomicBool,
}

impl Entry {
    fn new(inner: &ConsumerInner) -> Self {
        let (filter, filter_data) = match &inner.c.filter {
            Some((_, f, d)) => (Some(*f), *d),
            None => (None, std::ptr::null()),
        };
        Entry { call: inner.c.call, data: inner.c.data, filter, filter_data, dead: &inner.dead }
    }
}

/// A published consumer list: this header, then `len` entries in the same
/// allocation (so a trigger goes from the site's pointer straight to the
/// entries). Immutable once published; replaced copy-on-write by writers and
/// freed after a grace period. `owners` keeps the consumers alive as long as
/// the list; only writers touch it.
#[repr(C)]
pub(crate) struct List {
    len: usize,
    owners: Vec<Arc<ConsumerInner>>,
}

/// A list allocation's alignment (and size granule): one cache line.
const LIST_ALIGN: usize = 64;

/// Where the entries start in a list allocation.
const ENTRIES_OFF: usize =
    std::mem::size_of::<List>().next_multiple_of(std::mem::align_of::<Entry>());

impl List {
    fn layout(len: usize) -> Layout {
        let size = std::mem::size_of::<Entry>()
            .checked_mul(len)
            .and_then(|s| s.checked_add(ENTRIES_OFF))
            .expect("consumer list size overflows");
        // Whole cache lines of its own: firing threads read the list on every
        // hit, so no other heap object (a counter some thread updates) may
        // share a line with it.
        let align = LIST_ALIGN.max(std::mem::align_of::<List>()).max(std::mem::align_of::<Entry>());
        Layout::from_size_align(size, align).expect("consumer list layout").pad_to_align()
    }

    /// A list of `owners`' consumers, or null when there is none.
    pub(crate) fn alloc(owners: Vec<Arc<ConsumerInner>>) -> *mut List {
        if owners.is_empty() {
            return std::ptr::null_mut();
        }
        let len = owners.len();
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size (the header alone).
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: `p` is a fresh allocation of `layout`: the header at 0 and
        // `len` entries at ENTRIES_OFF, all suitably aligned, none initialised.
        unsafe {
            let entries = p.add(ENTRIES_OFF).cast::<Entry>();
            for (i, o) in owners.iter().enumerate() {
                entries.add(i).write(Entry::new(o));
            }
            let list = p.cast::<List>();
            list.write(List { len, owners });
            list
        }
    }

    /// The consumers in this list (live ones and ones marked dead, until a writer unlinks
    /// them). Writers only.
    pub(crate) fn owners(&self) -> &[Arc<ConsumerInner>] {
        &self.owners
    }

    /// How many consumers the list has.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The entries. Async-signal-safe (no check, no call).
    #[inline(always)]
    fn entries(&self) -> &[Entry] {
        // SAFETY: a list is always built by `alloc`, with `len` initialised
        // entries at ENTRIES_OFF; they live as long as the list.
        unsafe {
            std::slice::from_raw_parts(
                (self as *const List).cast::<u8>().add(ENTRIES_OFF).cast::<Entry>(),
                self.len,
            )
        }
    }

    /// Frees a list built by `alloc` (the drop function of its retirement).
    ///
    /// # Safety
    /// `p` came from `alloc`, is unreachable by readers and freed once.
    pub(crate) unsafe fn free(p: *mut ()) {
        let list = p.cast::<List>();
        // SAFETY: forwarded contract; the entries are `Copy` and need no drop.
        unsafe {
            let layout = Self::layout((*list).len);
            std::ptr::drop_in_place(list);
            std::alloc::dealloc(p.cast::<u8>(), layout);
        }
    }

    /// Runs every live consumer on `hit`. Lock-free, allocation-free, no
    /// reference count, no bounds check, async-signal-safe if the consumers
    /// are.
    #[inline(always)]
    pub(crate) fn run(&self, hit: &Hit<'_>) {
        // One consumer without a filter, the common case, is a single call
        // here; longer lists loop out of line, so the caller keeps few
        // registers live (no spills in the trigger path's prologue).
        if let [e] = self.entries() {
            if e.filter.is_none() {
                // SAFETY: as in `run_all`.
                unsafe {
                    let _ = (e.call)(e.data, hit);
                }
                return;
            }
        }
        self.run_all(hit);
    }

    /// Cold only for code layout: the single-consumer call in `run` then
    /// falls through instead of jumping out and back.
    #[cold]
    #[inline(never)]
    fn run_all(&self, hit: &Hit<'_>) {
        for e in self.entries() {
            match e.filter {
                // No filter: it wants every hit and can never be removed by
                // request, so there is no `dead` flag to check.
                // SAFETY: `data` points into a consumer this list's `owners`
                // keep alive, and the caller's read section keeps the list.
                None => unsafe {
                    let _ = (e.call)(e.data, hit);
                },
                Some(filter) => run_filtered(e, filter, hit),
            }
        }
    }
}

/// A consumer with a filter: filter, handler, confirmed removal.
#[inline(never)]
fn run_filtered(e: &Entry, filter: FilterCallFn, hit: &Hit<'_>) {
    // SAFETY: as in `List::run`: every pointer of the entry targets the
    // consumer the list keeps alive while the caller's section lasts.
    unsafe {
        // Relaxed: `dead` guards no data; it only stops later calls, and
        // the store below is seen by this thread at once and by others
        // soon (a confirmed removal races with concurrent hits anyway).
        if (*e.dead).load(Ordering::Relaxed) || !filter(e.filter_data, hit) {
            return;
        }
        if (e.call)(e.data, hit) == Action::Remove && !filter(e.filter_data, hit) {
            (*e.dead).store(true, Ordering::Relaxed);
        }
    }
}
