//! The C ABI of strobe's probe points, declared by `include/strobe_probe.h`.
//!
//! A C probe site is a `static struct strobe_probe_site`, laid out exactly as
//! [`strobe_probe::Site`] (the header asserts the size, the Rust crate too).
//! The header's `STROBE_PROBE(name, ...)` tests the site's flag inline and
//! calls [`strobe_probe_fire`] only when it is set. The header puts every site
//! in its module's `strobe_probe_sites` section and gives the module one
//! constructor that registers the whole section here
//! ([`strobe_probe_register_sites`]), so sites are listed and attachable
//! before they fire; a site that constructor missed starts "unregistered", so
//! its first hit registers it.
//!
//! The functions are declared weak in the header: a program built with probe
//! points runs without this library (each site switches itself off on its
//! first hit), and gets it either by linking `-lstrobe_probe_c` or by
//! `LD_PRELOAD=libstrobe_probe_c.so`, which is how `strobe probe` enables
//! probe points by name (`STROBE_PROBE_COUNT=...`, see `strobe_probe::env`).
//!
//! No panic crosses the ABI: every entry point runs under `catch_unwind`, and
//! a consumer that panics loses that hit, nothing more.
//!
//! Must never: grow features of its own (everything lives in strobe-probe);
//! let a panic unwind into C.

use std::panic::{catch_unwind, AssertUnwindSafe};

use strobe_probe::{fire_registering, HitKind, Site, MAX_ARGS};

/// Version of this ABI (the site layout and the functions below).
pub const STROBE_PROBE_ABI: u32 = 2;

/// The ABI version the library implements; the header checks nothing at run
/// time, but tools can.
#[no_mangle]
pub extern "C" fn strobe_probe_abi_version() -> u32 {
    STROBE_PROBE_ABI
}

/// The arguments as a slice (at most [`MAX_ARGS`]).
///
/// # Safety
/// `args` points at `nargs` readable `u64`s, or `nargs` is 0.
unsafe fn args_slice<'a>(args: *const u64, nargs: u32) -> &'a [u64] {
    let n = (nargs as usize).min(MAX_ARGS);
    if args.is_null() || n == 0 {
        return &[];
    }
    // SAFETY: caller's contract; n is clamped to at most the caller's count.
    unsafe { std::slice::from_raw_parts(args, n) }
}

/// Registers the `n` C sites starting at `sites`: one module's
/// `strobe_probe_sites` section, passed by the constructor the header gives
/// each module. Sites already registered are skipped. The module is pinned
/// (never unloaded), because the registry keeps pointers to its sites. Takes
/// a lock and allocates (it runs at load time, in normal context).
///
/// # Safety
/// `sites` points at `n` consecutive `struct strobe_probe_site`s initialised
/// by the header's macros, living for the rest of the process, or `n` is 0.
#[no_mangle]
pub unsafe extern "C" fn strobe_probe_register_sites(sites: *const Site, n: usize) {
    if sites.is_null() || n == 0 {
        return;
    }
    // The registry keeps `&'static` pointers to these sites, so the module
    // that holds them must never be unmapped: pin it (a later dlclose then
    // leaves it loaded). A module we cannot pin keeps its sites unregistered;
    // they register on their first hit, as before.
    if !pin_module(sites.cast()) {
        return;
    }
    // SAFETY: caller's contract: a static array of `n` sites (the header's
    // section, whose entries are 64-byte sites laid out as `Site`), and the
    // module holding it stays mapped for the rest of the process (pinned above).
    let sites: &'static [Site] = unsafe { std::slice::from_raw_parts(sites, n) };
    let _ = catch_unwind(|| strobe_probe::register_sites(sites));
}

/// Makes the loaded module that contains `addr` permanent (`RTLD_NODELETE`),
/// without loading anything new (`RTLD_NOLOAD`). True when it is pinned.
fn pin_module(addr: *const libc::c_void) -> bool {
    let Some(info) = loaded_module(addr).filter(|i| !i.dli_fname.is_null()) else {
        return false;
    };
    // SAFETY: `dli_fname` is a NUL-terminated string owned by the loader; the
    // flags load nothing new and only mark the module as never unloaded.
    let handle = unsafe {
        libc::dlopen(info.dli_fname, libc::RTLD_NOLOAD | libc::RTLD_NODELETE | libc::RTLD_LAZY)
    };
    // The handle's reference is kept on purpose (the module stays loaded anyway).
    // dlopen may not find the main program by the name dladdr gives (a relative
    // argv[0], say), but the main program is never unloaded: nothing to pin.
    !handle.is_null() || is_main_program(info.dli_fbase)
}

/// What the loader knows of the module containing `addr`, if any.
fn loaded_module(addr: *const libc::c_void) -> Option<libc::Dl_info> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: `info` is a valid out-pointer; dladdr only reads `addr`'s value.
    (unsafe { libc::dladdr(addr, &mut info) } != 0).then_some(info)
}

/// True when `base` is the load address of the main executable.
fn is_main_program(base: *mut libc::c_void) -> bool {
    // The main program's base, from one of its own addresses: the auxiliary
    // vector's entry point.
    // SAFETY: getauxval has no preconditions.
    let entry = unsafe { libc::getauxval(libc::AT_ENTRY) } as *const libc::c_void;
    loaded_module(entry).is_some_and(|i| i.dli_fbase == base)
}

/// Fires a C probe site (`STROBE_PROBE`). Registers the site on its first
/// call. Lock-free and allocation-free after that first call.
///
/// # Safety
/// `site` points at a `static struct strobe_probe_site` initialised by the
/// header's macros (it must live for the rest of the process, and its name
/// and file point at string literals); `args` points at `nargs` `uint64_t`s.
#[no_mangle]
pub unsafe extern "C" fn strobe_probe_fire(site: *const Site, args: *const u64, nargs: u32) {
    // SAFETY: caller's contract: a static site, valid for the process.
    let Some(site) = (unsafe { site.as_ref() }) else { return };
    // SAFETY: caller's contract.
    let args = unsafe { args_slice(args, nargs) };
    let _ = catch_unwind(AssertUnwindSafe(|| fire_registering(site, HitKind::Fire, args)));
}

/// Enters a scoped C probe (`STROBE_PROBE_SCOPE`): fires the entry event and
/// returns the start time to pass to [`strobe_probe_exit`].
///
/// # Safety
/// As [`strobe_probe_fire`].
#[no_mangle]
pub unsafe extern "C" fn strobe_probe_enter(
    site: *const Site,
    args: *const u64,
    nargs: u32,
) -> u64 {
    // SAFETY: caller's contract.
    let Some(site) = (unsafe { site.as_ref() }) else { return 0 };
    // SAFETY: caller's contract.
    let args = unsafe { args_slice(args, nargs) };
    let _ = catch_unwind(AssertUnwindSafe(|| fire_registering(site, HitKind::Entry, args)));
    strobe_probe::now_ns()
}

/// Leaves a scoped C probe: fires the exit event with the time since `start`.
///
/// # Safety
/// As [`strobe_probe_fire`]; `start` came from [`strobe_probe_enter`] on the
/// same site.
#[no_mangle]
pub unsafe extern "C" fn strobe_probe_exit(site: *const Site, start: u64) {
    // SAFETY: caller's contract.
    let Some(site) = (unsafe { site.as_ref() }) else { return };
    let ns = strobe_probe::now_ns().saturating_sub(start);
    let _ = catch_unwind(AssertUnwindSafe(|| fire_registering(site, HitKind::Exit { ns }, &[])));
}
