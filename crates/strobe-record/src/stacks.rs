//! A stream's stack table as the recorder builds it: every stack a sample carries is
//! interned into a prefix tree (outermost frame at the root), so a sample refers to its
//! stack by one id and shared prefixes (`main`, a thread's start routine) are stored
//! once. New nodes are handed out in id order for the file's STACKS chunks.
//!
//! Owns: the tree and its ids. Must never hand out an id whose parent has not been
//! handed out before it.

use rustc_hash::FxHashMap;
use strobe_format::StackNode;

/// One stream's stack table.
#[derive(Debug, Default)]
pub(crate) struct StackTable {
    ids: FxHashMap<(u32, u64), u32>,
    /// Nodes created since the last [`StackTable::take_new`].
    fresh: Vec<StackNode>,
    /// The id of `fresh[0]`.
    fresh_first: u32,
    /// Nodes in the table.
    len: u32,
}

impl StackTable {
    /// The id of the stack whose callers are `frames` (innermost first); 0 for none.
    pub(crate) fn intern(&mut self, frames: &[u64]) -> u32 {
        let mut parent = 0u32;
        for &addr in frames.iter().rev() {
            parent = match self.ids.get(&(parent, addr)) {
                Some(&id) => id,
                None => {
                    self.len += 1;
                    let id = self.len;
                    if self.fresh.is_empty() {
                        self.fresh_first = id;
                    }
                    self.fresh.push(StackNode { parent, addr });
                    self.ids.insert((parent, addr), id);
                    id
                }
            };
        }
        parent
    }

    /// The nodes created since the last call, with the id of the first.
    pub(crate) fn take_new(&mut self) -> Option<(u32, Vec<StackNode>)> {
        (!self.fresh.is_empty()).then(|| (self.fresh_first, std::mem::take(&mut self.fresh)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_prefixes_are_stored_once_and_ids_unwind_to_the_frames() {
        let mut t = StackTable::default();
        let a = t.intern(&[0xb, 0xa, 0x1]); // b <- a <- main(1)
        let b = t.intern(&[0xc, 0x1]); // c <- main
        let a2 = t.intern(&[0xb, 0xa, 0x1]);
        assert_eq!(a, a2);
        assert_eq!(t.intern(&[]), 0);
        let (first, nodes) = t.take_new().unwrap();
        assert_eq!(first, 1);
        assert_eq!(nodes.len(), 4, "main, a, b, c: main once");
        let unwind = |mut id: u32| {
            let mut out = Vec::new();
            while id != 0 {
                let n = nodes[(id - first) as usize];
                out.push(n.addr);
                id = n.parent;
            }
            out
        };
        assert_eq!(unwind(a), [0xb, 0xa, 0x1]);
        assert_eq!(unwind(b), [0xc, 0x1]);
        assert!(t.take_new().is_none());
        let d = t.intern(&[0xd, 0xc, 0x1]);
        assert_eq!(t.take_new().unwrap(), (5, vec![StackNode { parent: b, addr: 0xd }]));
        assert_eq!(d, 5);
    }
}
