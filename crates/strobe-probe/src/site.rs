//! Probe sites: the static a `probe!` expansion (or `STROBE_PROBE` in C)
//! declares, and the one-branch test that keeps a disabled site nearly free.
//!
//! # The flag and its ordering
//!
//! A site is one `#[repr(C)]` static (C declares the identical struct in
//! `include/strobe_probe.h`). Its first byte, `state`, is the whole disabled
//! path: a `Relaxed` load and a predictable branch around the firing call,
//! which is out of line. The call is deliberately not `#[cold]`: a cold
//! callee makes the compiler move the call out of the caller's straight
//! line, and an enabled hit then pays a jump there and one back (about 7%
//! of a trigger, measured with the two layouts side by side), while the
//! disabled test costs the same either way (the branch is predicted).
//!
//! `Relaxed` is enough because the flag is only a hint; it guards no data.
//! What a firing site reads (its consumer list and the entries) it loads
//! with `Acquire` inside a read section, paired with the registry's `Release`
//! publications. The guarantee users can observe still holds with `Relaxed`:
//! a hit that *happens after* `attach` returns (the attaching thread released
//! a lock, a channel, a join that the firing thread acquired) cannot read a
//! value of the flag older than `attach`'s store, by read-write coherence. A
//! hit concurrent with `attach` may or may not be seen, exactly as with the
//! kernel's uprobes while `uprobe_register` runs. On detach, a stale `1` only
//! sends a hit down the slow path, which finds the list without the consumer
//! (the grace period in `detach` is what guarantees the handler is gone).
//!
//! States: `0` registered and no consumer, `1` registered with consumers,
//! `2` not registered yet (C sites start there and register on their first
//! hit, through the registry's `fire_registering`; Rust sites are found
//! through a linker section and start at `0`). An unregistered site has no
//! list, so firing it here runs nothing.
//!
//! # What this module owns
//!
//! The site static, its flag, what a hit is ([`Hit`], [`HitKind`]), the clock
//! scoped probes time with, and the trigger path: from the flag through the
//! read section to running the site's consumer list ([`list`], the list's
//! layout and its calls). Which list a site points at, and registering sites,
//! is the registry's: it writes `state` and `list`, this module only reads
//! them.
//!
//! Must never: make the disabled path more than the load and the branch,
//! evaluate a probe's arguments when the site is disabled, or lock, allocate
//! or touch a reference count on the trigger path.

use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};

pub(crate) mod list;

use list::List;

/// Disabled: registered, no consumer attached.
pub(crate) const OFF: u8 = 0;
/// Enabled: registered, with consumers.
pub(crate) const ON: u8 = 1;
/// Not registered yet: the next hit registers the site.
pub(crate) const UNREGISTERED: u8 = 2;

/// The most arguments a probe point carries.
pub const MAX_ARGS: usize = 6;

/// One probe point in the program, declared by [`probe!`](crate::probe!),
/// [`probe_scope!`](crate::probe_scope!) or C's `STROBE_PROBE`.
///
/// The layout is part of the C ABI (`struct strobe_probe_site`): do not
/// reorder fields.
///
/// Aligned to a cache line (64 bytes, the size of the fields rounded up):
/// the disabled test reads `state` and a firing thread `list` on every hit,
/// so a site must not share its line with a program variable that some
/// thread writes (false sharing would turn each of those reads into a
/// cache miss). Only attach and detach write the line.
#[repr(C, align(64))]
pub struct Site {
    state: AtomicU8,
    /// The probe's current consumer list (a copy of the probe's pointer,
    /// written under the registry lock), null when there is none.
    list: AtomicPtr<List>,
    name_ptr: *const u8,
    name_len: usize,
    file_ptr: *const u8,
    file_len: usize,
    line: u32,
    nargs: u32,
}

// The C header asserts the same size and alignment.
const _: () = assert!(std::mem::size_of::<Site>() == 64);
const _: () = assert!(std::mem::align_of::<Site>() == 64);

// SAFETY: the raw pointers point at immutable 'static bytes (string literals);
// every mutable field is atomic.
unsafe impl Sync for Site {}
// SAFETY: as above; nothing in a site is tied to a thread.
unsafe impl Send for Site {}

impl Site {
    /// A site for a Rust probe point (registered through the linker section
    /// [`SITES`](crate::SITES), so it starts disabled). Used by the macros.
    #[doc(hidden)]
    pub const fn new(name: &'static str, file: &'static str, line: u32, nargs: usize) -> Site {
        assert!(nargs <= MAX_ARGS, "a probe point takes at most 6 arguments");
        Site {
            state: AtomicU8::new(OFF),
            list: AtomicPtr::new(std::ptr::null_mut()),
            name_ptr: name.as_ptr(),
            name_len: name.len(),
            file_ptr: file.as_ptr(),
            file_len: file.len(),
            line,
            nargs: nargs as u32,
        }
    }

    /// True when consumers may be attached (or the site is not registered
    /// yet). The whole cost of a disabled probe point: one `Relaxed` load and
    /// a branch (see the module note for why `Relaxed` suffices).
    #[inline(always)]
    pub fn is_enabled(&self) -> bool {
        self.state.load(Ordering::Relaxed) != OFF
    }

    /// The probe's name. For C sites whose name is not UTF-8, `"?"`.
    pub fn name(&self) -> &'static str {
        // SAFETY: ptr/len describe a 'static byte string (a Rust `&'static str`
        // or a C string literal, per the header's contract).
        let b = unsafe { std::slice::from_raw_parts(self.name_ptr, self.name_len) };
        std::str::from_utf8(b).unwrap_or("?")
    }

    /// The source file that declares the site.
    pub fn file(&self) -> &'static str {
        // SAFETY: as in `name`.
        let b = unsafe { std::slice::from_raw_parts(self.file_ptr, self.file_len) };
        std::str::from_utf8(b).unwrap_or("?")
    }

    /// The source line that declares the site.
    pub fn line(&self) -> u32 {
        self.line
    }

    /// How many arguments the site passes.
    pub fn nargs(&self) -> usize {
        self.nargs as usize
    }

    pub(crate) fn set_state(&self, s: u8) {
        // Relaxed: see the module note; callers hold the registry lock, so the
        // stores of one site are ordered among themselves.
        self.state.store(s, Ordering::Relaxed);
    }

    pub(crate) fn state(&self) -> u8 {
        self.state.load(Ordering::Relaxed)
    }

    pub(crate) fn set_list(&self, l: *mut List) {
        // Release: a firing thread that loads the pointer (Acquire) sees the
        // list fully built.
        self.list.store(l, Ordering::Release);
    }

    /// Fires the site: runs the attached consumers with `args`.
    ///
    /// Called only when [`is_enabled`](Self::is_enabled) said so; out of line
    /// so a disabled site stays small (and not cold: see the module note).
    /// Takes no lock and allocates nothing (a thread's first hit registers the
    /// thread with strobe-rcu, once). A site that is not registered yet (a C
    /// site its module's constructor missed) runs nothing here:
    /// [`fire_registering`](crate::fire_registering) registers it first.
    #[inline(never)]
    pub fn fire(&'static self, args: &[u64]) {
        self.fire_inline(HitKind::Fire, args);
    }

    /// Fires the site with an explicit kind (scope entry/exit); for the C
    /// ABI and the macros. Same guarantees as [`fire`](Self::fire).
    #[inline(never)]
    pub fn fire_kind(&'static self, kind: HitKind, args: &[u64]) {
        self.fire_inline(kind, args);
    }

    #[inline(always)]
    fn fire_inline(&'static self, kind: HitKind, args: &[u64]) {
        // The hit is built first: from here on the arguments live on the
        // stack, and no register holds one across a call, on any path.
        let hit = Hit { site: self, kind, args: args.get(..MAX_ARGS).unwrap_or(args) };
        fire_hit(&hit);
    }
}

/// Fires a registered site's hit. Only the common entry (an outermost
/// section on a registered thread) is inline; a hit nested in a section or
/// a thread's first hit (which registers it) goes out of line. Everything
/// comes from `hit`, on the caller's stack, so the common path keeps only
/// the reader record's address in a register across the consumer's call,
/// and leaves its section with one decrement through it.
#[inline(always)]
fn fire_hit(hit: &Hit<'_>) {
    let Some(guard) = strobe_rcu::try_read_lock_outermost() else {
        return fire_nested(hit);
    };
    run_list(hit);
    drop(guard);
}

/// Runs the consumer list of the hit's site. The caller is inside a read
/// section.
#[inline(always)]
fn run_list(hit: &Hit<'_>) {
    // Acquire: pairs with the Release in `set_list`.
    let l = hit.site.list.load(Ordering::Acquire);
    // SAFETY: a list is retired only after no site points at it, and freed
    // a grace period later; the caller's section began before we loaded it.
    if let Some(list) = unsafe { l.as_ref() } {
        list.run(hit);
    }
}

/// A hit inside a read section (a consumer's, or the interrupted code's
/// when a probe fires in a signal handler), or on a thread not yet
/// registered with strobe-rcu: `read_lock` nests, registers the thread (an
/// allocation, once per thread), or borrows a record past thread exit.
#[cold]
#[inline(never)]
fn fire_nested(hit: &Hit<'_>) {
    let guard = strobe_rcu::read_lock();
    run_list(hit);
    drop(guard);
}

impl std::fmt::Debug for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Site")
            .field("name", &self.name())
            .field("file", &self.file())
            .field("line", &self.line)
            .field("nargs", &self.nargs)
            .field("enabled", &self.is_enabled())
            .finish()
    }
}

/// What kind of event a hit reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitKind {
    /// A plain probe point was reached.
    Fire,
    /// A scoped probe was entered.
    Entry,
    /// A scoped probe was left after `ns` nanoseconds.
    Exit {
        /// Time since the matching entry, in nanoseconds (CLOCK_MONOTONIC).
        ns: u64,
    },
}

/// One trigger of a probe point, as consumers see it.
#[derive(Debug, Clone, Copy)]
pub struct Hit<'a> {
    /// The site that fired.
    pub site: &'static Site,
    /// Plain hit, scope entry, or scope exit with its duration.
    pub kind: HitKind,
    /// The arguments, converted to `u64` (pointers as addresses, signed
    /// integers sign-extended).
    pub args: &'a [u64],
}

impl Hit<'_> {
    /// The probe's name.
    pub fn name(&self) -> &'static str {
        self.site.name()
    }

    /// Argument `i`, or 0 when the site passes fewer.
    pub fn arg(&self, i: usize) -> u64 {
        self.args.get(i).copied().unwrap_or(0)
    }
}

/// Monotonic nanoseconds, the clock scoped probes time with (vDSO
/// clock_gettime: no lock, no allocation, async-signal-safe).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid timespec out-pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// The guard of a scoped probe ([`probe_scope!`](crate::probe_scope!)): fires
/// the exit event with the elapsed time when dropped.
///
/// When the site was disabled at entry, the guard holds nothing and its drop
/// is one more predictable branch.
#[must_use = "the scope's exit fires when the guard is dropped; bind it to a variable"]
pub struct ScopeGuard {
    site: Option<&'static Site>,
    start: u64,
}

impl ScopeGuard {
    /// A guard that fires nothing.
    #[doc(hidden)]
    #[inline(always)]
    pub const fn disabled() -> Self {
        ScopeGuard { site: None, start: 0 }
    }

    /// Fires the entry event and starts timing. Used by the macro.
    #[doc(hidden)]
    #[cold]
    #[inline(never)]
    pub fn enter(site: &'static Site, args: &[u64]) -> Self {
        site.fire_kind(HitKind::Entry, args);
        ScopeGuard { site: Some(site), start: now_ns() }
    }
}

impl Drop for ScopeGuard {
    #[inline(always)]
    fn drop(&mut self) {
        if let Some(site) = self.site {
            exit_scope(site, self.start);
        }
    }
}

#[cold]
#[inline(never)]
fn exit_scope(site: &'static Site, start: u64) {
    let ns = now_ns().saturating_sub(start);
    site.fire_kind(HitKind::Exit { ns }, &[]);
}
