//! The derived metrics: one table, [`METRICS`], says what each one means, how it is
//! computed and which counters it needs. Everything else (the table's columns, the JSON
//! fields, `--sort` keys, the help text) is generated from it.
//!
//! Every metric is computed from the counter deltas of the windows attributed to a
//! function, summed over those windows (ratios of sums, not means of ratios: a window
//! of 30 instructions must not weigh as much as one of 3000). A metric appears only
//! when every counter it needs was recorded.
//!
//! This module must never look at samples or symbols: it is arithmetic over sums.

/// A counter the metrics know how to use. Other recorded counters are carried along
/// but feed no metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counter {
    /// `task-clock` (or `cpu-clock` when task-clock is absent): nanoseconds on CPU.
    Time,
    /// `cycles`.
    Cycles,
    /// `instructions`.
    Instructions,
    /// `branch-instructions` (`branches`).
    Branches,
    /// `branch-misses`.
    BranchMisses,
    /// `cache-references`.
    CacheReferences,
    /// `cache-misses`.
    CacheMisses,
    /// `page-faults` (`faults`).
    PageFaults,
    /// `minor-faults`.
    MinorFaults,
    /// `major-faults`.
    MajorFaults,
    /// `context-switches` (`cs`).
    ContextSwitches,
    /// `cpu-migrations` (`migrations`).
    CpuMigrations,
}

impl Counter {
    /// The counter a perf event name denotes, accepting perf's aliases and ignoring a
    /// `:modifier` suffix. `cpu-clock` maps to [`Counter::Time`] too; when both clocks
    /// were recorded, [`CounterSet`] prefers `task-clock`.
    pub fn from_event_name(name: &str) -> Option<Counter> {
        let base = name.split(':').next().unwrap_or(name).trim();
        Some(match base {
            "task-clock" | "cpu-clock" => Counter::Time,
            "cycles" | "cpu-cycles" => Counter::Cycles,
            "instructions" => Counter::Instructions,
            "branch-instructions" | "branches" => Counter::Branches,
            "branch-misses" => Counter::BranchMisses,
            "cache-references" => Counter::CacheReferences,
            "cache-misses" => Counter::CacheMisses,
            "page-faults" | "faults" => Counter::PageFaults,
            "minor-faults" => Counter::MinorFaults,
            "major-faults" => Counter::MajorFaults,
            "context-switches" | "cs" => Counter::ContextSwitches,
            "cpu-migrations" | "migrations" => Counter::CpuMigrations,
            _ => return None,
        })
    }
}

/// How a metric is computed from the per-function sums `f(c)` of counter `c` over the
/// windows attributed to the function, and the sums `all(c)` over every attributed
/// window of the report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Formula {
    /// `scale * f(num) / f(den)`.
    Ratio {
        /// Numerator counter.
        num: Counter,
        /// Denominator counter.
        den: Counter,
        /// Multiplier (1000 for "per 1000", 100 for percentages).
        scale: f64,
    },
    /// `100 * f(c) / all(c)`: the function's share of everything counted in windows.
    Share(Counter),
    /// `f(c) / (f(Time) / 1e6)`: events per millisecond of the windows' CPU time.
    PerMs(Counter),
}

impl Formula {
    /// The counters the formula reads.
    pub fn needs(&self) -> Vec<Counter> {
        match *self {
            Formula::Ratio { num, den, .. } => vec![num, den],
            Formula::Share(c) => vec![c],
            Formula::PerMs(c) => vec![c, Counter::Time],
        }
    }
}

/// One derived metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetricDef {
    /// The JSON field and CSV column name, and the `--sort` key.
    pub key: &'static str,
    /// The table's column header (also accepted by `--sort`).
    pub header: &'static str,
    /// What the number means, for the help text.
    pub description: &'static str,
    /// How it is computed.
    pub formula: Formula,
    /// Decimal places in the table and CSV.
    pub decimals: usize,
}

use Counter as C;
use Formula as F;

/// Every derived metric, in the order the table shows them.
///
/// | key | header | formula (sums over the function's windows) | counters |
/// |---|---|---|---|
/// | `cpi` | CPI | cycles / instructions | cycles, instructions |
/// | `ipc` | IPC | instructions / cycles | cycles, instructions |
/// | `branch_misses_per_ki` | BM/KI | 1000 * branch-misses / instructions | branch-misses, instructions |
/// | `cache_misses_per_ki` | CM/KI | 1000 * cache-misses / instructions | cache-misses, instructions |
/// | `branch_miss_rate_pct` | %BMR | 100 * branch-misses / branch-instructions | branch-misses, branch-instructions |
/// | `cache_miss_rate_pct` | %CM | 100 * cache-misses / cache-references | cache-misses, cache-references |
/// | `ghz` | GHz | cycles / task-clock ns | cycles, task-clock |
/// | `cycles_pct` | %CY | 100 * cycles / all windows' cycles | cycles |
/// | `instructions_pct` | %I | 100 * instructions / all windows' instructions | instructions |
/// | `branch_misses_pct` | %BM | 100 * branch-misses / all windows' branch-misses | branch-misses |
/// | `cache_misses_pct` | %CMS | 100 * cache-misses / all windows' cache-misses | cache-misses |
/// | `page_faults_per_ms` | faults/ms | page-faults / (task-clock ns / 1e6) | page-faults, task-clock |
/// | `minor_faults_per_ms` | minflt/ms | minor-faults / task-clock ms | minor-faults, task-clock |
/// | `major_faults_per_ms` | majflt/ms | major-faults / task-clock ms | major-faults, task-clock |
/// | `context_switches_per_ms` | cs/ms | context-switches / task-clock ms | context-switches, task-clock |
/// | `migrations_per_ms` | migr/ms | cpu-migrations / task-clock ms | cpu-migrations, task-clock |
/// | `page_faults_pct` | %PF | 100 * page-faults / all windows' page-faults | page-faults |
///
/// "task-clock" stands for `cpu-clock` when only that clock was recorded.
pub const METRICS: &[MetricDef] = &[
    MetricDef {
        key: "cpi",
        header: "CPI",
        description: "cycles per instruction",
        formula: F::Ratio { num: C::Cycles, den: C::Instructions, scale: 1.0 },
        decimals: 2,
    },
    MetricDef {
        key: "ipc",
        header: "IPC",
        description: "instructions per cycle",
        formula: F::Ratio { num: C::Instructions, den: C::Cycles, scale: 1.0 },
        decimals: 2,
    },
    MetricDef {
        key: "branch_misses_per_ki",
        header: "BM/KI",
        description: "branch misses per 1000 instructions",
        formula: F::Ratio { num: C::BranchMisses, den: C::Instructions, scale: 1000.0 },
        decimals: 1,
    },
    MetricDef {
        key: "cache_misses_per_ki",
        header: "CM/KI",
        description: "cache misses per 1000 instructions",
        formula: F::Ratio { num: C::CacheMisses, den: C::Instructions, scale: 1000.0 },
        decimals: 1,
    },
    MetricDef {
        key: "branch_miss_rate_pct",
        header: "%BMR",
        description: "percent of branches mispredicted",
        formula: F::Ratio { num: C::BranchMisses, den: C::Branches, scale: 100.0 },
        decimals: 1,
    },
    MetricDef {
        key: "cache_miss_rate_pct",
        header: "%CM",
        description: "percent of cache references that miss",
        formula: F::Ratio { num: C::CacheMisses, den: C::CacheReferences, scale: 100.0 },
        decimals: 1,
    },
    MetricDef {
        key: "ghz",
        header: "GHz",
        description: "cycles per nanosecond on CPU",
        formula: F::Ratio { num: C::Cycles, den: C::Time, scale: 1.0 },
        decimals: 2,
    },
    MetricDef {
        key: "cycles_pct",
        header: "%CY",
        description: "percent of all cycles counted in windows",
        formula: F::Share(C::Cycles),
        decimals: 1,
    },
    MetricDef {
        key: "instructions_pct",
        header: "%I",
        description: "percent of all instructions counted in windows",
        formula: F::Share(C::Instructions),
        decimals: 1,
    },
    MetricDef {
        key: "branch_misses_pct",
        header: "%BM",
        description: "percent of all branch misses counted in windows",
        formula: F::Share(C::BranchMisses),
        decimals: 1,
    },
    MetricDef {
        key: "cache_misses_pct",
        header: "%CMS",
        description: "percent of all cache misses counted in windows",
        formula: F::Share(C::CacheMisses),
        decimals: 1,
    },
    MetricDef {
        key: "page_faults_per_ms",
        header: "faults/ms",
        description: "page faults per ms of CPU time in the function's windows",
        formula: F::PerMs(C::PageFaults),
        decimals: 2,
    },
    MetricDef {
        key: "minor_faults_per_ms",
        header: "minflt/ms",
        description: "minor page faults per ms of CPU time",
        formula: F::PerMs(C::MinorFaults),
        decimals: 2,
    },
    MetricDef {
        key: "major_faults_per_ms",
        header: "majflt/ms",
        description: "major page faults per ms of CPU time",
        formula: F::PerMs(C::MajorFaults),
        decimals: 2,
    },
    MetricDef {
        key: "context_switches_per_ms",
        header: "cs/ms",
        description: "context switches per ms of CPU time in the function's windows",
        formula: F::PerMs(C::ContextSwitches),
        decimals: 2,
    },
    MetricDef {
        key: "migrations_per_ms",
        header: "migr/ms",
        description: "CPU migrations per ms of CPU time",
        formula: F::PerMs(C::CpuMigrations),
        decimals: 2,
    },
    MetricDef {
        key: "page_faults_pct",
        header: "%PF",
        description: "percent of all page faults counted in windows",
        formula: F::Share(C::PageFaults),
        decimals: 1,
    },
];

/// Where each known counter sits in a sample's values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CounterSet {
    slots: Vec<(Counter, usize)>,
}

impl CounterSet {
    /// Resolves recorded event names (leader first) to counters. The first event naming
    /// a counter wins, except that `task-clock` beats an earlier `cpu-clock`.
    pub fn from_events<S: AsRef<str>>(events: &[S]) -> CounterSet {
        let mut slots: Vec<(Counter, usize)> = Vec::new();
        for (i, name) in events.iter().enumerate() {
            let name = name.as_ref();
            let Some(c) = Counter::from_event_name(name) else { continue };
            let is_task_clock = name.split(':').next() == Some("task-clock");
            match slots.iter_mut().find(|(have, _)| *have == c) {
                Some(slot) if c == Counter::Time && is_task_clock => slot.1 = i,
                Some(_) => {}
                None => slots.push((c, i)),
            }
        }
        CounterSet { slots }
    }

    /// The value index of `c`, if it was recorded.
    pub fn index(&self, c: Counter) -> Option<usize> {
        self.slots.iter().find(|(have, _)| *have == c).map(|(_, i)| *i)
    }

    /// True when every counter `m` needs was recorded.
    pub fn supports(&self, m: &MetricDef) -> bool {
        m.formula.needs().iter().all(|c| self.index(*c).is_some())
    }

    /// The metrics this recording supports, in table order.
    pub fn available(&self) -> Vec<&'static MetricDef> {
        METRICS.iter().filter(|m| self.supports(m)).collect()
    }

    /// Evaluates `m` for a function whose window sums are `sums` (indexed like sample
    /// values), given the sums `all` over every attributed window. `None` when a
    /// counter is missing or a denominator is zero (no windows, or nothing counted).
    pub fn eval(&self, m: &MetricDef, sums: &[u64], all: &[u64]) -> Option<f64> {
        let get = |c: Counter, v: &[u64]| -> Option<f64> {
            self.index(c).and_then(|i| v.get(i)).map(|&x| x as f64)
        };
        let ratio = |num: f64, den: f64| if den > 0.0 { Some(num / den) } else { None };
        match m.formula {
            Formula::Ratio { num, den, scale } => {
                ratio(get(num, sums)?, get(den, sums)?).map(|r| r * scale)
            }
            Formula::Share(c) => ratio(get(c, sums)?, get(c, all)?).map(|r| r * 100.0),
            Formula::PerMs(c) => ratio(get(c, sums)?, get(Counter::Time, sums)? / 1e6),
        }
    }
}

/// The formula of `m` in words, e.g. `1000 * branch-misses / instructions`.
pub fn formula_text(m: &MetricDef) -> String {
    match m.formula {
        Formula::Ratio { num, den, scale } => {
            let prefix = if scale == 1.0 { String::new() } else { format!("{scale} * ") };
            let unit = if den == Counter::Time { " ns" } else { "" };
            format!("{prefix}{} / {}{unit}", counter_name(num), counter_name(den))
        }
        Formula::Share(c) => format!("100 * {0} / all windows' {0}", counter_name(c)),
        Formula::PerMs(c) => format!("{} / task-clock ms", counter_name(c)),
    }
}

/// The metrics table as text, for `strobe report --help`: header, key, formula.
pub fn help_table() -> String {
    let mut out = String::new();
    for m in METRICS {
        out.push_str(&format!("  {:<10} {:<24} {}\n", m.header, m.key, formula_text(m)));
    }
    out
}

/// The perf event name of a counter, as the help text names it.
pub fn counter_name(c: Counter) -> &'static str {
    match c {
        Counter::Time => "task-clock",
        Counter::Cycles => "cycles",
        Counter::Instructions => "instructions",
        Counter::Branches => "branch-instructions",
        Counter::BranchMisses => "branch-misses",
        Counter::CacheReferences => "cache-references",
        Counter::CacheMisses => "cache-misses",
        Counter::PageFaults => "page-faults",
        Counter::MinorFaults => "minor-faults",
        Counter::MajorFaults => "major-faults",
        Counter::ContextSwitches => "context-switches",
        Counter::CpuMigrations => "cpu-migrations",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metric(key: &str) -> &'static MetricDef {
        METRICS.iter().find(|m| m.key == key).unwrap()
    }

    #[test]
    fn keys_and_headers_are_unique() {
        for (i, a) in METRICS.iter().enumerate() {
            for b in &METRICS[i + 1..] {
                assert_ne!(a.key, b.key);
                assert!(!a.header.eq_ignore_ascii_case(b.header), "{}", a.header);
            }
        }
    }

    #[test]
    fn hardware_formulas() {
        let set = CounterSet::from_events(&[
            "cycles",
            "instructions",
            "branch-misses",
            "cache-references",
            "cache-misses",
            "branches",
        ]);
        // cycles, instructions, branch-misses, cache-refs, cache-misses, branches
        let f = [3000, 1000, 20, 400, 100, 250];
        let all = [12000, 8000, 40, 800, 400, 1000];
        let v = |k: &str| set.eval(metric(k), &f, &all).unwrap();
        assert_eq!(v("cpi"), 3.0);
        assert_eq!(v("ipc"), 1000.0 / 3000.0);
        assert_eq!(v("branch_misses_per_ki"), 20.0);
        assert_eq!(v("cache_misses_per_ki"), 100.0);
        assert_eq!(v("branch_miss_rate_pct"), 8.0);
        assert_eq!(v("cache_miss_rate_pct"), 25.0);
        assert_eq!(v("cycles_pct"), 25.0);
        assert_eq!(v("instructions_pct"), 12.5);
        assert_eq!(v("branch_misses_pct"), 50.0);
        assert_eq!(v("cache_misses_pct"), 25.0);
        // No clock recorded: nothing per ms, no GHz.
        assert!(!set.supports(metric("ghz")));
        assert!(!set.supports(metric("page_faults_per_ms")));
    }

    #[test]
    fn software_formulas_are_per_ms_of_window_time() {
        let set = CounterSet::from_events(&["task-clock", "page-faults", "cs"]);
        // 2.5 ms of windows with 10 faults and 1 switch.
        let f = [2_500_000, 10, 1];
        let all = [5_000_000, 40, 1];
        assert_eq!(set.eval(metric("page_faults_per_ms"), &f, &all), Some(4.0));
        assert_eq!(set.eval(metric("context_switches_per_ms"), &f, &all), Some(0.4));
        assert_eq!(set.eval(metric("page_faults_pct"), &f, &all), Some(25.0));
        let keys: Vec<&str> = set.available().iter().map(|m| m.key).collect();
        assert_eq!(keys, ["page_faults_per_ms", "context_switches_per_ms", "page_faults_pct"]);
    }

    #[test]
    fn zero_denominator_is_no_value_not_infinity() {
        let set = CounterSet::from_events(&["task-clock", "page-faults"]);
        assert_eq!(set.eval(metric("page_faults_per_ms"), &[0, 0], &[0, 0]), None);
        assert_eq!(set.eval(metric("page_faults_pct"), &[0, 0], &[10, 0]), None);
    }

    #[test]
    fn help_names_every_metric_with_its_formula() {
        let help = help_table();
        assert_eq!(help.lines().count(), METRICS.len());
        assert!(help
            .contains("BM/KI      branch_misses_per_ki     1000 * branch-misses / instructions"));
        assert!(help.contains("faults/ms  page_faults_per_ms       page-faults / task-clock ms"));
        assert!(help.lines().all(|l| l.len() < 90), "fits a terminal:\n{help}");
    }

    #[test]
    fn clock_and_alias_resolution() {
        let set = CounterSet::from_events(&["cpu-clock", "faults", "task-clock:u"]);
        assert_eq!(set.index(Counter::Time), Some(2), "task-clock beats cpu-clock");
        assert_eq!(set.index(Counter::PageFaults), Some(1));
        let only_cpu = CounterSet::from_events(&["cpu-clock", "page-faults"]);
        assert_eq!(only_cpu.index(Counter::Time), Some(0));
        assert_eq!(Counter::from_event_name("no-such-event"), None);
    }
}
