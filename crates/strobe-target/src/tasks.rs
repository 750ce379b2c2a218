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

#[cfg(test)]
mod tests {
    use super::*;

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
