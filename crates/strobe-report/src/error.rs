//! The errors a report can end in, each phrased for the user: what went wrong and what
//! to do about it.
//!
//! Owns the error type. Must never carry a panic's text or a bare OS error without the
//! file or step it concerns.

/// Why a report could not be built or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The record file is missing, unreadable, corrupt or of another version; the
    /// message names the file and, for damage, the byte offset.
    /// (Its message already includes the underlying I/O error, so it is not exposed as
    /// a source: printing the chain would repeat it.)
    #[error("{0}")]
    Read(strobe_format::FormatError),
    /// The recording names no counters at all.
    #[error(
        "the recording lists no events; it is not a strobe recording or its header is damaged"
    )]
    NoEvents,
    /// More counters per sample than the engine carries.
    #[error("the recording has {count} counters per sample; strobe report handles at most {max}")]
    TooManyCounters {
        /// Counters in the recording.
        count: usize,
        /// The engine's limit.
        max: usize,
    },
    /// A perf.data file is missing, unreadable, corrupt, or uses what strobe does not
    /// read (a compressed or big-endian file); the message names the file and, for
    /// damage, the byte offset.
    #[error("{}", perf_data_message(file, error))]
    PerfData {
        /// The file (empty when the data did not come from a file).
        file: String,
        /// What went wrong.
        error: strobe_perfdata::Error,
    },
    /// `--event` named no event of the perf.data file.
    #[error("the perf.data file has no event '{event}'; choose one of: {choices}")]
    UnknownEvent {
        /// What was asked for.
        event: String,
        /// The events the file has.
        choices: String,
    },
    /// `--sort` named no column.
    #[error("unknown sort column '{column}'; choose one of: {choices}")]
    UnknownSort {
        /// What was asked for.
        column: String,
        /// The columns this report has.
        choices: String,
    },
    /// A view could not be written.
    #[error("cannot write {what}: {source}")]
    Write {
        /// What was being written (a file name, "the flame graph").
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A metric name (`--color-by`) names no metric.
    #[error("unknown metric '{metric}'; choose one of: {choices}")]
    UnknownMetric {
        /// What was asked for.
        metric: String,
        /// The metrics this recording has.
        choices: String,
    },
    /// A metric (`--color-by`) needs counters the recording lacks.
    #[error(
        "cannot use '{metric}': it needs {needs}, which this recording lacks; record them with -e"
    )]
    MetricNotRecorded {
        /// What was asked for.
        metric: String,
        /// The counters it needs.
        needs: String,
    },
    /// `--sort` named a metric whose counters were not recorded.
    #[error("cannot sort by '{column}': it needs {needs}, which this recording lacks; record them with -e")]
    SortNotRecorded {
        /// What was asked for.
        column: String,
        /// The counters the metric needs.
        needs: String,
    },
}

impl ReportError {
    /// A write error, naming what was being written.
    pub fn write(what: impl Into<String>, source: std::io::Error) -> ReportError {
        ReportError::Write { what: what.into(), source }
    }
}

impl From<strobe_format::FormatError> for ReportError {
    fn from(e: strobe_format::FormatError) -> Self {
        ReportError::Read(e)
    }
}

fn perf_data_message(file: &str, error: &strobe_perfdata::Error) -> String {
    match error {
        // The I/O error already names the file.
        strobe_perfdata::Error::Io { .. } => error.to_string(),
        _ if file.is_empty() => error.to_string(),
        _ => format!("{file}: {error}"),
    }
}
