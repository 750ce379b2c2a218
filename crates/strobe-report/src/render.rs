//! What users read: the report as a table, CSV or JSON, sorted by any column, cut to the
//! top N.
//!
//! Columns are generated from [`crate::metrics::METRICS`] and the counters recorded, so a
//! metric appears only when its counters were recorded. Lost samples are printed before
//! anything else in the table when there are any, and the period and mean measured
//! window always are.
//!
//! This module must never compute attribution: it formats a finished [`Report`].

use std::cmp::Ordering;
use std::fmt::Write as _;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use crate::metrics::{counter_name, MetricDef};
use crate::report::{BaselineUse, FunctionStats, Report};
use crate::stats::Estimate;
use crate::ReportError;

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// An aligned table with a header of totals, for people.
    #[default]
    Table,
    /// One row per function with a header row.
    Csv,
    /// An object with a `functions` array and the totals.
    Json,
}

/// How to render a report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderOptions {
    /// Output format.
    pub format: Format,
    /// Column to sort by (a JSON key such as `time_pct`, `cpi`, `page_faults_per_ms`,
    /// or a table header such as `CPI`); `None` sorts by samples.
    pub sort: Option<String>,
    /// Keep only the first N functions after sorting.
    pub top: Option<usize>,
    /// The record file's name, for the table's header.
    pub file: Option<String>,
}

/// A column of the report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Column {
    /// Function name.
    Function,
    /// Module file name.
    Module,
    /// Time samples.
    Samples,
    /// Share of time samples in percent (self).
    TimePct,
    /// Share of time samples with the function anywhere on the stack (total).
    TotalPct,
    /// Attributed windows.
    Windows,
    /// Off-CPU time in the function (self).
    OffCpu,
    /// Wall time in the function: on-CPU plus off-CPU (self).
    Wall,
    /// A derived metric.
    Metric(&'static MetricDef),
}

impl Column {
    /// The column's JSON key.
    pub fn key(&self) -> &'static str {
        match self {
            Column::Function => "function",
            Column::Module => "module",
            Column::Samples => "samples",
            Column::TimePct => "time_pct",
            Column::TotalPct => "total_pct",
            Column::Windows => "windows",
            Column::OffCpu => "off_cpu_ms",
            Column::Wall => "wall_ms",
            Column::Metric(m) => m.key,
        }
    }
}

/// Resolves a `--sort` argument against the columns `report` has.
pub fn sort_column(report: &Report, name: &str) -> Result<Column, ReportError> {
    let want = name.trim();
    let fixed = [
        (Column::Function, &["function", "symbol", "name"][..]),
        (Column::Module, &["module", "dso"][..]),
        (Column::Samples, &["samples", "#"][..]),
        (Column::TimePct, &["time_pct", "time", "time%", "%time"][..]),
        (Column::Windows, &["windows"][..]),
        (Column::OffCpu, &["off_cpu_ms", "off_cpu", "off-cpu", "offcpu"][..]),
        (Column::Wall, &["wall_ms", "wall"][..]),
    ];
    for (col, names) in fixed {
        if names.iter().any(|n| n.eq_ignore_ascii_case(want)) {
            return Ok(col);
        }
    }
    let matches =
        |m: &MetricDef| m.key.eq_ignore_ascii_case(want) || m.header.eq_ignore_ascii_case(want);
    if let Some(m) = report.metrics().into_iter().find(|m| matches(m)) {
        return Ok(Column::Metric(m));
    }
    if let Some(m) = crate::metrics::METRICS.iter().find(|m| matches(m)) {
        let needs: Vec<&str> = m.formula.needs().iter().map(|c| counter_name(*c)).collect();
        return Err(ReportError::SortNotRecorded {
            column: want.to_string(),
            needs: needs.join(", "),
        });
    }
    let mut all: Vec<&str> =
        vec!["samples", "time_pct", "total_pct", "windows", "function", "module"];
    if report.off_cpu.is_some() {
        all.extend(["off_cpu_ms", "wall_ms"]);
    }
    all.extend(report.metrics().iter().map(|m| m.key));
    Err(ReportError::UnknownSort { column: want.to_string(), choices: all.join(", ") })
}

/// The functions of `report` in output order: sorted by `sort` (numbers descending,
/// names ascending, missing values last), ties by samples then name, cut to `top`.
pub fn ordered(report: &Report, sort: Column, top: Option<usize>) -> Vec<&FunctionStats> {
    let value = |f: &FunctionStats| -> Option<f64> {
        match sort {
            Column::Samples => Some(f.samples as f64),
            Column::TimePct => Some(report.time_pct(f)),
            Column::TotalPct => Some(f.total_samples as f64),
            Column::Windows => Some(f.windows as f64),
            Column::OffCpu => Some(f.off_cpu_ns as f64),
            Column::Wall => Some(wall_ns(report, f, false)),
            Column::Metric(m) => report.metric(f, m),
            Column::Function | Column::Module => None,
        }
    };
    let mut rows: Vec<&FunctionStats> = report.functions.iter().collect();
    rows.sort_by(|a, b| {
        let primary = match sort {
            Column::Function => a.function.cmp(&b.function),
            Column::Module => a.module.cmp(&b.module),
            _ => match (value(a), value(b)) {
                (Some(x), Some(y)) => y.partial_cmp(&x).unwrap_or(Ordering::Equal),
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            },
        };
        primary
            .then(b.samples.cmp(&a.samples))
            .then_with(|| a.function.cmp(&b.function))
            .then_with(|| a.module.cmp(&b.module))
    });
    if let Some(n) = top {
        rows.truncate(n);
    }
    rows
}

/// Renders `report` as `opts` asks.
pub fn render(report: &Report, opts: &RenderOptions) -> Result<String, ReportError> {
    let sort = match &opts.sort {
        Some(s) => sort_column(report, s)?,
        None => Column::Samples,
    };
    let rows = ordered(report, sort, opts.top);
    Ok(match opts.format {
        Format::Table => table(report, &rows, opts.file.as_deref()),
        Format::Csv => csv(report, &rows),
        Format::Json => json(report, &rows, opts.file.as_deref()),
    })
}

/// A value in leader units, human-readable: nanoseconds scaled to ns/us/ms/s, events
/// with the leader's name.
pub fn leader_amount(report: &Report, v: f64) -> String {
    if report.leader_is_time() {
        if v >= 1e9 {
            format!("{:.3} s", v / 1e9)
        } else if v >= 1e6 {
            format!("{:.3} ms", v / 1e6)
        } else if v >= 1e3 {
            format!("{:.1} us", v / 1e3)
        } else {
            format!("{v:.0} ns")
        }
    } else {
        let leader = report.info.events.first().map_or("events", String::as_str);
        format!("{v:.0} {leader}")
    }
}

/// `f`'s wall time in ns: its on-CPU time (samples times the period; 0 when the leader
/// does not count time) plus its off-CPU time; `total` with its callees.
pub fn wall_ns(report: &Report, f: &FunctionStats, total: bool) -> f64 {
    let off = if total { f.total_off_cpu_ns } else { f.off_cpu_ns };
    report.on_cpu_ns(f, total).unwrap_or(0.0) + off as f64
}

fn ms(ns: f64) -> String {
    format!("{:.1}", ns / 1e6)
}

/// The lines printed above the table (and, for lost samples, on stderr by the CLI).
pub fn summary_lines(report: &Report, file: Option<&str>) -> Vec<String> {
    let mut lines = Vec::new();
    if report.lost_samples > 0 {
        lines.push(lost_warning(report));
    }
    if let Some(f) = file {
        lines.push(format!("file:     {f}"));
    }
    if let Some(source) = &report.info.source {
        lines.push(format!("source:   {source}"));
    }
    if !report.info.command.is_empty() {
        lines.push(format!("command:  {}", report.info.command.join(" ")));
    }
    let mut events = report.info.events.clone();
    if let Some(first) = events.first_mut() {
        first.push_str(" (sampling leader)");
    }
    lines.push(format!("events:   {}", events.join(", ")));
    let mut period = format!("period:   {}", leader_amount(report, report.info.period as f64));
    if report.info.jitter > 0 {
        let _ =
            write!(period, " + up to {} jitter", leader_amount(report, report.info.jitter as f64));
    }
    if report.info.window > 0 {
        let _ = write!(
            period,
            "; window {} requested, {} measured (mean)",
            leader_amount(report, report.info.window as f64),
            report.mean_window.map_or_else(|| "none".to_string(), |w| leader_amount(report, w))
        );
    }
    lines.push(period);
    lines.push(baseline_line(report));
    if let Some(c) = correction_line(report) {
        lines.push(c);
    }
    if let Some(w) = crate::window_check::warning(&report.window_check) {
        lines.push(format!("warning:  {w}"));
    }
    if let Some(w) = without_agent_line(report) {
        lines.push(format!("note:     {w}"));
    }
    if let Some(o) = &report.off_cpu {
        lines.push(format!(
            "off-cpu:  {} intervals, {:.3} s switched out ({:.3} s of it preempted, waiting for \
             a CPU); wall = on-CPU (samples x period) + off-CPU",
            o.intervals,
            o.ns as f64 / 1e9,
            o.preempted_ns as f64 / 1e9
        ));
    }
    if report.windows_measured {
        lines.push(format!(
            "samples:  {} ({} lost); windows: {} used, {} discarded (start and end in different \
             functions, policy {}), {} unpaired",
            report.samples,
            report.lost_samples,
            report.windows_used,
            report.windows_discarded,
            report.policy.name(),
            report.windows_unpaired
        ));
    } else {
        lines.push(format!(
            "samples:  {} ({} lost); windows: none (each sample carries its own period, not \
             counter readings)",
            report.samples, report.lost_samples
        ));
    }
    if report.processes.len() > 1 {
        const SHOWN: usize = 6;
        let total: f64 = report.processes.iter().map(|p| p.samples).sum::<f64>().max(1e-9);
        let mut parts: Vec<String> = report
            .processes
            .iter()
            .take(SHOWN)
            .map(|p| {
                let n = if p.processes == 1 { String::new() } else { format!(" x{}", p.processes) };
                format!("{}{n} {:.1}%", p.command, 100.0 * p.samples / total)
            })
            .collect();
        if report.processes.len() > SHOWN {
            parts.push(format!("{} more", report.processes.len() - SHOWN));
        }
        lines.push(format!("commands: {}", parts.join(", ")));
    }
    lines
}

/// Which programs have no window metrics because the agent did not run in them, and
/// why that happens (`None`: every sampled program had the agent, or none alternated).
pub fn without_agent_line(report: &Report) -> Option<String> {
    const SHOWN: usize = 4;
    let list = &report.without_agent;
    let first = list.first()?;
    let mut parts: Vec<String> = list
        .iter()
        .take(SHOWN)
        .map(|w| {
            let n = if w.processes == 1 { String::new() } else { format!(" x{}", w.processes) };
            format!("{}{n} ({} samples)", w.command, w.samples)
        })
        .collect();
    if list.len() > SHOWN {
        parts.push(format!("{} more", list.len() - SHOWN));
    }
    let one = list.len() == 1 && first.processes == 1;
    Some(format!(
        "no window metrics for {}: the agent did not run in {} (a statically linked or setuid \
         program, one started with LD_PRELOAD cleared, under a seccomp filter, under a tracer \
         or in a PID namespace of its own, or one past the agent's tables; `strobe record` \
         warns with the cause it knows), so the kernel floor sampled {} time without windows",
        parts.join(", "),
        if one { "it" } else { "them" },
        if one { "its" } else { "their" },
    ))
}

/// The correction's share of the net window: how much of what a window measured the
/// report took out as the sampler's (the baseline, and the signal's delivery from each
/// call tail), against the target's time that remains.
pub fn correction_pct(report: &Report) -> Option<f64> {
    let (c, net) = (report.correction?, report.net_window?);
    (net > 0.0 && matches!(report.baseline, BaselineUse::Applied { .. })).then(|| 100.0 * c / net)
}

fn correction_line(report: &Report) -> Option<String> {
    let pct = correction_pct(report)?;
    let mut line =
        format!("correction: {pct:.1}% of the net window (mean of what is taken out of a window)");
    let windows = report.windows_used + report.windows_discarded;
    if report.tail_windows > 0 && windows > 0 {
        let _ = write!(
            line,
            "; {:.0}% of windows began inside the kernel (a system call or a fault) and lose \
             the signal's delivery from its tail",
            100.0 * report.tail_windows as f64 / windows.max(report.tail_windows) as f64
        );
    }
    Some(line)
}

/// What was subtracted from every window, and the net window that remains.
pub fn baseline_line(report: &Report) -> String {
    match &report.baseline {
        BaselineUse::Applied { counters, intervals } => {
            let lead = counters.first().map_or(0.0, |c| c.mean);
            let mut line = format!(
                "baseline: {} of each window is the sampler's (measured on {intervals} windows \
                 before the start) and is subtracted",
                leader_amount(report, lead)
            );
            if let Some(net) = report.net_window {
                let _ = write!(line, "; net window {} (mean)", leader_amount(report, net));
            }
            let others: Vec<String> = counters
                .iter()
                .zip(&report.info.events)
                .skip(1)
                .filter(|(c, _)| c.mean.abs() >= 0.005)
                .map(|(c, e)| format!("{e} {:.2}", c.mean))
                .collect();
            if !others.is_empty() {
                let _ = write!(line, "; also per window: {}", others.join(", "));
            }
            line
        }
        BaselineUse::NotApplied(why) => format!("baseline: not subtracted ({why})"),
        BaselineUse::Absent if report.info.source.is_some() => {
            "baseline: none (not sampled by strobe's agent): interval metrics include whatever \
             the recorder's own sampling counted"
                .into()
        }
        BaselineUse::Absent => "baseline: none recorded: window metrics include the sampler's \
                                own counts (about 28 us of task-clock per window on a VM)"
            .into(),
    }
}

/// The one-line warning about lost samples, naming the threads that lost them.
pub fn lost_warning(report: &Report) -> String {
    format!(
        "WARNING: {} samples were lost (a thread's buffer was full; {}); shares are of the {} \
         samples in the table. Record with a smaller --wakeup or a longer period to lose none.",
        report.lost_samples,
        lost_per_thread(report),
        report.samples
    )
}

/// `thread 123: 40, thread 124: 2`, at most 8 threads named (the rest summed). Losses no
/// record named a thread for (a kernel ring's, counted by its events after its last
/// record) are `no thread named: N`.
pub fn lost_per_thread(report: &Report) -> String {
    const SHOWN: usize = 8;
    let mut parts: Vec<String> = report
        .lost_by_thread
        .iter()
        .take(SHOWN)
        .map(|l| match l.tid {
            0 => format!("no thread named: {}", l.lost),
            tid => format!("thread {tid}: {}", l.lost),
        })
        .collect();
    if report.lost_by_thread.len() > SHOWN {
        let rest = &report.lost_by_thread[SHOWN..];
        let sum: u64 = rest.iter().map(|l| l.lost).sum();
        parts.push(format!("{} more threads: {sum}", rest.len()));
    }
    if parts.is_empty() {
        "no thread named".to_string()
    } else {
        parts.join(", ")
    }
}

const MAX_NAME: usize = 60;

fn clip(name: &str) -> String {
    if name.chars().count() <= MAX_NAME {
        name.to_string()
    } else {
        let head: String = name.chars().take(MAX_NAME - 3).collect();
        format!("{head}...")
    }
}

/// `12.3±1.4`: a value and the half-width of its 95% interval (the larger side).
fn fmt_estimate(e: Option<Estimate>, decimals: usize) -> String {
    match e {
        None => "-".to_string(),
        Some(e) => {
            let half = (e.high - e.value).max(e.value - e.low);
            if half.is_finite() {
                format!("{:.decimals$}±{:.decimals$}", e.value, half)
            } else {
                format!("{:.decimals$}±?", e.value)
            }
        }
    }
}

fn table(report: &Report, rows: &[&FunctionStats], file: Option<&str>) -> String {
    let metrics = report.metrics();
    let mut header: Vec<String> = vec!["function".into(), "samples".into(), "self%".into()];
    if report.has_stacks {
        header.push("total%".into());
    }
    let off = report.off_cpu.is_some();
    if off {
        header.extend(["on-cpu ms".into(), "off-cpu ms".into(), "wall ms".into()]);
        if report.has_stacks {
            header.push("total wall".into());
        }
    }
    let windows = report.windows_measured;
    if windows {
        header.push("windows".into());
    }
    header.extend(metrics.iter().map(|m| m.header.to_string()));
    header.push("module".into());

    let mut cells: Vec<Vec<String>> = rows
        .iter()
        .map(|f| {
            let mut r = vec![
                clip(&f.function),
                f.samples.to_string(),
                fmt_estimate(Some(report.time_estimate(f)), 1),
            ];
            if report.has_stacks {
                r.push(format!("{:.1}", report.total_estimate(f).value));
            }
            if off {
                r.push(report.on_cpu_ns(f, false).map_or_else(|| "-".into(), ms));
                r.push(ms(f.off_cpu_ns as f64));
                r.push(ms(wall_ns(report, f, false)));
                if report.has_stacks {
                    r.push(ms(wall_ns(report, f, true)));
                }
            }
            // A metric resting on fewer than 30 windows is marked.
            if windows {
                let few = if report.few_windows(f) { "*" } else { "" };
                r.push(format!("{}{few}", f.windows));
            }
            r.extend(
                metrics.iter().map(|m| fmt_estimate(report.metric_estimate(f, m), m.decimals)),
            );
            r.push(f.module.clone());
            r
        })
        .collect();
    cells.insert(0, header);
    let ncols = cells.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..ncols)
        .map(|c| {
            cells.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0)
        })
        .collect();

    let mut out = String::new();
    for line in summary_lines(report, file) {
        out.push_str(&line);
        out.push('\n');
    }
    out.push('\n');
    for row in &cells {
        let mut line = String::new();
        for (c, (cell, w)) in row.iter().zip(&widths).enumerate() {
            if c > 0 {
                line.push_str("  ");
            }
            // Names left-aligned, numbers right-aligned; the last column unpadded.
            if c == 0 {
                let _ = write!(line, "{cell:<w$}");
            } else if c + 1 == ncols {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:>w$}");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    if rows.is_empty() {
        out.push_str("(no samples)\n");
    } else {
        out.push_str(
            "\n±: half-width of the 95% interval (time shares: Wilson; metrics: the windows' \
             spread and the baseline's, at least a Poisson count's); *: fewer than 30 windows\n",
        );
    }
    out
}

pub(crate) fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn csv(report: &Report, rows: &[&FunctionStats]) -> String {
    let metrics = report.metrics();
    let mut cols: Vec<String> = [
        "function",
        "module",
        "samples",
        "time_pct",
        "time_pct_low",
        "time_pct_high",
        "total_samples",
        "total_pct",
        "windows",
        "total_windows",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let off = report.off_cpu.is_some();
    if off {
        for c in OFF_CPU_KEYS {
            cols.push(c.to_string());
        }
    }
    for m in &metrics {
        cols.push(m.key.to_string());
        cols.push(format!("{}_low", m.key));
        cols.push(format!("{}_high", m.key));
    }
    for m in &metrics {
        cols.push(format!("total_{}", m.key));
        cols.push(format!("total_{}_low", m.key));
        cols.push(format!("total_{}_high", m.key));
    }
    cols.push("source".into());
    let mut out = cols.join(",");
    out.push('\n');
    for f in rows {
        let t = report.time_estimate(f);
        let mut r = vec![
            csv_field(&f.function),
            csv_field(&f.module),
            f.samples.to_string(),
            format!("{:.2}", t.value),
            format!("{:.2}", t.low),
            format!("{:.2}", t.high),
            f.total_samples.to_string(),
            format!("{:.2}", report.total_estimate(f).value),
            f.windows.to_string(),
            f.total_windows.to_string(),
        ];
        if off {
            r.extend(off_cpu_values(report, f).iter().map(|v| format!("{v:.3}")));
        }
        let estimates = metrics
            .iter()
            .map(|m| (m, report.metric_estimate(f, m)))
            .chain(metrics.iter().map(|m| (m, report.total_metric_estimate(f, m))))
            .collect::<Vec<_>>();
        for (m, e) in estimates {
            match e {
                Some(e) => {
                    let prec = m.decimals + 2;
                    r.push(format!("{:.prec$}", e.value));
                    r.push(format!("{:.prec$}", e.low));
                    r.push(if e.high.is_finite() {
                        format!("{:.prec$}", e.high)
                    } else {
                        String::new()
                    });
                }
                None => r.extend([String::new(), String::new(), String::new()]),
            }
        }
        r.push(csv_field(f.source.as_deref().unwrap_or("")));
        out.push_str(&r.join(","));
        out.push('\n');
    }
    out
}

/// The off-CPU columns of CSV and JSON, in ms: on-CPU, off-CPU and wall time, self then
/// with callees.
const OFF_CPU_KEYS: [&str; 6] =
    ["on_cpu_ms", "off_cpu_ms", "wall_ms", "total_on_cpu_ms", "total_off_cpu_ms", "total_wall_ms"];

fn off_cpu_values(report: &Report, f: &FunctionStats) -> [f64; 6] {
    let on = |t| report.on_cpu_ns(f, t).unwrap_or(0.0) / 1e6;
    [
        on(false),
        f.off_cpu_ns as f64 / 1e6,
        wall_ns(report, f, false) / 1e6,
        on(true),
        f.total_off_cpu_ns as f64 / 1e6,
        wall_ns(report, f, true) / 1e6,
    ]
}

/// Rounds to 4 decimal places: more than any measurement here supports, and stable
/// across platforms' last-digit differences.
fn round4(v: f64) -> f64 {
    (v * 1e4).round() / 1e4
}

struct JsonFunction<'r> {
    report: &'r Report,
    f: &'r FunctionStats,
}

impl Serialize for JsonFunction<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (r, f) = (self.report, self.f);
        let metrics = r.metrics();
        let mut map = s.serialize_map(Some(13 + 6 * metrics.len()))?;
        map.serialize_entry("function", &f.function)?;
        map.serialize_entry("module", &f.module)?;
        map.serialize_entry("samples", &f.samples)?;
        let t = r.time_estimate(f);
        map.serialize_entry("time_pct", &round4(t.value))?;
        map.serialize_entry("time_pct_low", &round4(t.low))?;
        map.serialize_entry("time_pct_high", &round4(t.high))?;
        map.serialize_entry("total_samples", &f.total_samples)?;
        map.serialize_entry("total_pct", &round4(r.total_estimate(f).value))?;
        map.serialize_entry("windows", &f.windows)?;
        map.serialize_entry("few_windows", &r.few_windows(f))?;
        map.serialize_entry("total_windows", &f.total_windows)?;
        if r.off_cpu.is_some() {
            for (k, v) in OFF_CPU_KEYS.iter().zip(off_cpu_values(r, f)) {
                map.serialize_entry(k, &round4(v))?;
            }
            map.serialize_entry("off_cpu_intervals", &f.off_cpu_intervals)?;
        }
        let finite = |v: f64| v.is_finite().then(|| round4(v));
        for (prefix, total) in [("", false), ("total_", true)] {
            for m in &metrics {
                let e = if total { r.total_metric_estimate(f, m) } else { r.metric_estimate(f, m) };
                let key = format!("{prefix}{}", m.key);
                map.serialize_entry(&key, &e.map(|e| round4(e.value)))?;
                map.serialize_entry(&format!("{key}_low"), &e.and_then(|e| finite(e.low)))?;
                map.serialize_entry(&format!("{key}_high"), &e.and_then(|e| finite(e.high)))?;
            }
        }
        map.serialize_entry("source", &f.source)?;
        map.end()
    }
}

#[derive(Serialize)]
struct JsonReport<'r> {
    file: Option<&'r str>,
    command: &'r [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<&'r str>,
    events: &'r [String],
    unit: &'static str,
    period: u64,
    window: u64,
    jitter: u64,
    mean_window: Option<f64>,
    net_window: Option<f64>,
    correction_pct: Option<f64>,
    baseline: Option<Vec<f64>>,
    samples: u64,
    lost_samples: u64,
    lost_by_thread: &'r [crate::tally::LostThread],
    windows_used: u64,
    windows_discarded: u64,
    windows_unpaired: u64,
    window_policy: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    off_cpu: Option<JsonOffCpu>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    processes: Vec<JsonProcess<'r>>,
    /// Each counter's rate in the windows over its rate in the long periods between them
    /// (absent when not judged: fixed-period sampling, or too few windows).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    window_check: Vec<JsonCheck<'r>>,
    /// Programs the agent did not run in: the kernel floor's samples, no windows.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    without_agent: Vec<JsonWithoutAgent<'r>>,
    functions: Vec<JsonFunction<'r>>,
}

/// A program the agent did not run in.
#[derive(Serialize)]
struct JsonWithoutAgent<'r> {
    command: &'r str,
    processes: u64,
    samples: u64,
}

/// A counter's windows against the long periods.
#[derive(Serialize)]
struct JsonCheck<'r> {
    counter: &'r str,
    ratio: Option<f64>,
    windows_events: f64,
    expected: f64,
    z: f64,
    judged: bool,
    flagged: bool,
}

/// A command's share of the recording.
#[derive(Serialize)]
struct JsonProcess<'r> {
    command: &'r str,
    processes: u64,
    threads: u64,
    samples: f64,
    /// The CPU time those samples' worth stand for, ns.
    cpu_ns: f64,
    pct: f64,
}

#[derive(Serialize)]
struct JsonOffCpu {
    intervals: u64,
    ms: f64,
    preempted_ms: f64,
}

fn json(report: &Report, rows: &[&FunctionStats], file: Option<&str>) -> String {
    let process_total: f64 = report.processes.iter().map(|p| p.samples).sum();
    let doc = JsonReport {
        file,
        command: &report.info.command,
        source: report.info.source.as_deref(),
        events: &report.info.events,
        unit: if report.leader_is_time() { "ns" } else { "events" },
        period: report.info.period,
        window: report.info.window,
        jitter: report.info.jitter,
        mean_window: report.mean_window.map(round4),
        net_window: report.net_window.map(round4),
        correction_pct: correction_pct(report).map(round4),
        baseline: match &report.baseline {
            BaselineUse::Applied { counters, .. } => {
                Some(counters.iter().map(|c| round4(c.mean)).collect())
            }
            _ => None,
        },
        samples: report.samples,
        lost_samples: report.lost_samples,
        lost_by_thread: &report.lost_by_thread,
        windows_used: report.windows_used,
        windows_discarded: report.windows_discarded,
        windows_unpaired: report.windows_unpaired,
        window_policy: report.policy.name(),
        off_cpu: report.off_cpu.map(|o| JsonOffCpu {
            intervals: o.intervals,
            ms: round4(o.ns as f64 / 1e6),
            preempted_ms: round4(o.preempted_ns as f64 / 1e6),
        }),
        processes: report
            .processes
            .iter()
            .map(|p| JsonProcess {
                command: &p.command,
                processes: p.processes,
                threads: p.threads,
                samples: round4(p.samples),
                cpu_ns: p.cpu_ns.round(),
                pct: round4(100.0 * p.samples / process_total.max(1e-9)),
            })
            .collect(),
        window_check: report
            .window_check
            .iter()
            .map(|c| JsonCheck {
                counter: &c.counter,
                ratio: c.ratio.is_finite().then(|| round4(c.ratio)),
                windows_events: round4(c.windows_events),
                expected: round4(c.expected),
                z: round4(c.z),
                judged: c.judged,
                flagged: c.flagged,
            })
            .collect(),
        without_agent: report
            .without_agent
            .iter()
            .map(|w| JsonWithoutAgent {
                command: &w.command,
                processes: w.processes,
                samples: w.samples,
            })
            .collect(),
        functions: rows.iter().map(|f| JsonFunction { report, f }).collect(),
    };
    // Serializing plain data into a String cannot fail.
    let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
    text.push('\n');
    text
}
