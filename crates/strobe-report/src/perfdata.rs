//! The adapter from a Linux perf perf.data file (crate strobe-perfdata) to the engine's
//! input, so `strobe report FILE.data` gives strobe's report on what `perf record` wrote.
//! Like [`crate::recording`] it is thin: one pass over the records in `perf report`'s
//! order, mapped onto [`Aggregator`] calls, never holding the samples.
//!
//! - **Which samples.** One event's samples make the report: `--event NAME` (matched with
//!   or without a `:u`-style modifier; a group member stands for its group), otherwise
//!   the first event that samples (not perf's `dummy`). The other events in the file are
//!   named in the report's `source:` line.
//! - **Values.** A leader-sampling group (`-e '{a,b}:S'`, PERF_SAMPLE_READ with
//!   PERF_FORMAT_GROUP) gives each sample the group's counter values, leader first, named
//!   by their ids; any other event gives its period as its only value. Every sample is a
//!   [`SampleKind::Plain`] time sample.
//! - **Address spaces.** MMAP/MMAP2 records of code add mappings to their process; an
//!   exec (COMM with COMM_EXEC) starts a new address space; a new process (FORK with a
//!   new pid) starts with a copy of its parent's mappings, as the kernel gives it.
//! - **Kernel samples** land in one pseudo mapping, `[kernel]`, over the upper half of the
//!   address space (where every 64-bit Linux puts the kernel): they are reported as one
//!   row, `[unknown in [kernel]]`, until the engine can symbolize with /proc/kallsyms.
//! - **The vDSO** has no file: perf keeps a copy of it in its build-id cache
//!   (`$PERF_BUILDID_DIR`, else `~/.debug`, as `[vdso]/BUILD_ID/vdso`), which names its
//!   functions here as it does for `perf report`.
//! - **Callchains** are decoded (strobe-perfdata) and reach [`Feed::sample`], which does
//!   not pass them on yet: the engine has no stack model. That function is the seam.
//! - **Lost** records (LOST, LOST_SAMPLES) are counted per thread of their trailer.
//! - A file cut short reports everything before the cut, with the cut's byte offset;
//!   other damage is an error naming the file and the offset.
//!
//! This module must never interpret samples beyond choosing them: attribution is the
//! engine's.

use std::path::Path;
use std::time::Instant;

use rustc_hash::FxHashMap;
use strobe_perfdata::abi::{FORMAT_GROUP, FORMAT_ID, SAMPLE_READ};
use strobe_perfdata::{
    CpuMode, Error as PerfError, Event, PerfData, PerfFile, Sample as PerfSample,
};

use crate::input::{Mapping, RecordInfo, Sample, SampleKind};
use crate::recording::Loaded;
use crate::{Aggregator, ReportError, WindowPolicy, MAX_COUNTERS};

/// Options of a perf.data report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PerfDataOptions {
    /// The event whose samples make the report (`task-clock:u`, or `task-clock`); the
    /// first sampling event when `None`.
    pub event: Option<String>,
}

/// The process key under which the kernel's pseudo mapping is added (perf's pid -1).
const KERNEL_PID: u32 = u32::MAX;
/// Where the kernel half of a 64-bit address space starts.
const KERNEL_START: u64 = 1 << 63;
/// The kernel's module name in reports.
pub const KERNEL_MODULE: &str = "[kernel]";

/// Reads the perf.data file at `path` and builds its report under `policy`.
pub fn read(
    path: &Path,
    policy: WindowPolicy,
    opts: &PerfDataOptions,
) -> Result<Loaded, ReportError> {
    let err = |e: PerfError| ReportError::PerfData { file: path.display().to_string(), error: e };
    let file = PerfFile::open(path).map_err(err)?;
    let data = file.parse().map_err(err)?;
    load(&data, policy, opts).map_err(|e| match e {
        ReportError::PerfData { error, .. } => err(error),
        other => other,
    })
}

/// Builds the report of a parsed perf.data (errors name no file: [`read`] adds it).
pub fn load(
    data: &PerfData<'_>,
    policy: WindowPolicy,
    opts: &PerfDataOptions,
) -> Result<Loaded, ReportError> {
    let chosen = choose_event(data, opts.event.as_deref())?;
    let attr = data.attrs().get(chosen).map(|a| a.attr).unwrap_or_default();
    let group = attr.sample_type & SAMPLE_READ != 0 && attr.read_format & FORMAT_GROUP != 0;
    let events = counter_names(data, chosen, group);
    let info = RecordInfo {
        events,
        period: attr.sample_period().unwrap_or(0),
        window: 0,
        jitter: 0,
        command: data.info().command.clone(),
        source: Some(source_line(data, chosen, group)),
    };
    let mut feed = Feed::new(Aggregator::new(info)?, group);
    if let Some(bytes) = cached_vdso(data) {
        feed.agg.spaces.add_image("[vdso]".into(), bytes);
    }
    let mut notes = Vec::new();
    if data.data_size_unknown() {
        notes.push(
            "warning: the perf.data header has no data size (perf record did not finish); \
             read the records up to the end of the file"
                .to_string(),
        );
    }
    let mut truncated_at = data.truncated_at();
    for record in data.ordered() {
        let r = match record {
            Ok(r) => r,
            Err(PerfError::Truncated { offset, .. }) => {
                truncated_at = Some(offset);
                break;
            }
            Err(e) => return Err(ReportError::PerfData { file: String::new(), error: e }),
        };
        match &r.event {
            Event::Sample(s) => {
                feed.samples_read += 1;
                if r.attr == Some(chosen) {
                    feed.sample(s, r.cpumode());
                } else if r.attr.is_none() {
                    feed.unknown_id += 1;
                }
            }
            Event::Mmap(m) if m.is_exec() && m.pid != KERNEL_PID => {
                let mapping = Mapping {
                    start: m.addr,
                    end: m.addr.saturating_add(m.len),
                    offset: m.pgoff,
                    path: m.path().into_owned(),
                };
                feed.mapping(m.pid, mapping);
            }
            Event::Comm(c) if c.exec => feed.exec(c.pid),
            Event::Fork(t) if t.pid != t.ppid => feed.fork(t.ppid, t.pid),
            Event::Lost { lost, .. } | Event::LostSamples { lost } => {
                let pid = r.sample_id.pid.unwrap_or(0);
                feed.agg.add_lost(pid, r.sample_id.tid.unwrap_or(pid), *lost);
            }
            _ => {}
        }
    }
    if feed.kernel_samples > 0 {
        notes.push(format!(
            "{} kernel samples are reported as one row, [unknown in {KERNEL_MODULE}] (no kernel symbols yet)",
            feed.kernel_samples
        ));
    }
    if feed.unknown_id > 0 {
        notes.push(format!(
            "warning: {} samples carry an event id no event of the file has; they were skipped",
            feed.unknown_id
        ));
    }
    if attr.freq() && feed.period_count > 0 {
        // Frequency mode: the kernel adapts the period; report the mean actually used.
        let mean = feed.period_sum / u128::from(feed.period_count);
        feed.agg.set_sampling(u64::try_from(mean).unwrap_or(u64::MAX), 0, 0);
    }
    let samples_read = feed.samples_read;
    Ok(Loaded { report: feed.agg.finish(policy), truncated_at, notes, samples_read })
}

/// The engine side of the pass: the aggregator and the process facts it needs.
struct Feed {
    agg: Aggregator,
    group: bool,
    /// Each process's code mappings, copied to a forked child.
    maps: FxHashMap<u32, Vec<Mapping>>,
    samples_read: u64,
    kernel_samples: u64,
    unknown_id: u64,
    period_sum: u128,
    period_count: u64,
}

impl Feed {
    fn new(mut agg: Aggregator, group: bool) -> Feed {
        agg.add_mapping(
            KERNEL_PID,
            Mapping { start: KERNEL_START, end: u64::MAX, offset: 0, path: KERNEL_MODULE.into() },
        );
        Feed {
            agg,
            group,
            maps: FxHashMap::default(),
            samples_read: 0,
            kernel_samples: 0,
            unknown_id: 0,
            period_sum: 0,
            period_count: 0,
        }
    }

    fn mapping(&mut self, pid: u32, m: Mapping) {
        self.maps.entry(pid).or_default().push(m.clone());
        self.agg.add_mapping(pid, m);
    }

    fn exec(&mut self, pid: u32) {
        self.maps.remove(&pid);
        self.agg.exec(pid);
    }

    fn fork(&mut self, parent: u32, child: u32) {
        let Some(maps) = self.maps.get(&parent).cloned() else { return };
        // The child starts with a copy of the parent's address space.
        self.agg.exec(child);
        for m in &maps {
            self.agg.add_mapping(child, m.clone());
        }
        self.maps.insert(child, maps);
    }

    /// One sample of the chosen event.
    ///
    /// The seam for stacks: `s.callchain()` ([`strobe_perfdata::Callchain::frames`] gives each address
    /// with its PERF_CONTEXT_*) is available here and not passed on, as the engine has
    /// no stack model yet; when it has, this is where the frames are handed over.
    fn sample(&mut self, s: &PerfSample<'_>, mode: CpuMode) {
        // Seam: `s.callchain()` goes to the engine here once it models stacks.
        let pid = s.pid().unwrap_or(0);
        let mut values = [0u64; MAX_COUNTERS];
        let n = match (self.group, s.read()) {
            (true, Some(read)) => {
                let mut n = 0;
                for (slot, v) in values.iter_mut().zip(read.iter()) {
                    *slot = v.value;
                    n += 1;
                }
                n
            }
            _ => {
                let period = s.period();
                let period_value = period.unwrap_or(0);
                values[0] = period_value;
                if period.is_some() {
                    self.period_sum += u128::from(period_value);
                    self.period_count += 1;
                }
                1
            }
        };
        if matches!(mode, CpuMode::Kernel | CpuMode::GuestKernel) {
            self.kernel_samples += 1;
        }
        self.agg.push(&Sample {
            pid,
            tid: s.tid().unwrap_or(pid),
            time: s.time().unwrap_or(0),
            ip: s.ip().unwrap_or(0),
            kind: SampleKind::Plain,
            values: values.get(..n).unwrap_or(&values),
        });
    }
}

/// The vDSO image perf cached for this recording, if its build-id cache has it.
fn cached_vdso(data: &PerfData<'_>) -> Option<Vec<u8>> {
    let id = data.info().build_ids.iter().find(|b| b.path == "[vdso]")?;
    let dir = match std::env::var_os("PERF_BUILDID_DIR") {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::PathBuf::from(std::env::var_os("HOME")?).join(".debug"),
    };
    let bytes = std::fs::read(dir.join("[vdso]").join(id.hex()).join("vdso")).ok()?;
    bytes.starts_with(b"\x7fELF").then_some(bytes)
}

/// `name` without its modifiers or terms (`task-clock:u` and `task-clock/period=9/u`
/// -> `task-clock`).
fn base_name(name: &str) -> &str {
    name.split([':', '/']).next().unwrap_or(name)
}

/// The attr whose samples make the report.
fn choose_event(data: &PerfData<'_>, want: Option<&str>) -> Result<usize, ReportError> {
    let attrs = data.attrs();
    let Some(want) = want else {
        let first = attrs.iter().position(|a| a.attr.samples() && !a.attr.is_dummy());
        return Ok(first.unwrap_or(0));
    };
    let found = attrs
        .iter()
        .position(|a| a.name == want)
        .or_else(|| attrs.iter().position(|a| base_name(&a.name) == base_name(want)));
    let Some(i) = found else {
        let names: Vec<&str> =
            attrs.iter().filter(|a| !a.attr.is_dummy()).map(|a| a.name.as_str()).collect();
        return Err(ReportError::UnknownEvent {
            event: want.to_string(),
            choices: names.join(", "),
        });
    };
    if attrs.get(i).is_some_and(|a| a.attr.samples()) {
        return Ok(i);
    }
    // A member read by its leader: the report is the group's.
    let leader = data
        .info()
        .groups
        .iter()
        .find(|g| (g.leader..g.leader + g.members).contains(&i))
        .map(|g| g.leader);
    Ok(leader.unwrap_or(i))
}

/// The counters of the chosen event's samples, in value order.
fn counter_names(data: &PerfData<'_>, chosen: usize, group: bool) -> Vec<String> {
    let attrs = data.attrs();
    let name_of = |i: usize| attrs.get(i).map_or_else(|| format!("event {i}"), |a| a.name.clone());
    if !group {
        return vec![name_of(chosen)];
    }
    // The first sample's read ids name the members, in the order the kernel reads them.
    let ids_of_first = data.records().find_map(|r| match r {
        Ok(r) if r.attr == Some(chosen) => match r.event {
            Event::Sample(s) => s.read(),
            _ => None,
        },
        Ok(_) => None,
        Err(_) => None,
    });
    if let Some(read) = ids_of_first {
        if attrs.get(chosen).is_some_and(|a| a.attr.read_format & FORMAT_ID != 0) {
            return read
                .iter()
                .enumerate()
                .map(|(k, v)| {
                    v.id.and_then(|id| data.attr_of_id(id))
                        .map_or_else(|| format!("counter {k}"), name_of)
                })
                .collect();
        }
    }
    match data.info().groups.iter().find(|g| g.leader == chosen) {
        Some(g) => (g.leader..g.leader + g.members).map(name_of).collect(),
        None => vec![name_of(chosen)],
    }
}

/// The report header's `source:` line: where the samples come from.
fn source_line(data: &PerfData<'_>, chosen: usize, group: bool) -> String {
    let attrs = data.attrs();
    let name = attrs.get(chosen).map_or("?", |a| a.name.as_str());
    let perf =
        data.info().perf_version.as_deref().map_or_else(String::new, |v| format!(" by perf {v}"));
    let pipe = if data.is_pipe() { " (pipe mode)" } else { "" };
    let mut line = format!("perf.data{perf}{pipe}; time shares from the samples of {name}");
    if let Some(a) = attrs.get(chosen) {
        if a.attr.freq() {
            line.push_str(&format!(
                " (-F {} Hz: period shown is the mean)",
                a.attr.sample_period_or_freq
            ));
        }
    }
    if group {
        line.push_str(", group counters read at each sample");
    }
    let in_group = |i: usize| {
        data.info()
            .groups
            .iter()
            .any(|g| g.leader == chosen && (g.leader..g.leader + g.members).contains(&i))
    };
    let others: Vec<&str> = attrs
        .iter()
        .enumerate()
        .filter(|&(i, a)| i != chosen && !a.attr.is_dummy() && a.attr.samples() && !in_group(i))
        .map(|(_, a)| a.name.as_str())
        .collect();
    if !others.is_empty() {
        line.push_str(&format!("; also in the file: {} (choose with --event)", others.join(", ")));
    }
    line
}

/// One measurement of [`read`] on a perf.data file.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerfDataThroughput {
    /// SAMPLE records read (of every event in the file).
    pub samples: u64,
    /// Seconds for the whole report: map, parse, order, aggregate, symbolize, fold.
    pub seconds: f64,
    /// The file's size in bytes.
    pub bytes: u64,
}

impl PerfDataThroughput {
    /// Samples per second, end to end.
    pub fn samples_per_s(&self) -> f64 {
        self.samples as f64 / self.seconds.max(1e-9)
    }
}

/// Times [`read`] on the perf.data file at `path` (end to end, as `strobe report`
/// spends it before rendering), for comparison with `perf report --stdio` on the same
/// file.
pub fn measure(path: &Path, opts: &PerfDataOptions) -> Result<PerfDataThroughput, ReportError> {
    let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let t0 = Instant::now();
    let loaded = read(path, WindowPolicy::Discard, opts)?;
    let seconds = t0.elapsed().as_secs_f64();
    std::hint::black_box(&loaded.report);
    Ok(PerfDataThroughput { samples: loaded.samples_read, seconds, bytes })
}
