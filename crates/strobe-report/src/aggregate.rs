//! The one pass over the samples: pairs window starts with window ends and sums counter
//! deltas by (start IP, end IP), counts time samples by IP. Nothing is symbolized here.
//!
//! Throughput is the point of this module: a recording holds millions of samples and
//! `strobe report` must process several million per second. So per sample there is no
//! allocation and no symbolization: a lookup of the thread's slot (the previous
//! thread's slot is cached, as samples come in per-thread runs), at most one hash map
//! update keyed by plain integers, and fixed-size counter arithmetic into arenas that
//! grow only when a new key appears. Symbolization happens once per unique IP in
//! [`Aggregator::finish`], and folding to functions once per unique key.
//!
//! Pairing rule: a window is a thread's `WindowStart` immediately followed, on the same
//! thread, by a `WindowEnd`. Anything else (a start followed by another start or a plain
//! sample, an end with no open start, a counter that went backwards) is an *unpaired*
//! window: counted, never attributed.
//!
//! This module must never touch files, perf, or the target.

use rustc_hash::FxHashMap;

use crate::input::{Mapping, RecordInfo, Sample, SampleKind};
use crate::report::{Report, WindowPolicy};
use crate::symbolize::Spaces;
use crate::ReportError;

/// The most counters one sample may carry (leader included). perf groups are limited
/// by the PMU to far fewer hardware counters; software events rarely exceed a handful.
pub const MAX_COUNTERS: usize = 16;

/// Per-thread pairing state.
#[derive(Debug, Clone)]
struct ThreadSlot {
    /// A `WindowStart` is waiting for its end.
    open: bool,
    space: u32,
    start_ip: u64,
    start_values: [u64; MAX_COUNTERS],
}

/// Key of a window bucket: (address space, start IP, end IP).
type PairKey = (u32, u64, u64);

/// Accumulates samples in one streaming pass; [`Aggregator::finish`] symbolizes and
/// builds the [`Report`].
#[derive(Debug)]
pub struct Aggregator {
    pub(crate) info: RecordInfo,
    /// Counters per sample.
    n: usize,
    pub(crate) spaces: Spaces,
    /// pid -> current space, cached for the last pid seen.
    last_pid: Option<(u32, u32)>,
    threads: FxHashMap<u32, usize>,
    slots: Vec<ThreadSlot>,
    last_tid: Option<(u32, usize)>,
    /// Time samples per (space, IP).
    pub(crate) samples: FxHashMap<(u32, u64), u64>,
    /// Window bucket index per key; `win_count[i]` windows with deltas summed in
    /// `win_sums[i * n .. (i + 1) * n]`.
    pub(crate) windows: FxHashMap<PairKey, usize>,
    pub(crate) win_count: Vec<u64>,
    pub(crate) win_sums: Vec<u64>,
    pub(crate) unpaired: u64,
    pub(crate) lost: u64,
    pub(crate) sample_count: u64,
}

impl Aggregator {
    /// Starts an aggregation for a recording described by `info`.
    pub fn new(info: RecordInfo) -> Result<Aggregator, ReportError> {
        let n = info.events.len();
        if n == 0 {
            return Err(ReportError::NoEvents);
        }
        if n > MAX_COUNTERS {
            return Err(ReportError::TooManyCounters { count: n, max: MAX_COUNTERS });
        }
        Ok(Aggregator {
            info,
            n,
            spaces: Spaces::default(),
            last_pid: None,
            threads: FxHashMap::default(),
            slots: Vec::new(),
            last_tid: None,
            samples: FxHashMap::default(),
            windows: FxHashMap::default(),
            win_count: Vec::new(),
            win_sums: Vec::new(),
            unpaired: 0,
            lost: 0,
            sample_count: 0,
        })
    }

    /// Records an executable mapping of `pid` (at start, or after a dlopen).
    pub fn add_mapping(&mut self, pid: u32, mapping: Mapping) {
        self.spaces.add_mapping(pid, mapping);
        self.last_pid = None;
    }

    /// `pid` replaced its image (exec): later mappings and samples belong to a new
    /// address space, earlier ones keep resolving through the old one.
    pub fn exec(&mut self, pid: u32) {
        self.spaces.new_space(pid);
        self.last_pid = None;
    }

    /// Sets the sampling parameters actually used (they may differ from those requested:
    /// the period can come from an overhead budget), in leader units.
    pub fn set_sampling(&mut self, period: u64, window: u64, jitter: u64) {
        self.info.period = period;
        self.info.window = window;
        self.info.jitter = jitter;
    }

    /// Adds `n` samples the recorder had to drop (a thread's buffer was full).
    pub fn add_lost(&mut self, n: u64) {
        self.lost = self.lost.saturating_add(n);
    }

    /// Time samples seen so far (window starts and plain samples).
    pub fn samples_seen(&self) -> u64 {
        self.sample_count
    }

    fn space(&mut self, pid: u32) -> u32 {
        match self.last_pid {
            Some((p, s)) if p == pid => s,
            _ => {
                let s = self.spaces.space_of(pid);
                self.last_pid = Some((pid, s));
                s
            }
        }
    }

    fn slot(&mut self, tid: u32) -> usize {
        match self.last_tid {
            Some((t, i)) if t == tid => i,
            _ => {
                let next = self.slots.len();
                let i = *self.threads.entry(tid).or_insert(next);
                if i == next {
                    self.slots.push(ThreadSlot {
                        open: false,
                        space: 0,
                        start_ip: 0,
                        start_values: [0; MAX_COUNTERS],
                    });
                }
                self.last_tid = Some((tid, i));
                i
            }
        }
    }

    /// Feeds one sample. Never allocates except when a new thread, IP or window key
    /// appears.
    #[inline]
    pub fn push(&mut self, s: &Sample<'_>) {
        let space = self.space(s.pid);
        let slot_i = self.slot(s.tid);
        let n = self.n.min(s.values.len());
        let Some(slot) = self.slots.get_mut(slot_i) else { return };
        match s.kind {
            SampleKind::Plain | SampleKind::WindowStart => {
                self.sample_count += 1;
                *self.samples.entry((space, s.ip)).or_insert(0) += 1;
                if slot.open {
                    // The previous window never ended.
                    self.unpaired += 1;
                }
                slot.open = s.kind == SampleKind::WindowStart;
                if slot.open {
                    slot.space = space;
                    slot.start_ip = s.ip;
                    let (dst, src) = (&mut slot.start_values[..n], &s.values[..n]);
                    dst.copy_from_slice(src);
                    slot.start_values[n..].fill(0);
                }
            }
            SampleKind::WindowEnd => {
                if !slot.open {
                    self.unpaired += 1;
                    return;
                }
                slot.open = false;
                let mut deltas = [0u64; MAX_COUNTERS];
                for ((d, &end), &start) in
                    deltas.iter_mut().zip(&s.values[..n]).zip(&slot.start_values)
                {
                    match end.checked_sub(start) {
                        Some(v) => *d = v,
                        None => {
                            // A counter went backwards: not a window of this thread's
                            // group (reset by exec, or corrupt). Count, never attribute.
                            self.unpaired += 1;
                            return;
                        }
                    }
                }
                let key = (slot.space, slot.start_ip, s.ip);
                let width = self.n;
                let next = self.win_count.len();
                let i = *self.windows.entry(key).or_insert(next);
                if i == next {
                    self.win_count.push(0);
                    self.win_sums.resize(self.win_sums.len() + width, 0);
                }
                if let Some(c) = self.win_count.get_mut(i) {
                    *c += 1;
                }
                if let Some(sums) = self.win_sums.get_mut(i * width..(i + 1) * width) {
                    for (acc, d) in sums.iter_mut().zip(deltas) {
                        *acc = acc.wrapping_add(d);
                    }
                }
            }
        }
    }

    /// Ends the pass: windows still open count as unpaired; every unique IP is
    /// symbolized once and the buckets are folded to functions under `policy`.
    pub fn finish(mut self, policy: WindowPolicy) -> Report {
        self.unpaired += self.slots.iter().filter(|s| s.open).count() as u64;
        Report::build(self, policy)
    }

    /// Counters per sample.
    pub(crate) fn width(&self) -> usize {
        self.n
    }
}
