//! The probe registry: probes by name, their sites, and their consumer
//! lists (seed 001's `uprobe->consumers` under RCU).
//!
//! # Design
//!
//! A [`Probe`] exists once per distinct name and is never freed (the set of
//! names is bounded by the program's sites plus the names consumers asked
//! for). It keeps the sites that carry its name and its consumer list.
//!
//! The consumer list is an immutable array of entries behind one pointer,
//! replaced copy-on-write by writers (attach, detach) that serialise on the
//! registry's mutex, as the kernel keeps `uprobe->register_rwsem` for
//! registration. The probe owns the current list and every site of the probe
//! holds a copy of the pointer, so the trigger path goes from the site it
//! already has to the entries in one load: it enters a read section, loads
//! the site's list (`Acquire`, paired with the writer's `Release` stores),
//! and calls each consumer through a plain function pointer (a monomorphic
//! trampoline and the closure's address, no vtable). The entries sit in the
//! same allocation as the list's header. The trigger path takes no lock, no
//! reference count, allocates nothing and does no bounds check; the `Arc`s
//! that keep consumers alive sit in the list's `owners`, touched by writers
//! only, so list arrays can share consumers.
//!
//! *Detach* publishes a list without the consumer, then waits for a grace
//! period: every trigger that could have loaded the old list has left its
//! read section, so once `detach` returns the handler is never called again.
//! The old list is retired once the probe and all its sites point at the new
//! one; when it is reclaimed (after a grace period) its `Arc` clones drop,
//! and with them the consumer's memory.
//!
//! # Normal and expedited grace periods
//!
//! A strobe-rcu grace period costs the *firing* threads too: its
//! `sys_membarrier` interrupts every CPU running one of the process's
//! threads (a VM IPI here, microseconds each). A thread that detached in a
//! loop with [`strobe_rcu::synchronize`] forced hundreds of thousands of them
//! per second and halved the trigger rate of the threads it interrupted. So
//! [`Attachment::detach`] paces the grace periods it forces, as the kernel
//! paces normal grace periods (`uprobe_unregister` waits with a
//! `synchronize_srcu` that is not expedited): a detach runs its grace period
//! at once only if no detach ran one in the last [`DETACH_GRACE_SPACING`];
//! otherwise it sleeps until that spacing has passed, unless someone (another
//! detach, the background reclaimer, any `synchronize`) completes its grace
//! period meanwhile. An isolated detach therefore returns as fast as an
//! expedited one, detaches that pile up share one barrier, and however fast
//! threads detach in a loop, detaching forces at most about one barrier per
//! spacing (a thousand a second). [`Attachment::detach_expedited`] never
//! waits for the spacing, for a caller that needs the latency and accepts the
//! interruptions. Correctness is the same in both: the wait ends only when
//! the grace period named by a cookie taken *after* the unpublish has
//! completed; the pacing only decides who runs it and when.
//!
//! *Handler-requested removal* (`UPROBE_HANDLER_REMOVE`): a handler returns
//! [`Action::Remove`]; the trigger path then asks the consumer's filter again
//! with the same hit. Only if the filter now declines (the handler changed the
//! state the filter reads, as the kernel expects of `filter()`) is the request
//! honoured: the consumer is marked dead with one atomic store and skipped by
//! every later trigger, and a writer unlinks it (its attachment's detach or
//! drop, or any later attach/detach on the probe). A consumer without a
//! filter wants every hit, so its removal requests are ignored, as in the
//! kernel, where a consumer without `filter()` always keeps its breakpoint.
//!
//! Lookup by name for the dynamic path ([`fire_by_name`]) goes through a
//! [`HashMultiMap`], lock-free under the same read section.
//!
//! Must never: lock, allocate or touch a reference count on the trigger path;
//! free a consumer before a grace period has passed since it was unlinked.

use std::alloc::Layout;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use strobe_rcu::HashMultiMap;

use crate::site::{Hit, Site, OFF, ON};
use crate::ProbeError;

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
    /// must not call [`Attachment::detach`] or anything that waits for a
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

struct ConsumerInner {
    c: Consumer,
    /// Set once a removal request was confirmed; never cleared.
    dead: AtomicBool,
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
    fn alloc(owners: Vec<Arc<ConsumerInner>>) -> *mut List {
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
    unsafe fn free(p: *mut ()) {
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

/// One probe name: its sites and its consumers.
pub struct Probe {
    name: &'static str,
    /// The current list (null when empty), owned: retired when replaced.
    /// Every site of the probe holds a copy of this pointer.
    list: AtomicPtr<List>,
    /// Sites with this name; changed only under the registry lock.
    sites: Mutex<Vec<&'static Site>>,
    /// The first site registered with this name, for [`fire_by_name`].
    first_site: AtomicPtr<Site>,
}

struct Registry {
    lock: Mutex<()>,
    by_name: HashMultiMap<&'static str, &'static Probe>,
}

static REGISTRY: OnceLock<Registry> = OnceLock::new();

fn registry() -> &'static Registry {
    REGISTRY.get_or_init(|| {
        let r = Registry { lock: Mutex::new(()), by_name: HashMultiMap::new() };
        for site in crate::SITES {
            add_site(&r.by_name, site);
        }
        r
    })
}

fn lock(r: &Registry) -> MutexGuard<'_, ()> {
    // A panic while holding the lock left no broken invariant (every update
    // is a single publish), so a poisoned lock is still usable.
    r.lock.lock().unwrap_or_else(|e| e.into_inner())
}

fn find(
    by_name: &HashMultiMap<&'static str, &'static Probe>,
    name: &str,
) -> Option<&'static Probe> {
    let g = strobe_rcu::read_lock();
    by_name.get(name, &g).copied()
}

/// The probe called `name`, created if needed. Caller holds the lock.
fn probe_for(by_name: &HashMultiMap<&'static str, &'static Probe>, name: &str) -> &'static Probe {
    if let Some(p) = find(by_name, name) {
        return p;
    }
    let name: &'static str = Box::leak(name.to_owned().into_boxed_str());
    let p: &'static Probe = Box::leak(Box::new(Probe {
        name,
        list: AtomicPtr::new(std::ptr::null_mut()),
        sites: Mutex::new(Vec::new()),
        first_site: AtomicPtr::new(std::ptr::null_mut()),
    }));
    by_name.insert(name, p);
    p
}

fn sites_of(p: &Probe) -> MutexGuard<'_, Vec<&'static Site>> {
    p.sites.lock().unwrap_or_else(|e| e.into_inner())
}

/// Links `site` to its probe. Caller holds the lock (or builds the registry).
fn add_site(by_name: &HashMultiMap<&'static str, &'static Probe>, site: &'static Site) {
    let p = probe_for(by_name, site.name());
    let mut sites = sites_of(p);
    if sites.iter().any(|s| std::ptr::eq(*s, site)) {
        return;
    }
    sites.push(site);
    // Relaxed load: writers of `p.list` hold the registry lock, as we do.
    let list = p.list.load(Ordering::Relaxed);
    site.set_list(list);
    // Release: `fire_by_name` reads the site's fields after an Acquire load.
    let _ = p.first_site.compare_exchange(
        std::ptr::null_mut(),
        site as *const Site as *mut Site,
        Ordering::Release,
        Ordering::Relaxed,
    );
    site.set_state(if list.is_null() { OFF } else { ON });
}

/// Registers a site on its first hit (C sites). Idempotent.
pub(crate) fn register_site(site: &'static Site) {
    let r = registry();
    let _l = lock(r);
    add_site(&r.by_name, site);
}

/// Registers the C sites of one loaded module at once, so that they are listed and
/// attachable by name before their first hit. `include/strobe_probe.h` places every
/// C site in the module's `strobe_probe_sites` section and gives each module one
/// constructor that passes the section here (through `strobe_probe_register_sites`).
/// Sites already registered are skipped, so a module may be passed more than once.
/// Takes the registry lock and allocates: normal context only.
pub fn register_sites(sites: &'static [Site]) {
    let r = registry();
    let _l = lock(r);
    for site in sites {
        // Under the lock, as `register_site` (a concurrent first hit) also runs.
        if site.state() == crate::site::UNREGISTERED {
            add_site(&r.by_name, site);
        }
    }
}

/// Publishes a list of `owners` (none when empty) to the probe and each of
/// its sites, sets the sites' flags, and retires the old list. Caller holds
/// the lock.
fn publish(p: &Probe, owners: Vec<Arc<ConsumerInner>>) {
    let new = List::alloc(owners);
    // AcqRel: the release half publishes the new list to `fire_by_name`'s
    // Acquire load; the acquire half orders our retire after the accesses of
    // the writer that built the old one.
    let old = p.list.swap(new, Ordering::AcqRel);
    let on = !new.is_null();
    let sites = sites_of(p);
    for s in sites.iter() {
        s.set_list(new);
    }
    if on == old.is_null() {
        // Only on a change: firing threads read the flags' cache lines on
        // every hit, and rewriting them with the same value would still
        // invalidate those lines under attach/detach churn.
        for s in sites.iter() {
            s.set_state(if on { ON } else { OFF });
        }
    }
    drop(sites);
    if !old.is_null() {
        // SAFETY: no site and not the probe points at `old` any more, so only
        // read sections that began before now can hold it; `free` matches
        // `alloc`, and only this writer (holding the lock) swapped it out.
        unsafe { strobe_rcu::retire_raw(old.cast(), List::free) };
    }
}

/// The live consumers of `p`'s current list. Caller holds the lock.
fn current(p: &Probe) -> Vec<Arc<ConsumerInner>> {
    // Acquire: pairs with the publishing swap (same thread in practice, as
    // writers hold the lock; the list stays allocated because only writers
    // holding the lock retire it).
    let list = p.list.load(Ordering::Acquire);
    // SAFETY: see above: the list cannot be retired while we hold the lock.
    match unsafe { list.as_ref() } {
        Some(l) => l.owners.iter().filter(|o| !o.dead.load(Ordering::Relaxed)).cloned().collect(),
        None => Vec::new(),
    }
}

/// Attaches `consumer` to the probe called `name`, from any thread.
///
/// The probe need not have a registered site yet (sites of libraries loaded
/// later appear when they do, and a C site whose module registered before
/// the library was loaded appears on its first hit).
/// Hits that happen after this returns reach the consumer. Takes the registry
/// lock and allocates; not for signal handlers.
///
/// # Errors
/// [`ProbeError::BadName`] for an empty name.
pub fn attach(name: &str, consumer: Consumer) -> Result<Attachment, ProbeError> {
    if name.is_empty() {
        return Err(ProbeError::BadName);
    }
    let r = registry();
    let _l = lock(r);
    let p = probe_for(&r.by_name, name);
    let inner = Arc::new(ConsumerInner { c: consumer, dead: AtomicBool::new(false) });
    let mut owners = current(p);
    owners.push(inner.clone());
    publish(p, owners);
    Ok(Attachment { probe: p, inner: Some(inner) })
}

/// Attaches like [`attach`], but only to a probe that has a registered site.
///
/// # Errors
/// [`ProbeError::UnknownProbe`] (with close names) when no site has that name.
pub fn attach_existing(name: &str, consumer: Consumer) -> Result<Attachment, ProbeError> {
    let names = probe_names();
    if !names.iter().any(|n| n == name) {
        return Err(ProbeError::unknown(name, &names));
    }
    attach(name, consumer)
}

/// A consumer attached to a probe. Detaches when dropped.
#[must_use = "dropping the attachment detaches the consumer at once"]
pub struct Attachment {
    probe: &'static Probe,
    inner: Option<Arc<ConsumerInner>>,
}

impl Attachment {
    /// The probe's name.
    pub fn probe_name(&self) -> &'static str {
        self.probe.name
    }

    /// True once a removal the handler requested was confirmed by its filter
    /// (the handler is no longer called).
    pub fn is_removed(&self) -> bool {
        self.inner.as_ref().is_some_and(|c| c.dead.load(Ordering::Relaxed))
    }

    /// Detaches the consumer. When this returns, its handler and filter are
    /// never called again; its memory is freed after a grace period.
    ///
    /// The grace period is paced (see the module note): an isolated detach
    /// returns within microseconds, but detaches that follow each other
    /// closer than [`DETACH_GRACE_SPACING`] wait for it and share barriers,
    /// so detaching in a loop does not slow the firing threads.
    ///
    /// # Panics
    /// If called inside a read section (for example from a handler): the wait
    /// would never end. Return [`Action::Remove`] from a handler instead.
    pub fn detach(mut self) {
        assert_outside_read_section("detach");
        self.unlink(Wait::Normal);
    }

    /// Detaches like [`detach`](Self::detach), but forces the grace period
    /// at once even right after another one. Each call interrupts every CPU
    /// running a thread of the process: detaching this way in a loop slows
    /// the threads that fire probes.
    ///
    /// # Panics
    /// Inside a read section, as [`detach`](Self::detach).
    pub fn detach_expedited(mut self) {
        assert_outside_read_section("detach_expedited");
        self.unlink(Wait::Expedited);
    }

    fn unlink(&mut self, wait: Wait) {
        let Some(inner) = self.inner.take() else { return };
        let r = registry();
        {
            let _l = lock(r);
            let owners =
                current(self.probe).into_iter().filter(|o| !Arc::ptr_eq(o, &inner)).collect();
            publish(self.probe, owners);
        }
        // Every trigger that loaded a list holding the consumer has ended
        // once the wait returns (its cookie is taken after the unpublish).
        match wait {
            Wait::Normal => synchronize_paced(),
            Wait::Expedited => strobe_rcu::synchronize(),
            Wait::None => {}
        }
        drop(inner);
    }
}

/// How [`Attachment::unlink`] waits after unpublishing.
#[derive(Clone, Copy)]
enum Wait {
    /// A paced grace period ([`synchronize_paced`]).
    Normal,
    /// [`strobe_rcu::synchronize`] at once.
    Expedited,
    /// No wait (a drop inside a read section, or [`detach_all`] waiting once
    /// for all): the memory is still freed only after a grace period, through
    /// the retired list.
    None,
}

fn assert_outside_read_section(what: &str) {
    assert!(
        strobe_rcu::read_depth() == 0,
        "strobe_probe: {what} called from a handler or read section; return Action::Remove instead"
    );
}

/// The shortest interval between two grace periods that detaches force (see
/// the module note): about the cost, in barriers, of a thousand detaches a
/// second at most.
pub const DETACH_GRACE_SPACING: Duration = Duration::from_millis(1);

/// When (`now_ns`) a detach last ran a grace period itself; 0 before any.
static LAST_FORCED_NS: AtomicU64 = AtomicU64::new(0);

/// A paced grace period of the global domain: every read section that began
/// before this call has ended when it returns.
///
/// Correctness rests on the cookie alone: [`strobe_rcu::Domain::snapshot`]
/// orders the caller's unpublish before its read of the grace-period counter
/// (a `SeqCst` fence) and names the first grace period that starts after it;
/// `poll` (an `Acquire` load paired with the `SeqCst` increment that ends a
/// grace period) and `wait_for` return only once that grace period has
/// completed, whoever ran it. The sleep merely leaves the barrier to others
/// for a while. `LAST_FORCED_NS` is a pacing hint that guards no data, so it
/// is `Relaxed`; racing detaches may both see the spacing passed and both
/// reach `wait_for`, where they share grace periods under its lock.
fn synchronize_paced() {
    let d = strobe_rcu::global();
    let cookie = d.snapshot();
    let spacing = DETACH_GRACE_SPACING.as_nanos() as u64;
    loop {
        if d.poll(cookie) {
            return;
        }
        let due = LAST_FORCED_NS.load(Ordering::Relaxed).saturating_add(spacing);
        let now = crate::site::now_ns();
        if now >= due {
            break;
        }
        std::thread::sleep(Duration::from_nanos(due - now));
    }
    d.wait_for(cookie);
    LAST_FORCED_NS.store(crate::site::now_ns(), Ordering::Relaxed);
}

impl Drop for Attachment {
    fn drop(&mut self) {
        // Inside a read section the wait would deadlock: unlink without it
        // (memory is still freed only after a grace period).
        let wait = if strobe_rcu::read_depth() == 0 { Wait::Normal } else { Wait::None };
        self.unlink(wait);
    }
}

impl std::fmt::Debug for Attachment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Attachment")
            .field("probe", &self.probe.name)
            .field("removed", &self.is_removed())
            .finish()
    }
}

/// Detaches several consumers with a single (paced) grace period, cheaper
/// than one [`Attachment::detach`] each. Same guarantee for every one of them.
///
/// # Panics
/// Inside a read section, as [`Attachment::detach`].
pub fn detach_all(attachments: impl IntoIterator<Item = Attachment>) {
    assert_outside_read_section("detach_all");
    let mut held = Vec::new();
    for mut a in attachments {
        a.unlink(Wait::None);
        held.push(a);
    }
    synchronize_paced();
    drop(held);
}

/// Fires the probe called `name` without a site of its own (for dynamic
/// names, e.g. from an interpreter). Looks the probe up lock-free and walks
/// its consumers under one read section. The hit reports the probe's first
/// site, so it does nothing when the probe has no registered site.
pub fn fire_by_name(name: &str, args: &[u64]) {
    let Some(r) = REGISTRY.get() else { return };
    let g = strobe_rcu::read_lock();
    let Some(p) = r.by_name.get(name, &g).copied() else { return };
    // Acquire: pairs with the Release in `add_site`.
    // SAFETY: sites are statics ('static); null until the first registers.
    let Some(site) = (unsafe { p.first_site.load(Ordering::Acquire).as_ref() }) else { return };
    let n = args.len().min(crate::MAX_ARGS);
    let hit = Hit { site, kind: crate::HitKind::Fire, args: args.get(..n).unwrap_or(&[]) };
    // Acquire: pairs with the publishing swap in `publish`.
    // SAFETY: lists are freed only a grace period after they are replaced,
    // and `g`'s section is open.
    if let Some(list) = unsafe { p.list.load(Ordering::Acquire).as_ref() } {
        list.run(&hit);
    }
    drop(g);
}

/// A registered site, as [`sites`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteInfo {
    /// The probe's name.
    pub name: String,
    /// Declaring source file.
    pub file: String,
    /// Declaring source line.
    pub line: u32,
    /// Number of arguments.
    pub nargs: usize,
    /// Whether consumers are attached.
    pub enabled: bool,
}

/// Every registered site: all Rust sites of the program, and the C sites
/// that have fired at least once. Sorted by name, file and line.
pub fn sites() -> Vec<SiteInfo> {
    let r = registry();
    let _l = lock(r);
    let g = strobe_rcu::read_lock();
    let mut out = Vec::new();
    r.by_name.for_each_entry(&g, |_, p| {
        for s in sites_of(p).iter() {
            out.push(SiteInfo {
                name: s.name().to_string(),
                file: s.file().to_string(),
                line: s.line(),
                nargs: s.nargs(),
                enabled: s.state() == ON,
            });
        }
    });
    out.sort_by(|a, b| (&a.name, &a.file, a.line).cmp(&(&b.name, &b.file, b.line)));
    out
}

/// The names of probes that have at least one registered site, sorted.
pub fn probe_names() -> Vec<String> {
    let mut v: Vec<String> = sites().into_iter().map(|s| s.name).collect();
    v.dedup();
    v
}

/// How many consumers are linked to probe `name` (live or removed-but-not-yet
/// unlinked). For tests and diagnostics.
pub fn consumer_count(name: &str) -> usize {
    let r = registry();
    let Some(p) = find(&r.by_name, name) else { return 0 };
    let _g = strobe_rcu::read_lock();
    // Acquire and SAFETY: as in `fire_by_name`.
    unsafe { p.list.load(Ordering::Acquire).as_ref() }.map_or(0, |l| l.len)
}
