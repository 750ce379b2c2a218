//! How a target ended, translated once: the exit code a wrapper returns to mirror it (the
//! code itself, or 128 + the signal number, as shells report it) and a description that
//! names the signal (`signal 9 (SIGKILL)`).
//!
//! This module uses std alone and never waits for anything: it reads a status it is given.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal {
        /// The signal number.
        signal: i32,
        /// It dumped core.
        core_dumped: bool,
    },
}

impl Exit {
    /// The translation of a status `wait` returned. A stopped or continued status (which a
    /// plain `wait` never returns) reads as exit code 1.
    pub fn from_status(status: ExitStatus) -> Exit {
        match (status.code(), status.signal()) {
            (Some(c), _) => Exit::Code(c),
            (None, Some(signal)) => Exit::Signal { signal, core_dumped: status.core_dumped() },
            _ => Exit::Code(1),
        }
    }

    /// The code a wrapper exits with to mirror this one: the code, or 128 + the signal.
    pub fn code(self) -> u8 {
        match self {
            Exit::Code(c) => (c & 0xff) as u8,
            Exit::Signal { signal, .. } => (128 + signal).clamp(0, 255) as u8,
        }
    }

    /// True for exit code 0.
    pub fn success(self) -> bool {
        self == Exit::Code(0)
    }

    /// The signal that ended the process, if one did.
    pub fn signal(self) -> Option<i32> {
        match self {
            Exit::Signal { signal, .. } => Some(signal),
            Exit::Code(_) => None,
        }
    }
}

impl From<ExitStatus> for Exit {
    fn from(status: ExitStatus) -> Exit {
        Exit::from_status(status)
    }
}

impl std::fmt::Display for Exit {
    /// `status 3`, `signal 15 (SIGTERM)`, `signal 11 (SIGSEGV, core dumped)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Exit::Code(c) => write!(f, "status {c}"),
            Exit::Signal { signal, core_dumped } => {
                let core = if core_dumped { ", core dumped" } else { "" };
                match signal_name(signal) {
                    Some(name) => write!(f, "signal {signal} ({name}{core})"),
                    None => write!(
                        f,
                        "signal {signal}{}",
                        if core_dumped { " (core dumped)" } else { "" }
                    ),
                }
            }
        }
    }
}

/// Linux's signal names, by number (x86-64, arm64 and the other architectures that use
/// the generic numbering).
const NAMES: [&str; 32] = [
    "",
    "SIGHUP",
    "SIGINT",
    "SIGQUIT",
    "SIGILL",
    "SIGTRAP",
    "SIGABRT",
    "SIGBUS",
    "SIGFPE",
    "SIGKILL",
    "SIGUSR1",
    "SIGSEGV",
    "SIGUSR2",
    "SIGPIPE",
    "SIGALRM",
    "SIGTERM",
    "SIGSTKFLT",
    "SIGCHLD",
    "SIGCONT",
    "SIGSTOP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGVTALRM",
    "SIGPROF",
    "SIGWINCH",
    "SIGIO",
    "SIGPWR",
    "SIGSYS",
];

/// The name of signal `sig` (`SIGTERM`), or `None` for a number that names no signal.
/// Real-time signals read `SIGRTMIN+N` counted from the kernel's first (32), as `kill -l`
/// numbers them before glibc reserves some.
pub fn signal_name(sig: i32) -> Option<&'static str> {
    const RT: [&str; 33] = [
        "SIGRTMIN",
        "SIGRTMIN+1",
        "SIGRTMIN+2",
        "SIGRTMIN+3",
        "SIGRTMIN+4",
        "SIGRTMIN+5",
        "SIGRTMIN+6",
        "SIGRTMIN+7",
        "SIGRTMIN+8",
        "SIGRTMIN+9",
        "SIGRTMIN+10",
        "SIGRTMIN+11",
        "SIGRTMIN+12",
        "SIGRTMIN+13",
        "SIGRTMIN+14",
        "SIGRTMIN+15",
        "SIGRTMIN+16",
        "SIGRTMIN+17",
        "SIGRTMIN+18",
        "SIGRTMIN+19",
        "SIGRTMIN+20",
        "SIGRTMIN+21",
        "SIGRTMIN+22",
        "SIGRTMIN+23",
        "SIGRTMIN+24",
        "SIGRTMIN+25",
        "SIGRTMIN+26",
        "SIGRTMIN+27",
        "SIGRTMIN+28",
        "SIGRTMIN+29",
        "SIGRTMIN+30",
        "SIGRTMIN+31",
        "SIGRTMAX",
    ];
    match sig {
        1..=31 => NAMES.get(sig as usize).copied(),
        32..=64 => RT.get((sig - 32) as usize).copied(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(script: &str) -> Exit {
        Exit::from_status(std::process::Command::new("sh").args(["-c", script]).status().unwrap())
    }

    #[test]
    fn codes_and_signals_translate_as_shells_report_them() {
        let e = run("exit 7");
        assert_eq!((e, e.code(), e.to_string()), (Exit::Code(7), 7, "status 7".to_string()));
        assert!(run("exit 0").success());
        let e = run("kill -TERM $$");
        assert_eq!(e.signal(), Some(libc::SIGTERM));
        assert_eq!(e.code(), 128 + libc::SIGTERM as u8);
        assert_eq!(e.to_string(), "signal 15 (SIGTERM)");
        let e = run("kill -KILL $$");
        assert_eq!((e.code(), e.to_string()), (137, "signal 9 (SIGKILL)".to_string()));
    }

    #[test]
    fn names_match_the_c_library() {
        for (sig, name) in [
            (libc::SIGHUP, "SIGHUP"),
            (libc::SIGSEGV, "SIGSEGV"),
            (libc::SIGCHLD, "SIGCHLD"),
            (libc::SIGSYS, "SIGSYS"),
            (libc::SIGPWR, "SIGPWR"),
            (libc::SIGSTKFLT, "SIGSTKFLT"),
        ] {
            assert_eq!(signal_name(sig), Some(name));
        }
        assert_eq!(signal_name(34), Some("SIGRTMIN+2"));
        assert_eq!(signal_name(64), Some("SIGRTMAX"));
        assert_eq!((signal_name(0), signal_name(65)), (None, None));
        let core = Exit::Signal { signal: 11, core_dumped: true };
        assert_eq!(core.to_string(), "signal 11 (SIGSEGV, core dumped)");
        assert_eq!(Exit::Code(256 + 3).code(), 3, "only the low byte of a code survives");
    }
}
