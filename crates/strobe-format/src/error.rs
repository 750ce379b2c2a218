//! Errors of reading a record file, each naming the file and, for damage, the byte offset.
//!
//! Owns [`FormatError`]: every way reading a recording can fail, each one line that names
//! the file (and the byte offset where damage starts) and, where the user can act, what to
//! do. It must never hold anything but the values its message needs (no I/O, no retry
//! policy: whether to stop at the first error or salvage the rest is the caller's).

use std::io;
use std::path::PathBuf;

/// Why a record file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file does not start with strobe's magic bytes.
    #[error("{path}: not a strobe recording (it does not start with \"STROBE\"); record one with `strobe record -o FILE`")]
    NotARecording {
        /// The file.
        path: PathBuf,
    },
    /// The file was written by an incompatible strobe.
    #[error("{path}: record format version {found} is not supported (this strobe reads version {supported}); {}", if found < supported { "it was recorded by an older strobe: record it again with this one" } else { "it was recorded by a newer strobe: report it with that one" })]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version in the file.
        found: u16,
        /// The version this reader understands.
        supported: u16,
    },
    /// The file ends before its header is complete (the recorder was stopped at once).
    #[error(
        "{path}: the recording ends at byte {offset}, before its header is complete; record again"
    )]
    NoHeader {
        /// The file.
        path: PathBuf,
        /// Where the file ends.
        offset: u64,
    },
    /// A chunk is damaged.
    #[error("{path}: corrupt recording at byte {offset}: {what}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset of the damaged chunk (or value) in the file.
        offset: u64,
        /// What is wrong.
        what: String,
    },
}

impl FormatError {
    /// The byte offset of the damage, for [`FormatError::Corrupt`].
    pub fn offset(&self) -> Option<u64> {
        match self {
            FormatError::Corrupt { offset, .. } | FormatError::NoHeader { offset, .. } => {
                Some(*offset)
            }
            _ => None,
        }
    }
}
