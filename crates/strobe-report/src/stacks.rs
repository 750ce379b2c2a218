//! The processes' stack tables: per address space, a prefix tree of caller frames (node
//! id -> parent id, return address) that samples refer to by id.
//!
//! Record files carry the tables (STACKS chunks, nodes in id order); sources with whole
//! call chains (perf.data) have them interned here. Either way a stack id unwinds to its
//! frames, innermost caller first.
//!
//! Owns: the tables. Must never follow a parent that is not an earlier node (a corrupt
//! table cannot make a walk loop).

use rustc_hash::FxHashMap;

use crate::input::StackNode;

/// Every space's stack table.
#[derive(Debug, Default)]
pub(crate) struct StackTables {
    /// Per space, node `id` at index `id - 1`.
    tables: FxHashMap<u32, Vec<StackNode>>,
    /// Interned nodes: (space, parent, addr) -> id (for [`StackTables::intern`]).
    ids: FxHashMap<(u32, u32, u64), u32>,
    /// The last chain interned, per space, outermost first: (address, node id). The next
    /// chain of the space usually shares its outer frames, whose ids need no lookup.
    last: FxHashMap<u32, Vec<(u64, u32)>>,
}

impl StackTables {
    /// Adds nodes to `space`'s table: node `first_id + i` is `nodes[i]`. A gap (a lost
    /// chunk) is filled with roots.
    pub(crate) fn add_nodes(&mut self, space: u32, first_id: u32, nodes: &[StackNode]) {
        let Some(at) = (first_id as usize).checked_sub(1) else { return };
        let t = self.tables.entry(space).or_default();
        if t.len() < at {
            t.resize(at, StackNode { parent: 0, addr: 0 });
        }
        t.truncate(at);
        t.extend_from_slice(nodes);
    }

    /// The id of the stack whose callers are `frames` (innermost first) in `space`.
    pub(crate) fn intern(&mut self, space: u32, frames: &[u64]) -> u32 {
        let mut last = self.last.remove(&space).unwrap_or_default();
        // The outer frames the last chain shares keep their ids.
        let shared = frames.iter().rev().zip(&last).take_while(|(&a, &(b, _))| a == b).count();
        last.truncate(shared);
        let mut parent = last.last().map_or(0, |&(_, id)| id);
        for &addr in frames.iter().rev().skip(shared) {
            parent = match self.ids.get(&(space, parent, addr)) {
                Some(&id) => id,
                None => {
                    let t = self.tables.entry(space).or_default();
                    t.push(StackNode { parent, addr });
                    let id = t.len() as u32;
                    self.ids.insert((space, parent, addr), id);
                    id
                }
            };
            last.push((addr, parent));
        }
        self.last.insert(space, last);
        parent
    }

    /// Calls `f` with each frame of stack `id` in `space`, innermost caller first; stops
    /// at the root or at a node whose parent is not an earlier node.
    pub(crate) fn for_each_frame(&self, space: u32, mut id: u32, mut f: impl FnMut(u64)) {
        let Some(t) = self.tables.get(&space) else { return };
        while let Some(n) = (id as usize).checked_sub(1).and_then(|i| t.get(i)) {
            f(n.addr);
            if n.parent >= id {
                return;
            }
            id = n.parent;
        }
    }

    /// Whether any space has a stack.
    pub(crate) fn is_empty(&self) -> bool {
        self.tables.values().all(Vec::is_empty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_from_a_file_and_interned_ones_unwind_alike() {
        let mut s = StackTables::default();
        s.add_nodes(0, 1, &[StackNode { parent: 0, addr: 10 }, StackNode { parent: 1, addr: 20 }]);
        s.add_nodes(0, 3, &[StackNode { parent: 2, addr: 30 }]);
        let mut got = Vec::new();
        s.for_each_frame(0, 3, |a| got.push(a));
        assert_eq!(got, [30, 20, 10]);
        let id = s.intern(1, &[3, 2, 1]);
        assert_eq!(s.intern(1, &[3, 2, 1]), id);
        // Chains sharing outer frames with the last one, or not, come out the same as
        // when interned alone.
        let other = s.intern(1, &[4, 2, 1]);
        assert_ne!(other, id);
        assert_eq!(s.intern(1, &[3, 2, 1]), id);
        assert_eq!(s.intern(1, &[9]), s.intern(1, &[9]));
        assert_eq!(s.intern(1, &[4, 2, 1]), other);
        let mut got = Vec::new();
        s.for_each_frame(1, other, |a| got.push(a));
        assert_eq!(got, [4, 2, 1]);
        let mut got = Vec::new();
        s.for_each_frame(1, id, |a| got.push(a));
        assert_eq!(got, [3, 2, 1]);
        // A corrupt parent (not earlier) stops the walk.
        s.add_nodes(2, 1, &[StackNode { parent: 1, addr: 7 }]);
        let mut n = 0;
        s.for_each_frame(2, 1, |_| n += 1);
        assert_eq!(n, 1);
    }
}
