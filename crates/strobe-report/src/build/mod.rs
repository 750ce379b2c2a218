//! The report's build: from the aggregation's tallies to per-function and per-call-path
//! results, as a pipeline of named phases, each a module with its own tests:
//!
//! 1. [`addresses`]: every address once (samples, windows, off-CPU, stack frames);
//! 2. symbolization of that list ([`crate::symbolize`]), then [`functions`]: addresses
//!    folded to functions;
//! 3. [`paths`]: call paths, shared by the counting phases;
//! 4. [`samples`]: time samples, self and total;
//! 5. [`off_cpu`]: off-CPU intervals;
//! 6. [`groups`]: window buckets the next two phases cannot tell apart, merged;
//! 7. [`windows`]: window sums under the window policy;
//! 8. [`inclusive`]: window sums of the calls each window stayed inside;
//! 9. [`unsampled`]: rows for the CPU time no sample landed in, named by process and
//!    thread when the recording has per-thread CPU times;
//! 10. [`prune`]: empty functions and paths dropped, the rest renumbered;
//!
//! then the time line, when one was kept, and the recording's totals.
//!
//! This module must never read input or format output: it only orders the phases.

pub(crate) mod addresses;
pub(crate) mod functions;
pub(crate) mod groups;
pub(crate) mod inclusive;
pub(crate) mod off_cpu;
pub(crate) mod paths;
pub(crate) mod prune;
pub(crate) mod samples;
pub(crate) mod unsampled;
pub(crate) mod windows;

use rustc_hash::FxHashMap;

use self::addresses::Key;
use crate::metrics::CounterSet;
use crate::report::{BaselineUse, Report, WindowPolicy};
use crate::symbolize::symbolize_with;
use crate::tally::{OffCpuSums, Tally};
use crate::timeline::Timeline;

/// Builds the report of `t` under `policy`.
pub(crate) fn build(mut t: Tally, policy: WindowPolicy) -> Report {
    let width = t.width();
    let counters = CounterSet::from_events(&t.info.events);
    let baseline = baseline_use(&mut t);

    let sample_keys: Vec<(Key, u64)> = t.samples.iter().map(|(&k, &c)| (k, c)).collect();
    let off_keys: Vec<(Key, OffCpuSums)> = t.off_cpu.iter().map(|(&k, &v)| (k, v)).collect();
    let mut addrs = addresses::intern(&sample_keys, &off_keys, &t.windows, &t.stacks);
    let mut frames =
        symbolize_with(&mut t.spaces, &addrs.list, &t.symbols, t.symbol_cache.as_ref());
    functions::name_agent_frames(&mut frames);
    let mut fns = functions::fold(&frames, width);
    let mut paths = paths::Paths::new(width);
    let key_paths = t.timeline.is_some();
    let key_path =
        samples::attribute(&sample_keys, &addrs, &frames, &mut fns, &mut paths, key_paths);
    let off_cpu = off_cpu::attribute(&off_keys, &addrs, &mut fns, &mut paths);
    let groups = groups::group(&t.windows, &mut addrs, &fns);
    let windows = windows::attribute(&groups, &addrs, &mut fns, &mut paths, policy, width);
    inclusive::attribute(&groups, &addrs, &mut fns);

    let (mut functions, mut path_list) = (fns.list, paths.list);
    let mut unsampled = unsampled::add_rows(t.unsampled, width, &mut functions, &mut path_list);
    let rows = std::mem::take(&mut t.unaccounted);
    unsampled += unsampled::add_unaccounted(rows, width, &mut functions, &mut path_list);
    let (functions, paths, renumber) = prune::prune(functions, path_list);
    let timeline = timeline(&mut t, key_path, &renumber, &baseline);

    let paired = t.paired;
    Report {
        counters,
        has_stacks: !t.stacks.is_empty(),
        functions,
        paths,
        samples: t.sample_count + unsampled,
        symfs: t.symbols.symfs.clone(),
        lost_samples: t.lost,
        lost_by_thread: t.lost_by_thread,
        windows_used: windows.used,
        windows_discarded: windows.discarded,
        windows_unpaired: t.unpaired,
        windows_measured: !t.values_are_periods,
        mean_window: (paired > 0).then(|| t.leader_raw / paired as f64),
        net_window: (paired > 0).then(|| t.leader_net / paired as f64),
        correction: (paired > 0).then(|| t.correction_sum / paired as f64),
        tail_windows: t.tail_windows,
        tail_only_windows: t.tail_only_windows,
        baseline,
        policy,
        all: windows.all,
        timeline,
        off_cpu,
        processes: std::mem::take(&mut t.processes),
        window_check: t.window_check.finish(&t.info.events),
        without_agent: Vec::new(),
        info: t.info,
    }
}

/// Whether the baseline was subtracted (the aggregation pass subtracted it from every
/// window already, or said why not).
fn baseline_use(t: &mut Tally) -> BaselineUse {
    match (t.baseline.take(), t.baseline_unused.take()) {
        (None, _) => BaselineUse::Absent,
        (Some(_), Some(why)) => BaselineUse::NotApplied(why),
        (Some(b), None) => BaselineUse::Applied { counters: b.counters, intervals: b.intervals },
    }
}

/// The time line, when the aggregation kept one: every sample with its final path
/// (`renumber`: old path index to new), and deltas net of the interval's baseline only
/// (not the boundaries and tails the report's own windows carry).
fn timeline(
    t: &mut Tally,
    mut key_path: FxHashMap<Key, usize>,
    renumber: &[usize],
    baseline: &BaselineUse,
) -> Option<Timeline> {
    let raw = t.timeline.take()?;
    for p in key_path.values_mut() {
        *p = renumber.get(*p).copied().unwrap_or(usize::MAX);
    }
    let plain = t.beta_plain.iter().any(|&b| b != 0.0);
    let beta = if plain { &t.beta_plain } else { &t.beta_window };
    let baseline =
        matches!(baseline, BaselineUse::Applied { .. }).then_some((beta.as_slice(), plain));
    Some(crate::timeline::build(raw, &key_path, &t.thread_names, &t.spaces, t.width(), baseline))
}
