//! dlopen/dlclose churn while other threads unwind: a bounded-time stress
//! test of the module table's protocol against the real dynamic linker.
//!
//! One thread loads and unloads libunwind_dllib.so as fast as it can; two
//! walker threads, in a loop, (a) check inside a read section that every
//! module the published table lists is mapped (`mincore`), before and after
//! spinning, so an unmap inside a section would be caught, and (b) open the
//! same library themselves, call into it and walk from a callback whose
//! stack passes through the library's frames, then close it. Every dlopen and
//! dlclose goes through the protocol the agent's wrappers follow.

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use strobe_unwind::{modules, walk_dwarf, Regs, StackBounds, ThreadCache, WalkEnd};

fn open(path: &CString) -> *mut libc::c_void {
    // SAFETY: a NUL-terminated path.
    let h = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW) };
    assert!(!h.is_null(), "dlopen failed");
    modules::after_dlopen();
    h
}

fn close(h: *mut libc::c_void) {
    modules::before_dlclose();
    // SAFETY: a handle from `open`, closed once.
    assert_eq!(unsafe { libc::dlclose(h) }, 0);
    modules::after_dlclose();
}

fn mapped(addr: u64) -> bool {
    let page = addr & !4095;
    let mut v = [0u8; 1];
    // SAFETY: mincore on one page into a one-byte vector.
    unsafe { libc::mincore(page as *mut libc::c_void, 4096, v.as_mut_ptr()) == 0 }
}

struct Ctx {
    cache: ThreadCache,
    bounds: StackBounds,
    lib: (u64, u64),
    end: Option<WalkEnd>,
    through_lib: bool,
}

extern "C" fn callback(x: libc::c_ulong) -> libc::c_ulong {
    // SAFETY: `x` is the address of the walker's Ctx (see `walker`).
    let ctx = unsafe { &mut *(x as *mut Ctx) };
    let mut out = [0u64; 128];
    let w = walk_dwarf(&Regs::here(), &ctx.bounds, &mut ctx.cache, &mut out);
    ctx.end = Some(w.end);
    ctx.through_lib = out[..w.frames].iter().any(|&a| a > ctx.lib.0 && a <= ctx.lib.1);
    x
}

type CallFn = unsafe extern "C" fn(
    extern "C" fn(libc::c_ulong) -> libc::c_ulong,
    libc::c_ulong,
) -> libc::c_ulong;

#[derive(Default)]
struct Counts {
    checks: AtomicU64,
    walks: AtomicU64,
    complete_through_lib: AtomicU64,
    window: AtomicU64,
}

fn walker(path: &CString, stop: &AtomicBool, counts: &Counts) {
    let mut ctx = Ctx {
        cache: ThreadCache::new(),
        bounds: StackBounds::of_current_thread().unwrap(),
        lib: (0, 0),
        end: None,
        through_lib: false,
    };
    while !stop.load(Ordering::Relaxed) {
        // (a) Everything listed stays mapped for the whole read section.
        ctx.cache.with_table(|t| {
            let t = t.expect("initialised");
            for m in t.modules() {
                assert!(mapped(m.code().0), "{} listed but unmapped", m.name());
            }
            let mut x = 1u64;
            for _ in 0..20_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            for m in t.modules() {
                assert!(mapped(m.code().0), "{} unmapped inside a read section", m.name());
            }
        });
        counts.checks.fetch_add(1, Ordering::Relaxed);
        // (b) A walk through the library's frames.
        let h = open(path);
        // SAFETY: the library exports dllib_call with this signature.
        let call: CallFn = unsafe {
            let p = libc::dlsym(h, c"dllib_call".as_ptr());
            assert!(!p.is_null());
            std::mem::transmute::<*mut libc::c_void, CallFn>(p)
        };
        let m = modules::loaded()
            .into_iter()
            .find(|m| m.name().contains("unwind_dllib"))
            .expect("the library is listed after dlopen");
        ctx.lib = m.code();
        // SAFETY: a valid callback and context pointer.
        unsafe { call(callback, &mut ctx as *mut Ctx as libc::c_ulong) };
        close(h);
        counts.walks.fetch_add(1, Ordering::Relaxed);
        match ctx.end {
            Some(WalkEnd::Complete) => {
                assert!(ctx.through_lib, "a complete walk skipped the library's frames");
                counts.complete_through_lib.fetch_add(1, Ordering::Relaxed);
            }
            // A concurrent dlclose's window: the library is not listed.
            Some(WalkEnd::NotInModule) => {
                counts.window.fetch_add(1, Ordering::Relaxed);
            }
            e => panic!("walk through the library ended with {e:?}"),
        }
    }
}

#[test]
fn dlopen_dlclose_churn_while_unwinding() {
    modules::init();
    let path =
        CString::new(strobe_testprogs::shared_lib("unwind_dllib").to_str().unwrap()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let cycles = Arc::new(AtomicU64::new(0));
    let churn = {
        let (path, stop, cycles) = (path.clone(), stop.clone(), cycles.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let h = open(&path);
                close(h);
                cycles.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let walkers: Vec<_> = (0..2)
        .map(|_| {
            let (path, stop, counts) = (path.clone(), stop.clone(), counts.clone());
            std::thread::spawn(move || walker(&path, &stop, &counts))
        })
        .collect();
    let t = Instant::now();
    // 2 s, or `STROBE_UNWIND_STRESS_MS` (ci/san.sh gives valgrind, which runs one thread
    // at a time at a fiftieth of the speed, longer: 2 s made 57 cycles there).
    let run_for = std::env::var("STROBE_UNWIND_STRESS_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_secs(2), Duration::from_millis);
    // At least `run_for`, and on until both sides did a hundred rounds (valgrind's
    // scheduler can starve the walkers: 95 walks beside 4454 cycles in 10 s of one CI
    // run), for at most six times `run_for`.
    let enough =
        || cycles.load(Ordering::Relaxed) >= 100 && counts.walks.load(Ordering::Relaxed) >= 100;
    while (t.elapsed() < run_for || !enough()) && t.elapsed() < 6 * run_for && !churn.is_finished()
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    for w in walkers {
        w.join().unwrap();
    }
    let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
    println!(
        "{} dlopen/dlclose cycles; {} mapped-table checks; {} walks through the library: {} \
         complete, {} inside a dlclose window",
        c(&cycles),
        c(&counts.checks),
        c(&counts.walks),
        c(&counts.complete_through_lib),
        c(&counts.window)
    );
    assert!(c(&cycles) >= 100, "too little churn");
    assert!(c(&counts.walks) >= 100, "too few walks");
    assert!(c(&counts.complete_through_lib) * 10 >= c(&counts.walks), "most walks fell in windows");
}
