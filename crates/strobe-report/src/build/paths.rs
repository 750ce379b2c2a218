//! Phase 3, call paths: a sample's or window's stack as the functions on it, outermost
//! caller first and the function itself last, one [`PathStats`] per distinct path. With
//! inlined frames, each address contributes the functions it is inlined into before its
//! own. Most samples and windows share a (stack, leaf), so each one's path is built and
//! looked up once.
//!
//! Also the helpers the counting phases share: each stack's functions, and "once per
//! function on a path, however often it recurs".
//!
//! Owns: the path list. Must never count samples or windows itself.

use rustc_hash::FxHashMap;

use super::addresses::Addresses;
use super::functions::Functions;
use crate::report::PathStats;

/// (space, stack, the leaf's address when the leaf is a sampled IP, the leaf function).
type PathKey = (u32, u32, Option<usize>, usize);

/// The call paths met so far.
#[derive(Debug)]
pub(crate) struct Paths {
    /// Every path, in the order first met.
    pub list: Vec<PathStats>,
    index: FxHashMap<Vec<usize>, usize>,
    memo: FxHashMap<PathKey, usize>,
    width: usize,
    /// The path being built (a new path's own vector is allocated only when it is new).
    scratch: Vec<usize>,
}

impl Paths {
    /// No paths yet; their sums will have `width` counters.
    pub(crate) fn new(width: usize) -> Paths {
        Paths {
            list: Vec::new(),
            index: FxHashMap::default(),
            memo: FxHashMap::default(),
            width,
            scratch: Vec::new(),
        }
    }

    /// The index of the path of stack `stack` in `space` ending in function `leaf` (at
    /// address `leaf_addr`, whose inlined callers come before it, when given), created
    /// empty when new.
    pub(crate) fn of(
        &mut self,
        fns: &Functions,
        addrs: &Addresses,
        space: u32,
        stack: u32,
        leaf_addr: Option<usize>,
        leaf: usize,
    ) -> usize {
        if let Some(&i) = self.memo.get(&(space, stack, leaf_addr, leaf)) {
            return i;
        }
        let mut fr = std::mem::take(&mut self.scratch);
        fr.clear();
        let push_addr = |fr: &mut Vec<usize>, a: usize| {
            if let Some(chain) = fns.inline_callers.get(a) {
                fr.extend_from_slice(chain);
            }
        };
        for &a in addrs.frames(space, stack).iter().rev() {
            if fns.is_agent(a) {
                continue;
            }
            push_addr(&mut fr, a);
            fr.extend(fns.of(a));
        }
        if let Some(a) = leaf_addr {
            push_addr(&mut fr, a);
        }
        fr.push(leaf);
        let i = match self.index.get(fr.as_slice()) {
            Some(&i) => i,
            None => {
                self.list.push(PathStats::empty(fr.clone(), self.width));
                self.index.insert(fr.clone(), self.list.len() - 1);
                self.list.len() - 1
            }
        };
        self.scratch = fr;
        self.memo.insert((space, stack, leaf_addr, leaf), i);
        i
    }
}

/// A set of functions, emptied in constant time: a stamp per function, and the stamp of
/// the set's current generation (so a path of `d` frames costs `d`, not `d²`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen {
    stamp: Vec<u32>,
    generation: u32,
}

impl Seen {
    /// An empty set of functions `0..n`.
    pub(crate) fn new(n: usize) -> Seen {
        Seen { stamp: vec![0; n], generation: 1 }
    }

    /// Empties the set.
    #[inline]
    pub(crate) fn clear(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        if self.generation == 0 {
            self.stamp.fill(0);
            self.generation = 1;
        }
    }

    /// Adds `g`; true when it was not in the set (functions out of range never are).
    #[inline]
    pub(crate) fn insert(&mut self, g: usize) -> bool {
        match self.stamp.get_mut(g) {
            Some(s) if *s == self.generation => false,
            Some(s) => {
                *s = self.generation;
                true
            }
            None => true,
        }
    }
}

/// Calls `f` once for each distinct function of `frames`, in order (`seen` is scratch,
/// emptied first).
#[inline]
pub(crate) fn once_each(frames: &[usize], seen: &mut Seen, mut f: impl FnMut(usize)) {
    seen.clear();
    for &g in frames {
        if seen.insert(g) {
            f(g);
        }
    }
}

/// Each stack's functions, outermost first (inlined callers left out), built once per
/// stack.
#[derive(Debug, Default)]
pub(crate) struct StackFunctions {
    memo: FxHashMap<(u32, u32), Vec<usize>>,
}

impl StackFunctions {
    /// Sets `out` to the functions of stack `stack` in `space`, outermost first, then
    /// `leaf`.
    pub(crate) fn with_leaf(
        &mut self,
        fns: &Functions,
        addrs: &Addresses,
        space: u32,
        stack: u32,
        leaf: usize,
        out: &mut Vec<usize>,
    ) {
        let fr = self.memo.entry((space, stack)).or_insert_with(|| {
            addrs.frames(space, stack).iter().rev().filter_map(|&a| fns.of(a)).collect()
        });
        out.clear();
        out.extend_from_slice(fr);
        out.push(leaf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Addresses 0..n, address `i` in function `of[i]`; stack 1 in space 0 has frames
    /// `stack` (innermost first).
    fn setup(
        of: &[usize],
        inline: &[(usize, Vec<usize>)],
        stack: &[usize],
    ) -> (Functions, Addresses) {
        let mut fns = Functions { of_addr: of.to_vec(), ..Functions::default() };
        fns.inline_callers = vec![Vec::new(); of.len()];
        for (a, chain) in inline {
            fns.inline_callers[*a] = chain.clone();
        }
        let mut addrs = Addresses::default();
        addrs.stacks.insert((0, 1), stack.to_vec());
        (fns, addrs)
    }

    #[test]
    fn a_path_is_its_callers_outermost_first_then_the_function_and_is_made_once() {
        // Address 0 in f0 (the sampled IP), 1 in f1, 2 in f2; the stack: 1 under 2.
        let (fns, addrs) = setup(&[0, 1, 2], &[], &[1, 2]);
        let mut p = Paths::new(3);
        let i = p.of(&fns, &addrs, 0, 1, Some(0), 0);
        assert_eq!(p.list[i].frames, [2, 1, 0]);
        assert_eq!(p.list[i].sums.width(), 3);
        assert_eq!(p.of(&fns, &addrs, 0, 1, Some(0), 0), i, "memoized");
        // The same functions reached another way are the same path.
        assert_eq!(p.of(&fns, &addrs, 0, 1, None, 0), i);
        let j = p.of(&fns, &addrs, 0, 0, Some(0), 0);
        assert_eq!(p.list[j].frames, [0], "no stack: the function alone");
        assert_eq!(p.list.len(), 2);
    }

    #[test]
    fn inlined_callers_come_before_each_address_function() {
        // Address 0: f3 inlined into f4 (leaf); address 1 in f1 inlined into f5.
        let (fns, addrs) = setup(&[3, 1], &[(0, vec![4]), (1, vec![5])], &[1]);
        let mut p = Paths::new(1);
        let i = p.of(&fns, &addrs, 0, 1, Some(0), 3);
        assert_eq!(p.list[i].frames, [5, 1, 4, 3]);
        let mut sf = StackFunctions::default();
        let mut out = Vec::new();
        sf.with_leaf(&fns, &addrs, 0, 1, 9, &mut out);
        assert_eq!(out, [1, 9], "stack functions leave inlined callers out");
    }

    #[test]
    fn once_each_skips_recursion() {
        let mut got = Vec::new();
        let mut seen = Seen::new(4);
        once_each(&[1, 2, 1, 3, 2], &mut seen, |g| got.push(g));
        assert_eq!(got, [1, 2, 3]);
        once_each(&[2, 2, 9], &mut seen, |g| got.push(g));
        assert_eq!(got, [1, 2, 3, 2, 9], "emptied first; out of range counts each time");
    }
}
