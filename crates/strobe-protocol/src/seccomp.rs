//! The seccomp state of a process as `/proc/<pid>/status` gives it, read the same way by
//! the recorder (its own count goes into [`RecordConfig`](crate::RecordConfig)) and by
//! each agent (which stays off under a filter the recorder does not have).
//!
//! Owns: the parse of the `Seccomp:` and `Seccomp_filters:` lines. Must never decide
//! what to do about a filter: the agent does.

/// A process's seccomp mode and number of filters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seccomp {
    /// 0: none, 1: strict (only read, write, exit and sigreturn), 2: filter.
    pub mode: u32,
    /// Filters attached to the thread (`Seccomp_filters:`, Linux 5.9 and later); without
    /// that line, 1 in filter mode (at least one).
    pub filters: u32,
}

impl Seccomp {
    /// The calling thread's state; the default (none) when the file cannot be read.
    pub fn current() -> Seccomp {
        std::fs::read_to_string("/proc/thread-self/status")
            .map(|s| Seccomp::parse(&s))
            .unwrap_or_default()
    }

    /// The state a status file's text gives.
    pub fn parse(status: &str) -> Seccomp {
        let field = |name: &str| {
            status.lines().find_map(|l| {
                let v = l.strip_prefix(name)?.strip_prefix(':')?;
                v.trim().parse::<u32>().ok()
            })
        };
        let mode = field("Seccomp").unwrap_or(0);
        let filters = field("Seccomp_filters").unwrap_or(u32::from(mode == 2));
        Seccomp { mode, filters }
    }

    /// Whether this state is under a filter (or strict mode) that `recorder`'s is not:
    /// something between the recorder and this process added one.
    pub fn beyond(&self, recorder_filters: u32) -> bool {
        self.mode == 1 || (self.mode == 2 && self.filters > recorder_filters)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_lines_parse_and_compare() {
        let none = Seccomp::parse("Name:\tcat\nSeccomp:\t0\nSeccomp_filters:\t0\n");
        assert_eq!(none, Seccomp { mode: 0, filters: 0 });
        assert!(!none.beyond(0));
        let two =
            Seccomp::parse("Seccomp:\t2\nSeccomp_filters:\t2\nSpeculation_Store_Bypass:\tx\n");
        assert_eq!(two, Seccomp { mode: 2, filters: 2 });
        assert!(two.beyond(1), "one filter more than the recorder's");
        assert!(!two.beyond(2), "the recorder's own filters (a container's)");
        let old_kernel = Seccomp::parse("Seccomp:\t2\n");
        assert_eq!(old_kernel, Seccomp { mode: 2, filters: 1 });
        assert!(Seccomp::parse("Seccomp:\t1\n").beyond(5), "strict mode forbids the agent's calls");
        assert_eq!(Seccomp::parse("garbage"), Seccomp::default());
    }

    #[test]
    fn this_process_reads_as_the_kernel_says() {
        let s = Seccomp::current();
        let text = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        assert!(text.contains(&format!("Seccomp:\t{}", s.mode)), "{s:?}");
    }
}
