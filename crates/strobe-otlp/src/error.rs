//! The crate's errors: each one line that says what went wrong and what to do.
//!
//! Must never carry a type of another layer's CLI.

use std::path::PathBuf;

/// Why a recording could not be turned into OTLP or sent.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    /// Reading the record file failed.
    #[error(transparent)]
    Format(#[from] strobe_format::FormatError),
    /// Building a report failed.
    #[error(transparent)]
    Report(#[from] strobe_report::ReportError),
    /// A local file operation failed.
    #[error("cannot write {what}: {source}")]
    Io {
        /// What was being written or read.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The export settings are wrong (an endpoint, a header, a protocol).
    #[error("{0}")]
    Config(String),
    /// The CA file could not be used.
    #[error("cannot use the CA certificates in {path}: {why}; give a PEM file of CA certificates")]
    Ca {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// An https endpoint, no CA file given, and no system CA bundle to trust.
    #[error("no CA bundle found on this system for https; give a PEM file of CA certificates")]
    NoCaBundle,
    /// Sending failed for good; the message names the endpoint and the cause.
    #[error("{0}")]
    Send(String),
}

impl OtlpError {
    /// An I/O error while doing `what`.
    pub fn io(what: &str, source: std::io::Error) -> OtlpError {
        OtlpError::Io { what: what.to_string(), source }
    }
}
