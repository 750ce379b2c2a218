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
//!   address space (where every 64-bit Linux puts the kernel). When the file was recorded
//!   on the running kernel (its `[kernel.kallsyms]` build id is this kernel's) and
//!   `/proc/kallsyms` shows addresses, they are named from it, as `perf report` names
//!   them; otherwise they are one row, `[unknown in [kernel]]`.
//! - **The vDSO** has no file: perf keeps a copy of it in its build-id cache
//!   (`$PERF_BUILDID_DIR`, else `~/.debug`, as `[vdso]/BUILD_ID/vdso`), which names its
//!   functions here as it does for `perf report`.
//! - **Callchains** are decoded (strobe-perfdata) and reach `Feed::sample`, which does
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
use strobe_perfdata::abi::{FORMAT_GROUP, FORMAT_ID, RECORD_SAMPLE, SAMPLE_READ};
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
    /// How addresses are named.
    pub symbols: crate::SymbolOptions,
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
    let mut agg = Aggregator::new(info)?;
    agg.set_symbol_options(opts.symbols.clone());
    if !group {
        // Without a group read a sample carries its period, not counter readings.
        agg.values_are_periods();
    }
    let mut feed = Feed::new(agg, group);
    // The kernel formats /proc/kallsyms on each read, which takes longer than the rest of
    // a report of a few hundred thousand samples: read it meanwhile, on another thread,
    // when the event can sample the kernel and the file was recorded here.
    let kallsyms =
        (opts.symbols.kallsyms.is_none() && !attr.exclude_kernel() && recorded_here(data).is_ok())
            .then(|| std::thread::spawn(strobe_target::kallsyms::read_text));
    if let Some(bytes) = cached_vdso(data) {
        feed.agg.add_image("[vdso]".into(), bytes);
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
                }
            }
            Event::Other(_) if r.kind == RECORD_SAMPLE => {
                // A sample whose event id names no attr of the file.
                feed.samples_read += 1;
                feed.unknown_id += 1;
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
    if feed.kernel_samples > 0 || feed.kernel_frames {
        match kernel_symbols(data, opts.symbols.kallsyms.as_deref(), kallsyms) {
            Ok(KernelTable::Parsed(table)) => feed.agg.set_kallsyms(table),
            Ok(KernelTable::Text(text)) => feed.agg.set_kallsyms_text(text),
            Err(why) if feed.kernel_samples > 0 => notes.push(format!(
                "{} kernel samples are reported as one row, [unknown in {KERNEL_MODULE}] ({why})",
                feed.kernel_samples
            )),
            Err(_) => {}
        }
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
    // perf's sample clock has no wall-clock anchor in every file: views that show wall
    // time count from the recording's first sample.
    let clock = crate::firefox::ClockStart { unix_ns: 0, mono_ns: feed.first_time.unwrap_or(0) };
    Ok(Loaded { report: feed.agg.finish(policy), truncated_at, notes, samples_read, clock })
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
    /// Scratch for one sample's call chain.
    frames: Vec<u64>,
    /// The first sample's time.
    first_time: Option<u64>,
    /// A call chain held a kernel frame.
    kernel_frames: bool,
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
            frames: Vec::new(),
            first_time: None,
            kernel_frames: false,
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

    /// One sample of the chosen event. Its call chain, when recorded (`perf record -g`),
    /// becomes the sample's stack: the chain's first address is the sample's own IP and
    /// the rest are return addresses, innermost first (kernel frames before user ones,
    /// as the kernel writes them).
    fn sample(&mut self, s: &PerfSample<'_>, mode: CpuMode) {
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
        let ip = s.ip().unwrap_or(0);
        if let Some(t) = s.time() {
            self.first_time.get_or_insert(t);
        }
        let stack = match s.callchain() {
            Some(chain) => {
                self.frames.clear();
                self.frames.extend(chain.frames().map(|(_, addr)| addr));
                self.kernel_frames |= self.frames.iter().any(|&a| a >= KERNEL_START);
                // The chain starts at the sampled address itself.
                let callers = match self.frames.first() {
                    Some(&first) if first == ip => &self.frames[1..],
                    _ => &self.frames[..],
                };
                if callers.is_empty() {
                    0
                } else {
                    self.agg.intern_stack(pid, callers)
                }
            }
            None => 0,
        };
        self.agg.push(&Sample {
            pid,
            tid: s.tid().unwrap_or(pid),
            time: s.time().unwrap_or(0),
            ip,
            kind: SampleKind::Plain,
            stack,
            values: values.get(..n).unwrap_or(&values),
        });
    }
}

/// Where kernel names come from.
enum KernelTable {
    /// A table given by the user (`--kallsyms`), parsed whole.
    Parsed(strobe_target::kallsyms::Kallsyms),
    /// The running kernel's `/proc/kallsyms` text, parsed for the addresses needed.
    Text(String),
}

/// The kernel's symbols: from `kallsyms` when given (a copy the user vouches for), else
/// the running kernel's (read by `reading`, when it was started), if the file was recorded
/// on this kernel and `/proc/kallsyms` shows addresses; otherwise why not.
fn kernel_symbols(
    data: &PerfData<'_>,
    kallsyms: Option<&Path>,
    reading: Option<std::thread::JoinHandle<Option<String>>>,
) -> Result<KernelTable, &'static str> {
    if let Some(file) = kallsyms {
        let text = std::fs::read_to_string(file)
            .map_err(|_| "the kernel symbol file given is unreadable")?;
        return strobe_target::kallsyms::Kallsyms::parse(&text)
            .map(KernelTable::Parsed)
            .ok_or("the kernel symbol file given lists no text symbol with an address");
    }
    recorded_here(data)?;
    let text = match reading {
        Some(thread) => thread.join().ok().flatten(),
        None => strobe_target::kallsyms::read_text(),
    };
    let hidden = "/proc/kallsyms hides addresses here (kernel.kptr_restrict)";
    let text = text.ok_or(hidden)?;
    // Hidden addresses read as zeros.
    let shows = text.lines().next().is_some_and(|l| !l.starts_with("0000000000000000"));
    shows.then_some(KernelTable::Text(text)).ok_or(hidden)
}

/// Whether the file was recorded on the running kernel: the build id perf saved for
/// `[kernel.kallsyms]` is the running kernel's.
fn recorded_here(data: &PerfData<'_>) -> Result<(), &'static str> {
    let recorded = data
        .info()
        .build_ids
        .iter()
        .find(|b| b.path == "[kernel.kallsyms]")
        .ok_or("the file has no build id for the kernel")?;
    let running = strobe_target::kallsyms::running_build_id()
        .ok_or("this kernel's build id is unreadable")?;
    // perf pads build ids to 20 bytes.
    let n = running.len().min(recorded.id.len());
    if recorded.id.get(..n) != running.get(..n) {
        return Err("it was recorded on another kernel");
    }
    Ok(())
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
        line.push_str(&format!(
            "; also in the file: {} (choose one by its event name)",
            others.join(", ")
        ));
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

#[cfg(test)]
mod tests {
    //! The adapter on a perf.data built here, record by record, whose IPs are functions
    //! of this test binary mapped as /proc/self/maps says: the parts real perf files
    //! rarely show (lost records, frequency mode, kernel samples, an unknown event id)
    //! checked exactly. Files from the real perf are tested in crates/strobe/tests/it.

    use super::*;
    use strobe_perfdata::abi::*;

    #[inline(never)]
    #[no_mangle]
    pub(super) extern "C" fn strobe_perfdata_test_hot(n: u64) -> u64 {
        (0..n).fold(n, |a, i| (a ^ (a >> 3)).wrapping_mul(0x9e37_79b9) ^ i)
    }

    #[inline(never)]
    #[no_mangle]
    pub(super) extern "C" fn strobe_perfdata_test_cold(n: u64) -> u64 {
        (0..n).fold(n, |a, i| (a ^ (a >> 5)).wrapping_mul(0x85eb_ca6b) ^ i)
    }

    fn ip(f: extern "C" fn(u64) -> u64) -> u64 {
        std::hint::black_box(f(3));
        f as usize as u64 + 2
    }

    const PID: u32 = 300;
    const ID_CLOCK: u64 = 11;
    const ID_FAULTS: u64 = 12;
    const SAMPLE_TYPE: u64 = SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ID | SAMPLE_PERIOD;

    fn attr(config: u64, period_or_freq: u64, freq: bool) -> Vec<u8> {
        let mut a = vec![0u8; 128];
        a[0..4].copy_from_slice(&TYPE_SOFTWARE.to_le_bytes());
        a[4..8].copy_from_slice(&128u32.to_le_bytes());
        a[8..16].copy_from_slice(&config.to_le_bytes());
        a[16..24].copy_from_slice(&period_or_freq.to_le_bytes());
        a[24..32].copy_from_slice(&SAMPLE_TYPE.to_le_bytes());
        a[32..40].copy_from_slice(&FORMAT_ID.to_le_bytes());
        let flags = ATTR_SAMPLE_ID_ALL | ATTR_EXCLUDE_KERNEL | if freq { ATTR_FREQ } else { 0 };
        a[40..48].copy_from_slice(&flags.to_le_bytes());
        a
    }

    fn words(w: &[u64]) -> Vec<u8> {
        w.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn record(kind: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let mut r = kind.to_le_bytes().to_vec();
        r.extend(misc.to_le_bytes());
        r.extend(((8 + body.len()) as u16).to_le_bytes());
        r.extend(body);
        r
    }

    fn pid_tid(pid: u32, tid: u32) -> u64 {
        u64::from(pid) | (u64::from(tid) << 32)
    }

    /// TID, TIME, ID: the trailer of SAMPLE_TYPE.
    fn trailer(pid: u32, time: u64, id: u64) -> Vec<u8> {
        words(&[pid_tid(pid, pid), time, id])
    }

    fn sample(misc: u16, id: u64, time: u64, ip: u64, period: u64) -> Vec<u8> {
        record(RECORD_SAMPLE, misc, &words(&[ip, pid_tid(PID, PID), time, id, period]))
    }

    fn padded(s: &str) -> Vec<u8> {
        let mut b = s.as_bytes().to_vec();
        b.resize((s.len() + 8) / 8 * 8, 0);
        b
    }

    /// A file-mode perf.data: two attrs (task-clock:u, page-faults:u), EVENT_DESC.
    fn perf_data(clock_freq: bool, records: &[Vec<u8>]) -> Vec<u8> {
        let attrs = [
            (attr(1, if clock_freq { 4000 } else { 1000 }, clock_freq), ID_CLOCK, "task-clock:u"),
            (attr(2, 1, false), ID_FAULTS, "page-faults:u"),
        ];
        let data: Vec<u8> = records.concat();
        let attrs_at = 104u64;
        let ids_at = attrs_at + 2 * 144;
        let data_at = ids_at + 16;
        let mut f = b"PERFILE2".to_vec();
        f.extend(words(&[104, 144, attrs_at, 2 * 144, data_at, data.len() as u64, 0, 0]));
        f.extend(words(&[1 << FEAT_EVENT_DESC, 0, 0, 0]));
        for (k, (a, _, _)) in attrs.iter().enumerate() {
            f.extend(a);
            f.extend(words(&[ids_at + 8 * k as u64, 8]));
        }
        f.extend(words(&[ID_CLOCK, ID_FAULTS]));
        f.extend(&data);
        let mut desc = 2u32.to_le_bytes().to_vec();
        desc.extend(128u32.to_le_bytes());
        for (a, id, name) in &attrs {
            desc.extend(a);
            desc.extend(1u32.to_le_bytes());
            desc.extend(64u32.to_le_bytes());
            let mut n = name.as_bytes().to_vec();
            n.resize(64, 0);
            desc.extend(n);
            desc.extend(id.to_le_bytes());
        }
        let desc_at = f.len() as u64 + 16;
        f.extend(words(&[desc_at, desc.len() as u64]));
        f.extend(desc);
        f
    }

    /// COMM exec and the MMAP2 records of this test binary's code, for PID.
    fn process_records() -> Vec<Vec<u8>> {
        let exe = std::fs::read_link("/proc/self/exe").unwrap().to_string_lossy().into_owned();
        let maps =
            crate::input::parse_proc_maps(&std::fs::read_to_string("/proc/self/maps").unwrap());
        let mut out = vec![];
        let mut comm = words(&[pid_tid(PID, PID)]);
        comm.extend(padded("prog"));
        comm.extend(trailer(PID, 1, ID_CLOCK));
        out.push(record(RECORD_COMM, MISC_COMM_EXEC, &comm));
        for m in maps.iter().filter(|m| m.path == exe) {
            let mut b = words(&[pid_tid(PID, PID), m.start, m.end - m.start, m.offset, 0, 0, 0]);
            b.extend(5u32.to_le_bytes()); // PROT_READ | PROT_EXEC
            b.extend(2u32.to_le_bytes());
            b.extend(padded(&m.path));
            b.extend(trailer(PID, 2, ID_CLOCK));
            out.push(record(RECORD_MMAP2, 2, &b));
        }
        out
    }

    fn report(bytes: &[u8], event: Option<&str>) -> Result<Loaded, ReportError> {
        let data = PerfData::parse(bytes)
            .map_err(|e| ReportError::PerfData { file: String::new(), error: e })?;
        let opts = PerfDataOptions { event: event.map(str::to_string), ..Default::default() };
        load(&data, WindowPolicy::Discard, &opts)
    }

    fn samples(l: &Loaded, f: &str) -> u64 {
        l.report.function(f).map_or(0, |f| f.samples)
    }

    #[test]
    fn samples_lost_records_kernel_and_unknown_ids() {
        let (hot, cold) = (ip(strobe_perfdata_test_hot), ip(strobe_perfdata_test_cold));
        let user = 2; // PERF_RECORD_MISC_USER
        let mut recs = process_records();
        for t in 0..6 {
            recs.push(sample(user, ID_CLOCK, 10 + t, hot, 1000));
        }
        recs.push(sample(user, ID_CLOCK, 20, cold, 1000));
        recs.push(sample(user, ID_FAULTS, 21, cold, 1));
        recs.push(sample(1, ID_CLOCK, 22, 0xffff_ffff_8100_0000, 1000)); // kernel
        recs.push(sample(user, 99, 23, hot, 1000)); // no such event id
        let mut lost = words(&[ID_CLOCK, 7]);
        lost.extend(trailer(PID, 24, ID_CLOCK));
        recs.push(record(RECORD_LOST, 0, &lost));
        let mut lost = words(&[3]);
        lost.extend(trailer(PID, 25, ID_CLOCK));
        recs.push(record(RECORD_LOST_SAMPLES, 0, &lost));
        recs.push(record(RECORD_FINISHED_ROUND, 0, &[]));
        let bytes = perf_data(false, &recs);

        let l = report(&bytes, None).unwrap();
        let r = &l.report;
        assert_eq!(r.info.events, ["task-clock:u"]);
        assert_eq!(r.info.period, 1000);
        assert_eq!(
            (samples(&l, "strobe_perfdata_test_hot"), samples(&l, "strobe_perfdata_test_cold")),
            (6, 1)
        );
        assert_eq!(samples(&l, "[unknown in [kernel]]"), 1);
        assert_eq!(r.samples, 8, "hot, cold and kernel samples of task-clock:u");
        assert_eq!(l.samples_read, 10, "every SAMPLE record read");
        assert_eq!(r.lost_samples, 10);
        assert_eq!(
            r.lost_by_thread.iter().map(|t| (t.tid, t.lost)).collect::<Vec<_>>(),
            [(PID, 10)]
        );
        assert!(
            l.notes.iter().any(|n| n.contains("1 kernel samples")
                && n.contains("no build id for the kernel")),
            "{:?}",
            l.notes
        );
        assert!(l.notes.iter().any(|n| n.contains("1 samples carry an event id")), "{:?}", l.notes);
        let source = r.info.source.as_deref().unwrap();
        assert!(
            source.contains("samples of task-clock:u; also in the file: page-faults:u"),
            "{source}"
        );
        // The file order and perf's order agree here; the unknown id is no attr's.
        assert!(PerfData::parse(&bytes).unwrap().records().any(|r| {
            let r = r.unwrap();
            r.kind == RECORD_SAMPLE && r.attr.is_none() && matches!(r.event, Event::Other(_))
        }));

        let l = report(&bytes, Some("page-faults")).unwrap();
        assert_eq!(l.report.info.events, ["page-faults:u"]);
        assert_eq!((l.report.samples, samples(&l, "strobe_perfdata_test_cold")), (1, 1));
        assert!(matches!(report(&bytes, Some("cycles")), Err(ReportError::UnknownEvent { .. })));
    }

    #[test]
    fn frequency_mode_reports_the_mean_period_and_a_cut_reports_what_came_before() {
        let hot = ip(strobe_perfdata_test_hot);
        let mut recs = process_records();
        for (t, period) in [1000u64, 3000, 2000, 6000].iter().enumerate() {
            recs.push(sample(2, ID_CLOCK, 10 + t as u64, hot, *period));
        }
        let bytes = perf_data(true, &recs);
        let l = report(&bytes, None).unwrap();
        assert_eq!(l.report.info.period, 3000, "the mean of the periods the kernel chose");
        assert!(l.report.info.source.as_deref().unwrap().contains("-F 4000 Hz"));
        // A sample's value is its period, not a counter reading: two samples bound no
        // window (3000 - 1000 is no count, and 2000 - 3000 no missing end).
        let r = &l.report;
        assert_eq!(
            (r.windows_measured, r.windows_used, r.windows_discarded, r.windows_unpaired),
            (false, 0, 0, 0)
        );
        assert_eq!(r.mean_window, None);

        // Cut inside the last sample: three samples and the cut's offset.
        let data = PerfData::parse(&bytes).unwrap();
        let last_sample_at = data
            .records()
            .filter_map(Result::ok)
            .filter(|r| r.kind == RECORD_SAMPLE)
            .last()
            .unwrap()
            .offset as usize;
        let cut = &bytes[..last_sample_at + 20];
        let l = report(cut, None).unwrap();
        assert_eq!(l.report.samples, 3);
        assert_eq!(l.truncated_at, Some(last_sample_at as u64));
    }
}
