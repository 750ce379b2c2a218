//! Phase 8, inclusive windows: a window counts for every call it stayed inside, the
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
use rustc_hash::FxHashMap;

use super::paths::{Seen, StackFunctions};
use crate::stats::WindowSums;
use crate::tally::WindowKey;

/// Attributes `windows` (with `addrs.windows`, their ends' indices) to the calls they
/// stayed inside.
///
/// A window is inside a prefix of its start path, and every function of that prefix
/// (once, however often it recurs) gets its sums. Done window by window that is a merge
/// per function per window; instead each window's sums go to the node of a trie of
/// those prefixes (one merge), and each function then takes, once, the sums under every
/// node where it first appears on the way from the root.
///
/// The calls a window left (on its start path past that prefix) depend only on the
/// start path and the prefix's length, so windows are first summed per (start path,
/// length) and each sum is merged into those calls once: most windows of a deep
/// program start and end on different paths, and merging each into every call it left
/// was most of this phase.
pub(crate) fn attribute(
    windows: &[(WindowKey, WindowSums)],
    addrs: &Addresses,
    fns: &mut Functions,
) {
    let mut stack_funcs = StackFunctions::default();
    let (mut start, mut end) = (Vec::new(), Vec::new());
    let mut trie = Trie::default();
    // Per (space, start stack, start function, prefix length), in the order first met:
    // the sums of the windows that left the calls past that prefix.
    let mut left: Vec<((u32, u32, usize, usize), WindowSums)> = Vec::new();
    let mut left_index: FxHashMap<(u32, u32, usize, usize), usize> = FxHashMap::default();
    for ((key, net), &(s, e)) in windows.iter().zip(&addrs.windows) {
        let (Some(fs), Some(fe)) = (fns.of(s), fns.of(e)) else { continue };
        stack_funcs.with_leaf(fns, addrs, key.space, key.start_stack, fs, &mut start);
        let k = if key.end_stack != 0 || key.start_stack == 0 {
            stack_funcs.with_leaf(fns, addrs, key.space, key.end_stack, fe, &mut end);
            start.iter().zip(&end).take_while(|(a, b)| a == b).count()
        } else {
            start.iter().rposition(|&g| g == fe).map_or(0, |k| k + 1)
        };
        let inside = start.get(..k).unwrap_or(&[]);
        trie.add(key.space, key.start_stack, fs, inside, net);
        if k < start.len() {
            let group = (key.space, key.start_stack, fs, k);
            let next = left.len();
            let i = *left_index.entry(group).or_insert(next);
            match left.get_mut(i) {
                Some((_, sums)) => sums.merge(net),
                None => left.push((group, net.clone())),
            }
        }
    }
    // The calls each group of windows left: it began inside them and ended outside.
    let mut seen = Seen::new(fns.list.len());
    for ((space, stack, fs, k), net) in &left {
        stack_funcs.with_leaf(fns, addrs, *space, *stack, *fs, &mut start);
        seen.clear();
        for &g in start.get(..*k).unwrap_or(&[]) {
            seen.insert(g);
        }
        let list = &mut fns.list;
        for &g in &start {
            if seen.insert(g) {
                if let Some(f) = list.get_mut(g) {
                    f.total_edge_sums.merge(net);
                }
            }
        }
    }
    trie.attribute(fns);
}

/// The prefixes windows stayed inside, as a trie of functions (node 0: the empty
/// prefix), with the sums of the windows that end at each node.
#[derive(Debug, Default)]
struct Trie {
    /// Per node: its parent and function (node 0: none).
    nodes: Vec<(u32, usize)>,
    children: FxHashMap<(u32, usize), u32>,
    /// Per node: the sums of the windows whose prefix it ends.
    sums: Vec<Option<WindowSums>>,
    /// Per (space, start stack, start function): the node of each prefix length.
    memo: FxHashMap<(u32, u32, usize), Vec<u32>>,
}

impl Trie {
    /// Adds `net` at the end of `inside` (a prefix of the start path of `stack` in
    /// `space` ending in `leaf`).
    fn add(&mut self, space: u32, stack: u32, leaf: usize, inside: &[usize], net: &WindowSums) {
        if inside.is_empty() {
            return;
        }
        if self.nodes.is_empty() {
            self.nodes.push((0, usize::MAX));
            self.sums.push(None);
        }
        let path = self.memo.entry((space, stack, leaf)).or_default();
        let (nodes, children, sums) = (&mut self.nodes, &mut self.children, &mut self.sums);
        while path.len() < inside.len() {
            let d = path.len();
            let parent = d.checked_sub(1).and_then(|p| path.get(p)).copied().unwrap_or(0);
            let g = inside.get(d).copied().unwrap_or(usize::MAX);
            let next = nodes.len() as u32;
            let id = *children.entry((parent, g)).or_insert_with(|| {
                nodes.push((parent, g));
                sums.push(None);
                next
            });
            path.push(id);
        }
        let Some(&node) = path.get(inside.len() - 1) else { return };
        if let Some(slot) = self.sums.get_mut(node as usize) {
            match slot {
                Some(s) => s.merge(net),
                None => *slot = Some(net.clone()),
            }
        }
    }

    /// Gives each function the sums under the nodes where it first appears on the way
    /// from the root.
    fn attribute(mut self, fns: &mut Functions) {
        // Children come after their parents: summing backwards gives each node its
        // subtree's sums.
        for u in (1..self.nodes.len()).rev() {
            let Some(sub) = self.sums.get_mut(u).and_then(Option::take) else { continue };
            let parent = self.nodes.get(u).map_or(0, |&(p, _)| p as usize);
            if parent != 0 {
                if let Some(slot) = self.sums.get_mut(parent) {
                    match slot {
                        Some(s) => s.merge(&sub),
                        None => *slot = Some(sub.clone()),
                    }
                }
            }
            if let Some(slot) = self.sums.get_mut(u) {
                *slot = Some(sub);
            }
        }
        for u in 1..self.nodes.len() {
            let Some(&(mut p, g)) = self.nodes.get(u) else { continue };
            let mut first = true;
            while p != 0 {
                let Some(&(pp, pg)) = self.nodes.get(p as usize) else { break };
                if pg == g {
                    first = false;
                    break;
                }
                p = pp;
            }
            let (Some(Some(sub)), Some(f)) = (self.sums.get(u), fns.list.get_mut(g)) else {
                continue;
            };
            if first {
                f.total_windows += sub.n;
                f.total_sums.merge(sub);
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
    fn a_recursive_call_path_counts_each_function_once() {
        // Stack 3: b's callers a, b, a, main (b <- a <- b <- a <- main); windows from b
        // to b on that stack, and from b to a (under b, a, main).
        let frames = ["main", "a", "b"].map(|n| frame(n, "/bin/p", None));
        let mut fns = fold(&frames, 1);
        let mut addrs = Addresses::default();
        addrs.stacks.insert((0, 3), vec![1, 2, 1, 0]);
        addrs.stacks.insert((0, 4), vec![2, 1, 0]);
        addrs.windows = vec![(2, 2), (2, 1)];
        let windows = [bucket(0x2, 3, 0x2, 3, 3, 1.0), bucket(0x2, 3, 0x1, 4, 2, 1.0)];
        attribute(&windows, &addrs, &mut fns);
        // All five windows are inside main, a and b (the second ended in the outer b's
        // call of a); none left any of them.
        assert_eq!(totals(&fns), [(5, 0), (5, 0), (5, 0)]);
        assert_eq!(fns.list[2].total_sums.sums[0], 5.0);
    }

    #[test]
    fn a_window_within_one_function_without_stacks_is_inside_it() {
        let (mut fns, mut addrs) = setup();
        addrs.windows = vec![(3, 3)];
        attribute(&[bucket(0x3, 0, 0x3, 0, 2, 1.0)], &addrs, &mut fns);
        assert_eq!(totals(&fns), [(0, 0), (0, 0), (0, 0), (2, 0)]);
    }
}
