//! What the calibration process measures before the target starts, in a process of its
//! own with only the agent loaded, and hands back to the recorder through its arena:
//!
//! - [`Costs`]: the CPU cost of one sample, which the overhead budget turns into a period;
//! - [`Baseline`]: what every counter counts in an interval (a window, or the interval
//!   between two samples in short-only sampling) that is not the target's own work: the
//!   kernel's overflow path before the counters stop, and the re-arming and `sigreturn`
//!   after they start again. `strobe report` subtracts it from every interval's deltas.
//!
//! Owns: these values and their encoding. Must never decide how they are used.

use crate::wire::{DecodeError, Reader, Writer};

/// The encoding's version.
const VERSION: u64 = 1;

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

/// One counter's baseline: its mean delta per interval over the calibration's intervals,
/// net of the calibration loop's own work, and the spread of that delta.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CounterBaseline {
    /// Mean count per interval that is not the target's (leader units for the leader).
    pub mean: f64,
    /// Standard deviation of that count over the intervals.
    pub sd: f64,
}

/// The empty-interval deltas of every counter of the group, leader first.
#[derive(Debug, Clone, PartialEq)]
pub struct Baseline {
    /// Measured on windows (true) or on the intervals of fixed-period sampling (false).
    pub windows: bool,
    /// The interval asked for, in leader units (the window, or the period).
    pub requested: u64,
    /// Intervals measured.
    pub intervals: u64,
    /// Mean time the calibration loop itself ran per interval, ns.
    pub work_ns: f64,
    /// Per counter, leader first.
    pub counters: Vec<CounterBaseline>,
    /// Per counter, leader first: what each counts between an overflow in user code and
    /// the handler's group read (the delay a window's tail is measured against); empty
    /// when the overflows' own values could not be read (no ring).
    pub tail: Vec<CounterBaseline>,
    /// Per counter, leader first: what each counts between a window's ending overflow
    /// and the end handler's group read (empty: no ring).
    pub end: Vec<CounterBaseline>,
    /// What the leader does not count per time sample (leader units): the thread's CPU
    /// time while the group is stopped (a window's end handler).
    pub uncounted: f64,
    /// The leader's mean count from a window's expiry to its interrupt's read (leader
    /// units), on windows the calibration loop spent on its CPU.
    pub lateness: f64,
}

/// What the calibration process reports.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Calibration {
    /// The costs, when they could be measured.
    pub costs: Option<Costs>,
    /// The baseline, when it could be measured (a time leader is needed).
    pub baseline: Option<Baseline>,
    /// Why something could not be measured, one line each.
    pub notes: Vec<String>,
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
                w.f64(b.uncounted).f64(b.lateness);
                for list in [&b.counters, &b.tail, &b.end] {
                    w.u64(list.len() as u64);
                    for c in list {
                        w.f64(c.mean).f64(c.sd);
                    }
                }
            }
        }
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
            let lateness = r.f64("the windows' lateness")?;
            let mut list = || -> Result<Vec<CounterBaseline>, DecodeError> {
                let n = r.u64("the baseline's counter count")?;
                if n > 64 {
                    return Err(DecodeError {
                        what: "at most 64 counters",
                        at: bytes.len() - r.remaining(),
                    });
                }
                let mut v = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    v.push(CounterBaseline {
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
                lateness,
            })
        } else {
            None
        };
        let n = r.u64("the note count")?;
        let mut notes = Vec::new();
        for _ in 0..n.min(64) {
            notes.push(r.str("a note")?);
        }
        Ok(Calibration { costs, baseline, notes })
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
                    CounterBaseline { mean: 27_900.0, sd: 800.0 },
                    CounterBaseline { mean: 0.01, sd: 0.1 },
                ],
                tail: vec![
                    CounterBaseline { mean: 9_300.0, sd: 1_500.0 },
                    CounterBaseline { mean: 0.0, sd: 0.0 },
                ],
                end: vec![
                    CounterBaseline { mean: 13_000.0, sd: 900.0 },
                    CounterBaseline { mean: 0.0, sd: 0.0 },
                ],
                uncounted: 12_000.0,
                lateness: 17_000.0,
            }),
            notes: vec!["a note".into()],
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
