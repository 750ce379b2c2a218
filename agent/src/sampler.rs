//! Per-thread sampling: thread setup and teardown, the overflow signal handler that
//! alternates the long period and the window, and the start-up cost calibration.
//!
//! Owns: the SIGTRAP handler and what it may touch. The handler must never allocate, lock,
//! panic or unwind: it uses only atomics, fixed arrays read with `get`, and the raw
//! system calls read(2), ioctl(2), write(2) (on an eventfd), clock_gettime and tgkill
//! callers; it saves and restores `errno`.
//!
//! # Why perf's `sigtrap` and not F_SETOWN_EX + F_SETSIG
//!
//! Both deliver the overflow to the thread that overflowed. `sigtrap=1` is synchronous by
//! construction (the kernel raises SIGTRAP in the overflowing task on its way back to user
//! space), needs no fcntl per fd, cannot be queued behind other realtime signals or hit
//! RLIMIT_SIGPENDING, and carries `attr.sig_data` in `si_perf_data`, which we use to name
//! the thread's slot: the handler finds its state with no thread-local lookup and no
//! `gettid`. The F_SETOWN_EX path costs three fcntl calls per thread and identifies the
//! event only by `si_fd`, which would need an fd -> slot map. The cost of the two paths is
//! the same signal delivery (measured here as the floor, see `calibrate`). The price of
//! sigtrap is SIGTRAP itself: a target that installs its own SIGTRAP handler after start
//! (a debugger-like program) takes our samples; non-perf SIGTRAPs are passed on to the
//! handler that was installed before ours.
//!
//! # One-shot arming
//!
//! Switching the period of a running task-clock event races with its hrtimer (a spurious
//! extra overflow at the old period in a few % of windows). So the leader is armed with
//! `PERF_EVENT_IOC_REFRESH 1`: it disables itself at each overflow (the whole group stops
//! counting while the handler runs, so the handler's own time is not in the counts), the
//! handler sets the next period on the stopped event (cheap) and re-arms it.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use strobe_format::SampleKind;
use strobe_perf::spec::MAX_GROUP;
use strobe_perf::sys::{self, ioctl};

use crate::slots::{self, Slot, PHASE_LONG, PHASE_WINDOW, RECORD_HEAD};
use crate::{agent, Agent};

/// Set at exit: handlers stop recording and re-arming.
pub static STOPPING: AtomicBool = AtomicBool::new(false);

/// 0: normal. 1: calibrating the floor. 2: calibrating the full sample path.
static CALIB_MODE: AtomicU8 = AtomicU8::new(0);
/// The slot calibration runs on.
static CALIB_SLOT: AtomicUsize = AtomicUsize::new(0);

/// The SIGTRAP disposition before ours, for SIGTRAPs that are not perf's.
struct OldAction(std::cell::UnsafeCell<libc::sigaction>);
// SAFETY: written once in `install_handler` before the handler is installed (single
// threaded agent start), read-only afterwards.
unsafe impl Sync for OldAction {}
// SAFETY: all-zero is a valid sigaction (SIG_DFL, empty mask, no flags).
static OLD_ACTION: OldAction = OldAction(std::cell::UnsafeCell::new(unsafe { std::mem::zeroed() }));

/// `CLOCK_MONOTONIC` in ns. Async-signal-safe (vDSO clock_gettime).
#[inline]
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// Installs the SIGTRAP handler, keeping the previous disposition for chaining.
pub fn install_handler() -> std::io::Result<()> {
    // SAFETY: sigaction with a fully initialised struct; the handler is an
    // `extern "C" fn(c_int, *mut siginfo_t, *mut c_void)` as SA_SIGINFO requires. The old
    // action is stored before any SIGTRAP can reach our handler.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigtrap
            as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
            as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGTRAP, &sa, OLD_ACTION.0.get()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The interrupted instruction pointer from the handler's context.
#[inline]
fn context_ip(uc: *mut libc::c_void) -> u64 {
    if uc.is_null() {
        return 0;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO handler.
        let uc = unsafe { &*(uc as *const libc::ucontext_t) };
        uc.uc_mcontext.gregs.get(libc::REG_RIP as usize).map_or(0, |&r| r as u64)
    }
    #[cfg(target_arch = "aarch64")]
    {
        // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO handler.
        let uc = unsafe { &*(uc as *const libc::ucontext_t) };
        uc.uc_mcontext.pc
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        0
    }
}

extern "C" fn on_sigtrap(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: errno is thread-local; saving and restoring it keeps the interrupted code's
    // value intact across our system calls.
    let saved_errno = unsafe { *libc::__errno_location() };
    if info.is_null() {
        return;
    }
    // SAFETY: `info` is the siginfo_t the kernel passed to this SA_SIGINFO handler.
    let si = unsafe { sys::perf_siginfo(info) };
    if si.code == sys::TRAP_PERF {
        if let (Some(a), Some(slot)) = (agent(), slots::lookup(si.perf_data)) {
            if CALIB_MODE.load(Ordering::Relaxed) == 1
                && (si.perf_data & 0xffff) as usize == CALIB_SLOT.load(Ordering::Relaxed)
            {
                // Floor calibration: signal delivery and one group read, nothing else.
                let mut words = [0u64; RECORD_HEAD + MAX_GROUP];
                std::hint::black_box(read_group(slot, &mut words));
                FLOOR_HITS.fetch_add(1, Ordering::Relaxed);
            } else if si.perf_flags & sys::TRAP_PERF_FLAG_ASYNC != 0 {
                // The thread had SIGTRAP blocked: the signal arrives late, where the thread
                // unblocked it, so its IP and counters describe the wrong place. Record
                // nothing; start a fresh long period.
                rearm_long(a, slot);
            } else {
                take_sample(a, slot, context_ip(uc));
            }
        }
    } else if si.code == libc::SI_TKILL && CALIB_MODE.load(Ordering::Relaxed) != 0 {
        calibration_signal(uc);
    } else {
        chain(sig, info, uc);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// Passes a SIGTRAP that is not ours to the disposition installed before us.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // SAFETY: OLD_ACTION is read-only after install (see its Sync note).
    let old = unsafe { &*OLD_ACTION.0.get() };
    match old.sa_sigaction {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // Default action of SIGTRAP: terminate with a core. Restore it and re-raise, so
            // the target dies exactly as it would have without strobe.
            // SAFETY: signal() and raise() are async-signal-safe.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
        }
        f if old.sa_flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this
            // signature.
            let h: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                unsafe { std::mem::transmute(f) };
            h(sig, info, uc);
        }
        f => {
            // SAFETY: a plain handler installed without SA_SIGINFO.
            let h: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(f) };
            h(sig);
        }
    }
}

/// Reads the slot's group into `words`, returning the number of counters read.
#[inline]
fn read_group(slot: &Slot, words: &mut [u64; RECORD_HEAD + MAX_GROUP]) -> usize {
    let fd = slot.leader_fd.load(Ordering::Relaxed);
    // SAFETY: `words` is valid for writes of its full length during the call.
    let n = unsafe { libc::read(fd, words.as_mut_ptr().cast(), std::mem::size_of_val(words)) };
    if n < 8 * RECORD_HEAD as isize {
        return 0;
    }
    (words[0] as usize).min(MAX_GROUP)
}

/// The next long period: the base plus a uniform jitter in `0..=jitter` (xorshift64).
#[inline]
fn next_long(a: &Agent, slot: &Slot) -> u64 {
    let period = a.period.load(Ordering::Relaxed);
    let jitter = a.jitter.load(Ordering::Relaxed);
    if jitter == 0 {
        return period;
    }
    let mut x = slot.rng.load(Ordering::Relaxed) | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    slot.rng.store(x, Ordering::Relaxed);
    // checked_add: a jitter of u64::MAX must not become a division by zero here.
    period.wrapping_add(jitter.checked_add(1).map_or(x, |m| x % m))
}

/// The handler's work for one overflow of `slot`'s leader: read the group once, record
/// the sample, switch the period, re-arm. Async-signal-safe. Returns true if recorded.
#[inline]
pub fn take_sample(a: &Agent, slot: &Slot, ip: u64) -> bool {
    if STOPPING.load(Ordering::Relaxed) {
        return false;
    }
    let mut words = [0u64; RECORD_HEAD + MAX_GROUP];
    let n = read_group(slot, &mut words);
    let time = mono_ns();
    let counters = words.get(RECORD_HEAD..RECORD_HEAD + n).unwrap_or(&[]);
    let leader = counters.first().copied().unwrap_or(0);
    let window = a.window;
    let (kind, next) = if window == 0 {
        (SampleKind::Plain, next_long(a, slot))
    } else if slot.phase.load(Ordering::Relaxed) == PHASE_LONG {
        slot.window_start.store(leader, Ordering::Relaxed);
        slot.phase.store(PHASE_WINDOW, Ordering::Relaxed);
        (SampleKind::WindowStart, window)
    } else {
        let delta = leader.wrapping_sub(slot.window_start.load(Ordering::Relaxed));
        slot.windows.store(slot.windows.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        slot.window_sum
            .store(slot.window_sum.load(Ordering::Relaxed).wrapping_add(delta), Ordering::Relaxed);
        slot.phase.store(PHASE_LONG, Ordering::Relaxed);
        (SampleKind::WindowEnd, next_long(a, slot))
    };
    let pushed = slot.push(a.capacity, a.stride, time, ip, kind as u64, counters);
    if pushed == Some(a.wakeup) {
        wake(a.event_fd);
    }
    let fd = slot.leader_fd.load(Ordering::Relaxed);
    let mut p = next;
    // SAFETY: PERIOD reads one u64 through the pointer during the call; REFRESH takes an
    // integer. `fd` is the owner's live leader (the slot is ACTIVE, checked by the caller).
    unsafe {
        libc::ioctl(fd, ioctl::PERIOD, &mut p as *mut u64);
        libc::ioctl(fd, ioctl::REFRESH, 1);
    }
    pushed.is_some()
}

/// Re-arms `slot` for a long period without recording (a late, asynchronous signal).
fn rearm_long(a: &Agent, slot: &Slot) {
    if STOPPING.load(Ordering::Relaxed) {
        return;
    }
    slot.phase.store(PHASE_LONG, Ordering::Relaxed);
    let fd = slot.leader_fd.load(Ordering::Relaxed);
    let mut p = next_long(a, slot);
    // SAFETY: as in `take_sample`.
    unsafe {
        libc::ioctl(fd, ioctl::PERIOD, &mut p as *mut u64);
        libc::ioctl(fd, ioctl::REFRESH, 1);
    }
}

/// Wakes the writer thread (write(2) on an eventfd: async-signal-safe).
#[inline]
pub fn wake(event_fd: libc::c_int) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live local.
    unsafe { libc::write(event_fd, (&one as *const u64).cast(), 8) };
}

fn calibration_signal(uc: *mut libc::c_void) {
    let Some(slot) = slots::SLOTS.get(CALIB_SLOT.load(Ordering::Relaxed)) else { return };
    match CALIB_MODE.load(Ordering::Relaxed) {
        1 => {
            let mut words = [0u64; RECORD_HEAD + MAX_GROUP];
            std::hint::black_box(read_group(slot, &mut words));
        }
        2 => {
            if let Some(a) = agent() {
                take_sample(a, slot, context_ip(uc));
            }
        }
        _ => {}
    }
}

/// Why a thread could not be set up.
pub enum SetupError {
    /// All slots are taken.
    NoSlot,
    /// perf_event_open failed.
    Open(strobe_perf::OpenError),
}

/// Claims a slot, allocates its ring and opens its group on the calling thread, with
/// `first_period`. The group is left disarmed; returns the slot index.
pub fn open_slot(a: &Agent, first_period: u64) -> Result<usize, SetupError> {
    let (idx, generation) = slots::claim().ok_or(SetupError::NoSlot)?;
    let Some(slot) = slots::SLOTS.get(idx) else { return Err(SetupError::NoSlot) };
    let group = match strobe_perf::EventGroup::open(
        &a.cfg.spec,
        strobe_perf::Target::CALLING_THREAD,
        first_period,
        slots::sig_data(idx, generation),
        a.cfg.kernel,
    ) {
        Ok(g) => g,
        Err(e) => {
            slot.state.store(slots::FREE, Ordering::Release);
            return Err(SetupError::Open(e));
        }
    };
    let words = (a.capacity as usize).saturating_mul(a.stride);
    let ring: Box<[u64]> = vec![0u64; words].into_boxed_slice();
    slot.buf.store(Box::into_raw(ring).cast::<u64>(), Ordering::Relaxed);
    slot.tid.store(sys::gettid() as u32, Ordering::Relaxed);
    slot.leader_fd.store(group.leader().raw_fd(), Ordering::Relaxed);
    slot.group.store(Box::into_raw(Box::new(group)), Ordering::Relaxed);
    slot.head.store(0, Ordering::Relaxed);
    slot.tail.store(0, Ordering::Relaxed);
    slot.lost.store(0, Ordering::Relaxed);
    slot.lost_reported.store(0, Ordering::Relaxed);
    slot.phase.store(PHASE_LONG, Ordering::Relaxed);
    slot.rng.store(mono_ns() ^ (idx as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15), Ordering::Relaxed);
    slot.window_start.store(0, Ordering::Relaxed);
    slot.windows.store(0, Ordering::Relaxed);
    slot.window_sum.store(0, Ordering::Relaxed);
    slot.named.store(0, Ordering::Relaxed);
    // Release: the writer thread that sees ACTIVE sees the ring, tid and counters above.
    slot.state.store(slots::ACTIVE, Ordering::Release);
    Ok(idx)
}

/// Arms slot `idx`'s leader one-shot (its period was set at open).
pub fn arm(idx: usize) {
    if let Some(slot) = slots::SLOTS.get(idx) {
        let fd = slot.leader_fd.load(Ordering::Relaxed);
        // SAFETY: REFRESH takes an integer; `fd` is the slot's live leader.
        unsafe { libc::ioctl(fd, ioctl::REFRESH, 1) };
    }
}

/// Closes slot `idx`'s events from its owning thread and marks it DEAD for the writer
/// (which drains and frees it). With `free_now` (no writer will come: calibration, or a
/// forked child), frees the ring at once and marks it FREE.
pub fn close_slot(idx: usize, free_now: bool) {
    let Some(slot) = slots::SLOTS.get(idx) else { return };
    if slot.state.load(Ordering::Relaxed) != slots::ACTIVE {
        return;
    }
    // Same-thread ordering: our handler sees CLOSING before the fds go away, and ignores us.
    slot.state.store(slots::CLOSING, Ordering::SeqCst);
    let group = slot.group.swap(std::ptr::null_mut(), Ordering::Relaxed);
    if !group.is_null() {
        // SAFETY: the pointer came from Box::into_raw in `open_slot` and was swapped out,
        // so it is dropped exactly once (closing the group's fds).
        drop(unsafe { Box::from_raw(group) });
    }
    slot.leader_fd.store(-1, Ordering::Relaxed);
    if free_now {
        free_ring(a_capacity_words(slot), slot);
        slot.state.store(slots::FREE, Ordering::Release);
    } else {
        // Release: the writer that sees DEAD sees the final head and lost count.
        slot.state.store(slots::DEAD, Ordering::Release);
    }
}

fn a_capacity_words(_slot: &Slot) -> usize {
    agent().map_or(0, |a| (a.capacity as usize).saturating_mul(a.stride))
}

/// Frees a slot's ring of `words` words.
pub fn free_ring(words: usize, slot: &Slot) {
    let buf = slot.buf.swap(std::ptr::null_mut(), Ordering::Relaxed);
    if !buf.is_null() && words > 0 {
        // SAFETY: `buf` came from Box<[u64]>::into_raw of exactly `words` words in
        // `open_slot` (capacity and stride are fixed for an agent's life) and was swapped
        // out, so it is freed once.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(buf, words)) });
    }
}

/// Measured costs, in ns.
pub struct Costs {
    /// One sample on the full handler path (signal delivery included).
    pub sample_ns: u64,
    /// Signal delivery plus one group read.
    pub floor_ns: u64,
    /// Leader counts per ns of the thread's running time (1 for task-clock).
    pub leader_per_ns: f64,
}

/// Overflows handled in floor mode.
static FLOOR_HITS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The calling thread's CPU time (user + system), ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// A fixed amount of integer work; returns the thread CPU time it took.
#[inline(never)]
fn spin(iters: u64) -> u64 {
    let t0 = thread_cpu_ns();
    let mut x = std::hint::black_box(0x9e37_79b9_7f4a_7c15u64);
    for i in 0..iters {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i);
        x = std::hint::black_box(x);
    }
    std::hint::black_box(x);
    thread_cpu_ns().saturating_sub(t0)
}

/// Period of the calibration runs: short, so a 10 ms spin takes a few hundred samples.
const CALIB_PERIOD_NS: u64 = 50_000;

/// Measures what sampling costs the target, the way the target pays it: the extra thread
/// CPU time (user + kernel: overflow, signal delivery, handler, sigreturn) of a fixed
/// spin with real overflows every 50 us, over the same spin unsampled, divided by the
/// overflows taken. Two runs:
///
/// - the floor: a plain periodic leader whose handler only reads the group once;
/// - the real path: the one-shot leader with the full handler (read, record, switch the
///   period, re-arm), alternating 50 us with the real window.
///
/// Each figure is the smaller of two runs (noise only adds time). Needs a time leader;
/// for a count leader (cycles) it falls back to signals sent with tgkill, which miss the
/// overflow interrupt's share.
pub fn calibrate(a: &Agent) -> Option<Costs> {
    let mut iters = 1u64 << 16;
    while spin(iters) < 5_000_000 && iters < 1 << 34 {
        iters *= 2;
    }
    let base = (0..3).map(|_| spin(iters)).min().unwrap_or(0);
    if !a.cfg.spec.leader().is_time {
        return calibrate_tkill(a, 300);
    }
    let saved = a.period.swap(CALIB_PERIOD_NS, Ordering::Relaxed);
    let floor_run = || -> Option<u64> {
        let idx = open_slot(a, CALIB_PERIOD_NS).ok()?;
        let slot = slots::SLOTS.get(idx)?;
        CALIB_SLOT.store(idx, Ordering::Relaxed);
        FLOOR_HITS.store(0, Ordering::Relaxed);
        CALIB_MODE.store(1, Ordering::SeqCst);
        let fd = slot.leader_fd.load(Ordering::Relaxed);
        // SAFETY: ENABLE takes an integer; `fd` is the slot's live leader.
        unsafe { libc::ioctl(fd, ioctl::ENABLE, 0) };
        let t = spin(iters);
        close_slot(idx, true);
        CALIB_MODE.store(0, Ordering::SeqCst);
        let hits = FLOOR_HITS.load(Ordering::Relaxed);
        (hits > 10).then(|| t.saturating_sub(base) / hits)
    };
    let full_run = || -> Option<u64> {
        let idx = open_slot(a, CALIB_PERIOD_NS).ok()?;
        let slot = slots::SLOTS.get(idx)?;
        arm(idx);
        let t = spin(iters);
        let hits = slot.head.load(Ordering::Relaxed) + slot.lost.load(Ordering::Relaxed);
        close_slot(idx, true);
        (hits > 10).then(|| t.saturating_sub(base) / hits)
    };
    let floor = [floor_run(), floor_run()].into_iter().flatten().min();
    let full = [full_run(), full_run()].into_iter().flatten().min();
    a.period.store(saved, Ordering::Relaxed);
    match (full, floor) {
        (Some(s), Some(f)) if s > 0 && f > 0 => {
            Some(Costs { sample_ns: s, floor_ns: f, leader_per_ns: 1.0 })
        }
        _ => calibrate_tkill(a, 300),
    }
}

/// The fallback calibration: runs the real handler path `n` times on the calling thread
/// with signals it sends itself (tgkill), and the floor (a handler that only reads the
/// group), and returns the mean wall time of each.
fn calibrate_tkill(a: &Agent, n: u32) -> Option<Costs> {
    let idx = open_slot(a, a.period.load(Ordering::Relaxed)).ok()?;
    let slot = slots::SLOTS.get(idx)?;
    CALIB_SLOT.store(idx, Ordering::Relaxed);
    // SAFETY: getpid/gettid have no preconditions.
    let (pid, tid) = (unsafe { libc::getpid() }, sys::gettid());
    let tkill = || {
        // SAFETY: sends SIGTRAP to this very thread; our handler is installed.
        unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGTRAP) };
    };
    let run = |mode: u8| -> (u64, u64) {
        CALIB_MODE.store(mode, Ordering::SeqCst);
        for _ in 0..n / 10 {
            tkill(); // warm up caches and the timer paths
        }
        let h0 = slot.head.load(Ordering::Relaxed);
        let t0 = mono_ns();
        for _ in 0..n {
            tkill();
        }
        let dt = mono_ns() - t0;
        let h = slot.head.load(Ordering::Relaxed) - h0;
        CALIB_MODE.store(0, Ordering::SeqCst);
        (dt, h)
    };
    arm(idx);
    let (floor_dt, _) = run(1);
    let (full_dt, pushes) = run(2);
    let mut words = [0u64; RECORD_HEAD + MAX_GROUP];
    let nread = read_group(slot, &mut words);
    let leader_per_ns =
        if nread > 0 && words[2] > 0 { words[RECORD_HEAD] as f64 / words[2] as f64 } else { 1.0 };
    close_slot(idx, true);
    Some(Costs {
        sample_ns: full_dt / pushes.max(u64::from(n)).max(1),
        floor_ns: floor_dt / u64::from(n.max(1)),
        leader_per_ns,
    })
}
