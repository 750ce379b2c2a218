//! libstrobe_agent.so: the in-process capture agent that `strobe record` and `strobe watch`
//! inject into a target with LD_PRELOAD. Watchpoints live in `watch`; everything else
//! here serves recording.
//!
//! It owns: attaching to the recording's arena (`session`), following the target's
//! threads (its `pthread_create` wraps the start routine so each new thread opens its own
//! perf group before running user code), sampling (`sampler`: one-shot armed
//! task-clock/cycles leader, synchronous SIGTRAP per thread, period alternation, a stack
//! walk, the sample appended to the thread's block in the arena), the chunks a process
//! writes itself (`chunks`: PROCESS, MAPS, NOTE), and the calibration a separate process
//! runs before the target (`calibrate`). It must never allocate, lock or panic in a
//! signal handler, never change the target's output or exit status, never unwind into
//! the target's frames (this crate builds with `panic = "abort"`; nothing here panics on
//! purpose: errors become NOTE chunks), and never start a thread in the target.
//!
//! # Custody: samples leave the target as they are taken
//!
//! The handler writes each sample into shared memory that `strobe record` created and
//! drains (the arena's block pool, crate strobe-sampler's `custody`). Nothing waits in
//! the target: a target killed by SIGKILL, `abort()` or SIGSEGV loses no sample it took,
//! and there is no writer thread. Samples that find no free block are counted in the
//! thread's slot, exactly.
//!
//! # Processes
//!
//! - Start: the command `strobe record` launched (no `STROBE_AGENT_PID` in the
//!   environment). The agent sets `STROBE_AGENT_PID` to its pid, claims an entry in the
//!   arena's process table and writes its PROCESS and MAPS chunks.
//! - fork: a `pthread_atfork` child handler closes the child's copies of the parent's
//!   events and stops sampling there (the arena is shared with the parent, whose slots it
//!   leaves alone); with `--follow-fork` it starts a new stream. Children made with
//!   `vfork`/`posix_spawn` run no fork handlers; they exec at once (see next point).
//! - exec: events are opened with `remove_on_exec` and close-on-exec fds; before
//!   `execve`/`execv`/`execvp`/`execvpe`/`execl*`/`fexecve`/`execveat` the agent disables
//!   the calling thread's leader (and its handler, should an overflow arrive during that,
//!   leaves it stopped), writes the mappings and marks its process entry Execed.
//!   The new image loads the agent again through LD_PRELOAD; if its pid equals
//!   `STROBE_AGENT_PID` it is the same process and starts a new stream with origin Exec;
//!   otherwise it is a forked child's new image. A raw `execve` system call (not through
//!   libc) passes no wrapper: an overflow of the thread's timer inside that call raises a
//!   SIGTRAP the kernel delivers to the new image, which it ends (4 of 10 runs at a
//!   500 us period; the chance is the call's length over the period). A documented limit.
//! - exit: a `.fini_array` destructor (and the interposed `_exit`/`_Exit`, which skip
//!   destructors) stops sampling and marks the process entry Exited. A process killed by a
//!   signal does neither; the recorder notices it is gone and drains its threads' blocks.
//! - A `vfork` child shares our memory but not our pid: every path that writes the
//!   recording checks the pid first and leaves it to the parent.
//!
//! # Known limits
//!
//! - Threads made with raw `clone` (not `pthread_create`) are not profiled; the recorder
//!   says so when a process took CPU time its profiled threads do not account for.
//! - Tracers: an image traced from its start (`strace -f`, a debugger that ran it) leaves
//!   the agent off, so the tracer sees no signal of ours; one that attaches later (`gdb
//!   -p`, `strace -p`) sees each sample's SIGTRAP.
//! - Seccomp: before a program installs a filter through libc (`prctl`, `syscall`) the
//!   agent stops in the process, and an image that starts under a filter the recorder
//!   does not have leaves it off (`sandbox`); the kernel floor samples both. A filter
//!   installed by a raw system call passes no wrapper: one that forbids the agent's calls
//!   then breaks the program as it would under any in-process sampler.
//! - SIGTRAP: `sigaction` and `signal` are interposed so that a target installing its own
//!   SIGTRAP handler gets a virtual disposition that our handler chains to for every
//!   SIGTRAP that is not a sample (raw `rt_sigaction` system calls bypass this).
//!
//! Not a limit on recent kernels (this machine's 6.18): sampling does not make a blocking
//! call (nanosleep, poll, select) return EINTR. perf raises the `sigtrap` signal from task
//! work on the thread's way back to user space, not while it waits in the kernel (test
//! `sampling_never_cuts_a_blocking_call_short`). The handler uses SA_RESTART, which covers
//! the other calls.

// clippy.toml's bans (panics, printing, threads, locks) are for the code that runs in
// targets; the unit tests run in the test harness.
#![cfg_attr(
    test,
    allow(clippy::disallowed_macros, clippy::disallowed_methods, clippy::disallowed_types)
)]

mod altstack;
mod calibrate;
mod chunks;
mod clock;
mod fds;
mod hidden_env;
mod sampler;
mod sandbox;
mod session;
mod sigmask;
mod signal;
mod slots;
mod stack;
mod watch;

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU64, Ordering};

use strobe_format::{Encoder, NoteLevel, PeriodSource, ProcessInfo, ProcessOrigin};
use strobe_perf::spec::GroupSpec;
use strobe_protocol::{Arena, CallGraph, ProcEntry, ProcState, RecordConfig};

/// One agent instance (a process's stream) and the parameters its handlers read.
pub struct Agent {
    cfg: RecordConfig,
    spec: GroupSpec,
    /// The process this agent records. A `vfork` child shares our memory but not our pid:
    /// it must not touch the recording.
    pid: libc::pid_t,
    stream: u32,
    /// This process's entry in the arena's process table.
    proc_index: Option<usize>,
    window: u64,
    /// The shortest period the kernel honours for the leader.
    min_period: u64,
    call_graph: CallGraph,
    max_depth: u32,
    period: AtomicU64,
    jitter: AtomicU64,
    /// The measured costs (0 until measured), for a forked child to reuse.
    sample_ns: AtomicU64,
    floor_ns: AtomicU64,
}

impl Agent {
    /// This process's entry in the arena's process table.
    fn proc_entry(&self) -> Option<&'static ProcEntry> {
        arena()?.procs().get(self.proc_index?)
    }
}

/// The live agent (null before start or when disabled). Handlers load it with Acquire:
/// the Agent was fully built before the Release store that published it.
static AGENT: AtomicPtr<Agent> = AtomicPtr::new(std::ptr::null_mut());
/// The recording's arena (null when not recording). Set once per image, before AGENT.
static ARENA: AtomicPtr<Arena> = AtomicPtr::new(std::ptr::null_mut());
/// New threads get sampling set up.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// The pthread key whose destructor closes a thread's events at thread exit.
static KEY: AtomicU64 = AtomicU64::new(u64::MAX);
/// The record file, opened for appending, in the agent's descriptor band (-1: none).
pub(crate) static OUT_FD: AtomicI32 = AtomicI32::new(-1);

/// The record file's descriptor.
#[inline]
pub(crate) fn out_fd() -> libc::c_int {
    // Relaxed: set before the agent is published; `dup2` onto it may move it (`fds`).
    OUT_FD.load(Ordering::Relaxed)
}

/// The next definition of symbol `name` after ours (libc's), found once and cached in
/// `cache`; null when there is none.
pub(crate) fn next_symbol(
    cache: &AtomicPtr<libc::c_void>,
    name: &std::ffi::CStr,
) -> *mut libc::c_void {
    let mut p = cache.load(Ordering::Relaxed);
    if p.is_null() {
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        cache.store(p, Ordering::Relaxed);
    }
    p
}

/// The live agent.
#[inline]
pub(crate) fn agent() -> Option<&'static Agent> {
    let p = AGENT.load(Ordering::Acquire);
    // SAFETY: AGENT only ever holds null or a leaked Box<Agent> that is never freed.
    unsafe { p.as_ref() }
}

/// The recording's arena.
#[inline]
pub(crate) fn arena() -> Option<&'static Arena> {
    let p = ARENA.load(Ordering::Acquire);
    // SAFETY: ARENA only ever holds null or a leaked Box<Arena> that is never freed (its
    // mapping lives as long as the image).
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
    let cpu_from = sampler::thread_cpu_ns();
    // Before anything: the search path the linker read at start.
    stack::remember_library_path();
    // First, on every load: it also resolves libc's sigaction up front.
    if watch::configured() {
        watch::start();
    }
    if session::is_go_image() {
        return; // Go's runtime owns every signal: the kernel floor samples Go images
    }
    let Some((arena, cfg)) = session::attach() else { return };
    // The loader's own calls (open, read, close) brought the agent in: reading the status
    // file makes no call a sandbox that let it in forbids.
    let status = strobe_protocol::status::Status::of_this_thread();
    if sandbox::filtered_at_start(&arena, &status, cfg.seccomp_filters)
        || traced(&arena, &status)
        || in_other_pid_namespace(&arena, cfg.pid_ns)
    {
        if !cfg.calibrate {
            hidden_env::hide();
        }
        return;
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let origin = match session::previous_agent_pid() {
        None => ProcessOrigin::Start,
        Some(p) if p == pid => ProcessOrigin::Exec,
        Some(_) if cfg.follow_fork => ProcessOrigin::Exec,
        Some(_) => return, // a non-followed child's new image
    };
    ARENA.store(Box::into_raw(Box::new(arena)), Ordering::Release);
    // The constructor runs before main, single-threaded: setenv is safe here.
    session::set_agent_pid(pid);
    if !cfg.calibrate {
        // Out of the program's sight from here on; the images it starts get them back.
        hidden_env::hide();
    }
    // SAFETY: registering plain extern "C" fns; they run in fork's context.
    unsafe { libc::pthread_atfork(Some(atfork_prepare), Some(atfork_parent), Some(atfork_child)) };
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: `key` is a valid out-pointer; the destructor is a plain extern "C" fn.
    if unsafe { libc::pthread_key_create(&mut key, Some(thread_exit)) } == 0 {
        KEY.store(u64::from(key), Ordering::Relaxed);
    }
    sigmask::resolve();
    if let Err(e) = signal::install_handler() {
        session::note_to_path(
            &cfg.output,
            &format!("strobe agent: cannot install the SIGTRAP handler: {e}"),
        );
        return;
    }
    start(cfg, origin, cpu_from);
}

/// Whether this image is traced from its start (`strace -f`, a debugger that ran it): the
/// tracer would see every sample's SIGTRAP (strace prints each one, a debugger stops at
/// each), so the agent stays off in it, says so through the arena, and the kernel floor
/// samples it. A tracer that attaches later (`gdb -p`) is not seen: a documented limit.
fn traced(ar: &Arena, status: &strobe_protocol::status::Status) -> bool {
    if status.tracer_pid == 0 {
        return false;
    }
    ar.push_note(&format!(
        "pid {} ({}) is traced by pid {}: the agent stays off in it, so that the tracer does \
         not see its signals; the kernel floor samples it, without window metrics",
        // SAFETY: getpid has no preconditions.
        unsafe { libc::getpid() },
        status.name,
        status.tracer_pid,
    ));
    true
}

/// Whether this process lives in a PID namespace other than `strobe record`'s
/// (`recorder`'s inode; 0: unknown): its pids (1 for the namespace's first process) are
/// not the kernel floor's, and would be matched with other processes. The agent stays off
/// in it, says so through the arena, and the floor, which reports every pid in the
/// recorder's namespace, samples it.
fn in_other_pid_namespace(ar: &Arena, recorder: u64) -> bool {
    let ours = strobe_protocol::status::pid_namespace();
    if recorder == 0 || ours == 0 || ours == recorder {
        return false;
    }
    ar.push_note(&format!(
        "a process ({}, pid {} in its namespace) runs in a PID namespace other than strobe \
         record's: the agent stays off in it, so that its pids are not confused with \
         others'; the kernel floor samples it, without window metrics",
        strobe_protocol::status::Status::of_this_thread().name,
        // SAFETY: getpid has no preconditions.
        unsafe { libc::getpid() },
    ));
    true
}

/// Starts a stream: opens the file, takes the costs (or measures them), derives the
/// period, claims a process entry, writes PROCESS and MAPS, and sets up the calling
/// thread. In calibration mode it runs the calibration instead and records nothing.
fn start(cfg: RecordConfig, origin: ProcessOrigin, cpu_from: u64) {
    let spec = match strobe_perf::spec::parse(&cfg.events, cfg.hardware) {
        Ok(s) => s,
        Err(e) => {
            session::note_to_path(&cfg.output, &format!("strobe agent: bad event group: {e}"));
            return;
        }
    };
    let out_fd = if cfg.calibrate {
        -1
    } else {
        let fd = session::open_output(&cfg.output);
        if fd < 0 {
            return; // nowhere to say anything; the recorder notices the missing stream
        }
        // Out of the program's way (a full band leaves it where it was opened).
        fds::take(1);
        fds::place(fd).unwrap_or(-1)
    };
    if out_fd < 0 && !cfg.calibrate {
        return;
    }
    OUT_FD.store(out_fd, Ordering::Relaxed);
    let stream = session::new_stream_id();
    let leader_is_time = spec.leader().is_time;
    let window = spec.window_or_default();
    let a = Box::new(Agent {
        // SAFETY: getpid has no preconditions.
        pid: unsafe { libc::getpid() },
        stream,
        proc_index: None,
        window,
        min_period: if leader_is_time { strobe_perf::spec::MIN_TIMER_PERIOD_NS } else { 1 },
        call_graph: cfg.call_graph,
        max_depth: cfg.max_depth,
        // Long enough that it never fires while calibrating.
        period: AtomicU64::new(if leader_is_time { 1_000_000_000 } else { 1 << 40 }),
        jitter: AtomicU64::new(0),
        sample_ns: AtomicU64::new(0),
        floor_ns: AtomicU64::new(0),
        spec,
        cfg,
    });
    let a: &'static mut Agent = Box::leak(a);
    AGENT.store(a as *mut Agent, Ordering::Release);
    // A forked child keeps the table its parent built (`stack::after_fork_in_child`).
    stack::init(a.call_graph);
    if a.cfg.calibrate {
        calibrate::run(a);
        AGENT.store(std::ptr::null_mut(), Ordering::Release);
        return;
    }
    let known = a.cfg.costs;
    let costs = known.or_else(|| calibrate::costs(a));
    let (sample_ns, floor_ns) = costs.as_ref().map_or((0, 0), |c| (c.sample_ns, c.floor_ns));
    let spec = &a.spec;
    // The same choice the recorder made for the kernel floor's period (same inputs).
    let choice = strobe_protocol::budget::choose(&strobe_protocol::budget::Budget {
        period: spec.period,
        jitter: spec.jitter,
        window,
        leader_is_time,
        costs,
        overhead_ppm: a.cfg.overhead_ppm,
    });
    let (period, jitter) = (choice.period, choice.jitter);
    let source = if choice.explicit { PeriodSource::Explicit } else { PeriodSource::Budget };
    let (charged_ns, predicted_ppm) = (choice.charged_ns, choice.predicted_ppm);
    a.period.store(period, Ordering::Relaxed);
    a.jitter.store(jitter, Ordering::Relaxed);
    a.sample_ns.store(sample_ns, Ordering::Relaxed);
    a.floor_ns.store(floor_ns, Ordering::Relaxed);

    // SAFETY: getpid/getppid have no preconditions.
    let (pid, ppid) = unsafe { (libc::getpid(), libc::getppid()) };
    let Some(ar) = arena() else { return };
    a.proc_index = ar.claim_proc(pid as u32, ppid as u32, stream).map(|p| {
        (p as *const ProcEntry as usize - ar.procs().as_ptr() as usize)
            / std::mem::size_of::<ProcEntry>()
    });
    if let Some(p) = a.proc_entry() {
        // Relaxed: the recorder reads them after the process ends, or as estimates.
        p.period.store(period, Ordering::Relaxed);
        p.jitter.store(jitter, Ordering::Relaxed);
        p.window.store(window, Ordering::Relaxed);
    }
    let info = ProcessInfo {
        pid: pid as u32,
        ppid: ppid as u32,
        origin,
        exe: std::fs::read_link("/proc/self/exe").unwrap_or_default(),
        start_mono_ns: clock::mono_ns(),
        period,
        window,
        jitter,
        period_source: source,
        sample_cost_ns: sample_ns,
        floor_cost_ns: floor_ns,
        predicted_overhead_ppm: predicted_ppm,
        floor: false,
    };
    let mut e = Encoder::new();
    e.process(stream, &info);
    chunks::maps_if_changed(a, &mut e);
    let mut warn = |message: String| {
        ar.push_note(&message);
        e.note(stream, &strobe_format::Note { level: NoteLevel::Warning, message });
    };
    if costs.is_none() {
        warn("strobe agent: could not measure the per-sample cost; the period is a guess".into());
    }
    if a.proc_index.is_none() {
        warn("strobe agent: the recording's process table is full; this process's end is not recorded".into());
    }
    if source == PeriodSource::Explicit && predicted_ppm > a.cfg.overhead_ppm {
        warn(format!(
            "period={period} with window={window} predicts a {:.1}% slowdown ({:.0} us per sample: {:.1} us measured at start, x{} for cache refill and context switches), above the {:.1}% overhead budget; drop period= to let strobe pick one",
            predicted_ppm as f64 / 1e4,
            charged_ns / 1e3,
            sample_ns as f64 / 1e3,
            strobe_protocol::budget::INDIRECT_COST_FACTOR,
            a.cfg.overhead_ppm as f64 / 1e4
        ));
    }
    chunks::write_all(crate::out_fd(), e.as_bytes());
    ENABLED.store(true, Ordering::Release);
    setup_thread(a, cpu_from);
}

/// Sets up sampling for the calling thread (a new thread, before its start routine).
/// `cpu_from`: the thread's CPU time when the agent began its work for it (what the
/// set-up cost is measured from).
fn setup_thread(a: &Agent, cpu_from: u64) {
    match sampler::open_slot(a, None) {
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
            if sigmask::trap_blocked_now() {
                // Its mask blocks the sampler's signal (inherited from its creator): not
                // armed until it unblocks it; the kernel floor samples it meanwhile.
                if let Some(local) = slots::LOCAL.get(idx) {
                    local.masked.store(true, Ordering::Relaxed);
                }
                sigmask::count_once(idx);
            } else {
                sampler::arm(idx, Some(cpu_from));
            }
        }
        Err(sampler::SetupError::Budget) => {
            // The kernel floor samples it; the recorder says how many.
            if let Some(ar) = arena() {
                ar.count_over_budget();
            }
        }
        Err(sampler::SetupError::NoSlot) => {
            static WARNED: AtomicBool = AtomicBool::new(false);
            if !WARNED.swap(true, Ordering::Relaxed) {
                chunks::note(
                    a,
                    NoteLevel::Warning,
                    format!(
                        "more than {} threads alive at once: later threads are not profiled",
                        arena().map_or(0, |ar| ar.slots().len()).min(slots::MAX_SLOTS)
                    ),
                );
            }
        }
        Err(sampler::SetupError::Open(e)) => {
            static WARNED: AtomicBool = AtomicBool::new(false);
            if !WARNED.swap(true, Ordering::Relaxed) {
                chunks::note(
                    a,
                    NoteLevel::Error,
                    format!("strobe agent: cannot open the event group of a thread: {e}"),
                );
            }
            if let Some(ar) = arena() {
                ar.count_unprofiled_thread();
            }
        }
    }
}

/// pthread key destructor: the thread is exiting.
extern "C" fn thread_exit(value: *mut libc::c_void) {
    let idx = (value as usize).wrapping_sub(1);
    // Under the program's seccomp filter the agent makes no call: the recorder drains the
    // slot when the process ends.
    let Some(_pass) = sandbox::enter() else { return };
    if own_agent().is_some() {
        sampler::close_slot(idx, false);
    }
}

/// Stops sampling in this process and marks its entry Exited.
fn end_process(a: &Agent) {
    sampler::STOPPING.store(true, Ordering::SeqCst);
    ENABLED.store(false, Ordering::Relaxed);
    if let Some(p) = a.proc_entry() {
        p.set_state(ProcState::Exited);
    }
}

extern "C" fn agent_fini() {
    let Some(a) = own_agent() else { return };
    end_process(a);
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
    // The pass: no seccomp filter goes in while the thread opens its events.
    let pass = ENABLED.load(Ordering::Acquire).then(sandbox::enter).flatten();
    if pass.is_some() {
        if let Some(a) = agent() {
            let cpu_from = sampler::thread_cpu_ns();
            // A library loaded since the last snapshot (dlopen) shows here; at most
            // every 50 ms, so programs that churn threads do not re-read /proc each time.
            // Before the arming: the agent's own work is not the thread's.
            chunks::write_maps_every(a, 50_000_000);
            setup_thread(a, cpu_from);
        }
    }
    drop(pass);
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

/// Before a fork, in the parent: the child's first thread's first-period draw is the
/// parent's next (see `sampler`'s "A fair first period").
extern "C" fn atfork_prepare() {
    sampler::draw_before_fork();
}

/// After a fork, in the parent: the point taken for the child is the child's alone.
extern "C" fn atfork_parent() {
    sampler::draw_after_fork_in_parent();
}

extern "C" fn atfork_child() {
    if sandbox::active() {
        // The child inherits the parent's filter and the closed gate: the agent stays off
        // and makes no call (its copies of the parent's descriptors stay open).
        ENABLED.store(false, Ordering::Relaxed);
        AGENT.store(std::ptr::null_mut(), Ordering::Release);
        return;
    }
    let cpu_from = sampler::thread_cpu_ns();
    sampler::draw_after_fork_in_child();
    // The parent's threads' signal stacks came along: this thread's gives way to the
    // program's own setting, the copies go.
    altstack::forget_in_child(own_slot());
    // Only the forking thread exists here. The parent's events are the parent's: close
    // our copies of their fds. The arena is shared with the parent: its slots are the
    // parent's threads' and must not be touched.
    ENABLED.store(false, Ordering::Relaxed);
    let high = arena().map_or(0, |ar| ar.high_water()).min(slots::MAX_SLOTS);
    for local in slots::LOCAL.iter().take(high) {
        local.forget_ring();
        local.close_group();
        local.forget_walker();
    }
    stack::after_fork_in_child();
    chunks::reset_in_child();
    let old = AGENT.swap(std::ptr::null_mut(), Ordering::AcqRel);
    // SAFETY: as in `agent()`; the old agent is leaked, never freed.
    let Some(old) = (unsafe { old.as_ref() }) else { return };
    // The child's copy of the output fd; `start` opens the file again.
    fds::close_own(OUT_FD.swap(-1, Ordering::Relaxed));
    fds::give_back(1);
    // A child made in a new PID namespace (`unshare -pf`, a container runtime's fork).
    let foreign = arena().is_some_and(|ar| in_other_pid_namespace(ar, old.cfg.pid_ns));
    if old.cfg.follow_fork && !old.cfg.calibrate && !foreign {
        let costs = strobe_protocol::Costs {
            sample_ns: old.sample_ns.load(Ordering::Relaxed),
            floor_ns: old.floor_ns.load(Ordering::Relaxed),
            leader_per_ns: 1.0,
        };
        let cfg = strobe_protocol::RecordConfig {
            costs: (costs.sample_ns > 0).then_some(costs),
            ..old.cfg.clone()
        };
        start(cfg, ProcessOrigin::Fork, cpu_from);
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
/// dies of), write the mappings and say in the process table that this image ends (its
/// threads' blocks stay in the arena; the recorder drains them once the new image is up
/// or the process is gone). Returns the slot to re-arm if exec fails.
fn before_exec() -> Option<usize> {
    // A vfork child execs on our memory: its thread has no events of its own, and the
    // recording and the events it could reach are the parent's. Touch nothing.
    let a = own_agent()?;
    // Under the program's seccomp filter: no call of ours (the new image starts under it
    // and leaves the agent off).
    let _pass = sandbox::enter()?;
    let idx = own_slot();
    if let Some(i) = idx {
        sampler::pause(i);
    }
    chunks::write_maps(a);
    if let Some(p) = a.proc_entry() {
        p.set_state(ProcState::Execed);
    }
    idx
}

/// exec failed: the process goes on, and so does this thread's sampling.
fn after_failed_exec(idx: Option<usize>) {
    let Some(_pass) = sandbox::enter() else { return };
    if let Some(p) = own_agent().and_then(Agent::proc_entry) {
        p.set_state(ProcState::Running);
    }
    if let Some(i) = idx {
        sampler::arm(i, None);
    }
}

/// One of the exec family: ends this image's part of the recording, gives the new image
/// strobe's variables back (`hidden_env`), calls libc's function `$real` with
/// `$forward` (the environment as the last argument), and, if the exec failed, goes on.
macro_rules! wrap_exec {
    ($name:ident, $real:expr, ($($arg:ident: $ty:ty),*), $envp:expr, ($($rty:ty),*), ($($fwd:ident),*)) => {
        /// Interposed: ends this image's part of the recording, then calls libc's function
        /// with strobe's variables given back to the new image.
        ///
        /// # Safety
        /// Same contract as libc's function of this name.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> libc::c_int {
            type F = unsafe extern "C" fn($($rty),*, *const *const libc::c_char) -> libc::c_int;
            static REAL: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());
            let p = next_symbol(&REAL, $real);
            if p.is_null() {
                // SAFETY: errno is thread-local.
                unsafe { *libc::__errno_location() = libc::ENOSYS };
                return -1;
            }
            let idx = before_exec();
            // SAFETY: libc's function has this signature; the caller's arguments are
            // forwarded unchanged but for the environment, which `with_env` builds from
            // the caller's (a NULL-terminated array, the function's contract).
            let rc = unsafe {
                hidden_env::with_env($envp, |env| {
                    std::mem::transmute::<*mut libc::c_void, F>(p)($($fwd),*, env)
                })
            };
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
    if let Some(rc) = signal::virtual_sigaction(sig, act, old) {
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
    if let Some(old) = signal::virtual_signal(sig, handler) {
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

/// Interposes `bsd_signal` (BSD semantics: `signal`'s), as `signal`.
///
/// # Safety
/// Same contract as libc's `bsd_signal`.
#[no_mangle]
pub unsafe extern "C" fn bsd_signal(
    sig: libc::c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    // SAFETY: forwarded under the caller's contract.
    unsafe { signal(sig, handler) }
}

/// Interposes `sigset` (System V's; `SIG_HOLD` blocks the signal instead): SIGTRAP's
/// disposition is virtual once the agent's handler is installed, as with `signal`.
///
/// # Safety
/// Same contract as libc's `sigset`.
#[no_mangle]
pub unsafe extern "C" fn sigset(
    sig: libc::c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    const SIG_HOLD: libc::sighandler_t = 2;
    if handler != SIG_HOLD {
        if let Some(old) = signal::virtual_signal(sig, handler) {
            return old;
        }
    }
    type F = unsafe extern "C" fn(libc::c_int, libc::sighandler_t) -> libc::sighandler_t;
    static REAL: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());
    let p = next_symbol(&REAL, c"sigset");
    if p.is_null() {
        return libc::SIG_ERR;
    }
    // SAFETY: libc's sigset has this signature; arguments forwarded unchanged.
    unsafe { std::mem::transmute::<*mut libc::c_void, F>(p)(sig, handler) }
}

/// Interposes `sysv_signal`: SIGTRAP's disposition is virtual once the agent's handler
/// is installed.
///
/// # Safety
/// Same contract as libc's `sysv_signal`.
#[no_mangle]
pub unsafe extern "C" fn sysv_signal(
    sig: libc::c_int,
    handler: libc::sighandler_t,
) -> libc::sighandler_t {
    if let Some(old) = signal::virtual_sysv_signal(sig, handler) {
        return old;
    }
    type F = unsafe extern "C" fn(libc::c_int, libc::sighandler_t) -> libc::sighandler_t;
    static REAL: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());
    let p = next_symbol(&REAL, c"sysv_signal");
    if p.is_null() {
        return libc::SIG_ERR;
    }
    // SAFETY: libc's sysv_signal has this signature; arguments forwarded unchanged.
    unsafe { std::mem::transmute::<*mut libc::c_void, F>(p)(sig, handler) }
}

/// Interposes `siginterrupt`: for SIGTRAP it changes the virtual disposition's restart
/// flag, leaving the agent's handler in place.
///
/// # Safety
/// Same contract as libc's `siginterrupt`.
#[no_mangle]
pub unsafe extern "C" fn siginterrupt(sig: libc::c_int, flag: libc::c_int) -> libc::c_int {
    if let Some(rc) = signal::virtual_siginterrupt(sig, flag) {
        return rc;
    }
    type F = unsafe extern "C" fn(libc::c_int, libc::c_int) -> libc::c_int;
    static REAL: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());
    let p = next_symbol(&REAL, c"siginterrupt");
    if p.is_null() {
        return -1;
    }
    // SAFETY: libc's siginterrupt has this signature; arguments forwarded unchanged.
    unsafe { std::mem::transmute::<*mut libc::c_void, F>(p)(sig, flag) }
}

/// Interposes `_exit` (which skips the destructors, and which shells such as dash use to
/// end): stops sampling and says in the process table that the process exited.
#[no_mangle]
pub extern "C" fn _exit(status: libc::c_int) -> ! {
    if let Some(a) = own_agent() {
        end_process(a);
    }
    loop {
        // SAFETY: exit_group ends the process; it takes a plain status and never returns.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// The interposed `dlopen`, reached through the `dlopen` symbol below with the address
/// it was called from (see `stack::dlopen_caller`).
///
/// # Safety
/// As `dlopen(3)`.
#[no_mangle]
pub unsafe extern "C" fn strobe_agent_dlopen(
    file: *const libc::c_char,
    mode: libc::c_int,
    caller: usize,
) -> *mut libc::c_void {
    // SAFETY: forwarded under dlopen's contract.
    unsafe { stack::dlopen_caller(file, mode, caller) }
}

/// `dlopen`: a naked function that passes its return address (the caller's) as a third
/// argument and jumps, the stack untouched, to [`strobe_agent_dlopen`].
#[unsafe(naked)]
#[no_mangle]
pub extern "C" fn dlopen() {
    #[cfg(target_arch = "x86_64")]
    core::arch::naked_asm!("mov rdx, qword ptr [rsp]", "jmp {f}", f = sym strobe_agent_dlopen);
    #[cfg(target_arch = "aarch64")]
    core::arch::naked_asm!("mov x2, x30", "b {f}", f = sym strobe_agent_dlopen);
}

/// Interposes `dlclose`: the module table's protocol around the real one.
///
/// # Safety
/// As `dlclose(3)`.
#[no_mangle]
pub unsafe extern "C" fn dlclose(handle: *mut libc::c_void) -> libc::c_int {
    // SAFETY: forwarded under dlclose's contract.
    unsafe { stack::dlclose(handle) }
}

/// Interposes `_Exit` (C99's name for `_exit`), as `_exit`.
#[no_mangle]
pub extern "C" fn _Exit(status: libc::c_int) -> ! {
    _exit(status)
}

type CStrPtr = *const libc::c_char;
type CStrArr = *const *const libc::c_char;
wrap_exec!(execve, c"execve", (path: CStrPtr, argv: CStrArr, envp: CStrArr), envp, (CStrPtr, CStrArr), (path, argv));
wrap_exec!(execv, c"execve", (path: CStrPtr, argv: CStrArr), hidden_env::current(), (CStrPtr, CStrArr), (path, argv));
wrap_exec!(execvp, c"execvpe", (file: CStrPtr, argv: CStrArr), hidden_env::current(), (CStrPtr, CStrArr), (file, argv));
wrap_exec!(execvpe, c"execvpe", (file: CStrPtr, argv: CStrArr, envp: CStrArr), envp, (CStrPtr, CStrArr), (file, argv));
wrap_exec!(fexecve, c"fexecve", (fd: libc::c_int, argv: CStrArr, envp: CStrArr), envp, (libc::c_int, CStrArr), (fd, argv));

/// Interposed `execveat` (glibc 2.34): as the exec family above; its flags come after the
/// environment, so it is written out rather than made by `wrap_exec!`.
///
/// # Safety
/// Same contract as libc's `execveat`.
#[no_mangle]
pub unsafe extern "C" fn execveat(
    dirfd: libc::c_int,
    path: CStrPtr,
    argv: CStrArr,
    envp: CStrArr,
    flags: libc::c_int,
) -> libc::c_int {
    type F =
        unsafe extern "C" fn(libc::c_int, CStrPtr, CStrArr, CStrArr, libc::c_int) -> libc::c_int;
    static REAL: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());
    let p = next_symbol(&REAL, c"execveat");
    if p.is_null() {
        // SAFETY: errno is thread-local.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return -1;
    }
    let idx = before_exec();
    // SAFETY: libc's execveat has this signature; the arguments are the caller's but for
    // the environment, which `with_env` builds from the caller's.
    let rc = unsafe {
        hidden_env::with_env(envp, |env| {
            std::mem::transmute::<*mut libc::c_void, F>(p)(dirfd, path, argv, env, flags)
        })
    };
    // SAFETY: errno is thread-local; kept across our re-arm.
    let errno = unsafe { *libc::__errno_location() };
    after_failed_exec(idx);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    rc
}

type SpawnFn = unsafe extern "C" fn(
    *mut libc::pid_t,
    CStrPtr,
    *const libc::posix_spawn_file_actions_t,
    *const libc::posix_spawnattr_t,
    CStrArr,
    CStrArr,
) -> libc::c_int;

/// `posix_spawn`/`posix_spawnp`: the new image gets strobe's variables back.
///
/// # Safety
/// As libc's function of that name.
// libc's six arguments, and which of the two functions to call.
#[allow(clippy::too_many_arguments)]
unsafe fn spawn(
    real: &AtomicPtr<libc::c_void>,
    name: &std::ffi::CStr,
    pid: *mut libc::pid_t,
    path: CStrPtr,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: CStrArr,
    envp: CStrArr,
) -> libc::c_int {
    let p = next_symbol(real, name);
    if p.is_null() {
        return libc::ENOSYS;
    }
    // SAFETY: libc's function has this signature; arguments forwarded unchanged but for
    // the environment, built from the caller's.
    unsafe {
        hidden_env::with_env(envp, |env| {
            std::mem::transmute::<*mut libc::c_void, SpawnFn>(p)(
                pid, path, actions, attr, argv, env,
            )
        })
    }
}

/// Interposes `posix_spawn`: the new image gets strobe's variables back.
///
/// # Safety
/// As libc's `posix_spawn`.
#[no_mangle]
pub unsafe extern "C" fn posix_spawn(
    pid: *mut libc::pid_t,
    path: CStrPtr,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: CStrArr,
    envp: CStrArr,
) -> libc::c_int {
    static REAL: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());
    // SAFETY: forwarded under the caller's contract.
    unsafe { spawn(&REAL, c"posix_spawn", pid, path, actions, attr, argv, envp) }
}

/// Interposes `posix_spawnp`: the new image gets strobe's variables back.
///
/// # Safety
/// As libc's `posix_spawnp`.
#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(
    pid: *mut libc::pid_t,
    file: CStrPtr,
    actions: *const libc::posix_spawn_file_actions_t,
    attr: *const libc::posix_spawnattr_t,
    argv: CStrArr,
    envp: CStrArr,
) -> libc::c_int {
    static REAL: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());
    // SAFETY: forwarded under the caller's contract.
    unsafe { spawn(&REAL, c"posix_spawnp", pid, file, actions, attr, argv, envp) }
}

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
