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

use std::hash::BuildHasher;

use rustc_hash::FxHashMap;

use crate::input::{Baseline, KernelSymbol, Mapping, RecordInfo, Sample, SampleKind, StackNode};
use crate::report::{Report, WindowPolicy};
use crate::stats::WindowSums;
use crate::tally::{LostThread, Tally, WindowKey};
use crate::ReportError;

/// The most counters one sample may carry (leader included). perf groups are limited
/// by the PMU to far fewer hardware counters; software events rarely exceed a handful.
pub const MAX_COUNTERS: usize = 16;

/// Time samples a thread must have had before the gaps between its samples measure the
/// sampling cycle: in a thread that lived a few periods the gaps are biased short (a long
/// gap would not fit in its life).
const LONG_LIVED: u64 = 8;

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
    /// An overflow's values came (`CallTail` or `Overflow`), for the next sample.
    pending: Option<SampleKind>,
    pending_values: [u64; MAX_COUNTERS],
    /// The open window's starting overflow (`CallTail` or `Overflow`) and its values.
    start_overflow: Option<SampleKind>,
    start_overflow_values: [u64; MAX_COUNTERS],
    /// The process the thread's samples came under, and its leader at its first and
    /// last time sample, and its time samples: the measured sampling cycle.
    pid: u32,
    first_leader: u64,
    last_leader: u64,
    time_samples: u64,
    /// The values where the thread's last window ended (its long period began there),
    /// until its next window's overflow; with the space they were read in.
    last_end: Option<(u32, [u64; MAX_COUNTERS])>,
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
    /// Streams of the kernel floor beside an agent (see [`Aggregator::set_floor`]).
    floor: rustc_hash::FxHashSet<u32>,
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
            floor: rustc_hash::FxHashSet::default(),
        })
    }

    /// Makes room for the window buckets a recording of `bytes` is likely to hold, so
    /// the bucket list is not copied as it grows: one per `MIN_SAMPLE_BYTES`, since a
    /// window ends at a sample record. The room is reserved, not touched, so an estimate
    /// above what the recording holds costs address space only (capped at
    /// `MAX_RESERVED_BUCKETS`).
    pub fn expect_bytes(&mut self, bytes: u64) {
        let buckets = (bytes / MIN_SAMPLE_BYTES).min(MAX_RESERVED_BUCKETS) as usize;
        self.t.windows.reserve(buckets.saturating_sub(self.t.windows.len()));
    }

    /// Says that each sample's values are its own period (what `perf record` writes
    /// without a group read), not readings of running counters: the difference between
    /// two samples then measures nothing, so samples are counted and no window is formed
    /// (a window's deltas would be one period minus the other).
    pub fn values_are_periods(&mut self) {
        self.t.values_are_periods = true;
    }

    /// Records an executable mapping of `pid` (at start, or after a dlopen).
    pub fn add_mapping(&mut self, pid: u32, mapping: Mapping) {
        self.t.spaces.add_mapping(pid, mapping);
        self.last_pid = None;
    }

    /// Notes that the process fed under key `pid` (a record stream) is OS process
    /// `os_pid`, whose JIT symbol files (`/tmp/perf-PID.map`) name its JIT code.
    pub fn set_process_id(&mut self, pid: u32, os_pid: u32) {
        self.t.spaces.set_pid(pid, os_pid);
        self.last_pid = None;
    }

    /// Names thread `tid` of the process fed under key `pid` (a later name replaces an
    /// earlier one).
    pub fn set_thread_name(&mut self, pid: u32, tid: u32, name: &str) {
        self.t.thread_names.insert((pid, tid), name.to_string());
    }

    /// How [`Aggregator::finish`] names addresses.
    pub fn set_symbol_options(&mut self, opts: crate::SymbolOptions) {
        self.t.symbols = opts;
    }

    /// Names addresses from `cache` where an earlier report named them, and keeps there
    /// what this one names (a recorder that reports every few seconds).
    pub fn set_symbol_cache(&mut self, cache: crate::SymbolCache) {
        self.t.symbol_cache = Some(cache);
    }

    /// Keeps every sample in arrival order, so the report carries a
    /// [`Timeline`](crate::Timeline) (for views that show time). Costs about 40 bytes
    /// per sample plus 8 per counter.
    pub fn keep_timeline(&mut self) {
        self.t.timeline.get_or_insert_with(Default::default);
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

    /// Names kernel addresses no added symbol covers from the running kernel's table,
    /// given as the text of `/proc/kallsyms` (only the symbols the report's addresses
    /// need are parsed).
    pub fn set_kallsyms_text(&mut self, text: String) {
        self.t.spaces.set_kallsyms_text(text);
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

    /// Sets the empty-window baseline to subtract from every window. It must come before
    /// the samples (record files write it first); one that comes later is kept for the
    /// report to show, not subtracted.
    pub fn set_baseline(&mut self, b: Baseline) {
        let width = self.t.width();
        let t = &mut self.t;
        t.baseline_unused = if t.paired > 0 || t.sample_count > 0 {
            Some("it came after the samples".into())
        } else if b.counters.len() != width {
            Some(format!("the baseline has {} counters, the recording {width}", b.counters.len()))
        } else {
            None
        };
        let means = |v: &[crate::input::BaselineCounter]| -> Vec<f64> {
            (0..width).map(|i| v.get(i).map_or(0.0, |c| c.mean)).collect()
        };
        if t.baseline_unused.is_none() {
            let zero = vec![0.0; width];
            let own = means(&b.counters);
            (t.beta_window, t.beta_plain) = if b.windows { (own, zero) } else { (zero, own) };
            t.beta_tail = means(&b.tail);
            t.beta_end = means(&b.end);
        }
        t.baseline = Some(b);
    }

    /// The mean leader count per time sample of process `pid`'s threads so far: their
    /// measured sampling cycle (the long period, the window and whatever the sampler
    /// counted). Only threads with many samples measure it: in a thread that lived a few
    /// periods the gaps between its samples are biased short (a long gap would not fit in
    /// its life). Without such threads: `nominal` plus what the windows measured beyond
    /// the requested window and the calibrated delay before each window starts.
    pub fn measured_cycle(&self, pid: u32, nominal: f64) -> f64 {
        let (mut sum, mut n) = (0u64, 0u64);
        for s in self.slots.iter().filter(|s| s.pid == pid && s.time_samples >= LONG_LIVED) {
            sum = sum.saturating_add(s.last_leader.saturating_sub(s.first_leader));
            n += s.time_samples - 1;
        }
        if n > 0 && sum > 0 {
            return sum as f64 / n as f64;
        }
        self.configured_cycle(nominal)
    }

    /// The sampling cycle as configured: `nominal` plus what the windows measured beyond
    /// the requested window and the calibrated delay before each window starts. (Where
    /// the leader samples user space only, the gaps between samples also hold every
    /// period whose timer fired in the kernel and took no sample: the leader's count per
    /// sample measures that, not the cycle.)
    pub fn configured_cycle(&self, nominal: f64) -> f64 {
        let t = &self.t;
        let over = if t.paired > 0 && t.info.window > 0 {
            (t.leader_raw / t.paired as f64 - t.info.window as f64).max(0.0)
        } else {
            0.0
        };
        nominal + over + t.beta_tail.first().copied().unwrap_or(0.0)
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

    /// A floor sample: a time sample, no interval.
    fn push_floor(&mut self, space: u32, s: &Sample<'_>) {
        let width = self.t.width();
        let t = &mut self.t;
        keep_raw(t, space, s, width, true);
        if matches!(s.kind, SampleKind::Plain | SampleKind::WindowStart) {
            t.sample_count += 1;
            *t.samples.entry((space, s.ip, s.stack)).or_insert(0) += 1;
        }
    }

    /// Adds CPU time no sample stands for, as samples' worth, to its own row named
    /// `function` in `module` (the process and thread it belongs to): the report shows
    /// it, so every share is of all CPU time and the missing part is named.
    pub fn add_unaccounted(&mut self, function: &str, module: &str, samples: f64) {
        if !(samples.is_finite() && samples > 0.0) {
            return;
        }
        match self.t.unaccounted.iter_mut().find(|r| r.0 == function && r.1 == module) {
            Some(r) => r.2 += samples,
            None => self.t.unaccounted.push((function.to_string(), module.to_string(), samples)),
        }
    }

    /// What has been tallied so far (tests).
    #[cfg(test)]
    pub(crate) fn tally(&self) -> &crate::tally::Tally {
        &self.t
    }

    /// Each command's share of the recording (from per-thread CPU times).
    pub(crate) fn set_processes(&mut self, list: Vec<crate::accounting::ProcessShare>) {
        self.t.processes = list;
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
                        pending: None,
                        pending_values: [0; MAX_COUNTERS],
                        start_overflow: None,
                        start_overflow_values: [0; MAX_COUNTERS],
                        pid: 0,
                        first_leader: 0,
                        last_leader: 0,
                        time_samples: 0,
                        last_end: None,
                    });
                }
                self.last_tid = Some((tid, i));
                i
            }
        }
    }

    /// Marks the process fed under key `pid` (a record stream) as the kernel floor's
    /// samples beside an agent: time samples of moments the agent did not serve, which
    /// open and close no interval (window metrics are the agent's).
    pub fn set_floor(&mut self, pid: u32) {
        self.floor.insert(pid);
    }

    /// Feeds one sample. Never allocates except when a new thread, key or window key
    /// appears.
    #[inline]
    pub fn push(&mut self, s: &Sample<'_>) {
        let space = self.space(s.pid);
        if !self.floor.is_empty() && self.floor.contains(&s.pid) {
            self.push_floor(space, s);
            return;
        }
        let slot_i = self.slot(s.tid);
        let width = self.t.width();
        let n = width.min(s.values.len());
        let Some(slot) = self.slots.get_mut(slot_i) else { return };
        let t = &mut self.t;
        keep_raw(t, space, s, width, false);
        if matches!(s.kind, SampleKind::CallTail | SampleKind::Overflow) {
            // An overflow's own values, for the thread's next sample.
            slot.pending = Some(s.kind);
            slot.pending_values[..n].copy_from_slice(&s.values[..n]);
            slot.pending_values[n..].fill(0);
            return;
        }
        let pending = slot.pending.take();
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
            SampleKind::CallTail | SampleKind::Overflow => false,
            SampleKind::Plain => {
                if slot.open && !slot.plain {
                    t.unpaired += 1; // a window never ended
                }
                slot.open && slot.plain && !t.values_are_periods
            }
            SampleKind::WindowStart => {
                if slot.open && !slot.plain {
                    t.unpaired += 1; // the previous window never ended
                }
                false
            }
        };
        if closes {
            let end_overflow = (s.kind == SampleKind::WindowEnd
                && pending == Some(SampleKind::Overflow))
            .then_some(&slot.pending_values);
            let net = if slot.space != space {
                None // the image changed (exec): not a window of this thread's group
            } else {
                close_window(t, slot, &s.values[..n], end_overflow, width)
            };
            if !slot.plain {
                if let Some(net) = &net {
                    t.window_check.add_window(&net[..width]);
                }
                let mut end = [0u64; MAX_COUNTERS];
                end[..n].copy_from_slice(&s.values[..n]);
                slot.last_end = Some((space, end));
            }
            match net {
                Some(net) => {
                    let key = WindowKey {
                        space,
                        start_ip: slot.start_ip,
                        start_stack: slot.start_stack,
                        end_ip: s.ip,
                        end_stack: s.stack,
                        plain: slot.plain,
                    };
                    window_bucket(&mut t.windows, &mut t.window_index, key, width)
                        .add_f64(&net[..width]);
                }
                // A counter went backwards (reset by exec, or corrupt), or a degenerate
                // tail: count, never attribute.
                None => t.unpaired += 1,
            }
            slot.open = false;
        }
        let time_sample = matches!(s.kind, SampleKind::Plain | SampleKind::WindowStart);
        if let Some((at, end)) = slot.last_end.take_if(|_| time_sample) {
            // A long period: from the last window's end to this window's overflow (the
            // call's tail or the sampler's delay, when one came first).
            let to: &[u64] = match pending {
                Some(_) => &slot.pending_values[..n],
                None => &s.values[..n],
            };
            if s.kind == SampleKind::WindowStart && at == space {
                let mut d = [0u64; MAX_COUNTERS];
                if to.iter().zip(&end).zip(&mut d).all(|((&b, &a), d)| {
                    *d = b.wrapping_sub(a);
                    b >= a
                }) {
                    t.window_check.add_long(&d[..n]);
                }
            }
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
                slot.start_overflow = pending.filter(|_| !slot.plain);
                if slot.start_overflow.is_some() {
                    slot.start_overflow_values = slot.pending_values;
                }
                let leader = s.values.first().copied().unwrap_or(0);
                if slot.time_samples == 0 || slot.pid != s.pid {
                    slot.pid = s.pid;
                    slot.first_leader = leader;
                    slot.time_samples = 0;
                }
                if slot.time_samples >= LONG_LIVED {
                    t.cycle_sum += leader.saturating_sub(slot.last_leader) as f64;
                    t.cycle_n += 1;
                }
                slot.last_leader = leader;
                slot.time_samples += 1;
            }
            SampleKind::WindowEnd | SampleKind::CallTail | SampleKind::Overflow => {}
        }
    }

    /// Ends the pass: windows still open count as unpaired; every unique address is
    /// symbolized once and the buckets are folded to functions and call paths under
    /// `policy`.
    pub fn finish(mut self, policy: WindowPolicy) -> Report {
        self.t.unpaired += self.slots.iter().filter(|s| s.open && !s.plain).count() as u64;
        crate::build::build(self.t, policy)
    }
}

/// Bytes per sample record assumed by [`Aggregator::expect_bytes`]: below what a sample
/// with counters takes in strobe's files (12 a sample in a deep-stack recording), so the
/// room usually covers every bucket; a recording that packs more samples only grows the
/// list as it would without the estimate.
const MIN_SAMPLE_BYTES: u64 = 8;
/// The most window buckets [`Aggregator::expect_bytes`] reserves room for (128 MB of
/// address space).
const MAX_RESERVED_BUCKETS: u64 = 1 << 20;

/// The sums of the window bucket `key`, added (empty, for `width` counters) the first
/// time the key is seen. The key itself is kept once, in `windows`; the table holds each
/// bucket's index and a 32-bit hash of its key, so growing the table rehashes from the
/// table alone (hashing keys from `windows` again cost a random read per bucket).
fn window_bucket<'a>(
    windows: &'a mut Vec<(WindowKey, WindowSums)>,
    index: &mut hashbrown::HashTable<(u32, u32)>,
    key: WindowKey,
    width: usize,
) -> &'a mut WindowSums {
    let full = rustc_hash::FxBuildHasher.hash_one(key);
    let h32 = (full >> 32) as u32 ^ full as u32;
    // The table takes its bucket from the low bits and its tag from the top seven: both
    // come from all 32 bits by one multiplication.
    let spread = |h: u32| u64::from(h).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let entry = index.entry(
        spread(h32),
        |&(i, h)| h == h32 && windows.get(i as usize).is_some_and(|w| w.0 == key),
        |&(_, h)| spread(h),
    );
    let i = match entry {
        hashbrown::hash_table::Entry::Occupied(e) => e.get().0 as usize,
        hashbrown::hash_table::Entry::Vacant(e) => {
            let i = windows.len();
            // More than 2^32 buckets would need more memory than any recording gives.
            e.insert((i as u32, h32));
            windows.push((key, WindowSums::new(width)));
            i
        }
    };
    &mut windows[i].1
}

/// The net deltas of the window (or fixed-period interval) `slot` has open, ended by a
/// sample with values `end` (and, when the ring gave it, the values at the window's own
/// overflow, `end_overflow`). `None` when a counter went backwards or a tail is
/// degenerate.
///
/// A window's parts (see `strobe_sampler::alternate`): its interior, from the start
/// handler's read to its ending overflow, net of the baseline; a system call's remainder
/// before it (a `CallTail`), net of the usual delay; and its boundaries (from each
/// overflow to the handler's read), whose counts (not time) happen once per sampling
/// cycle, so they are added scaled by the mean net window over the mean cycle. A tail as
/// long as a window is a window by itself, scaled to the mean net window.
fn close_window(
    t: &mut crate::tally::Tally,
    slot: &ThreadSlot,
    end: &[u64],
    end_overflow: Option<&[u64; MAX_COUNTERS]>,
    width: usize,
) -> Option<[f64; MAX_COUNTERS]> {
    let delta = |from: &[u64], to: &[u64]| -> Option<[f64; MAX_COUNTERS]> {
        let mut d = [0f64; MAX_COUNTERS];
        for ((d, &b), &a) in d.iter_mut().zip(to).zip(from) {
            *d = b.checked_sub(a)? as f64;
        }
        Some(d)
    };
    let beta = |v: &[f64], i: usize| v.get(i).copied().unwrap_or(0.0);
    let mut net = [0f64; MAX_COUNTERS];
    if slot.plain {
        let raw = delta(&slot.start_values, end)?;
        for (i, x) in net.iter_mut().enumerate().take(width) {
            *x = raw[i] - beta(&t.beta_plain, i);
        }
        t.paired += 1;
        t.leader_raw += raw[0];
        t.leader_net += net[0];
        t.correction_sum += beta(&t.beta_plain, 0);
        return Some(net);
    }
    let start = &slot.start_values[..width];
    let interior_end: &[u64] = end_overflow.map_or(end, |o| &o[..width]);
    let raw = delta(start, interior_end)?;
    // Without the ring the window stopped at its overflow and the end handler read
    // it: its interior holds the end's delay, whose baseline is the end boundary's.
    let stopped = end_overflow.is_none();
    for (i, x) in net.iter_mut().enumerate().take(width) {
        let b = beta(&t.beta_window, i) + if stopped { beta(&t.beta_end, i) } else { 0.0 };
        *x = raw[i] - b;
    }
    let mean_net = if t.paired > 0 && t.leader_net > 0.0 {
        t.leader_net / t.paired as f64
    } else {
        t.info.window as f64
    };
    let mut correction = beta(&t.beta_window, 0) + if stopped { beta(&t.beta_end, 0) } else { 0.0 };
    let mut boundary = [0f64; MAX_COUNTERS];
    match slot.start_overflow {
        Some(SampleKind::CallTail) => {
            // The call's remainder, net of the usual delay, is the window's first part.
            let tail = delta(&slot.start_overflow_values[..width], start)?;
            let tail_net: Vec<f64> = (0..width).map(|i| tail[i] - beta(&t.beta_tail, i)).collect();
            let tail_time = tail_net.first().copied().unwrap_or(0.0);
            t.tail_windows += 1;
            if raw[0] == 0.0 {
                if tail_time <= 0.0 {
                    return None;
                }
                // The tail was a whole window: scaled to what a window covers on
                // average, so it weighs as one window, not as the call's remainder.
                let k = mean_net / tail_time;
                for (i, x) in net.iter_mut().enumerate().take(width) {
                    *x = tail_net[i] * k;
                }
                t.tail_only_windows += 1;
                return Some(net);
            }
            // Signed: the calibrated delay is a mean, so a short call's tail comes out
            // below zero as often as above, and only the sum is right.
            for (x, v) in net.iter_mut().zip(&tail_net) {
                *x += v;
            }
            correction += beta(&t.beta_tail, 0);
        }
        Some(_) => {
            let b = delta(&slot.start_overflow_values[..width], start)?;
            for (i, x) in boundary.iter_mut().enumerate().take(width) {
                *x += b[i] - beta(&t.beta_tail, i);
            }
        }
        None => {}
    }
    if let Some(o) = end_overflow {
        let b = delta(&o[..width], end)?;
        for (i, x) in boundary.iter_mut().enumerate().take(width) {
            *x += b[i] - beta(&t.beta_end, i);
        }
    }
    // Boundaries happen once per cycle: spread over it (the leader's own boundary time is
    // the sampler's, not the window's).
    let cycle = if t.cycle_n > 0 {
        t.cycle_sum / t.cycle_n as f64
    } else {
        (t.info.period + t.info.jitter / 2 + t.info.window) as f64
    };
    if cycle > 0.0 {
        for (x, b) in net.iter_mut().zip(&boundary).take(width).skip(1) {
            *x += b * mean_net / cycle;
        }
    }
    t.paired += 1;
    t.leader_raw += raw[0];
    t.leader_net += net[0];
    t.correction_sum += correction;
    Some(net)
}

/// Keeps the sample as it was read, when the timeline (views that need every sample)
/// was asked for.
fn keep_raw(t: &mut crate::tally::Tally, space: u32, s: &Sample<'_>, width: usize, floor: bool) {
    if let Some(tl) = &mut t.timeline {
        tl.samples.push(crate::tally::RawSample {
            pid: s.pid,
            space,
            tid: s.tid,
            time: s.time,
            ip: s.ip,
            stack: s.stack,
            kind: s.kind,
            floor,
        });
        tl.values.extend((0..width).map(|i| s.values.get(i).copied().unwrap_or(0)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bucket table against a map that keeps every key: 200,000 windows over 30,000
    /// keys (the table grows from empty, rehashing from its stored hashes), each window's
    /// sums land in its key's bucket, one bucket per key, in first-seen order.
    #[test]
    fn window_buckets_match_a_map_of_every_key() {
        let mut windows = Vec::new();
        let mut index = hashbrown::HashTable::new();
        let mut model: std::collections::BTreeMap<(u64, u32), (usize, f64, u64)> =
            Default::default();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let k = x % 30_000;
            let key = WindowKey {
                space: (k % 3) as u32,
                start_ip: k << 32,
                start_stack: (k % 7) as u32,
                end_ip: k << 32,
                end_stack: 1,
                plain: k % 2 == 0,
            };
            let v = (x >> 40) as f64;
            window_bucket(&mut windows, &mut index, key, 2).add_f64(&[v, 1.0]);
            let next = model.len();
            let m = model.entry((k, 0)).or_insert((next, 0.0, 0));
            m.1 += v;
            m.2 += 1;
        }
        assert_eq!(windows.len(), model.len());
        assert_eq!(index.len(), model.len());
        for (&(k, _), &(i, sum, n)) in &model {
            let (key, sums) = &windows[i];
            assert_eq!(key.start_ip, k << 32, "bucket {i} holds another key");
            assert_eq!((sums.n, sums.sums[0], sums.sums[1]), (n, sum, n as f64));
        }
    }
}
