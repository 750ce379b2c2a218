//! `strobe bench breakpoint`. (Being built.)

use crate::{BenchError, BenchOpts, BenchReport};

/// Runs every variant of the `breakpoint` benchmark side by side.
pub fn run(_opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    Err(BenchError::Other("strobe bench breakpoint is not built yet".into()))
}
