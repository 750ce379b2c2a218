//! `strobe bench readside`. (Being built.)

use crate::{BenchError, BenchOpts, BenchReport};

/// Runs every variant of the `readside` benchmark side by side.
pub fn run(_opts: &BenchOpts) -> Result<BenchReport, BenchError> {
    Err(BenchError::Other("strobe bench readside is not built yet".into()))
}
