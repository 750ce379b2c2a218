//! strobe-protocol: everything that crosses between strobe and the code it puts in the
//! target (the agent of `strobe record` and `strobe watch`, the probe library), typed
//! once and used by both ends.
//!
//! - [`config`]: the recording's configuration ([`RecordConfig`]), encoded into the arena
//!   by the recorder and decoded by each agent.
//! - [`arena`]: the shared mapping (a memfd the recorder creates and every profiled
//!   process maps by path): a header, the configuration, the process table, the custody
//!   pool (crate strobe-sampler's `custody`) and the slots, and calibration results.
//! - [`calibration`]: what the calibration process measures (the cost per sample and the
//!   empty-window baseline of every counter) and hands back through its arena.
//! - [`watch`]: `strobe watch`'s request (the points to watch and the options) and the
//!   hit stream the agent writes back on its pipe.
//! - [`probe`]: the probe library's configuration and its exit report and trace lines.
//! - [`status`]: what a thread's status file says about whether the agent may work in it
//!   (its seccomp filters, its tracer), read the same way by both ends.
//! - [`env`](mod@env): the environment variables and the `LD_PRELOAD` list, named once.
//! - [`wire`]: the small binary encoding the above use, with typed decode errors.
//!
//! Owns: these layouts and encodings, with round-trip tests. Must never grow policy (what
//! to record, how to report): both ends decide that; and must stay light enough for the
//! agent (std and libc only, no allocation on any path a signal handler takes).

pub mod arena;
pub mod budget;
pub mod calibration;
pub mod config;
pub mod env;
pub mod probe;
pub mod status;
pub mod watch;
pub mod wire;

pub use arena::{Arena, ArenaError, ArenaSizes, ProcEntry, ProcState};
pub use calibration::{Baseline, Calibration, Costs};
pub use config::{CallGraph, RecordConfig};
