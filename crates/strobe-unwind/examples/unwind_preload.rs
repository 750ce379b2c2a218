//! A preload library that samples a program's stacks the way strobe's agent
//! does, for the program tests (`tests/programs.rs`) and as a worked example
//! of the integration: `modules::init` at start, a [`ThreadCache`] and
//! [`StackBounds`] for the thread, `dlopen`/`dlclose` interposed with the
//! module protocol, and a walk in the signal handler into preallocated
//! memory.
//!
//! Sampling: `setitimer(ITIMER_PROF)` (process CPU time; the test programs
//! are single-threaded), period `STROBE_UNWIND_US` microseconds (default
//! 1000). `STROBE_UNWIND_MODE` is `dwarf` (default), `fp` or `fp-in`. At exit
//! the samples are written to `STROBE_UNWIND_OUT` as text:
//!
//! ```text
//! module BIAS START END PATH          (every module seen, hex)
//! sample END IP ADDR...               (END is the WalkEnd, addresses hex)
//! threads N                          (threads of the process at exit)
//! time WALKS NS FRAMES                (with STROBE_UNWIND_TIME=1: walks timed,
//!                                      their total nanoseconds and frames;
//!                                      =warm: each timed walk repeats an
//!                                      untimed one, caches warm)
//! ```
//!
//! Must never: allocate, lock or panic in the handler; change the program's
//! output or exit status.

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_void};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use strobe_unwind::{modules, walk_dwarf, walk_fp, walk_fp_in, Regs, StackBounds, ThreadCache};

/// Most samples kept.
const MAX_SAMPLES: usize = 20_000;
/// Words per sample: end code, frame count, ip, then the frames.
const WORDS: usize = 3 + strobe_unwind::DEFAULT_DEPTH;

struct Shared<T>(UnsafeCell<T>);
// SAFETY: access is partitioned by the protocols documented at each use.
unsafe impl<T> Sync for Shared<T> {}

/// The sample slots: slot `i` is written only by the handler that claimed
/// `i` from `NEXT`, and read only at exit after sampling stopped.
static SAMPLES: Shared<[[u64; WORDS]; MAX_SAMPLES]> =
    Shared(UnsafeCell::new([[0; WORDS]; MAX_SAMPLES]));
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// The main thread's walker state: set up once in the constructor before the
/// timer starts, used only by the handler on that thread afterwards.
static STATE: Shared<Option<(StackBounds, ThreadCache)>> = Shared(UnsafeCell::new(None));
static MAIN_TID: AtomicUsize = AtomicUsize::new(0);
static MODE: AtomicUsize = AtomicUsize::new(0);
static ACTIVE: AtomicBool = AtomicBool::new(false);
static TIME: AtomicBool = AtomicBool::new(false);
static WARM: AtomicBool = AtomicBool::new(false);
static TIMED: [AtomicUsize; 3] = [AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)];

/// CLOCK_MONOTONIC in nanoseconds (the vDSO: async-signal-safe).
fn now_ns() -> usize {
    // SAFETY: a writable timespec.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as usize * 1_000_000_000 + t.tv_nsec as usize
}

/// Every module ever seen (outside the handler only).
static SEEN: Mutex<Vec<(u64, u64, u64, String)>> = Mutex::new(Vec::new());

fn remember_modules() {
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    for m in modules::loaded() {
        let (s, e) = m.code();
        let row = (m.bias(), s, e, m.name().to_string());
        if !seen.contains(&row) {
            seen.push(row);
        }
    }
}

fn gettid() -> usize {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as usize }
}

extern "C" fn on_prof(_sig: c_int, _info: *mut libc::siginfo_t, uc: *mut c_void) {
    if !ACTIVE.load(Ordering::Acquire) || gettid() != MAIN_TID.load(Ordering::Relaxed) {
        return;
    }
    let i = NEXT.fetch_add(1, Ordering::Relaxed);
    if i >= MAX_SAMPLES {
        return;
    }
    // SAFETY: the kernel passes the interrupted context.
    let regs = unsafe { Regs::from_ucontext(uc) };
    // SAFETY: slot i is ours alone (claimed above); STATE is used only by
    // this handler on the main thread, which cannot nest in itself (SIGPROF
    // is blocked while it runs).
    let (slot, state) = unsafe { (&mut (*SAMPLES.0.get())[i], &mut *STATE.0.get()) };
    let Some((bounds, cache)) = state.as_mut() else { return };
    let (head, frames) = slot.split_at_mut(3);
    let timed = TIME.load(Ordering::Relaxed);
    let mut walk = || match MODE.load(Ordering::Relaxed) {
        1 => walk_fp(&regs, bounds, frames),
        2 => walk_fp_in(&regs, bounds, cache, frames),
        _ => walk_dwarf(&regs, bounds, cache, frames),
    };
    if WARM.load(Ordering::Relaxed) {
        // Walk once untimed: the timed walk then runs with warm caches.
        walk();
    }
    let t0 = if timed { now_ns() } else { 0 };
    let w = walk();
    if timed {
        let dt = now_ns() - t0;
        TIMED[0].fetch_add(1, Ordering::Relaxed);
        TIMED[1].fetch_add(dt, Ordering::Relaxed);
        TIMED[2].fetch_add(w.frames, Ordering::Relaxed);
    }
    head[0] = w.end as u64;
    head[1] = w.frames as u64;
    head[2] = regs.ip;
}

extern "C" fn init() {
    if std::env::var_os("STROBE_UNWIND_OUT").is_none() {
        return;
    }
    modules::init();
    remember_modules();
    let mode = match std::env::var("STROBE_UNWIND_MODE").as_deref() {
        Ok("fp") => 1,
        Ok("fp-in") => 2,
        _ => 0,
    };
    MODE.store(mode, Ordering::Relaxed);
    let time = std::env::var("STROBE_UNWIND_TIME").ok();
    TIME.store(time.is_some(), Ordering::Relaxed);
    WARM.store(time.as_deref() == Some("warm"), Ordering::Relaxed);
    let Ok(bounds) = StackBounds::of_current_thread() else { return };
    // SAFETY: the handler is not installed yet; nothing else touches STATE.
    unsafe { *STATE.0.get() = Some((bounds, ThreadCache::new())) };
    MAIN_TID.store(gettid(), Ordering::Relaxed);
    let us: i64 =
        std::env::var("STROBE_UNWIND_US").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    // SAFETY: plain libc calls with valid arguments; the handler is a valid
    // SA_SIGINFO handler.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_prof as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGPROF, &sa, std::ptr::null_mut());
        libc::atexit(dump);
        ACTIVE.store(true, Ordering::Release);
        let t = libc::timeval { tv_sec: 0, tv_usec: us as libc::suseconds_t };
        let it = libc::itimerval { it_interval: t, it_value: t };
        libc::setitimer(libc::ITIMER_PROF, &it, std::ptr::null_mut());
    }
}

extern "C" fn dump() {
    ACTIVE.store(false, Ordering::Release);
    // SAFETY: disarming the timer.
    unsafe {
        let z = libc::timeval { tv_sec: 0, tv_usec: 0 };
        let it = libc::itimerval { it_interval: z, it_value: z };
        libc::setitimer(libc::ITIMER_PROF, &it, std::ptr::null_mut());
    }
    remember_modules();
    let Ok(path) = std::env::var("STROBE_UNWIND_OUT") else { return };
    let mut text = String::new();
    for (bias, s, e, name) in SEEN.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let name = if name.is_empty() { "[main]" } else { name };
        text += &format!("module {bias:x} {s:x} {e:x} {name}\n");
    }
    let n = NEXT.load(Ordering::Acquire).min(MAX_SAMPLES);
    // SAFETY: sampling stopped (ACTIVE false, timer off): no handler writes
    // the slots any more.
    let samples = unsafe { &*SAMPLES.0.get() };
    for s in &samples[..n] {
        text += &format!("sample {} {:x}", s[0], s[2]);
        for a in &s[3..3 + s[1] as usize] {
            text += &format!(" {a:x}");
        }
        text.push('\n');
    }
    // Nothing here may have started a thread in the (single-threaded) program.
    let threads = std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0);
    text += &format!("threads {threads}\n");
    if TIME.load(Ordering::Relaxed) {
        let [w, ns, fr] = &TIMED;
        let (w, ns, fr) =
            (w.load(Ordering::Relaxed), ns.load(Ordering::Relaxed), fr.load(Ordering::Relaxed));
        text += &format!("time {w} {ns} {fr}\n");
    }
    if let Ok(mut f) = std::fs::File::create(path) {
        let _ = f.write_all(text.as_bytes());
    }
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

type DlopenFn = unsafe extern "C" fn(*const c_char, c_int) -> *mut c_void;
type DlcloseFn = unsafe extern "C" fn(*mut c_void) -> c_int;

fn next_symbol(name: &std::ffi::CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
    unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) }
}

/// The interposed `dlopen`: the real one, then a rescan.
///
/// # Safety
/// As `dlopen(3)`.
#[no_mangle]
pub unsafe extern "C" fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void {
    let real = next_symbol(c"dlopen");
    if real.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: libc's dlopen has this signature; arguments are the caller's.
    let h = unsafe { std::mem::transmute::<*mut c_void, DlopenFn>(real)(file, mode) };
    modules::after_dlopen();
    remember_modules();
    h
}

/// The interposed `dlclose`: the module protocol around the real one.
///
/// # Safety
/// As `dlclose(3)`.
#[no_mangle]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> c_int {
    let real = next_symbol(c"dlclose");
    if real.is_null() {
        return -1;
    }
    remember_modules();
    modules::before_dlclose();
    // SAFETY: libc's dlclose has this signature; the handle is the caller's.
    let rc = unsafe { std::mem::transmute::<*mut c_void, DlcloseFn>(real)(handle) };
    modules::after_dlclose();
    rc
}
