//! Phase 6, window groups: window buckets that the later window phases cannot tell
//! apart, merged. Those phases look at a bucket's address space, its start and end
//! stacks and the functions its start and end IPs fold to, never at the IPs
//! themselves; buckets are keyed by IP, so a deep program's windows (whose every start
//! and end IP differs) make nearly one bucket per window. Grouped, they are a third as
//! many in a 6 s recording of the deep test program (35,370 buckets, 11,036 groups), and
//! each phase after this works once per group.
//!
//! Owns: the grouping. Must never attribute a window to a function or path.

use rustc_hash::FxHashMap;

use super::addresses::Addresses;
use super::functions::Functions;
use crate::stats::WindowSums;
use crate::tally::WindowKey;

/// Merges `windows` (with `addrs.windows`, their start and end IPs' indices) into groups
/// of the same space, start and end stacks and start and end functions, in the order
/// first met. Each group carries its first bucket's key and IPs; `addrs.windows` is
/// set to the groups' IPs. Buckets whose IPs fold to no function are left out, as the
/// window phases leave them out.
pub(crate) fn group(
    windows: &[(WindowKey, WindowSums)],
    addrs: &mut Addresses,
    fns: &Functions,
) -> Vec<(WindowKey, WindowSums)> {
    type GroupKey = (u32, u32, u32, usize, usize);
    let mut index: FxHashMap<GroupKey, usize> = FxHashMap::default();
    let mut out: Vec<(WindowKey, WindowSums)> = Vec::new();
    let mut ends = Vec::new();
    for ((key, net), &(s, e)) in windows.iter().zip(&addrs.windows) {
        let (Some(fs), Some(fe)) = (fns.of(s), fns.of(e)) else { continue };
        let next = out.len();
        let i = *index.entry((key.space, key.start_stack, key.end_stack, fs, fe)).or_insert(next);
        match out.get_mut(i) {
            Some((_, sums)) => sums.merge(net),
            None => {
                out.push((*key, net.clone()));
                ends.push((s, e));
            }
        }
    }
    addrs.windows = ends;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::functions::{fold, tests::frame};
    use crate::build::windows::tests::bucket;

    #[test]
    fn buckets_differing_only_in_ips_of_the_same_functions_are_one_group() {
        // Addresses 0 and 1 in f, 2 in g, 3 in h.
        let frames = [
            frame("f", "/bin/p", None),
            frame("f", "/bin/p", None),
            frame("g", "/bin/p", None),
            frame("h", "/bin/p", None),
        ];
        let fns = fold(&frames, 1);
        // Buckets: f->g (IPs 0, 2), f->g from the other IP of f (1, 2), f->g on another
        // start stack, f->h.
        let mut addrs =
            Addresses { windows: vec![(0, 2), (1, 2), (0, 2), (1, 3)], ..Addresses::default() };
        let windows = [
            bucket(0x10, 1, 0x20, 1, 2, 1.0),
            bucket(0x11, 1, 0x20, 1, 3, 2.0),
            bucket(0x10, 2, 0x20, 1, 1, 4.0),
            bucket(0x11, 1, 0x30, 1, 5, 1.0),
        ];
        let g = group(&windows, &mut addrs, &fns);
        assert_eq!(g.len(), 3);
        assert_eq!(addrs.windows, [(0, 2), (0, 2), (1, 3)], "each group's first IPs");
        assert_eq!((g[0].0.start_ip, g[0].1.n, g[0].1.sums[0]), (0x10, 5, 2.0 + 6.0));
        assert_eq!((g[1].0.start_stack, g[1].1.n), (2, 1));
        assert_eq!((g[2].0.end_ip, g[2].1.n), (0x30, 5));
    }
}
