//! `strobe bench sampling`. (Being built.)

use crate::{BenchError, BenchOpts, BenchReport};

/// Runs every variant of the `sampling` benchmark side by side.
pub fn run(_opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    Err(BenchError::Other("strobe bench sampling is not built yet".into()))
}
