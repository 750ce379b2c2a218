//! Durations from entry and return hits: matching them per thread, and percentiles.
//!
//! Entry and return samples of one call come from one thread, but possibly through two
//! CPUs' ring buffers, so the session hands hits here in time order (see
//! [`crate::session`]'s horizon argument). A call's entry is pushed on a stack keyed by
//! (thread, probe) and its return pops it: recursion nests correctly. A return with no
//! entry (its entry sample was lost, or the call began before the probe was attached)
//! is counted as unmatched, as is an entry whose return never comes (`longjmp`, thread
//! exit, the run ended mid-call).
//!
//! Durations are kept exactly up to [`EXACT_LIMIT`] per probe, then by reservoir sampling
//! (uniform, fixed memory), so percentiles stay unbiased on long runs while `max`, `min`
//! and the count stay exact.

use std::collections::HashMap;

/// How many durations per probe are kept exactly before reservoir sampling starts.
pub const EXACT_LIMIT: usize = 1 << 20;

/// Deepest recursion tracked per (thread, probe); deeper entries push out the oldest.
const MAX_DEPTH: usize = 256;

/// Durations of one probe's calls.
#[derive(Debug, Clone, Default)]
pub struct Durations {
    kept: Vec<u64>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
    rng: u64,
}

/// Percentiles of a set of durations, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Number of durations.
    pub count: u64,
    /// Shortest.
    pub min: u64,
    /// Mean.
    pub mean: u64,
    /// Median (nearest rank).
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Longest.
    pub max: u64,
}

impl Durations {
    /// Adds one duration.
    pub fn push(&mut self, ns: u64) {
        if self.count == 0 {
            self.min = ns;
            self.rng = 0x9E37_79B9_7F4A_7C15;
        }
        self.count += 1;
        self.sum += u128::from(ns);
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
        if self.kept.len() < EXACT_LIMIT {
            self.kept.push(ns);
        } else {
            // Algorithm R: keep the new value with probability EXACT_LIMIT / count.
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let j = self.rng % self.count;
            if let Some(slot) = self.kept.get_mut(j as usize) {
                *slot = ns;
            }
        }
    }

    /// How many durations were added.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The summary, or `None` when empty.
    pub fn summary(&self) -> Option<Summary> {
        if self.count == 0 {
            return None;
        }
        let mut v = self.kept.clone();
        v.sort_unstable();
        let rank = |p: f64| -> u64 {
            let n = v.len();
            let idx = ((p / 100.0 * n as f64).ceil() as usize).clamp(1, n) - 1;
            v[idx]
        };
        Some(Summary {
            count: self.count,
            min: self.min,
            mean: (self.sum / u128::from(self.count)) as u64,
            p50: rank(50.0),
            p90: rank(90.0),
            p99: rank(99.0),
            max: self.max,
        })
    }
}

/// Pairs entries with returns per (thread, probe).
#[derive(Debug, Default)]
pub struct Matcher {
    open: HashMap<(u32, usize), Vec<u64>>,
    durations: Vec<Durations>,
    unmatched_returns: u64,
    dropped_entries: u64,
}

impl Matcher {
    /// A matcher for `probes` probes (indices `0..probes`).
    pub fn new(probes: usize) -> Matcher {
        Matcher { durations: vec![Durations::default(); probes], ..Default::default() }
    }

    /// Thread `tid` entered probe `probe`'s function at `time` ns.
    pub fn entry(&mut self, tid: u32, probe: usize, time: u64) {
        let stack = self.open.entry((tid, probe)).or_default();
        if stack.len() >= MAX_DEPTH {
            stack.remove(0);
            self.dropped_entries += 1;
        }
        stack.push(time);
    }

    /// Thread `tid` returned from probe `probe`'s function at `time` ns: the call's
    /// duration, if its entry was seen.
    pub fn ret(&mut self, tid: u32, probe: usize, time: u64) -> Option<u64> {
        let stack = self.open.get_mut(&(tid, probe));
        match stack.and_then(Vec::pop) {
            Some(start) => {
                let d = time.saturating_sub(start);
                if let Some(ds) = self.durations.get_mut(probe) {
                    ds.push(d);
                }
                Some(d)
            }
            None => {
                self.unmatched_returns += 1;
                None
            }
        }
    }

    /// The durations measured for `probe`.
    pub fn durations(&self, probe: usize) -> Option<&Durations> {
        self.durations.get(probe)
    }

    /// Returns seen without their entry.
    pub fn unmatched_returns(&self) -> u64 {
        self.unmatched_returns
    }

    /// Entries still waiting for their return, plus entries pushed out by deep recursion.
    pub fn unmatched_entries(&self) -> u64 {
        self.open.values().map(|s| s.len() as u64).sum::<u64>() + self.dropped_entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_and_interleaved_calls_pair_per_thread() {
        let mut m = Matcher::new(2);
        m.entry(1, 0, 100);
        m.entry(2, 0, 110); // another thread, same function
        m.entry(1, 0, 120); // recursion
        assert_eq!(m.ret(1, 0, 130), Some(10));
        assert_eq!(m.ret(2, 0, 150), Some(40));
        assert_eq!(m.ret(1, 0, 200), Some(100));
        assert_eq!(m.ret(1, 1, 210), None, "no entry for probe 1");
        assert_eq!(m.unmatched_returns(), 1);
        assert_eq!(m.unmatched_entries(), 0);
        let s = m.durations(0).unwrap().summary().unwrap();
        assert_eq!((s.count, s.min, s.max, s.p50), (3, 10, 100, 40));
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut d = Durations::default();
        for v in 1..=100 {
            d.push(v);
        }
        let s = d.summary().unwrap();
        assert_eq!((s.p50, s.p90, s.p99, s.max, s.min, s.mean), (50, 90, 99, 100, 1, 50));
        assert!(Durations::default().summary().is_none());
    }

    #[test]
    fn reservoir_keeps_memory_bounded_and_extremes_exact() {
        let mut d = Durations::default();
        let n = EXACT_LIMIT as u64 + 100_000;
        for v in 0..n {
            d.push(v % 1000);
        }
        d.push(5_000_000);
        assert_eq!(d.kept.len(), EXACT_LIMIT);
        let s = d.summary().unwrap();
        assert_eq!((s.count, s.max, s.min), (n + 1, 5_000_000, 0));
        assert!((450..=550).contains(&s.p50), "uniform 0..1000 has median ~500: {}", s.p50);
    }
}
