//! How fast the engine turns samples into a report, in samples per second.
//!
//! The measurement feeds a synthetic but realistic stream through the real engine: two
//! threads of alternating window start/end samples with three counters (task-clock,
//! page-faults, context-switches, as the default recording has), whose IPs are spread
//! over the text of the running executable, so symbolization is real work on a real ELF
//! file (its symbol table, as `strobe report`'s table reads it: no source lines). The
//! stream is built before the clock starts; the clock
//! covers aggregation, symbolization and folding to functions (`finish`), which is what
//! `strobe report` spends after its reader has decoded a sample.
//!
//! [`measure_file`] goes end to end instead: it writes the stream to a real record file
//! with strobe-format's encoder and times reading it back into a report.
//! `strobe bench sampling` quotes these figures.
//!
//! This module must never be used on a report's path: it exists to be measured.

use std::path::Path;
use std::time::Instant;

use crate::input::{parse_proc_maps, Mapping, RecordInfo, Sample, SampleKind};
use crate::{Aggregator, WindowPolicy};

/// One measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Throughput {
    /// Samples fed (window starts and ends).
    pub samples: u64,
    /// Distinct IPs among them (each symbolized once).
    pub unique_ips: usize,
    /// Seconds for the whole engine: aggregation plus `finish`.
    pub seconds: f64,
    /// Seconds of the aggregation pass alone.
    pub aggregate_seconds: f64,
}

impl Throughput {
    /// Samples per second through the whole engine.
    pub fn samples_per_s(&self) -> f64 {
        self.samples as f64 / self.seconds.max(1e-9)
    }

    /// Samples per second through the aggregation pass alone.
    pub fn aggregate_samples_per_s(&self) -> f64 {
        self.samples as f64 / self.aggregate_seconds.max(1e-9)
    }
}

/// Why a measurement could not run.
#[derive(Debug, thiserror::Error)]
pub enum ThroughputError {
    /// /proc/self/maps could not be read.
    #[error("cannot read /proc/self/maps: {0}")]
    Maps(#[from] std::io::Error),
    /// The record file written for the measurement could not be read back.
    #[error("reading the measurement's record file: {0}")]
    Read(String),
    /// The running executable has no executable mapping to draw IPs from.
    #[error("the running executable has no executable mapping in /proc/self/maps")]
    NoText,
}

/// The synthetic stream: the running executable's mappings and samples
/// `(tid, ip, kind, [task-clock, page-faults, context-switches])`.
struct Synthetic {
    maps: Vec<Mapping>,
    exe: String,
    stream: Vec<(u32, u64, SampleKind, [u64; 3])>,
}

fn synthesize(samples: u64) -> Result<Synthetic, ThroughputError> {
    let maps = parse_proc_maps(&std::fs::read_to_string("/proc/self/maps")?);
    let exe = std::fs::read_link("/proc/self/exe")?.to_string_lossy().into_owned();
    let main = maps
        .iter()
        .filter(|m| m.path == exe)
        .max_by_key(|m| m.end - m.start)
        .ok_or(ThroughputError::NoText)?;
    let span = main.end - main.start;
    let ip_at = |k: u64| main.start + (k % UNIQUE_IPS) * (span / UNIQUE_IPS);
    let windows = samples / 2;
    let mut stream = Vec::with_capacity(2 * windows as usize);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut clock = [0u64; 2];
    let mut faults = [0u64; 2];
    for w in 0..windows {
        // Runs of 64 windows per thread, as buffers drained per thread produce.
        let t = ((w / 64) % 2) as usize;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let start_ip = ip_at(x >> 40);
        // Most windows end in the same function; some cross to another.
        let end_ip = if x & 7 == 0 { ip_at((x >> 40) + 1) } else { start_ip };
        if let (Some(c), Some(f)) = (clock.get_mut(t), faults.get_mut(t)) {
            *c += 1_000_000;
            stream.push((t as u32 + 1, start_ip, SampleKind::WindowStart, [*c, *f, 0]));
            *c += 20_000 + (x & 0xfff);
            *f += x & 1;
            stream.push((t as u32 + 1, end_ip, SampleKind::WindowEnd, [*c, *f, 0]));
        }
    }
    Ok(Synthetic { maps, exe, stream })
}

/// Distinct IPs in the synthetic stream: the unique-address count of a large profile.
const UNIQUE_IPS: u64 = 4096;

fn info(exe: &str) -> RecordInfo {
    RecordInfo {
        events: vec!["task-clock".into(), "page-faults".into(), "context-switches".into()],
        period: 1_000_000,
        window: 20_000,
        jitter: 0,
        command: vec![exe.to_string()],
        source: None,
    }
}

/// Runs the engine once over an in-memory stream of `samples` samples (rounded down to
/// an even number: each window is a start and an end).
pub fn measure(samples: u64) -> Result<Throughput, ThroughputError> {
    let syn = synthesize(samples)?;
    let pid = 1;
    let t0 = Instant::now();
    let mut agg = Aggregator::new(info(&syn.exe)).map_err(|_| ThroughputError::NoText)?;
    agg.set_symbol_options(crate::SymbolOptions { names_only: true, ..Default::default() });
    for m in syn.maps {
        agg.add_mapping(pid, m);
    }
    for (i, (tid, ip, kind, values)) in syn.stream.iter().enumerate() {
        agg.push(&Sample {
            pid,
            tid: *tid,
            time: i as u64,
            ip: *ip,
            kind: *kind,
            stack: 0,
            values,
        });
    }
    let aggregate_seconds = t0.elapsed().as_secs_f64();
    let report = agg.finish(WindowPolicy::Discard);
    let seconds = t0.elapsed().as_secs_f64();
    std::hint::black_box(&report);
    Ok(Throughput {
        samples: syn.stream.len() as u64,
        unique_ips: UNIQUE_IPS as usize,
        seconds,
        aggregate_seconds,
    })
}

/// End to end through a real record file: writes `samples` samples to a file in `dir`
/// with strobe-format's encoder (in per-thread batches of 512, as the agent's writer
/// drains them), then times reading it as `strobe report FILE` does for its table
/// ([`crate::recording::read_with`], names without source lines): open, decode,
/// aggregate, symbolize, fold. `aggregate_seconds` is not split out here (it equals `seconds`).
/// Returns the measurement and the file's size in bytes; the file is removed.
pub fn measure_file(samples: u64, dir: &Path) -> Result<(Throughput, u64), ThroughputError> {
    use strobe_format as f;
    let syn = synthesize(samples)?;
    let stream_id: f::StreamId = 1;
    let mut e = f::Encoder::new();
    e.preamble();
    e.header(&f::Header {
        minor_version: f::MINOR_VERSION,
        strobe_version: env!("CARGO_PKG_VERSION").into(),
        start_unix_ns: 0,
        start_mono_ns: 0,
        command: vec![syn.exe.clone()],
        events: ["task-clock", "page-faults", "context-switches"]
            .iter()
            .enumerate()
            .map(|(i, n)| f::EventDesc {
                name: n.to_string(),
                type_: 1,
                config: i as u64,
                is_time: i == 0,
                is_hardware: false,
                exclude_user: false,
                exclude_kernel: false,
            })
            .collect(),
        period: Some(1_000_000),
        window: Some(20_000),
        jitter: Some(0),
        wakeup: 512,
        buffer_bytes: 64 << 20,
        overhead_ppm: 20_000,
        follow_fork: false,
        mode: f::RecordMode::Agent,
        mode_reason: "synthetic".into(),
        call_graph: f::CallGraph::None,
        max_depth: 0,
    });
    e.maps(
        stream_id,
        &f::MapsSnapshot {
            time_mono_ns: 0,
            maps: syn
                .maps
                .iter()
                .map(|m| f::Mapping {
                    start: m.start,
                    end: m.end,
                    file_offset: m.offset,
                    path: m.path.clone().into(),
                })
                .collect(),
        },
    );
    for (i, chunk) in syn.stream.chunks(512).enumerate() {
        let tid = chunk.first().map_or(1, |s| s.0);
        let mut b = e.samples(stream_id, tid, 3);
        for (j, (_, ip, kind, values)) in chunk.iter().enumerate() {
            let kind = match kind {
                SampleKind::WindowStart => f::SampleKind::WindowStart,
                SampleKind::WindowEnd => f::SampleKind::WindowEnd,
                SampleKind::Plain => f::SampleKind::Plain,
                SampleKind::CallTail => f::SampleKind::CallTail,
                SampleKind::Overflow => f::SampleKind::Overflow,
            };
            b.push(kind, (i * 512 + j) as u64, *ip, 0, values);
        }
        b.finish();
    }
    let path = dir.join(format!("strobe-throughput-{}.strobe", std::process::id()));
    std::fs::write(&path, e.as_bytes())?;
    let bytes = e.len() as u64;
    drop(e);
    let t0 = Instant::now();
    // As `strobe report FILE` reads it for its table: names, no source lines.
    let opts = crate::recording::ReadOptions {
        symbols: crate::SymbolOptions { names_only: true, ..Default::default() },
        ..Default::default()
    };
    let loaded = crate::recording::read_with(&path, &opts, &mut |_, _| {});
    let seconds = t0.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    let loaded = loaded.map_err(|e| ThroughputError::Read(e.to_string()))?;
    Ok((
        Throughput {
            samples: loaded.samples_read,
            unique_ips: UNIQUE_IPS as usize,
            seconds,
            aggregate_seconds: seconds,
        },
        bytes,
    ))
}

/// The median of `repeats` measurements (by whole-engine time), robust to a noisy
/// machine.
pub fn measure_median(samples: u64, repeats: usize) -> Result<Throughput, ThroughputError> {
    let mut runs = (0..repeats.max(1)).map(|_| measure(samples)).collect::<Result<Vec<_>, _>>()?;
    runs.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let mid = runs.len() / 2;
    runs.get(mid).copied().ok_or(ThroughputError::NoText)
}
