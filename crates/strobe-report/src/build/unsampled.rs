//! Phase 8, CPU time no sample could land in: threads before their sampling was armed
//! (thread start-up, the agent's per-thread set-up) and, when the process's own CPU time
//! is known, after it stopped (thread exit) and in the sampler's own handler. It gets
//! rows of its own, so every share is of the process's whole CPU time, as a program
//! measuring itself sees it.
//!
//! Today the recording gives one total (in samples' worth, from the aggregation), shown
//! as one row, [`UNSAMPLED`]; rows per process and thread from exact per-task CPU times
//! belong here.
//!
//! Owns: the unsampled rows. Must never touch the sampled functions' counts.

use crate::report::{FunctionStats, PathStats};

/// The row of CPU time no sample could land in.
pub const UNSAMPLED: &str = "[not sampled]";

/// The module the unsampled row is shown in.
const MODULE: &str = "[strobe]";

/// Adds the unsampled time (`samples`, in samples' worth, rounded) as its own function
/// and call path; returns the samples added to the report's total.
pub(crate) fn add_rows(
    samples: f64,
    width: usize,
    functions: &mut Vec<FunctionStats>,
    paths: &mut Vec<PathStats>,
) -> u64 {
    let n = samples.round() as u64;
    if n == 0 {
        return 0;
    }
    let mut row = FunctionStats::empty(UNSAMPLED, MODULE, MODULE, width);
    row.samples = n;
    row.total_samples = n;
    functions.push(row);
    let mut path = PathStats::empty(vec![functions.len() - 1], width);
    path.samples = n;
    paths.push(path);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsampled_time_is_one_row_and_one_path() {
        let (mut fns, mut paths) = (Vec::new(), Vec::new());
        assert_eq!(add_rows(0.4, 2, &mut fns, &mut paths), 0, "under half a sample: nothing");
        assert!(fns.is_empty() && paths.is_empty());
        fns.push(FunctionStats::empty("f", "a", "/a", 2));
        assert_eq!(add_rows(2.6, 2, &mut fns, &mut paths), 3);
        let row = &fns[1];
        assert_eq!((row.function.as_str(), row.module.as_str()), (UNSAMPLED, "[strobe]"));
        assert_eq!((row.samples, row.total_samples, row.windows), (3, 3, 0));
        assert_eq!((paths[0].frames.as_slice(), paths[0].samples), (&[1][..], 3));
    }
}
