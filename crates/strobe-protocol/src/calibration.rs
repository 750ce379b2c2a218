//! What the calibration process measures before the target starts, in a process of its
//! own with only the agent loaded, and hands back to the recorder through its arena:
//!
//! - [`Costs`]: the CPU cost of one sample, which the overhead budget turns into a period;
//! - [`Baseline`]: what every counter counts in an interval (a window, or the interval
//!   between two samples in short-only sampling) that is not the target's own work: the
//!   kernel's overflow path before the counters stop, and the re-arming and `sigreturn`
//!   after they start again. `strobe report` subtracts it from every interval's deltas.
//!
//! Owns: these values and their encoding (the baseline's type is the record file's, crate
//! strobe-format, as the recorder writes it unchanged). Must never decide how they are used.

use crate::wire::{DecodeError, Reader, Writer};

/// The encoding's version.
const VERSION: u64 = 2;

/// Measured costs, in ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// One sample on the full handler path (signal delivery included).
    pub sample_ns: u64,
    /// Signal delivery plus one group read.
    pub floor_ns: u64,
    /// Leader counts per ns of the thread's running time (1 for task-clock).
    pub leader_per_ns: f64,
}

/// The empty-interval deltas of every counter of the group, leader first, and one
/// counter's: the record file's types (crate strobe-format owns them), which the recorder
/// writes as the calibration hands them over.
pub use strobe_format::{Baseline, BaselineCounter};

/// The agent's name for [`BaselineCounter`].
pub use strobe_format::BaselineCounter as CounterBaseline;

/// What the calibration process reports.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Calibration {
    /// The costs, when they could be measured.
    pub costs: Option<Costs>,
    /// The baseline, when it could be measured (a time leader is needed).
    pub baseline: Option<Baseline>,
    /// Why something could not be measured, one line each.
    pub notes: Vec<String>,
    /// The leader's mean count from a window's expiry to its interrupt's read (leader
    /// units), on the baseline's windows, which the calibration loop spent on its CPU (0:
    /// not measured). A thread's windows switched out of end that much before their
    /// interrupt until the thread has measured its own (`strobe_sampler::alternate`).
    pub lateness: f64,
}

impl Calibration {
    /// The encoded bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(VERSION);
        match &self.costs {
            None => {
                w.bool(false);
            }
            Some(c) => {
                w.bool(true).u64(c.sample_ns).u64(c.floor_ns).f64(c.leader_per_ns);
            }
        }
        match &self.baseline {
            None => {
                w.bool(false);
            }
            Some(b) => {
                w.bool(true).bool(b.windows).u64(b.requested).u64(b.intervals).f64(b.work_ns);
                w.f64(b.uncounted);
                for list in [&b.counters, &b.tail, &b.end] {
                    w.u64(list.len() as u64);
                    for c in list {
                        w.f64(c.mean).f64(c.sd);
                    }
                }
            }
        }
        w.f64(self.lateness);
        w.u64(self.notes.len() as u64);
        for n in &self.notes {
            w.bytes(n.as_bytes());
        }
        w.bytes
    }

    /// Decodes what [`Calibration::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Result<Calibration, DecodeError> {
        let mut r = Reader::new(bytes);
        if r.u64("the calibration's version")? != VERSION {
            return Err(DecodeError { what: "a calibration of this version", at: 0 });
        }
        let costs = if r.bool("the costs flag")? {
            Some(Costs {
                sample_ns: r.u64("the cost per sample")?,
                floor_ns: r.u64("the floor cost")?,
                leader_per_ns: r.f64("the leader rate")?,
            })
        } else {
            None
        };
        let baseline = if r.bool("the baseline flag")? {
            let windows = r.bool("the baseline's kind")?;
            let requested = r.u64("the baseline's interval")?;
            let intervals = r.u64("the baseline's interval count")?;
            let work_ns = r.f64("the baseline's work")?;
            let uncounted = r.f64("the baseline's uncounted time")?;
            let mut list = || -> Result<Vec<BaselineCounter>, DecodeError> {
                let n = r.u64("the baseline's counter count")?;
                if n > 64 {
                    return Err(DecodeError {
                        what: "at most 64 counters",
                        at: bytes.len() - r.remaining(),
                    });
                }
                let mut v = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    v.push(BaselineCounter {
                        mean: r.f64("a counter's baseline")?,
                        sd: r.f64("its spread")?,
                    });
                }
                Ok(v)
            };
            let counters = list()?;
            let tail = list()?;
            let end = list()?;
            Some(Baseline {
                windows,
                requested,
                intervals,
                work_ns,
                counters,
                tail,
                end,
                uncounted,
            })
        } else {
            None
        };
        let lateness = r.f64("the windows' lateness")?;
        let n = r.u64("the note count")?;
        let mut notes = Vec::new();
        for _ in 0..n.min(64) {
            notes.push(r.str("a note")?);
        }
        Ok(Calibration { costs, baseline, notes, lateness })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calibration_round_trips_and_cuts_are_errors() {
        let c = Calibration {
            costs: Some(Costs { sample_ns: 30_000, floor_ns: 14_000, leader_per_ns: 1.0 }),
            baseline: Some(Baseline {
                windows: true,
                requested: 20_000,
                intervals: 180,
                work_ns: 11_500.5,
                counters: vec![
                    BaselineCounter { mean: 27_900.0, sd: 800.0 },
                    BaselineCounter { mean: 0.01, sd: 0.1 },
                ],
                tail: vec![
                    BaselineCounter { mean: 9_300.0, sd: 1_500.0 },
                    BaselineCounter { mean: 0.0, sd: 0.0 },
                ],
                end: vec![
                    BaselineCounter { mean: 13_000.0, sd: 900.0 },
                    BaselineCounter { mean: 0.0, sd: 0.0 },
                ],
                uncounted: 12_000.0,
            }),
            notes: vec!["a note".into()],
            lateness: 17_000.0,
        };
        let bytes = c.encode();
        assert_eq!(Calibration::decode(&bytes).unwrap(), c);
        for cut in 0..bytes.len() {
            assert!(Calibration::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let empty = Calibration::default();
        assert_eq!(Calibration::decode(&empty.encode()).unwrap(), empty);
    }
}
