//! The module table: which code is where, and where its unwind tables are,
//! published to signal handlers through strobe-rcu.
//!
//! Owns: the process-wide [`Registry`] of [`Module`]s, its private strobe-rcu
//! [`Domain`](strobe_rcu::Domain), and the functions the agent calls at start
//! and from its interposed `dlopen`/`dlclose`:
//!
//! | when | call |
//! |---|---|
//! | agent start (constructor), before the first sample | [`init`] |
//! | each thread that samples, at its start | [`ThreadCache::new`](crate::ThreadCache::new) (registers the thread) |
//! | interposed `dlopen`/`dlmopen`, after the real call returned | [`after_dlopen`] |
//! | interposed `dlclose`, before the real call | [`before_dlclose`] |
//! | interposed `dlclose`, after the real call returned | [`after_dlclose`] |
//!
//! None of them may be called from a signal handler. Readers (the walkers)
//! only load the table inside a read section.
//!
//! # The dlclose protocol
//!
//! A handler on another thread must never read the unwind data or code of a
//! module after it is unmapped. `dlclose(h)` may unload `h`'s library and any
//! of its dependencies, and only the dynamic linker knows which, so:
//!
//! 1. [`before_dlclose`] publishes a table that lists only *permanent*
//!    modules (loaded with the program: never unloaded) and waits for a grace
//!    period: from then on no handler can reach a removable module.
//! 2. The agent calls the real `dlclose`.
//! 3. [`after_dlclose`] rescans with `dl_iterate_phdr` and publishes the
//!    modules still loaded; the old tables are freed after a grace period.
//!    Call it whatever the real `dlclose` returned: every
//!    [`before_dlclose`] needs its [`after_dlclose`], or removable modules
//!    stay hidden.
//!
//! *Permanent* is decided once, at [`init`]: the program, the vdso, the
//! dynamic linker, the `LD_PRELOAD` libraries and everything their
//! `DT_NEEDED` entries reach (glibc never unloads those). A library some
//! constructor loaded with `dlopen` before [`init`] ran, and every library
//! loaded after it, is removable.
//!
//! Samples taken in the window between 1 and 3 whose stacks pass through a
//! `dlopen`ed library end early ([`WalkEnd::NotInModule`](crate::WalkEnd)):
//! a dlclose costs two grace periods (microseconds) of partial stacks, never
//! a fault. Concurrent `dlopen` rescans cannot undo step 1 (the registry
//! lists no removable module while any `dlclose` is in progress) and a scan
//! taken before an unload but offered after it is ignored (scans carry the
//! dynamic linker's load/unload count); see `registry.rs`.
//!
//! Second line of defence: removable modules' `.eh_frame` tables are copies
//! the module owns (`scan.rs`; `.debug_frame` is always one, read from the
//! file), and the walkers read no code bytes, so even an
//! unload that bypasses the interposed `dlclose` (glibc unloading a gconv
//! module through its internal `__libc_dlclose`) cannot make a handler fault;
//! the table is merely stale until the next rescan.
//!
//! # No threads
//!
//! The registry's domain is created with [`Domain::new`](strobe_rcu::Domain::new),
//! which has no background reclaimer, and the registry never retires
//! anything: each update waits for its own grace period with
//! `Domain::synchronize` and frees the old table itself. Nothing here starts a
//! thread in the target (strobe-rcu's global domain would: `retire`,
//! `RcuPtr::replace` and the exit of a thread registered with it ask for its
//! reclaimer thread).
//!
//! *fork.* A child inherits the table and the domain's reader records. A
//! thread of the parent that was inside a walk when another thread forked
//! leaves its record in a read section forever in the child, whose next
//! grace period (its first `dlopen` or `dlclose` through the wrappers)
//! would then never end; walks in the child are unaffected. So the child
//! calls [`after_fork_in_child`]: its updates never wait, and leak the
//! tables they replace.
//!
//! Must never: run in a signal handler; call `dl_iterate_phdr` while holding
//! the registry's writer lock (a library constructor that calls `dlopen`
//! holds the dynamic linker's lock and would wait for ours: lock order is
//! always the linker's, then ours); start a thread.

mod debug_frame;
mod file;
mod registry;
mod scan;

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

pub(crate) use debug_frame::DebugFrame;
pub use registry::{ModuleRange, Registry, Table};
pub use scan::Module;
pub(crate) use scan::Tables;

use scan::Key;

struct Global {
    registry: Registry<Module>,
    permanent: HashSet<Key>,
}

static GLOBAL: OnceLock<Global> = OnceLock::new();

/// Scans the loaded modules and publishes the first table. Idempotent; call
/// it at agent start, outside signal handlers (it allocates and takes the
/// dynamic linker's lock). Walks before it end at once with
/// [`WalkEnd::NotInModule`](crate::WalkEnd::NotInModule).
pub fn init() {
    GLOBAL.get_or_init(|| {
        let first = scan::scan(&[], None);
        let permanent = scan::permanent_closure(&first);
        let first = scan::apply_closure(first, &permanent);
        let registry = Registry::new(strobe_rcu::Domain::new());
        registry.publish(first.stamp, first.modules);
        Global { registry, permanent }
    });
}

/// The registry, once [`init`] ran. Async-signal-safe (one load).
#[inline]
pub(crate) fn registry() -> Option<&'static Registry<Module>> {
    GLOBAL.get().map(|g| &g.registry)
}

fn global() -> &'static Global {
    init();
    GLOBAL.get().expect("initialised above")
}

/// Rescans after the real `dlopen` (or `dlmopen`) returned, successful or
/// not, and publishes the new modules. Not async-signal-safe.
pub fn after_dlopen() {
    rescan();
}

/// Step 1 of the dlclose protocol (module note): call before the real
/// `dlclose`. Waits for a grace period. Not async-signal-safe.
pub fn before_dlclose() {
    global().registry.begin_close();
}

/// Step 3 of the dlclose protocol: call after the real `dlclose` returned
/// (whatever it returned). Not async-signal-safe.
pub fn after_dlclose() {
    let g = global();
    let known = g.registry.latest();
    let s = scan::scan(&known, Some(&g.permanent));
    g.registry.end_close(s.stamp, s.modules);
}

/// Rescans the loaded modules and publishes what changed (for loads the
/// agent did not see, such as a library mapped before [`init`]).
pub fn rescan() {
    let g = global();
    let known = g.registry.latest();
    let s = scan::scan(&known, Some(&g.permanent));
    g.registry.publish(s.stamp, s.modules);
}

/// In a forked child, before it walks or loads anything: updates of the table stop
/// waiting for grace periods (the parent's threads' reader records came along; see
/// [`Registry::after_fork_in_child`]), so DWARF walks go on in the child.
pub fn after_fork_in_child() {
    if let Some(g) = GLOBAL.get() {
        g.registry.after_fork_in_child();
    }
}

/// The modules the latest scan found (for diagnostics and tests).
pub fn loaded() -> Vec<Arc<Module>> {
    global().registry.latest()
}
