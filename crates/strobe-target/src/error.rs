//! The one error type of strobe-target: what went wrong while reading or starting a
//! target, phrased for the user (what and where, and what to do where there is a remedy).
//!
//! Must never carry a clap or anyhow type; callers wrap it in their own errors.

use std::path::PathBuf;

/// Everything that can go wrong while inspecting or starting a target.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file is not an ELF file strobe can read.
    #[error("{}: not an ELF file strobe can read: {why}", path.display())]
    NotElf {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The library part of a name names no library.
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
    /// The command names no executable file.
    #[error("cannot run '{program}': {why}")]
    ProgramNotFound {
        /// The program as typed.
        program: String,
        /// What was looked for, and where.
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
