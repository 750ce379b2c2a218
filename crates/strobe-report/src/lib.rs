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
//! 4. [`Report`] (`report`), built by the phases of `build` (address interning, function
//!    folding, call paths, samples, off-CPU time, windows under a [`WindowPolicy`],
//!    inclusive windows, the unsampled rows, pruning).
//! 5. [`metrics`]: the table of derived metrics and their formulas.
//! 6. [`render`](mod@render): table, CSV or JSON, sorted and cut to the top N.
//!
//! Views of a finished report, each in its own module: [`calltree`] (callers, callees,
//! folded stacks), [`flamegraph`] (SVG, coloured by a window metric), [`pprof`]
//! (profile.proto), [`firefox`] (the Firefox Profiler's processed format), [`html`] (one
//! self-contained page) and [`diff`] (two recordings compared within their error bars).
//! `jit` names JIT code from the JIT's own symbol files; `timeline` ([`Timeline`]) keeps
//! samples in time order for the views that show time.
//!
//! [`recording`] is the adapter that feeds a record file (crate strobe-format) to the
//! engine; [`perfdata`] feeds a Linux perf perf.data file (crate strobe-perfdata).
//! [`window_check`] judges whether a recording's windows saw the program as the long
//! periods between them did. [`throughput`] measures the engine's samples per second. [`lookup`] lends the
//! symbolization to tools that learn code addresses another way (`strobe watch`).
//!
//! This crate must never touch perf or the target: it reads what was recorded.

mod accounting;
mod aggregate;
mod build;
pub mod calltree;
pub mod diff;
mod error;
pub mod firefox;
pub mod flamegraph;
pub mod html;
pub mod input;
mod jit;
pub mod lookup;
pub mod metrics;
pub mod perfdata;
pub mod pprof;
pub mod recording;
pub mod render;
mod report;
mod stacks;
mod stats;
mod symbolize;
mod tally;
pub mod throughput;
mod timeline;
pub mod window_check;

pub use aggregate::{Aggregator, MAX_COUNTERS};
pub use error::ReportError;
pub use input::{
    Baseline, BaselineCounter, KernelSymbol, Mapping, RecordInfo, Sample, SampleKind, StackNode,
};
pub use render::{render, Format, RenderOptions};
pub use report::{
    BaselineUse, FunctionStats, OffCpuTotals, PathStats, Report, WindowPolicy, WithoutAgent, AGENT,
    UNSAMPLED,
};
pub use stats::{Estimate, WindowSums};
pub use symbolize::{SymbolCache, SymbolOptions};
pub use tally::LostThread;
pub use timeline::Timeline;

#[cfg(test)]
mod tests;
