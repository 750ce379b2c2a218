//! The red-black tree Linux perf keeps a file's symbols in, rebuilt node for node, so that
//! a lookup meets the same symbol perf's does when symbols overlap (a zero-size symbol
//! stretched over the PLT entries perf adds afterwards, nested assembly labels): perf
//! returns the first symbol holding the address on the path from the root, and the path
//! depends on the tree's shape.
//!
//! Insertion and deletion are the textbook ones (Cormen et al., chapter 13: insertion
//! fix-up, deletion by the in-order successor, deletion fix-up), which is what the
//! kernel's `lib/rbtree.c` implements; keys go left when smaller and right otherwise, so
//! equal keys keep their insertion order. Node `i` is symbol `i` of the caller's list;
//! a deleted node keeps its slot, unlinked.
//!
//! Owns: the shape. Must never reorder nodes with equal keys or move a key between nodes
//! (deletion relinks nodes, as the kernel's does).

/// No node.
const NIL: u32 = u32::MAX;

/// A side of a node; the rotations and fix-ups are written for one side and run mirrored
/// for the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Left,
    Right,
}

impl Side {
    fn mirror(self) -> Side {
        match self {
            Side::Left => Side::Right,
            Side::Right => Side::Left,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Node {
    left: u32,
    right: u32,
    parent: u32,
    red: bool,
}

/// A red-black tree over node indices whose keys the caller holds.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tree {
    nodes: Vec<Node>,
    root: Option<u32>,
}

impl Tree {
    /// The memory the nodes hold, bytes.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>()
    }

    fn left(&self, n: u32) -> u32 {
        self.nodes.get(n as usize).map_or(NIL, |x| x.left)
    }

    fn right(&self, n: u32) -> u32 {
        self.nodes.get(n as usize).map_or(NIL, |x| x.right)
    }

    fn child(&self, n: u32, side: Side) -> u32 {
        match side {
            Side::Left => self.left(n),
            Side::Right => self.right(n),
        }
    }

    fn parent(&self, n: u32) -> u32 {
        self.nodes.get(n as usize).map_or(NIL, |x| x.parent)
    }

    /// NIL is black.
    fn is_red(&self, n: u32) -> bool {
        self.nodes.get(n as usize).is_some_and(|x| x.red)
    }

    fn set_red(&mut self, n: u32, red: bool) {
        if let Some(x) = self.nodes.get_mut(n as usize) {
            x.red = red;
        }
    }

    fn set_left(&mut self, n: u32, c: u32) {
        if let Some(x) = self.nodes.get_mut(n as usize) {
            x.left = c;
        }
    }

    fn set_right(&mut self, n: u32, c: u32) {
        if let Some(x) = self.nodes.get_mut(n as usize) {
            x.right = c;
        }
    }

    fn set_child(&mut self, n: u32, side: Side, c: u32) {
        match side {
            Side::Left => self.set_left(n, c),
            Side::Right => self.set_right(n, c),
        }
    }

    fn set_parent(&mut self, n: u32, p: u32) {
        if let Some(x) = self.nodes.get_mut(n as usize) {
            x.parent = p;
        }
    }

    fn root(&self) -> u32 {
        self.root.unwrap_or(NIL)
    }

    /// Makes `new` take `old`'s place under `old`'s parent (or as the root).
    fn replace_child(&mut self, old: u32, new: u32) {
        let p = self.parent(old);
        if p == NIL {
            self.root = (new != NIL).then_some(new);
        } else if self.left(p) == old {
            self.set_left(p, new);
        } else {
            self.set_right(p, new);
        }
        self.set_parent(new, p);
    }

    /// Rotates `x` down to its `side`: its child on the other side takes its place.
    fn rotate(&mut self, x: u32, side: Side) {
        let other = side.mirror();
        let y = self.child(x, other);
        let b = self.child(y, side);
        self.set_child(x, other, b);
        self.set_parent(b, x);
        self.replace_child(x, y);
        self.set_child(y, side, x);
        self.set_parent(x, y);
    }

    /// Inserts the next node (its index is the number of nodes so far) with key `key`;
    /// `key_of` gives the keys of nodes already in.
    pub(super) fn insert(&mut self, key: u64, key_of: impl Fn(u32) -> u64) -> u32 {
        let z = self.nodes.len() as u32;
        let (mut parent, mut at, mut go_left) = (NIL, self.root(), false);
        while at != NIL {
            parent = at;
            go_left = key < key_of(at);
            at = if go_left { self.left(at) } else { self.right(at) };
        }
        self.nodes.push(Node { left: NIL, right: NIL, parent, red: true });
        if parent == NIL {
            self.root = Some(z);
        } else if go_left {
            self.set_left(parent, z);
        } else {
            self.set_right(parent, z);
        }
        self.insert_fixup(z);
        z
    }

    /// Restores the red-black properties after `z` was linked in red: the textbook
    /// cases, written for `z`'s parent on the grandparent's `side`.
    fn insert_fixup(&mut self, mut z: u32) {
        while self.is_red(self.parent(z)) {
            let p = self.parent(z);
            let g = self.parent(p);
            let side = if p == self.left(g) { Side::Left } else { Side::Right };
            let other = side.mirror();
            let uncle = self.child(g, other);
            if self.is_red(uncle) {
                self.set_red(p, false);
                self.set_red(uncle, false);
                self.set_red(g, true);
                z = g;
                continue;
            }
            if z == self.child(p, other) {
                z = p;
                self.rotate(z, side);
            }
            let p = self.parent(z);
            let g = self.parent(p);
            self.set_red(p, false);
            self.set_red(g, true);
            self.rotate(g, other);
        }
        let r = self.root();
        self.set_red(r, false);
    }

    fn minimum(&self, mut n: u32) -> u32 {
        while self.left(n) != NIL {
            n = self.left(n);
        }
        n
    }

    /// The first node in key order.
    #[cfg(test)]
    pub(super) fn first(&self) -> Option<u32> {
        let r = self.root();
        (r != NIL).then(|| self.minimum(r))
    }

    /// The node after `n` in key order.
    #[cfg(test)]
    pub(super) fn next(&self, n: u32) -> Option<u32> {
        if self.right(n) != NIL {
            return Some(self.minimum(self.right(n)));
        }
        let (mut c, mut p) = (n, self.parent(n));
        while p != NIL && c == self.right(p) {
            c = p;
            p = self.parent(p);
        }
        (p != NIL).then_some(p)
    }

    /// Unlinks `z` (it must be in the tree).
    pub(super) fn erase(&mut self, z: u32) {
        let (x, x_parent, removed_black);
        if self.left(z) == NIL || self.right(z) == NIL {
            let child = if self.left(z) == NIL { self.right(z) } else { self.left(z) };
            removed_black = !self.is_red(z);
            x_parent = self.parent(z);
            self.replace_child(z, child);
            x = child;
        } else {
            let y = self.minimum(self.right(z));
            removed_black = !self.is_red(y);
            x = self.right(y);
            if self.parent(y) == z {
                x_parent = y;
            } else {
                x_parent = self.parent(y);
                self.replace_child(y, x);
                let zr = self.right(z);
                self.set_right(y, zr);
                self.set_parent(zr, y);
            }
            self.replace_child(z, y);
            let zl = self.left(z);
            self.set_left(y, zl);
            self.set_parent(zl, y);
            let red = self.is_red(z);
            self.set_red(y, red);
        }
        if let Some(n) = self.nodes.get_mut(z as usize) {
            *n = Node { left: NIL, right: NIL, parent: NIL, red: false };
        }
        if removed_black {
            self.erase_fixup(x, x_parent);
        }
    }

    /// Restores the red-black properties after a black node was unlinked: `x` (possibly
    /// NIL) took its place under `parent` and is short one black. The textbook cases,
    /// written for `x` on its parent's `side`, with `w` its sibling on the other.
    fn erase_fixup(&mut self, mut x: u32, mut parent: u32) {
        while x != self.root() && !self.is_red(x) && parent != NIL {
            let side = if x == self.left(parent) { Side::Left } else { Side::Right };
            let other = side.mirror();
            let mut w = self.child(parent, other);
            if self.is_red(w) {
                self.set_red(w, false);
                self.set_red(parent, true);
                self.rotate(parent, side);
                w = self.child(parent, other);
            }
            if !self.is_red(self.left(w)) && !self.is_red(self.right(w)) {
                self.set_red(w, true);
                x = parent;
                parent = self.parent(x);
                continue;
            }
            if !self.is_red(self.child(w, other)) {
                let near = self.child(w, side);
                self.set_red(near, false);
                self.set_red(w, true);
                self.rotate(w, other);
                w = self.child(parent, other);
            }
            let pr = self.is_red(parent);
            self.set_red(w, pr);
            self.set_red(parent, false);
            let far = self.child(w, other);
            self.set_red(far, false);
            self.rotate(parent, side);
            x = self.root();
            parent = NIL;
        }
        self.set_red(x, false);
    }

    /// The first node on the path from the root for which `step` says "here" (`Equal`);
    /// `Less` goes left, `Greater` right.
    pub(super) fn search(&self, step: impl Fn(u32) -> std::cmp::Ordering) -> Option<u32> {
        let mut n = self.root();
        while n != NIL {
            match step(n) {
                std::cmp::Ordering::Less => n = self.left(n),
                std::cmp::Ordering::Greater => n = self.right(n),
                std::cmp::Ordering::Equal => return Some(n),
            }
        }
        None
    }

    /// Checks the red-black properties and the key order (tests).
    #[cfg(test)]
    fn check(&self, key_of: &dyn Fn(u32) -> u64) -> usize {
        fn walk(t: &Tree, n: u32, key_of: &dyn Fn(u32) -> u64, lo: u64, hi: u64) -> usize {
            if n == NIL {
                return 1;
            }
            let k = key_of(n);
            assert!(lo <= k && k <= hi, "key order");
            if t.is_red(n) {
                assert!(!t.is_red(t.left(n)) && !t.is_red(t.right(n)), "red with a red child");
            }
            for c in [t.left(n), t.right(n)] {
                if c != NIL {
                    assert_eq!(t.parent(c), n, "parent link");
                }
            }
            let l = walk(t, t.left(n), key_of, lo, k);
            let r = walk(t, t.right(n), key_of, k, hi);
            assert_eq!(l, r, "black height");
            l + usize::from(!t.is_red(n))
        }
        assert!(!self.is_red(self.root()), "black root");
        walk(self, self.root(), key_of, 0, u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic pseudo-random sequence (xorshift).
    fn keys(n: usize, seed: u64) -> Vec<u64> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % 64
            })
            .collect()
    }

    #[test]
    fn inserts_and_erasures_keep_the_tree_balanced_and_in_order() {
        for seed in 1..40u64 {
            let ks = keys(300, seed);
            let mut t = Tree::default();
            for (i, &k) in ks.iter().enumerate() {
                assert_eq!(t.insert(k, |n| ks[n as usize]) as usize, i);
            }
            t.check(&|n| ks[n as usize]);
            // Erase every third node, checking after each.
            let mut alive = vec![true; ks.len()];
            for i in (0..ks.len()).step_by(3) {
                t.erase(i as u32);
                alive[i] = false;
                t.check(&|n| ks[n as usize]);
            }
            // In-order walk: every live node once, keys sorted, equal keys in insertion
            // order.
            let mut order = Vec::new();
            let mut n = t.first();
            while let Some(i) = n {
                order.push(i as usize);
                n = t.next(i);
            }
            let mut want: Vec<usize> = (0..ks.len()).filter(|&i| alive[i]).collect();
            want.sort_by_key(|&i| (ks[i], i));
            assert_eq!(order, want, "seed {seed}");
        }
    }

    /// Inserts and erasures in a random order, down to an empty tree, against a
    /// `BTreeMap` keyed by (key, node): after every step the red-black properties hold
    /// and the in-order walk is the map's order (equal keys in insertion order).
    #[test]
    fn random_inserts_and_erasures_walk_as_a_btreemap() {
        use std::collections::BTreeMap;
        for seed in 1..200u64 {
            let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            let mut rand = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            let (mut t, mut ks, mut live) = (Tree::default(), Vec::new(), Vec::new());
            let mut model: BTreeMap<(u64, u32), ()> = BTreeMap::new();
            let steps = 300 + rand() % 300;
            for step in 0..steps {
                // Two inserts for each erasure, then erasures only, to the empty tree.
                if step < steps / 2 && (live.is_empty() || rand() % 3 != 0) {
                    let k = rand() % 48;
                    ks.push(k);
                    let n = t.insert(k, |n| ks[n as usize]);
                    model.insert((k, n), ());
                    live.push(n);
                } else if !live.is_empty() {
                    let n = live.swap_remove((rand() % live.len() as u64) as usize);
                    t.erase(n);
                    assert!(model.remove(&(ks[n as usize], n)).is_some());
                }
                t.check(&|n| ks[n as usize]);
                let mut order = Vec::new();
                let mut n = t.first();
                while let Some(i) = n {
                    order.push(i);
                    n = t.next(i);
                }
                let want: Vec<u32> = model.keys().map(|&(_, n)| n).collect();
                assert_eq!(order, want, "seed {seed}, step {step}");
            }
            while let Some(n) = live.pop() {
                t.erase(n);
                model.remove(&(ks[n as usize], n));
                t.check(&|n| ks[n as usize]);
            }
            assert!(t.first().is_none() && model.is_empty(), "seed {seed}");
        }
    }

    #[test]
    fn a_search_stops_at_the_first_node_that_holds_the_key() {
        // Ranges [key, key + 10): 0, 5, 20; 5 overlaps 0. Inserted 0, 5, 20: 5 becomes
        // the root after the rotation at 0.
        let ks = [0u64, 5, 20];
        let mut t = Tree::default();
        for &k in &ks {
            t.insert(k, |n| ks[n as usize]);
        }
        let find = |ip: u64| {
            t.search(|n| {
                let s = ks[n as usize];
                if ip < s {
                    std::cmp::Ordering::Less
                } else if ip >= s + 10 {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
        };
        assert_eq!(find(7), Some(1), "the root holds it, though node 0 does too");
        assert_eq!(find(3), Some(0));
        assert_eq!(find(25), Some(2));
        assert_eq!(find(15), None);
    }
}
