//! Phase 9, CPU time no sample could land in: threads before their sampling was armed
//! (thread start-up, the agent's per-thread set-up) and, when the process's own CPU time
//! is known, after it stopped (thread exit) and in the sampler's own handler. It gets
//! rows of its own, so every share is of the process's whole CPU time, as a program
//! measuring itself sees it.
//!
//! A recording with per-thread CPU times has it named (by [`crate::accounting`]): a row
//! per command and thread, `[not sampled] CMD: thread`, the command's process starts and
//! exits, and strobe's agent's own set-up ([`AGENT`], merged with the agent's sampled
//! frames). An older recording gives one total, shown as one row, [`UNSAMPLED`].
//!
//! Owns: the unsampled rows. Must never touch the sampled functions' counts.

use crate::report::{FunctionStats, PathStats, AGENT};

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

/// Adds the CPU time no sample stands for, named by process and thread (`rows`:
/// function, module, samples' worth), a function and path each; the agent's own set-up
/// joins the agent's row when its code was sampled. Returns the samples added.
pub(crate) fn add_unaccounted(
    rows: Vec<(String, String, f64)>,
    width: usize,
    functions: &mut Vec<FunctionStats>,
    paths: &mut Vec<PathStats>,
) -> u64 {
    let mut added = 0;
    for (function, module, n) in rows {
        let n = n.round() as u64;
        if n == 0 {
            continue;
        }
        let existing = (function == AGENT)
            .then(|| functions.iter().position(|f| f.function == AGENT))
            .flatten();
        let i = match existing {
            Some(i) => i,
            None => {
                functions.push(FunctionStats::empty(
                    &function,
                    &module,
                    &format!("[{module}]"),
                    width,
                ));
                functions.len() - 1
            }
        };
        functions[i].samples += n;
        functions[i].total_samples += n;
        let mut path = PathStats::empty(vec![i], width);
        path.samples = n;
        paths.push(path);
        added += n;
    }
    added
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

    #[test]
    fn named_rows_each_get_a_row_and_the_agents_set_up_joins_its_sampled_row() {
        let (mut fns, mut paths) = (Vec::new(), Vec::new());
        fns.push(FunctionStats::empty(AGENT, "libstrobe_agent.so", "/lib/libstrobe_agent.so", 1));
        fns[0].samples = 2;
        let rows = vec![
            ("[not sampled] sh".to_string(), "strobe".to_string(), 4.2),
            (AGENT.to_string(), "strobe".to_string(), 3.0),
            (
                "[not sampled] cc1: starts, exits and switches".to_string(),
                "strobe".to_string(),
                0.3,
            ),
        ];
        assert_eq!(add_unaccounted(rows, 1, &mut fns, &mut paths), 7);
        let got: Vec<(&str, u64)> = fns.iter().map(|f| (f.function.as_str(), f.samples)).collect();
        assert_eq!(got, [(AGENT, 5), ("[not sampled] sh", 4)]);
        assert_eq!(fns[1].module_path, "[strobe]");
        let p: Vec<(&[usize], u64)> =
            paths.iter().map(|p| (p.frames.as_slice(), p.samples)).collect();
        assert_eq!(p, [(&[1][..], 4), (&[0][..], 3)]);
    }
}
