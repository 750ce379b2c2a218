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
//! This module must never read input or format output.

use rustc_hash::FxHashMap;

use crate::input::{BaselineCounter, RecordInfo};
use crate::metrics::{Counter, CounterSet, Formula, MetricDef};
use crate::stats::{wilson, Estimate, WindowSums, FEW_WINDOWS};
use crate::symbolize::{symbolize_with, Frame};
use crate::tally::{LostThread, Tally};

/// The row of CPU time no sample could land in: threads before their sampling was armed
/// (thread start-up, the agent's per-thread set-up) and, when the process's own CPU time
/// is known, after it stopped (thread exit) and in the sampler's own handler. With it,
/// every share is of the process's whole CPU time, as a program measuring itself sees it.
pub const UNSAMPLED: &str = "[not sampled]";

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
    /// The mean leader delta over paired windows (used and discarded), in leader units:
    /// the window length actually measured, sampler included.
    pub mean_window: Option<f64>,
    /// The same net of the baseline: the target's own time per window.
    pub net_window: Option<f64>,
    /// The mean leader correction per window (the baseline, and each call tail's delay
    /// on windows that began in a call), over the same windows.
    pub correction: Option<f64>,
    /// Windows that began inside a system call (at its overflow, not at the handler).
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
}

impl Report {
    pub(crate) fn build(mut t: Tally, policy: WindowPolicy) -> Report {
        let width = t.width();
        let counters = CounterSet::from_events(&t.info.events);

        // The baseline: the pass subtracted it from every window already.
        let baseline = match (t.baseline.take(), t.baseline_unused.take()) {
            (None, _) => BaselineUse::Absent,
            (Some(_), Some(why)) => BaselineUse::NotApplied(why),
            (Some(b), None) => {
                BaselineUse::Applied { counters: b.counters.clone(), intervals: b.intervals }
            }
        };

        // Every unique address once: sampled IPs, both ends of every window bucket, and
        // the frames of every stack used (return addresses, symbolized one byte back so
        // they land in the call instruction).
        let mut addr_index: FxHashMap<(u32, u64), usize> = FxHashMap::default();
        let mut addrs: Vec<(u32, u64)> = Vec::new();
        let mut intern = |a: (u32, u64)| {
            *addr_index.entry(a).or_insert_with(|| {
                addrs.push(a);
                addrs.len() - 1
            })
        };
        let sample_keys: Vec<((u32, u64, u32), u64)> =
            t.samples.iter().map(|(&k, &c)| (k, c)).collect();
        let sample_addrs: Vec<usize> =
            sample_keys.iter().map(|&((sp, ip, _), _)| intern((sp, ip))).collect();
        let off_keys: Vec<((u32, u64, u32), crate::tally::OffCpuSums)> =
            t.off_cpu.iter().map(|(&k, &v)| (k, v)).collect();
        let off_addrs: Vec<usize> =
            off_keys.iter().map(|&((sp, ip, _), _)| intern((sp, ip))).collect();
        let window_addrs: Vec<(usize, usize)> = t
            .windows
            .iter()
            .map(|(k, _)| (intern((k.space, k.start_ip)), intern((k.space, k.end_ip))))
            .collect();
        // Stacks: each used (space, stack) -> its frames' address indices, innermost first.
        let mut stack_frames: FxHashMap<(u32, u32), Vec<usize>> = FxHashMap::default();
        let used_stacks = sample_keys
            .iter()
            .map(|&((sp, _, st), _)| (sp, st))
            .chain(t.windows.iter().map(|(k, _)| (k.space, k.start_stack)))
            .chain(t.windows.iter().map(|(k, _)| (k.space, k.end_stack)))
            .chain(off_keys.iter().map(|&((sp, _, st), _)| (sp, st)));
        for (sp, st) in used_stacks {
            if st == 0 || stack_frames.contains_key(&(sp, st)) {
                continue;
            }
            let mut v = Vec::new();
            t.stacks.for_each_frame(sp, st, |addr| v.push(intern((sp, addr.saturating_sub(1)))));
            stack_frames.insert((sp, st), v);
        }
        let frames = symbolize_with(&mut t.spaces, &addrs, &t.symbols);

        // Fold addresses to functions: same function = same name in the same file.
        let mut func_index: FxHashMap<(String, String), usize> = FxHashMap::default();
        let mut functions: Vec<FunctionStats> = Vec::new();
        let mut hottest: Vec<u64> = Vec::new();
        let mut function_of = |f: &Frame, name: &str| -> usize {
            *func_index.entry((f.module_path.clone(), name.to_string())).or_insert_with(|| {
                functions.push(FunctionStats {
                    function: name.to_string(),
                    module: f.module.clone(),
                    source: None,
                    module_path: f.module_path.clone(),
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
                });
                hottest.push(0);
                functions.len() - 1
            })
        };
        // Each address's function: with inlined frames, the innermost inlined function
        // (where self samples and windows go), and the functions it is inlined into,
        // outermost first (callers on every path through the address).
        let mut inline_callers: Vec<Vec<usize>> = Vec::new();
        let func_of: Vec<usize> = frames
            .iter()
            .map(|f: &Frame| {
                let outer = function_of(f, &f.function);
                let mut chain = vec![outer];
                for g in &f.inlined {
                    chain.push(function_of(f, &g.function));
                }
                let leaf = chain.pop().unwrap_or(outer);
                inline_callers.push(chain);
                leaf
            })
            .collect();
        // The source line of each address in its innermost function.
        let line_of = |a: usize| -> Option<&String> {
            let f = frames.get(a)?;
            match f.inlined.last() {
                Some(g) => g.source.as_ref(),
                None => f.source.as_ref(),
            }
        };

        // Call paths: the callers of each stack, outermost first, then the function.
        let mut path_index: FxHashMap<Vec<usize>, usize> = FxHashMap::default();
        let mut paths: Vec<PathStats> = Vec::new();
        // The same (stack, leaf) comes back for most samples and windows: its path is
        // looked up once, not rebuilt and hashed each time.
        let mut path_memo: FxHashMap<(u32, u32, Option<usize>, usize), usize> =
            FxHashMap::default();
        let path_of = |paths: &mut Vec<PathStats>,
                       path_index: &mut FxHashMap<Vec<usize>, usize>,
                       path_memo: &mut FxHashMap<(u32, u32, Option<usize>, usize), usize>,
                       space: u32,
                       stack: u32,
                       leaf_addr: Option<usize>,
                       leaf: usize|
         -> usize {
            if let Some(&i) = path_memo.get(&(space, stack, leaf_addr, leaf)) {
                return i;
            }
            let mut fr: Vec<usize> = Vec::new();
            let push_addr = |fr: &mut Vec<usize>, a: usize| {
                if let Some(chain) = inline_callers.get(a) {
                    fr.extend_from_slice(chain);
                }
            };
            if let Some(v) = stack_frames.get(&(space, stack)) {
                for &a in v.iter().rev() {
                    push_addr(&mut fr, a);
                    fr.extend(func_of.get(a).copied());
                }
            }
            if let Some(a) = leaf_addr {
                push_addr(&mut fr, a);
            }
            fr.push(leaf);
            let i = match path_index.get(&fr) {
                Some(&i) => i,
                None => {
                    paths.push(PathStats {
                        frames: fr.clone(),
                        samples: 0,
                        sums: WindowSums::new(width),
                        off_cpu_ns: 0,
                    });
                    path_index.insert(fr, paths.len() - 1);
                    paths.len() - 1
                }
            };
            path_memo.insert((space, stack, leaf_addr, leaf), i);
            i
        };

        let mut seen = Vec::new();
        let mut line_counts: FxHashMap<(usize, &String), u64> = FxHashMap::default();
        // Each sample key's path, for the time line.
        let mut key_path: FxHashMap<(u32, u64, u32), usize> = FxHashMap::default();
        for (&((space, ip, stack), count), &a) in sample_keys.iter().zip(&sample_addrs) {
            let Some(&fi) = func_of.get(a) else { continue };
            let line = line_of(a);
            if let (Some(f), Some(h)) = (functions.get_mut(fi), hottest.get_mut(fi)) {
                f.samples += count;
                if count > *h || (count == *h && f.source.is_none()) {
                    *h = count;
                    f.source = line.cloned();
                }
            }
            if let Some(l) = line {
                *line_counts.entry((fi, l)).or_insert(0) += count;
            }
            let p = path_of(&mut paths, &mut path_index, &mut path_memo, space, stack, Some(a), fi);
            if t.timeline.is_some() {
                key_path.insert((space, ip, stack), p);
            }
            if let Some(ps) = paths.get_mut(p) {
                ps.samples += count;
                // Total: once per function on the path, however often it recurs.
                seen.clear();
                for &g in &ps.frames {
                    if !seen.contains(&g) {
                        seen.push(g);
                        if let Some(f) = functions.get_mut(g) {
                            f.total_samples += count;
                        }
                    }
                }
            }
        }

        // Off-CPU intervals: to the function the thread left in, and its call path.
        let mut off_cpu: Option<OffCpuTotals> = None;
        for (&((space, _, stack), sums), &a) in off_keys.iter().zip(&off_addrs) {
            let totals = off_cpu.get_or_insert_with(OffCpuTotals::default);
            totals.intervals += sums.intervals;
            totals.ns = totals.ns.saturating_add(sums.ns);
            totals.preempted_ns = totals.preempted_ns.saturating_add(sums.preempted_ns);
            let Some(&fi) = func_of.get(a) else { continue };
            if let Some(f) = functions.get_mut(fi) {
                f.off_cpu_ns = f.off_cpu_ns.saturating_add(sums.ns);
                f.off_cpu_intervals += sums.intervals;
            }
            let p = path_of(&mut paths, &mut path_index, &mut path_memo, space, stack, Some(a), fi);
            if let Some(ps) = paths.get_mut(p) {
                ps.off_cpu_ns = ps.off_cpu_ns.saturating_add(sums.ns);
                seen.clear();
                for &g in &ps.frames {
                    if !seen.contains(&g) {
                        seen.push(g);
                        if let Some(f) = functions.get_mut(g) {
                            f.total_off_cpu_ns = f.total_off_cpu_ns.saturating_add(sums.ns);
                        }
                    }
                }
            }
        }

        let mut all = WindowSums::new(width);
        let (mut used, mut discarded) = (0u64, 0u64);
        // Windows' sums are net already (the pass subtracted the baseline).
        for ((key, net), &(s, e)) in t.windows.iter().zip(&window_addrs) {
            let (Some(&fs), Some(&fe)) = (func_of.get(s), func_of.get(e)) else { continue };
            if fs != fe {
                if let Some(f) = functions.get_mut(fs) {
                    f.edge_sums.merge(net);
                }
            }
            if policy == WindowPolicy::Discard && fs != fe {
                discarded += net.n;
                continue;
            }
            used += net.n;
            all.merge(net);
            if let Some(f) = functions.get_mut(fe) {
                f.windows += net.n;
                f.sums.merge(net);
            }
            let p = path_of(
                &mut paths,
                &mut path_index,
                &mut path_memo,
                key.space,
                key.start_stack,
                None,
                fe,
            );
            if let Some(ps) = paths.get_mut(p) {
                ps.sums.merge(net);
            }
        }
        // Inclusive: a window counts for every call it stayed inside: the functions its
        // start and end call paths share from the outermost frame down (the calls active
        // at both ends). Without an end stack (none recorded), the functions on the start
        // path down to the one the window ended in.
        // Each stack's functions, outermost first, computed once per stack.
        let mut stack_funcs: FxHashMap<(u32, u32), Vec<usize>> = FxHashMap::default();
        let mut funcs_of = |space: u32, stack: u32, leaf: usize, out: &mut Vec<usize>| {
            let fr = stack_funcs.entry((space, stack)).or_insert_with(|| {
                stack_frames
                    .get(&(space, stack))
                    .map(|v| v.iter().rev().filter_map(|&a| func_of.get(a).copied()).collect())
                    .unwrap_or_default()
            });
            out.clear();
            out.extend_from_slice(fr);
            out.push(leaf);
        };
        let (mut start, mut end) = (Vec::new(), Vec::new());
        for ((key, net), &(s, e)) in t.windows.iter().zip(&window_addrs) {
            let (Some(&fs), Some(&fe)) = (func_of.get(s), func_of.get(e)) else { continue };
            funcs_of(key.space, key.start_stack, fs, &mut start);
            let inside: &[usize] = if key.end_stack != 0 || key.start_stack == 0 {
                funcs_of(key.space, key.end_stack, fe, &mut end);
                let k = start.iter().zip(&end).take_while(|(a, b)| a == b).count();
                &start[..k]
            } else {
                match start.iter().rposition(|&g| g == fe) {
                    Some(k) => &start[..=k],
                    None => &[],
                }
            };
            seen.clear();
            for &g in inside {
                if !seen.contains(&g) {
                    seen.push(g);
                    if let Some(f) = functions.get_mut(g) {
                        f.total_windows += net.n;
                        f.total_sums.merge(net);
                    }
                }
            }
            // The calls the window left: it began inside them and ended outside.
            for &g in &start {
                if !seen.contains(&g) {
                    seen.push(g);
                    if let Some(f) = functions.get_mut(g) {
                        f.total_edge_sums.merge(net);
                    }
                }
            }
        }

        // CPU time before sampling was armed: its own row, so shares are of all CPU time.
        let unsampled = t.unsampled.round() as u64;
        if unsampled > 0 {
            functions.push(FunctionStats {
                function: UNSAMPLED.to_string(),
                module: "[strobe]".to_string(),
                source: None,
                module_path: "[strobe]".to_string(),
                lines: Vec::new(),
                samples: unsampled,
                total_samples: unsampled,
                windows: 0,
                sums: WindowSums::new(width),
                total_windows: 0,
                total_sums: WindowSums::new(width),
                edge_sums: WindowSums::new(width),
                total_edge_sums: WindowSums::new(width),
                off_cpu_ns: 0,
                total_off_cpu_ns: 0,
                off_cpu_intervals: 0,
            });
            paths.push(PathStats {
                frames: vec![functions.len() - 1],
                samples: unsampled,
                sums: WindowSums::new(width),
                off_cpu_ns: 0,
            });
        }

        for ((fi, line), n) in line_counts {
            if let Some(f) = functions.get_mut(fi) {
                f.lines.push((line.clone(), n));
            }
        }
        for f in &mut functions {
            f.lines.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        }

        // Renumber without functions met only as the end of discarded windows.
        let keep: Vec<bool> = functions
            .iter()
            .map(|f| {
                f.samples > 0 || f.windows > 0 || f.total_samples > 0 || f.total_off_cpu_ns > 0
            })
            .collect();
        let mut new_index = vec![usize::MAX; functions.len()];
        let mut kept = Vec::new();
        for (i, f) in functions.into_iter().enumerate() {
            if keep[i] {
                new_index[i] = kept.len();
                kept.push(f);
            }
        }
        for p in &mut paths {
            p.frames.retain(|&g| new_index.get(g).is_some_and(|&n| n != usize::MAX));
            for g in &mut p.frames {
                *g = new_index[*g];
            }
        }
        let mut path_renumber = vec![usize::MAX; paths.len()];
        let mut next = 0;
        for (i, p) in paths.iter().enumerate() {
            if p.samples > 0 || p.sums.n > 0 || p.off_cpu_ns > 0 {
                path_renumber[i] = next;
                next += 1;
            }
        }
        paths.retain(|p| p.samples > 0 || p.sums.n > 0 || p.off_cpu_ns > 0);
        let timeline = t.timeline.take().map(|raw| {
            for p in key_path.values_mut() {
                *p = path_renumber.get(*p).copied().unwrap_or(usize::MAX);
            }
            // The time line's deltas: the interval's baseline only (not the boundaries and
            // tails the report's own windows carry).
            let plain = t.beta_plain.iter().any(|&b| b != 0.0);
            let beta = if plain { &t.beta_plain } else { &t.beta_window };
            let baseline =
                matches!(baseline, BaselineUse::Applied { .. }).then_some((beta.as_slice(), plain));
            crate::timeline::build(raw, &key_path, &t.thread_names, &t.spaces, width, baseline)
        });

        let paired = t.paired;
        let mean_window = (paired > 0).then(|| t.leader_raw / paired as f64);
        let net_window = (paired > 0).then(|| t.leader_net / paired as f64);
        let correction = (paired > 0).then(|| t.correction_sum / paired as f64);
        let (tail_windows, tail_only_windows) = (t.tail_windows, t.tail_only_windows);
        Report {
            counters,
            has_stacks: !t.stacks.is_empty(),
            info: t.info,
            functions: kept,
            paths,
            samples: t.sample_count + unsampled,
            lost_samples: t.lost,
            lost_by_thread: t.lost_by_thread,
            windows_used: used,
            windows_discarded: discarded,
            windows_unpaired: t.unpaired,
            mean_window,
            net_window,
            correction,
            tail_windows,
            tail_only_windows,
            baseline,
            policy,
            all,
            timeline,
            off_cpu,
        }
    }

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
                let (p, var) = sums.share(&self.all, i)?;
                Some(Estimate::from_var(p, var, 0.0).scaled(100.0))
            }
        }
    }

    /// True when `f`'s metrics rest on fewer than [`FEW_WINDOWS`] windows.
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
