//! What `/proc/thread-self/status` says about a thread that decides whether the agent may
//! work in it, read the same way by the recorder (its own seccomp filter count goes into
//! [`RecordConfig`](crate::RecordConfig)) and by each agent at start (which stays off
//! under a filter the recorder does not have, and in a traced process).
//!
//! Owns: the parse of the `Name:`, `TracerPid:`, `Seccomp:` and `Seccomp_filters:`
//! lines, and the identity of the calling process's PID namespace. Must never decide
//! what to do about them: the agent does.

/// A thread's seccomp mode and number of filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seccomp {
    /// 0: none, 1: strict (only read, write, exit and sigreturn), 2: filter.
    pub mode: u32,
    /// Filters attached to the thread (`Seccomp_filters:`, Linux 5.9 and later); without
    /// that line, 1 in filter mode (at least one).
    pub filters: u32,
}

impl Seccomp {
    /// Whether this state is under a filter (or strict mode) that `recorder`'s is not:
    /// something between the recorder and this process added one.
    pub fn beyond(&self, recorder_filters: u32) -> bool {
        self.mode == 1 || (self.mode == 2 && self.filters > recorder_filters)
    }
}

/// The fields of a thread's status file that matter to the agent.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    /// The thread's name (`comm`).
    pub name: String,
    /// The process tracing it with ptrace (0: none).
    pub tracer_pid: u32,
    /// Its seccomp state.
    pub seccomp: Seccomp,
}

impl Status {
    /// The calling thread's; the default (nothing known) when the file cannot be read.
    pub fn of_this_thread() -> Status {
        std::fs::read_to_string("/proc/thread-self/status")
            .map(|s| Status::parse(&s))
            .unwrap_or_default()
    }

    /// What a status file's text says.
    pub fn parse(status: &str) -> Status {
        let text = |name: &str| {
            status.lines().find_map(|l| Some(l.strip_prefix(name)?.strip_prefix(':')?.trim()))
        };
        let number = |name: &str| text(name).and_then(|v| v.parse::<u32>().ok());
        let mode = number("Seccomp").unwrap_or(0);
        Status {
            name: text("Name").unwrap_or("").to_string(),
            tracer_pid: number("TracerPid").unwrap_or(0),
            seccomp: Seccomp {
                mode,
                filters: number("Seccomp_filters").unwrap_or(u32::from(mode == 2)),
            },
        }
    }
}

/// The inode of the calling process's PID namespace (`/proc/self/ns/pid`), 0 when it
/// cannot be read. Namespace inodes are the kernel's, the same whichever procfs shows
/// them.
pub fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_lines_parse_and_compare() {
        let none = Status::parse("Name:\tcat\nTracerPid:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n");
        assert_eq!((none.name.as_str(), none.tracer_pid), ("cat", 0));
        assert_eq!(none.seccomp, Seccomp { mode: 0, filters: 0 });
        assert!(!none.seccomp.beyond(0));
        let two = Status::parse(
            "TracerPid:\t4321\nSeccomp:\t2\nSeccomp_filters:\t2\nSpeculation_Store_Bypass:\tx\n",
        );
        assert_eq!(two.tracer_pid, 4321);
        assert_eq!(two.seccomp, Seccomp { mode: 2, filters: 2 });
        assert!(two.seccomp.beyond(1), "one filter more than the recorder's");
        assert!(!two.seccomp.beyond(2), "the recorder's own filters (a container's)");
        let old_kernel = Status::parse("Seccomp:\t2\n").seccomp;
        assert_eq!(old_kernel, Seccomp { mode: 2, filters: 1 });
        assert!(
            Status::parse("Seccomp:\t1\n").seccomp.beyond(5),
            "strict mode forbids the agent's calls"
        );
        assert_eq!(Status::parse("garbage"), Status::default());
    }

    #[test]
    fn the_pid_namespace_is_the_one_procs_link_names() {
        let link = std::fs::read_link("/proc/self/ns/pid").unwrap();
        let want = format!("pid:[{}]", pid_namespace());
        assert_eq!(link.to_string_lossy(), want);
    }

    #[test]
    fn this_thread_reads_as_the_kernel_says() {
        let s = Status::of_this_thread();
        let text = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        assert!(text.contains(&format!("Seccomp:\t{}", s.seccomp.mode)), "{s:?}");
        assert!(text.contains(&format!("TracerPid:\t{}", s.tracer_pid)), "{s:?}");
        assert!(!s.name.is_empty());
    }
}
