//! The recording's configuration: what `strobe record` asks every agent of one recording
//! to do. The recorder encodes it into the arena before the first agent starts; agents
//! decode it at load. Both ends are the same build (the agent is embedded in `strobe`),
//! so the version byte is a check, not a negotiation.
//!
//! Owns: the fields and their encoding. Must never hold anything a process decides for
//! itself (its period, its stream id): those go into the record file's PROCESS chunk.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use crate::calibration::Costs;
use crate::wire::{DecodeError, Reader, Writer};

/// The encoding's version.
const VERSION: u64 = 3;

/// How the agent walks the stack of each sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CallGraph {
    /// No stack: only the sampled instruction.
    None,
    /// Follow the frame-pointer chain (cheap; loses callers in code built without frame
    /// pointers).
    Fp,
    /// Unwind with the modules' `.eh_frame`/`.debug_frame` tables (correct through code
    /// without frame pointers).
    #[default]
    Dwarf,
}

impl CallGraph {
    /// The name as `--call-graph` spells it.
    pub fn name(self) -> &'static str {
        match self {
            CallGraph::None => "none",
            CallGraph::Fp => "fp",
            CallGraph::Dwarf => "dwarf",
        }
    }

    /// The variant `--call-graph` names.
    pub fn from_name(s: &str) -> Option<CallGraph> {
        match s {
            "none" => Some(CallGraph::None),
            "fp" => Some(CallGraph::Fp),
            "dwarf" => Some(CallGraph::Dwarf),
            _ => None,
        }
    }

    fn code(self) -> u64 {
        match self {
            CallGraph::None => 0,
            CallGraph::Fp => 1,
            CallGraph::Dwarf => 2,
        }
    }

    fn from_code(c: u64) -> Option<CallGraph> {
        match c {
            0 => Some(CallGraph::None),
            1 => Some(CallGraph::Fp),
            2 => Some(CallGraph::Dwarf),
            _ => None,
        }
    }
}

/// What every agent of a recording is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordConfig {
    /// The record file: agents append their PROCESS, MAPS, NOTE chunks to it.
    pub output: OsString,
    /// The event group in perf syntax, canonical form (the recorder parsed it).
    pub events: String,
    /// A hardware PMU exists (picks default events).
    pub hardware: bool,
    /// Events without a privilege modifier count kernel activity too.
    pub kernel: bool,
    /// The overhead budget, parts per million of the target's CPU time.
    pub overhead_ppm: u64,
    /// Forked children are profiled (each its own stream).
    pub follow_fork: bool,
    /// How stacks are walked.
    pub call_graph: CallGraph,
    /// The most caller frames a sample keeps.
    pub max_depth: u32,
    /// The costs measured by the calibration process, when it measured them; an agent
    /// without them measures its own.
    pub costs: Option<Costs>,
    /// This agent runs the calibration (a process of its own, before the target), not a
    /// recording.
    pub calibrate: bool,
    /// The leader's count between an overflow in user code and the handler's group read,
    /// as the calibration measured it (0: unknown, windows never begin inside a system
    /// call; see `strobe_sampler::alternate`).
    pub tail_dead: u64,
    /// What the leader counts per sampling cycle beyond the long period and the window
    /// (the sampler's own counted time), as the calibration measured it (0: unknown).
    pub cycle_extra: u64,
    /// The leader's count from a window's expiry to its interrupt's read, as the
    /// calibration measured it (0: unknown; see `strobe_sampler::alternate`).
    pub lateness: u64,
    /// What the leader counts in every window that is not the target's (the baseline the
    /// report subtracts from each window), as the calibration measured it (0: unknown).
    /// The agent's per-switch correction (see `strobe_sampler::alternate`) fits windows
    /// net of it.
    pub window_dead: u64,
    /// How many seccomp filters `strobe record` itself runs under (a container's, a
    /// service manager's). An agent that starts under more has been put in a sandbox by
    /// the program or a launcher, whose filter may forbid the agent's system calls: it
    /// stays off there (`agent/src/sandbox.rs`, [`crate::status`]).
    pub seccomp_filters: u32,
    /// The inode of `strobe record`'s PID namespace (0: unknown). An agent in another one
    /// (`unshare -p`, a container runtime, a browser's sandbox) sees pids the recording
    /// cannot match with the kernel's: it stays off there, and the kernel floor, which
    /// reports every pid in the recorder's namespace, samples it.
    pub pid_ns: u64,
}

impl RecordConfig {
    /// The encoded bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(VERSION)
            .bytes(self.output.as_bytes())
            .bytes(self.events.as_bytes())
            .bool(self.hardware)
            .bool(self.kernel)
            .u64(self.overhead_ppm)
            .bool(self.follow_fork)
            .u64(self.call_graph.code())
            .u64(u64::from(self.max_depth))
            .bool(self.calibrate)
            .u64(self.tail_dead)
            .u64(self.cycle_extra)
            .u64(self.lateness)
            .u64(self.window_dead)
            .u64(u64::from(self.seccomp_filters))
            .u64(self.pid_ns);
        match &self.costs {
            None => {
                w.bool(false);
            }
            Some(c) => {
                w.bool(true).u64(c.sample_ns).u64(c.floor_ns).f64(c.leader_per_ns);
            }
        }
        w.bytes
    }

    /// Decodes what [`RecordConfig::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Result<RecordConfig, DecodeError> {
        let mut r = Reader::new(bytes);
        let at = 0;
        if r.u64("the configuration's version")? != VERSION {
            return Err(DecodeError { what: "a configuration of this version", at });
        }
        let output = OsString::from_vec(r.bytes("the output path")?.to_vec());
        let events_at = bytes.len() - r.remaining();
        let events = String::from_utf8(r.bytes("the event group")?.to_vec())
            .map_err(|_| DecodeError { what: "the event group", at: events_at })?;
        let hardware = r.bool("the hardware flag")?;
        let kernel = r.bool("the kernel flag")?;
        let overhead_ppm = r.u64("the overhead budget")?;
        let follow_fork = r.bool("the follow-fork flag")?;
        let cg_at = bytes.len() - r.remaining();
        let call_graph = CallGraph::from_code(r.u64("the call graph")?)
            .ok_or(DecodeError { what: "a known call graph", at: cg_at })?;
        let max_depth = r.u32("the stack depth")?;
        let calibrate = r.bool("the calibration flag")?;
        let tail_dead = r.u64("the tail's dead count")?;
        let cycle_extra = r.u64("the cycle's extra count")?;
        let lateness = r.u64("the windows' lateness")?;
        let window_dead = r.u64("the window's dead count")?;
        let seccomp_filters = r.u32("the recorder's seccomp filters")?;
        let pid_ns = r.u64("the recorder's PID namespace")?;
        let costs = if r.bool("the costs flag")? {
            Some(Costs {
                sample_ns: r.u64("the cost per sample")?,
                floor_ns: r.u64("the floor cost")?,
                leader_per_ns: r.f64("the leader rate")?,
            })
        } else {
            None
        };
        Ok(RecordConfig {
            output,
            events,
            hardware,
            kernel,
            overhead_ppm,
            follow_fork,
            call_graph,
            max_depth,
            costs,
            calibrate,
            tail_dead,
            cycle_extra,
            lateness,
            window_dead,
            seccomp_filters,
            pid_ns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RecordConfig {
        RecordConfig {
            output: OsString::from_vec(b"/tmp/r\xffun.strobe".to_vec()),
            events: "{task-clock/window=20000/,page-faults}".into(),
            hardware: false,
            kernel: true,
            overhead_ppm: 20_000,
            follow_fork: true,
            call_graph: CallGraph::Fp,
            max_depth: 128,
            costs: Some(Costs { sample_ns: 31_000, floor_ns: 15_000, leader_per_ns: 1.0 }),
            calibrate: false,
            tail_dead: 9_300,
            cycle_extra: 61_000,
            lateness: 17_000,
            window_dead: 3_000,
            seccomp_filters: 1,
            pid_ns: 4026531836,
        }
    }

    #[test]
    fn a_configuration_round_trips() {
        for c in [
            sample(),
            RecordConfig { costs: None, calibrate: true, call_graph: CallGraph::None, ..sample() },
            RecordConfig { call_graph: CallGraph::Dwarf, output: OsString::new(), ..sample() },
        ] {
            assert_eq!(RecordConfig::decode(&c.encode()).unwrap(), c);
        }
    }

    #[test]
    fn every_cut_and_a_foreign_version_are_errors() {
        let bytes = sample().encode();
        for cut in 0..bytes.len() {
            assert!(RecordConfig::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut other = bytes.clone();
        other[0] = 1;
        let e = RecordConfig::decode(&other).unwrap_err();
        assert_eq!(e.to_string(), "cannot read a configuration of this version at byte 0");
    }

    #[test]
    fn call_graph_names_round_trip() {
        for c in [CallGraph::None, CallGraph::Fp, CallGraph::Dwarf] {
            assert_eq!(CallGraph::from_name(c.name()), Some(c));
        }
        assert_eq!(CallGraph::from_name("lbr"), None);
    }
}
