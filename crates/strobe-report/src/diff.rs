//! Two recordings compared: each function's change in time share and in every window
//! metric both recordings support, flagged only when it lies outside both runs' error
//! bars.
//!
//! A change is *flagged* when the two 95% intervals do not overlap: the new value is
//! outside the base run's interval and the base value outside the new run's. That is
//! stricter than a 5% test on the difference (two disjoint 95% intervals correspond to
//! p < 0.006 for normal estimates), on purpose: a report lists hundreds of functions, and
//! an unflagged change is one these runs cannot tell from noise. A function absent from
//! one run has a time share of 0 there, with the Wilson interval of 0 samples out of that
//! run's total; its metrics there are missing and never flagged.
//!
//! Functions are matched by name and module file name (so a rebuilt binary at another
//! path still matches).
//!
//! Owns: matching, the changes and their flags, their rendering. Must never compute an
//! estimate itself: every value and interval comes from [`Report`].

use std::fmt::Write as _;

use rustc_hash::FxHashMap;

use crate::metrics::MetricDef;
use crate::render::{csv_field, Format};
use crate::report::Report;
use crate::stats::{wilson, Estimate};

/// One quantity in both runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Change {
    /// In the base run (`None`: no value there).
    pub base: Option<Estimate>,
    /// In the new run.
    pub new: Option<Estimate>,
    /// The two intervals do not overlap.
    pub flagged: bool,
}

impl Change {
    fn of(base: Option<Estimate>, new: Option<Estimate>) -> Change {
        let flagged = match (base, new) {
            (Some(b), Some(n)) => {
                let finite = b.low.is_finite()
                    && b.high.is_finite()
                    && n.low.is_finite()
                    && n.high.is_finite();
                finite && (n.low > b.high || n.high < b.low)
            }
            _ => false,
        };
        Change { base, new, flagged }
    }

    /// New minus base, when both exist.
    pub fn delta(&self) -> Option<f64> {
        Some(self.new?.value - self.base?.value)
    }
}

/// One function's changes.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionDiff {
    /// The function.
    pub function: String,
    /// Its module's file name.
    pub module: String,
    /// Self time share, percent.
    pub time: Change,
    /// One per [`Diff::metrics`].
    pub metrics: Vec<Change>,
}

impl FunctionDiff {
    /// Whether any of its changes is flagged.
    pub fn flagged(&self) -> bool {
        self.time.flagged || self.metrics.iter().any(|c| c.flagged)
    }
}

/// Two reports compared.
#[derive(Debug, Clone, PartialEq)]
pub struct Diff {
    /// The metrics both recordings support.
    pub metrics: Vec<&'static MetricDef>,
    /// Every function of either run, largest time change first.
    pub functions: Vec<FunctionDiff>,
    /// Time samples in the base run.
    pub base_samples: u64,
    /// Time samples in the new run.
    pub new_samples: u64,
}

/// Compares `new` against `base`.
pub fn diff(base: &Report, new: &Report) -> Diff {
    let nm = new.metrics();
    let metrics: Vec<&'static MetricDef> =
        base.metrics().into_iter().filter(|m| nm.iter().any(|n| n.key == m.key)).collect();
    // (function, module) -> its index in the base run and in the new run.
    type Sides = (Option<usize>, Option<usize>);
    let mut index: FxHashMap<(&str, &str), Sides> = FxHashMap::default();
    let mut order: Vec<(&str, &str)> = Vec::new();
    for (side, r) in [(0, base), (1, new)] {
        for (i, f) in r.functions.iter().enumerate() {
            let key = (f.function.as_str(), f.module.as_str());
            let e = index.entry(key).or_insert_with(|| {
                order.push(key);
                (None, None)
            });
            if side == 0 {
                e.0 = Some(i);
            } else {
                e.1 = Some(i);
            }
        }
    }
    let time = |r: &Report, i: Option<usize>| -> Estimate {
        match i.and_then(|i| r.functions.get(i)) {
            Some(f) => r.time_estimate(f),
            None => wilson(0, r.samples).scaled(100.0),
        }
    };
    let mut functions: Vec<FunctionDiff> = order
        .into_iter()
        .map(|key| {
            let (b, n) = index[&key];
            let bf = b.and_then(|i| base.functions.get(i));
            let nf = n.and_then(|i| new.functions.get(i));
            FunctionDiff {
                function: key.0.to_string(),
                module: key.1.to_string(),
                time: Change::of(Some(time(base, b)), Some(time(new, n))),
                metrics: metrics
                    .iter()
                    .map(|m| {
                        Change::of(
                            bf.and_then(|f| base.metric_estimate(f, m)),
                            nf.and_then(|f| new.metric_estimate(f, m)),
                        )
                    })
                    .collect(),
            }
        })
        .collect();
    functions.sort_by(|a, b| {
        let d = |f: &FunctionDiff| f.time.delta().unwrap_or(0.0).abs();
        d(b).total_cmp(&d(a)).then_with(|| a.function.cmp(&b.function))
    });
    Diff { metrics, functions, base_samples: base.samples, new_samples: new.samples }
}

fn half(e: &Estimate) -> f64 {
    (e.high - e.value).max(e.value - e.low)
}

fn cell(e: Option<Estimate>, d: usize) -> String {
    match e {
        Some(e) if half(&e).is_finite() => format!("{:.d$}±{:.d$}", e.value, half(&e)),
        Some(e) => format!("{:.d$}±?", e.value),
        None => "-".into(),
    }
}

fn delta_cell(c: &Change, d: usize) -> String {
    match c.delta() {
        Some(x) => format!("{x:+.d$}{}", if c.flagged { " !" } else { "" }),
        None => "-".into(),
    }
}

/// Renders `d` as a table, CSV or JSON, keeping the first `top` functions (all when
/// `None`).
pub fn render(d: &Diff, format: Format, top: Option<usize>) -> String {
    let rows = &d.functions[..top.unwrap_or(usize::MAX).min(d.functions.len())];
    match format {
        Format::Table => table(d, rows),
        Format::Csv => csv(d, rows),
        Format::Json => json(d, rows),
    }
}

fn table(d: &Diff, rows: &[FunctionDiff]) -> String {
    let mut header: Vec<String> =
        vec!["function".into(), "base self%".into(), "new self%".into(), "change".into()];
    for m in &d.metrics {
        header.push(format!("base {}", m.header));
        header.push(format!("new {}", m.header));
        header.push("change".into());
    }
    header.push("module".into());
    let mut cells = vec![header];
    for f in rows {
        let mut r = vec![
            f.function.chars().take(60).collect(),
            cell(f.time.base, 1),
            cell(f.time.new, 1),
            delta_cell(&f.time, 1),
        ];
        for (m, c) in d.metrics.iter().zip(&f.metrics) {
            r.push(cell(c.base, m.decimals));
            r.push(cell(c.new, m.decimals));
            r.push(delta_cell(c, m.decimals));
        }
        r.push(f.module.clone());
        cells.push(r);
    }
    let n = cells[0].len();
    let widths: Vec<usize> =
        (0..n).map(|c| cells.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    let mut out = format!(
        "base: {} samples; new: {} samples. !: the change lies outside both runs' 95% intervals\n\n",
        d.base_samples, d.new_samples
    );
    for r in &cells {
        let mut line = String::new();
        for (c, (v, w)) in r.iter().zip(&widths).enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            if c == 0 {
                let _ = write!(line, "{v:<w$}");
            } else if c + 1 == n {
                line.push_str(v);
            } else {
                let _ = write!(line, "{v:>w$}");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    let flagged = d.functions.iter().filter(|f| f.flagged()).count();
    let _ = writeln!(
        out,
        "\n{flagged} of {} functions changed beyond their error bars",
        d.functions.len()
    );
    out
}

fn csv(d: &Diff, rows: &[FunctionDiff]) -> String {
    let mut cols = vec!["function".to_string(), "module".into()];
    let mut keys = vec!["time_pct".to_string()];
    keys.extend(d.metrics.iter().map(|m| m.key.to_string()));
    for k in &keys {
        for s in
            ["base", "base_low", "base_high", "new", "new_low", "new_high", "change", "flagged"]
        {
            cols.push(format!("{k}_{s}"));
        }
    }
    let mut out = cols.join(",");
    out.push('\n');
    let num =
        |v: Option<f64>| v.filter(|v| v.is_finite()).map_or(String::new(), |v| format!("{v:.4}"));
    for f in rows {
        let mut r = vec![csv_field(&f.function), csv_field(&f.module)];
        for c in std::iter::once(&f.time).chain(&f.metrics) {
            for e in [c.base, c.new] {
                r.push(num(e.map(|e| e.value)));
                r.push(num(e.map(|e| e.low)));
                r.push(num(e.map(|e| e.high)));
            }
            r.push(num(c.delta()));
            r.push(c.flagged.to_string());
        }
        out.push_str(&r.join(","));
        out.push('\n');
    }
    out
}

fn json(d: &Diff, rows: &[FunctionDiff]) -> String {
    use serde_json::{json, Map, Value};
    let fin = |v: f64| if v.is_finite() { json!((v * 1e4).round() / 1e4) } else { Value::Null };
    let est = |e: Option<Estimate>| match e {
        Some(e) => json!({"value": fin(e.value), "low": fin(e.low), "high": fin(e.high)}),
        None => Value::Null,
    };
    let change = |c: &Change| json!({"base": est(c.base), "new": est(c.new), "change": c.delta().map(fin), "flagged": c.flagged});
    let functions: Vec<Value> = rows
        .iter()
        .map(|f| {
            let mut o = Map::new();
            o.insert("function".into(), json!(f.function));
            o.insert("module".into(), json!(f.module));
            o.insert("time_pct".into(), change(&f.time));
            for (m, c) in d.metrics.iter().zip(&f.metrics) {
                o.insert(m.key.into(), change(c));
            }
            Value::Object(o)
        })
        .collect();
    let doc = json!({
        "base_samples": d.base_samples,
        "new_samples": d.new_samples,
        "metrics": d.metrics.iter().map(|m| m.key).collect::<Vec<_>>(),
        "functions": functions,
    });
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(value: f64, half: f64) -> Option<Estimate> {
        Some(Estimate { value, low: value - half, high: value + half })
    }

    #[test]
    fn flagged_only_outside_both_intervals() {
        assert!(Change::of(e(10.0, 1.0), e(12.5, 1.0)).flagged);
        assert!(!Change::of(e(10.0, 1.0), e(11.5, 1.0)).flagged, "overlapping intervals");
        assert!(Change::of(e(10.0, 1.0), e(7.0, 1.0)).flagged);
        assert!(!Change::of(e(10.0, 1.0), None).flagged);
        let inf = Some(Estimate { value: 1.0, low: 1.0, high: f64::INFINITY });
        assert!(!Change::of(inf, e(9.0, 0.1)).flagged, "no interval, no flag");
        assert_eq!(Change::of(e(10.0, 1.0), e(12.5, 1.0)).delta(), Some(2.5));
    }
}
