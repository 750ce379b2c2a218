//! Walking the interrupted thread's stack inside the SIGTRAP handler, with crate
//! strobe-unwind: the frame-pointer chain (`--call-graph fp`) or the modules' DWARF
//! unwind tables (`dwarf`, the default).
//!
//! Owns: each thread's walker state (its stack bounds and its registration with the
//! module table, made at thread start), the process's pool of rule caches (a DWARF walk
//! borrows one for its duration, so memory does not grow with the number of threads:
//! [`POOL`] caches of about 45 KiB per process), and the `dlopen`/`dlclose` hooks that
//! keep the module table current. Must never read memory outside the thread's stack
//! bounds and the published modules, never fault, allocate, lock or panic in the
//! handler, and never change what `dlopen` finds (see [`dlopen_caller`]).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use strobe_protocol::CallGraph;
use strobe_unwind::{walk_dwarf_with, walk_fp, Regs, RuleCache, StackBounds, ThreadCache, WalkEnd};

/// Stack room the handler needs below its own frame to walk (it skips the walk with
/// less, rather than overflow a nearly full thread stack).
const STACK_HEADROOM: u64 = 32 << 10;

/// Rule caches in the pool: walks in progress at once (one per CPU sampling at the same
/// instant); a walk that finds none free falls back to the frame-pointer chain.
pub const POOL: usize = 16;

static RULES: [AtomicPtr<RuleCache>; POOL] = [const { AtomicPtr::new(std::ptr::null_mut()) }; POOL];
static BUSY: [AtomicBool; POOL] = [const { AtomicBool::new(false) }; POOL];
/// DWARF walks are live in this process image (set at start).
static DWARF: AtomicBool = AtomicBool::new(false);

/// One thread's walker state.
pub struct ThreadWalker {
    bounds: StackBounds,
    cache: Option<ThreadCache>,
    /// The usable range of the thread's signal stack (`altstack`; 0, 0 when none): where
    /// the handler runs, so where its headroom is measured.
    handler_stack: (u64, u64),
}

/// Prepares DWARF walks for this process: scans the loaded modules and fills the rule
/// cache pool. Normal context (agent start).
pub fn init(call_graph: CallGraph) {
    if call_graph != CallGraph::Dwarf {
        return;
    }
    strobe_unwind::modules::init();
    // One cache per CPU: more walks than CPUs cannot be in progress at once (a walk
    // runs in a handler, which is not preempted by another of the same process's
    // samples on that CPU for long); each cache costs about 45 KiB to make, which a
    // short process pays at start.
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.clamp(1, POOL as i64) as usize;
    for r in RULES.iter().take(cpus) {
        if r.load(Ordering::Relaxed).is_null() {
            r.store(Box::into_raw(Box::new(RuleCache::new())), Ordering::Release);
        }
    }
    DWARF.store(true, Ordering::Release);
}

/// A forked child: its module table's updates stop waiting for grace periods (the
/// parent's reader records came along), and every pooled rule cache is free again (a
/// parent thread that was walking at the fork does not exist here). DWARF walks go on.
pub fn after_fork_in_child() {
    strobe_unwind::modules::after_fork_in_child();
    for busy in &BUSY {
        // Relaxed: one thread exists in the child, and it is not walking.
        busy.store(false, Ordering::Relaxed);
    }
}

/// The calling thread's walker state (normal context, at thread start).
pub fn thread_walker(call_graph: CallGraph, handler_stack: (u64, u64)) -> ThreadWalker {
    let bounds = StackBounds::of_current_thread().unwrap_or(StackBounds { lo: 0, hi: 0 });
    let cache = (call_graph == CallGraph::Dwarf && DWARF.load(Ordering::Acquire))
        .then(ThreadCache::without_rules);
    ThreadWalker { bounds, cache, handler_stack }
}

/// Walks from `regs` into `out` (callers' return addresses, innermost first): DWARF when
/// asked for and a pooled rule cache is free, the frame-pointer chain otherwise.
/// Async-signal-safe, on the thread that owns `w`.
#[inline]
pub fn walk(
    call_graph: CallGraph,
    regs: &Regs,
    w: &mut ThreadWalker,
    out: &mut [u64],
) -> (usize, WalkEnd) {
    // Walk only with room to spare below our own frame (a DWARF walk takes a few KiB),
    // on the agent's signal stack or, without one, the interrupted thread's; else record
    // no stack.
    let here = std::ptr::addr_of!(w) as u64;
    let (lo, hi) = match w.handler_stack {
        (lo, hi) if (lo..hi).contains(&here) => (lo, hi),
        _ => (w.bounds.lo, w.bounds.hi),
    };
    if hi != 0 && (here < lo || here - lo < STACK_HEADROOM) {
        return (0, WalkEnd::OutOfBounds);
    }
    if call_graph == CallGraph::Dwarf && DWARF.load(Ordering::Acquire) {
        if let Some(cache) = w.cache.as_mut() {
            for (i, busy) in BUSY.iter().enumerate() {
                // Acquire: the previous borrower's writes to the cache happen before ours.
                if busy.swap(true, Ordering::Acquire) {
                    continue;
                }
                let rules = RULES[i].load(Ordering::Acquire);
                let walked = if rules.is_null() {
                    None
                } else {
                    // SAFETY: a cache leaked at init, never freed; BUSY[i] gives this walk
                    // sole use of it until the release below.
                    let r = unsafe { &mut *rules };
                    Some(walk_dwarf_with(regs, &w.bounds, cache, r, out))
                };
                // Release: our writes to the cache happen before the next borrower's.
                busy.store(false, Ordering::Release);
                if let Some(x) = walked {
                    return (x.frames, x.end);
                }
                break;
            }
        }
    }
    let x = walk_fp(regs, &w.bounds, out);
    (x.frames, x.end)
}

/// The interrupted registers of a SIGTRAP handler's context.
#[inline]
pub fn regs(uc: *mut c_void) -> Regs {
    if uc.is_null() {
        return Regs::default();
    }
    // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO handler.
    unsafe { Regs::from_ucontext(uc) }
}

// ---------------------------------------------------------------------------------
// dlopen and dlclose.

type DlopenFn = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;
type DlcloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;

fn next(name: &CStr) -> *mut c_void {
    static CACHE: [AtomicPtr<c_void>; 2] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 2];
    let slot = if name == c"dlopen" { &CACHE[0] } else { &CACHE[1] };
    let mut p = slot.load(Ordering::Relaxed);
    if p.is_null() {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        slot.store(p, Ordering::Relaxed);
    }
    p
}

/// The object containing `caller`'s own search paths, `$ORIGIN` expanded: its
/// `DT_RPATH` (searched before `LD_LIBRARY_PATH`, and only when it has no `DT_RUNPATH`)
/// and its `DT_RUNPATH` (searched after `LD_LIBRARY_PATH`).
#[derive(Default)]
struct CallerPaths {
    rpath: Vec<std::path::PathBuf>,
    runpath: Vec<std::path::PathBuf>,
}

fn caller_search_path(caller: usize) -> CallerPaths {
    let empty = CallerPaths::default;
    // SAFETY: dladdr fills `info` for an address in a loaded object, or returns 0.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(caller as *const c_void, &mut info) } == 0 || info.dli_fbase.is_null()
    {
        return empty();
    }
    let base = info.dli_fbase as usize;
    // SAFETY: dli_fname is a NUL-terminated string owned by the dynamic linker.
    let fname = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    let origin = if fname.is_empty() {
        std::fs::read_link("/proc/self/exe").ok().and_then(|p| p.parent().map(|d| d.to_path_buf()))
    } else {
        std::path::Path::new(&fname).parent().map(|d| d.to_path_buf())
    };
    struct Found {
        base: usize,
        dynamic: usize,
        load_bias: usize,
    }
    extern "C" fn cb(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: the dynamic linker passes a valid info; `data` is our `Option<Found>`.
        let (info, found) = unsafe { (&*info, &mut *data.cast::<Option<Found>>()) };
        let want = found.as_ref().map_or(0, |f| f.base);
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: dlpi_phdr has dlpi_phnum entries.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type == libc::PT_LOAD && ph.p_offset == 0 {
                let start = info.dlpi_addr as usize + ph.p_vaddr as usize;
                if start != want {
                    return 0;
                }
            }
        }
        for i in 0..info.dlpi_phnum as usize {
            // SAFETY: as above.
            let ph = unsafe { &*info.dlpi_phdr.add(i) };
            if ph.p_type == libc::PT_DYNAMIC {
                if let Some(f) = found.as_mut() {
                    f.dynamic = info.dlpi_addr as usize + ph.p_vaddr as usize;
                    f.load_bias = info.dlpi_addr as usize;
                }
                return 1;
            }
        }
        0
    }
    let mut found = Some(Found { base, dynamic: 0, load_bias: 0 });
    // SAFETY: a callback of the right type and a pointer to our local for its data.
    unsafe { libc::dl_iterate_phdr(Some(cb), (&mut found as *mut Option<Found>).cast()) };
    let Some(f) = found.filter(|f| f.dynamic != 0) else { return empty() };
    let (mut strtab, mut runpath, mut rpath) = (0usize, None, None);
    /// One entry of a `PT_DYNAMIC` segment (ELF64).
    #[repr(C)]
    struct Dyn {
        d_tag: i64,
        d_un: u64,
    }
    let mut d = f.dynamic as *const Dyn;
    // SAFETY: the PT_DYNAMIC segment of a loaded object: Elf64_Dyn entries up to
    // DT_NULL; the dynamic linker relocated d_ptr values to run-time addresses.
    unsafe {
        loop {
            let e = &*d;
            match e.d_tag as u32 {
                0 => break,                            // DT_NULL
                5 => strtab = e.d_un as usize,         // DT_STRTAB
                29 => runpath = Some(e.d_un as usize), // DT_RUNPATH
                15 => rpath = Some(e.d_un as usize),   // DT_RPATH
                _ => {}
            }
            d = d.add(1);
        }
    }
    if strtab == 0 {
        return empty();
    }
    // Some objects keep DT_STRTAB unrelocated (the vDSO); a value below the bias is an
    // offset.
    if strtab < f.load_bias {
        strtab += f.load_bias;
    }
    let dirs = |off: usize| -> Vec<std::path::PathBuf> {
        // SAFETY: a NUL-terminated string in the object's loaded string table.
        let text = unsafe { CStr::from_ptr((strtab + off) as *const c_char) }
            .to_string_lossy()
            .into_owned();
        let o = origin.as_ref().map_or_else(String::new, |o| o.display().to_string());
        split_path(&text, &o)
    };
    match (runpath, rpath) {
        (Some(r), _) => CallerPaths { rpath: Vec::new(), runpath: dirs(r) },
        (None, Some(r)) => CallerPaths { rpath: dirs(r), runpath: Vec::new() },
        (None, None) => empty(),
    }
}

/// The directories of a `:`-separated search path, `$ORIGIN` replaced by `origin`.
fn split_path(text: &str, origin: &str) -> Vec<std::path::PathBuf> {
    text.split(':')
        .filter(|s| !s.is_empty())
        .map(|s| {
            std::path::PathBuf::from(s.replace("${ORIGIN}", origin).replace("$ORIGIN", origin))
        })
        .collect()
}

/// `LD_LIBRARY_PATH` as the dynamic linker read it at start (the agent copies it in its
/// constructor: a later change of the variable does not change the linker's search).
static LIBRARY_PATH: std::sync::OnceLock<Vec<std::path::PathBuf>> = std::sync::OnceLock::new();

/// Records `LD_LIBRARY_PATH` (agent start).
pub fn remember_library_path() {
    let _ = LIBRARY_PATH.get_or_init(|| {
        std::env::var("LD_LIBRARY_PATH").map(|p| split_path(&p, "")).unwrap_or_default()
    });
}

/// Loads bare `name` the way the linker would for the real caller, up to the default
/// search: the caller's `DT_RPATH`, `LD_LIBRARY_PATH`, the caller's `DT_RUNPATH`; a
/// directory holding it is tried by full path. Null when none holds it (the caller's
/// `dlopen` then searches the cache and the default directories, as the linker does).
fn search(real: DlopenFn, name: &[u8], mode: c_int, paths: &CallerPaths) -> *mut c_void {
    let lib_path = LIBRARY_PATH.get().map(Vec::as_slice).unwrap_or_default();
    // Without a DT_RUNPATH to search after it, LD_LIBRARY_PATH is the default search's
    // own first step.
    if paths.rpath.is_empty() && paths.runpath.is_empty() {
        return std::ptr::null_mut();
    }
    for dir in paths.rpath.iter().chain(lib_path).chain(&paths.runpath) {
        let p = dir.join(std::ffi::OsStr::new(std::str::from_utf8(name).unwrap_or("")));
        if !p.is_file() {
            continue;
        }
        let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) else {
            continue;
        };
        // SAFETY: a NUL-terminated path and the caller's mode.
        let handle = unsafe { real(c.as_ptr(), mode) };
        if !handle.is_null() {
            return handle;
        }
    }
    std::ptr::null_mut()
}

/// The interposed `dlopen`'s work: `caller` is the address `dlopen` was called from.
///
/// glibc's `dlopen` searches a bare name (no `/`) through the *calling object's*
/// `DT_RUNPATH`/`DT_RPATH`, which it finds from the return address; called from here,
/// that would be the agent's (it has none). So a bare name already loaded is returned as
/// the linker would (`RTLD_NOLOAD`), else looked for in the linker's order with the real
/// caller's paths (`search`), else handed to the default search (the cache, the default
/// directories). Then the module table is rescanned for the DWARF walker, and the
/// mappings written for the report.
///
/// # Safety
/// As `dlopen(3)`.
pub unsafe fn dlopen_caller(file: *const c_char, mode: c_int, caller: usize) -> *mut c_void {
    let real = next(c"dlopen");
    if real.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: libc's dlopen has this signature.
    let real = unsafe { std::mem::transmute::<*mut c_void, DlopenFn>(real) };
    let mut handle = std::ptr::null_mut();
    if !file.is_null() {
        // SAFETY: the caller passes a NUL-terminated name.
        let name = unsafe { CStr::from_ptr(file) }.to_bytes();
        if !name.contains(&b'/') && !name.is_empty() {
            // An object loaded already under that name (or soname) is what the linker
            // returns, whatever the search path says: never a second copy.
            // SAFETY: the caller's name, with RTLD_NOLOAD added.
            handle = unsafe { real(file, mode | libc::RTLD_NOLOAD) };
            if handle.is_null() {
                handle = search(real, name, mode, &caller_search_path(caller));
            }
        }
    }
    if handle.is_null() {
        // SAFETY: the caller's own arguments.
        handle = unsafe { real(file, mode) };
    }
    if DWARF.load(Ordering::Acquire) {
        strobe_unwind::modules::after_dlopen();
    }
    if let Some(a) = crate::own_agent() {
        crate::chunks::write_maps(a);
    }
    handle
}

/// The interposed `dlclose`: the module table's protocol around the real one, so no
/// handler reads a module the real `dlclose` unmaps.
///
/// # Safety
/// As `dlclose(3)`.
pub unsafe fn dlclose(handle: *mut c_void) -> c_int {
    let real = next(c"dlclose");
    if real.is_null() {
        return -1;
    }
    let dwarf = DWARF.load(Ordering::Acquire);
    if dwarf {
        strobe_unwind::modules::before_dlclose();
    }
    // SAFETY: libc's dlclose has this signature; the handle is the caller's.
    let rc = unsafe { std::mem::transmute::<*mut c_void, DlcloseFn>(real)(handle) };
    if dwarf {
        strobe_unwind::modules::after_dlclose();
    }
    rc
}
