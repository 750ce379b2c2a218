//! How fast the engine turns samples into a report, in samples per second.
//!
//! The measurement feeds a synthetic but realistic stream through the real engine: two
//! threads of alternating window start/end samples with three counters (task-clock,
//! page-faults, context-switches, as the default recording has), whose IPs are spread
//! over the text of the running executable, so symbolization is real blazesym work on
//! a real ELF file with DWARF. The stream is built before the clock starts; the clock
//! covers aggregation, symbolization and folding to functions (`finish`), which is what
//! `strobe report` spends after its reader has decoded a sample.
//!
//! `strobe bench sampling` quotes this figure beside `strobe report`'s end-to-end time
//! on a real record file.
//!
//! This module must never be used on a report's path: it exists to be measured.

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
    /// The running executable has no executable mapping to draw IPs from.
    #[error("the running executable has no executable mapping in /proc/self/maps")]
    NoText,
}

/// Builds the synthetic stream and runs the engine over it once. `samples` is rounded
/// down to an even number (each window is a start and an end).
pub fn measure(samples: u64) -> Result<Throughput, ThroughputError> {
    let maps = parse_proc_maps(&std::fs::read_to_string("/proc/self/maps")?);
    let exe = std::fs::read_link("/proc/self/exe")?.to_string_lossy().into_owned();
    let text: Vec<&Mapping> = maps.iter().filter(|m| m.path == exe).collect();
    let main = text.iter().max_by_key(|m| m.end - m.start).ok_or(ThroughputError::NoText)?;

    // 4096 IPs spread over the text: the unique-address count of a large profile.
    const IPS: u64 = 4096;
    let span = main.end - main.start;
    let ip_at = |k: u64| main.start + (k % IPS) * (span / IPS);
    let pid = std::process::id();
    let windows = samples / 2;
    let mut stream: Vec<(u32, u64, SampleKind, [u64; 3])> =
        Vec::with_capacity(2 * windows as usize);
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
            stream.push((t as u32 + pid, start_ip, SampleKind::WindowStart, [*c, *f, 0]));
            *c += 20_000 + (x & 0xfff);
            *f += x & 1;
            stream.push((t as u32 + pid, end_ip, SampleKind::WindowEnd, [*c, *f, 0]));
        }
    }

    let info = RecordInfo {
        events: vec!["task-clock".into(), "page-faults".into(), "context-switches".into()],
        period: 1_000_000,
        window: 20_000,
        jitter: 0,
        command: vec![exe.clone()],
    };
    let t0 = Instant::now();
    let mut agg = Aggregator::new(info).map_err(|_| ThroughputError::NoText)?;
    for m in maps {
        agg.add_mapping(pid, m);
    }
    for (i, (tid, ip, kind, values)) in stream.iter().enumerate() {
        agg.push(&Sample { pid, tid: *tid, time: i as u64, ip: *ip, kind: *kind, values });
    }
    let aggregate_seconds = t0.elapsed().as_secs_f64();
    let report = agg.finish(WindowPolicy::Discard);
    let seconds = t0.elapsed().as_secs_f64();
    std::hint::black_box(&report);
    Ok(Throughput {
        samples: stream.len() as u64,
        unique_ips: IPS as usize,
        seconds,
        aggregate_seconds,
    })
}

/// The median of `repeats` measurements (by whole-engine time), robust to a noisy
/// machine.
pub fn measure_median(samples: u64, repeats: usize) -> Result<Throughput, ThroughputError> {
    let mut runs = (0..repeats.max(1)).map(|_| measure(samples)).collect::<Result<Vec<_>, _>>()?;
    runs.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let mid = runs.len() / 2;
    runs.get(mid).copied().ok_or(ThroughputError::NoText)
}
