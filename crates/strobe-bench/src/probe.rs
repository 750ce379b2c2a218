//! `strobe bench probe`: probe triggers per second at 1, 2, 4 and 8 threads,
//! like the seed's `trig-uprobe-nop` table (seed 001), every variant side by
//! side in one run.
//!
//! Variants (each trigger fires one probe point with one argument and runs
//! one nop consumer):
//!
//! - `mutex`: the consumer list behind a `Mutex` (lock, walk, unlock);
//! - `rwlock`: the same behind an `RwLock` read lock;
//! - `strobe`: a `strobe_probe::probe!` site, consumers under strobe-rcu;
//! - `disabled`: a `probe!` site with no consumer (the flag test alone);
//! - `strobe-churn`: `strobe` while one more thread attaches and detaches a
//!   second consumer on the same probe in a loop (each detach waits for a
//!   paced grace period, `Attachment::detach`);
//! - `strobe-churn-exp`: the same with `Attachment::detach_expedited`, whose
//!   immediate grace periods interrupt the firing threads (the cost the
//!   normal detach avoids, shown side by side);
//! - `strobe-private`: `strobe` with one probe point and consumer per
//!   thread, so threads share nothing of the probe: the scaling the machine
//!   gives this code, the reference for `strobe`'s (a tiny loop such as
//!   `disabled` scales differently when the VM's two vCPUs are hyperthreads
//!   of one core);
//! - `uprobe`, `uprobe-prologue`: kernel uprobes, from
//!   `probe_uprobe::rows` (see [`uprobe_rows`]).
//!
//! Threads beyond the machine's CPUs oversubscribe it (4 and 8 here on 2
//! vCPUs): those rows show how each variant degrades, not parallel speedup.
//! Each cell is the median of `repeats` timed windows, taken in rounds over
//! all cells.
//!
//! Must never: be linked into a target; quote figures from `--quick`.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde_json::Value;
use strobe_probe::{attach, probe, Action, Consumer};

use crate::report::{machine_summary, row};
use crate::stats::median;
use crate::{BenchError, BenchOpts, BenchReport, Row};

/// Thread counts of the table.
pub(crate) const THREADS: [usize; 4] = [1, 2, 4, 8];

/// The variants this module measures, in table order.
pub(crate) const VARIANTS: [&str; 7] =
    ["mutex", "rwlock", "strobe", "disabled", "strobe-churn", "strobe-churn-exp", "strobe-private"];

/// The probe names of `strobe-private`, one per worker thread.
const PRIVATE_PROBES: [&str; 8] = [
    "bench_private_0",
    "bench_private_1",
    "bench_private_2",
    "bench_private_3",
    "bench_private_4",
    "bench_private_5",
    "bench_private_6",
    "bench_private_7",
];

/// Triggers per inner batch between checks of the stop flag.
const BATCH: u64 = 1024;

type Handler = Box<dyn Fn(&[u64]) -> Action + Send + Sync>;

fn nop_handler() -> Handler {
    Box::new(|args| {
        black_box(args);
        Action::Keep
    })
}

static MUTEX_LIST: Mutex<Vec<Handler>> = Mutex::new(Vec::new());
static RWLOCK_LIST: RwLock<Vec<Handler>> = RwLock::new(Vec::new());

#[inline(always)]
fn trig_mutex(i: u64) {
    let l = MUTEX_LIST.lock().unwrap_or_else(|e| e.into_inner());
    let args = [i];
    for h in l.iter() {
        black_box(h(&args));
    }
}

#[inline(always)]
fn trig_rwlock(i: u64) {
    let l = RWLOCK_LIST.read().unwrap_or_else(|e| e.into_inner());
    let args = [i];
    for h in l.iter() {
        black_box(h(&args));
    }
}

/// The site worker `k` of an enabled variant fires, declared as `probe!`
/// declares them.
fn enabled_site(variant: &str, k: usize) -> Option<&'static strobe_probe::Site> {
    Some(match variant {
        "strobe" => strobe_probe::__probe_site!("bench_strobe"; 0u64),
        "strobe-churn" => strobe_probe::__probe_site!("bench_churn"; 0u64),
        "strobe-churn-exp" => strobe_probe::__probe_site!("bench_churn_exp"; 0u64),
        "strobe-private" => private_site(k),
        _ => return None,
    })
}

/// `strobe-private`'s site for worker `k` (one per thread; each name in
/// [`PRIVATE_PROBES`]).
fn private_site(k: usize) -> &'static strobe_probe::Site {
    use strobe_probe::__probe_site as site;
    match k % PRIVATE_PROBES.len() {
        0 => site!("bench_private_0"; 0u64),
        1 => site!("bench_private_1"; 0u64),
        2 => site!("bench_private_2"; 0u64),
        3 => site!("bench_private_3"; 0u64),
        4 => site!("bench_private_4"; 0u64),
        5 => site!("bench_private_5"; 0u64),
        6 => site!("bench_private_6"; 0u64),
        _ => site!("bench_private_7"; 0u64),
    }
}

/// The loop of every enabled variant: what `probe!(name, i)` expands to, with the site
/// passed in. One copy of the code for `strobe` and both churn variants, so their rows
/// differ by what the churn thread does and not by where the compiler placed each loop
/// (separately expanded loops measured up to 25% apart with no churn at all).
#[inline(never)]
fn enabled_worker(site: &'static strobe_probe::Site, stop: &AtomicBool) -> u64 {
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        for i in 0..BATCH {
            let i = black_box(i);
            if site.is_enabled() {
                site.fire(&[i]);
            }
        }
        n += BATCH;
    }
    n
}

/// One worker loop per lock variant, and the disabled probe site expanded inline in
/// its loop (measured as a program would run it); the enabled variants share
/// [`enabled_worker`].
fn worker(variant: &str, k: usize, stop: &AtomicBool) -> u64 {
    if let Some(site) = enabled_site(variant, k) {
        return enabled_worker(site, stop);
    }
    let mut n = 0u64;
    macro_rules! run_loop {
        ($body:expr) => {
            while !stop.load(Ordering::Relaxed) {
                for i in 0..BATCH {
                    let i = black_box(i);
                    $body(i);
                }
                n += BATCH;
            }
        };
    }
    match variant {
        "mutex" => run_loop!(trig_mutex),
        "rwlock" => run_loop!(trig_rwlock),
        "disabled" => run_loop!(|i: u64| probe!(bench_disabled, i)),
        _ => {}
    }
    n
}

fn nop_consumer() -> Consumer {
    Consumer::new(|h| {
        black_box(h);
        Action::Keep
    })
}

/// Consumers attached for the whole run (dropped, detaching them, at the end).
struct Setup {
    _attached: Vec<strobe_probe::Attachment>,
}

fn setup() -> Result<Setup, BenchError> {
    MUTEX_LIST.lock().unwrap_or_else(|e| e.into_inner()).push(nop_handler());
    RWLOCK_LIST.write().unwrap_or_else(|e| e.into_inner()).push(nop_handler());
    let mut attached = Vec::new();
    for name in ["bench_strobe", "bench_churn", "bench_churn_exp"].iter().chain(&PRIVATE_PROBES) {
        attached.push(attach(name, nop_consumer()).map_err(|e| BenchError::Other(e.to_string()))?);
    }
    Ok(Setup { _attached: attached })
}

fn teardown(s: Setup) {
    MUTEX_LIST.lock().unwrap_or_else(|e| e.into_inner()).clear();
    RWLOCK_LIST.write().unwrap_or_else(|e| e.into_inner()).clear();
    drop(s);
}

/// One timed window: `threads` workers of `variant` for `window`; returns
/// million triggers per second and the churn thread's attach+detach pairs.
fn measure(variant: &'static str, threads: usize, window: Duration) -> (f64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let churn_stop = Arc::new(AtomicBool::new(false));
    let churned = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(threads + 1));
    let churn_probe = match variant {
        "strobe-churn" => Some(("bench_churn", false)),
        "strobe-churn-exp" => Some(("bench_churn_exp", true)),
        _ => None,
    };
    let churner = churn_probe.map(|(name, expedited)| {
        let (cs, churned) = (churn_stop.clone(), churned.clone());
        std::thread::spawn(move || {
            while !cs.load(Ordering::Relaxed) {
                if let Ok(a) = attach(name, nop_consumer()) {
                    if expedited {
                        a.detach_expedited();
                    } else {
                        a.detach();
                    }
                }
                churned.fetch_add(1, Ordering::Relaxed);
            }
        })
    });
    let workers: Vec<_> = (0..threads)
        .map(|k| {
            let (stop, start) = (stop.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                worker(variant, k, &stop)
            })
        })
        .collect();
    start.wait();
    let t0 = Instant::now();
    let c0 = churned.load(Ordering::Relaxed);
    std::thread::sleep(window);
    stop.store(true, Ordering::Relaxed);
    let total: u64 = workers.into_iter().map(|w| w.join().unwrap_or(0)).sum();
    let secs = t0.elapsed().as_secs_f64();
    let churn = churned.load(Ordering::Relaxed) - c0;
    churn_stop.store(true, Ordering::Relaxed);
    if let Some(c) = churner {
        let _ = c.join();
    }
    (total as f64 / secs / 1e6, churn)
}

/// The kernel uprobe rows (`uprobe`, `uprobe-prologue`), same shape as ours,
/// measured by [`crate::probe_uprobe`], and a line saying how.
fn uprobe_rows(opts: &BenchOpts) -> Result<(Vec<Row>, &'static str), BenchError> {
    crate::probe_uprobe::rows(opts)
}

fn cell(rows: &[Row], variant: &str, threads: usize) -> Option<f64> {
    rows.iter()
        .find(|r| r["variant"] == variant && r["threads"] == threads as u64)
        .and_then(|r| r["mtrig_per_s"].as_f64())
}

/// Runs every variant of the `probe` benchmark side by side.
pub(crate) fn run(opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    let window = if opts.quick { Duration::from_millis(40) } else { Duration::from_millis(300) };
    let repeats = if opts.quick { opts.repeats.min(3) } else { opts.repeats };
    let s = setup()?;
    // Repeats are rounds over every cell, not back-to-back windows of one
    // cell: load from other processes then drifts over all variants alike,
    // and the ratios between rows (churn/strobe) stay meaningful on a busy
    // machine.
    let cells: Vec<(&'static str, usize)> =
        VARIANTS.iter().flat_map(|&v| THREADS.iter().map(move |&t| (v, t))).collect();
    let mut rates = vec![Vec::with_capacity(repeats); cells.len()];
    let mut churns = vec![Vec::with_capacity(repeats); cells.len()];
    for _ in 0..repeats.max(1) {
        for (k, &(variant, threads)) in cells.iter().enumerate() {
            let (m, c) = measure(variant, threads, window);
            rates[k].push(m);
            churns[k].push(c as f64 / window.as_secs_f64());
        }
    }
    teardown(s);
    // Scaling is judged round by round: a round measures a variant's 1- and
    // 2-thread cells one after the other, so their ratio sees one phase of
    // the host, while the ratio of the two medians could pair a fast phase
    // with a slow one.
    let paired_scaling = |variant: &str| {
        let at = |th| cells.iter().position(|&c| c == (variant, th));
        let (k1, k2) = (at(1)?, at(2)?);
        let ratios: Vec<f64> = rates[k1].iter().zip(&rates[k2]).map(|(a, b)| b / a).collect();
        (!ratios.is_empty()).then(|| median(&ratios))
    };
    let scaling = Scaling {
        strobe: paired_scaling("strobe"),
        disabled: paired_scaling("disabled"),
        private: paired_scaling("strobe-private"),
        rounds: repeats.max(1),
    };
    let mut rows = Vec::new();
    let mut churn_rate = Vec::new();
    for (k, &(variant, threads)) in cells.iter().enumerate() {
        let m = median(&rates[k]);
        if variant.starts_with("strobe-churn") {
            churn_rate.push((variant, threads, median(&churns[k])));
        }
        rows.push(row([
            ("variant", variant.into()),
            ("threads", threads.into()),
            ("mtrig_per_s", Value::from((m * 1000.0).round() / 1000.0)),
        ]));
    }
    // Kernel uprobes need the uprobe PMU and permission; without them the in-process rows
    // still stand, and the skip is printed with its reason.
    let (uprobe_how, uprobe_skipped) = match uprobe_rows(opts) {
        Ok((r, how)) => {
            rows.extend(r);
            (Some(how), None)
        }
        Err(BenchError::Unsupported(why)) => (None, Some(why)),
        Err(e) => return Err(e),
    };

    let mut report = BenchReport::new("probe");
    report.text = render(&rows, &churn_rate, &scaling, opts, repeats, window);
    for (key, v) in [
        ("scaling_strobe_2t", scaling.strobe),
        ("scaling_private_2t", scaling.private),
        ("parallelism_2t", scaling.disabled),
    ] {
        if let Some(v) = v {
            report.extra.insert(key.into(), Value::from((v * 1000.0).round() / 1000.0));
        }
    }
    if let Some(how) = uprobe_how {
        report.text.push_str(&format!("{how}\n"));
        report.extra.insert("uprobe_mechanism".into(), Value::from(how));
    }
    if let Some(why) = uprobe_skipped {
        report.text.push_str(&format!("uprobe rows skipped: {why}\n"));
        report.extra.insert("uprobe_skipped".into(), Value::from(why));
    }
    for (v, t, r) in &churn_rate {
        let key = if *v == "strobe-churn" { "churn" } else { "churn_exp" };
        report.extra.insert(format!("{key}_detach_per_s_{t}t"), Value::from(r.round()));
    }
    report.rows = rows;
    Ok(report)
}

/// 2-thread over 1-thread rates, each the median of the rounds' paired ratios.
struct Scaling {
    /// `strobe`'s: the goal's figure.
    strobe: Option<f64>,
    /// `disabled`'s, which shares nothing between threads: the parallelism
    /// the machine gave this run to a tiny loop.
    disabled: Option<f64>,
    /// `strobe-private`'s: the trigger path with nothing shared, the
    /// scaling the machine gave this code.
    private: Option<f64>,
    rounds: usize,
}

fn render(
    rows: &[Row],
    churn: &[(&str, usize, f64)],
    scaling: &Scaling,
    opts: &BenchOpts,
    repeats: usize,
    window: Duration,
) -> String {
    use std::fmt::Write;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "strobe bench probe: M triggers/s (median of {repeats} x {} ms)",
        window.as_millis()
    );
    let _ = writeln!(t, "machine: {}", machine_summary());
    let scheme = if strobe_rcu::global().uses_membarrier() {
        "membarrier (readers: no fence)"
    } else {
        "fences (no membarrier: readers pay a SeqCst fence)"
    };
    let _ = writeln!(t, "strobe-rcu read sections: {scheme}");
    if opts.quick {
        let _ = writeln!(t, "(--quick: figures are not quotable)");
    }
    let mut variants: Vec<String> = VARIANTS.iter().map(|v| v.to_string()).collect();
    for r in rows {
        if let Some(v) = r["variant"].as_str() {
            if !variants.iter().any(|x| x == v) {
                variants.push(v.to_string());
            }
        }
    }
    let _ = write!(t, "\n{:<16}", "variant");
    for th in THREADS {
        let _ = write!(t, "{:>12}", format!("{th} thr"));
    }
    let _ = writeln!(t);
    for v in &variants {
        let _ = write!(t, "{v:<16}");
        for th in THREADS {
            let c = cell(rows, v, th).map_or("-".to_string(), |m| format!("{m:.2}"));
            let _ = write!(t, "{c:>12}");
        }
        let _ = writeln!(t);
    }
    let _ = writeln!(t, "\nratios");
    for base in ["mutex", "rwlock"] {
        let _ = write!(t, "{:<16}", format!("strobe/{base}"));
        for th in THREADS {
            let r = cell(rows, "strobe", th).zip(cell(rows, base, th)).map(|(a, b)| a / b);
            let _ = write!(t, "{:>12}", r.map_or("-".into(), |r| format!("{r:.1}x")));
        }
        let _ = writeln!(t);
    }
    for (v, label) in [("strobe-churn", "churn/strobe"), ("strobe-churn-exp", "churn-exp/strobe")] {
        let _ = write!(t, "{label:<16}");
        for th in THREADS {
            let r = cell(rows, v, th).zip(cell(rows, "strobe", th)).map(|(a, b)| a / b);
            let _ = write!(t, "{:>12}", r.map_or("-".into(), |r| format!("{:.2}", r)));
        }
        let _ = writeln!(t);
    }
    for (v, label) in [("strobe-churn", "detach/s"), ("strobe-churn-exp", "detach/s (exp)")] {
        let _ = write!(t, "{label:<16}");
        for th in THREADS {
            let r = churn.iter().find(|(x, n, _)| *x == v && *n == th).map(|(_, _, r)| *r);
            let _ = write!(t, "{:>12}", r.map_or("-".into(), |r| format!("{r:.0}")));
        }
        let _ = writeln!(t);
    }

    let _ = writeln!(t, "\ngoals");
    let mark = |ok: Option<bool>| match ok {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "not measured",
    };
    let s1 = cell(rows, "strobe", 1);
    let d1 = cell(rows, "disabled", 1);
    let u1 = cell(rows, "uprobe", 1);
    let _ = writeln!(
        t,
        "  strobe >= 200 M/s on 1 thread (5 ns):         {:<13} {}",
        mark(s1.map(|s| s >= 200.0)),
        s1.map_or("-".into(), |s| format!("{s:.1} M/s = {:.2} ns", 1e3 / s))
    );
    let _ = writeln!(
        t,
        "  strobe 2 threads >= 1.9x 1 thread:            {:<13} {}",
        mark(scaling.strobe.map(|r| r >= 1.9)),
        scaling.strobe.map_or("-".into(), |r| format!(
            "{r:.2}x (median of {} paired rounds)",
            scaling.rounds
        ))
    );
    if let Some(p) = scaling.private {
        let _ = writeln!(
            t,
            "    reference: strobe-private, the same trigger path sharing nothing, scaled {p:.2}x"
        );
    }
    let _ = writeln!(
        t,
        "  disabled < 1 ns per probe point:              {:<13} {}",
        mark(d1.map(|d| 1e3 / d < 1.0)),
        d1.map_or("-".into(), |d| format!("{:.3} ns", 1e3 / d))
    );
    let _ = writeln!(
        t,
        "  strobe >= 100x uprobe (1 thread):             {:<13} {}",
        mark(s1.zip(u1).map(|(s, u)| s >= 100.0 * u)),
        s1.zip(u1)
            .map_or("uprobe rows not in this build".into(), |(s, u)| format!("{:.0}x", s / u))
    );
    let worst = THREADS
        .iter()
        .filter_map(|&th| {
            cell(rows, "strobe-churn", th).zip(cell(rows, "strobe", th)).map(|(c, s)| (th, c / s))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1));
    let _ = writeln!(
        t,
        "  strobe-churn within 20% of strobe (worst):    {:<13} {}",
        mark(worst.map(|(_, r)| r >= 0.8)),
        worst.map_or("-".into(), |(th, r)| format!("{:.2} at {th} thr", r))
    );
    // `disabled` and `strobe-private` share nothing between threads, so
    // their 2-thread/1-thread ratios are the parallelism the machine gave
    // this run: near 2 on an idle 2-CPU machine, lower when other processes
    // (or, in a VM, the host's other work) hold a CPU. They differ when the
    // two vCPUs are hyperthreads of one host core, which a tiny loop shares
    // better than the trigger path; `strobe-private` is then the bound of
    // `strobe`'s scaling.
    let par = scaling.disabled;
    let _ = writeln!(
        t,
        "\nparallelism available (2 thr / 1 thr, paired): disabled {}, strobe-private {}; \
         load average at the end: {}",
        par.map_or("-".into(), |p| format!("{p:.2}x")),
        scaling.private.map_or("-".into(), |p| format!("{p:.2}x")),
        std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|l| l.split_whitespace().next().map(str::to_string))
            .unwrap_or_else(|| "-".into())
    );
    if par.is_some_and(|p| p < 1.6) {
        let _ = writeln!(
            t,
            "  the machine gave 2 threads less than 1.6 CPUs (other processes, or a VM host's \
             other work): 2-thread figures are bounded by that; re-measure when it is idle"
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_run_has_every_row_and_the_goals() {
        let opts = BenchOpts { quick: true, repeats: 1, strobe_exe: None };
        let r = run(&opts).unwrap();
        for v in VARIANTS {
            for th in THREADS {
                let m = cell(&r.rows, v, th).unwrap_or_else(|| panic!("no row {v}/{th}"));
                assert!(m > 0.0, "{v}/{th} measured nothing");
            }
        }
        eprintln!("{}", r.text);
        assert!(r.text.contains("goals"));
        let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(json["rows"][0]["variant"], "mutex");
        assert!(json["rows"][0]["mtrig_per_s"].is_number());
    }
}
