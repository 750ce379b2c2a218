//! `strobe bench probe`. (Being built.)

use crate::{BenchError, BenchOpts, BenchReport};

/// Runs every variant of the `probe` benchmark side by side.
pub fn run(_opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    Err(BenchError::Other("strobe bench probe is not built yet".into()))
}
