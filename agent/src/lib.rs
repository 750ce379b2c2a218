//! libstrobe_agent.so: the in-process capture agent that `strobe record` and `strobe watch`
//! inject into a target with LD_PRELOAD. Watchpoints live in [`watch`]; everything else
//! here serves recording.
//!
//! It owns: reading its configuration from the environment (`config`), following the
//! target's threads (its `pthread_create` wraps the start routine so each new thread opens
//! its own perf group before running user code), sampling (`sampler`: one-shot armed
//! task-clock/cycles leader, synchronous SIGTRAP per thread, period alternation), the
//! per-thread rings (`slots`) and the writer thread (`writer`). It must never
//! allocate, lock or panic in a signal handler, never change the target's output or exit
//! status, and never unwind into the target's frames (this crate builds with
//! `panic = "abort"`; nothing here panics on purpose: errors become NOTE chunks).
//!
//! # Processes
//!
//! - Start: the command `strobe record` launched (no `STROBE_AGENT_PID` in the
//!   environment). The agent sets `STROBE_AGENT_PID` to its pid.
//! - fork: a `pthread_atfork` child handler closes the parent's events in the child and
//!   stops sampling there; with `--follow-fork` it starts a new stream (origin Fork) with
//!   its own writer thread. Children made with `vfork`/`posix_spawn` run no fork handlers;
//!   they exec at once (see next point).
//! - exec: events are opened with `remove_on_exec` and close-on-exec fds, and the agent
//!   drains its rings and writes END (reason Exec) before `execve`/`execv`/`execvp`/
//!   `execvpe` (the variadic `execl*` family is not wrapped: samples buffered since the
//!   last wakeup are lost there, uncounted). The new image loads the agent again through
//!   LD_PRELOAD; if its pid equals `STROBE_AGENT_PID` it is the same process and starts a
//!   new stream with origin Exec; otherwise it is a forked child's new image and is
//!   profiled (origin Exec, its own stream) only with `--follow-fork`.
//! - exit: a `.fini_array` destructor (and the interposed `_exit`/`_Exit`, which skip
//!   destructors) stops sampling, drains every ring, writes LOST and END. A target killed
//!   by a signal skips it: the file then holds what the writer wrote at its last wakeup, up
//!   to the last whole chunk.
//! - A `vfork` child shares our memory but not our pid: every path that writes the
//!   recording checks the pid first and leaves it to the parent.
//!
//! # The cost, once
//!
//! The first image measures the per-sample cost (`sampler::calibrate`, about 15 ms of CPU)
//! and puts it in `STROBE_COSTS`; forked children and exec'd images reuse it. The period
//! charges that cost times `sampler::INDIRECT_COST_FACTOR`: the calibration spins a
//! register-only loop, and a real target pays about twice as much per sample (measured
//! with `strobe bench sampling`, which prints the ratio).
//!
//! # Known limits
//!
//! - Threads made with raw `clone` (not `pthread_create`) are not profiled.
//! - SIGTRAP: `sigaction` and `signal` are interposed so that a target installing its own
//!   SIGTRAP handler gets a virtual disposition that our handler chains to for every
//!   SIGTRAP that is not a sample (raw `rt_sigaction` system calls bypass this).
//! - A target that closes every fd it did not open stops the recording.
//!
//!
//! Not a limit on recent kernels (this machine's 6.18): sampling does not make a blocking
//! call (nanosleep, poll, select) return EINTR. perf raises the `sigtrap` signal from task
//! work on the thread's way back to user space, not while it waits in the kernel (test
//! `sampling_never_cuts_a_blocking_call_short`). Kernels that raised it from irq work
//! could cut such a call short when an overflow lands in it, which needs kernel counting;
//! with kernel counting excluded, overflows only happen in user mode. The handler uses
//! SA_RESTART, which covers the other calls.

mod config;
mod sampler;
mod slots;
mod watch;
mod writer;

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use strobe_format::{Encoder, EndReason, NoteLevel, PeriodSource, ProcessInfo, ProcessOrigin};

use crate::config::Config;
use crate::slots::RECORD_HEAD;

/// One agent instance (a process's stream) and the parameters its handlers read.
pub struct Agent {
    cfg: Config,
    /// The process this agent records. A `vfork` child shares our memory but not our pid:
    /// it must not touch the recording.
    pid: libc::pid_t,
    out_fd: libc::c_int,
    event_fd: libc::c_int,
    stream: u32,
    /// Words per ring record.
    stride: usize,
    capacity: u64,
    wakeup: u64,
    window: u64,
    period: AtomicU64,
    jitter: AtomicU64,
    /// The measured costs (0 until measured), for a forked child to reuse.
    sample_ns: AtomicU64,
    floor_ns: AtomicU64,
}

/// The live agent (null before start or when disabled). Handlers load it with Acquire:
/// the Agent was fully built before the Release store that published it.
static AGENT: AtomicPtr<Agent> = AtomicPtr::new(std::ptr::null_mut());
/// New threads get sampling set up.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// The pthread key whose destructor closes a thread's events at thread exit.
static KEY: AtomicU64 = AtomicU64::new(u64::MAX);

/// The live agent.
#[inline]
pub(crate) fn agent() -> Option<&'static Agent> {
    let p = AGENT.load(Ordering::Acquire);
    // SAFETY: AGENT only ever holds null or a leaked Box<Agent> that is never freed.
    unsafe { p.as_ref() }
}

/// The live agent, if the calling process is the one it records (not a `vfork` child
/// borrowing our memory).
fn own_agent() -> Option<&'static Agent> {
    // SAFETY: getpid has no preconditions.
    agent().filter(|a| a.pid == unsafe { libc::getpid() })
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = agent_init;

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = agent_fini;

extern "C" fn agent_init() {
    // First, on every load: it also resolves libc's sigaction up front.
    if watch::configured() {
        watch::start();
    }
    let cfg = match config::from_env() {
        Ok(Some(c)) => c,
        Ok(None) => return, // not launched by strobe record: stay inert
        Err(msg) => {
            if let Some(out) = std::env::var_os(config::ENV_OUTPUT) {
                note_to_path(&out, &format!("strobe agent: bad configuration: {msg}"));
            }
            return;
        }
    };
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let origin =
        match std::env::var(config::ENV_AGENT_PID).ok().and_then(|p| p.parse::<libc::pid_t>().ok())
        {
            None => ProcessOrigin::Start,
            Some(p) if p == pid => ProcessOrigin::Exec,
            Some(_) if cfg.follow_fork => ProcessOrigin::Exec,
            Some(_) => return, // a non-followed child's new image
        };
    // The constructor runs before main, single-threaded: setenv is safe here.
    std::env::set_var(config::ENV_AGENT_PID, pid.to_string());
    // SAFETY: registering plain extern "C" fns; they run in fork's context.
    unsafe { libc::pthread_atfork(Some(atfork_prepare), Some(atfork_parent), Some(atfork_child)) };
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is a valid out-pointer; the destructor is a plain extern "C" fn.
    if unsafe { libc::pthread_key_create(&mut key, Some(thread_exit)) } == 0 {
        KEY.store(u64::from(key), Ordering::Relaxed);
    }
    if let Err(e) = sampler::install_handler() {
        note_to_path(
            &cfg.output,
            &format!("strobe agent: cannot install the SIGTRAP handler: {e}"),
        );
        return;
    }
    start(cfg, origin, inherited_costs());
}

/// Costs measured by an earlier image of this recording (exec keeps the environment), so
/// an exec'd image does not pay the calibration again: `sample_ns,floor_ns,leader_per_ns`.
fn inherited_costs() -> Option<sampler::Costs> {
    let v = std::env::var(config::ENV_COSTS).ok()?;
    let mut it = v.split(',');
    let sample_ns = it.next()?.parse().ok()?;
    let floor_ns = it.next()?.parse().ok()?;
    let leader_per_ns = it.next()?.parse().ok()?;
    Some(sampler::Costs { sample_ns, floor_ns, leader_per_ns })
}

/// Starts a stream: opens the file, calibrates (unless `known` costs are given: a forked
/// child or an exec'd image reuses its parent's), writes PROCESS and MAPS, starts the
/// writer and sets up the calling thread.
fn start(cfg: Config, origin: ProcessOrigin, known: Option<sampler::Costs>) {
    let Ok(path) =
        std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(cfg.output.as_os_str()))
    else {
        return;
    };
    // SAFETY: a NUL-terminated path; plain flags.
    let out_fd =
        unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_APPEND | libc::O_CLOEXEC) };
    if out_fd < 0 {
        return; // nowhere to say anything; the recorder notices the missing stream
    }
    // SAFETY: plain flags.
    let event_fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    let mut stream = 0u32;
    while stream == 0 {
        // SAFETY: fills 4 bytes of a live local.
        unsafe { libc::getrandom((&mut stream as *mut u32).cast(), 4, 0) };
        if stream == 0 {
            stream = sampler::mono_ns() as u32 | 1;
        }
    }
    let leader_is_time = cfg.spec.leader().is_time;
    let window = cfg.spec.window_or_default();
    let ncounters = cfg.spec.events.len();
    let a = Box::new(Agent {
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() },
        out_fd,
        event_fd,
        stream,
        stride: RECORD_HEAD + ncounters,
        capacity: cfg.capacity,
        wakeup: cfg.wakeup,
        window,
        // Long enough that it never fires while calibrating.
        period: AtomicU64::new(if leader_is_time { 1_000_000_000 } else { 1 << 40 }),
        jitter: AtomicU64::new(0),
        sample_ns: AtomicU64::new(0),
        floor_ns: AtomicU64::new(0),
        cfg,
    });
    let a: &'static Agent = Box::leak(a);
    if event_fd < 0 {
        writer::note(a, NoteLevel::Error, "strobe agent: eventfd failed; not profiling".into());
        return;
    }
    AGENT.store(a as *const Agent as *mut Agent, Ordering::Release);

    // Measure our own cost, then derive the period from the budget.
    let costs = match known {
        Some(c) => Some(c),
        None => {
            let c = sampler::calibrate(a);
            if let (Some(c), ProcessOrigin::Start | ProcessOrigin::Exec) = (&c, origin) {
                // Still single-threaded (the constructor, before the writer starts):
                // setenv is safe here. A forked child never gets here (it inherits).
                std::env::set_var(
                    config::ENV_COSTS,
                    format!("{},{},{}", c.sample_ns, c.floor_ns, c.leader_per_ns),
                );
            }
            c
        }
    };
    let (sample_ns, floor_ns, per_ns) =
        costs.as_ref().map_or((0, 0, 1.0), |c| (c.sample_ns, c.floor_ns, c.leader_per_ns));
    let spec = &a.cfg.spec;
    let per_ns = if leader_is_time { 1.0 } else { per_ns.max(1e-3) };
    let samples_per_cycle = if window > 0 { 2.0 } else { 1.0 };
    let budget = a.cfg.overhead_ppm as f64 / 1e6;
    let window_ns = window as f64 / per_ns;
    // What one sample costs the target: the calibrated handler path plus what the
    // calibration cannot see (cache/TLB refill, group switches; see
    // `sampler::INDIRECT_COST_FACTOR` for where the factor comes from). The period choice
    // and the explicit-period warning charge the same figure.
    let charged_ns = sample_ns as f64 * sampler::INDIRECT_COST_FACTOR;
    let (period, jitter, source) = match spec.period {
        Some(p) => (p, spec.jitter.unwrap_or(0), PeriodSource::Explicit),
        None => {
            // Mean cycle (long period + jitter/2 + window) = samples * cost / budget; the
            // default jitter is a tenth of the period.
            let cycle_ns = samples_per_cycle * charged_ns.max(1.0) / budget;
            let long_ns = (cycle_ns - window_ns).max(4.0 * window_ns).max(200_000.0);
            let jitter_frac = if spec.jitter.is_some() { 0.0 } else { 0.1 };
            let base_ns = long_ns / (1.0 + jitter_frac / 2.0);
            let base = (base_ns * per_ns).round().max(1.0) as u64;
            (base, spec.jitter.unwrap_or((base as f64 * jitter_frac) as u64), PeriodSource::Budget)
        }
    };
    let cycle_ns = (period as f64 + jitter as f64 / 2.0) / per_ns + window_ns;
    let predicted_ppm = (samples_per_cycle * charged_ns / cycle_ns.max(1.0) * 1e6) as u64;
    a.period.store(period, Ordering::Relaxed);
    a.jitter.store(jitter, Ordering::Relaxed);
    a.sample_ns.store(sample_ns, Ordering::Relaxed);
    a.floor_ns.store(floor_ns, Ordering::Relaxed);

    // SAFETY: getpid/getppid have no preconditions.
    let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
    let info = ProcessInfo {
        pid: pid as u32,
        ppid: ppid as u32,
        origin,
        exe: std::fs::read_link("/proc/self/exe").unwrap_or_default(),
        start_mono_ns: sampler::mono_ns(),
        period,
        window,
        jitter,
        period_source: source,
        sample_cost_ns: sample_ns,
        floor_cost_ns: floor_ns,
        predicted_overhead_ppm: predicted_ppm,
    };
    let mut e = Encoder::new();
    e.process(stream, &info);
    writer::first_maps(a, &mut e);
    if costs.is_none() {
        e.note(
            stream,
            &strobe_format::Note {
                level: NoteLevel::Warning,
                message:
                    "strobe agent: could not measure the per-sample cost; the period is a guess"
                        .into(),
            },
        );
    }
    if source == PeriodSource::Explicit && predicted_ppm > a.cfg.overhead_ppm {
        e.note(
            stream,
            &strobe_format::Note {
                level: NoteLevel::Warning,
                message: format!(
                    "period={period} with window={window} predicts a {:.1}% slowdown ({:.0} us per sample: {:.1} us measured at start, x{} for cache refill and context switches), above the {:.1}% overhead budget; drop period= to let strobe pick one",
                    predicted_ppm as f64 / 1e4,
                    charged_ns / 1e3,
                    sample_ns as f64 / 1e3,
                    sampler::INDIRECT_COST_FACTOR,
                    a.cfg.overhead_ppm as f64 / 1e4
                ),
            },
        );
    }
    writer::write_all(out_fd, e.as_bytes());

    // The writer: created with every signal blocked (it inherits the mask), through the
    // real pthread_create so it gets no perf event.
    if !spawn_writer() {
        writer::note(
            a,
            NoteLevel::Error,
            "strobe agent: cannot start the writer thread; not profiling".into(),
        );
        AGENT.store(std::ptr::null_mut(), Ordering::Release);
        return;
    }
    ENABLED.store(true, Ordering::Release);
    setup_thread(a);
}

fn spawn_writer() -> bool {
    let Some(create) = real_pthread_create() else { return false };
    // SAFETY: plain signal-mask manipulation around the create; the writer inherits the
    // full mask, this thread gets its old mask back.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let mut t: libc::pthread_t = 0;
        let rc = create(&mut t, std::ptr::null(), writer::writer_main, std::ptr::null_mut());
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        if rc == 0 {
            libc::pthread_detach(t);
        }
        rc == 0
    }
}

/// Sets up sampling for the calling thread (a new thread, before its start routine).
fn setup_thread(a: &Agent) {
    match sampler::open_slot(a, a.period.load(Ordering::Relaxed)) {
        Ok(idx) => {
            let key = KEY.load(Ordering::Relaxed);
            if key != u64::MAX {
                // SAFETY: a key created at start; the value is a non-null marker (idx + 1)
                // so the destructor runs at thread exit.
                unsafe {
                    libc::pthread_setspecific(
                        key as libc::pthread_key_t,
                        (idx + 1) as *const libc::c_void,
                    )
                };
            }
            sampler::arm(idx);
        }
        Err(sampler::SetupError::NoSlot) => {
            static WARNED: AtomicBool = AtomicBool::new(false);
            if !WARNED.swap(true, Ordering::Relaxed) {
                writer::note(
                    a,
                    NoteLevel::Warning,
                    format!(
                        "more than {} threads alive at once: later threads are not profiled",
                        slots::MAX_SLOTS
                    ),
                );
            }
        }
        Err(sampler::SetupError::Open(e)) => {
            static WARNED: AtomicBool = AtomicBool::new(false);
            if !WARNED.swap(true, Ordering::Relaxed) {
                writer::note(
                    a,
                    NoteLevel::Error,
                    format!("strobe agent: cannot open the event group: {e}"),
                );
            }
        }
    }
}

/// pthread key destructor: the thread is exiting.
extern "C" fn thread_exit(value: *mut libc::c_void) {
    let idx = (value as usize).wrapping_sub(1);
    sampler::close_slot(idx, false);
    if let Some(a) = agent() {
        sampler::wake(a.event_fd);
    }
}

extern "C" fn agent_fini() {
    let Some(a) = own_agent() else { return };
    sampler::STOPPING.store(true, Ordering::SeqCst);
    ENABLED.store(false, Ordering::Relaxed);
    writer::finish(a, EndReason::Exit);
}

fn note_to_path(path: &std::ffi::OsStr, msg: &str) {
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(path) {
        let mut e = Encoder::new();
        e.note(
            0x5707_0001,
            &strobe_format::Note { level: NoteLevel::Error, message: msg.to_string() },
        );
        let _ = std::io::Write::write_all(&mut f, e.as_bytes());
    }
}

// ---------------------------------------------------------------------------------
// Interposed functions.

type PthreadCreate = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
    *mut libc::c_void,
) -> libc::c_int;

fn real_pthread_create() -> Option<PthreadCreate> {
    static REAL: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());
    let mut p = REAL.load(Ordering::Relaxed);
    if p.is_null() {
        // SAFETY: dlsym with a NUL-terminated name; RTLD_NEXT finds libc's definition.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, c"pthread_create".as_ptr()) };
        REAL.store(p, Ordering::Relaxed);
    }
    // SAFETY: libc's pthread_create has this signature.
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, PthreadCreate>(p) })
}

struct Start {
    routine: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
    arg: *mut libc::c_void,
    /// strobe watch --thread: the thread arms its watchpoints first.
    watch: bool,
}

extern "C" fn trampoline(p: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `p` is the Box<Start> leaked by our pthread_create, consumed once here.
    let s = unsafe { Box::from_raw(p.cast::<Start>()) };
    watch::on_thread_start(s.watch);
    if ENABLED.load(Ordering::Acquire) {
        if let Some(a) = agent() {
            setup_thread(a);
        }
    }
    (s.routine)(s.arg)
}

/// Interposes `pthread_create`: the new thread sets up its perf group before running the
/// caller's start routine.
///
/// # Safety
/// Same contract as libc's `pthread_create`.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    routine: extern "C" fn(*mut libc::c_void) -> *mut libc::c_void,
    arg: *mut libc::c_void,
) -> libc::c_int {
    let Some(real) = real_pthread_create() else { return libc::EAGAIN };
    let watch = watch::thread_coming();
    if !ENABLED.load(Ordering::Acquire) && !watch {
        // SAFETY: forwarding the caller's arguments unchanged.
        return unsafe { real(thread, attr, routine, arg) };
    }
    let start = Box::into_raw(Box::new(Start { routine, arg, watch }));
    // SAFETY: forwarding the caller's thread/attr; our trampoline consumes `start`.
    let rc = unsafe { real(thread, attr, trampoline, start.cast()) };
    if rc != 0 {
        // SAFETY: the thread was not created, so `start` is still ours.
        drop(unsafe { Box::from_raw(start) });
        watch::thread_not_coming(watch);
    }
    rc
}

extern "C" fn atfork_prepare() {
    writer::lock();
}

extern "C" fn atfork_parent() {
    writer::unlock();
}

extern "C" fn atfork_child() {
    // Only the forking thread exists here. The parent's events are the parent's: close our
    // copies of their fds and forget the parent's rings (the parent writes them).
    ENABLED.store(false, Ordering::Relaxed);
    let high = slots::HIGH_WATER.load(Ordering::Relaxed) as usize;
    for slot in slots::SLOTS.iter().take(high) {
        if slot.ctl.state() != strobe_sampler::slot::FREE {
            slot.ctl.mark_closing();
            let g = slot.group.swap(std::ptr::null_mut(), Ordering::Relaxed);
            if !g.is_null() {
                // SAFETY: from Box::into_raw in open_slot; swapped out, dropped once. This
                // closes the child's copies of the fds only.
                drop(unsafe { Box::from_raw(g) });
            }
            slot.leader_fd.store(-1, Ordering::Relaxed);
            // FREE: the ring (our private copy of the parent's) is emptied by the next
            // claimer's `prepare`; the parent writes its own records.
            slot.ctl.finish_close(true);
        }
    }
    writer::reset_in_child();
    writer::unlock();
    let old = AGENT.swap(std::ptr::null_mut(), Ordering::AcqRel);
    // SAFETY: as in `agent()`; the old agent is leaked, never freed.
    let Some(old) = (unsafe { old.as_ref() }) else { return };
    // SAFETY: closing the child's copies of the parent's fds.
    unsafe {
        libc::close(old.event_fd);
    }
    if old.cfg.follow_fork {
        let cfg = old.cfg.clone();
        // SAFETY: closing our copy; `start` opens the file again.
        unsafe { libc::close(old.out_fd) };
        let costs = sampler::Costs {
            sample_ns: old.sample_ns.load(Ordering::Relaxed),
            floor_ns: old.floor_ns.load(Ordering::Relaxed),
            leader_per_ns: 1.0,
        };
        start(cfg, ProcessOrigin::Fork, (costs.sample_ns > 0).then_some(costs));
    } else {
        // SAFETY: closing the child's copy of the output fd: the child writes nothing.
        unsafe { libc::close(old.out_fd) };
    }
}

/// The calling thread's slot index, if it samples.
fn own_slot() -> Option<usize> {
    let key = KEY.load(Ordering::Relaxed);
    if key == u64::MAX {
        return None;
    }
    // SAFETY: a key created at start.
    let v = unsafe { libc::pthread_getspecific(key as libc::pthread_key_t) } as usize;
    v.checked_sub(1)
}

/// Before the process image is replaced: stop this thread's sampling (an overflow during
/// execve would raise a SIGTRAP that the new image receives before it has a handler, and
/// dies of), then drain and write END (reason Exec). Other threads' pending signals die
/// with them in execve. Returns the slot to re-arm if exec fails.
fn before_exec() -> Option<usize> {
    // A vfork child execs on our memory: its thread has no events of its own, and the
    // recording and the events it could reach are the parent's. Touch nothing.
    let a = own_agent()?;
    let idx = own_slot();
    if let Some(slot) = idx.and_then(|i| slots::SLOTS.get(i)) {
        let fd = slot.leader_fd.load(Ordering::Relaxed);
        // SAFETY: DISABLE takes an integer; `fd` is this thread's live leader. Once the
        // ioctl returns, any overflow before it has been delivered to our handler.
        unsafe { libc::ioctl(fd, strobe_perf::sys::ioctl::DISABLE, 0) };
    }
    writer::finish(a, EndReason::Exec);
    idx
}

/// exec failed: the process goes on, and so does this thread's sampling.
fn after_failed_exec(idx: Option<usize>) {
    if let Some(i) = idx {
        sampler::arm(i);
    }
}

macro_rules! wrap_exec {
    ($name:ident, $cname:expr, ($($arg:ident: $ty:ty),*)) => {
        /// Interposed: drains the recording, then calls libc's function.
        ///
        /// # Safety
        /// Same contract as libc's function of this name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> libc::c_int {
            type F = unsafe extern "C" fn($($ty),*) -> libc::c_int;
            static REAL: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());
            let mut p = REAL.load(Ordering::Relaxed);
            if p.is_null() {
                // SAFETY: dlsym with a NUL-terminated name.
                p = unsafe { libc::dlsym(libc::RTLD_NEXT, $cname.as_ptr()) };
                REAL.store(p, Ordering::Relaxed);
            }
            if p.is_null() {
                // SAFETY: errno is thread-local.
                unsafe { *libc::__errno_location() = libc::ENOSYS };
                return -1;
            }
            let idx = before_exec();
            // SAFETY: libc's function has this signature; arguments forwarded unchanged.
            let rc = unsafe { std::mem::transmute::<*mut libc::c_void, F>(p)($($arg),*) };
            // SAFETY: errno is thread-local; kept across our re-arm.
            let errno = unsafe { *libc::__errno_location() };
            after_failed_exec(idx);
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = errno };
            rc
        }
    };
}

/// Interposes `sigaction`: for SIGTRAP, once the agent's sampling (or watch) handler is installed, the target
/// sees and sets a virtual disposition that the agent's handler chains to for every
/// SIGTRAP that is not a perf sample; other signals go to libc unchanged.
///
/// # Safety
/// Same contract as libc's `sigaction`.
#[no_mangle]
pub unsafe extern "C" fn sigaction(
    sig: libc::c_int,
    act: *const libc::sigaction,
    old: *mut libc::sigaction,
) -> libc::c_int {
    if let Some(rc) = sampler::virtual_sigaction(sig, act, old) {
        return rc;
    }
    // SAFETY: forwarded with the caller's pointers, under sigaction's own contract.
    if let Some(rc) = unsafe { watch::virtual_sigaction(sig, act, old) } {
        return rc;
    }
    type F = unsafe extern "C" fn(
        libc::c_int,
        *const libc::sigaction,
        *mut libc::sigaction,
    ) -> libc::c_int;
    static REAL: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());
    let mut p = REAL.load(Ordering::Relaxed);
    if p.is_null() {
        // SAFETY: dlsym with a NUL-terminated name.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, c"sigaction".as_ptr()) };
        REAL.store(p, Ordering::Relaxed);
    }
    if p.is_null() {
        // SAFETY: errno is thread-local.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    }
    // SAFETY: libc's sigaction has this signature; arguments forwarded unchanged.
    unsafe { std::mem::transmute::<*mut libc::c_void, F>(p)(sig, act, old) }
}

/// Interposes `signal`, as `sigaction` (SIGTRAP virtual, the rest unchanged).
///
/// # Safety
/// Same contract as libc's `signal`.
#[no_mangle]
pub unsafe extern "C" fn signal(
    sig: libc::c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    if let Some(old) = sampler::virtual_signal(sig, handler) {
        return old;
    }
    if let Some(old) = watch::virtual_signal(sig, handler) {
        return old;
    }
    type F = unsafe extern "C" fn(libc::c_int, libc::sighandler_t) -> libc::sighandler_t;
    static REAL: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());
    let mut p = REAL.load(Ordering::Relaxed);
    if p.is_null() {
        // SAFETY: dlsym with a NUL-terminated name.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, c"signal".as_ptr()) };
        REAL.store(p, Ordering::Relaxed);
    }
    if p.is_null() {
        return libc::SIG_ERR;
    }
    // SAFETY: libc's signal has this signature; arguments forwarded unchanged.
    unsafe { std::mem::transmute::<*mut libc::c_void, F>(p)(sig, handler) }
}

/// Interposes `_exit` (which skips the destructors, and which shells such as dash use to
/// end): drains the recording and writes END first, when called by the recorded process.
#[no_mangle]
pub extern "C" fn _exit(status: libc::c_int) -> ! {
    if let Some(a) = own_agent() {
        sampler::STOPPING.store(true, Ordering::SeqCst);
        ENABLED.store(false, Ordering::Relaxed);
        writer::finish(a, EndReason::Exit);
    }
    loop {
        // SAFETY: exit_group ends the process; it takes a plain status and never returns.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// Interposes `_Exit` (C99's name for `_exit`), as `_exit`.
#[no_mangle]
pub extern "C" fn _Exit(status: libc::c_int) -> ! {
    _exit(status)
}

type CStrPtr = *const libc::c_char;
type CStrArr = *const *const libc::c_char;
wrap_exec!(execve, c"execve", (path: CStrPtr, argv: CStrArr, envp: CStrArr));
wrap_exec!(execv, c"execv", (path: CStrPtr, argv: CStrArr));
wrap_exec!(execvp, c"execvp", (file: CStrPtr, argv: CStrArr));
wrap_exec!(execvpe, c"execvpe", (file: CStrPtr, argv: CStrArr, envp: CStrArr));

/// The variadic `execl`, `execlp` and `execle`: exported here as naked functions that
/// jump, with every register and the stack untouched (so the variadic arguments stay
/// where the caller put them), to their C implementations in src/execl.c, which call the
/// array forms above. (A C definition alone would not be exported: a cdylib exports only
/// the symbols Rust defines.)
mod variadic_exec {
    extern "C" {
        fn strobe_execl();
        fn strobe_execlp();
        fn strobe_execle();
    }

    macro_rules! jump_to {
        ($name:ident, $target:ident) => {
            /// Interposed variadic exec: see the module note.
            #[unsafe(naked)]
            #[no_mangle]
            pub extern "C" fn $name() {
                #[cfg(target_arch = "x86_64")]
                core::arch::naked_asm!("jmp {f}@PLT", f = sym $target);
                #[cfg(target_arch = "aarch64")]
                core::arch::naked_asm!("b {f}", f = sym $target);
            }
        };
    }
    jump_to!(execl, strobe_execl);
    jump_to!(execlp, strobe_execlp);
    jump_to!(execle, strobe_execle);
}
