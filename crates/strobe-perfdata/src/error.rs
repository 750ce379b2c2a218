//! Why a perf.data file could not be read. Every variant that points at damage carries
//! the byte offset (from the start of the file or stream) where it was found.
//!
//! This module must never hide a cut or a corruption behind a default value.

use std::io;
use std::path::PathBuf;

/// Why a perf.data file (or stream) could not be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The bytes do not start with perf's magic.
    #[error("not a perf.data file (it starts with {found:?}, not \"PERFILE2\"); write one with `perf record -o FILE`")]
    NotPerfData {
        /// The first bytes, as text.
        found: String,
    },
    /// The file was written on a big-endian machine.
    #[error("this perf.data was written on a big-endian machine (magic \"2ELIFREP\"); strobe reads little-endian perf.data only: run `perf report` there")]
    BigEndian,
    /// The records are zstd-compressed (`perf record -z`).
    #[error("byte {offset}: a zstd-compressed record (perf record -z) met by a reader of raw bytes; read the file through its uncompressed image (strobe_perfdata::decompress)")]
    Compressed {
        /// Where the compressed data (or the header announcing it) is.
        offset: u64,
    },
    /// The file ends inside something it announced: perf was killed, or the copy is
    /// incomplete.
    #[error("the file is cut short: {what} at byte {offset} needs {need} bytes but the file ends at byte {end}; copy the file again or record again")]
    Truncated {
        /// Where the cut item starts.
        offset: u64,
        /// What was cut (a record, the attr section, ...).
        what: &'static str,
        /// Bytes the item needs.
        need: u64,
        /// Where the file ends.
        end: u64,
    },
    /// Something in the file contradicts the format.
    #[error("corrupt perf.data at byte {offset}: {what}")]
    Corrupt {
        /// Where the damage is.
        offset: u64,
        /// What is wrong, in a few words.
        what: String,
    },
}

impl Error {
    /// The byte offset of the damage, when the error is about damage.
    pub fn offset(&self) -> Option<u64> {
        match self {
            Error::Compressed { offset }
            | Error::Truncated { offset, .. }
            | Error::Corrupt { offset, .. } => Some(*offset),
            Error::Io { .. } | Error::NotPerfData { .. } | Error::BigEndian => None,
        }
    }

    pub(crate) fn corrupt(offset: u64, what: impl Into<String>) -> Error {
        Error::Corrupt { offset, what: what.into() }
    }
}
