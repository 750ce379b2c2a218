//! The samples in time order, per thread: what views that show time need (the Firefox
//! Profiler's tracks), kept only when asked for
//! ([`Aggregator::keep_timeline`](crate::Aggregator::keep_timeline)).
//!
//! Each time sample (a window start or a plain sample) points at its call path in
//! [`Report::paths`](crate::Report::paths) and carries the CPU time its thread ran since
//! its previous sample (the leader's delta, when the leader counts time). Each paired
//! window carries its counter deltas, net of the baseline when the report subtracted one,
//! at the time it ended.
//!
//! Owns: pairing and ordering for the time line. Must never symbolize or attribute: the
//! report's paths are the only names it uses.

use rustc_hash::FxHashMap;

use crate::input::SampleKind;
use crate::symbolize::Spaces;
use crate::tally::{RawSample, RawTimeline};

/// One thread of the time line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineThread {
    /// The OS pid of its process, when known (else the key the source used).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Its name, when the recording has one.
    pub name: Option<String>,
}

/// A time sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimedSample {
    /// Index into [`Timeline::threads`].
    pub thread: u32,
    /// Timestamp, ns (the recording's monotonic clock).
    pub time: u64,
    /// Index into [`Report::paths`](crate::Report::paths).
    pub path: u32,
    /// The leader's delta since the thread's previous time sample (its first: since the
    /// thread's counter started): CPU ns when the leader counts time.
    pub leader_delta: u64,
}

/// A window (or fixed-period interval) and its counter deltas.
#[derive(Debug, Clone, PartialEq)]
pub struct TimedWindow {
    /// Index into [`Timeline::threads`].
    pub thread: u32,
    /// When it ended, ns.
    pub time: u64,
    /// Per counter (leader first), net of the baseline when one was subtracted.
    pub deltas: Vec<f64>,
}

/// Every thread's samples and windows, in time order per thread.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeline {
    /// The threads, in order of their first sample.
    pub threads: Vec<TimelineThread>,
    /// Time samples, sorted by (thread, time).
    pub samples: Vec<TimedSample>,
    /// Paired windows, sorted by (thread, time).
    pub windows: Vec<TimedWindow>,
}

/// Builds the time line from the raw samples; `key_path` maps each sample key (space,
/// IP, stack) to its path index, `baseline` is what was subtracted from windows of one
/// kind (fixed-period intervals when its flag is true).
pub(crate) fn build(
    raw: RawTimeline,
    key_path: &FxHashMap<(u32, u64, u32), usize>,
    names: &FxHashMap<(u32, u32), String>,
    spaces: &Spaces,
    width: usize,
    baseline: Option<(&[f64], bool)>,
) -> Timeline {
    let mut tl = Timeline::default();
    let mut thread_of: FxHashMap<(u32, u32), u32> = FxHashMap::default();
    // Per thread: the last time sample's values and whether it opened a window (and
    // whether plain).
    let mut last: Vec<(Option<usize>, bool, bool)> = Vec::new();
    for (i, s) in raw.samples.iter().enumerate() {
        let th = *thread_of.entry((s.pid, s.tid)).or_insert_with(|| {
            tl.threads.push(TimelineThread {
                pid: spaces.pid_of(s.space).unwrap_or(s.pid),
                tid: s.tid,
                name: names.get(&(s.pid, s.tid)).cloned(),
            });
            last.push((None, false, false));
            (tl.threads.len() - 1) as u32
        });
        let Some(vals) = raw.values.get(i * width..(i + 1) * width) else { continue };
        if s.floor {
            // A kernel floor's sample: a place in time, with no CPU delta of its own (its
            // counters are the floor's totals, not the agent leader's, and the time since
            // the thread's previous sample is counted by the agent's samples).
            tl.samples.extend(timed(key_path, s, th, 0));
            continue;
        }
        let Some(state) = last.get_mut(th as usize) else { continue };
        let (prev, open, plain) = *state;
        let prev_vals = prev.and_then(|j| raw.values.get(j * width..(j + 1) * width));
        let closes = match s.kind {
            SampleKind::WindowEnd => open && !plain,
            SampleKind::Plain => open && plain,
            // An overflow's own values describe the sample after them, not a time sample.
            SampleKind::WindowStart | SampleKind::CallTail | SampleKind::Overflow => false,
        };
        if let (true, Some(pv)) = (closes, prev_vals) {
            if vals.iter().zip(pv).all(|(a, b)| a >= b) {
                let beta = baseline.filter(|&(_, p)| p == plain).map(|(b, _)| b);
                let deltas = vals
                    .iter()
                    .zip(pv)
                    .enumerate()
                    .map(|(k, (a, b))| {
                        (a - b) as f64 - beta.and_then(|b| b.get(k)).copied().unwrap_or(0.0)
                    })
                    .collect();
                tl.windows.push(TimedWindow { thread: th, time: s.time, deltas });
            }
        }
        match s.kind {
            SampleKind::CallTail | SampleKind::Overflow => {}
            SampleKind::WindowEnd => state.1 = false,
            SampleKind::WindowStart | SampleKind::Plain => {
                let leader = vals.first().copied().unwrap_or(0);
                let before = prev_vals.and_then(|v| v.first().copied()).unwrap_or(0);
                tl.samples.extend(timed(key_path, s, th, leader.saturating_sub(before)));
                *state = (Some(i), true, s.kind == SampleKind::Plain);
            }
        }
    }
    tl.samples.sort_by_key(|s| (s.thread, s.time));
    tl.windows.sort_by(|a, b| a.thread.cmp(&b.thread).then(a.time.cmp(&b.time)));
    tl
}

/// The time sample `s` makes on thread `th`, unless its key has no path.
fn timed(
    key_path: &FxHashMap<(u32, u64, u32), usize>,
    s: &RawSample,
    th: u32,
    leader_delta: u64,
) -> Option<TimedSample> {
    let &p = key_path.get(&(s.space, s.ip, s.stack))?;
    (p != usize::MAX).then_some(TimedSample {
        thread: th,
        time: s.time,
        path: p as u32,
        leader_delta,
    })
}
