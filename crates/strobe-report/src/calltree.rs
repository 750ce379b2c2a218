//! Views of a report's call paths: who called a function and what it called (as trees
//! with shares, like `perf report -g`, and with window metrics per path, which no anchor
//! shows), and folded stacks (`a;b;c N`, the input of flame graph tools).
//!
//! Owns: building those trees and lines from [`Report::paths`]. Must never re-read
//! samples or symbolize: it works on the finished report.

use std::fmt::Write as _;

use rustc_hash::FxHashMap;

use crate::metrics::MetricDef;
use crate::report::{PathStats, Report};
use crate::stats::WindowSums;

/// One node of a caller or callee tree.
#[derive(Debug, Clone, PartialEq)]
pub struct TreeNode {
    /// Index into [`Report::functions`].
    pub function: usize,
    /// Samples under this node (the path from the root to here held).
    pub samples: u64,
    /// Samples that ended exactly here (for a callee tree: the function was the sampled
    /// one; for a caller tree: no further caller was recorded).
    pub here: u64,
    /// Net window sums of the windows on those paths.
    pub sums: WindowSums,
    /// Children, most samples first.
    pub children: Vec<TreeNode>,
}

impl TreeNode {
    fn new(function: usize, width: usize) -> TreeNode {
        TreeNode {
            function,
            samples: 0,
            here: 0,
            sums: WindowSums::new(width),
            children: Vec::new(),
        }
    }

    fn child(&mut self, function: usize, width: usize) -> &mut TreeNode {
        let i = match self.children.iter().position(|c| c.function == function) {
            Some(i) => i,
            None => {
                self.children.push(TreeNode::new(function, width));
                self.children.len() - 1
            }
        };
        &mut self.children[i]
    }

    fn sort(&mut self) {
        self.children.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.function.cmp(&b.function)));
        for c in &mut self.children {
            c.sort();
        }
    }
}

/// Which way a tree grows from its root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// From the function to its callers, innermost caller first.
    Callers,
    /// From the function to its callees.
    Callees,
}

fn add(node: &mut TreeNode, p: &PathStats) {
    node.samples += p.samples;
    node.sums.merge(&p.sums);
}

/// The tree of `function`'s callers or callees over every path it is on (counted once
/// per path: at its innermost occurrence for callers, its outermost for callees).
pub fn tree(report: &Report, function: usize, dir: Direction) -> TreeNode {
    let width = report.info.events.len();
    let mut root = TreeNode::new(function, width);
    for p in &report.paths {
        let chain: Vec<usize> = match dir {
            Direction::Callers => match p.frames.iter().rposition(|&f| f == function) {
                Some(i) => p.frames[..i].iter().rev().copied().collect(),
                None => continue,
            },
            Direction::Callees => match p.frames.iter().position(|&f| f == function) {
                Some(i) => p.frames[i + 1..].to_vec(),
                None => continue,
            },
        };
        add(&mut root, p);
        if chain.is_empty() {
            root.here += p.samples;
        }
        let mut node = &mut root;
        for (k, &f) in chain.iter().enumerate() {
            node = node.child(f, width);
            add(node, p);
            if k + 1 == chain.len() {
                node.here += p.samples;
            }
        }
    }
    root.sort();
    root
}

/// Renders a tree as indented lines: share of the root's samples, the function, and
/// the window metrics of each path with enough windows to say anything.
pub fn render_tree(report: &Report, root: &TreeNode, dir: Direction, min_pct: f64) -> String {
    let metrics = report.metrics();
    let mut out = String::new();
    let f = &report.functions[root.function];
    let what = match dir {
        Direction::Callers => "callers",
        Direction::Callees => "callees",
    };
    let _ = writeln!(
        out,
        "{what} of {} ({}): {} samples, {:.1}% of all",
        f.function,
        f.module,
        root.samples,
        if report.samples > 0 { 100.0 * root.samples as f64 / report.samples as f64 } else { 0.0 }
    );
    let _ = writeln!(
        out,
        "share of the function's samples, then each path's window metrics (±: 95% interval)\n"
    );
    fn walk(
        out: &mut String,
        report: &Report,
        n: &TreeNode,
        total: u64,
        depth: usize,
        metrics: &[&'static MetricDef],
        min_pct: f64,
    ) {
        let pct = if total > 0 { 100.0 * n.samples as f64 / total as f64 } else { 0.0 };
        if depth > 0 && pct < min_pct {
            return;
        }
        let f = &report.functions[n.function];
        let mut line = format!("{pct:6.1}%  {}{}", "  ".repeat(depth), f.function);
        if n.sums.n > 0 {
            let parts: Vec<String> = metrics
                .iter()
                .filter_map(|m| {
                    let e = report.estimate_of(&n.sums, m)?;
                    let half = (e.high - e.value).max(e.value - e.low);
                    Some(format!("{} {:.*}±{:.*}", m.header, m.decimals, e.value, m.decimals, half))
                })
                .collect();
            let _ = write!(line, "   [{} windows: {}]", n.sums.n, parts.join(", "));
        }
        out.push_str(&line);
        out.push('\n');
        for c in &n.children {
            walk(out, report, c, total, depth + 1, metrics, min_pct);
        }
    }
    walk(&mut out, report, root, root.samples, 0, &metrics, min_pct);
    out
}

/// Which time a folded line weighs (recordings with off-CPU intervals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeWeight {
    /// On-CPU time: the path's samples times the period.
    OnCpu,
    /// Time switched out on the path.
    OffCpu,
    /// Both.
    Wall,
}

impl TimeWeight {
    /// The name `--metric` takes for it.
    pub fn parse(name: &str) -> Option<TimeWeight> {
        match name {
            "on-cpu" | "on_cpu" => Some(TimeWeight::OnCpu),
            "off-cpu" | "off_cpu" => Some(TimeWeight::OffCpu),
            "wall" => Some(TimeWeight::Wall),
            _ => None,
        }
    }
}

/// Folded stacks weighted by time: one `outermost;...;function US` line per call path,
/// `US` its on-CPU, off-CPU or wall time in microseconds (on-CPU time is the path's
/// samples times the period, so it needs a time leader).
pub fn folded_time(report: &Report, weight: TimeWeight) -> String {
    let period = if report.leader_is_time() { report.info.period as f64 } else { 0.0 };
    folded_by(report, |p| {
        let on = p.samples as f64 * period;
        let off = p.off_cpu_ns as f64;
        (match weight {
            TimeWeight::OnCpu => on,
            TimeWeight::OffCpu => off,
            TimeWeight::Wall => on + off,
        }) / 1e3
    })
}

/// Folded stacks: one `outermost;...;function N` line per call path, `N` its samples or,
/// with `metric`, the net sum of that counter over the path's windows (rounded; paths
/// with no windows are left out then).
pub fn folded(report: &Report, counter: Option<usize>) -> String {
    folded_by(report, |p| match counter {
        None => p.samples as f64,
        Some(c) => p.sums.sums.get(c).copied().unwrap_or(0.0).max(0.0),
    })
}

fn folded_by(report: &Report, weight_of: impl Fn(&PathStats) -> f64) -> String {
    let mut lines: FxHashMap<String, f64> = FxHashMap::default();
    for p in &report.paths {
        let weight = weight_of(p);
        if weight <= 0.0 {
            continue;
        }
        let mut name = String::new();
        for (i, &f) in p.frames.iter().enumerate() {
            if i > 0 {
                name.push(';');
            }
            // A `;` or newline in a name would break the line's syntax.
            name.push_str(&report.functions[f].function.replace([';', '\n'], "_"));
        }
        *lines.entry(name).or_insert(0.0) += weight;
    }
    let mut v: Vec<(String, f64)> = lines.into_iter().collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = String::new();
    for (name, w) in v {
        let w = w.round() as u64;
        if w > 0 {
            let _ = writeln!(out, "{name} {w}");
        }
    }
    out
}
