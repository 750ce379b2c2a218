//! strobe-uprobe: kernel uprobes on any function or USDT probe of any ELF file.
//!
//! The path from a probe as typed to a report:
//!
//! 1. [`spec::ProbeSpec`] parses `func`, `func+off`, `lib.so:func`, `usdt:provider:name`.
//! 2. [`resolve::Resolver`] reads the ELF files ([`elf`], [`usdt`]), finds libraries like
//!    the dynamic linker ([`libpath`], or a running process's [`maps`]), and turns the
//!    probe into (file, offset) sites, with "did you mean" errors.
//! 3. [`attach`] defines each site as a uprobe in tracefs and opens tracepoint events on
//!    it (they can be inherited by the target's threads), or, for threads that exist
//!    already, opens uprobe PMU events (`config1` = path, `config2` = offset, the retprobe
//!    bit and the USDT semaphore's `ref_ctr_offset` where sysfs says).
//! 4. [`session::Session`] forks the target held before exec ([`launch`]), attaches with
//!    `enable_on_exec` + `inherit`, releases it, collects counts (and, for latency and
//!    trace, ring-buffer samples matched per thread by [`latency`]) and reports.
//!
//! This crate must never run code inside the target: everything it learns comes from ELF
//! files, procfs and perf events.

pub mod attach;
pub mod elf;
pub mod latency;
pub mod launch;
pub mod libpath;
pub mod maps;
pub mod resolve;
pub mod session;
pub mod spec;
pub mod usdt;

use std::path::PathBuf;

pub use launch::Command;
pub use resolve::{ProbeKind, ResolvedProbe, Resolver, Site};
pub use session::{Hit, HitKind, Options, ProbeReport, Report, Session};
pub use spec::ProbeSpec;

/// Everything that can go wrong between a probe as typed and a report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file is not an ELF file strobe can probe.
    #[error("{}: not an ELF file strobe can probe: {why}", path.display())]
    NotElf {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
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
    /// The library part of a probe names no library.
    #[error(
        "library '{lib}' not found for {}: {why}{}",
        binary.display(),
        if known.is_empty() { String::new() } else { format!(" (it loads: {})", known.join(", ")) }
    )]
    LibraryNotFound {
        /// The library as typed.
        lib: String,
        /// The main binary.
        binary: PathBuf,
        /// The libraries the program loads.
        known: Vec<String>,
        /// Why it was not found.
        why: String,
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
    /// The target could not be started.
    #[error("cannot run '{program}': {source}")]
    Exec {
        /// The program as typed.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// A file could not be read.
    #[error("{what}: {source}")]
    Io {
        /// What was being read.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// A system call failed.
    #[error("{what} failed: {source}")]
    Sys {
        /// The call.
        what: String,
        /// The errno.
        source: std::io::Error,
    },
}

impl Error {
    /// A [`Error::Sys`] from `errno`.
    pub(crate) fn sys(what: &str) -> Error {
        Error::Sys { what: what.to_string(), source: std::io::Error::last_os_error() }
    }
}
