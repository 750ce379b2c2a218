//! Folding the tallies into per-function and per-call-path results under a window policy,
//! net of the sampler's own counts.
//!
//! Sample counts per function always count, whatever the policy, so the ranking by
//! time stays right for functions too small to hold whole windows (the seed's point).
//! A function's *self* samples are those whose IP is in it; its *total* samples those
//! with it anywhere on the stack (once per sample, however deep the recursion).
//! Counter deltas are attributed per window:
//!
//! - [`WindowPolicy::Discard`] (default): only when the window's start and end samples
//!   fall in the same function; otherwise the window is counted as discarded.
//! - [`WindowPolicy::Fold`]: always, to the function of the end sample (a short callee
//!   run across the window is folded into where the window ended).
//!
//! A window is attributed to its function and to its start's call path, so a function's
//! metrics can be split by its callers.
//!
//! The baseline: every window's deltas include what the sampler itself made each counter
//! count (the kernel's overflow and return paths: about 28 us of task-clock per window on
//! the VM strobe is developed on), measured before the target started. It is subtracted
//! from every window of the kind it was measured on (alternation windows, or
//! fixed-period intervals), so rates are per millisecond of the target's own time.
//!
//! A function's time share is its share of time samples (window starts and plain
//! samples), not of window time: each time sample stands for one long period of the
//! thread's CPU time.
//!
//! The build itself, from the aggregation's tallies to these results, is a pipeline of
//! phases in `build`.
//!
//! This module must never read input or format output.

use crate::input::{BaselineCounter, RecordInfo};
use crate::metrics::{Counter, CounterSet, Formula, MetricDef};
use crate::stats::{wilson, Estimate, WindowSums, FEW_WINDOWS};
use crate::tally::LostThread;

pub use crate::build::unsampled::UNSAMPLED;

/// The row of strobe's agent's own work in the target (setting threads up, reading
/// mappings): every frame in the agent's library is named so, and no agent frame stays
/// inside a call path.
pub const AGENT: &str = "[strobe agent]";

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
    /// The module's full path (a pseudo name such as `[vdso]` or `[jit PID]` for code
    /// with no file): with `function`, what makes two functions the same.
    pub module_path: String,
    /// Self samples per source line (`file:line`), most first; empty without DWARF
    /// line tables.
    pub lines: Vec<(String, u64)>,
    /// Time samples whose IP is in the function (self).
    pub samples: u64,
    /// Time samples with the function anywhere on the stack (self and callees).
    pub total_samples: u64,
    /// Windows attributed to the function.
    pub windows: u64,
    /// Net counter deltas over those windows (and their products), baseline subtracted.
    pub sums: WindowSums,
    /// Windows inside the function's calls, its callees' included (the function is on
    /// the window's start stack, and the window ended in it or in one of its callers
    /// on that stack): what a program measures around each call of the function.
    pub total_windows: u64,
    /// Net counter deltas over those windows.
    pub total_sums: WindowSums,
    /// Windows that began in the function and ended in another one (which the discard
    /// policy leaves out): their rate against the kept windows' bounds what leaving out
    /// the function's edges (its first and last stretch, a window long) can cost.
    pub edge_sums: WindowSums,
    /// The same for the inclusive windows: those that began inside the function's calls
    /// and ended outside them.
    pub total_edge_sums: WindowSums,
    /// Off-CPU time (ns) of intervals whose thread left the CPU in the function (self):
    /// blocked in a system call it made, or preempted in it.
    pub off_cpu_ns: u64,
    /// Off-CPU time (ns) with the function anywhere on the stack (self and callees).
    pub total_off_cpu_ns: u64,
    /// Off-CPU intervals that left in the function.
    pub off_cpu_intervals: u64,
}

impl FunctionStats {
    /// A function with nothing counted yet, its sums of `width` counters.
    pub(crate) fn empty(function: &str, module: &str, module_path: &str, width: usize) -> Self {
        FunctionStats {
            function: function.to_string(),
            module: module.to_string(),
            source: None,
            module_path: module_path.to_string(),
            lines: Vec::new(),
            samples: 0,
            total_samples: 0,
            windows: 0,
            sums: WindowSums::new(width),
            total_windows: 0,
            total_sums: WindowSums::new(width),
            edge_sums: WindowSums::new(width),
            total_edge_sums: WindowSums::new(width),
            off_cpu_ns: 0,
            total_off_cpu_ns: 0,
            off_cpu_intervals: 0,
        }
    }
}

/// One call path (functions from the outermost caller to the sampled function) and what
/// was counted on it.
#[derive(Debug, Clone, PartialEq)]
pub struct PathStats {
    /// Indices into [`Report::functions`], outermost first; the last is where the samples
    /// were taken.
    pub frames: Vec<usize>,
    /// Time samples taken on exactly this path.
    pub samples: u64,
    /// Net window sums of the windows that started on this path (and were attributed).
    pub sums: WindowSums,
    /// Off-CPU time (ns) of intervals that left the CPU on exactly this path.
    pub off_cpu_ns: u64,
}

impl PathStats {
    /// The path `frames` with nothing counted yet, its sums of `width` counters.
    pub(crate) fn empty(frames: Vec<usize>, width: usize) -> Self {
        PathStats { frames, samples: 0, sums: WindowSums::new(width), off_cpu_ns: 0 }
    }
}

/// The off-CPU intervals of a recording (`strobe record --off-cpu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OffCpuTotals {
    /// Intervals.
    pub intervals: u64,
    /// Their total length, ns.
    pub ns: u64,
    /// The part spent preempted (runnable, waiting for a CPU), ns.
    pub preempted_ns: u64,
}

/// Whether the baseline was subtracted.
#[derive(Debug, Clone, PartialEq)]
pub enum BaselineUse {
    /// The recording has none (calibration failed, or a source without one).
    Absent,
    /// Subtracted from every window of its kind.
    Applied {
        /// Per counter, leader first.
        counters: Vec<BaselineCounter>,
        /// Windows the calibration measured.
        intervals: u64,
    },
    /// Not subtracted, and why.
    NotApplied(String),
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
    /// Every call path with a sample or an attributed window.
    pub paths: Vec<PathStats>,
    /// Whether samples carried stacks.
    pub has_stacks: bool,
    /// Time samples in total (the denominator of every time share).
    pub samples: u64,
    /// The directory the modules' files were read under instead of `/` (`--symfs`), for
    /// what is read from them after the report (the build ids of a pprof profile).
    pub symfs: Option<std::path::PathBuf>,
    /// Samples the recorder had to drop.
    pub lost_samples: u64,
    /// The same, per thread (only threads that lost any), in the order first reported.
    pub lost_by_thread: Vec<LostThread>,
    /// Windows whose deltas were attributed.
    pub windows_used: u64,
    /// Paired windows dropped by [`WindowPolicy::Discard`].
    pub windows_discarded: u64,
    /// Window starts without an end and ends without a start.
    pub windows_unpaired: u64,
    /// Whether samples were read as counter readings, so that two samples bound a window;
    /// false when each sample carried its own period (a perf.data without a group read),
    /// and no window was formed.
    pub windows_measured: bool,
    /// The mean leader delta over paired windows (used and discarded), in leader units:
    /// the window length actually measured, sampler included.
    pub mean_window: Option<f64>,
    /// The same net of the baseline: the target's own time per window.
    pub net_window: Option<f64>,
    /// The mean leader correction per window (the baseline, and each call tail's delay
    /// on windows that began in a call), over the same windows.
    pub correction: Option<f64>,
    /// Windows that began inside the kernel, a system call or a fault (at its overflow, not
    /// at the handler).
    pub tail_windows: u64,
    /// Of those, the ones whose tail alone was a window (scaled to the net window).
    pub tail_only_windows: u64,
    /// The baseline and whether it was subtracted.
    pub baseline: BaselineUse,
    /// The policy the report was built with.
    pub policy: WindowPolicy,
    /// Net sums over every attributed window.
    pub all: WindowSums,
    /// Every sample in time order, by thread, when the aggregation kept them
    /// ([`Aggregator::keep_timeline`](crate::Aggregator::keep_timeline)).
    pub timeline: Option<crate::timeline::Timeline>,
    /// Off-CPU totals, when the recording has off-CPU intervals.
    pub off_cpu: Option<OffCpuTotals>,
    /// Each command's share of the CPU time (empty for recordings without per-thread
    /// CPU times), most first.
    pub processes: Vec<crate::accounting::ProcessShare>,
    /// Each counter's rate in the windows against the long periods between them (empty
    /// when the recording did not alternate, or had too few windows to judge).
    pub window_check: Vec<crate::window_check::CounterCheck>,
    /// Programs of an alternating recording that the agent did not run in (a statically
    /// linked program a shell started, a setuid one, one that cleared `LD_PRELOAD`): the
    /// kernel floor sampled their time, without windows. Most samples first.
    pub without_agent: Vec<WithoutAgent>,
}

/// A program the agent did not run in, in a recording whose other programs it served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WithoutAgent {
    /// The executable's file name.
    pub command: String,
    /// Processes that ran it.
    pub processes: u64,
    /// The kernel floor's samples of them (time samples, lost ones included).
    pub samples: u64,
}

impl Report {
    /// The derived metrics this recording supports, in table order.
    pub fn metrics(&self) -> Vec<&'static MetricDef> {
        self.counters.available()
    }

    /// `f`'s share of all time samples (self), in percent.
    pub fn time_pct(&self, f: &FunctionStats) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            100.0 * f.samples as f64 / self.samples as f64
        }
    }

    /// `f`'s self share with its 95% interval (Wilson), in percent.
    pub fn time_estimate(&self, f: &FunctionStats) -> Estimate {
        wilson(f.samples, self.samples).scaled(100.0)
    }

    /// `f`'s total (inclusive) share with its 95% interval, in percent.
    pub fn total_estimate(&self, f: &FunctionStats) -> Estimate {
        wilson(f.total_samples, self.samples).scaled(100.0)
    }

    /// The value of metric `m` over `sums`; `None` when there are no windows or a zero
    /// denominator.
    pub fn metric_of(&self, sums: &WindowSums, m: &MetricDef) -> Option<f64> {
        self.estimate_of(sums, m).map(|e| e.value)
    }

    /// The value of metric `m` for `f`; `None` when `f` has no attributed windows or a
    /// zero denominator.
    pub fn metric(&self, f: &FunctionStats, m: &MetricDef) -> Option<f64> {
        self.metric_of(&f.sums, m)
    }

    /// Metric `m` for `f` with its 95% interval: the windows' spread, plus the
    /// baseline's own uncertainty.
    pub fn metric_estimate(&self, f: &FunctionStats, m: &MetricDef) -> Option<Estimate> {
        self.with_edges(self.estimate_of(&f.sums, m)?, &f.sums, &f.edge_sums, m)
    }

    /// Metric `m` over the windows inside `f`'s calls, its callees' included, with its
    /// 95% interval.
    pub fn total_metric_estimate(&self, f: &FunctionStats, m: &MetricDef) -> Option<Estimate> {
        self.with_edges(self.estimate_of(&f.total_sums, m)?, &f.total_sums, &f.total_edge_sums, m)
    }

    /// `e`, its interval widened by what leaving out the windows that crossed the
    /// function's edges can have moved it: half the difference between their rate and
    /// the kept windows', in proportion to how many they are. (A window holds one
    /// function's work only if it began and ended in it, so a function's first and last
    /// stretch, a window long, is under-represented in its windows: a function that ends
    /// in a long system call, say, reads the rate of its other parts.)
    fn with_edges(
        &self,
        e: Estimate,
        kept: &WindowSums,
        edge: &WindowSums,
        m: &MetricDef,
    ) -> Option<Estimate> {
        let Some(crossing) = self.estimate_of(edge, m).filter(|_| edge.n > 0) else {
            return Some(e);
        };
        let share = edge.n as f64 / (edge.n + kept.n) as f64;
        let bound = 0.5 * (crossing.value - e.value).abs() * share;
        Some(Estimate { value: e.value, low: (e.low - bound).max(0.0), high: e.high + bound })
    }

    /// Metric `m` over any window sums (a function's, a call path's), with its interval.
    pub fn estimate_of(&self, sums: &WindowSums, m: &MetricDef) -> Option<Estimate> {
        if sums.n == 0 {
            return None;
        }
        let idx = |c: Counter| self.counters.index(c);
        // The baseline's own variance per counter: sd² over its windows.
        let beta_var = |i: usize| -> f64 {
            match &self.baseline {
                BaselineUse::Applied { counters, intervals } => {
                    counters.get(i).map_or(0.0, |c| c.sd * c.sd / (*intervals).max(1) as f64)
                }
                _ => 0.0,
            }
        };
        let n = sums.n as f64;
        match m.formula {
            Formula::Ratio { num, den, scale } => {
                let (a, b) = (idx(num)?, idx(den)?);
                let (r, var) = sums.ratio(a, b)?;
                let sb = sums.sums[b];
                let sys = (n / sb).powi(2) * (beta_var(a) + r * r * beta_var(b));
                Some(Estimate::from_var(r, var + sys, 0.0).scaled(scale))
            }
            Formula::PerMs(c) => {
                let (a, b) = (idx(c)?, idx(Counter::Time)?);
                let (r, var) = sums.ratio(a, b)?;
                let sb = sums.sums[b];
                let sys = (n / sb).powi(2) * (beta_var(a) + r * r * beta_var(b));
                // Events counted one by one (faults, switches) are at least as uncertain
                // as a Poisson count: with a handful of them the windows' spread says
                // little (none at all with none), and the interval must not collapse.
                let poisson = sums.sums[a].max(1.0) / (sb * sb);
                Some(Estimate::from_var(r, var.max(poisson) + sys, 0.0).scaled(1e6))
            }
            Formula::Share(c) => {
                let i = idx(c)?;
                // A share of events counted one by one (page faults) rests on at least
                // one of them: a function's share of the fraction of a fault the windows
                // hold net of the baseline would read 100% with no interval.
                let events = *self.all.sums.get(i)?;
                if events < 1.0 {
                    return None;
                }
                let (p, var) = sums.share(&self.all, i)?;
                // At least as uncertain as a proportion of that many events (Wilson): the
                // windows' spread says little when few of them hold any.
                let n = events.round() as u64;
                let w = wilson((p * n as f64).round() as u64, n);
                let e = Estimate::from_var(p, var, 0.0);
                Some(
                    Estimate { value: p, low: e.low.min(w.low), high: e.high.max(w.high) }
                        .scaled(100.0),
                )
            }
        }
    }

    /// True when `f`'s metrics rest on fewer than `FEW_WINDOWS` (30) windows.
    pub fn few_windows(&self, f: &FunctionStats) -> bool {
        f.windows > 0 && f.windows < FEW_WINDOWS
    }

    /// The function named `name` (first match in any module).
    pub fn function(&self, name: &str) -> Option<&FunctionStats> {
        self.functions.iter().find(|f| f.function == name)
    }

    /// The index of the function named `name` (first match in any module).
    pub fn function_index(&self, name: &str) -> Option<usize> {
        self.functions.iter().position(|f| f.function == name)
    }

    /// `f`'s on-CPU time in ns, self (`total`: with its callees): its time samples times
    /// the period, when the leader counts time.
    pub fn on_cpu_ns(&self, f: &FunctionStats, total: bool) -> Option<f64> {
        let n = if total { f.total_samples } else { f.samples };
        self.leader_is_time().then_some(n as f64 * self.info.period as f64)
    }

    /// True when the leader counts time, so periods and windows are nanoseconds.
    pub fn leader_is_time(&self) -> bool {
        self.counters.index(Counter::Time) == Some(0)
    }
}
