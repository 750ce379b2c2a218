//! Phase 1, address interning: every address the report names, once, in one list that
//! the symbolizer takes whole: sampled IPs, the start and end IPs of every window bucket,
//! the IPs off-CPU intervals left at, and the frames of every stack those use (return
//! addresses, taken one byte back so they land in the call instruction, not in the next
//! line or function).
//!
//! The list's order is the order addresses are first met (samples, off-CPU intervals,
//! windows, then stacks), which fixes the order functions are created in later.
//!
//! Owns: the interning. Must never symbolize or count.

use rustc_hash::FxHashMap;

use crate::stacks::StackTables;
use crate::stats::WindowSums;
use crate::tally::{OffCpuSums, WindowKey};

/// A time-sample or off-CPU key: (space, IP, stack).
pub(crate) type Key = (u32, u64, u32);

/// The interned addresses, and where each key's addresses are in the list.
#[derive(Debug, Default)]
pub(crate) struct Addresses {
    /// Every unique (space, address).
    pub list: Vec<(u32, u64)>,
    /// Per time-sample key (in the order given), its IP's index.
    pub samples: Vec<usize>,
    /// Per off-CPU key, its IP's index.
    pub off_cpu: Vec<usize>,
    /// Per window bucket, its start and end IPs' indices.
    pub windows: Vec<(usize, usize)>,
    /// Per (space, stack) used: its frames' indices, innermost caller first.
    pub stacks: FxHashMap<(u32, u32), Vec<usize>>,
}

impl Addresses {
    /// The frames of stack `stack` in `space`, innermost first (none for stack 0 or one
    /// no key used).
    pub(crate) fn frames(&self, space: u32, stack: u32) -> &[usize] {
        self.stacks.get(&(space, stack)).map_or(&[], Vec::as_slice)
    }
}

/// Interns the addresses of `samples`, `off_cpu` and `windows`, and of the stacks they
/// use from `stacks`.
pub(crate) fn intern(
    samples: &[(Key, u64)],
    off_cpu: &[(Key, OffCpuSums)],
    windows: &[(WindowKey, WindowSums)],
    stacks: &StackTables,
) -> Addresses {
    let mut index: FxHashMap<(u32, u64), usize> = FxHashMap::default();
    let mut out = Addresses::default();
    let mut intern = |list: &mut Vec<(u32, u64)>, a: (u32, u64)| {
        *index.entry(a).or_insert_with(|| {
            list.push(a);
            list.len() - 1
        })
    };
    for &((sp, ip, _), _) in samples {
        let i = intern(&mut out.list, (sp, ip));
        out.samples.push(i);
    }
    for &((sp, ip, _), _) in off_cpu {
        let i = intern(&mut out.list, (sp, ip));
        out.off_cpu.push(i);
    }
    for (k, _) in windows {
        let s = intern(&mut out.list, (k.space, k.start_ip));
        let e = intern(&mut out.list, (k.space, k.end_ip));
        out.windows.push((s, e));
    }
    let used = samples
        .iter()
        .map(|&((sp, _, st), _)| (sp, st))
        .chain(windows.iter().map(|(k, _)| (k.space, k.start_stack)))
        .chain(windows.iter().map(|(k, _)| (k.space, k.end_stack)))
        .chain(off_cpu.iter().map(|&((sp, _, st), _)| (sp, st)));
    for (sp, st) in used {
        if st == 0 || out.stacks.contains_key(&(sp, st)) {
            continue;
        }
        let mut v = Vec::new();
        stacks.for_each_frame(sp, st, |addr| {
            v.push(intern(&mut out.list, (sp, addr.saturating_sub(1))))
        });
        out.stacks.insert((sp, st), v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::StackNode;

    fn window(
        start_ip: u64,
        start_stack: u32,
        end_ip: u64,
        end_stack: u32,
    ) -> (WindowKey, WindowSums) {
        let key = WindowKey { space: 0, start_ip, start_stack, end_ip, end_stack, plain: false };
        (key, WindowSums::new(1))
    }

    #[test]
    fn each_address_once_in_first_met_order_and_return_addresses_one_byte_back() {
        let mut stacks = StackTables::default();
        // Stack 2: caller 0x501 under 0x601 (innermost first: 0x501, 0x601).
        stacks.add_nodes(
            0,
            1,
            &[StackNode { parent: 0, addr: 0x601 }, StackNode { parent: 1, addr: 0x501 }],
        );
        let samples = [((0, 0x100, 2), 5), ((0, 0x200, 0), 1), ((0, 0x100, 0), 2)];
        let off = [((0, 0x300, 1), OffCpuSums::default())];
        let windows = [window(0x100, 2, 0x400, 0), window(0x200, 0, 0x100, 2)];
        let a = intern(&samples, &off, &windows, &stacks);
        assert_eq!(
            a.list,
            [(0, 0x100), (0, 0x200), (0, 0x300), (0, 0x400), (0, 0x500), (0, 0x600)]
        );
        assert_eq!(a.samples, [0, 1, 0]);
        assert_eq!(a.off_cpu, [2]);
        assert_eq!(a.windows, [(0, 3), (1, 0)]);
        assert_eq!(a.frames(0, 2), [4, 5], "innermost first, one byte back");
        assert_eq!(a.frames(0, 1), [5]);
        assert!(a.frames(0, 0).is_empty() && a.frames(0, 9).is_empty());
    }

    #[test]
    fn the_same_ip_in_two_spaces_is_two_addresses() {
        let samples = [((0, 0x100, 0), 1), ((1, 0x100, 0), 1)];
        let a = intern(&samples, &[], &[], &StackTables::default());
        assert_eq!(a.list, [(0, 0x100), (1, 0x100)]);
        assert_eq!(a.samples, [0, 1]);
    }
}
