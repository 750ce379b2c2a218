//! From a record file to a request: one resource per process image (a record stream).
//!
//! A report merges every process of a recording; OTLP wants a resource per process. So
//! a recording with more than one process stream is split, with strobe-format's reader
//! and encoder, into one record file per stream (in a private temporary directory; the
//! recorder's own chunks, such as the baseline, the vDSO image and kernel symbols, go into
//! each), and each is read by strobe-report's own adapter (`recording::read_with`,
//! with the time line kept for the thread split). A recording of one process is read as
//! it is. Every figure is then the report's own, process by process.
//!
//! Owns: the split and the per-process facts (pid, executable, time range). Must never
//! interpret samples (the report does) or touch the network.

use std::collections::BTreeMap;
use std::path::Path;

use strobe_format::{Encoder, Reader, Record, StreamId, RECORDER_STREAM};
use strobe_report::recording::{Loaded, ReadOptions};

use crate::error::OtlpError;
use crate::profile::{build, ProcessProfile};
use crate::proto::ExportProfilesServiceRequest;
use crate::resource::{attributes, live_container_id, ProcessFacts, ResourceConfig};

/// A request built from a recording, with what the user should be told.
#[derive(Debug)]
pub struct Built {
    /// The request.
    pub request: ExportProfilesServiceRequest,
    /// The reports, one per process, in stream order (for callers that compare).
    pub reports: Vec<Loaded>,
    /// Warnings (a truncated file, the agents' notes), one line each.
    pub notes: Vec<String>,
}

/// How to turn a recording into a request.
#[derive(Debug, Clone, Default)]
pub struct FileOptions {
    /// The report's options (the time line is always kept).
    pub read: ReadOptions,
    /// Resource settings.
    pub resource: ResourceConfig,
    /// Look up container ids of processes still running (the same process, never a
    /// later one with its pid).
    pub live_containers: bool,
}

/// One process stream of the recording.
#[derive(Debug, Default)]
struct StreamFacts {
    pid: u32,
    ppid: u32,
    exe: String,
    start_mono_ns: u64,
    /// The kernel floor's stream of the process (agent mode): part of the process's
    /// resource, not one of its own.
    floor: bool,
}

/// Which stream's resource each stream's records belong to: a process's floor stream
/// joins an agent stream of the same pid (the image with the same executable, else the
/// one that started nearest in time: the floor may not know a short image's executable);
/// every other stream is its own resource.
fn resources(streams: &BTreeMap<StreamId, StreamFacts>) -> BTreeMap<StreamId, StreamId> {
    streams
        .iter()
        .map(|(&id, s)| {
            let owner = if s.floor {
                streams
                    .iter()
                    .filter(|(_, o)| !o.floor && o.pid == s.pid)
                    .min_by_key(|(_, o)| {
                        (o.exe != s.exe, o.start_mono_ns.abs_diff(s.start_mono_ns))
                    })
                    .map_or(id, |(&o, _)| o)
            } else {
                id
            };
            (id, owner)
        })
        .collect()
}

/// Reads the record file at `path` and builds its request.
pub fn from_file(path: &Path, opts: &FileOptions) -> Result<Built, OtlpError> {
    let mut reader = Reader::open(path)?;
    let header = reader.header().clone();
    let mut streams: BTreeMap<StreamId, StreamFacts> = BTreeMap::new();
    let mut last_time = header.start_mono_ns;
    for record in reader.by_ref() {
        match record? {
            Record::Process { stream, info } => {
                let s = streams.entry(stream).or_default();
                s.pid = info.pid;
                s.ppid = info.ppid;
                s.exe = info.exe.to_string_lossy().into_owned();
                s.start_mono_ns = info.start_mono_ns;
                s.floor = info.floor;
            }
            Record::End { end, .. } => {
                last_time = last_time.max(end.time_mono_ns);
            }
            Record::Samples(b) => {
                if let Some(Ok(s)) = b.iter().last() {
                    last_time = last_time.max(s.time);
                }
            }
            _ => {}
        }
    }
    let read = ReadOptions { timeline: true, ..opts.read.clone() };
    let owners = resources(&streams);
    let owned: BTreeMap<StreamId, &StreamFacts> =
        owners.values().map(|o| (*o, &streams[o])).collect();
    let mut reports = Vec::new();
    if owned.len() <= 1 {
        reports.push(strobe_report::recording::read_with(path, &read, &mut |_, _| {})?);
    } else {
        let dir = tempfile::Builder::new()
            .prefix("strobe-otlp-")
            .tempdir()
            .map_err(|e| OtlpError::io("a temporary directory for the split recording", e))?;
        let files = split(path, &owners, dir.path())?;
        for f in files {
            reports.push(strobe_report::recording::read_with(&f, &read, &mut |_, _| {})?);
        }
    }
    let mut notes = Vec::new();
    for l in &reports {
        if let Some(at) = l.truncated_at {
            notes.push(format!(
                "{} is cut short at byte {at} (the recording was interrupted); exporting everything before it",
                path.display()
            ));
        }
        notes.extend(l.notes.iter().cloned());
    }
    notes.dedup();
    let fallback = StreamFacts::default();
    let facts: Vec<&StreamFacts> =
        if owned.is_empty() { vec![&fallback] } else { owned.values().copied().collect() };
    let duration = last_time.saturating_sub(header.start_mono_ns);
    let parts: Vec<ProcessProfile<'_>> = reports
        .iter()
        .zip(&facts)
        .map(|(l, s)| {
            let container_id = (opts.live_containers && s.pid != 0)
                .then(|| live_container_id(s.pid, s.start_mono_ns.max(header.start_mono_ns)))
                .flatten();
            let p = ProcessFacts { pid: s.pid, ppid: s.ppid, exe: s.exe.clone(), container_id };
            ProcessProfile {
                report: &l.report,
                resource: attributes(&opts.resource, &p),
                start_unix_ns: header.start_unix_ns,
                duration_ns: duration,
            }
        })
        .collect();
    let request = build(&parts, &header.strobe_version);
    drop(parts);
    Ok(Built { request, reports, notes })
}

/// Writes one record file per resource of `path` into `dir` (`owners`: each stream's
/// resource), in the resources' stream order.
fn split(
    path: &Path,
    owners: &BTreeMap<StreamId, StreamId>,
    dir: &Path,
) -> Result<Vec<std::path::PathBuf>, OtlpError> {
    let mut reader = Reader::open(path)?;
    let header = reader.header().clone();
    let mut encs: BTreeMap<StreamId, Encoder> = owners
        .values()
        .map(|&s| {
            let mut e = Encoder::new();
            e.preamble();
            e.header(&header);
            (s, e)
        })
        .collect();
    for record in reader.by_ref() {
        let record = record?;
        // Which encoder gets it: its stream's, or every one for the recorder's chunks.
        let stream = match &record {
            Record::Process { stream, .. }
            | Record::Threads { stream, .. }
            | Record::ThreadCpu { stream, .. }
            | Record::Maps { stream, .. }
            | Record::Lost { stream, .. }
            | Record::End { stream, .. }
            | Record::Image { stream, .. }
            | Record::Stacks { stream, .. }
            | Record::OffCpu { stream, .. }
            | Record::Note { stream, .. } => *stream,
            Record::Samples(b) => b.stream,
            Record::Baseline(_) | Record::KernelSymbols(_) => RECORDER_STREAM,
            Record::Truncated { .. } => break,
        };
        let targets: Vec<&mut Encoder> = match owners.get(&stream) {
            Some(owner) if stream != RECORDER_STREAM => encs.get_mut(owner).into_iter().collect(),
            _ => encs.values_mut().collect(),
        };
        for e in targets {
            encode(e, &record)?;
        }
    }
    let mut out = Vec::new();
    for (stream, enc) in encs {
        let f = dir.join(format!("stream-{stream}.strobe"));
        std::fs::write(&f, enc.as_bytes())
            .map_err(|e| OtlpError::io("a split recording in the temporary directory", e))?;
        out.push(f);
    }
    Ok(out)
}

/// Re-encodes one record.
fn encode(e: &mut Encoder, record: &Record) -> Result<(), OtlpError> {
    match record {
        Record::Process { stream, info } => e.process(*stream, info),
        Record::Threads { stream, threads } => e.threads(*stream, threads),
        Record::ThreadCpu { stream, threads } => e.thread_cpu(*stream, threads),
        Record::Maps { stream, maps } => e.maps(*stream, maps),
        Record::Lost { stream, lost } => e.lost(*stream, lost),
        Record::End { stream, end } => e.end_process(*stream, end),
        Record::Image { stream, image } => e.image(*stream, image),
        Record::Stacks { stream, first_id, nodes } => e.stacks(*stream, *first_id, nodes),
        Record::OffCpu { stream, tid, intervals } => e.off_cpu(*stream, *tid, intervals),
        Record::Note { stream, note } => e.note(*stream, note),
        Record::Baseline(b) => e.baseline(b),
        Record::KernelSymbols(k) => e.kernel_symbols(k),
        Record::Samples(b) => {
            let mut out = e.samples(b.stream, b.tid, b.ncounters);
            for s in b.iter() {
                let s = s?;
                out.push(s.kind, s.time, s.ip, s.stack, s.counters.as_slice());
            }
        }
        Record::Truncated { .. } => {}
    }
    Ok(())
}
