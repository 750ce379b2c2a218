//! strobe-probe: probe points declared inside a program, with a trigger path
//! that takes no lock, no reference count and allocates nothing.
//!
//! Modelled on the kernel's uprobe hot path under RCU (seed 001): a probe
//! point ([`probe!`]) is a static [`Site`] whose disabled cost is one `Relaxed`
//! load and one predictable branch; enabled, it enters a strobe-rcu read
//! section, loads the consumer list its site points at and calls each consumer. Attach
//! and detach take the registry lock and replace the list copy-on-write;
//! detach waits for a grace period, so when it returns the handler is never
//! called again, and the consumer is freed after a grace period. Detaches
//! pace the grace periods they force (at most one per
//! [`DETACH_GRACE_SPACING`], shared by the detaches waiting for it), so
//! detaching in a loop does not keep interrupting the threads that fire
//! probes; [`Attachment::detach_expedited`] skips the pacing.
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//! use strobe_probe::{attach, probe, Action, Consumer};
//!
//! fn work(i: u64) {
//!     probe!(doc_work, i, i * 2);
//! }
//!
//! let seen = Arc::new(AtomicU64::new(0));
//! let s = seen.clone();
//! let a = attach("doc_work", Consumer::new(move |hit| {
//!     s.fetch_add(hit.arg(1), Ordering::Relaxed);
//!     Action::Keep
//! }))
//! .unwrap();
//! for i in 0..4 {
//!     work(i);
//! }
//! a.detach(); // from here on the handler never runs
//! work(100);
//! assert_eq!(seen.load(Ordering::Relaxed), 2 * (0 + 1 + 2 + 3));
//! ```
//!
//! # Registration: linker sections, for Rust and for C
//!
//! Every Rust site adds a reference to itself to the [`SITES`] distributed
//! slice (linkme: a linker section gathered at link time). The registry walks
//! it once, when first used, so every Rust site is listed (`strobe probe
//! --list`) and attachable by name before it ever runs, and no hit ever pays
//! for registration. C sites (`include/strobe_probe.h`) live in their module's
//! `strobe_probe_sites` section, and one constructor per module hands the
//! section to [`register_sites`] at load time, so they too are listed before
//! they fire. A C site the constructor could not register (the library was
//! absent when the module's constructors ran, or the toolchain put the site
//! elsewhere) starts "unregistered" and takes the slow path once: its first hit
//! takes the registry lock and registers it. That hit is the only one that
//! locks or allocates.
//!
//! # Environment (the counting consumer strobe's CLI enables)
//!
//! See [`env`](mod@env): `STROBE_PROBE_COUNT=name,...` attaches counting
//! consumers at load time and `STROBE_PROBE_LIST=1` lists the sites, both
//! written as JSON lines at exit to `STROBE_PROBE_OUT` (or stderr);
//! `STROBE_PROBE_TRACE=name,...` writes one line per hit as it happens.
//!
//! # Async-signal safety
//!
//! A registered site may fire in a signal handler on a thread that has called
//! [`strobe_rcu::register_current_thread`] (or fired any probe before) in
//! normal context, provided the consumers' handlers and filters are
//! themselves async-signal-safe. Handlers run inside a read section: they
//! must not detach (return [`Action::Remove`] instead) or wait for a grace
//! period.
//!
//! Must never: lock, allocate or touch a reference count on the trigger path
//! of a registered site; call a handler after its detach returned.

pub mod env;
mod registry;
mod site;

pub use registry::{
    attach, attach_existing, consumer_count, detach_all, fire_by_name, fire_registering,
    probe_names, register_sites, sites, Attachment, Probe, SiteInfo, DETACH_GRACE_SPACING,
};
pub use site::list::{Action, Consumer};
pub use site::{now_ns, Hit, HitKind, ScopeGuard, Site, MAX_ARGS};

#[doc(hidden)]
pub use linkme as __linkme;

/// Every Rust probe site of the program, gathered by the linker.
#[linkme::distributed_slice]
pub static SITES: [&'static Site];

/// Why attaching a consumer failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// The probe name was empty.
    #[error("the probe name is empty: give the name of a probe point (list the probe points the program has to see their names)")]
    BadName,
    /// No site has this name.
    #[error("no probe point named '{name}' in this program{hint}; list the probe points the program has to see their names")]
    UnknownProbe {
        /// The name asked for.
        name: String,
        /// ", did you mean ...?" or empty.
        hint: String,
    },
}

impl ProbeError {
    pub(crate) fn unknown(name: &str, known: &[String]) -> Self {
        let mut close: Vec<(usize, &String)> = known
            .iter()
            .map(|k| (edit_distance(name, k), k))
            .filter(|(d, k)| {
                *d <= 2.max(k.len() / 3) || k.contains(name) || name.contains(k.as_str())
            })
            .collect();
        close.sort();
        let hint = match close.as_slice() {
            [] => String::new(),
            c => {
                let names: Vec<&str> = c.iter().take(3).map(|(_, k)| k.as_str()).collect();
                format!(" (did you mean {}?)", names.join(", "))
            }
        };
        ProbeError::UnknownProbe { name: name.to_string(), hint }
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// A value a probe point can carry: integers (signed ones sign-extended),
/// `bool`, `char`, raw pointers and references (as addresses).
pub trait ProbeArg {
    /// The value as the probe's `u64` argument.
    fn probe_arg(self) -> u64;
}

macro_rules! arg_unsigned {
    ($($t:ty),*) => {$(
        impl ProbeArg for $t {
            #[inline(always)]
            fn probe_arg(self) -> u64 { self as u64 }
        }
    )*};
}
macro_rules! arg_signed {
    ($($t:ty),*) => {$(
        impl ProbeArg for $t {
            #[inline(always)]
            fn probe_arg(self) -> u64 { self as i64 as u64 }
        }
    )*};
}
arg_unsigned!(u8, u16, u32, u64, usize);
arg_signed!(i8, i16, i32, i64, isize);

impl ProbeArg for bool {
    #[inline(always)]
    fn probe_arg(self) -> u64 {
        u64::from(self)
    }
}
impl ProbeArg for char {
    #[inline(always)]
    fn probe_arg(self) -> u64 {
        u64::from(self)
    }
}
impl<T: ?Sized> ProbeArg for *const T {
    #[inline(always)]
    fn probe_arg(self) -> u64 {
        self.cast::<()>() as usize as u64
    }
}
impl<T: ?Sized> ProbeArg for *mut T {
    #[inline(always)]
    fn probe_arg(self) -> u64 {
        self.cast::<()>() as usize as u64
    }
}
impl<T: ?Sized> ProbeArg for &T {
    #[inline(always)]
    fn probe_arg(self) -> u64 {
        (self as *const T).cast::<()>() as usize as u64
    }
}

/// Declares a probe point and fires it when consumers are attached.
///
/// `probe!(name, a, b, ...)` with a name (an identifier or a string literal)
/// and up to 6 arguments ([`ProbeArg`]: integers, pointers, references).
/// Disabled, it costs one `Relaxed` load and one predictable branch, and the
/// arguments are not evaluated.
///
/// ```
/// # fn f(len: usize, p: *const u8) {
/// strobe_probe::probe!(alloc_slow, len, p);
/// strobe_probe::probe!("net:rx", len);
/// # }
/// ```
///
/// More than 6 arguments do not compile:
///
/// ```compile_fail
/// strobe_probe::probe!(too_many, 1, 2, 3, 4, 5, 6, 7);
/// ```
#[macro_export]
macro_rules! probe {
    ($name:ident $(, $arg:expr)* $(,)?) => {
        $crate::__probe_impl!(::core::stringify!($name); $($arg),*)
    };
    ($name:literal $(, $arg:expr)* $(,)?) => {
        $crate::__probe_impl!($name; $($arg),*)
    };
}

/// A scoped probe (the uretprobe analog): fires an entry event now and an
/// exit event carrying the elapsed nanoseconds when the returned guard drops.
///
/// ```
/// fn parse(buf: &[u8]) -> usize {
///     let _scope = strobe_probe::probe_scope!(parse, buf.len());
///     buf.len()
/// }
/// # parse(b"x");
/// ```
#[macro_export]
macro_rules! probe_scope {
    ($name:ident $(, $arg:expr)* $(,)?) => {
        $crate::__probe_scope_impl!(::core::stringify!($name); $($arg),*)
    };
    ($name:literal $(, $arg:expr)* $(,)?) => {
        $crate::__probe_scope_impl!($name; $($arg),*)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __probe_site {
    ($name:expr; $($arg:expr),*) => {{
        static __STROBE_SITE: $crate::Site =
            $crate::Site::new($name, ::core::file!(), ::core::line!(), $crate::__count!($($arg),*));
        #[$crate::__linkme::distributed_slice($crate::SITES)]
        #[linkme(crate = $crate::__linkme)]
        static __STROBE_SITE_REF: &'static $crate::Site = &__STROBE_SITE;
        &__STROBE_SITE
    }};
}

#[doc(hidden)]
#[macro_export]
macro_rules! __probe_impl {
    ($name:expr; $($arg:expr),*) => {{
        let site: &'static $crate::Site = $crate::__probe_site!($name; $($arg),*);
        if site.is_enabled() {
            site.fire(&[$($crate::ProbeArg::probe_arg($arg)),*]);
        }
    }};
}

#[doc(hidden)]
#[macro_export]
macro_rules! __probe_scope_impl {
    ($name:expr; $($arg:expr),*) => {{
        let site: &'static $crate::Site = $crate::__probe_site!($name; $($arg),*);
        if site.is_enabled() {
            $crate::ScopeGuard::enter(site, &[$($crate::ProbeArg::probe_arg($arg)),*])
        } else {
            $crate::ScopeGuard::disabled()
        }
    }};
}

#[doc(hidden)]
#[macro_export]
macro_rules! __count {
    () => { 0usize };
    ($head:expr $(, $tail:expr)*) => { 1usize + $crate::__count!($($tail),*) };
}
