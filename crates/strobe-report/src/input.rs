//! The engine's input: plain facts about a recording, with no tie to how they were stored.
//!
//! A record file (or anything else: a test, a benchmark, a perf.data importer) is turned
//! into these types by a thin adapter. The engine never reads files itself, so it can be
//! tested with inputs built in memory and fed from any source.
//!
//! This module must never grow I/O or knowledge of a file format; /proc/PID/maps text is
//! read by strobe-target's parser, converted here.

/// Facts about a recording that hold for all its samples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordInfo {
    /// The recorded counters in the order sample values carry them: the sampling leader
    /// first, then the group members, named as perf names them (`task-clock`,
    /// `page-faults`, `cycles`, ...). A modifier suffix (`cycles:u`) is ignored.
    pub events: Vec<String>,
    /// The long sample period actually used, in units of the leader (nanoseconds for
    /// `task-clock`, events otherwise).
    pub period: u64,
    /// The requested window length in units of the leader; 0 when sampling did not
    /// alternate.
    pub window: u64,
    /// The random extra added to the long period, in units of the leader (0 for none).
    pub jitter: u64,
    /// The profiled command line, for the report's header.
    pub command: Vec<String>,
    /// Where the samples come from, when that needs saying (a perf.data file: which of
    /// its events the shares are of), for the report's header.
    pub source: Option<String>,
}

/// One executable mapping of a process, as /proc/PID/maps describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// First address of the mapping.
    pub start: u64,
    /// One past the last address of the mapping.
    pub end: u64,
    /// Offset in the mapped file of the byte at `start`.
    pub offset: u64,
    /// The mapped file's path, or a pseudo name such as `[vdso]`, or empty for anonymous
    /// memory.
    pub path: String,
}

/// What a sample marks in the alternation between the long period and the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SampleKind {
    /// The end of a long period and so the start of a window: a time-uniform sample.
    WindowStart,
    /// The end of a window: its counter values minus those of the thread's preceding
    /// `WindowStart` are the window's deltas.
    WindowEnd,
    /// A sample of a recording that did not alternate (fixed-period sampling): a time
    /// sample that also ends the interval since the thread's previous sample, so
    /// consecutive samples bound windows too (short-only sampling, seed 004's baseline).
    Plain,
    /// The counters at the overflow the thread's next `WindowStart` handled, when that
    /// overflow was inside a system call: the window begins here. Not a time sample.
    CallTail,
    /// The counters at the overflow the thread's next sample (a window's start or end)
    /// handled, when the delay to the handler was the sampler's own: that delay is a
    /// boundary of the window, whose counts the report spreads over the sampling cycle.
    /// Not a time sample.
    Overflow,
}

/// One sample, borrowed from the reader's buffer: feeding it to the engine never
/// allocates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample<'a> {
    /// The process image the sample belongs to: its pid, or any key that names one
    /// image (the record file's stream id, which changes at exec). Mappings added for
    /// the same key resolve its IPs.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Timestamp in nanoseconds (any monotonic clock; used for nothing but ordering).
    pub time: u64,
    /// The interrupted user-space instruction pointer.
    pub ip: u64,
    /// The sample's place in the alternation.
    pub kind: SampleKind,
    /// Its callers: a node of this process's stack table ([`StackNode`]), 0 for none.
    pub stack: u32,
    /// Cumulative counter values, in the order of [`RecordInfo::events`].
    pub values: &'a [u64],
}

/// A stack-table node, a counter's baseline and the baseline (what every counter counts
/// in a window that is not the target's own work, subtracted from every window): the
/// record file's types (crate strobe-format owns them), plain data the engine takes as
/// they are, whatever the source.
pub use strobe_format::{Baseline, BaselineCounter, StackNode};

/// A kernel function: where it starts, how long it is, its name and module (empty for the
/// kernel image). Kernel-mode recordings carry the ones they hit; a perf.data report
/// reads the running kernel's when the file was recorded on it.
pub use strobe_target::kallsyms::KernelSymbol;

/// The executable mappings in the text of a /proc/PID/maps file, in file order, read with
/// strobe-target's parser (lines that do not parse are skipped).
pub fn parse_proc_maps(text: &str) -> Vec<Mapping> {
    strobe_target::maps::parse(text.as_bytes())
        .filter(|m| m.perms.exec)
        .map(|m| Mapping::from(&m))
        .collect()
}

impl From<&strobe_target::maps::MapLine<'_>> for Mapping {
    /// The engine's view of a maps line: its range, file offset, and path as the kernel
    /// printed it (pseudo names and the ` (deleted)` suffix kept).
    fn from(m: &strobe_target::maps::MapLine<'_>) -> Mapping {
        Mapping {
            start: m.start,
            end: m.end,
            offset: m.offset,
            path: m.path.to_string_lossy().into_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_maps_keeps_executable_mappings() {
        let text = "\
55d0c0000000-55d0c0001000 r--p 00000000 08:01 123 /usr/bin/prog
55d0c0001000-55d0c0005000 r-xp 00001000 08:01 123 /usr/bin/prog
7ffd1000-7ffd3000 r-xp 00000000 00:00 0                          [vdso]
7f0000000000-7f0000001000 rwxp 00000000 00:00 0
bad line";
        let maps = parse_proc_maps(text);
        assert_eq!(
            maps,
            [
                Mapping {
                    start: 0x55d0c0001000,
                    end: 0x55d0c0005000,
                    offset: 0x1000,
                    path: "/usr/bin/prog".into()
                },
                Mapping { start: 0x7ffd1000, end: 0x7ffd3000, offset: 0, path: "[vdso]".into() },
                Mapping { start: 0x7f0000000000, end: 0x7f0000001000, offset: 0, path: "".into() },
            ]
        );
    }
}
