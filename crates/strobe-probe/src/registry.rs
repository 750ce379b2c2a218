//! The probe registry: probes by name, their sites, and which consumer list each
//! probe has (seed 001's `uprobe->consumers` under RCU); the writer side of the
//! trigger path in `site.rs`.
//!
//! # Design
//!
//! A [`Probe`] exists once per distinct name and is never freed (the set of
//! names is bounded by the program's sites plus the names consumers asked
//! for). It keeps the sites that carry its name and its consumer list (the
//! list's layout and its running are `site/list.rs`'s).
//!
//! Writers (attach, detach, registering a site) serialise on the registry's
//! mutex, as the kernel keeps `uprobe->register_rwsem` for registration, and
//! replace a probe's list copy-on-write: build the new list, publish it to the
//! probe and to each of its sites (`Release`), retire the old one.
//!
//! *Detach* publishes a list without the consumer, then waits for a grace
//! period: every trigger that could have loaded the old list has left its
//! read section, so once `detach` returns the handler is never called again.
//! The old list is retired once the probe and all its sites point at the new
//! one; when it is reclaimed (after a grace period) its `Arc` clones drop,
//! and with them the consumer's memory. A consumer whose removal its handler
//! requested (see [`Action::Remove`](crate::Action::Remove)) is unlinked by
//! the next writer on its probe: its attachment's detach or drop, or any
//! later attach or detach.
//!
//! *Registration.* Rust sites are found through the linker section [`SITES`]
//! when the registry is first used; C sites are handed over by their module's
//! constructor ([`register_sites`]), and one that constructor missed registers
//! on its first hit ([`fire_registering`], the C ABI's entry point).
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
//! Lookup by name for the dynamic path ([`fire_by_name`]) goes through a
//! [`HashMultiMap`], lock-free under the same read section.
//!
//! Must never: lock, allocate or touch a reference count on the trigger path
//! (the registry is off it, but for the lock-free [`fire_by_name`] and a C
//! site's one registering hit); free a consumer before a grace period has
//! passed since it was unlinked.

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use strobe_rcu::HashMultiMap;

use crate::site::list::{Consumer, ConsumerInner, List};
use crate::site::{now_ns, Hit, HitKind, Site, MAX_ARGS, OFF, ON, UNREGISTERED};
use crate::{ProbeError, SITES};

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
        for site in SITES {
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

/// Fires `site` as [`Site::fire_kind`] does, registering it first if it is not
/// registered yet: the C ABI's entry point. A C site starts unregistered when its
/// module's constructor could not hand it over ([`register_sites`]); its first hit then
/// takes the registry lock and allocates, once. Every later hit costs one `Relaxed` load
/// more than [`Site::fire_kind`].
#[inline]
pub fn fire_registering(site: &'static Site, kind: HitKind, args: &[u64]) {
    if site.state() == UNREGISTERED {
        register_site(site);
        if !site.is_enabled() {
            return;
        }
    }
    site.fire_kind(kind, args);
}

/// Registers a site on its first hit (C sites). Idempotent.
#[cold]
#[inline(never)]
fn register_site(site: &'static Site) {
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
        if site.state() == UNREGISTERED {
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
        Some(l) => l.owners().iter().filter(|o| !o.is_dead()).cloned().collect(),
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
    let inner = Arc::new(ConsumerInner::new(consumer));
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
        self.inner.as_ref().is_some_and(|c| c.is_dead())
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
    /// would never end. Return [`Action::Remove`](crate::Action::Remove) from a handler
    /// instead.
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
        let now = now_ns();
        if now >= due {
            break;
        }
        std::thread::sleep(Duration::from_nanos(due - now));
    }
    d.wait_for(cookie);
    LAST_FORCED_NS.store(now_ns(), Ordering::Relaxed);
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
    let n = args.len().min(MAX_ARGS);
    let hit = Hit { site, kind: HitKind::Fire, args: args.get(..n).unwrap_or(&[]) };
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
    unsafe { p.list.load(Ordering::Acquire).as_ref() }.map_or(0, List::len)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;
    use crate::Action;

    #[test]
    fn an_unregistered_site_registers_on_its_first_hit_through_fire_registering() {
        // What a C++ site (or a C site its module's constructor missed) looks like.
        static LATE: Site = Site::new("registry_test_late", file!(), line!(), 1);
        LATE.set_state(UNREGISTERED);
        let seen = Arc::new(AtomicU64::new(0));
        let s = seen.clone();
        let a = attach(
            "registry_test_late",
            Consumer::new(move |hit| {
                s.fetch_add(hit.arg(0), Ordering::Relaxed);
                Action::Keep
            }),
        )
        .unwrap();
        // The trigger path alone runs nothing for it and leaves it unregistered.
        LATE.fire_kind(HitKind::Fire, &[1]);
        assert_eq!((seen.load(Ordering::Relaxed), LATE.state()), (0, UNREGISTERED));
        assert!(!probe_names().iter().any(|n| n == "registry_test_late"));
        // The first hit through the C ABI's entry registers it and reaches the consumer.
        fire_registering(&LATE, HitKind::Fire, &[5]);
        assert_eq!((seen.load(Ordering::Relaxed), LATE.state()), (5, ON));
        fire_registering(&LATE, HitKind::Fire, &[7]);
        assert_eq!(seen.load(Ordering::Relaxed), 12);
        assert!(probe_names().iter().any(|n| n == "registry_test_late"));
        a.detach();
        assert_eq!(LATE.state(), OFF);
        fire_registering(&LATE, HitKind::Fire, &[100]);
        assert_eq!(seen.load(Ordering::Relaxed), 12, "detached: the handler never runs again");
    }
}
