//! The recorder's view of the processes in a recording: the arena's process table read
//! from outside, each process's liveness, and which streams can no longer write (so
//! their threads' last blocks can be drained and freed).
//!
//! Owns: that bookkeeping, and giving a gone process's table entry back for a later
//! agent (a build's thousands of short processes pass through a table of 4096).
//! Must never call a stream gone while a thread of it may still append to the arena
//! (its blocks would be reused under it): a stream is gone only when its process is dead
//! (reaped, a zombie, or no longer in /proc) or its image was replaced (exec: the new
//! image's agent registered with the same pid).

use std::collections::BTreeMap;

use rustc_hash::FxHashSet;
use strobe_protocol::{Arena, ProcState};

/// One process (one agent instance: a process, or one image of it).
#[derive(Debug, Clone)]
pub(crate) struct Proc {
    /// Its index in the process table.
    pub index: usize,
    /// Its claim's number (later images of a process have higher numbers).
    pub seq: u64,
    /// Its table entry was given back (the process can no longer write).
    pub freed: bool,
    /// Process id.
    pub pid: u32,
    /// Record stream.
    pub stream: u32,
    /// Its state as the agent last set it.
    pub state: ProcState,
    /// Dead: reaped, a zombie, or gone from /proc.
    pub dead: bool,
}

/// The processes followed: those seen and not yet ended (see [`Procs::take_freed`]).
#[derive(Debug, Default)]
pub(crate) struct Procs {
    /// By claim number.
    procs: BTreeMap<u64, Proc>,
    /// Processes (agent instances) seen, ended ones included.
    seen: usize,
    /// Pids the recorder reaped itself (the launched command).
    reaped: FxHashSet<u32>,
}

/// Whether `pid` is dead: not in /proc, or a zombie whose threads are all gone (only its
/// parent's wait is missing). A zombie *leader* whose other threads still run (main
/// called `pthread_exit`) is alive: its threads may still write.
pub(crate) fn pid_dead(pid: u32) -> bool {
    match std::fs::read(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            // `pid (comm) S ...`: the state follows the last ')' (comm may hold any byte);
            // num_threads is the 18th field after it.
            let Some(after) = stat.iter().rposition(|&b| b == b')') else { return true };
            let rest = String::from_utf8_lossy(stat.get(after + 2..).unwrap_or_default());
            let f: Vec<&str> = rest.split_whitespace().collect();
            let zombie =
                matches!(f.first().and_then(|s| s.bytes().next()), Some(b'Z' | b'X' | b'x'));
            let threads: u64 = f.get(17).and_then(|t| t.parse().ok()).unwrap_or(0);
            zombie && threads <= 1
        }
    }
}

/// Whether `pid` was reaped (no process has that id any more): one `kill(pid, 0)`, where
/// [`pid_dead`] opens, reads and parses `/proc/PID/stat`, so it can be asked of every
/// process followed each second. A zombie is not reaped; [`pid_dead`] says whether it is dead.
/// (`EPERM`, another user's process, means it exists.)
pub(crate) fn pid_reaped(pid: u32) -> bool {
    let Ok(p) = libc::pid_t::try_from(pid) else { return false };
    if p <= 0 {
        return false; // 0 and negative ids name groups, not a process
    }
    // SAFETY: signal 0 sends nothing; it only checks that the process exists.
    let r = unsafe { libc::kill(p, 0) };
    r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// The CPU time (ns) of `pid`'s own threads, live or dead, from `/proc/PID/stat`
/// (utime + stime, in clock ticks): readable until the process is reaped, so a zombie
/// still gives its whole life's.
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "no caller since the session's rework; its test keeps it honest until one comes"
    )
)]
pub(crate) fn process_cpu_ns(pid: u32) -> Option<u64> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.iter().rposition(|&b| b == b')')?;
    let text = std::str::from_utf8(stat.get(after + 2..)?).ok()?;
    // Fields from 3 (state) on: utime and stime are fields 14 and 15.
    let f: Vec<&str> = text.split_whitespace().collect();
    let (u, s): (u64, u64) = (f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some((u + s) * 1_000_000_000 / hz)
}

impl Procs {
    /// Reads the process table again and checks the liveness of every process that
    /// could still write.
    pub(crate) fn refresh(&mut self, arena: &Arena) {
        let high = arena.proc_high_water();
        for (index, e) in arena.procs().iter().enumerate().take(high) {
            let state = e.state();
            if state == ProcState::Free {
                // Never claimed, given back, or being claimed right now (the next refresh
                // sees it).
                continue;
            }
            // Relaxed: set before the agent published Running (Release, read above).
            let seq = e.seq.load(std::sync::atomic::Ordering::Relaxed);
            let pid = e.pid.load(std::sync::atomic::Ordering::Relaxed);
            let stream = e.stream.load(std::sync::atomic::Ordering::Relaxed);
            let seen = &mut self.seen;
            let p = self.procs.entry(seq).or_insert_with(|| {
                *seen += 1;
                Proc { index, seq, pid, stream, state, dead: false, freed: false }
            });
            p.state = state;
            if !p.dead {
                p.dead = self.reaped.contains(&pid) || pid_dead(pid);
            }
        }
    }

    /// The recorder reaped `pid` itself.
    pub(crate) fn reaped(&mut self, pid: u32) {
        self.reaped.insert(pid);
        for p in self.procs.values_mut().filter(|p| p.pid == pid) {
            p.dead = true;
        }
    }

    /// Streams whose threads can no longer write.
    pub(crate) fn gone_streams(&self) -> FxHashSet<u32> {
        let mut gone = FxHashSet::default();
        for p in self.procs.values() {
            let replaced = p.state == ProcState::Execed
                && self.procs.values().any(|q| q.pid == p.pid && q.seq > p.seq);
            if p.dead || replaced {
                gone.insert(p.stream);
            }
        }
        gone
    }

    /// Gives back the table entries of processes in `gone` (streams whose data the
    /// caller has drained: nothing will write or read the entries again).
    pub(crate) fn free_gone(&mut self, arena: &Arena, gone: &FxHashSet<u32>) {
        for p in self.procs.values_mut().filter(|p| !p.freed && gone.contains(&p.stream)) {
            arena.free_proc(p.index, p.seq);
            p.freed = true;
        }
    }

    /// Takes out the processes whose table entries were given back (their streams' data
    /// is all read, and nothing of them is followed any longer), each with whether a
    /// later image of it registered (as [`Procs::replaced`] said before they were taken
    /// out). The images of `keep` (the launched command, whose END waits for how it
    /// ended) stay.
    pub(crate) fn take_freed(&mut self, keep: Option<u32>) -> Vec<(Proc, bool)> {
        let freed: Vec<(u64, bool)> = self
            .procs
            .values()
            .filter(|p| p.freed && Some(p.pid) != keep)
            .map(|p| (p.seq, self.replaced(p)))
            .collect();
        freed
            .into_iter()
            .filter_map(|(seq, replaced)| Some((self.procs.remove(&seq)?, replaced)))
            .collect()
    }

    /// Whether a later image of `p`'s process registered.
    pub(crate) fn replaced(&self, p: &Proc) -> bool {
        self.procs.values().any(|q| q.pid == p.pid && q.seq > p.seq)
    }

    /// Processes that may still run (not dead; an Execed entry whose new image has not
    /// registered yet counts as running).
    pub(crate) fn running(&self) -> impl Iterator<Item = &Proc> {
        let gone = self.gone_streams();
        self.procs.values().filter(move |p| !gone.contains(&p.stream))
    }

    /// Every process followed.
    pub(crate) fn all(&self) -> impl Iterator<Item = &Proc> {
        self.procs.values()
    }

    /// Processes seen, ended ones included.
    pub(crate) fn len(&self) -> usize {
        self.seen
    }

    /// Processes followed now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.procs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dead process's entry is given back once its stream is gone, and the next
    /// agent's claim of it is a new process, not the old one come back; an exec'd image
    /// is replaced by its successor whichever entry that got.
    #[test]
    fn gone_processes_give_their_entries_back() {
        let cfg = strobe_protocol::RecordConfig {
            output: "/tmp/x.strobe".into(),
            events: "task-clock".into(),
            hardware: false,
            kernel: false,
            overhead_ppm: 20_000,
            follow_fork: true,
            call_graph: strobe_protocol::CallGraph::None,
            max_depth: 1,
            costs: None,
            calibrate: false,
            tail_dead: 0,
            cycle_extra: 0,
            lateness: 0,
            window_dead: 0,
            seccomp_filters: 0,
            pid_ns: 0,
        };
        let sizes = strobe_protocol::ArenaSizes {
            procs: 2,
            ..strobe_protocol::ArenaSizes::for_pool(1 << 16, 4096, 1)
        };
        let arena = Arena::create(sizes, &cfg).unwrap();
        let me = std::process::id();
        // An image of this (live) process that exec'd, and a process already reaped.
        arena.claim_proc(me, 1, 10).unwrap().set_state(ProcState::Execed);
        arena.claim_proc(4_000_000, 1, 11).unwrap();
        let mut procs = Procs::default();
        procs.reaped(4_000_000);
        procs.refresh(&arena);
        let gone = procs.gone_streams();
        assert_eq!(gone.iter().copied().collect::<Vec<_>>(), [11], "the image is not replaced yet");
        procs.free_gone(&arena, &gone);
        // The exec'd image's successor takes the freed entry (index 1).
        let e = arena.claim_proc(me, 1, 12).unwrap();
        assert!(std::ptr::eq(e, &arena.procs()[1]));
        procs.refresh(&arena);
        assert_eq!(procs.len(), 3, "three agent instances, two entries");
        let mut gone: Vec<u32> = procs.gone_streams().into_iter().collect();
        gone.sort_unstable();
        assert_eq!(gone, [10, 11], "replaced by a later claim in a lower index");
        let running: Vec<u32> = procs.running().map(|p| p.stream).collect();
        assert_eq!(running, [12]);
        // Those given back are taken out (the launched command's stay), the others stay;
        // the count of those seen does not go down.
        procs.free_gone(&arena, &procs.gone_streams());
        let taken: Vec<(u32, bool)> =
            procs.take_freed(Some(me)).iter().map(|(p, r)| (p.stream, *r)).collect();
        assert_eq!(taken, [(11, false)], "the launched command's exec'd image waits");
        let taken: Vec<(u32, bool)> =
            procs.take_freed(None).iter().map(|(p, r)| (p.stream, *r)).collect();
        assert_eq!(taken, [(10, true)], "replaced by 12");
        assert_eq!((procs.held(), procs.len()), (1, 3));
        assert!(procs.take_freed(None).is_empty());
        procs.refresh(&arena);
        assert_eq!((procs.held(), procs.len()), (1, 3), "what was given back is not seen again");
    }

    #[test]
    fn a_process_cpu_time_is_read_from_proc() {
        let t0 = process_cpu_ns(std::process::id()).unwrap();
        // 100 ms of this thread's CPU time (not of wall time: the machine may be busy).
        let end = crate::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) + 100_000_000;
        let mut x = 1u64;
        while crate::clock_ns(libc::CLOCK_THREAD_CPUTIME_ID) < end {
            x = std::hint::black_box(x.wrapping_mul(3));
        }
        let t1 = process_cpu_ns(std::process::id()).unwrap();
        assert!(t1 >= t0 + 50_000_000, "{t0} -> {t1}");
    }

    #[test]
    fn our_own_process_is_alive_and_a_reaped_child_is_dead() {
        assert!(!pid_dead(std::process::id()));
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let pid = c.id();
        // Exited but not reaped: a zombie, so dead.
        while !pid_dead(pid) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!pid_reaped(pid), "a zombie is not reaped yet");
        c.wait().unwrap();
        assert!(pid_dead(pid), "reaped: gone from /proc");
        assert!(pid_reaped(pid));
        assert!(!pid_reaped(std::process::id()) && !pid_reaped(1) && !pid_reaped(0));
    }

    /// main() called pthread_exit while two workers spin for 300 ms: the leader is a
    /// zombie, the process is not dead (its threads may still write), until they end.
    #[test]
    fn a_zombie_leader_with_running_threads_is_alive() {
        let mut c = std::process::Command::new(strobe_testprogs::path("zoo_mainexit"))
            .args(["2", "300"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = c.id();
        let zombie = || {
            std::fs::read_to_string(format!("/proc/{pid}/status"))
                .is_ok_and(|s| s.lines().any(|l| l.starts_with("State:") && l.contains('Z')))
        };
        let t0 = std::time::Instant::now();
        while !zombie() {
            assert!(t0.elapsed().as_secs() < 10, "main never exited");
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(!pid_dead(pid), "a zombie leader with live threads");
        while !pid_dead(pid) {
            assert!(t0.elapsed().as_secs() < 20, "the workers never ended");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        c.wait().unwrap();
    }
}
