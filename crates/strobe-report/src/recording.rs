//! The adapter from a record file (crate strobe-format's streaming reader) to the
//! engine's input. Thin on purpose: it maps the file's records onto [`Aggregator`] calls
//! in one streaming pass, never holding the samples in memory.
//!
//! - Each agent instance writes its own stream (a process, or a new image after exec);
//!   the stream id keys the address space, so an exec'd image never resolves through
//!   its predecessor's mappings.
//! - The period, window and jitter reported are those the first profiled process
//!   actually used (its PROCESS chunk), not merely what was requested.
//! - A truncated file reports everything before the cut, with the cut's byte offset;
//!   a corrupt one is an error naming the file and the byte offset.
//!
//! This module must never interpret samples: attribution is the engine's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rustc_hash::{FxHashMap, FxHashSet};
use strobe_format::{NoteLevel, ProcessOrigin, Reader, Record};

use crate::accounting::Accounting;
use crate::input::{Mapping, RecordInfo, Sample, SampleKind};
use crate::{Aggregator, Report, ReportError, WindowPolicy};

/// A report built from a record file, with what the user must be told about the file.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The report.
    pub report: Report,
    /// The byte offset where the file was cut, when it was (the recorder or target was
    /// killed): everything before it was reported.
    pub truncated_at: Option<u64>,
    /// Warnings and errors the agents recorded, one line each.
    pub notes: Vec<String>,
    /// Samples read from the file (window starts, window ends and plain samples).
    pub samples_read: u64,
    /// Where the recording's clock started (for views that show wall-clock time).
    pub clock: crate::firefox::ClockStart,
}

/// How to read a record file: the report's options.
#[derive(Debug, Clone, Default)]
pub struct ReadOptions {
    /// The window policy.
    pub policy: WindowPolicy,
    /// How addresses are named.
    pub symbols: crate::SymbolOptions,
    /// Keep every sample in time order ([`Report::timeline`]), for views that show time.
    pub timeline: bool,
    /// Names kept across reports (one per interval of a continuous recording).
    pub cache: Option<crate::SymbolCache>,
}

fn kind(k: strobe_format::SampleKind) -> SampleKind {
    match k {
        strobe_format::SampleKind::Plain => SampleKind::Plain,
        strobe_format::SampleKind::WindowStart => SampleKind::WindowStart,
        strobe_format::SampleKind::WindowEnd => SampleKind::WindowEnd,
        strobe_format::SampleKind::CallTail => SampleKind::CallTail,
        strobe_format::SampleKind::Overflow => SampleKind::Overflow,
    }
}

/// Reads the record file at `path` and builds its report under `policy`.
pub fn read(path: &Path, policy: WindowPolicy) -> Result<Loaded, ReportError> {
    read_with(path, &ReadOptions { policy, ..ReadOptions::default() }, &mut |_, _| {})
}

/// Reads the record file at `path` and builds its report under `opts`, calling
/// `progress(bytes read, file size)` as it goes (about every 4 MB, and once at the end
/// of reading, before symbolization).
pub fn read_with(
    path: &Path,
    opts: &ReadOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Loaded, ReportError> {
    let size = std::fs::metadata(path).map_or(0, |m| m.len());
    read_from(Reader::open(path)?, size, opts, progress)
}

/// [`read_with`] from a reader already open on a recording of `size` bytes (a recording
/// held in memory, such as one interval of a continuous recording).
pub fn read_from<R: std::io::Read>(
    mut reader: Reader<R>,
    size: u64,
    opts: &ReadOptions,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<Loaded, ReportError> {
    let mut next_progress = 0u64;
    let header = reader.header().clone();
    let mut feed = Feed::new(&header, opts)?;
    feed.agg.expect_bytes(size);
    while let Some(record) = reader.next() {
        let at = reader.offset();
        if at >= next_progress {
            progress(at, size);
            next_progress = at + (4 << 20);
        }
        feed.record(record?)?;
    }
    let without_agent = feed.without_agent();
    feed.acct.finish(&mut feed.agg);
    progress(size, size);
    let clock =
        crate::firefox::ClockStart { unix_ns: header.start_unix_ns, mono_ns: header.start_mono_ns };
    let mut report = feed.agg.finish(opts.policy);
    report.without_agent = without_agent;
    Ok(Loaded {
        report,
        truncated_at: feed.truncated_at,
        notes: feed.notes,
        samples_read: feed.samples_read,
        clock,
    })
}

/// The engine side of the pass: the aggregator and what the records tell about the
/// processes that it needs later.
struct Feed {
    agg: Aggregator,
    leader_is_time: bool,
    /// Each stream's mean sampling cycle (ns), to turn unsampled time into samples'
    /// worth.
    cycle: Vec<(u32, f64)>,
    /// Each stream's time samples.
    per_stream: FxHashMap<u32, u64>,
    /// Whose sampling parameters the report shows.
    params_from: Option<ProcessOrigin>,
    truncated_at: Option<u64>,
    notes: Vec<String>,
    samples_read: u64,
    /// What the leader does not count per time sample (the baseline's).
    uncounted: f64,
    /// Who ran how much CPU time, and how much of it the samples stand for.
    acct: Accounting,
    /// Streams the kernel floor sampled (their samples stand for its period exactly).
    floor_streams: Vec<u32>,
    /// The whole recording was kernel-sampled (kernel mode).
    kernel_mode: bool,
    /// The programs the agent ran in (pid, executable), and whether it alternated.
    agent_images: FxHashSet<(u32, PathBuf)>,
    alternating: bool,
    /// The floor's streams: stream -> (pid, executable).
    floor_images: FxHashMap<u32, (u32, PathBuf)>,
}

impl Feed {
    fn new(header: &strobe_format::Header, opts: &ReadOptions) -> Result<Feed, ReportError> {
        let kernel_excluded = header.events.first().is_some_and(|e| e.is_time && e.exclude_kernel);
        let info = RecordInfo {
            events: header.events.iter().map(|e| e.name.clone()).collect(),
            period: header.period.unwrap_or(0),
            window: header.window.unwrap_or(0),
            jitter: header.jitter.unwrap_or(0),
            command: header.command.clone(),
            // A kernel-mode recording says so, and why, in the report's header.
            source: (header.mode == strobe_format::RecordMode::Kernel)
                .then(|| format!("kernel mode (perf ring buffers): {}", header.mode_reason)),
        };
        let mut agg = Aggregator::new(info)?;
        agg.set_symbol_options(opts.symbols.clone());
        if let Some(c) = &opts.cache {
            agg.set_symbol_cache(c.clone());
        }
        if opts.timeline {
            agg.keep_timeline();
        }
        Ok(Feed {
            agg,
            leader_is_time: header.events.first().is_some_and(|e| e.is_time),
            cycle: Vec::new(),
            per_stream: FxHashMap::default(),
            params_from: None,
            truncated_at: None,
            notes: Vec::new(),
            samples_read: 0,
            uncounted: 0.0,
            acct: Accounting::new(kernel_excluded),
            floor_streams: Vec::new(),
            kernel_mode: header.mode == strobe_format::RecordMode::Kernel,
            agent_images: Default::default(),
            alternating: false,
            floor_images: FxHashMap::default(),
        })
    }

    /// Feeds one record.
    fn record(&mut self, record: Record) -> Result<(), ReportError> {
        let agg = &mut self.agg;
        match record {
            Record::Process { stream, info } => self.process(stream, &info),
            Record::Maps { stream, maps } => {
                for m in maps.maps {
                    agg.add_mapping(
                        stream,
                        Mapping {
                            start: m.start,
                            end: m.end,
                            offset: m.file_offset,
                            path: m.path.to_string_lossy().into_owned(),
                        },
                    );
                }
            }
            Record::Samples(batch) => {
                let mut time_samples = 0u64;
                for s in batch.iter() {
                    let s = s?;
                    self.samples_read += 1;
                    if s.kind.is_time_sample() {
                        time_samples += 1;
                    }
                    agg.push(&Sample {
                        pid: batch.stream,
                        tid: s.tid,
                        time: s.time,
                        ip: s.ip,
                        kind: kind(s.kind),
                        stack: s.stack,
                        values: s.counters.as_slice(),
                    });
                }
                *self.per_stream.entry(batch.stream).or_insert(0) += time_samples;
                self.acct.samples(batch.stream, batch.tid, time_samples);
            }
            Record::Lost { stream, lost } => {
                for l in lost {
                    agg.add_lost(stream, l.tid, l.lost);
                    // Samples lost were taken, not missed: they are no unsampled time.
                    *self.per_stream.entry(stream).or_insert(0) += l.lost;
                    self.acct.lost(stream, l.tid, l.lost);
                }
            }
            Record::Note { note, .. } => {
                let level = match note.level {
                    NoteLevel::Info => return Ok(()),
                    NoteLevel::Warning => "warning",
                    NoteLevel::Error => "error in the profiled program",
                };
                self.notes.push(format!("{level}: {}", note.message));
            }
            Record::Image { image, .. } => agg.add_image(image.name, image.bytes),
            Record::Truncated { offset } => self.truncated_at = Some(offset),
            Record::Stacks { stream, first_id, nodes } => {
                agg.add_stack_nodes(stream, first_id, &nodes)
            }
            Record::Baseline(b) => {
                self.uncounted = b.uncounted;
                agg.set_baseline(b)
            }
            Record::End { stream, end } => self.end(stream, &end),
            Record::KernelSymbols(syms) => {
                agg.add_kernel_symbols(syms.into_iter().map(|k| crate::input::KernelSymbol {
                    start: k.start,
                    size: k.size,
                    name: k.name,
                    module: k.module,
                }))
            }
            Record::OffCpu { stream, intervals, .. } => {
                for i in intervals {
                    agg.add_off_cpu(stream, i.ip, i.stack, i.duration, i.preempted);
                }
            }
            Record::Threads { stream, threads } => {
                for t in threads {
                    agg.set_thread_name(stream, t.tid, &t.name);
                    self.acct.thread_name(stream, t.tid, &t.name);
                }
            }
            Record::ThreadCpu { stream, threads } => self.acct.thread_cpu(stream, &threads),
        }
        Ok(())
    }

    /// The programs the kernel floor sampled that the agent never ran in, in a recording
    /// where the agent alternated elsewhere (a floor stream beside an agent stream of the
    /// same process and executable holds only moments the agent did not serve; one with
    /// none is a program the agent could not enter). A floor stream whose executable the
    /// floor never learnt (a fork child that ended or exec'd before it looked) says
    /// nothing either way and is left out.
    fn without_agent(&self) -> Vec<crate::report::WithoutAgent> {
        if !self.alternating {
            return Vec::new();
        }
        let mut by: BTreeMap<String, (FxHashSet<u32>, u64)> = Default::default();
        for (stream, (pid, exe)) in &self.floor_images {
            let samples = self.per_stream.get(stream).copied().unwrap_or(0);
            let name = crate::accounting::file_name(exe);
            if samples == 0 || name.is_empty() || self.agent_images.contains(&(*pid, exe.clone())) {
                continue;
            }
            let e = by.entry(name).or_default();
            e.0.insert(*pid);
            e.1 += samples;
        }
        let mut list: Vec<_> = by
            .into_iter()
            .map(|(command, (pids, samples))| crate::report::WithoutAgent {
                command,
                processes: pids.len() as u64,
                samples,
            })
            .collect();
        list.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.command.cmp(&b.command)));
        list
    }

    /// A profiled process: its OS pid, its sampling cycle, and (for the launched command,
    /// or a child when the command has none) the sampling parameters the report shows.
    fn process(&mut self, stream: u32, info: &strobe_format::ProcessInfo) {
        self.agg.set_process_id(stream, info.pid);
        if info.floor {
            self.agg.set_floor(stream);
            self.floor_streams.push(stream);
            self.floor_images.insert(stream, (info.pid, info.exe.clone()));
        } else {
            self.agent_images.insert((info.pid, info.exe.clone()));
            self.alternating |= info.window > 0;
        }
        self.acct.process(stream, info);
        self.cycle
            .push((stream, info.period as f64 + info.jitter as f64 / 2.0 + info.window as f64));
        let take = match self.params_from {
            None => true,
            Some(o) => o != ProcessOrigin::Start && info.origin == ProcessOrigin::Start,
        };
        if take {
            self.agg.set_sampling(info.period, info.window, info.jitter);
            self.params_from = Some(info.origin);
        }
    }

    /// A stream's end: the CPU time its samples do not account for, in samples' worth,
    /// and the cycle that turns a thread's CPU time into samples' worth.
    fn end(&mut self, stream: u32, end: &strobe_format::ProcessEnd) {
        if let Some(t) = end.tree_cpu_ns {
            self.acct.tree_cpu(t);
        }
        // The sampling cycle as the samples measured it (the leader's count per time
        // sample), else as configured.
        // (Where it samples user space only, as configured: see `configured_cycle`.)
        let nominal = self.cycle.iter().rev().find(|(s, _)| *s == stream).map(|(_, c)| *c);
        let c = nominal.map(|n| match self.acct.kernel_excluded() {
            true => self.agg.configured_cycle(n),
            false => self.agg.measured_cycle(stream, n),
        });
        if let (true, Some(c)) = (self.leader_is_time, c.filter(|c| *c > 0.0)) {
            // What the threads ran before sampling was armed; and, when the process's own
            // CPU time is known, everything the samples do not account for (a thread's
            // last stretch after its last sample, ended before its period came) less what
            // the sampler itself ran with the leader stopped.
            let n = self.per_stream.get(&stream).copied().unwrap_or(0) as f64;
            let before = end.unsampled_ns as f64 / c;
            let residual = end.cpu_ns.map_or(0.0, |cpu| (cpu as f64 - n * self.uncounted) / c - n);
            // Used only if the file has no per-thread CPU times (older files).
            self.acct.old_unsampled += before.max(residual);
        }
        // A kernel-sampled stream's samples (the floor's, kernel mode's) stand for its
        // period exactly.
        let kernel = self.kernel_mode || self.floor_streams.contains(&stream);
        if let Some(c) = c.filter(|_| !kernel) {
            self.acct.cycle(stream, c);
        }
    }
}
