//! What the aggregation pass hands to the report's build: plain data, no behaviour, so
//! the pass (`aggregate`) and the build (`report`) each depend on this and not on each
//! other.
//!
//! Owns: the shape of the tallies. Must never grow logic.

use hashbrown::HashTable;
use rustc_hash::FxHashMap;

use crate::input::{Baseline, RecordInfo, SampleKind};
use crate::stacks::StackTables;
use crate::stats::WindowSums;
use crate::symbolize::{Spaces, SymbolOptions};

/// A window bucket's key: where it started (IP and stack) and where it ended, in which
/// address space, and whether it was a fixed-period interval rather than an alternation
/// window (their baselines differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct WindowKey {
    /// The address space.
    pub space: u32,
    /// The start sample's IP.
    pub start_ip: u64,
    /// The start sample's stack id.
    pub start_stack: u32,
    /// The end sample's IP.
    pub end_ip: u64,
    /// The end sample's stack id (0: none recorded).
    pub end_stack: u32,
    /// Two consecutive fixed-period samples, not an alternation window.
    pub plain: bool,
}

/// What was summed over off-CPU intervals with one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct OffCpuSums {
    /// Intervals.
    pub intervals: u64,
    /// Their total length, ns.
    pub ns: u64,
    /// The part spent preempted (runnable, waiting for a CPU), ns.
    pub preempted_ns: u64,
}

/// Samples one thread lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LostThread {
    /// The process key the samples were fed under (pid or record stream; not
    /// serialized, as a stream id is no pid).
    #[serde(skip)]
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Samples lost.
    pub lost: u64,
}

/// Everything one pass over a recording's samples counted.
#[derive(Debug)]
pub(crate) struct Tally {
    /// The recording's facts.
    pub info: RecordInfo,
    /// Address spaces and their mappings.
    pub spaces: Spaces,
    /// Stack tables per space.
    pub stacks: StackTables,
    /// Time samples per (space, IP, stack).
    pub samples: FxHashMap<(u32, u64, u32), u64>,
    /// Window buckets, and the index of each key.
    pub windows: Vec<(WindowKey, WindowSums)>,
    /// Index into `windows` per key, with a 32-bit hash of the key: the keys live in
    /// `windows` alone, so the table holds eight bytes a bucket (a map of key to index
    /// held each key twice, and its growth was a fifth of a deep-stack report's page
    /// faults).
    pub window_index: HashTable<(u32, u32)>,
    /// Windows that could not be paired.
    pub unpaired: u64,
    /// Each sample's values are its own period, not counter readings (a perf.data without
    /// a group read): two samples bound no measured interval, so no window is formed.
    pub values_are_periods: bool,
    /// Samples the recorder lost.
    pub lost: u64,
    /// The same per thread.
    pub lost_by_thread: Vec<LostThread>,
    /// Time samples in all.
    pub sample_count: u64,
    /// The empty-window baseline, if the recording has one.
    pub baseline: Option<Baseline>,
    /// Why the baseline was not subtracted, when it was not.
    pub baseline_unused: Option<String>,
    /// The baseline per counter for alternation windows, fixed-period intervals and
    /// window tails (zeros when there is none); the pass subtracts it from every window.
    pub beta_window: Vec<f64>,
    /// See `beta_window`.
    pub beta_plain: Vec<f64>,
    /// See `beta_window`.
    pub beta_tail: Vec<f64>,
    /// See `beta_window`: a window's end boundary.
    pub beta_end: Vec<f64>,
    /// Leader counts between consecutive time samples of long-lived threads, summed, and
    /// how many: the measured sampling cycle.
    pub cycle_sum: f64,
    /// See `cycle_sum`.
    pub cycle_n: u64,
    /// Paired windows and intervals (tail-only windows excluded), the sum of their
    /// leaders' raw deltas and of their net ones (for the mean and net window length).
    pub paired: u64,
    /// See `paired`.
    pub leader_raw: f64,
    /// See `paired`.
    pub leader_net: f64,
    /// The leader's correction subtracted from those windows in all: the baseline from
    /// each, and each call tail's delay (the signal's delivery) from the tails.
    pub correction_sum: f64,
    /// Windows that began inside the kernel (a system call or a fault), and of those the
    /// ones whose tail alone was a window (scaled to the mean net window).
    pub tail_windows: u64,
    /// See `tail_windows`.
    pub tail_only_windows: u64,
    /// CPU time no sample could land in (threads before their sampling was armed), in
    /// samples' worth (time over the mean sampling cycle).
    pub unsampled: f64,
    /// CPU time no sample stands for, named: (function, module, samples' worth).
    pub unaccounted: Vec<(String, String, f64)>,
    /// Each command's share, when the recording has per-thread CPU times.
    pub processes: Vec<crate::accounting::ProcessShare>,
    /// How addresses are to be named.
    pub symbols: SymbolOptions,
    /// Names kept from earlier reports.
    pub symbol_cache: Option<crate::symbolize::SymbolCache>,
    /// Thread names, by (process key, tid).
    pub thread_names: FxHashMap<(u32, u32), String>,
    /// Every sample in arrival order, when a time line was asked for.
    pub timeline: Option<RawTimeline>,
    /// Off-CPU intervals per (space, IP left at, stack).
    pub off_cpu: FxHashMap<(u32, u64, u32), OffCpuSums>,
    /// The windows' counts against the long periods' between them.
    pub window_check: crate::window_check::WindowCheck,
}

/// One sample as it arrived, for views that show time (the Firefox Profiler).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawSample {
    /// The process key the sample was fed under.
    pub pid: u32,
    /// The address space.
    pub space: u32,
    /// Thread id.
    pub tid: u32,
    /// Timestamp, ns.
    pub time: u64,
    /// Sampled IP.
    pub ip: u64,
    /// Stack id.
    pub stack: u32,
    /// Its place in the alternation.
    pub kind: SampleKind,
    /// Taken by the kernel floor: its counters are the floor's, not the agent's leader.
    pub floor: bool,
}

/// Every sample in arrival order with its counter values (`width` per sample, flat).
#[derive(Debug, Clone, Default)]
pub(crate) struct RawTimeline {
    /// The samples.
    pub samples: Vec<RawSample>,
    /// Their counter values, `width` per sample.
    pub values: Vec<u64>,
}

impl Tally {
    /// An empty tally.
    pub(crate) fn new(info: RecordInfo) -> Tally {
        Tally {
            info,
            spaces: Spaces::default(),
            stacks: StackTables::default(),
            samples: FxHashMap::default(),
            windows: Vec::new(),
            window_index: HashTable::new(),
            unpaired: 0,
            values_are_periods: false,
            lost: 0,
            lost_by_thread: Vec::new(),
            sample_count: 0,
            baseline: None,
            baseline_unused: None,
            beta_window: Vec::new(),
            beta_plain: Vec::new(),
            beta_tail: Vec::new(),
            beta_end: Vec::new(),
            cycle_sum: 0.0,
            cycle_n: 0,
            paired: 0,
            leader_raw: 0.0,
            leader_net: 0.0,
            correction_sum: 0.0,
            tail_windows: 0,
            tail_only_windows: 0,
            unsampled: 0.0,
            unaccounted: Vec::new(),
            processes: Vec::new(),
            symbols: SymbolOptions::default(),
            symbol_cache: None,
            thread_names: FxHashMap::default(),
            timeline: None,
            off_cpu: FxHashMap::default(),
            window_check: Default::default(),
        }
    }

    /// Counters per sample.
    pub(crate) fn width(&self) -> usize {
        self.info.events.len()
    }
}
