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

use std::path::Path;

use strobe_format::{NoteLevel, ProcessOrigin, Reader, Record};

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
}

fn kind(k: strobe_format::SampleKind) -> SampleKind {
    match k {
        strobe_format::SampleKind::Plain => SampleKind::Plain,
        strobe_format::SampleKind::WindowStart => SampleKind::WindowStart,
        strobe_format::SampleKind::WindowEnd => SampleKind::WindowEnd,
    }
}

/// Reads the record file at `path` and builds its report under `policy`.
pub fn read(path: &Path, policy: WindowPolicy) -> Result<Loaded, ReportError> {
    let mut reader = Reader::open(path)?;
    let header = reader.header().clone();
    let info = RecordInfo {
        events: header.events.iter().map(|e| e.name.clone()).collect(),
        period: header.period.unwrap_or(0),
        window: header.window.unwrap_or(0),
        jitter: header.jitter.unwrap_or(0),
        command: header.command.clone(),
        source: None,
    };
    let mut agg = Aggregator::new(info)?;
    let mut params_from: Option<ProcessOrigin> = None;
    let mut truncated_at = None;
    let mut notes = Vec::new();
    let mut samples_read = 0u64;
    for record in reader.by_ref() {
        match record? {
            Record::Process { info, .. } => {
                // The launched command's parameters; a child's only if it has none.
                let take = match params_from {
                    None => true,
                    Some(o) => o != ProcessOrigin::Start && info.origin == ProcessOrigin::Start,
                };
                if take {
                    agg.set_sampling(info.period, info.window, info.jitter);
                    params_from = Some(info.origin);
                }
            }
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
                for s in batch.iter() {
                    let s = s?;
                    samples_read += 1;
                    agg.push(&Sample {
                        pid: batch.stream,
                        tid: s.tid,
                        time: s.time,
                        ip: s.ip,
                        kind: kind(s.kind),
                        values: s.counters.as_slice(),
                    });
                }
            }
            Record::Lost { stream, lost } => {
                for l in lost {
                    agg.add_lost(stream, l.tid, l.lost);
                }
            }
            Record::Note { note, .. } => {
                let level = match note.level {
                    NoteLevel::Info => continue,
                    NoteLevel::Warning => "warning",
                    NoteLevel::Error => "error in the profiled program",
                };
                notes.push(format!("{level}: {}", note.message));
            }
            Record::Image { image, .. } => agg.spaces.add_image(image.name, image.bytes),
            Record::Truncated { offset } => truncated_at = Some(offset),
            Record::Threads { .. } | Record::End { .. } => {}
        }
    }
    Ok(Loaded { report: agg.finish(policy), truncated_at, notes, samples_read })
}
