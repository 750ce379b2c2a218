//! Phase 10, pruning: functions met only as the end of discarded windows (nothing
//! counted for them) and call paths with nothing on them are dropped, and the rest
//! renumbered, paths' function lists included.
//!
//! Owns: the final numbering. Must never change a count.

use crate::report::{FunctionStats, PathStats};

/// The functions and paths kept, and each old path index's new one (`usize::MAX`:
/// dropped).
pub(crate) fn prune(
    functions: Vec<FunctionStats>,
    mut paths: Vec<PathStats>,
) -> (Vec<FunctionStats>, Vec<PathStats>, Vec<usize>) {
    let keep = |f: &FunctionStats| {
        f.samples > 0 || f.windows > 0 || f.total_samples > 0 || f.total_off_cpu_ns > 0
    };
    let mut new_index = vec![usize::MAX; functions.len()];
    let mut kept = Vec::new();
    for (i, f) in functions.into_iter().enumerate() {
        if keep(&f) {
            new_index[i] = kept.len();
            kept.push(f);
        }
    }
    for p in &mut paths {
        p.frames.retain(|&g| new_index.get(g).is_some_and(|&n| n != usize::MAX));
        for g in &mut p.frames {
            *g = new_index[*g];
        }
    }
    let used = |p: &PathStats| p.samples > 0 || p.sums.n > 0 || p.off_cpu_ns > 0;
    let mut renumber = vec![usize::MAX; paths.len()];
    let mut next = 0;
    for (i, p) in paths.iter().enumerate() {
        if used(p) {
            renumber[i] = next;
            next += 1;
        }
    }
    paths.retain(used);
    (kept, paths, renumber)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_functions_and_paths_go_and_the_rest_are_renumbered() {
        let f = |name: &str, samples| {
            let mut f = FunctionStats::empty(name, "m", "/m", 1);
            f.samples = samples;
            f.total_samples = samples;
            f
        };
        let functions = vec![f("a", 1), f("gone", 0), f("b", 2)];
        let p = |frames: Vec<usize>, samples| {
            let mut p = PathStats::empty(frames, 1);
            p.samples = samples;
            p
        };
        let paths = vec![p(vec![1, 0], 0), p(vec![0, 1, 2], 2), p(vec![0], 1)];
        let (functions, paths, renumber) = prune(functions, paths);
        let names: Vec<&str> = functions.iter().map(|f| f.function.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            paths.iter().map(|p| p.frames.clone()).collect::<Vec<_>>(),
            [vec![0, 1], vec![0]]
        );
        assert_eq!(renumber, [usize::MAX, 0, 1]);
    }
}
