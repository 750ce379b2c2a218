//! Running processes and their threads, as `/proc` shows them: which processes exist,
//! which threads a process has, each one's name, parent and executable. What a recorder
//! attaching to running processes (`strobe record -p`, `-a`) needs to know of what ran
//! before it came.
//!
//! This module reads procfs only; it must never signal, trace or otherwise touch a
//! process, and never turn a vanished process into a panic (a process may exit between
//! any two reads: that is an `Err` or `None`).

use std::io;
use std::path::PathBuf;

/// The ids of every process now running (the numeric entries of `/proc`).
pub fn all_pids() -> io::Result<Vec<u32>> {
    numeric_entries("/proc")
}

/// The thread ids of process `pid` (`/proc/PID/task`).
pub fn threads_of(pid: u32) -> io::Result<Vec<u32>> {
    numeric_entries(&format!("/proc/{pid}/task"))
}

fn numeric_entries(dir: &str) -> io::Result<Vec<u32>> {
    let mut out: Vec<u32> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    out.sort_unstable();
    Ok(out)
}

/// The name (`comm`) of thread `tid` of process `pid`.
pub fn thread_name(pid: u32, tid: u32) -> Option<String> {
    let s = std::fs::read(format!("/proc/{pid}/task/{tid}/comm")).ok()?;
    let s = s.strip_suffix(b"\n").unwrap_or(&s);
    Some(String::from_utf8_lossy(s).into_owned())
}

/// The executable of process `pid` (`/proc/PID/exe`; unreadable for another user's
/// process and for kernel threads).
pub fn executable(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// The parent of process `pid` (`PPid:` in `/proc/PID/status`).
pub fn parent_of(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("PPid:")).and_then(|v| v.trim().parse().ok())
}

/// The thread-group id (process) of thread `tid` (`Tgid:` in `/proc/TID/status`).
pub fn process_of(tid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok())
}

/// The CPU time (ns) thread `tid` of process `pid` has run, as the scheduler counts it
/// (`/proc/PID/task/TID/schedstat`, first field): exact, and readable until the thread is
/// reaped (a zombie leader still gives its whole life's).
pub fn thread_runtime_ns(pid: u32, tid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// The CPU time (ns) process `pid` has run, all its threads together, those that ended
/// included (the kernel's process CPU clock, `clock_getcpuclockid`): exact, and readable
/// until the process is reaped. A zombie's remaining thread's `schedstat` holds only its
/// own time; this holds its whole life's.
pub fn process_cpu_ns(pid: u32) -> Option<u64> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: `clock` is a valid out-pointer; the call only fills it.
    if unsafe { libc::clock_getcpuclockid(pid, &mut clock) } != 0 {
        return None;
    }
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer for the call.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some((ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Not a test by itself: the child of the next one (two threads that spin and end).
    #[test]
    #[ignore = "run as a child by a_zombies_process_cpu_time_counts_its_ended_threads"]
    fn spin_on_two_threads_and_end() {
        // 150 ms of each thread's own CPU time, however loaded the machine.
        let spin = || {
            let mut x = 0u64;
            loop {
                let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
                // SAFETY: `ts` is a valid out-pointer for the call.
                unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
                if ts.tv_sec > 0 || ts.tv_nsec >= 150_000_000 {
                    break;
                }
                for _ in 0..10_000 {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
            }
        };
        let ts: Vec<_> = (0..2).map(|_| std::thread::spawn(spin)).collect();
        for t in ts {
            t.join().unwrap();
        }
    }

    /// A child whose two threads ran and ended before it exited: its process clock, read
    /// while it is a zombie, is its whole CPU time as `wait4` then reports it, where its
    /// leader's own `schedstat` holds little of it.
    #[test]
    // The child is reaped below with wait4, after it is read as a zombie.
    #[allow(clippy::zombie_processes)]
    fn a_zombies_process_cpu_time_counts_its_ended_threads() {
        let child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "tasks::tests::spin_on_two_threads_and_end", "--ignored"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        // SAFETY: a zeroed siginfo is a valid out-parameter for waitid.
        let mut si: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid on our own child with a valid pointer; WNOWAIT leaves it a zombie.
        let rc = unsafe { libc::waitid(libc::P_PID, pid, &mut si, libc::WEXITED | libc::WNOWAIT) };
        assert_eq!(rc, 0);
        let whole = process_cpu_ns(pid).expect("a zombie's process clock");
        let leader = thread_runtime_ns(pid, pid).unwrap_or(0);
        let mut status = 0;
        // SAFETY: a zeroed rusage is a valid out-parameter.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 on our own child with valid pointers.
        assert_eq!(unsafe { libc::wait4(pid as i32, &mut status, 0, &mut ru) }, pid as i32);
        assert_eq!(status, 0);
        let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
        let rusage_ns = (us(ru.ru_utime) + us(ru.ru_stime)) * 1000;
        // rusage has microseconds and is taken at the reaping: within a millisecond.
        assert!(whole.abs_diff(rusage_ns) <= 1_000_000, "clock {whole} rusage {rusage_ns}");
        // The two spinning threads ran 300 ms between them; the leader mostly waited.
        assert!(whole >= 250_000_000 && leader * 2 < whole, "leader {leader} of {whole}");
        assert_eq!(process_cpu_ns(u32::MAX - 1), None);
    }

    #[test]
    fn this_process_its_threads_and_its_parent_are_seen() {
        let me = std::process::id();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let t = std::thread::Builder::new()
            .name("tasks-test".into())
            .spawn(move || {
                // SAFETY: gettid has no arguments and cannot fail.
                ready_tx.send(unsafe { libc::syscall(libc::SYS_gettid) } as u32).unwrap();
                rx.recv().ok();
            })
            .unwrap();
        let tid = ready_rx.recv().unwrap();
        assert!(all_pids().unwrap().contains(&me));
        let threads = threads_of(me).unwrap();
        assert!(threads.contains(&me) && threads.contains(&tid), "{threads:?}");
        assert_eq!(thread_name(me, tid).as_deref(), Some("tasks-test"));
        assert_eq!(process_of(tid), Some(me));
        assert_eq!(parent_of(me), Some(std::os::unix::process::parent_id()));
        assert_eq!(executable(me), std::env::current_exe().ok());
        tx.send(()).unwrap();
        t.join().unwrap();
        assert!(threads_of(u32::MAX - 1).is_err(), "no such process");
        assert_eq!(thread_name(u32::MAX - 1, 1), None);
    }
}
