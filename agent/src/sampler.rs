//! Per-thread sampling: thread setup and teardown, and the overflow signal handler that
//! alternates the long period and the window, walks the stack and appends each sample
//! to the thread's block in the shared arena (where `strobe record` drains it).
//!
//! Owns: the SIGTRAP handler and what it may touch. The handler must never allocate, lock,
//! panic or unwind: it uses only atomics, fixed arrays read with `get`, the arena's
//! custody code, and the raw system calls read(2), ioctl(2), futex(2) (waking the
//! recorder), clock_gettime and tgkill callers; it saves and restores `errno`.
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
//!
//! What is still counted: the kernel's overflow path between the overflow and the group
//! stopping (about 14 us of task-clock here), and the re-arming ioctl's own return and the
//! `sigreturn` after it (about 7 us): every window carries about 28 us that is not the
//! target's (measured; see `calibrate`). The calibration process measures that baseline
//! for every counter before the target starts, `strobe record` stores it in the file and
//! `strobe report` subtracts it from every window.
//!
//! # A fair first period
//!
//! A thread's counters start at zero. If every thread's first period were a whole period,
//! a thread living less than one period would never be sampled, however many there are
//! (2000 threads of 1 ms at a 6 ms period gave 7 samples where 300 were due). Each new
//! thread's first period is instead drawn from the stationary residual of the sampling
//! cycle (long period + jitter + window), so the expected number of samples of any
//! thread is its CPU time over the mean cycle, however short its life.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

use strobe_perf::spec::MAX_GROUP;
use strobe_perf::sys::{self, ioctl};
use strobe_protocol::CallGraph;
use strobe_sampler::custody::record::{Rec, FLAG_COMPLETE, FLAG_HAS_STACK, FLAG_TRUNCATED};
use strobe_sampler::custody::{self, Append, SharedSlot};
use strobe_sampler::{Kind, Periods};
use strobe_unwind::WalkEnd;

use crate::slots::{self, Local, LOCAL};
use crate::stack;
use crate::{agent, arena, Agent};

/// Set at exit: handlers stop recording and re-arming.
pub static STOPPING: AtomicBool = AtomicBool::new(false);

/// 0: normal. Other values: a calibration mode (see `calibrate`).
pub static CALIB_MODE: AtomicU8 = AtomicU8::new(0);

/// Words of a group read: nr, time_enabled, time_running, then the values.
pub const READ_HEAD: usize = 3;

/// The deepest stack a sample can keep.
pub const MAX_DEPTH: usize = strobe_sampler::custody::record::MAX_FRAMES;

/// The target's SIGTRAP disposition, for SIGTRAPs that are not perf's: the one before
/// ours, then whatever the target installs later through `sigaction`/`signal` (which the
/// agent interposes for SIGTRAP, keeping its own handler in front). Atomics, because the
/// handler reads them while another thread may be changing them.
static CHAIN_HANDLER: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
/// `sa_flags` of the chained disposition.
static CHAIN_FLAGS: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
/// Our handler is installed: SIGTRAP dispositions are virtual from then on.
static INSTALLED: AtomicBool = AtomicBool::new(false);

type SigactionFn =
    unsafe extern "C" fn(libc::c_int, *const libc::sigaction, *mut libc::sigaction) -> libc::c_int;

/// libc's `sigaction` (ours is interposed), resolved once at install.
fn real_sigaction() -> Option<SigactionFn> {
    static REAL: std::sync::atomic::AtomicPtr<libc::c_void> =
        std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
    let mut p = REAL.load(Ordering::Relaxed);
    if p.is_null() {
        // SAFETY: dlsym with a NUL-terminated name (never reached from the signal handler:
        // install resolves it first).
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, c"sigaction".as_ptr()) };
        REAL.store(p, Ordering::Relaxed);
    }
    // SAFETY: libc's sigaction has this signature.
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, SigactionFn>(p) })
}

/// The interposed `sigaction`'s work for SIGTRAP once our handler is installed: report
/// and record the target's disposition without touching the kernel's (ours stays).
/// Returns `None` when the call is not ours to virtualise.
pub fn virtual_sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> Option<libc::c_int> {
    if sig != libc::SIGTRAP || !INSTALLED.load(Ordering::Acquire) {
        return None;
    }
    if !old.is_null() {
        // SAFETY: the caller passes a writable sigaction (sigaction(2)'s contract).
        unsafe {
            let mut o: libc::sigaction = std::mem::zeroed();
            o.sa_sigaction = CHAIN_HANDLER.load(Ordering::Relaxed);
            o.sa_flags = CHAIN_FLAGS.load(Ordering::Relaxed);
            *old = o;
        }
    }
    if !act.is_null() {
        // SAFETY: the caller passes a readable sigaction.
        let a = unsafe { &*act };
        CHAIN_FLAGS.store(a.sa_flags, Ordering::Relaxed);
        CHAIN_HANDLER.store(a.sa_sigaction, Ordering::Release);
    }
    Some(0)
}

/// The interposed `signal`'s work for SIGTRAP once our handler is installed.
pub fn virtual_signal(sig: libc::c_int, handler: libc::sighandler_t) -> Option<libc::sighandler_t> {
    if sig != libc::SIGTRAP || !INSTALLED.load(Ordering::Acquire) {
        return None;
    }
    CHAIN_FLAGS.store(libc::SA_RESTART, Ordering::Relaxed);
    Some(CHAIN_HANDLER.swap(handler, Ordering::AcqRel))
}

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
        // No SA_ONSTACK: a thread's alternate signal stack (Rust's std gives every thread
        // one of a few KiB, for its overflow message) is too small for a DWARF walk, which
        // overflowed it (SIGSEGV in gimli's row copies). The handler runs on the
        // interrupted stack, and walks only with room to spare (`stack::walk`).
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        let real = real_sigaction().ok_or_else(|| std::io::Error::other("no sigaction"))?;
        let mut old: libc::sigaction = std::mem::zeroed();
        if real(libc::SIGTRAP, &sa, &mut old) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        CHAIN_FLAGS.store(old.sa_flags, Ordering::Relaxed);
        CHAIN_HANDLER.store(old.sa_sigaction, Ordering::Relaxed);
        INSTALLED.store(true, Ordering::Release);
    }
    Ok(())
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
        let (index, generation) = slots::decode(si.perf_data);
        let found = (|| {
            let a = agent()?;
            let ar = arena()?;
            let slot = ar.slots().get(index)?;
            let local = LOCAL.get(index)?;
            slot.ctl.lookup(generation).then_some((a, ar, slot, local))
        })();
        if let Some((a, ar, slot, local)) = found {
            if CALIB_MODE.load(Ordering::Relaxed) != 0 {
                crate::calibrate::on_overflow(a, index, slot, local, uc);
            } else if si.perf_flags & sys::TRAP_PERF_FLAG_ASYNC != 0 {
                // The thread had SIGTRAP blocked: the signal arrives late, where the thread
                // unblocked it, so its IP and counters describe the wrong place. Record
                // nothing; start a fresh long period.
                rearm_long(a, slot, local);
            } else {
                take_sample(a, ar, index, slot, local, uc);
            }
        }
    } else if si.code == libc::SI_TKILL && CALIB_MODE.load(Ordering::Relaxed) != 0 {
        crate::calibrate::on_tkill(uc);
    } else {
        chain(sig, info, uc);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}

/// Passes a SIGTRAP that is not ours to the disposition installed before us.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut libc::c_void) {
    // Acquire: pairs with the Release store of a handler the target installed.
    let handler = CHAIN_HANDLER.load(Ordering::Acquire);
    let flags = CHAIN_FLAGS.load(Ordering::Relaxed);
    match handler {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // Default action of SIGTRAP: terminate with a core. Restore it and re-raise, so
            // the target dies exactly as it would have without strobe.
            // SAFETY: sigaction and raise are async-signal-safe; `dfl` is a valid action.
            unsafe {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                if let Some(real) = real_sigaction() {
                    real(sig, &dfl, std::ptr::null_mut());
                }
                libc::raise(sig);
            }
        }
        f if flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the target installed this handler with SA_SIGINFO, so it has this
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
pub fn read_group(local: &Local, words: &mut [u64; READ_HEAD + MAX_GROUP]) -> usize {
    let fd = local.leader_fd.load(Ordering::Relaxed);
    // SAFETY: `words` is valid for writes of its full length during the call.
    let n = unsafe { libc::read(fd, words.as_mut_ptr().cast(), std::mem::size_of_val(words)) };
    if n < 8 * READ_HEAD as isize {
        return 0;
    }
    (words[0] as usize).min(MAX_GROUP)
}

/// The periods the handler alternates between.
#[inline]
pub fn periods(a: &Agent) -> Periods {
    // Relaxed: plain parameters, set before sampling starts (calibration swaps the
    // period on the calibrating thread itself).
    Periods {
        period: a.period.load(Ordering::Relaxed),
        jitter: a.jitter.load(Ordering::Relaxed),
        window: a.window,
    }
}

/// Sets the next period on the stopped leader and re-arms it for one overflow.
#[inline]
fn rearm(local: &Local, mut period: u64) {
    let fd = local.leader_fd.load(Ordering::Relaxed);
    // SAFETY: PERIOD reads one u64 through the pointer during the call; REFRESH takes an
    // integer. `fd` is the owner's live leader (the slot is ACTIVE, checked by the caller).
    unsafe {
        libc::ioctl(fd, ioctl::PERIOD, &mut period as *mut u64);
        libc::ioctl(fd, ioctl::REFRESH, 1);
    }
}

/// The handler's work for one overflow of `slot`'s leader: read the group once, walk the
/// stack (window starts and plain samples only: a window's end is not a place where time
/// went), append the sample to the thread's block, switch the period, re-arm.
/// Async-signal-safe. Returns what the append did.
#[inline]
pub fn take_sample(
    a: &Agent,
    ar: &strobe_protocol::Arena,
    index: usize,
    slot: &SharedSlot,
    local: &Local,
    uc: *mut libc::c_void,
) -> Option<Append> {
    if STOPPING.load(Ordering::Relaxed) {
        return None;
    }
    let mut words = [0u64; READ_HEAD + MAX_GROUP];
    let n = read_group(local, &mut words);
    let time = mono_ns();
    let counters = words.get(READ_HEAD..READ_HEAD + n).unwrap_or(&[]);
    let leader = counters.first().copied().unwrap_or(0);
    let step = slot.alt.on_overflow(&periods(a), leader);
    let r = stack::regs(uc);
    let mut frames = [0u64; MAX_DEPTH];
    let mut flags = 0u16;
    let mut depth = 0;
    let walker = local.walker.load(Ordering::Relaxed);
    if a.call_graph != CallGraph::None && step.kind != Kind::WindowEnd && !walker.is_null() {
        let limit = (a.max_depth as usize).min(MAX_DEPTH);
        let out = frames.get_mut(..limit).unwrap_or(&mut []);
        // SAFETY: the owner's walker, created by this thread at setup and dropped only by
        // it after its events are closed; the handler runs on the owner's thread.
        let w = unsafe { &mut *walker };
        let (d, end) = stack::walk(a.call_graph, &r, w, out);
        depth = d;
        flags |= FLAG_HAS_STACK;
        match end {
            WalkEnd::Complete => flags |= FLAG_COMPLETE,
            WalkEnd::DepthLimit => flags |= FLAG_TRUNCATED,
            _ => {}
        }
    }
    let rec = Rec {
        kind: step.kind as u8,
        flags,
        time,
        ip: r.ip,
        counters,
        frames: frames.get(..depth).unwrap_or(&[]),
    };
    // SAFETY: this handler is the slot's only producer: it runs on the slot's owner
    // thread (the caller's lookup checked the generation), and SIGTRAP is blocked while
    // it runs, so it does not re-enter itself.
    let appended = unsafe { custody::append(&ar.pool(), slot, index as u32, &rec) };
    if let Append::Stored { wake: true } | Append::Lost { wake: true } = appended {
        ar.wake_recorder();
    }
    rearm(local, step.next_period);
    Some(appended)
}

/// Re-arms `slot` for a long period without recording (a late, asynchronous signal).
fn rearm_long(a: &Agent, slot: &SharedSlot, local: &Local) {
    if STOPPING.load(Ordering::Relaxed) {
        return;
    }
    rearm(local, slot.alt.restart(&periods(a)));
}

/// Why a thread could not be set up.
pub enum SetupError {
    /// All slots are taken.
    NoSlot,
    /// perf_event_open failed.
    Open(strobe_perf::OpenError),
}

/// The first period of a new thread: a draw from the stationary residual of the sampling
/// cycle, so a thread's expected samples are its CPU time over the mean cycle whatever
/// its length (see the module note). `u` is uniform in [0, 1).
pub fn first_period(p: &Periods, u: f64) -> u64 {
    let base = p.period as f64 + p.window as f64;
    let j = p.jitter as f64;
    if base <= 0.0 {
        return 1;
    }
    let mean = base + j / 2.0;
    // The residual of a cycle uniform in [base, base + j] has density P(C > x) / mean:
    // flat up to `base`, then falling linearly to 0 at `base + j`.
    let flat = base / mean;
    let x = if u < flat || j == 0.0 {
        u / flat.max(f64::MIN_POSITIVE) * base
    } else {
        let v = ((u - flat) / (1.0 - flat)).clamp(0.0, 1.0);
        base + j * (1.0 - (1.0 - v).sqrt())
    };
    (x.round() as u64).clamp(1, (base + j) as u64)
}

/// A uniform draw in [0, 1) from a 64-bit state (xorshift64*).
fn uniform(seed: &mut u64) -> f64 {
    let mut x = *seed | 1;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *seed = x;
    (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
}

/// Claims a slot, opens its group on the calling thread and records its stack bounds.
/// The group is left disarmed with its first period already set: a residual draw
/// (`first_period`), or `period` when given (calibration). Returns the slot index.
pub fn open_slot(a: &Agent, period: Option<u64>) -> Result<usize, SetupError> {
    let ar = arena().ok_or(SetupError::NoSlot)?;
    let (idx, generation) = ar.claim_slot().ok_or(SetupError::NoSlot)?;
    let index = idx as usize;
    let (Some(slot), Some(local)) = (ar.slots().get(index), LOCAL.get(index)) else {
        return Err(SetupError::NoSlot);
    };
    let mut seed = mono_ns() ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let first = period.unwrap_or_else(|| first_period(&periods(a), uniform(&mut seed)));
    let group = match strobe_perf::EventGroup::open(
        &a.spec,
        strobe_perf::Target::CALLING_THREAD,
        first,
        slots::sig_data(index, generation),
        a.cfg.kernel,
    ) {
        Ok(g) => g,
        Err(e) => {
            slot.ctl.abandon();
            return Err(SetupError::Open(e));
        }
    };
    if local.walker.load(Ordering::Relaxed).is_null() {
        let w = Box::new(stack::thread_walker(a.call_graph));
        local.walker.store(Box::into_raw(w), Ordering::Relaxed);
    }
    local.leader_fd.store(group.leader().raw_fd(), Ordering::Relaxed);
    local.group.store(Box::into_raw(Box::new(group)), Ordering::Relaxed);
    slot.reset_custody(a.pid as u32, sys::gettid() as u32, a.stream);
    slot.set_comm(&thread_name());
    slot.alt.reset(seed);
    // Release (in `activate`): the recorder (and our own handler, on this thread) that
    // sees ACTIVE sees the custody state and alternation above.
    slot.ctl.activate();
    Ok(index)
}

/// The calling thread's name (`comm`).
pub fn thread_name() -> [u8; 16] {
    let mut buf = [0u8; 16];
    // SAFETY: PR_GET_NAME writes at most 16 bytes into `buf`.
    unsafe { libc::prctl(libc::PR_GET_NAME, buf.as_mut_ptr(), 0, 0, 0) };
    buf
}

/// The calling thread's CPU time, ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// Arms slot `index`'s leader one-shot (its period was set at open), noting the CPU time
/// the thread ran before it could be sampled.
pub fn arm(index: usize) {
    if let Some(slot) = arena().and_then(|ar| ar.slots().get(index)) {
        // Relaxed: read by the recorder after the slot is freed or the process ended. Only
        // the first arming counts (a failed exec re-arms).
        let _ = slot.cpu_before_ns.compare_exchange(
            0,
            thread_cpu_ns().max(1),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
    if let Some(local) = LOCAL.get(index) {
        let fd = local.leader_fd.load(Ordering::Relaxed);
        // SAFETY: REFRESH takes an integer; `fd` is the slot's live leader.
        unsafe { libc::ioctl(fd, ioctl::REFRESH, 1) };
    }
}

/// Closes slot `index`'s events from its owning thread, hands its last block to the
/// recorder and marks the slot DEAD (the recorder drains and frees it). With `discard`
/// (calibration: no recorder will read it) the slot is freed at once and its records
/// are left for the pool's next user to overwrite.
pub fn close_slot(index: usize, discard: bool) {
    let (Some(ar), Some(local)) = (arena(), LOCAL.get(index)) else { return };
    let Some(slot) = ar.slots().get(index) else { return };
    // Same-thread ordering: our handler sees CLOSING before the fds go away, and ignores us.
    if !slot.ctl.begin_close() {
        return;
    }
    local.close_group();
    local.drop_walker();
    slot.set_comm(&thread_name());
    if discard {
        slot.ctl.finish_close(true);
        return;
    }
    // SAFETY: we are the slot's owner and our handler can no longer run for it (CLOSING,
    // events closed).
    unsafe { custody::close(&ar.pool(), slot) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first period's draws: within the cycle, and their mean is the stationary
    /// residual's (E[C^2] / 2E[C]), so a thread shorter than a period is sampled with the
    /// probability its length deserves.
    #[test]
    fn first_periods_follow_the_cycles_residual() {
        let p = Periods { period: 1_000_000, jitter: 200_000, window: 20_000 };
        let mut seed = 12345u64;
        let n = 200_000;
        let (mut sum, mut max, mut below_half) = (0f64, 0u64, 0u64);
        for _ in 0..n {
            let f = first_period(&p, uniform(&mut seed));
            assert!((1..=1_220_000).contains(&f), "{f}");
            sum += f as f64;
            max = max.max(f);
            if f < 100_000 {
                below_half += 1;
            }
        }
        let (b, j) = (1_020_000f64, 200_000f64);
        let mean_c = b + j / 2.0;
        let e_c2 = b * b + b * j + j * j / 3.0;
        let want = e_c2 / (2.0 * mean_c);
        let got = sum / n as f64;
        assert!((got - want).abs() / want < 0.01, "mean first period {got:.0}, want {want:.0}");
        // A 0.1 ms thread is sampled with probability 0.1 ms / the mean cycle (1.12 ms).
        let p_short = below_half as f64 / n as f64;
        assert!((p_short - 100_000.0 / mean_c).abs() < 0.005, "{p_short}");
        assert!(max > 1_150_000, "the jitter's tail is reached: {max}");
        // No jitter, no window: uniform over the period.
        let plain = Periods { period: 1000, jitter: 0, window: 0 };
        let m: f64 =
            (0..10_000).map(|_| first_period(&plain, uniform(&mut seed)) as f64).sum::<f64>() / 1e4;
        assert!((m - 500.0).abs() < 15.0, "{m}");
    }
}
