//! strobe-uprobe: kernel uprobes on any function or USDT probe of any ELF file, and the
//! `strobe probe` session that runs a program under them.
//!
//! The path from a probe as typed to a report:
//!
//! 1. [`spec::ProbeSpec`] parses `func`, `func+off`, `lib.so:func`, `usdt:provider:name`.
//! 2. [`resolve::Resolver`] reads the ELF files and finds libraries like the dynamic
//!    linker (both through strobe-target), and turns the probe into (file, offset) sites,
//!    with "did you mean" errors.
//! 3. [`attach`] defines each site as a uprobe in tracefs (mounting tracefs first when it
//!    is absent) and opens tracepoint events on it (they can be inherited by the target's
//!    threads), or, for threads that exist already, opens uprobe PMU events (`config1` =
//!    path, `config2` = offset, the retprobe bit and the USDT semaphore's `ref_ctr_offset`
//!    where sysfs says).
//! 4. [`session::Session`] forks the target held before exec (strobe-target's launch),
//!    attaches with `enable_on_exec` + `inherit`, releases it, collects counts (and, for
//!    latency and trace, ring-buffer samples matched per thread by [`latency`]) and
//!    reports.
//! 5. [`run`] is one `strobe probe`: kernel probes and the program's own probe points
//!    ([`points`], counted by strobe-probe inside the program) on one launched program,
//!    gathered into one set of rows; and `--list`'s inventory.
//!
//! This crate must never run code inside the target, nor read ELF files or procfs itself:
//! what it knows of the target comes from strobe-target, and what it learns from perf
//! events and the probe library's report file.

pub mod attach;
pub mod latency;
pub mod points;
pub mod resolve;
pub mod run;
pub mod session;
pub mod spec;

use std::path::PathBuf;

pub use resolve::{ProbeKind, ResolvedProbe, Resolver, Site};
pub use run::{ListOptions, Listing, Probe, Row, RowKind, Run, RunOptions, RunReport, Warning};
pub use session::{Hit, HitKind, Notice, Options, ProbeReport, Report, Session};
pub use spec::ProbeSpec;
pub use strobe_target::{Command, Exit};

/// Everything that can go wrong between a probe as typed and a report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the target (its ELF files, its libraries) or starting it failed.
    #[error(transparent)]
    Target(#[from] strobe_target::Error),
    /// A USDT note that cannot be turned into a uprobe.
    #[error("{}: USDT notes unusable: {why}", path.display())]
    BadUsdt {
        /// The file.
        path: PathBuf,
        /// What is wrong with the note.
        why: String,
    },
    /// No function of that name.
    #[error("function '{func}' not found in {}{hint}", binary.display())]
    FunctionNotFound {
        /// The name as typed.
        func: String,
        /// The file searched.
        binary: PathBuf,
        /// `; did you mean: ...?` or where it is defined instead, possibly empty.
        hint: String,
    },
    /// The symbol is a GNU indirect function (its resolver, not an implementation).
    #[error(
        "'{func}' in {} is an indirect function (IFUNC): the symbol is the resolver that picks \
         an implementation at load time, so probing it counts nothing useful; probe an \
         implementation instead{hint}",
        binary.display()
    )]
    IndirectFunction {
        /// The name as typed.
        func: String,
        /// The file.
        binary: PathBuf,
        /// Implementations with close names.
        hint: String,
    },
    /// `func+off` past the function's end.
    #[error("offset {offset:#x} is outside '{func}', which is {size} bytes long")]
    OffsetOutOfRange {
        /// The function.
        func: String,
        /// The offset asked for.
        offset: u64,
        /// The function's size.
        size: u64,
    },
    /// No USDT probe of that name.
    #[error("USDT probe '{probe}' not found in {}{hint}", binary.display())]
    UsdtNotFound {
        /// `provider:name` as typed.
        probe: String,
        /// The file searched.
        binary: PathBuf,
        /// Suggestions or the probes it has.
        hint: String,
    },
    /// The probe text does not parse.
    #[error("bad probe '{spec}': {why}")]
    BadSpec {
        /// The probe as typed.
        spec: String,
        /// What is wrong and how to write it.
        why: String,
    },
    /// The kernel refused an event (not permitted, no such task, ...).
    #[error(transparent)]
    Open(#[from] strobe_perf::OpenError),
    /// A ring buffer could not be mapped.
    #[error(transparent)]
    Ring(#[from] strobe_perf::ring::RingError),
    /// strobe lacks a privilege a step needs.
    #[error("{what}: not permitted; {need}")]
    NotPermitted {
        /// The step.
        what: String,
        /// What would allow it.
        need: String,
    },
    /// This kernel has no uprobe PMU (or an unusable one).
    #[error("kernel uprobes are not available: {why}")]
    NoUprobePmu {
        /// What is missing.
        why: String,
    },
    /// A file could not be read.
    #[error("{what}: {source}")]
    Io {
        /// What was being read.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// The probe library's report (`point:` probes) cannot be read.
    #[error("the probe-point report {} cannot be read: {source}", path.display())]
    PointReport {
        /// The report file.
        path: PathBuf,
        /// What is wrong.
        source: strobe_protocol::probe::ReportError,
    },
    /// A request the probe library cannot be given.
    #[error(transparent)]
    PointRequest(#[from] strobe_protocol::probe::RequestError),
    /// Neither a binary nor a command to find one from.
    #[error("no binary to probe: name the ELF file, or the command that runs it")]
    NoBinary,
    /// A system call failed.
    #[error("{what} failed: {source}")]
    Sys {
        /// The call.
        what: String,
        /// The errno.
        source: std::io::Error,
    },
}
