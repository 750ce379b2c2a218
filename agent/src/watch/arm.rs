//! Arming: the `PERF_TYPE_BREAKPOINT` events, one per debug-register slot, their
//! rotation when there are more watchpoints than slots, and, in per-thread mode, every
//! other thread's own events (see the module note of `watch/mod.rs`, "Arming").
//!
//! Owns the events and the slot accounting ([`Armed`]: what the constructor opened, the
//! multiplexer, each thread's reservation in a [`SlotTable`]). Everything here runs in the
//! constructor or on the writer thread, except [`arm_self`], which a new thread runs on
//! itself before its start routine: that one must never allocate, lock or panic (it opens
//! events with raw system calls and hands them over through `born`). None of it may ever
//! stop or kill the target: a refusal is recorded in [`Armed::error`] and reported.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use strobe_perf::{PerfEvent, Target};
use strobe_watch::bp::{self, Mode, Scope};
use strobe_watch::mux::monotonic_ns;
use strobe_watch::{Multiplexer, Policy, RcuHashMap, SlotTable};

use super::born;
use super::config::Opts;
use super::state::{sig_data, state, State, Wp};

/// What arming produced, handed to the writer thread.
pub struct Armed {
    /// The constructor thread's events (process-wide: the parents every thread inherits).
    pub events: Vec<PerfEvent>,
    pub mux: Option<Multiplexer>,
    pub scope: Scope,
    pub error: Option<String>,
    /// Per-thread slot accounting, keyed by thread in strobe-rcu's hash multimap.
    pub table: SlotTable<RcuHashMap>,
    pub reservation: Option<Slots>,
    /// The thread that ran the constructor.
    pub own_tid: i32,
    /// Per-thread mode: the other threads' own events, opened as they are found.
    pub others: HashMap<i32, ThreadEvents>,
    /// Per-thread mode: threads that got events, over the run.
    pub threads_armed: u64,
}

/// A thread's slots in the table.
pub type Slots = strobe_watch::ReservationOf<RcuHashMap>;

/// One thread's events in per-thread mode.
pub struct ThreadEvents {
    /// One per slot.
    pub events: Vec<ThreadEvent>,
    /// The thread's slots in the table.
    pub reservation: Slots,
}

/// One per-thread event: opened by the writer, or by the thread itself at birth (a raw fd
/// from the `perf_event_open` system call; see [`born`]).
pub enum ThreadEvent {
    /// Opened by the writer.
    Opened(PerfEvent),
    /// Opened by the thread itself at birth.
    Born(OwnedFd),
}

impl ThreadEvent {
    /// The event's fd.
    pub fn fd(&self) -> RawFd {
        match self {
            ThreadEvent::Opened(e) => e.raw_fd(),
            ThreadEvent::Born(f) => f.as_raw_fd(),
        }
    }

    /// Stops the event counting and trapping.
    pub fn disable(&self) {
        // SAFETY: DISABLE takes an integer flag argument; the fd is a live perf event we own.
        unsafe { libc::ioctl(self.fd(), strobe_perf::sys::ioctl::DISABLE, 0) };
    }
}

/// Per-thread mode: a new thread opens its own events, aimed at the watchpoints armed now,
/// and hands them to the writer ([`born`]). Runs on the target's thread before its start
/// routine: no lock, no allocation, no panic.
pub fn arm_self() {
    let Some(st) = state() else { return };
    let slots = born::arming();
    if slots == 0 {
        return;
    }
    let Some(claim) = born::claim() else { return };
    for slot in 0..slots {
        let wp = born::aim(slot);
        let Some(bpt) = st.wps.get(wp).and_then(Wp::breakpoint) else { break };
        let mut a = bp::attr(bpt, Mode::Trap { sig_data: sig_data(wp) }, Scope::Thread);
        // Enabled from the start: one system call per slot.
        a.set_disabled(0);
        // SAFETY: `a` is a valid, initialised attr with its size set; pid 0 / cpu -1 is the
        // calling thread on any CPU; no group.
        let fd = unsafe {
            strobe_perf::sys::perf_event_open(
                &mut a,
                0,
                -1,
                -1,
                strobe_perf::sys::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
            )
        };
        if fd < 0 {
            break;
        }
        claim.put(slot, fd, wp);
    }
    claim.publish(strobe_perf::sys::gettid());
}

/// Opens one event per slot on the constructor's thread (process-wide, or that thread
/// alone in per-thread mode), aimed at the first watchpoints, and starts the multiplexer.
pub fn arm(st: &State, opts: Opts) -> Armed {
    let scope = if opts.per_thread { Scope::Thread } else { Scope::Process };
    let n = st.wps.len();
    let table: SlotTable<RcuHashMap> = SlotTable::default();
    let mut armed = Armed {
        events: Vec::new(),
        mux: None,
        scope,
        error: None,
        table,
        reservation: None,
        own_tid: strobe_perf::sys::gettid(),
        others: HashMap::new(),
        threads_armed: 1,
    };
    let want = n.min(strobe_watch::slots::DEBUG_REGISTERS as usize);
    // Open one event per slot, aimed at the first watchpoints; stop at the first slot the
    // kernel refuses (ENOSPC: another user holds the thread's debug registers).
    for slot in 0..want {
        let Some(w) = st.wps.get(slot) else { break };
        let Some(bpt) = w.breakpoint() else { break };
        match bp::open(
            bpt,
            Mode::Trap { sig_data: sig_data(slot) },
            scope,
            Target::CALLING_THREAD,
            "watchpoint",
        ) {
            Ok(ev) => armed.events.push(ev),
            Err(e) => {
                if armed.events.is_empty() {
                    armed.error = Some(e.to_string());
                    return armed;
                }
                break;
            }
        }
    }
    let policy = if opts.multiplex { Policy::Multiplex } else { Policy::NoMultiplex };
    let mut mux = match Multiplexer::new(n, armed.events.len() as u32, policy) {
        Ok(m) => m,
        Err(e) => {
            armed.error = Some(e.to_string());
            armed.events.clear();
            return armed;
        }
    };
    let events = &armed.events;
    let r = mux.start(monotonic_ns(), |c| {
        let (Some(ev), Some(wp)) = (events.get(c.slot as usize), c.arm) else { return Ok(()) };
        let Some(w) = st.wps.get(wp) else { return Ok(()) };
        w.refresh_shadow();
        ev.enable()
    });
    if let Err(e) = r {
        armed.error = Some(format!("cannot enable a watchpoint: {e}"));
    }
    if opts.per_thread {
        for slot in 0..mux.slots() {
            born::set_aim(slot, mux.armed_in(slot).unwrap_or(0));
        }
        // After the aims: from here on, threads made with pthread_create arm themselves.
        born::set_arming(mux.slots());
    }
    armed.mux = Some(mux);
    armed
}

/// Rotates one slot to the next watchpoint (when multiplexing), on the constructor's
/// event and every per-thread one.
pub fn rotate(st: &State, armed: &mut Armed) {
    let Armed { events, mux, scope, others, .. } = armed;
    let scope = *scope;
    let Some(mux) = mux.as_mut() else { return };
    let _: std::io::Result<bool> = mux.rotate(monotonic_ns(), |c| {
        let Some(wp) = c.arm else { return Ok(()) };
        let Some(w) = st.wps.get(wp) else { return Ok(()) };
        let Some(bpt) = w.breakpoint() else { return Ok(()) };
        w.refresh_shadow();
        let mode = Mode::Trap { sig_data: sig_data(wp) };
        // The constructor thread's event decides; other threads follow (one that has just
        // exited may refuse, which changes nothing for the rest).
        if let Some(ev) = events.get(c.slot as usize) {
            bp::retarget(ev, bpt, mode, scope)?;
        }
        // Threads arming themselves from now on aim at `wp`; one that read the old aim is
        // re-targeted when adopted.
        born::set_aim(c.slot, wp);
        for t in others.values() {
            if let Some(ev) = t.events.get(c.slot as usize) {
                let _ = bp::retarget_fd(ev.fd(), bpt, mode, scope);
            }
        }
        Ok(())
    });
}

/// Per-thread mode: adopts the events of threads that armed themselves at birth
/// ([`born`]), gives every other thread that appeared in `/proc/self/task` its own events
/// (aimed at the watchpoints armed now), reserving each thread's slots in the table, and
/// releases the slots of threads that are gone. A thread made by raw `clone` is found
/// within about a millisecond of its start; its accesses before that are not seen.
pub fn follow_threads(st: &State, armed: &mut Armed, me: i32) {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return };
    let listed: HashSet<i32> =
        dir.flatten().filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok())).collect();
    // After listing, before adopting: see `born` for why this order means a thread that
    // arms itself is never armed here too, and never missed.
    let pending = born::pending();
    let mut adopted = HashSet::new();
    adopt_born(st, armed, &mut adopted);
    for &tid in &listed {
        if pending > 0 {
            // A listed thread may still be arming itself: leave unknown ones to the next pass.
            break;
        }
        if tid == me || tid == armed.own_tid || armed.others.contains_key(&tid) {
            continue;
        }
        // strobe's own helper threads (this writer, strobe-rcu's reclaimer) never touch
        // the target's memory.
        let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"));
        if comm.is_ok_and(|c| c.starts_with("strobe-")) {
            continue;
        }
        let Some(mux) = armed.mux.as_ref() else { return };
        let Ok(reservation) = armed.table.reserve(tid, mux.slots()) else { continue };
        let mut events = Vec::new();
        for slot in 0..mux.slots() {
            let wp = mux.armed_in(slot).unwrap_or(0);
            let Some(bpt) = st.wps.get(wp).and_then(Wp::breakpoint) else { break };
            let mode = Mode::Trap { sig_data: sig_data(wp) };
            match bp::open(bpt, mode, Scope::Thread, Target::thread(tid), "watchpoint") {
                Ok(ev) if ev.enable().is_ok() => events.push(ThreadEvent::Opened(ev)),
                _ => break,
            }
        }
        if events.len() == mux.slots() as usize {
            armed.others.insert(tid, ThreadEvents { events, reservation });
            armed.threads_armed += 1;
        } else {
            // The thread exited meanwhile (or refused): nothing to keep.
            armed.table.release(reservation);
            armed.table.forget(tid);
        }
    }
    // A thread adopted in this pass may have started after the listing.
    let gone: Vec<i32> = armed
        .others
        .keys()
        .filter(|t| !listed.contains(t) && !adopted.contains(t))
        .copied()
        .collect();
    for t in gone {
        if let Some(te) = armed.others.remove(&t) {
            armed.table.release(te.reservation);
            // The thread exited: drop its entry, so the table holds live threads only.
            armed.table.forget(t);
        }
    }
}

/// Takes the events of threads that armed themselves ([`born`]): reserves their slots,
/// re-targets a slot whose watchpoint was rotated since the thread read it, and keeps
/// them with the others. A thread that could not open every slot gets its events closed
/// and is armed by [`follow_threads`] instead.
pub fn adopt_born(st: &State, armed: &mut Armed, adopted: &mut HashSet<i32>) {
    let Armed { mux, others, table, threads_armed, .. } = armed;
    let Some(mux) = mux.as_ref() else { return };
    born::adopt(|a| {
        let events: Vec<(ThreadEvent, usize)> = a
            .fds
            .iter()
            .take(a.opened)
            // SAFETY: the thread opened this fd and handed it over through the entry,
            // which the writer alone takes: we are its only owner.
            .map(|&(fd, wp)| (ThreadEvent::Born(unsafe { OwnedFd::from_raw_fd(fd) }), wp))
            .collect();
        if events.len() != mux.slots() as usize {
            return; // dropping closes the fds
        }
        // A thread arming itself is never armed by the writer, so a known tid is an
        // exited thread's, reused: its events are dead.
        if let Some(old) = others.remove(&a.tid) {
            table.release(old.reservation);
            table.forget(a.tid);
        }
        let Ok(reservation) = table.reserve(a.tid, mux.slots()) else { return };
        for (slot, (ev, wp)) in events.iter().enumerate() {
            let now = mux.armed_in(slot as u32).unwrap_or(0);
            let Some(bpt) = st.wps.get(now).and_then(Wp::breakpoint) else { continue };
            if *wp != now {
                let mode = Mode::Trap { sig_data: sig_data(now) };
                let _ = bp::retarget_fd(ev.fd(), bpt, mode, Scope::Thread);
            }
        }
        let events = events.into_iter().map(|(ev, _)| ev).collect();
        others.insert(a.tid, ThreadEvents { events, reservation });
        *threads_armed += 1;
        adopted.insert(a.tid);
    });
}
