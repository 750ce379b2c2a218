//! Phase 7, inclusive windows: a window counts for every call it stayed inside, the
//! functions its start and end call paths share from the outermost frame down (the calls
//! active at both ends); without an end stack (none recorded), the functions on the start
//! path down to the one the window ended in. The calls the window left (on its start
//! path, not inside) get it as an edge (`total_edge_sums`). What a program measures
//! around each call of a function is what these sums measure.
//!
//! Owns: the inclusive window sums. Must never apply the window policy (a call's windows
//! are the windows inside it, wherever they ended within it).

use super::addresses::Addresses;
use super::functions::Functions;
use super::paths::{once_each, StackFunctions};
use crate::stats::WindowSums;
use crate::tally::WindowKey;

/// Attributes `windows` (with `addrs.windows`, their ends' indices) to the calls they
/// stayed inside.
pub(crate) fn attribute(
    windows: &[(WindowKey, WindowSums)],
    addrs: &Addresses,
    fns: &mut Functions,
) {
    let mut stack_funcs = StackFunctions::default();
    let (mut start, mut end, mut seen) = (Vec::new(), Vec::new(), Vec::new());
    for ((key, net), &(s, e)) in windows.iter().zip(&addrs.windows) {
        let (Some(fs), Some(fe)) = (fns.of(s), fns.of(e)) else { continue };
        stack_funcs.with_leaf(fns, addrs, key.space, key.start_stack, fs, &mut start);
        let inside: &[usize] = if key.end_stack != 0 || key.start_stack == 0 {
            stack_funcs.with_leaf(fns, addrs, key.space, key.end_stack, fe, &mut end);
            let k = start.iter().zip(&end).take_while(|(a, b)| a == b).count();
            &start[..k]
        } else {
            match start.iter().rposition(|&g| g == fe) {
                Some(k) => &start[..=k],
                None => &[],
            }
        };
        let list = &mut fns.list;
        once_each(inside, &mut seen, |g| {
            if let Some(f) = list.get_mut(g) {
                f.total_windows += net.n;
                f.total_sums.merge(net);
            }
        });
        // The calls the window left: it began inside them and ended outside.
        for &g in &start {
            if !seen.contains(&g) {
                seen.push(g);
                if let Some(f) = list.get_mut(g) {
                    f.total_edge_sums.merge(net);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::functions::{fold, tests::frame};
    use crate::build::windows::tests::bucket;

    /// Functions main (address 0), a (1), b (2), c (3); stack 1: a's caller main; stack
    /// 2: b's callers a, main (innermost first: frames at addresses 1, 0).
    fn setup() -> (Functions, Addresses) {
        let frames = ["main", "a", "b", "c"].map(|n| frame(n, "/bin/p", None));
        let fns = fold(&frames, 1);
        let mut addrs = Addresses::default();
        addrs.stacks.insert((0, 1), vec![0]);
        addrs.stacks.insert((0, 2), vec![1, 0]);
        (fns, addrs)
    }

    fn totals(fns: &Functions) -> Vec<(u64, u64)> {
        fns.list.iter().map(|f| (f.total_windows, f.total_edge_sums.n)).collect()
    }

    #[test]
    fn a_window_counts_for_the_calls_active_at_both_ends() {
        let (mut fns, mut addrs) = setup();
        // Started in b (under a, main), ended in a (under main): inside main and a; it
        // left b.
        addrs.windows = vec![(2, 1)];
        attribute(&[bucket(0x2, 2, 0x1, 1, 4, 1.0)], &addrs, &mut fns);
        assert_eq!(totals(&fns), [(4, 0), (4, 0), (0, 4), (0, 0)]);
    }

    #[test]
    fn without_an_end_stack_the_start_path_down_to_the_end_function() {
        let (mut fns, mut addrs) = setup();
        // Started in b (under a, main), ended in a, no end stack recorded.
        addrs.windows = vec![(2, 1)];
        attribute(&[bucket(0x2, 2, 0x1, 0, 1, 1.0)], &addrs, &mut fns);
        assert_eq!(totals(&fns), [(1, 0), (1, 0), (0, 1), (0, 0)]);
        // Ended in c, which is not on the start path: inside nothing, left everything.
        let (mut fns, mut addrs) = setup();
        addrs.windows = vec![(2, 3)];
        attribute(&[bucket(0x2, 2, 0x3, 0, 1, 1.0)], &addrs, &mut fns);
        assert_eq!(totals(&fns), [(0, 1), (0, 1), (0, 1), (0, 0)]);
    }

    #[test]
    fn a_window_within_one_function_without_stacks_is_inside_it() {
        let (mut fns, mut addrs) = setup();
        addrs.windows = vec![(3, 3)];
        attribute(&[bucket(0x3, 0, 0x3, 0, 2, 1.0)], &addrs, &mut fns);
        assert_eq!(totals(&fns), [(0, 0), (0, 0), (0, 0), (2, 0)]);
    }
}
