//! strobe-report: from recorded samples to per-function metrics.
//!
//! The pipeline, one module per step:
//!
//! 1. [`input`]: the plain facts an adapter feeds in (record info, mappings, samples).
//! 2. [`Aggregator`] (`aggregate`): one streaming pass pairing each window's start sample
//!    with its end sample and summing counter deltas by (start IP, end IP); time samples
//!    counted by IP. No allocation per sample, no symbolization.
//! 3. `symbolize`: each unique IP normalized with the recorded mappings to (file, file
//!    offset) and symbolized once with blazesym.
//! 4. [`Report`] (`report`): addresses folded to functions; window deltas attributed
//!    under a [`WindowPolicy`].
//! 5. [`metrics`]: the table of derived metrics and their formulas.
//! 6. [`render`]: table, CSV or JSON, sorted and cut to the top N.
//!
//! [`recording`] is the adapter that feeds a record file (crate strobe-format) to the
//! engine; [`perfdata`] feeds a Linux perf perf.data file (crate strobe-perfdata).
//! [`throughput`] measures the engine's samples per second. [`lookup`] lends the
//! symbolization to tools that learn code addresses another way (`strobe watch`).
//!
//! This crate must never touch perf or the target: it reads what was recorded.

mod aggregate;
pub mod calltree;
mod error;
pub mod input;
pub mod lookup;
pub mod metrics;
pub mod perfdata;
pub mod recording;
pub mod render;
mod report;
mod stacks;
pub mod stats;
mod symbolize;
mod tally;
pub mod throughput;

pub use aggregate::{Aggregator, MAX_COUNTERS};
pub use error::ReportError;
pub use input::{
    Baseline, BaselineCounter, KernelSymbol, Mapping, RecordInfo, Sample, SampleKind, StackNode,
};
pub use render::{render, Format, RenderOptions};
pub use report::{
    BaselineUse, FunctionStats, OffCpuTotals, PathStats, Report, WindowPolicy, UNSAMPLED,
};
pub use stats::{Estimate, WindowSums};
pub use tally::LostThread;

#[cfg(test)]
mod tests;
