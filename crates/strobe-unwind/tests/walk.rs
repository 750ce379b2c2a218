//! Walks of the test binary's own Rust stacks (std built without frame
//! pointers), from `Regs::here`, `getcontext` and a per-thread CPU-time timer's
//! signal handler, checked against the binary's ELF symbols; the depth limit;
//! and garbage registers and stack contents, which must end walks cleanly.

mod common;

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::Symbolizer;
use strobe_unwind::{
    modules, walk_dwarf, walk_fp, walk_fp_in, Regs, StackBounds, ThreadCache, Walk, WalkEnd,
};

/// Recurses `n` more times, then runs `leaf`.
#[inline(never)]
fn level<R>(n: u32, leaf: &mut dyn FnMut() -> R) -> R {
    let r = if n == 0 { leaf() } else { level(n - 1, leaf) };
    std::hint::black_box(r)
}

fn is_level(name: &str) -> bool {
    name.contains("walk5level")
}

#[test]
fn rust_frames_to_the_thread_entry() {
    std::thread::spawn(|| {
        let bounds = StackBounds::of_current_thread().unwrap();
        let mut cache = ThreadCache::new();
        let mut out = [0u64; 128];
        let w = level(20, &mut || {
            let regs = Regs::here();
            walk_dwarf(&regs, &bounds, &mut cache, &mut out)
        });
        let names = Symbolizer::of_self().frames(&out[..w.frames]);
        println!("{w:?}, {} named frames", names.len());
        assert_eq!(w.end, WalkEnd::Complete, "{names:?}");
        // The closure, then 21 returns into `level`, then the thread body.
        let levels = names.iter().filter(|n| is_level(n)).count();
        assert_eq!(levels, 21, "{names:?}");
        assert!(names.iter().any(|n| n.contains("rust_frames_to_the_thread_entry")), "{names:?}");
        // std's thread start, then libc's start_thread and clone3 (unnamed: Debian's
        // libc has no symbol table), whose unwind entry ends the stack.
        assert!(names.iter().any(|n| n.contains("thread_start")), "{names:?}");
    })
    .join()
    .unwrap();
}

#[test]
fn from_getcontext() {
    let bounds = StackBounds::of_current_thread().unwrap();
    let mut cache = ThreadCache::new();
    let mut out = [0u64; 128];
    let w = level(3, &mut || {
        // SAFETY: ucontext_t is plain data getcontext fills.
        let mut uc: libc::ucontext_t = unsafe { std::mem::zeroed() };
        // SAFETY: a writable ucontext_t.
        assert_eq!(unsafe { libc::getcontext(&mut uc) }, 0);
        // SAFETY: filled by getcontext just above.
        let regs = unsafe { Regs::from_ucontext((&uc as *const libc::ucontext_t).cast()) };
        assert!(bounds.contains(regs.sp));
        walk_dwarf(&regs, &bounds, &mut cache, &mut out)
    });
    let names = Symbolizer::of_self().frames(&out[..w.frames]);
    assert_eq!(w.end, WalkEnd::Complete, "{names:?}");
    assert!(names.iter().filter(|n| is_level(n)).count() >= 3, "{names:?}");
}

#[test]
fn depth_limit() {
    std::thread::spawn(|| {
        let bounds = StackBounds::of_current_thread().unwrap();
        let mut cache = ThreadCache::new();
        let mut out = [0u64; 128];
        let w = level(200, &mut || walk_dwarf(&Regs::here(), &bounds, &mut cache, &mut out));
        assert_eq!(w, Walk { frames: 128, end: WalkEnd::DepthLimit });
        let mut small = [0u64; 5];
        let w = level(10, &mut || walk_dwarf(&Regs::here(), &bounds, &mut cache, &mut small));
        assert_eq!(w, Walk { frames: 5, end: WalkEnd::DepthLimit });
        let w = walk_dwarf(&Regs::here(), &bounds, &mut cache, &mut []);
        assert_eq!(w, Walk { frames: 0, end: WalkEnd::DepthLimit });
    })
    .join()
    .unwrap();
}

#[test]
fn outside_the_bounds() {
    let bounds = StackBounds::of_current_thread().unwrap();
    let mut cache = ThreadCache::new();
    let mut out = [0u64; 16];
    let mut regs = Regs::here();
    regs.sp = bounds.hi + 4096;
    assert_eq!(walk_dwarf(&regs, &bounds, &mut cache, &mut out).end, WalkEnd::OutOfBounds);
    assert_eq!(walk_fp(&regs, &bounds, &mut out).end, WalkEnd::OutOfBounds);
    let empty = StackBounds { lo: 0, hi: 0 };
    assert_eq!(walk_dwarf(&Regs::here(), &empty, &mut cache, &mut out).end, WalkEnd::OutOfBounds);
    let mut regs = Regs::here();
    regs.ip = 8; // page zero: no module
    assert_eq!(
        walk_dwarf(&regs, &bounds, &mut cache, &mut out),
        Walk { frames: 0, end: WalkEnd::NotInModule }
    );
}

// ---- Samples taken in a SIGPROF handler on one thread (CPU-time timer). ----

const SLOTS: usize = 4096;
const DEPTH: usize = 128;

struct Shared<T>(UnsafeCell<T>);
// SAFETY: slots are claimed through NEXT (one writer each) and read after the
// sampled thread stopped its timer; STATE belongs to the sampled thread.
unsafe impl<T> Sync for Shared<T> {}

static RING: Shared<[(u64, Walk, [u64; DEPTH]); SLOTS]> =
    Shared(UnsafeCell::new([(0, Walk { frames: 0, end: WalkEnd::Complete }, [0; DEPTH]); SLOTS]));
static NEXT: AtomicUsize = AtomicUsize::new(0);
static STATE: Shared<Option<(StackBounds, ThreadCache)>> = Shared(UnsafeCell::new(None));
static SAMPLED_TID: AtomicUsize = AtomicUsize::new(0);
static ACTIVE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_prof(_: libc::c_int, _: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as usize;
    if !ACTIVE.load(Ordering::Acquire) || tid != SAMPLED_TID.load(Ordering::Relaxed) {
        return;
    }
    let i = NEXT.fetch_add(1, Ordering::Relaxed);
    if i >= SLOTS {
        return;
    }
    // SAFETY: the kernel's ucontext; slot i is ours; STATE is the sampled
    // thread's, and only its handler (which does not nest) uses it now.
    let (regs, slot, state) =
        unsafe { (Regs::from_ucontext(uc), &mut (*RING.0.get())[i], &mut *STATE.0.get()) };
    let Some((bounds, cache)) = state.as_mut() else { return };
    slot.0 = regs.ip;
    slot.1 = walk_dwarf(&regs, bounds, cache, &mut slot.2);
}

/// This thread's CPU time in milliseconds.
fn thread_cpu_ms() -> u64 {
    // SAFETY: a writable timespec.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

/// Burns `ms` milliseconds of this thread's CPU time (the sampling timer
/// counts CPU time, so a loaded machine does not thin the samples).
#[inline(never)]
fn spin(ms: u64) -> u64 {
    let end = thread_cpu_ms() + ms;
    let mut x = 1u64;
    while thread_cpu_ms() < end {
        for _ in 0..1000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
    }
    x
}

#[test]
fn rust_stacks_from_a_signal_handler() {
    std::thread::spawn(|| {
        let bounds = StackBounds::of_current_thread().unwrap();
        // SAFETY: the handler is not armed for this thread yet.
        unsafe { *STATE.0.get() = Some((bounds, ThreadCache::new())) };
        // SAFETY: gettid has no preconditions.
        SAMPLED_TID.store(unsafe { libc::syscall(libc::SYS_gettid) } as usize, Ordering::Relaxed);
        // SAFETY: installing a valid SA_SIGINFO handler and a per-thread
        // CPU-time timer that signals this thread.
        let timer = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_prof as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigaction(libc::SIGPROF, &sa, std::ptr::null_mut());
            let mut ev: libc::sigevent = std::mem::zeroed();
            ev.sigev_notify = libc::SIGEV_THREAD_ID;
            ev.sigev_signo = libc::SIGPROF;
            ev.sigev_notify_thread_id = libc::syscall(libc::SYS_gettid) as i32;
            let mut t: libc::timer_t = std::mem::zeroed();
            assert_eq!(libc::timer_create(libc::CLOCK_THREAD_CPUTIME_ID, &mut ev, &mut t), 0);
            let p = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
            let its = libc::itimerspec { it_interval: p, it_value: p };
            ACTIVE.store(true, Ordering::Release);
            assert_eq!(libc::timer_settime(t, 0, &its, std::ptr::null_mut()), 0);
            t
        };
        level(12, &mut || spin(800));
        ACTIVE.store(false, Ordering::Release);
        // SAFETY: the timer created above.
        unsafe { libc::timer_delete(timer) };
    })
    .join()
    .unwrap();
    let n = NEXT.load(Ordering::Acquire).min(SLOTS);
    // SAFETY: sampling stopped (the thread exited).
    let ring = unsafe { &*RING.0.get() };
    let mut sym = Symbolizer::of_self();
    let complete = ring[..n].iter().filter(|s| s.1.end == WalkEnd::Complete).count();
    let mut in_spin = 0;
    let mut good = 0;
    for s in &ring[..n] {
        let names = sym.frames(&s.2[..s.1.frames]);
        if names.iter().any(|n| n.contains("4spin")) || sym.name(s.0).contains("4spin") {
            in_spin += 1;
            good += usize::from(
                s.1.end == WalkEnd::Complete && names.iter().filter(|n| is_level(n)).count() == 13,
            );
        }
    }
    println!("{n} samples, {complete} complete; {in_spin} under spin, {good} with 13 levels above");
    assert!(n >= 100, "only {n} samples");
    assert!(complete as f64 >= 0.99 * n as f64, "complete: {complete} of {n}");
    assert!(in_spin as f64 >= 0.9 * n as f64 && good as f64 >= 0.99 * in_spin as f64);
}

// ---- Garbage. ----

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn garbage_registers_and_stacks_end_cleanly() {
    std::thread::spawn(|| {
        let bounds = StackBounds::of_current_thread().unwrap();
        let mut cache = ThreadCache::new();
        let code: Vec<(u64, u64)> = modules::loaded().iter().map(|m| m.code()).collect();
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut stack = [0u64; 8192];
        let base = stack.as_ptr() as u64;
        let span = (stack.len() * 8) as u64;
        let mut out = [0u64; 64];
        let mut ends = std::collections::BTreeMap::new();
        for round in 0..20_000u64 {
            // Refill part of the fake stack: random words, stack addresses, code addresses.
            for _ in 0..64 {
                let i = (rng.next() % stack.len() as u64) as usize;
                let r = rng.next();
                stack[i] = match r % 4 {
                    0 => rng.next(),
                    1 => base + rng.next() % span,
                    _ => {
                        let (s, e) = code[(rng.next() % code.len() as u64) as usize];
                        s + rng.next() % (e - s)
                    }
                };
            }
            let pick_code = |rng: &mut Rng| {
                let (s, e) = code[(rng.next() % code.len() as u64) as usize];
                s + rng.next() % (e - s)
            };
            let regs = Regs {
                ip: if round % 7 == 0 { rng.next() } else { pick_code(&mut rng) },
                sp: if round % 11 == 0 { rng.next() } else { base + rng.next() % span },
                bp: if round % 2 == 0 { rng.next() } else { base + rng.next() % span },
                lr: 0,
            };
            let w = std::hint::black_box(walk_dwarf(&regs, &bounds, &mut cache, &mut out));
            assert!(w.frames <= out.len());
            let in_module = |a: &u64| code.iter().any(|&(s, e)| *a > s && *a - 1 < e);
            assert!(
                out[..w.frames].iter().all(in_module),
                "dwarf wrote a frame outside every module"
            );
            *ends.entry(format!("dwarf {:?}", w.end)).or_insert(0) += 1;
            let w = std::hint::black_box(walk_fp(&regs, &bounds, &mut out));
            assert!(w.frames <= out.len());
            *ends.entry(format!("fp {:?}", w.end)).or_insert(0) += 1;
            let w = std::hint::black_box(walk_fp_in(&regs, &bounds, &mut cache, &mut out));
            assert!(
                out[..w.frames].iter().all(in_module),
                "fp_in wrote a frame outside every module"
            );
        }
        std::hint::black_box(&stack);
        println!("ends over 20000 garbage walks: {ends:?}");
    })
    .join()
    .unwrap();
}
