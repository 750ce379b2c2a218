//! The shape every benchmark returns: JSON rows plus a human table.
//!
//! Owns that shape ([`BenchOpts`], [`BenchReport`], [`row`]) and the line naming the
//! machine a report ran on. It must never measure anything itself, and never invent a
//! fact it cannot read (an unreadable CPU model is "unknown CPU").

use serde::Serialize;
use serde_json::{Map, Value};

/// One row of a benchmark: a variant measured under one setting, as JSON fields
/// (`variant`, `threads`, and the figures).
pub type Row = Map<String, Value>;

/// Options shared by every benchmark.
#[derive(Debug, Clone)]
pub struct BenchOpts {
    /// Shrink iteration counts so the whole benchmark finishes in seconds.
    /// Used by the smoke tests in CI; figures from a quick run are not quotable.
    pub quick: bool,
    /// How many times each variant is measured; the median is reported.
    pub repeats: usize,
    /// The `strobe` executable, for benchmarks that drive whole commands
    /// (`sampling` runs `strobe record` and `strobe report`). The CLI passes
    /// its own path.
    pub strobe_exe: Option<std::path::PathBuf>,
}

impl Default for BenchOpts {
    fn default() -> Self {
        Self { quick: false, repeats: 5, strobe_exe: None }
    }
}

/// What a benchmark run produced.
///
/// Serialises as `{"bench": NAME, "rows": [...], ...extra}`.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// The benchmark's name, as typed after `strobe bench`.
    pub bench: String,
    /// One JSON object per (variant, setting).
    pub rows: Vec<Row>,
    /// Top-level figures that are not per-row (e.g. `report_samples_per_s`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// The human-readable rendering: variants side by side with ratios, the
    /// machine it ran on, and the goals with pass/miss marks.
    #[serde(skip)]
    pub text: String,
}

impl BenchReport {
    /// An empty report for benchmark `bench`.
    pub fn new(bench: &str) -> Self {
        Self { bench: bench.to_string(), rows: Vec::new(), extra: Map::new(), text: String::new() }
    }

    /// The machine-readable form printed by `--json`.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report is plain JSON values")
    }
}

/// Builds a row from `(field, value)` pairs.
pub(crate) fn row<const N: usize>(fields: [(&str, Value); N]) -> Row {
    fields.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// One line naming the machine a benchmark ran on (CPU model, online CPUs,
/// kernel release), for the report header and docs/BENCHMARKS.md.
pub(crate) fn machine_summary() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".to_string());
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown kernel".to_string());
    format!("{model}, {cpus} CPUs, Linux {kernel}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_keeps_each_field() {
        let r = row([("variant", "strobe".into()), ("threads", 2.into())]);
        assert_eq!(r["variant"], "strobe");
        assert_eq!(r["threads"], 2);
        assert_eq!(r.len(), 2);
    }
}
