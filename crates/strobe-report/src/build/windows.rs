//! Phase 7, windows: each window bucket's net counter sums to the function it is
//! attributed to under the [`WindowPolicy`] and to its start's call path. A window whose
//! start and end fall in different functions is an edge of the start's function (its
//! `edge_sums`, which bound what leaving it out costs); the discard policy drops it, the
//! fold policy gives it to the end's function.
//!
//! Owns: the exclusive window sums and the used/discarded counts. Must never subtract a
//! baseline (the aggregation pass did) or look at stacks beyond the start's path.

use super::addresses::Addresses;
use super::functions::Functions;
use super::paths::Paths;
use crate::report::WindowPolicy;
use crate::stats::WindowSums;
use crate::tally::WindowKey;

/// What the attribution of windows adds up to.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WindowTotals {
    /// Net sums over every attributed window.
    pub all: WindowSums,
    /// Windows attributed.
    pub used: u64,
    /// Windows the discard policy dropped.
    pub discarded: u64,
}

/// Attributes `windows` (with `addrs.windows`, their ends' indices) under `policy`.
pub(crate) fn attribute(
    windows: &[(WindowKey, WindowSums)],
    addrs: &Addresses,
    fns: &mut Functions,
    paths: &mut Paths,
    policy: WindowPolicy,
    width: usize,
) -> WindowTotals {
    let mut out = WindowTotals { all: WindowSums::new(width), used: 0, discarded: 0 };
    for ((key, net), &(s, e)) in windows.iter().zip(&addrs.windows) {
        let (Some(fs), Some(fe)) = (fns.of(s), fns.of(e)) else { continue };
        if fs != fe {
            if let Some(f) = fns.list.get_mut(fs) {
                f.edge_sums.merge(net);
            }
            if policy == WindowPolicy::Discard {
                out.discarded += net.n;
                continue;
            }
        }
        out.used += net.n;
        out.all.merge(net);
        if let Some(f) = fns.list.get_mut(fe) {
            f.windows += net.n;
            f.sums.merge(net);
        }
        let p = paths.of(fns, addrs, key.space, key.start_stack, None, fe);
        if let Some(ps) = paths.list.get_mut(p) {
            ps.sums.merge(net);
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::build::functions::{fold, tests::frame};

    /// A bucket of `n` windows from address `start_ip` to `end_ip` (space 0), each with
    /// leader delta `delta`.
    pub(crate) fn bucket(
        start_ip: u64,
        start_stack: u32,
        end_ip: u64,
        end_stack: u32,
        n: u64,
        delta: f64,
    ) -> (WindowKey, WindowSums) {
        let key = WindowKey { space: 0, start_ip, start_stack, end_ip, end_stack, plain: false };
        let mut sums = WindowSums::new(1);
        for _ in 0..n {
            sums.add_f64(&[delta]);
        }
        (key, sums)
    }

    fn run(policy: WindowPolicy) -> (Functions, Paths, WindowTotals) {
        // Address 0 in f, 1 in g. Buckets: 3 windows f..f, 2 windows f..g.
        let frames = [frame("f", "/bin/a", None), frame("g", "/bin/a", None)];
        let mut fns = fold(&frames, 1);
        let addrs = Addresses { windows: vec![(0, 0), (0, 1)], ..Addresses::default() };
        let windows = [bucket(0x10, 0, 0x10, 0, 3, 10.0), bucket(0x10, 0, 0x20, 0, 2, 20.0)];
        let mut paths = Paths::new(1);
        let t = attribute(&windows, &addrs, &mut fns, &mut paths, policy, 1);
        (fns, paths, t)
    }

    #[test]
    fn discard_keeps_only_windows_within_one_function() {
        let (fns, paths, t) = run(WindowPolicy::Discard);
        assert_eq!((t.used, t.discarded, t.all.n, t.all.sums[0]), (3, 2, 3, 30.0));
        let (f, g) = (&fns.list[0], &fns.list[1]);
        assert_eq!(
            (f.windows, f.sums.sums[0], f.edge_sums.n, f.edge_sums.sums[0]),
            (3, 30.0, 2, 40.0)
        );
        assert_eq!((g.windows, g.edge_sums.n), (0, 0));
        assert_eq!(paths.list.len(), 1);
        assert_eq!(paths.list[0].sums.n, 3);
    }

    #[test]
    fn fold_gives_a_crossing_window_to_where_it_ended() {
        let (fns, paths, t) = run(WindowPolicy::Fold);
        assert_eq!((t.used, t.discarded, t.all.sums[0]), (5, 0, 70.0));
        let (f, g) = (&fns.list[0], &fns.list[1]);
        assert_eq!((f.windows, f.edge_sums.n), (3, 2), "still an edge of where it began");
        assert_eq!((g.windows, g.sums.sums[0]), (2, 40.0));
        assert_eq!(
            paths.list.iter().map(|p| (p.frames.clone(), p.sums.n)).collect::<Vec<_>>(),
            [(vec![0], 3), (vec![1], 2)]
        );
    }
}
