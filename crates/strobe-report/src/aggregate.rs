//! The one pass over the samples: counts time samples by (address space, IP, stack),
//! pairs each window's start with its end and sums the counter deltas (and their
//! products, for error bars) by (space, start IP, start stack, end IP). Nothing is
//! symbolized here.
//!
//! Throughput is the point of this module: a recording holds millions of samples and
//! `strobe report` must process several million per second. So per sample there is no
//! allocation and no symbolization: a lookup of the thread's slot (the previous
//! thread's slot is cached, as samples come in per-thread runs), at most one hash map
//! update keyed by plain integers, and fixed-size counter arithmetic into arenas that
//! grow only when a new key appears. Symbolization happens once per unique address in
//! [`Report`](crate::Report)'s build.
//!
//! Pairing rule: a window is a thread's `WindowStart` immediately followed, on the same
//! thread, by a `WindowEnd`; and, in fixed-period recordings, a thread's `Plain` sample
//! immediately followed by its next `Plain` sample (every sample ends one interval and
//! starts the next). Anything else (a start followed by another start, an end with no
//! open start, a counter that went backwards) is an *unpaired* window: counted, never
//! attributed.
//!
//! This module must never touch files, perf, or the target.

use rustc_hash::FxHashMap;

use crate::input::{Baseline, KernelSymbol, Mapping, RecordInfo, Sample, SampleKind, StackNode};
use crate::report::{Report, WindowPolicy};
use crate::stats::WindowSums;
use crate::tally::{LostThread, Tally, WindowKey};
use crate::ReportError;

/// The most counters one sample may carry (leader included). perf groups are limited
/// by the PMU to far fewer hardware counters; software events rarely exceed a handful.
pub const MAX_COUNTERS: usize = 16;

/// Per-thread pairing state.
#[derive(Debug, Clone)]
struct ThreadSlot {
    /// An interval is open: a `WindowStart`, or (`plain`) the previous `Plain` sample.
    open: bool,
    plain: bool,
    space: u32,
    start_ip: u64,
    start_stack: u32,
    start_values: [u64; MAX_COUNTERS],
}

/// Accumulates samples in one streaming pass; [`Aggregator::finish`] symbolizes and
/// builds the [`Report`].
#[derive(Debug)]
pub struct Aggregator {
    t: Tally,
    /// pid -> current space, cached for the last pid seen.
    last_pid: Option<(u32, u32)>,
    threads: FxHashMap<u32, usize>,
    slots: Vec<ThreadSlot>,
    last_tid: Option<(u32, usize)>,
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
            t: Tally::new(info),
            last_pid: None,
            threads: FxHashMap::default(),
            slots: Vec::new(),
            last_tid: None,
        })
    }

    /// Records an executable mapping of `pid` (at start, or after a dlopen).
    pub fn add_mapping(&mut self, pid: u32, mapping: Mapping) {
        self.t.spaces.add_mapping(pid, mapping);
        self.last_pid = None;
    }

    /// Records the bytes of a module with no file (the vDSO), by its mapping name.
    pub fn add_image(&mut self, name: String, bytes: Vec<u8>) {
        self.t.spaces.add_image(name, bytes);
    }

    /// Adds kernel symbols: kernel addresses are named from them.
    pub fn add_kernel_symbols(&mut self, syms: impl IntoIterator<Item = KernelSymbol>) {
        self.t.spaces.add_kernel_symbols(syms);
    }

    /// Names kernel addresses no added symbol covers from `table` (the running kernel's,
    /// for a source recorded on it).
    pub fn set_kallsyms(&mut self, table: strobe_target::kallsyms::Kallsyms) {
        self.t.spaces.set_kallsyms(table);
    }

    /// Adds an interval thread `tid` of `pid` spent switched out (`ns` long), leaving at
    /// `ip` with callers `stack` (preempted: runnable, waiting for a CPU).
    pub fn add_off_cpu(&mut self, pid: u32, ip: u64, stack: u32, ns: u64, preempted: bool) {
        let space = self.space(pid);
        let e = self.t.off_cpu.entry((space, ip, stack)).or_default();
        e.intervals += 1;
        e.ns = e.ns.saturating_add(ns);
        if preempted {
            e.preempted_ns = e.preempted_ns.saturating_add(ns);
        }
    }

    /// `pid` replaced its image (exec): later mappings and samples belong to a new
    /// address space, earlier ones keep resolving through the old one.
    pub fn exec(&mut self, pid: u32) {
        self.t.spaces.new_space(pid);
        self.last_pid = None;
    }

    /// Adds nodes of `pid`'s stack table: node `first_id + i` is `nodes[i]`.
    pub fn add_stack_nodes(&mut self, pid: u32, first_id: u32, nodes: &[StackNode]) {
        let space = self.space(pid);
        self.t.stacks.add_nodes(space, first_id, nodes);
    }

    /// Interns the stack whose callers are `frames` (innermost first) in `pid`'s table,
    /// for sources that carry whole call chains (perf.data); returns its id.
    pub fn intern_stack(&mut self, pid: u32, frames: &[u64]) -> u32 {
        let space = self.space(pid);
        self.t.stacks.intern(space, frames)
    }

    /// Sets the sampling parameters actually used (they may differ from those requested:
    /// the period can come from an overhead budget), in leader units.
    pub fn set_sampling(&mut self, period: u64, window: u64, jitter: u64) {
        self.t.info.period = period;
        self.t.info.window = window;
        self.t.info.jitter = jitter;
    }

    /// Sets the empty-window baseline to subtract from every window.
    pub fn set_baseline(&mut self, b: Baseline) {
        self.t.baseline = Some(b);
    }

    /// Adds CPU time no sample could land in (threads before their sampling was armed),
    /// as samples' worth: the time over the mean sampling cycle. The report shows it as
    /// its own row, so every share is of all CPU time.
    pub fn add_unsampled(&mut self, samples: f64) {
        if samples.is_finite() && samples > 0.0 {
            self.t.unsampled += samples;
        }
    }

    /// Adds `n` samples the recorder had to drop from thread `tid` of process `pid`
    /// (the buffer was full). Counts for the same thread add up.
    pub fn add_lost(&mut self, pid: u32, tid: u32, n: u64) {
        self.t.lost = self.t.lost.saturating_add(n);
        match self.t.lost_by_thread.iter_mut().find(|l| l.pid == pid && l.tid == tid) {
            Some(l) => l.lost = l.lost.saturating_add(n),
            None => self.t.lost_by_thread.push(LostThread { pid, tid, lost: n }),
        }
    }

    /// The recording's facts as set so far.
    pub fn info(&self) -> &RecordInfo {
        &self.t.info
    }

    /// Time samples seen so far (window starts and plain samples).
    pub fn samples_seen(&self) -> u64 {
        self.t.sample_count
    }

    fn space(&mut self, pid: u32) -> u32 {
        match self.last_pid {
            Some((p, s)) if p == pid => s,
            _ => {
                let s = self.t.spaces.space_of(pid);
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
                        plain: false,
                        space: 0,
                        start_ip: 0,
                        start_stack: 0,
                        start_values: [0; MAX_COUNTERS],
                    });
                }
                self.last_tid = Some((tid, i));
                i
            }
        }
    }

    /// Feeds one sample. Never allocates except when a new thread, key or window key
    /// appears.
    #[inline]
    pub fn push(&mut self, s: &Sample<'_>) {
        let space = self.space(s.pid);
        let slot_i = self.slot(s.tid);
        let width = self.t.width();
        let n = width.min(s.values.len());
        let Some(slot) = self.slots.get_mut(slot_i) else { return };
        let t = &mut self.t;
        // An open interval this sample ends: a window start's end, or the previous plain
        // sample's successor.
        let closes = match s.kind {
            SampleKind::WindowEnd => {
                if !slot.open || slot.plain {
                    t.unpaired += 1;
                    slot.open = false;
                    return;
                }
                true
            }
            SampleKind::Plain => slot.open && slot.plain,
            SampleKind::WindowStart => {
                if slot.open && !slot.plain {
                    t.unpaired += 1; // the previous window never ended
                }
                false
            }
        };
        if closes {
            let mut deltas = [0u64; MAX_COUNTERS];
            let mut backwards = false;
            for ((d, &end), &start) in deltas.iter_mut().zip(&s.values[..n]).zip(&slot.start_values)
            {
                match end.checked_sub(start) {
                    Some(v) => *d = v,
                    None => backwards = true,
                }
            }
            if backwards || slot.space != space {
                // A counter went backwards or the image changed: not a window of this
                // thread's group (reset by exec, or corrupt). Count, never attribute.
                t.unpaired += 1;
            } else {
                let key = WindowKey {
                    space,
                    start_ip: slot.start_ip,
                    start_stack: slot.start_stack,
                    end_ip: s.ip,
                    plain: slot.plain,
                };
                let next = t.windows.len();
                let i = *t.window_index.entry(key).or_insert(next);
                if i == next {
                    t.windows.push((key, WindowSums::new(width)));
                }
                if let Some((_, sums)) = t.windows.get_mut(i) {
                    sums.add(&deltas[..width]);
                }
            }
            slot.open = false;
        }
        match s.kind {
            SampleKind::Plain | SampleKind::WindowStart => {
                t.sample_count += 1;
                *t.samples.entry((space, s.ip, s.stack)).or_insert(0) += 1;
                slot.open = true;
                slot.plain = s.kind == SampleKind::Plain;
                slot.space = space;
                slot.start_ip = s.ip;
                slot.start_stack = s.stack;
                let (dst, src) = (&mut slot.start_values[..n], &s.values[..n]);
                dst.copy_from_slice(src);
                slot.start_values[n..].fill(0);
            }
            SampleKind::WindowEnd => {}
        }
    }

    /// Ends the pass: windows still open count as unpaired; every unique address is
    /// symbolized once and the buckets are folded to functions and call paths under
    /// `policy`.
    pub fn finish(mut self, policy: WindowPolicy) -> Report {
        self.t.unpaired += self.slots.iter().filter(|s| s.open && !s.plain).count() as u64;
        Report::build(self.t, policy)
    }
}
