//! The Firefox Profiler's processed-profile format (what samply writes, through the same
//! `fxprof-processed-profile` crate): open the JSON at profiler.firefox.com ("Load a
//! profile from file"), or with `samply load FILE`.
//!
//! From the report's [`Timeline`](crate::Timeline):
//!
//! - a process per recorded process and a thread per thread (named when the recording
//!   has the name);
//! - every time sample at its time, with its call path (function names, outermost
//!   first) and its CPU delta (the thread's task-clock since its previous sample);
//! - per process, a counter track per recorded non-leader counter (page-faults,
//!   context-switches, cycles, ...): each window's delta at the window's end, net of the
//!   sampler's baseline. The Profiler draws them under the threads' tracks, so a burst of
//!   faults lines up with the code that ran.
//!
//! Owns: the mapping to the Profiler's model. Must never symbolize: names come from the
//! report's functions.

use std::io::Write;

use fxprof_processed_profile::{
    CategoryColor, CategoryPairHandle, CpuDelta, FrameFlags, FrameInfo, Profile,
    ReferenceTimestamp, SamplingInterval, StackHandle, ThreadHandle, Timestamp,
};
use rustc_hash::FxHashMap;

use crate::report::Report;
use crate::ReportError;

/// Where the recording's clock starts, so the Profiler shows wall-clock times.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClockStart {
    /// Unix time at the start, ns.
    pub unix_ns: u64,
    /// The monotonic clock (the samples' clock) at the same moment, ns.
    pub mono_ns: u64,
}

fn no_timeline() -> ReportError {
    ReportError::write(
        "the Firefox profile",
        std::io::Error::other(
            "the report was built without a time line (Aggregator::keep_timeline)",
        ),
    )
}

/// Builds the Firefox profile of `report` (which must carry a time line).
pub fn profile(report: &Report, start: Option<ClockStart>) -> Result<Profile, ReportError> {
    let tl = report.timeline.as_ref().ok_or_else(no_timeline)?;
    let t0 = tl
        .samples
        .iter()
        .map(|s| s.time)
        .chain(tl.windows.iter().map(|w| w.time))
        .min()
        .unwrap_or(0);
    let reference = match start {
        Some(c) => {
            let unix_at_t0 = c.unix_ns as i128 + (t0 as i128 - c.mono_ns as i128);
            ReferenceTimestamp::from_millis_since_unix_epoch(unix_at_t0.max(0) as f64 / 1e6)
        }
        None => ReferenceTimestamp::from_millis_since_unix_epoch(0.0),
    };
    let interval = crate::pprof::sample_ns(report).unwrap_or(1e6).round().max(1.0) as u64;
    let product = match report.info.command.first() {
        Some(c) => format!("strobe: {}", report.info.command.join(" ").replace(c, base(c))),
        None => "strobe".to_string(),
    };
    let mut p = Profile::new(&product, reference, SamplingInterval::from_nanos(interval));
    p.set_symbolicated(true);
    let user: CategoryPairHandle = p.add_category("User", CategoryColor::Yellow).into();
    let ts = |t: u64| Timestamp::from_nanos_since_reference(t.saturating_sub(t0));

    // Processes and threads.
    let mut processes = FxHashMap::default();
    let mut threads: Vec<ThreadHandle> = Vec::with_capacity(tl.threads.len());
    let name = report.info.command.first().map_or("process", |c| base(c)).to_string();
    for (i, th) in tl.threads.iter().enumerate() {
        let first = tl
            .samples
            .iter()
            .find(|s| s.thread as usize == i)
            .map_or(Timestamp::from_nanos_since_reference(0), |s| ts(s.time));
        let proc = *processes.entry(th.pid).or_insert_with(|| p.add_process(&name, th.pid, first));
        let h = p.add_thread(proc, th.tid, first, th.tid == th.pid);
        let label = match &th.name {
            Some(n) => n.clone(),
            None => format!("thread {}", th.tid),
        };
        p.set_thread_name(h, &label);
        threads.push(h);
    }

    // Samples, each path's stack interned once per thread.
    let mut stacks: FxHashMap<(u32, u32), Option<StackHandle>> = FxHashMap::default();
    let mut names = Vec::with_capacity(report.functions.len());
    for f in &report.functions {
        names.push(p.intern_string(&f.function));
    }
    let leader_time = report.leader_is_time();
    for s in &tl.samples {
        let Some(&thread) = threads.get(s.thread as usize) else { continue };
        let stack = *stacks.entry((s.thread, s.path)).or_insert_with(|| {
            let frames = report.paths.get(s.path as usize).map_or(&[][..], |p| &p.frames[..]);
            let infos: Vec<FrameInfo> = frames
                .iter()
                .filter_map(|&f| names.get(f))
                .map(|&n| FrameInfo {
                    frame: fxprof_processed_profile::Frame::Label(n),
                    category_pair: user,
                    flags: FrameFlags::empty(),
                })
                .collect();
            p.intern_stack_frames(thread, infos.into_iter())
        });
        let cpu = if leader_time { CpuDelta::from_nanos(s.leader_delta) } else { CpuDelta::ZERO };
        p.add_sample(thread, ts(s.time), stack, cpu, 1);
    }

    // Counter tracks: every non-leader counter's window deltas, per process.
    let mut counters = FxHashMap::default();
    for w in &tl.windows {
        let Some(th) = tl.threads.get(w.thread as usize) else { continue };
        let Some(&proc) = processes.get(&th.pid) else { continue };
        for (k, &d) in w.deltas.iter().enumerate().skip(1) {
            let counter = *counters.entry((th.pid, k)).or_insert_with(|| {
                let event = report.info.events.get(k).map_or("counter", String::as_str);
                p.add_counter(
                    proc,
                    event,
                    "strobe windows",
                    &format!("{event} counted in each sample window (net of the sampler's own)"),
                )
            });
            p.add_counter_sample(counter, ts(w.time), d, 1);
        }
    }
    Ok(p)
}

fn base(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Writes `report` as a Firefox Profiler JSON file to `out`.
pub fn write<W: Write>(
    report: &Report,
    start: Option<ClockStart>,
    out: W,
) -> Result<(), ReportError> {
    let p = profile(report, start)?;
    let mut w = std::io::BufWriter::new(out);
    serde_json::to_writer(&mut w, &p)
        .map_err(|e| ReportError::write("the Firefox profile", e.into()))?;
    w.flush().map_err(|e| ReportError::write("the Firefox profile", e))
}
