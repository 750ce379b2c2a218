//! Phase 5, off-CPU time (`strobe record --off-cpu`): each interval a thread spent
//! switched out, to the function it left the CPU in (self), its call path, and every
//! function on that path once (total); and the recording's totals.
//!
//! Owns: the off-CPU figures. Must never look at samples or windows.

use super::addresses::{Addresses, Key};
use super::functions::Functions;
use super::paths::{once_each, Paths, Seen};
use crate::report::OffCpuTotals;
use crate::tally::OffCpuSums;

/// Attributes the off-CPU `keys` (with `addrs.off_cpu`, their IPs' indices); their
/// totals, `None` when there are none.
pub(crate) fn attribute(
    keys: &[(Key, OffCpuSums)],
    addrs: &Addresses,
    fns: &mut Functions,
    paths: &mut Paths,
) -> Option<OffCpuTotals> {
    let mut seen = Seen::new(fns.list.len());
    let mut off_cpu: Option<OffCpuTotals> = None;
    for (&((space, _, stack), sums), &a) in keys.iter().zip(&addrs.off_cpu) {
        let totals = off_cpu.get_or_insert_with(OffCpuTotals::default);
        totals.intervals += sums.intervals;
        totals.ns = totals.ns.saturating_add(sums.ns);
        totals.preempted_ns = totals.preempted_ns.saturating_add(sums.preempted_ns);
        let Some(fi) = fns.of(a) else { continue };
        if let Some(f) = fns.list.get_mut(fi) {
            f.off_cpu_ns = f.off_cpu_ns.saturating_add(sums.ns);
            f.off_cpu_intervals += sums.intervals;
        }
        let p = paths.of(fns, addrs, space, stack, Some(a), fi);
        if let Some(ps) = paths.list.get_mut(p) {
            ps.off_cpu_ns = ps.off_cpu_ns.saturating_add(sums.ns);
            let list = &mut fns.list;
            once_each(&ps.frames, &mut seen, |g| {
                if let Some(f) = list.get_mut(g) {
                    f.total_off_cpu_ns = f.total_off_cpu_ns.saturating_add(sums.ns);
                }
            });
        }
    }
    off_cpu
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::functions::{fold, tests::frame};

    #[test]
    fn intervals_go_to_the_function_left_in_and_its_callers() {
        let frames = [frame("read", "/lib/c.so", None), frame("main", "/bin/a", None)];
        let mut fns = fold(&frames, 1);
        let mut addrs = Addresses { off_cpu: vec![0, 0], ..Addresses::default() };
        addrs.stacks.insert((0, 1), vec![1]);
        let sums = |intervals, ns, preempted_ns| OffCpuSums { intervals, ns, preempted_ns };
        let keys = [((0, 0x10, 1), sums(2, 300, 100)), ((0, 0x10, 0), sums(1, 50, 0))];
        let mut paths = Paths::new(1);
        let totals = attribute(&keys, &addrs, &mut fns, &mut paths).unwrap();
        assert_eq!(totals, OffCpuTotals { intervals: 3, ns: 350, preempted_ns: 100 });
        let (read, main) = (&fns.list[0], &fns.list[1]);
        assert_eq!((read.off_cpu_ns, read.total_off_cpu_ns, read.off_cpu_intervals), (350, 350, 3));
        assert_eq!((main.off_cpu_ns, main.total_off_cpu_ns), (0, 300));
        assert_eq!(paths.list.iter().map(|p| p.off_cpu_ns).collect::<Vec<_>>(), [300, 50]);
        assert!(attribute(&[], &addrs, &mut fns, &mut paths).is_none());
    }
}
