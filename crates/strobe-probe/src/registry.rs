//! The probe registry: probes by name, their sites, and their consumer
//! lists (seed 001's `uprobe->consumers` under RCU).
//!
//! # Design
//!
//! A [`Probe`] exists once per distinct name and is never freed (the set of
//! names is bounded by the program's sites plus the names consumers asked
//! for). It keeps the sites that carry its name and its consumer list.
//!
//! The consumer list is an immutable array of entries (a consumer's handler
//! and filter pointers and an `Arc` that owns them) behind an
//! [`RcuPtr`], replaced copy-on-write by writers (attach, detach) that
//! serialise on the registry's mutex, as the kernel keeps
//! `uprobe->register_rwsem` for registration. The trigger path takes no lock,
//! no reference count and allocates nothing: it enters a read section, loads
//! the list (`Acquire`, paired with `RcuPtr::replace`'s `Release`) and calls
//! each consumer through a plain reference. The `Arc`s are touched only by
//! writers, so the list arrays can share consumers.
//!
//! *Detach* publishes a list without the consumer, then waits for a grace
//! period ([`strobe_rcu::synchronize`]): every trigger that could have loaded
//! the old list has left its read section, so once `detach` returns the
//! handler is never called again. The old list is retired; when it is
//! reclaimed (after a grace period) its `Arc` clones drop, and with them the
//! consumer's memory.
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

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use strobe_rcu::{HashMultiMap, RcuPtr, ReadGuard};

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

/// A consumer to attach to a probe: a handler and an optional filter.
pub struct Consumer {
    handler: Box<HandlerFn>,
    filter: Option<Box<FilterFn>>,
}

impl Consumer {
    /// A consumer calling `handler` on every hit of its probe.
    ///
    /// Handlers run on the triggering thread, inside a read section: they
    /// must not call [`Attachment::detach`] or anything that waits for a
    /// grace period (return [`Action::Remove`] instead), and if probes fire in
    /// signal handlers, the handler must be async-signal-safe.
    pub fn new(handler: impl Fn(&Hit<'_>) -> Action + Send + Sync + 'static) -> Self {
        Consumer { handler: Box::new(handler), filter: None }
    }

    /// Adds a filter: the handler runs only for hits the filter accepts.
    ///
    /// The filter also confirms removal requests: when the handler returns
    /// [`Action::Remove`], the filter is asked again with the same hit and
    /// the consumer is removed only if it now returns `false`.
    pub fn with_filter(
        mut self,
        filter: impl Fn(&Hit<'_>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.filter = Some(Box::new(filter));
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

/// One consumer in a published list. The handler and filter pointers are
/// copied out of the consumer so a trigger reaches the code in one hop less;
/// they point into boxes `inner` owns, so they live as long as the entry.
#[derive(Clone)]
struct Entry {
    handler: NonNull<HandlerFn>,
    filter: Option<NonNull<FilterFn>>,
    inner: Arc<ConsumerInner>,
}

// SAFETY: the pointers are shared references into `inner`'s boxes, whose
// targets are `Send + Sync`; the entry never mutates through them.
unsafe impl Send for Entry {}
// SAFETY: as above.
unsafe impl Sync for Entry {}

impl Entry {
    fn new(inner: Arc<ConsumerInner>) -> Self {
        let handler = NonNull::from(&*inner.c.handler);
        let filter = inner.c.filter.as_deref().map(NonNull::from);
        Entry { handler, filter, inner }
    }
}

type List = Vec<Entry>;

/// One probe name: its sites and its consumers.
pub struct Probe {
    name: &'static str,
    consumers: RcuPtr<List>,
    /// Sites with this name; changed only under the registry lock.
    sites: Mutex<Vec<&'static Site>>,
    /// The first site registered with this name, for [`fire_by_name`].
    first_site: AtomicPtr<Site>,
}

impl Probe {
    /// Runs every live consumer on `hit`. Lock-free, allocation-free.
    #[inline]
    pub(crate) fn dispatch(&self, guard: &ReadGuard<'_>, hit: &Hit<'_>) {
        let Some(list) = self.consumers.load(guard) else { return };
        for e in list.iter() {
            // SAFETY: the entry's pointers target boxes its `inner` owns; the
            // list (and so the entry) lives until a grace period after it is
            // replaced, and the guard's section keeps it from ending.
            let handler = unsafe { e.handler.as_ref() };
            let Some(filter) = e.filter else {
                // No filter: it wants every hit and can never be removed by
                // request, so there is no `dead` flag to check.
                let _ = handler(hit);
                continue;
            };
            // SAFETY: as for `handler`.
            let filter = unsafe { filter.as_ref() };
            // Relaxed: `dead` guards no data; it only stops later calls, and
            // the store below is seen by this thread at once and by others
            // soon (a confirmed removal races with concurrent hits anyway).
            if e.inner.dead.load(Ordering::Relaxed) || !filter(hit) {
                continue;
            }
            if handler(hit) == Action::Remove && !filter(hit) {
                e.inner.dead.store(true, Ordering::Relaxed);
            }
        }
    }
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
        consumers: RcuPtr::new(None),
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
    site.link(p);
    // Release: `fire_by_name` reads the site's fields after an Acquire load.
    let _ = p.first_site.compare_exchange(
        std::ptr::null_mut(),
        site as *const Site as *mut Site,
        Ordering::Release,
        Ordering::Relaxed,
    );
    site.set_state(if p.consumers.is_none() { OFF } else { ON });
}

/// Registers a site on its first hit (C sites). Idempotent.
pub(crate) fn register_site(site: &'static Site) {
    let r = registry();
    let _l = lock(r);
    add_site(&r.by_name, site);
}

/// Publishes `list` (None when empty) and sets the sites' flags. Caller holds
/// the lock.
fn publish(p: &Probe, list: List) {
    let on = !list.is_empty();
    let was_on = !p.consumers.is_none();
    p.consumers.replace(on.then(|| Box::new(list)));
    if on != was_on {
        // Only on a change: firing threads read the flags' cache lines on
        // every hit, and rewriting them with the same value would still
        // invalidate those lines under attach/detach churn.
        for s in sites_of(p).iter() {
            s.set_state(if on { ON } else { OFF });
        }
    }
}

fn current(p: &Probe) -> List {
    let g = strobe_rcu::read_lock();
    p.consumers
        .load(&g)
        .map(|l| l.iter().filter(|e| !e.inner.dead.load(Ordering::Relaxed)).cloned().collect())
        .unwrap_or_default()
}

/// Attaches `consumer` to the probe called `name`, from any thread.
///
/// The probe need not have a registered site yet (C sites register on their
/// first hit, and sites of libraries loaded later appear when they do).
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
    let mut list = current(p);
    list.push(Entry::new(inner.clone()));
    publish(p, list);
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
    /// # Panics
    /// If called inside a read section (for example from a handler): the wait
    /// would never end. Return [`Action::Remove`] from a handler instead.
    pub fn detach(mut self) {
        assert!(
            strobe_rcu::read_depth() == 0,
            "strobe_probe: detach called from a handler or read section; return Action::Remove instead"
        );
        self.unlink(true);
    }

    fn unlink(&mut self, wait: bool) {
        let Some(inner) = self.inner.take() else { return };
        let r = registry();
        {
            let _l = lock(r);
            let list: List = current(self.probe)
                .into_iter()
                .filter(|e| !Arc::ptr_eq(&e.inner, &inner))
                .collect();
            publish(self.probe, list);
        }
        if wait {
            // Every trigger that loaded a list holding the consumer has ended.
            strobe_rcu::synchronize();
        }
        drop(inner);
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        // Inside a read section the wait would deadlock: unlink without it
        // (memory is still freed only after a grace period).
        let wait = strobe_rcu::read_depth() == 0;
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

/// Detaches several consumers with a single grace period (cheaper than one
/// [`Attachment::detach`] each). Same guarantee for every one of them.
///
/// # Panics
/// Inside a read section, as [`Attachment::detach`].
pub fn detach_all(attachments: impl IntoIterator<Item = Attachment>) {
    assert!(strobe_rcu::read_depth() == 0, "strobe_probe: detach_all called inside a read section");
    let mut held = Vec::new();
    for mut a in attachments {
        a.unlink(false);
        held.push(a);
    }
    strobe_rcu::synchronize();
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
    p.dispatch(&g, &hit);
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
    let g = strobe_rcu::read_lock();
    p.consumers.load(&g).map_or(0, |l| l.len())
}
