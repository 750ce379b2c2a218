//! The writer thread: drains the hit ring onto the channel, rotates multiplexed slots,
//! follows threads in per-thread mode, and at exit writes the closing figures; and the
//! atexit handler that stops it.
//!
//! Owns the thread's loop and the watch session's life: [`OWNER_PID`] (which process
//! armed), [`STOP`] and [`DONE`]. It must never stall the target: it polls rather than
//! blocks, keeps at most [`CHANNEL_BACKLOG`] bytes of messages while strobe reads slower than
//! hits arrive (the rest wait in the ring, or are counted lost), and the atexit handler
//! waits for it at most two seconds. It blocks every signal on its own thread, so the
//! target's signals never land there.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use strobe_protocol::watch::Message;
use strobe_watch::mux::monotonic_ns;
use strobe_watch::Multiplexer;

use super::arm::{adopt_born, follow_threads, rotate, Armed};
use super::born;
use super::channel::{fail, write_hit, Channel, Modules};
use super::config::Opts;
use super::state::state;
use super::trap;

/// Set by the atexit handler: the writer thread finishes.
static STOP: AtomicBool = AtomicBool::new(false);
/// Set by the writer thread when its last line is written.
static DONE: AtomicBool = AtomicBool::new(false);
/// The process that armed the watchpoints: a forked child (which has no writer thread)
/// must not wait for one at exit.
pub static OWNER_PID: AtomicU64 = AtomicU64::new(0);

/// Bytes of encoded messages the writer keeps while strobe reads slower than hits arrive.
const CHANNEL_BACKLOG: usize = 4 << 20;

thread_local! {
    /// Set in the writer thread: threads it creates (strobe-rcu's reclaimer) are strobe's
    /// own and never arm themselves. Const-initialised, no destructor: reading it allocates
    /// nothing.
    pub static IN_WRITER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The atexit handler: stops the writer and waits for its last line (at most 2 s).
pub extern "C" fn at_exit() {
    // Relaxed: written once before atexit registration, in this same thread of the owner.
    if OWNER_PID.load(Ordering::Relaxed) != u64::from(std::process::id()) {
        return;
    }
    STOP.store(true, Ordering::Release);
    // Wait for the writer's last line, at most 2 s: exit must never hang on strobe.
    for _ in 0..2000 {
        // Acquire: pairs with the writer's Release store of DONE.
        if DONE.load(Ordering::Acquire) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Blocks every signal in the calling thread: the target's signals go to its threads,
/// and a write to a closed channel returns EPIPE instead of killing the process.
fn block_all_signals() {
    // SAFETY: a filled sigset and pthread_sigmask on the calling thread.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

/// The writer thread's body: takes what arming produced from `rx`, then runs until
/// [`at_exit`] stops it.
#[allow(
    clippy::disallowed_types,
    reason = "arming hands its result to the writer once, outside any signal handler"
)]
pub fn writer_thread(mut ch: Channel, rx: std::sync::mpsc::Receiver<Armed>, opts: Opts) {
    block_all_signals();
    IN_WRITER.with(|w| w.set(true));
    let Some(st) = state() else { return };
    let Ok(mut armed) = rx.recv() else { return };
    // The constructor thread's slots are reserved here, not there: only this thread uses
    // the table, and so strobe-rcu. A target's thread registered with strobe-rcu would
    // start its reclaimer from its TLS destructors (main's run at exit), and that thread
    // would then arm itself as if it were the target's.
    if !armed.events.is_empty() {
        if let Err(e) = armed
            .table
            .reserve(armed.own_tid, armed.events.len() as u32)
            .map(|r| armed.reservation = Some(r))
        {
            for ev in &armed.events {
                let _ = ev.disable();
            }
            armed.events.clear();
            armed.error = Some(e.to_string());
        }
    }
    if let Some(e) = &armed.error {
        if armed.events.is_empty() {
            fail(&mut ch, e);
            DONE.store(true, Ordering::Release);
            return;
        }
    }
    let multiplexed = armed.mux.as_ref().is_some_and(Multiplexer::is_multiplexed);
    ch.send(&Message::Start {
        pid: std::process::id(),
        watchpoints: st.wps.len() as u32,
        slots: armed.events.len() as u32,
        multiplexed,
    });
    for (i, w) in st.wps.iter().enumerate() {
        ch.send(&Message::Watchpoint {
            index: i as u32,
            addr: w.addr,
            len: w.len as u8,
            access: w.access.into(),
        });
    }
    if let Some(e) = &armed.error {
        ch.send(&Message::Error(e));
    }
    ch.flush();
    let mut mods = Modules::default();
    let mut next_rotate = monotonic_ns() + opts.rotate.as_nanos() as u64;
    let mut idle = 0u32;
    let me = strobe_perf::sys::gettid();
    loop {
        // Acquire: pairs with at_exit's Release.
        let stopping = STOP.load(Ordering::Acquire);
        if stopping {
            // Threads made from now on run unwatched; ones arming themselves now are
            // adopted (and disabled) below.
            born::set_arming(0);
            if opts.per_thread {
                adopt_born(st, &mut armed, &mut Default::default());
            }
            for ev in &armed.events {
                let _ = ev.disable();
            }
            for ev in armed.others.values().flat_map(|t| &t.events) {
                ev.disable();
            }
        } else if opts.per_thread {
            follow_threads(st, &mut armed, me);
        }
        let mut drained = false;
        // While strobe lags, hits wait in the ring (and past it are counted lost) rather
        // than in an ever-growing buffer; at stop everything left is written.
        while ch.pending() < CHANNEL_BACKLOG || stopping {
            // SAFETY: this writer thread is the ring's only consumer.
            let Some(h) = (unsafe { st.ring.pop() }) else { break };
            drained = true;
            write_hit(&h, &mut mods, &mut ch);
            if ch.pending() > 48 * 1024 {
                ch.flush();
            }
        }
        let now = monotonic_ns();
        if !stopping && now >= next_rotate {
            next_rotate = now + opts.rotate.as_nanos() as u64;
            rotate(st, &mut armed);
        }
        ch.flush();
        if stopping {
            break;
        }
        // Poll every millisecond while hits arrive, backing off to 16 ms when idle (but
        // never past the next rotation), so an idle target is woken rarely.
        // Per-thread mode looks for new threads every millisecond.
        idle = if drained || opts.per_thread { 0 } else { (idle + 1).min(4) };
        let mut nap = Duration::from_millis(1 << idle);
        if multiplexed {
            let to_rotation = next_rotate.saturating_sub(monotonic_ns());
            nap = nap.min(Duration::from_nanos(to_rotation.max(100_000)));
        }
        std::thread::sleep(nap);
    }
    let now = monotonic_ns();
    if let Some(mux) = armed.mux.as_mut() {
        let _ = mux.stop(now, |_| Ok::<(), ()>(()));
        for i in 0..st.wps.len() {
            if let Some(s) = mux.stats(i, now, &st.hits) {
                ch.send(&Message::Armed {
                    wp: i as u32,
                    hits: s.hits,
                    armed_ns: s.armed_ns,
                    enabled_ns: s.enabled_ns,
                    times: s.times_armed,
                });
            }
        }
    }
    if let Some(r) = armed.reservation.take() {
        armed.table.release(r);
    }
    for (_, t) in armed.others.drain() {
        armed.table.release(t.reservation);
    }
    if opts.per_thread {
        ch.send(&Message::Threads(armed.threads_armed));
    }
    ch.send(&Message::Lost(st.ring.lost()));
    ch.send(&Message::Chained(trap::CHAINED.load(Ordering::Relaxed)));
    ch.send(&Message::End);
    // Within at_exit's two-second wait for us.
    ch.flush_all(Duration::from_millis(1500));
    // Release: at_exit may return once everything above is written.
    DONE.store(true, Ordering::Release);
}
