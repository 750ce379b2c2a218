//! Folding the aggregated buckets into per-function results under a window policy.
//!
//! Sample counts per function always count, whatever the policy, so the ranking by
//! time stays right for functions too small to hold whole windows (the seed's point).
//! Counter deltas are attributed per window:
//!
//! - [`WindowPolicy::Discard`] (default): only when the window's start and end samples
//!   fall in the same function; otherwise the window is counted as discarded.
//! - [`WindowPolicy::Fold`]: always, to the function of the end sample (a short callee
//!   run across the window is folded into where the window ended).
//!
//! A function's time share is its share of time samples (window starts and plain
//! samples), not of window time: each time sample stands for one long period of the
//! thread's CPU time, while window deltas include the sampler's own handler time.
//!
//! This module must never read input or format output.

use rustc_hash::FxHashMap;

use crate::aggregate::Aggregator;
use crate::input::RecordInfo;
use crate::metrics::{CounterSet, MetricDef};
use crate::symbolize::{symbolize, Frame};

/// What to do with a window whose start and end samples fall in different functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WindowPolicy {
    /// Drop its counter deltas (still counting its samples).
    #[default]
    Discard,
    /// Attribute its deltas to the function of its end sample.
    Fold,
}

impl WindowPolicy {
    /// The policy's name as `--window-policy` spells it.
    pub fn name(self) -> &'static str {
        match self {
            WindowPolicy::Discard => "discard",
            WindowPolicy::Fold => "fold",
        }
    }
}

/// One function's results.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionStats {
    /// Demangled name, or `[unknown in <module>]` / `[unknown]`.
    pub function: String,
    /// The module's file name (`libc.so.6`, `[vdso]`); empty for `[unknown]`.
    pub module: String,
    /// `file:line` of the function's most sampled address, when DWARF lines exist.
    pub source: Option<String>,
    /// Time samples whose IP is in the function.
    pub samples: u64,
    /// Windows attributed to the function.
    pub windows: u64,
    /// Counter deltas summed over those windows, indexed like sample values.
    pub sums: Vec<u64>,
}

/// A finished report: per-function results and the recording's totals.
#[derive(Debug, Clone)]
pub struct Report {
    /// The recording's facts (events, period, window, command).
    pub info: RecordInfo,
    /// Which recorded counter is which.
    pub counters: CounterSet,
    /// Every function with a sample or an attributed window, in no particular order.
    pub functions: Vec<FunctionStats>,
    /// Time samples in total (the denominator of every time share).
    pub samples: u64,
    /// Samples the recorder had to drop.
    pub lost_samples: u64,
    /// Windows whose deltas were attributed.
    pub windows_used: u64,
    /// Paired windows dropped by [`WindowPolicy::Discard`].
    pub windows_discarded: u64,
    /// Window starts without an end and ends without a start.
    pub windows_unpaired: u64,
    /// The mean leader delta over paired windows (used and discarded), in leader
    /// units: the window length actually measured.
    pub mean_window: Option<f64>,
    /// The policy the report was built with.
    pub policy: WindowPolicy,
    /// Counter deltas summed over every attributed window.
    pub all_sums: Vec<u64>,
}

impl Report {
    pub(crate) fn build(mut agg: Aggregator, policy: WindowPolicy) -> Report {
        let width = agg.width();

        // Every unique address once: sampled IPs and both ends of every window bucket.
        let mut addr_index: FxHashMap<(u32, u64), usize> = FxHashMap::default();
        let mut addrs: Vec<(u32, u64)> = Vec::new();
        let mut intern = |a: (u32, u64)| {
            *addr_index.entry(a).or_insert_with(|| {
                addrs.push(a);
                addrs.len() - 1
            })
        };
        let sample_addrs: Vec<(usize, u64)> =
            agg.samples.iter().map(|(&a, &count)| (intern(a), count)).collect();
        let window_addrs: Vec<(usize, usize, usize)> = agg
            .windows
            .iter()
            .map(|(&(space, s, e), &i)| (intern((space, s)), intern((space, e)), i))
            .collect();
        let frames = symbolize(&mut agg.spaces, &addrs);

        // Fold addresses to functions: same function = same name in the same file.
        let mut func_index: FxHashMap<(&str, &str), usize> = FxHashMap::default();
        let mut functions: Vec<FunctionStats> = Vec::new();
        let mut hottest: Vec<u64> = Vec::new();
        let func_of: Vec<usize> = frames
            .iter()
            .map(|f: &Frame| {
                *func_index.entry((f.module_path.as_str(), f.function.as_str())).or_insert_with(
                    || {
                        functions.push(FunctionStats {
                            function: f.function.clone(),
                            module: f.module.clone(),
                            source: None,
                            samples: 0,
                            windows: 0,
                            sums: vec![0; width],
                        });
                        hottest.push(0);
                        functions.len() - 1
                    },
                )
            })
            .collect();

        for &(a, count) in &sample_addrs {
            let (Some(&fi), Some(frame)) = (func_of.get(a), frames.get(a)) else { continue };
            if let (Some(f), Some(h)) = (functions.get_mut(fi), hottest.get_mut(fi)) {
                f.samples += count;
                if count > *h || (count == *h && f.source.is_none()) {
                    *h = count;
                    f.source.clone_from(&frame.source);
                }
            }
        }

        let mut all_sums = vec![0u64; width];
        let (mut used, mut discarded, mut paired, mut leader_sum) = (0u64, 0u64, 0u64, 0u128);
        for &(s, e, i) in &window_addrs {
            let count = agg.win_count.get(i).copied().unwrap_or(0);
            let Some(sums) = agg.win_sums.get(i * width..(i + 1) * width) else { continue };
            paired += count;
            leader_sum += u128::from(sums.first().copied().unwrap_or(0));
            let (Some(&fs), Some(&fe)) = (func_of.get(s), func_of.get(e)) else { continue };
            if policy == WindowPolicy::Discard && fs != fe {
                discarded += count;
                continue;
            }
            used += count;
            if let Some(f) = functions.get_mut(fe) {
                f.windows += count;
                for ((acc, all), &v) in f.sums.iter_mut().zip(all_sums.iter_mut()).zip(sums) {
                    *acc = acc.wrapping_add(v);
                    *all = all.wrapping_add(v);
                }
            }
        }

        Report {
            counters: CounterSet::from_events(&agg.info.events),
            info: agg.info,
            functions,
            samples: agg.sample_count,
            lost_samples: agg.lost,
            windows_used: used,
            windows_discarded: discarded,
            windows_unpaired: agg.unpaired,
            mean_window: (paired > 0).then(|| leader_sum as f64 / paired as f64),
            policy,
            all_sums,
        }
    }

    /// The derived metrics this recording supports, in table order.
    pub fn metrics(&self) -> Vec<&'static MetricDef> {
        self.counters.available()
    }

    /// `f`'s share of all time samples, in percent.
    pub fn time_pct(&self, f: &FunctionStats) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            100.0 * f.samples as f64 / self.samples as f64
        }
    }

    /// The value of metric `m` for `f`; `None` when `f` has no attributed windows or a
    /// zero denominator.
    pub fn metric(&self, f: &FunctionStats, m: &MetricDef) -> Option<f64> {
        if f.windows == 0 {
            return None;
        }
        self.counters.eval(m, &f.sums, &self.all_sums)
    }

    /// The function named `name` (first match in any module).
    pub fn function(&self, name: &str) -> Option<&FunctionStats> {
        self.functions.iter().find(|f| f.function == name)
    }

    /// True when the leader counts time, so periods and windows are nanoseconds.
    pub fn leader_is_time(&self) -> bool {
        self.counters.index(crate::metrics::Counter::Time) == Some(0)
    }
}
