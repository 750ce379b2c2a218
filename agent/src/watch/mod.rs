//! `strobe watch` inside the target: hardware watchpoints armed from the agent's
//! constructor, hits caught by a synchronous SIGTRAP handler, and a writer thread that
//! streams them to `strobe watch`.
//!
//! It owns: the watch request (read from the environment, [`config`]), the
//! `PERF_TYPE_BREAKPOINT` events (one per debug-register slot) and the round-robin rotation
//! of more watchpoints than slots ([`arm`], over [`strobe_watch::Multiplexer`]), what the
//! handler reads ([`state`]), the hit ring ([`ring`]), the output channel ([`channel`]) and
//! the writer thread that feeds it ([`writer`]). This file holds the entry points the rest
//! of the agent calls. It must never allocate, lock or panic in the SIGTRAP handler
//! ([`trap`], [`decode`], [`mem`]), never kill or stop the target (a failure is reported on
//! the channel and the target runs unwatched), and never write to the target's own output.
//!
//! # Configuration (set by `strobe watch`)
//!
//! Two environment variables, both typed in strobe-protocol (`watch`, `env`): the write end
//! of a pipe `strobe watch` reads (`STROBE_WATCH_FD`), and the request (`STROBE_WATCH`):
//! the points, each an address relative to the main executable (relocated by its load
//! bias), to a shared library named by its file's device and inode (relocated by that
//! library's load bias) or absolute, with its length (1, 2, 4 or 8) and access (writes, or
//! reads and writes); and the options: per-thread events (each thread gets its own instead
//! of inherited ones: opened by the thread itself before its start routine runs when it is
//! made with `pthread_create`, else by the writer thread when it finds the thread in
//! `/proc/self/task`), whether to rotate, whether to walk frame pointers per hit, and the
//! rotation interval. The agent reads both in its constructor and removes them.
//!
//! # Arming
//!
//! The writer thread is created first, so it never inherits the breakpoints. Then one
//! event per slot is opened on the constructor's thread, process-wide (`inherit` +
//! `inherit_thread`: every thread the target creates later gets the slot's breakpoint, and
//! forked children do not) or, with `thread`, on that thread alone, every other thread
//! getting its own events: one made with `pthread_create` opens them itself before its
//! start routine runs (the agent's trampoline calls [`on_thread_start`]; see [`born`] for
//! the lock-free hand-over to the writer), one made otherwise (raw `clone`) gets them from
//! the writer within about a millisecond of appearing (the writer polls `/proc/self/task`;
//! that thread's accesses before are missed). Each thread's slots are reserved in a
//! [`strobe_watch::SlotTable`] over strobe-rcu's hash multimap keyed by thread, so
//! reserving and releasing them costs the same with 1 or 4096 threads. Each
//! event raises SIGTRAP (perf's `sigtrap`, `remove_on_exec`) carrying `sig_data` =
//! [`SIG_TAG`] << 32 | watchpoint index, which is how the handler tells our traps from
//! the target's. With more watchpoints than slots, the writer thread rotates one slot
//! every rotation interval with `PERF_EVENT_IOC_MODIFY_ATTRIBUTES` (applied by the kernel to
//! every inherited copy) and keeps each watchpoint's armed time.
//!
//! # The channel
//!
//! strobe-protocol's `watch::Message` frames, the first a hello with the version: `Start`
//! (pid, watchpoints, slots, multiplexed), one `Watchpoint` each as armed, `Module` (a
//! module hit addresses are relative to, announced before its first use), `Hit`
//! (watchpoint, thread, imprecise, old value if known, new value, the instruction and
//! frames as module and link-time address), and at exit `Armed` per watchpoint, `Threads`
//! (per-thread mode), `Lost`, `Chained` and `End`. `Error` says why the agent could not
//! watch (without a `Start` the target runs on unwatched).
//!
//! # Exit, exec, fork
//!
//! At `exit` an atexit handler stops the rotation, has the writer drain the ring and write
//! the per-watchpoint armed times, and waits (at most two seconds) for it. The channel is
//! close-on-exec and the events are removed on exec, so an exec'd image runs unwatched; a
//! forked child inherits no breakpoint (`inherit_thread`) and writes nothing.

mod arm;
mod born;
mod channel;
mod config;
mod decode;
mod mem;
mod ring;
mod state;
mod trap;
mod writer;

pub use trap::{virtual_sigaction, virtual_signal};

use std::sync::atomic::Ordering;

use strobe_watch::HitCounters;

use channel::{fail, fd_identity, Channel};
use ring::Ring;
use state::{State, Wp};
use writer::{IN_WRITER, OWNER_PID};

/// Whether `strobe watch` asked this process to watch (the channel fd is set and is a
/// pipe). Also resolves the C library's `sigaction` and `signal` behind this library's
/// interposers, so that a target calling them from a signal handler never reaches
/// `dlsym` there.
pub fn configured() -> bool {
    trap::resolve_next();
    config::channel_fd().is_some()
}

/// Starts watching: called from the agent's constructor when [`configured`].
pub fn start() {
    let Some(fd) = config::channel_fd() else { return };
    // SAFETY: marks our own fd close-on-exec, so an exec'd image does not inherit it, and
    // non-blocking (strobe holds only the read end, so no one else shares the flag).
    unsafe {
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
    }
    let Some(id) = fd_identity(fd) else { return };
    let mut ch = Channel::new(fd, id);
    let request = config::request();
    config::forget_config();
    let relocated = request.and_then(|r| {
        let points = config::relocate(&r.points, config::exe_bias(), config::library_bias)?;
        Ok((points, r.options))
    });
    let (wps, opts): (Vec<Wp>, _) = match relocated {
        Ok((p, opts)) => (p.into_iter().map(Wp::new).collect(), opts),
        Err(e) => return fail(&mut ch, &e),
    };
    let n = wps.len();
    let st = State {
        hits: HitCounters::new(n),
        wps: wps.into(),
        ring: Ring::new(1 << 14),
        stack: opts.stack,
    };
    if !state::publish(st) {
        return;
    }
    let Some(st) = state::state() else { return };
    if let Err(e) = trap::install() {
        return fail(&mut ch, &e);
    }
    let (tx, rx) = std::sync::mpsc::channel::<arm::Armed>();
    #[allow(
        clippy::disallowed_methods,
        reason = "strobe watch's one thread in the target, by design (see Arming above)"
    )]
    let writer = std::thread::Builder::new()
        .name("strobe-watch".into())
        .spawn(move || writer::writer_thread(ch, rx, opts));
    if writer.is_err() {
        return;
    }
    // Armed on this thread, after the writer exists (so it inherits nothing).
    let armed = arm::arm(st, opts);
    let _ = tx.send(armed);
    OWNER_PID.store(u64::from(std::process::id()), Ordering::Relaxed);
    // SAFETY: registers a plain extern "C" fn to run at exit.
    unsafe { libc::atexit(writer::at_exit) };
}

/// Called by the agent's `pthread_create` interposer before it creates a thread: whether
/// the new thread must arm itself ([`on_thread_start`] with `true`), in which case it is
/// counted until it has. Runs on the target's thread: no lock, no allocation, no panic.
pub fn thread_coming() -> bool {
    let coming = born::arming() > 0
        && !IN_WRITER.with(std::cell::Cell::get)
        // Relaxed: written once by the owner's constructor; a forked child differs.
        && OWNER_PID.load(Ordering::Relaxed) == u64::from(std::process::id());
    if coming {
        born::coming();
    }
    coming
}

/// Called by the `pthread_create` interposer when the thread [`thread_coming`] counted was
/// not created after all.
pub fn thread_not_coming(counted: bool) {
    if counted {
        born::done();
    }
}

/// Called by the agent's trampoline in a new thread before its start routine runs, with
/// what [`thread_coming`] said: in per-thread mode the thread opens its own watchpoint
/// events (aimed at the watchpoints armed now), so even its first instruction is watched,
/// and hands them to the writer. Runs on the target's thread: no lock, no allocation, no
/// panic, errno preserved; a failure leaves the thread to the writer's polling.
pub fn on_thread_start(counted: bool) {
    if !counted {
        return;
    }
    // SAFETY: __errno_location returns this thread's errno, valid for the thread's life.
    let errno = unsafe { *libc::__errno_location() };
    arm::arm_self();
    born::done();
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}
