//! Signals while recording. Ctrl-C at a terminal goes to the whole foreground process
//! group: the target gets its own SIGINT and ends as it would without strobe, while the
//! recorder keeps going until the target is gone and the file is complete (as perf and
//! `time` do). A SIGINT, SIGTERM, SIGHUP or SIGQUIT sent to strobe alone (by `kill`,
//! `timeout`, a supervisor) is passed on to the target, which would otherwise never hear
//! it, and the recording ends when the target does.
//!
//! Owns: blocking those signals in the recorder while it records, a thread that takes them
//! with `sigtimedwait`, and the pidfd check for the target's end. Must never let strobe
//! die of a signal before the file is complete, nor send the target a signal the terminal
//! already sent it.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use strobe_target::launch::HeldChild;

const SIGNALS: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// The forwarding thread and what it saw.
#[derive(Debug)]
pub(crate) struct Forwarder {
    stop: Arc<AtomicBool>,
    interrupted: Arc<AtomicBool>,
    /// The launched child signals are passed on to (0: none yet, or none).
    child: Arc<AtomicI32>,
    thread: Option<JoinHandle<()>>,
    old_mask: libc::sigset_t,
}

impl Forwarder {
    /// Blocks the signals in the calling thread (and so in threads it starts later) and
    /// starts the thread that takes them: those sent to strobe alone go on to the child
    /// [`Forwarder::set_child`] names, once it does; [`Forwarder::interrupted`] tells
    /// that one came.
    pub(crate) fn watch() -> Forwarder {
        Forwarder::start_for(None)
    }

    /// From now on, signals sent to strobe alone are passed on to `child` (a session
    /// starts the forwarder before it launches anything, so no signal is missed).
    pub(crate) fn set_child(&self, child: libc::pid_t) {
        // Release: the thread that loads it passes signals on to a child that exists.
        self.child.store(child, Ordering::Release);
    }

    fn start_for(child: Option<libc::pid_t>) -> Forwarder {
        let set = signal_set();
        // SAFETY: `old` is a valid out-parameter; blocking signals has no other effect.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
        let stop = Arc::new(AtomicBool::new(false));
        let interrupted = Arc::new(AtomicBool::new(false));
        let child = Arc::new(AtomicI32::new(child.unwrap_or(0)));
        let (s, i, c) = (stop.clone(), interrupted.clone(), child.clone());
        let thread = std::thread::Builder::new()
            .name("strobe-signals".into())
            .spawn(move || {
                let ts = libc::timespec { tv_sec: 0, tv_nsec: 50_000_000 };
                while !s.load(Ordering::Acquire) {
                    // SAFETY: `info` is a valid out-parameter; `set` holds blocked signals.
                    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                    // SAFETY: as above.
                    let sig = unsafe { libc::sigtimedwait(&set, &mut info, &ts) };
                    if sig <= 0 {
                        continue;
                    }
                    i.store(true, Ordering::Release);
                    // Sent by a process (kill, timeout), not by the terminal: pass it on.
                    // SAFETY: reading the sender of a signal sigtimedwait filled in.
                    let from = unsafe { info.si_pid() };
                    let sent = info.si_code == libc::SI_USER || info.si_code == libc::SI_QUEUE;
                    // Acquire: pairs with `set_child`.
                    match c.load(Ordering::Acquire) {
                        child if sent && from != child && child > 0 => {
                            // SAFETY: kill on our own child (not reaped before `stop`).
                            unsafe { libc::kill(child, sig) };
                        }
                        _ => {}
                    }
                }
            })
            .ok();
        Forwarder { stop, interrupted, child, thread, old_mask: old }
    }

    /// A signal reached strobe while recording.
    pub(crate) fn interrupted(&self) -> bool {
        self.interrupted.load(Ordering::Acquire)
    }

    /// Stops the thread and restores the calling thread's signal mask. A signal taken
    /// meanwhile was already passed on. (Dropping the forwarder does the same.)
    pub(crate) fn stop(self) {
        drop(self);
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // SAFETY: restoring the mask saved in `start`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut()) };
    }
}

/// Whether the child has exited (its pidfd is readable), without reaping it.
pub(crate) fn exited(child: &HeldChild) -> bool {
    let mut pfd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(&child.pidfd()),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    unsafe { libc::poll(&mut pfd, 1, 0) > 0 }
}
