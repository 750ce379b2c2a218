//! Engine tests on inputs built in memory, symbolized for real: the IPs are those of
//! functions of this test binary, normalized with its own /proc/self/maps.

use crate::input::{parse_proc_maps, RecordInfo, Sample, SampleKind};
use crate::render::{render, sort_column, Format, RenderOptions};
use crate::{Aggregator, Report, ReportError, WindowPolicy};

// Functions with stable names whose addresses serve as sampled IPs. Each has a loop so
// that it is longer than the offsets the tests add to its start.

macro_rules! probe_fn {
    ($name:ident, $mul:expr) => {
        #[inline(never)]
        #[no_mangle]
        pub(crate) extern "C" fn $name(n: u64) -> u64 {
            let mut acc = n;
            let mut i = 0;
            while i < n {
                acc = (acc ^ (acc >> 3)).wrapping_mul($mul) ^ i;
                i += 1;
            }
            acc
        }
    };
}

probe_fn!(strobe_test_alpha, 0x9e37_79b9);
probe_fn!(strobe_test_beta, 0x85eb_ca6b);
probe_fn!(strobe_test_gamma, 0xc2b2_ae35);
probe_fn!(strobe_test_delta, 0x27d4_eb2f);

fn ip(f: extern "C" fn(u64) -> u64, off: u64) -> u64 {
    // Keep the functions alive and distinct.
    std::hint::black_box(f(3));
    f as usize as u64 + off
}

fn alpha(off: u64) -> u64 {
    ip(strobe_test_alpha, off)
}
fn beta(off: u64) -> u64 {
    ip(strobe_test_beta, off)
}
fn gamma(off: u64) -> u64 {
    ip(strobe_test_gamma, off)
}
fn delta(off: u64) -> u64 {
    ip(strobe_test_delta, off)
}

const PID: u32 = 4242;

/// A stream builder: per-thread cumulative counters, so tests state only deltas.
struct Stream {
    agg: Aggregator,
    /// tid -> cumulative values.
    values: Vec<(u32, Vec<u64>)>,
    time: u64,
}

impl Stream {
    fn new(events: &[&str]) -> Stream {
        let info = RecordInfo {
            events: events.iter().map(|s| s.to_string()).collect(),
            period: 1_000_000,
            window: 20_000,
            jitter: 0,
            command: vec!["./prog".into(), "--fast".into()],
            source: None,
        };
        let mut agg = Aggregator::new(info).unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        for m in parse_proc_maps(&maps) {
            agg.add_mapping(PID, m);
        }
        Stream { agg, values: Vec::new(), time: 0 }
    }

    fn push(&mut self, tid: u32, kind: SampleKind, ip: u64, add: &[u64]) {
        self.push_on(tid, kind, ip, 0, add);
    }

    fn push_on(&mut self, tid: u32, kind: SampleKind, ip: u64, stack: u32, add: &[u64]) {
        let width = self.agg.info().events.len();
        let pos = match self.values.iter().position(|(t, _)| *t == tid) {
            Some(p) => p,
            None => {
                self.values.push((tid, vec![1_000; width]));
                self.values.len() - 1
            }
        };
        let vals = &mut self.values[pos].1;
        for (v, a) in vals.iter_mut().zip(add) {
            *v += a;
        }
        self.time += 1;
        let values = vals.clone();
        self.agg.push(&Sample { pid: PID, tid, time: self.time, ip, kind, stack, values: &values });
    }

    /// A long period ending at `start`, then a window of `deltas` ending at `end`.
    fn window(&mut self, tid: u32, start: u64, end: u64, deltas: &[u64]) {
        let long: Vec<u64> = deltas.iter().map(|d| d * 50).collect();
        self.push(tid, SampleKind::WindowStart, start, &long);
        self.push(tid, SampleKind::WindowEnd, end, deltas);
    }

    fn finish(self, policy: WindowPolicy) -> Report {
        self.agg.finish(policy)
    }
}

const SW: &[&str] = &["task-clock", "page-faults", "context-switches"];

/// alpha: 3 whole windows; beta: 2 whole windows; alpha->beta: 1 crossing window.
fn crossing_stream() -> Stream {
    let mut s = Stream::new(SW);
    for _ in 0..3 {
        s.window(1, alpha(0), alpha(4), &[20_000, 2, 0]);
    }
    for _ in 0..2 {
        s.window(1, beta(0), beta(2), &[30_000, 0, 1]);
    }
    s.window(1, alpha(2), beta(4), &[25_000, 7, 0]);
    s
}

#[test]
fn discard_attributes_only_windows_within_one_function() {
    let r = crossing_stream().finish(WindowPolicy::Discard);
    let a = r.function("strobe_test_alpha").expect("alpha symbolized");
    let b = r.function("strobe_test_beta").expect("beta symbolized");
    assert_eq!((a.samples, a.windows), (4, 3), "the crossing window's start still counts");
    assert_eq!((b.samples, b.windows), (2, 2));
    assert_eq!(a.sums.sums[..], [60000.0, 6.0, 0.0]);
    assert_eq!(b.sums.sums[..], [60000.0, 0.0, 2.0]);
    assert_eq!((r.windows_used, r.windows_discarded, r.windows_unpaired), (5, 1, 0));
    assert_eq!(r.samples, 6, "window ends are not time samples");
    // faults/ms: 6 faults in 0.06 ms of windows.
    let pf = r.metrics().into_iter().find(|m| m.key == "page_faults_per_ms").unwrap();
    assert_eq!(r.metric(a, pf), Some(100.0));
    assert_eq!(r.metric(b, pf), Some(0.0));
    // Mean window over all paired windows, discarded included.
    assert_eq!(r.mean_window, Some((60_000.0 + 60_000.0 + 25_000.0) / 6.0));
}

#[test]
fn fold_attributes_crossing_windows_to_the_end_function() {
    let r = crossing_stream().finish(WindowPolicy::Fold);
    let a = r.function("strobe_test_alpha").unwrap();
    let b = r.function("strobe_test_beta").unwrap();
    assert_eq!((a.samples, a.windows), (4, 3));
    assert_eq!((b.samples, b.windows), (2, 3));
    assert_eq!(b.sums.sums[..], [85000.0, 7.0, 2.0]);
    assert_eq!((r.windows_used, r.windows_discarded), (6, 0));
}

#[test]
fn small_function_keeps_its_rank_when_its_windows_are_discarded() {
    // gamma is so short that every window starting in it ends elsewhere, yet it is
    // sampled more often than delta, whose windows are all whole.
    let build = || {
        let mut s = Stream::new(SW);
        for _ in 0..5 {
            s.window(1, gamma(0), alpha(0), &[20_000, 0, 0]);
        }
        for _ in 0..3 {
            s.window(1, delta(0), delta(4), &[20_000, 0, 0]);
        }
        s
    };
    let folded = build().finish(WindowPolicy::Fold);
    let r = build().finish(WindowPolicy::Discard);
    let rows = crate::render::ordered(&r, crate::render::Column::Samples, None);
    let names: Vec<&str> = rows.iter().map(|f| f.function.as_str()).collect();
    // alpha is met only as the end of discarded windows: no samples, no windows, no row.
    assert_eq!(names, ["strobe_test_gamma", "strobe_test_delta"]);
    let g = r.function("strobe_test_gamma").unwrap();
    assert_eq!((g.samples, g.windows), (5, 0));
    assert!((r.time_pct(g) - 62.5).abs() < 1e-9);
    let pf = r.metrics().into_iter().find(|m| m.key == "page_faults_per_ms").unwrap();
    assert_eq!(r.metric(g, pf), None, "no windows: no metric, not zero");
    // Folded, alpha gets the windows that ended in it, still with no time samples.
    let a = folded.function("strobe_test_alpha").unwrap();
    assert_eq!((a.samples, a.windows), (0, 5));
}

/// A function's share of the page faults rests on at least one fault: with a fraction of
/// one in all windows (net of the baseline) it is not given, and with three, all in one function, it is 100% with the
/// interval of a proportion of three events, not 100 +- 0.
#[test]
fn a_share_of_page_faults_rests_on_faults() {
    let pf = crate::metrics::METRICS.iter().find(|m| m.key == "page_faults_pct").unwrap();
    // One fault in four windows, less a baseline of 0.2 a window: 0.2 of a fault in all.
    let mut s = Stream::new(SW);
    s.agg.set_baseline(crate::input::Baseline {
        counters: vec![counter(0.0), counter(0.2), counter(0.0)],
        ..tail_baseline()
    });
    for f in [1, 0, 0, 0] {
        s.window(1, alpha(0), alpha(4), &[20_000, f, 0]);
    }
    let r = s.finish(WindowPolicy::Discard);
    let a = r.function("strobe_test_alpha").unwrap();
    assert_eq!(a.windows, 4);
    assert!((a.sums.sums[1] - 0.2).abs() < 1e-9, "{:?}", a.sums.sums);
    assert_eq!(r.metric_estimate(a, pf), None);

    let mut s = Stream::new(SW);
    for f in [1, 1, 1, 0] {
        s.window(1, alpha(0), alpha(4), &[20_000, f, 0]);
    }
    s.window(1, beta(0), beta(2), &[20_000, 0, 0]);
    let r = s.finish(WindowPolicy::Discard);
    let e = r.metric_estimate(r.function("strobe_test_alpha").unwrap(), pf).unwrap();
    assert!((e.value - 100.0).abs() < 1e-9, "{e:?}");
    // Wilson's 95% interval of 3 of 3: [43.85%, 100%].
    assert!((e.low - 43.85).abs() < 0.05 && e.high == 100.0, "{e:?}");
}

fn counter(mean: f64) -> crate::input::BaselineCounter {
    crate::input::BaselineCounter { mean, sd: 0.0 }
}

/// 30 us of every window and 9 us from an overflow to the handler are the sampler's.
fn tail_baseline() -> crate::input::Baseline {
    crate::input::Baseline {
        windows: true,
        requested: 50_000,
        intervals: 100,
        work_ns: 20_000.0,
        counters: vec![counter(30_000.0), counter(0.0), counter(0.0)],
        tail: vec![counter(9_000.0), counter(0.0), counter(0.0)],
        end: vec![counter(0.0), counter(0.0), counter(0.0)],
        uncounted: 0.0,
    }
}

/// A window that began inside a system call gets the call's remainder (its tail, net of
/// the usual delay) as its first part; a tail as long as a window is scaled to the mean
/// net window, so it weighs as one window.
#[test]
fn window_tails_add_the_calls_remainder_and_whole_tails_weigh_one_window() {
    let mut s = Stream::new(SW);
    s.agg.set_baseline(tail_baseline());
    // A plain window: 70 us measured, 40 us of it the target's, 10 faults.
    s.window(1, alpha(0), alpha(2), &[70_000, 10, 0]);
    // Overflow in a call; the handler read 29 us later (20 us of call, 9 us of delay);
    // the window's own part: 50 us measured, 20 us the target's, 5 faults.
    s.push(1, SampleKind::CallTail, alpha(0), &[1_000_000, 0, 0]);
    s.push(1, SampleKind::WindowStart, alpha(0), &[29_000, 0, 1]);
    s.push(1, SampleKind::WindowEnd, alpha(2), &[50_000, 5, 0]);
    // A call 90 us past its overflow: 81 us of call with 3 faults, a window by itself,
    // scaled to the mean net window (40 us): 40/81 of its counts.
    s.push(1, SampleKind::CallTail, alpha(0), &[1_000_000, 0, 0]);
    s.push(1, SampleKind::WindowStart, alpha(0), &[90_000, 3, 0]);
    s.push(1, SampleKind::WindowEnd, alpha(0), &[0, 0, 0]);
    let r = s.finish(WindowPolicy::Discard);
    let a = r.function("strobe_test_alpha").unwrap();
    assert_eq!((a.windows, a.samples), (3, 3));
    let k = 40_000.0 / 81_000.0;
    let want = [40_000.0 + 40_000.0 + 40_000.0, 10.0 + 5.0 + 3.0 * k, 1.0];
    for (got, want) in a.sums.sums.iter().zip(want) {
        assert!((got - want).abs() < 1e-6, "{:?}", a.sums.sums);
    }
    assert_eq!((r.tail_windows, r.tail_only_windows), (2, 1));
    // The mean and net windows are of windows with a part of their own.
    assert_eq!((r.mean_window, r.net_window), (Some(60_000.0), Some(40_000.0)));
}

/// Events at the sampler's own overflows (a context switch where the overflow gave the
/// scheduler its chance) are counted once per sampling cycle, not per window: a window's
/// boundary counts are scaled by the mean net window over the mean cycle.
#[test]
fn boundary_counts_are_spread_over_the_cycle() {
    let mut s = Stream::new(SW);
    s.agg.set_baseline(tail_baseline());
    // Each cycle: a long period ends in an overflow (1 ms of leader), 9 us to the start
    // handler's read with one context switch every other cycle, a window interior of 70
    // us (40 us net) ending at its overflow, then 14 us to the end handler's read.
    for i in 0..40u64 {
        s.push(1, SampleKind::Overflow, alpha(0), &[1_000_000 - 9_000, 0, 0]);
        s.push(1, SampleKind::WindowStart, alpha(0), &[9_000, 0, i % 2]);
        s.push(1, SampleKind::Overflow, alpha(2), &[70_000, 0, 0]);
        s.push(1, SampleKind::WindowEnd, alpha(2), &[14_000, 0, 0]);
    }
    let r = s.finish(WindowPolicy::Discard);
    let a = r.function("strobe_test_alpha").unwrap();
    // The cycle: 1 ms + 70 us + 14 us (after the first eight, measured between starts).
    let cycle = 1_084_000.0;
    // Half a switch per cycle: 0.5 / 1.084 ms, whatever the window's length.
    let cs_per_ms = a.sums.sums[2] / a.sums.sums[0] * 1e6;
    assert!((cs_per_ms - 0.5 / (cycle / 1e6)).abs() < 0.02, "{cs_per_ms}");
    assert_eq!(a.sums.sums[0], 40.0 * 40_000.0, "interior time only, net of the baseline");
}

/// A baseline that comes after samples cannot be subtracted from windows already summed:
/// the report says so rather than applying it to some windows only.
#[test]
fn a_baseline_after_the_samples_is_shown_not_applied() {
    let mut s = Stream::new(SW);
    s.window(1, alpha(0), alpha(2), &[70_000, 10, 0]);
    s.agg.set_baseline(tail_baseline());
    let r = s.finish(WindowPolicy::Discard);
    assert!(
        matches!(&r.baseline, crate::BaselineUse::NotApplied(why) if why.contains("after")),
        "{:?}",
        r.baseline
    );
    assert_eq!(r.function("strobe_test_alpha").unwrap().sums.sums[0], 70_000.0);
}

/// Inclusive (total) window metrics count a window for every call active at both of its
/// ends: one starting in beta (called by alpha) and ending in alpha counts for alpha, not
/// for beta; one ending in gamma, a sibling of beta under alpha, counts for alpha too.
#[test]
fn total_metrics_count_windows_for_the_calls_they_stayed_inside() {
    let mut s = Stream::new(SW);
    // Stacks (innermost caller first): 1 = [alpha]; 2 = [delta] (an unrelated caller).
    s.agg.add_stack_nodes(
        PID,
        1,
        &[
            crate::input::StackNode { parent: 0, addr: alpha(8) + 1 },
            crate::input::StackNode { parent: 0, addr: delta(8) + 1 },
        ],
    );
    let window = |s: &mut Stream, start: (u64, u32), end: (u64, u32), d: &[u64]| {
        let long: Vec<u64> = d.iter().map(|v| v * 50).collect();
        s.push_on(1, SampleKind::WindowStart, start.0, start.1, &long);
        s.push_on(1, SampleKind::WindowEnd, end.0, end.1, d);
    };
    window(&mut s, (beta(0), 1), (beta(2), 1), &[20_000, 1, 0]); // inside beta
    window(&mut s, (beta(0), 1), (alpha(2), 0), &[20_000, 2, 0]); // beta returned to alpha
    window(&mut s, (beta(0), 1), (gamma(2), 1), &[20_000, 4, 0]); // on into gamma
    window(&mut s, (beta(0), 1), (gamma(2), 2), &[20_000, 8, 0]); // left alpha
    let r = s.finish(WindowPolicy::Discard);
    let (a, b) =
        (r.function("strobe_test_alpha").unwrap(), r.function("strobe_test_beta").unwrap());
    assert_eq!((b.windows, b.sums.sums[1]), (1, 1.0), "self: beta's own window");
    assert_eq!((b.total_windows, b.total_sums.sums[1]), (1, 1.0));
    assert_eq!((a.total_windows, a.total_sums.sums[1]), (3, 1.0 + 2.0 + 4.0));
}

#[test]
fn unpaired_windows_are_counted_never_attributed() {
    let mut s = Stream::new(SW);
    s.push(1, SampleKind::WindowEnd, alpha(0), &[10, 0, 0]); // end without start
    s.push(1, SampleKind::WindowStart, alpha(0), &[10, 0, 0]); // followed by another start
    s.push(1, SampleKind::WindowStart, alpha(0), &[10, 0, 0]);
    s.push(1, SampleKind::Plain, alpha(0), &[10, 0, 0]); // interrupts the open window
    s.window(1, alpha(0), alpha(2), &[20_000, 1, 0]); // the one good window
    s.push(1, SampleKind::WindowStart, alpha(0), &[10, 0, 0]); // open at the end
    let r = s.finish(WindowPolicy::Discard);
    assert_eq!((r.windows_used, r.windows_unpaired), (1, 4));
    let a = r.function("strobe_test_alpha").unwrap();
    assert_eq!(a.samples, 5);
    assert_eq!(a.sums.sums[..], [20000.0, 1.0, 0.0]);
}

#[test]
fn a_counter_going_backwards_is_not_a_window() {
    let mut s = Stream::new(SW);
    s.push(1, SampleKind::WindowStart, alpha(0), &[1_000_000, 5, 0]);
    let vals = [500, 0, 0];
    s.agg.push(&Sample {
        pid: PID,
        tid: 1,
        time: 99,
        ip: alpha(0),
        kind: SampleKind::WindowEnd,
        stack: 0,
        values: &vals,
    });
    let r = s.finish(WindowPolicy::Discard);
    assert_eq!((r.windows_used, r.windows_unpaired), (0, 1));
}

#[test]
fn interleaved_threads_pair_within_each_thread() {
    let mut s = Stream::new(SW);
    s.push(1, SampleKind::WindowStart, alpha(0), &[0, 0, 0]);
    s.push(2, SampleKind::WindowStart, beta(0), &[0, 0, 0]);
    s.push(1, SampleKind::WindowEnd, alpha(2), &[20_000, 3, 0]);
    s.push(2, SampleKind::WindowEnd, beta(2), &[40_000, 0, 0]);
    let r = s.finish(WindowPolicy::Discard);
    assert_eq!((r.windows_used, r.windows_discarded, r.windows_unpaired), (2, 0, 0));
    assert_eq!(r.function("strobe_test_alpha").unwrap().sums.sums[..], [20_000.0, 3.0, 0.0]);
    assert_eq!(r.function("strobe_test_beta").unwrap().sums.sums[..], [40_000.0, 0.0, 0.0]);
}

#[test]
fn unknown_addresses_are_named_never_dropped() {
    let mut s = Stream::new(SW);
    s.agg.add_mapping(
        PID,
        crate::Mapping { start: 0x1000, end: 0x2000, offset: 0, path: String::new() },
    );
    s.agg.add_mapping(
        PID,
        crate::Mapping {
            start: 0x10_0000,
            end: 0x20_0000,
            offset: 0,
            path: "/nonexistent/libgone.so".into(),
        },
    );
    s.push(1, SampleKind::Plain, 0x1800, &[1, 0, 0]);
    s.push(1, SampleKind::Plain, 0x10_0800, &[1, 0, 0]);
    s.push(1, SampleKind::Plain, 0x10_0900, &[1, 0, 0]);
    s.push(1, SampleKind::Plain, 0x8, &[1, 0, 0]);
    let r = s.finish(WindowPolicy::Discard);
    assert_eq!(r.function("[unknown in [anon]]").unwrap().samples, 1);
    let gone = r.function("[unknown in libgone.so]").unwrap();
    assert_eq!((gone.samples, gone.module.as_str()), (2, "libgone.so"));
    assert_eq!(r.function("[unknown]").unwrap().samples, 1);
    assert_eq!(r.samples, 4);
}

#[test]
fn dwarf_lines_name_the_source() {
    let mut s = Stream::new(SW);
    s.push(1, SampleKind::Plain, alpha(0), &[1, 0, 0]);
    let r = s.finish(WindowPolicy::Discard);
    let src = r.function("strobe_test_alpha").unwrap().source.clone().expect("DWARF line");
    assert!(src.contains("tests.rs:"), "{src}");
}

#[test]
fn exec_starts_a_new_address_space() {
    let mut s = Stream::new(SW);
    s.push(1, SampleKind::Plain, alpha(0), &[1, 0, 0]);
    // After exec the old image's addresses mean nothing: the same IP is now in an
    // anonymous mapping of the new image.
    s.agg.exec(PID);
    let a = alpha(0);
    s.agg.add_mapping(
        PID,
        crate::Mapping { start: a - 16, end: a + 16, offset: 0, path: String::new() },
    );
    s.push(1, SampleKind::Plain, a, &[1, 0, 0]);
    let r = s.finish(WindowPolicy::Discard);
    assert_eq!(r.function("strobe_test_alpha").unwrap().samples, 1);
    assert_eq!(r.function("[unknown in [anon]]").unwrap().samples, 1);
}

fn sorted_names(r: &Report, sort: &str, top: Option<usize>) -> Vec<String> {
    let col = sort_column(r, sort).unwrap();
    crate::render::ordered(r, col, top).iter().map(|f| f.function.clone()).collect()
}

fn sort_stream() -> Report {
    // alpha: many samples, no faults; beta: few samples, many faults; gamma: between.
    let mut s = Stream::new(SW);
    for _ in 0..6 {
        s.window(1, alpha(0), alpha(2), &[20_000, 0, 0]);
    }
    for _ in 0..2 {
        s.window(1, beta(0), beta(2), &[20_000, 9, 1]);
    }
    for _ in 0..4 {
        s.window(1, gamma(0), gamma(2), &[20_000, 2, 0]);
    }
    s.push(1, SampleKind::Plain, delta(0), &[5, 0, 0]);
    s.finish(WindowPolicy::Discard)
}

#[test]
fn sort_by_any_column_and_cut_to_top() {
    let r = sort_stream();
    let a = "strobe_test_alpha";
    let b = "strobe_test_beta";
    let g = "strobe_test_gamma";
    let d = "strobe_test_delta";
    assert_eq!(sorted_names(&r, "samples", None), [a, g, b, d]);
    assert_eq!(sorted_names(&r, "time", Some(2)), [a, g]);
    // delta has no windows: no value, so last whatever the order.
    assert_eq!(sorted_names(&r, "page_faults_per_ms", None), [b, g, a, d]);
    assert_eq!(sorted_names(&r, "faults/ms", Some(1)), [b]);
    assert_eq!(sorted_names(&r, "CS/MS", None), [b, a, g, d]);
    assert_eq!(sorted_names(&r, "function", None), [a, b, d, g]);
    assert_eq!(sorted_names(&r, "windows", Some(0)), Vec::<String>::new());
}

#[test]
fn sort_errors_say_what_to_do() {
    let r = sort_stream();
    let err = sort_column(&r, "nope").unwrap_err();
    assert!(matches!(err, ReportError::UnknownSort { .. }));
    let msg = err.to_string();
    assert!(msg.contains("'nope'") && msg.contains("page_faults_per_ms"), "{msg}");
    let err = sort_column(&r, "cpi").unwrap_err().to_string();
    assert!(err.contains("cycles, instructions") && err.contains("-e"), "{err}");
}

#[test]
fn metrics_follow_the_recorded_counters() {
    let mut s = Stream::new(&["cycles", "instructions", "branch-misses"]);
    s.window(1, alpha(0), alpha(2), &[3000, 1000, 5]);
    let r = s.finish(WindowPolicy::Discard);
    let keys: Vec<&str> = r.metrics().iter().map(|m| m.key).collect();
    assert_eq!(
        keys,
        [
            "cpi",
            "ipc",
            "branch_misses_per_ki",
            "cycles_pct",
            "instructions_pct",
            "branch_misses_pct"
        ]
    );
    let text = render(&r, &RenderOptions::default()).unwrap();
    assert!(text.contains("CPI") && !text.contains("faults/ms"), "{text}");
    assert!(text.contains("period:   1000000 cycles"), "{text}");
}

/// Replaces what differs between builds (the test binary's name) for snapshots.
fn stable(text: &str) -> String {
    let exe = std::env::current_exe().unwrap();
    let name = exe.file_name().unwrap().to_string_lossy().into_owned();
    text.replace(&name, "[test-binary]")
}

fn snapshot_report() -> Report {
    let mut s = Stream::new(SW);
    for _ in 0..40 {
        s.window(1, alpha(0), alpha(4), &[21_000, 0, 0]);
    }
    for _ in 0..25 {
        s.window(2, beta(0), beta(4), &[26_000, 13, 0]);
    }
    for _ in 0..10 {
        s.window(1, gamma(0), gamma(4), &[40_000, 0, 1]);
    }
    for _ in 0..5 {
        s.window(2, delta(0), alpha(0), &[20_000, 0, 0]);
    }
    s.push(1, SampleKind::WindowStart, 0x8, &[1_000_000, 0, 0]);
    s.agg.add_lost(1, 1, 5);
    s.agg.add_lost(1, 2, 2);
    let mut r = s.finish(WindowPolicy::Discard);
    for f in &mut r.functions {
        f.source = None; // line numbers move as this file is edited
    }
    r
}

#[test]
fn snapshot_table() {
    let r = snapshot_report();
    let text = render(&r, &RenderOptions { file: Some("run.strobe".into()), ..Default::default() });
    insta::assert_snapshot!(stable(&text.unwrap()));
}

#[test]
fn snapshot_json() {
    let r = snapshot_report();
    let opts = RenderOptions {
        format: Format::Json,
        file: Some("run.strobe".into()),
        ..Default::default()
    };
    let text = stable(&render(&r, &opts).unwrap());
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["lost_samples"], 7);
    assert_eq!(v["lost_by_thread"][0]["tid"], 1);
    assert_eq!(v["lost_by_thread"][0]["lost"], 5);
    assert_eq!(v["lost_by_thread"][1]["lost"], 2);
    assert_eq!(v["functions"][0]["function"], "strobe_test_alpha");
    insta::assert_snapshot!(text);
}

#[test]
fn snapshot_csv_sorted_top() {
    let r = snapshot_report();
    let opts = RenderOptions {
        format: Format::Csv,
        sort: Some("page_faults_per_ms".into()),
        top: Some(3),
        file: None,
    };
    insta::assert_snapshot!(stable(&render(&r, &opts).unwrap()));
}

/// Losses the kernel counted after a ring's last record name no thread: said so, not as
/// a thread 0.
#[test]
fn losses_no_record_named_a_thread_for_are_said_so() {
    let mut r = snapshot_report();
    r.lost_by_thread.push(crate::LostThread { pid: 1, tid: 0, lost: 40 });
    assert_eq!(crate::render::lost_per_thread(&r), "thread 1: 5, thread 2: 2, no thread named: 40");
}

#[test]
fn csv_quotes_names_with_commas() {
    assert_eq!(crate::render::csv_field("f<a, b>"), "\"f<a, b>\"");
    assert_eq!(crate::render::csv_field("say \"hi\", x"), "\"say \"\"hi\"\", x\"");
    assert_eq!(crate::render::csv_field("plain"), "plain");
}

#[test]
fn throughput_measures_the_whole_stream() {
    let t = crate::throughput::measure(20_000).unwrap();
    assert_eq!(t.samples, 20_000);
    assert!(t.seconds >= t.aggregate_seconds && t.seconds > 0.0);
}

#[test]
fn throughput_through_a_record_file_reads_every_sample() {
    let dir = std::env::temp_dir();
    let (t, bytes) = crate::throughput::measure_file(10_000, &dir).unwrap();
    assert_eq!(t.samples, 10_000);
    assert!(bytes > 10_000, "{bytes}");
}

/// A mangled (not `#[no_mangle]`) function: its name must come out demangled, without
/// the hash suffix.
#[inline(never)]
fn mangled_rust_function(n: u64) -> u64 {
    let mut acc = n;
    let mut i = 0;
    while i < n {
        acc = (acc ^ (acc >> 5)).wrapping_mul(0x2545_f491) ^ i;
        i += 1;
    }
    acc
}

#[test]
fn rust_names_are_demangled() {
    let f: fn(u64) -> u64 = mangled_rust_function;
    std::hint::black_box(f(3));
    let mut s = Stream::new(SW);
    s.push(1, SampleKind::Plain, f as usize as u64, &[1, 0, 0]);
    let r = s.finish(WindowPolicy::Discard);
    let names: Vec<&str> = r.functions.iter().map(|f| f.function.as_str()).collect();
    assert_eq!(names, ["strobe_report::tests::mangled_rust_function"]);
}

/// Each counter's rate in the windows is judged against the long periods between them
/// (a window's end to the next window's overflow, or its start when no overflow came
/// first): windows at the long periods' rates pass; windows with half their faults are
/// flagged at 0.5x; a counter with too few events is not judged.
#[test]
fn windows_are_checked_against_the_long_periods_between_them() {
    let mut fair = Stream::new(SW);
    for i in 0..60u64 {
        fair.window(1 + (i % 2) as u32, alpha(0), alpha(4), &[20_000, 4 + i % 3, 1]);
    }
    let r = fair.finish(WindowPolicy::Discard);
    assert_eq!(r.window_check.len(), 2, "{:?}", r.window_check);
    let (pf, cs) = (&r.window_check[0], &r.window_check[1]);
    assert_eq!((pf.counter.as_str(), cs.counter.as_str()), ("page-faults", "context-switches"));
    // Each thread's first long period (before its first window) is not one.
    assert!((pf.ratio - 1.0).abs() < 0.02 && pf.judged && !pf.flagged, "{pf:?}");
    assert!(!cs.judged && !cs.flagged, "60 switches in the windows: not judged: {cs:?}");
    assert_eq!(crate::window_check::warning(&r.window_check), None);

    let mut biased = Stream::new(SW);
    for i in 0..60u64 {
        // Long periods of 1 ms with 200 faults; every other window's overflow came first.
        if i % 2 == 0 {
            biased.push(1, SampleKind::Overflow, alpha(0), &[1_000_000, 200, 50]);
            biased.push(1, SampleKind::WindowStart, alpha(0), &[0, 0, 0]);
        } else {
            biased.push(1, SampleKind::WindowStart, alpha(0), &[1_000_000, 200, 50]);
        }
        biased.push(1, SampleKind::WindowEnd, alpha(4), &[20_000, 1 + i % 3, 1]);
    }
    let r = biased.finish(WindowPolicy::Discard);
    let pf = &r.window_check[0];
    assert!((pf.ratio - 0.5).abs() < 0.01 && pf.flagged, "{pf:?}");
    let text = render(&r, &RenderOptions::default()).unwrap();
    assert!(
        text.contains("warning:  windows are not like the rest of this run: page-faults 0.50x"),
        "{text}"
    );
}

#[test]
fn programs_the_agent_did_not_run_in_are_named_in_the_header_and_the_json() {
    let mut r = snapshot_report();
    assert_eq!(crate::render::without_agent_line(&r), None);
    r.without_agent = vec![
        crate::WithoutAgent { command: "gprog".into(), processes: 1, samples: 98 },
        crate::WithoutAgent { command: "busybox".into(), processes: 3, samples: 4 },
    ];
    let line = crate::render::without_agent_line(&r).unwrap();
    assert!(
        line.starts_with(
            "no window metrics for gprog (98 samples), busybox x3 (4 samples): the agent did \
             not run in them"
        ),
        "{line}"
    );
    let text = render(&r, &RenderOptions::default()).unwrap();
    assert!(text.contains(&format!("note:     {line}")), "{text}");
    let opts = RenderOptions { format: Format::Json, ..Default::default() };
    let v: serde_json::Value = serde_json::from_str(&render(&r, &opts).unwrap()).unwrap();
    assert_eq!(v["without_agent"][1]["command"], "busybox");
    assert_eq!(v["without_agent"][1]["processes"], 3);
    assert_eq!(v["without_agent"][0]["samples"], 98);
    r.without_agent.truncate(1);
    let one = crate::render::without_agent_line(&r).unwrap();
    assert!(one.contains("did not run in it ") && one.contains("sampled its time"), "{one}");
}
