//! The values a recording holds, as plain data shared by the encoder and the reader.
//!
//! Owns those types and their small helpers (a process's mean window, counters as a
//! slice). It must never know how they are laid out in bytes (that is `encode.rs` and
//! `read.rs`'s) and never do I/O.

use std::path::PathBuf;

use crate::{MAX_COUNTERS, MINOR_VERSION};

/// Which writer a chunk came from. `0` is the recorder (`strobe record`, which writes
/// the header); each agent instance (a process, or a new image after exec) picks a random
/// non-zero id and announces it with a [`ProcessInfo`] chunk.
pub type StreamId = u32;

/// The recorder's stream.
pub const RECORDER_STREAM: StreamId = 0;

/// One event of the recorded group, leader first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDesc {
    /// The name as the user wrote it, canonicalised (`task-clock`, `page-faults`).
    pub name: String,
    /// `perf_event_attr.type`.
    pub type_: u32,
    /// `perf_event_attr.config`.
    pub config: u64,
    /// The count is in nanoseconds (task-clock, cpu-clock).
    pub is_time: bool,
    /// Counted by a hardware PMU.
    pub is_hardware: bool,
    /// User-space activity excluded.
    pub exclude_user: bool,
    /// Kernel activity excluded.
    pub exclude_kernel: bool,
}

impl EventDesc {
    /// A Linux software event (`PERF_TYPE_SOFTWARE`) of this `perf_event_attr.config`,
    /// counted in user and kernel mode: `page-faults` is
    /// `EventDesc::software("page-faults", 2)`. Its count is in nanoseconds for the two
    /// clocks (config 0, `cpu-clock`, and 1, `task-clock`).
    pub fn software(name: &str, config: u64) -> EventDesc {
        EventDesc {
            name: name.to_string(),
            type_: 1, // PERF_TYPE_SOFTWARE
            config,
            // PERF_COUNT_SW_CPU_CLOCK and PERF_COUNT_SW_TASK_CLOCK.
            is_time: config <= 1,
            is_hardware: false,
            exclude_user: false,
            exclude_kernel: false,
        }
    }
}

/// The recording's header: what was asked for, written before the target starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    /// The minor format version of the writer.
    pub minor_version: u32,
    /// The strobe version that recorded.
    pub strobe_version: String,
    /// Wall-clock start, nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// `CLOCK_MONOTONIC` at the same instant; sample times use this clock.
    pub start_mono_ns: u64,
    /// The command that was profiled.
    pub command: Vec<String>,
    /// The event group, leader first (the leader samples, members are counted).
    pub events: Vec<EventDesc>,
    /// The requested long period in leader units (ns for time events), `None` when derived
    /// from the overhead budget.
    pub period: Option<u64>,
    /// The requested window in leader units, `None` for the default; `Some(0)` disables
    /// windows (plain fixed-period sampling).
    pub window: Option<u64>,
    /// The requested jitter (random extra on the long period), `None` for the default.
    pub jitter: Option<u64>,
    /// Samples buffered before the recorder is woken to save them.
    pub wakeup: u64,
    /// Bytes of the shared sample buffer; past that, samples are counted lost.
    pub buffer_bytes: u64,
    /// The overhead budget in parts per million of the target's CPU time (2% = 20000).
    pub overhead_ppm: u64,
    /// Forked children are profiled too.
    pub follow_fork: bool,
    /// How the samples were taken.
    pub mode: RecordMode,
    /// Why that mode (one line, for the report's header).
    pub mode_reason: String,
    /// How stacks were walked.
    pub call_graph: CallGraph,
    /// The most caller frames a sample keeps.
    pub max_depth: u32,
}

impl Header {
    /// A header of this format version for a recording sampled on user-mode task-clock
    /// (the only event), with every other field zero, empty, off or `None`: where a header
    /// written by hand (a converted file, a test's recording) starts, setting the rest
    /// with `Header { period: Some(1_000_000), ..Header::task_clock() }`.
    pub fn task_clock() -> Header {
        Header {
            minor_version: MINOR_VERSION,
            // PERF_COUNT_SW_TASK_CLOCK
            events: vec![EventDesc {
                exclude_kernel: true,
                ..EventDesc::software("task-clock", 1)
            }],
            ..Header::empty()
        }
    }

    /// Every field zero, empty, off or `None` (the reader fills it in field by field).
    pub(crate) fn empty() -> Header {
        Header {
            minor_version: 0,
            strobe_version: String::new(),
            start_unix_ns: 0,
            start_mono_ns: 0,
            command: Vec::new(),
            events: Vec::new(),
            period: None,
            window: None,
            jitter: None,
            wakeup: 0,
            buffer_bytes: 0,
            overhead_ppm: 0,
            follow_fork: false,
            mode: RecordMode::Agent,
            mode_reason: String::new(),
            call_graph: CallGraph::None,
            max_depth: 0,
        }
    }
}

/// How a recording was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordMode {
    /// By the agent injected into the target (per-thread events, windows).
    Agent,
    /// From the kernel's perf ring buffers, without injection.
    Kernel,
}

/// How the stacks of samples were walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallGraph {
    /// No stacks.
    None,
    /// The frame-pointer chain.
    Fp,
    /// DWARF unwind tables (`.eh_frame`).
    Dwarf,
}

impl CallGraph {
    /// The name `--call-graph` uses.
    pub fn name(self) -> &'static str {
        match self {
            CallGraph::None => "none",
            CallGraph::Fp => "fp",
            CallGraph::Dwarf => "dwarf",
        }
    }
}

/// One node of a stream's stack table: a caller frame under its parent. Node ids start
/// at 1 in the order nodes are written; 0 is the root (no frame). A sample's stack id
/// names its innermost caller; following parents leads outwards to the thread's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackNode {
    /// The node one frame further out (0: the outermost frame).
    pub parent: u32,
    /// The frame's return address.
    pub addr: u64,
}

/// One counter's empty-interval baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BaselineCounter {
    /// Mean count per interval that is not the target's own (leader units for the leader).
    pub mean: f64,
    /// Its standard deviation over the measured intervals.
    pub sd: f64,
}

/// What every counter counts in an interval that is not the target's work (the kernel's
/// overflow path and the handler's re-arming and return), measured before the target
/// started. `strobe report` subtracts it from every window (or, in fixed-period sampling,
/// from every interval between two samples).
#[derive(Debug, Clone, PartialEq)]
pub struct Baseline {
    /// Measured on windows (true) or on fixed-period intervals (false).
    pub windows: bool,
    /// The interval asked for, leader units (the window, or the period).
    pub requested: u64,
    /// Intervals measured.
    pub intervals: u64,
    /// Mean time the calibration loop ran per interval, ns.
    pub work_ns: f64,
    /// Per counter, leader first.
    pub counters: Vec<BaselineCounter>,
    /// Per counter, leader first: the counts between an overflow in user code and the
    /// handler's group read, which a `CallTail`..`WindowStart` or `Overflow`..`WindowStart` interval carries besides
    /// the system call's remainder (empty: no window began inside a call).
    pub tail: Vec<BaselineCounter>,
    /// Per counter, leader first: the counts between a window's ending overflow and the
    /// end handler's read (an `Overflow`..`WindowEnd` interval; empty: not measured).
    pub end: Vec<BaselineCounter>,
    /// What the leader does not count per time sample (leader units): the thread's CPU
    /// time while the group is stopped.
    pub uncounted: f64,
}

/// How a process's recording began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessOrigin {
    /// The command strobe launched.
    Start,
    /// A child forked by a profiled process (`--follow-fork`).
    Fork,
    /// A new image in a process that called exec (or a descendant's fresh image).
    Exec,
}

/// Where the long period came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeriodSource {
    /// Derived from the overhead budget and the measured per-sample cost.
    Budget,
    /// Given with `period=`.
    Explicit,
}

/// One profiled process (one agent instance) and the parameters it actually used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Why this stream began.
    pub origin: ProcessOrigin,
    /// The executable (`/proc/self/exe`).
    pub exe: PathBuf,
    /// `CLOCK_MONOTONIC` when the agent started.
    pub start_mono_ns: u64,
    /// The long period used, in leader units.
    pub period: u64,
    /// The window used, in leader units (0: fixed-period sampling, no windows).
    pub window: u64,
    /// The jitter used: each long period is `period + uniform(0..=jitter)`.
    pub jitter: u64,
    /// Where the period came from.
    pub period_source: PeriodSource,
    /// Measured CPU cost of one sample on strobe's handler path, in ns (0: not measured).
    pub sample_cost_ns: u64,
    /// Measured cost of the floor (signal delivery + one group read), in ns (0: not measured).
    pub floor_cost_ns: u64,
    /// Predicted slowdown at these settings, in parts per million.
    pub predicted_overhead_ppm: u64,
    /// The stream holds the kernel floor's samples of the process (minor version 1):
    /// time samples the kernel took, with its inherited events, of threads the agent
    /// did not serve at that moment. Their counters open no interval: window metrics
    /// come from the agent's streams. `false` in older files.
    pub floor: bool,
}

/// One thread's CPU time as the kernel and the agent counted it (THREADCPU chunk, minor
/// version 1). Several entries for one (process, thread) add up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThreadCpu {
    /// Thread id.
    pub tid: u32,
    /// CPU time (ns) the kernel counted for the thread (its inherited events' counts at
    /// its exit, or read at the end of the recording): exact, samples or not.
    pub cpu_ns: u64,
    /// CPU time (ns) during which the agent served the thread (from the arming of its
    /// sampling to its end): the agent's samples stand for it.
    pub served_ns: u64,
    /// CPU time (ns) the agent itself spent setting the thread up before serving it.
    pub agent_ns: u64,
}

/// A thread id and its name (`comm`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadInfo {
    /// Thread id.
    pub tid: u32,
    /// Thread name; a later entry for the same tid replaces an earlier one.
    pub name: String,
}

/// One executable mapping, from `/proc/self/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Offset in the file of `start`.
    pub file_offset: u64,
    /// The mapped file, or a pseudo-path such as `[vdso]`.
    pub path: PathBuf,
}

/// A snapshot of a process's executable mappings. It applies to the samples in chunks
/// that follow it in the file (until the next snapshot of the same stream).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MapsSnapshot {
    /// `CLOCK_MONOTONIC` when `/proc/self/maps` was read.
    pub time_mono_ns: u64,
    /// The mappings, sorted by start address.
    pub maps: Vec<Mapping>,
}

/// Samples of one thread dropped because its buffer was full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LostCount {
    /// Thread id.
    pub tid: u32,
    /// Samples lost since the previous count for this thread (counts add up).
    pub lost: u64,
}

/// Why a process's recording ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndReason {
    /// The process exited.
    Exit,
    /// The process called exec; the new image may start a new stream.
    Exec,
    /// The agent stopped sampling for another reason (see its notes).
    Stopped,
    /// The process was killed by a signal (`status` is its number).
    Killed,
    /// The process disappeared without its agent saying why (killed, or it left the
    /// recording's reach).
    Vanished,
}

/// A process's end-of-recording statistics. A later END of the same stream replaces an
/// earlier one (an exec that failed lets the process go on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessEnd {
    /// Why it ended.
    pub reason: EndReason,
    /// `CLOCK_MONOTONIC` at the end.
    pub time_mono_ns: u64,
    /// Samples written.
    pub samples: u64,
    /// Samples lost (full buffers), all threads.
    pub lost: u64,
    /// Times the recorder was woken to drain the shared buffer (the whole recording's
    /// count, on every stream).
    pub wakeups: u64,
    /// Completed windows (a window-start sample followed by its window-end sample).
    pub windows: u64,
    /// Sum over completed windows of the leader's delta (ns for time events): divide by
    /// `windows` for the mean measured window.
    pub window_sum: u64,
    /// The exit code (reason Exit) or signal number (reason Killed), when known.
    pub status: Option<u64>,
    /// CPU time (ns) the process's threads ran before their sampling was armed (thread
    /// start-up and the agent's set-up): time no sample could land in.
    pub unsampled_ns: u64,
    /// The process's own CPU time (ns, all its threads, not its children) as the kernel
    /// counted it, when the recorder could read it (the launched command).
    pub cpu_ns: Option<u64>,
    /// The launched command's whole tree's CPU time (ns): its own and that of every
    /// descendant it reaped, as its `wait4` rusage counts it (minor version 1). Per-task
    /// counts miss each process's first and last instants (the kernel starts and stops
    /// counting inside fork and exit); the report names the difference.
    pub tree_cpu_ns: Option<u64>,
}

impl ProcessEnd {
    /// The mean measured window length in leader units, if any window completed.
    pub fn mean_window(&self) -> Option<f64> {
        (self.windows > 0).then(|| self.window_sum as f64 / self.windows as f64)
    }
}

/// How serious a note is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NoteLevel {
    /// For information.
    Info,
    /// Something the user should know (a period above the budget, a thread not profiled).
    Warning,
    /// The agent could not do its job in this process (the target ran unprofiled).
    Error,
}

/// A module that has no file (the vDSO): its name as `/proc/PID/maps` shows it and the
/// bytes of its mapping, an ELF image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    /// The mapping's name, e.g. `[vdso]`.
    pub name: String,
    /// The mapping's bytes.
    pub bytes: Vec<u8>,
}

/// A message from an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Severity.
    pub level: NoteLevel,
    /// One line, phrased for the user.
    pub message: String,
}

/// What a sample marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SampleKind {
    /// A fixed-period sample (no windows).
    Plain = 0,
    /// The end of a long period: a window begins here.
    WindowStart = 1,
    /// The end of a window: its counters minus the window start's are the window's deltas.
    WindowEnd = 2,
    /// The counters at the overflow the next `WindowStart` of the thread handled, when
    /// that overflow happened inside a system call: the window begins here, and the call's
    /// remainder (from this sample to the start) is its first part. Not a time sample.
    CallTail = 3,
    /// The counters at the overflow the thread's next sample handled, when the delay from
    /// the overflow to the handler was the sampler's own: what happened in that delay
    /// (before a `WindowStart`, or before a `WindowEnd`) is a boundary of the window,
    /// counted once per sampling cycle. Not a time sample.
    Overflow = 4,
}

impl SampleKind {
    pub(crate) fn from_bits(b: u64) -> Option<SampleKind> {
        match b {
            0 => Some(SampleKind::Plain),
            1 => Some(SampleKind::WindowStart),
            2 => Some(SampleKind::WindowEnd),
            3 => Some(SampleKind::CallTail),
            4 => Some(SampleKind::Overflow),
            _ => None,
        }
    }

    /// Whether the sample marks a place where the thread's time went (a time sample):
    /// plain samples and window starts.
    pub fn is_time_sample(self) -> bool {
        matches!(self, SampleKind::Plain | SampleKind::WindowStart)
    }
}

/// The counter values of a sample (cumulative since the thread's group was opened,
/// leader first), stored inline: no allocation per sample.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    len: u8,
    values: [u64; MAX_COUNTERS],
}

impl Counters {
    /// Counters from a slice; `None` if it holds more than [`MAX_COUNTERS`].
    pub fn from_slice(values: &[u64]) -> Option<Counters> {
        let mut c = Counters { len: u8::try_from(values.len()).ok()?, values: [0; MAX_COUNTERS] };
        c.values.get_mut(..values.len())?.copy_from_slice(values);
        Some(c)
    }

    /// The values, leader first.
    #[inline]
    pub fn as_slice(&self) -> &[u64] {
        &self.values[..usize::from(self.len).min(MAX_COUNTERS)]
    }
}

impl std::ops::Deref for Counters {
    type Target = [u64];
    fn deref(&self) -> &[u64] {
        self.as_slice()
    }
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

/// One decoded sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// The thread that was interrupted.
    pub tid: u32,
    /// `CLOCK_MONOTONIC` in the handler, ns.
    pub time: u64,
    /// The interrupted instruction pointer.
    pub ip: u64,
    /// What the sample marks.
    pub kind: SampleKind,
    /// Its callers: a node id in the stream's stack table (0: none recorded).
    pub stack: u32,
    /// The group's cumulative counter values, leader first.
    pub counters: Counters,
}

/// A kernel function (or other text symbol) from `/proc/kallsyms`: `[start, start + size)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSymbol {
    /// Its first address.
    pub start: u64,
    /// Bytes up to the next symbol.
    pub size: u64,
    /// Its name.
    pub name: String,
    /// The module it belongs to (`""` for the kernel image itself).
    pub module: String,
}

/// One interval a thread spent switched out (off-CPU), with where it was when it left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffCpuInterval {
    /// `CLOCK_MONOTONIC` ns when the thread was switched out.
    pub start: u64,
    /// ns until it was switched back in.
    pub duration: u64,
    /// The user-space instruction it left at (the system call it blocked in, or where it
    /// was preempted).
    pub ip: u64,
    /// Its callers: a node of the stream's stack table (0: none).
    pub stack: u32,
    /// Switched out while runnable (preempted: waiting for a CPU) rather than blocked.
    pub preempted: bool,
}
