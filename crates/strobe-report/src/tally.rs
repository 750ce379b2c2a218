//! What the aggregation pass hands to the report's build: plain data, no behaviour, so
//! the pass (`aggregate`) and the build (`report`) each depend on this and not on each
//! other.
//!
//! Owns: the shape of the tallies. Must never grow logic.

use rustc_hash::FxHashMap;

use crate::input::{Baseline, RecordInfo};
use crate::stacks::StackTables;
use crate::stats::WindowSums;
use crate::symbolize::Spaces;

/// A window bucket's key: where it started (IP and stack) and where it ended, in which
/// address space, and whether it was a fixed-period interval rather than an alternation
/// window (their baselines differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowKey {
    /// The address space.
    pub space: u32,
    /// The start sample's IP.
    pub start_ip: u64,
    /// The start sample's stack id.
    pub start_stack: u32,
    /// The end sample's IP.
    pub end_ip: u64,
    /// Two consecutive fixed-period samples, not an alternation window.
    pub plain: bool,
}

/// What was summed over off-CPU intervals with one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OffCpuSums {
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
pub struct Tally {
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
    /// Index into `windows` per key.
    pub window_index: FxHashMap<WindowKey, usize>,
    /// Windows that could not be paired.
    pub unpaired: u64,
    /// Samples the recorder lost.
    pub lost: u64,
    /// The same per thread.
    pub lost_by_thread: Vec<LostThread>,
    /// Time samples in all.
    pub sample_count: u64,
    /// The empty-window baseline, if the recording has one.
    pub baseline: Option<Baseline>,
    /// CPU time no sample could land in (threads before their sampling was armed), in
    /// samples' worth (time over the mean sampling cycle).
    pub unsampled: f64,
    /// Off-CPU intervals per (space, IP left at, stack).
    pub off_cpu: FxHashMap<(u32, u64, u32), OffCpuSums>,
}

impl Tally {
    /// An empty tally.
    pub fn new(info: RecordInfo) -> Tally {
        Tally {
            info,
            spaces: Spaces::default(),
            stacks: StackTables::default(),
            samples: FxHashMap::default(),
            windows: Vec::new(),
            window_index: FxHashMap::default(),
            unpaired: 0,
            lost: 0,
            lost_by_thread: Vec::new(),
            sample_count: 0,
            baseline: None,
            unsampled: 0.0,
            off_cpu: FxHashMap::default(),
        }
    }

    /// Counters per sample.
    pub fn width(&self) -> usize {
        self.info.events.len()
    }
}
