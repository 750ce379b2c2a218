//! `strobe bench reclaim`. (Being built.)

use crate::{BenchError, BenchOpts, BenchReport};

/// Runs every variant of the `reclaim` benchmark side by side.
pub fn run(_opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    Err(BenchError::Other("strobe bench reclaim is not built yet".into()))
}
