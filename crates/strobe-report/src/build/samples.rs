//! Phase 4, time samples: each (space, IP, stack) key's samples to its function (self),
//! to its call path, and to every function on that path once (total, however deep the
//! recursion); the source lines of each function's samples, and the line of its most
//! sampled address.
//!
//! Owns: the sample counts of functions and paths. Must never look at windows.

use rustc_hash::FxHashMap;

use super::addresses::{Addresses, Key};
use super::functions::{line_of, Functions};
use super::paths::{once_each, Paths, Seen};
use crate::symbolize::Frame;

/// Counts the time samples `keys` (with `addrs.samples`, their IPs' indices). Returns
/// each key's path when `key_paths` (for the time line), else an empty map.
pub(crate) fn attribute(
    keys: &[(Key, u64)],
    addrs: &Addresses,
    frames: &[Frame],
    fns: &mut Functions,
    paths: &mut Paths,
    key_paths: bool,
) -> FxHashMap<Key, usize> {
    let mut seen = Seen::new(fns.list.len());
    let mut hottest = vec![0u64; fns.list.len()];
    let mut line_counts: FxHashMap<(usize, &String), u64> = FxHashMap::default();
    let mut key_path: FxHashMap<Key, usize> = FxHashMap::default();
    for (&((space, ip, stack), count), &a) in keys.iter().zip(&addrs.samples) {
        let Some(fi) = fns.of(a) else { continue };
        let line = line_of(frames, a);
        if let (Some(f), Some(h)) = (fns.list.get_mut(fi), hottest.get_mut(fi)) {
            f.samples += count;
            if count > *h || (count == *h && f.source.is_none()) {
                *h = count;
                f.source = line.cloned();
            }
        }
        if let Some(l) = line {
            *line_counts.entry((fi, l)).or_insert(0) += count;
        }
        let p = paths.of(fns, addrs, space, stack, Some(a), fi);
        if key_paths {
            key_path.insert((space, ip, stack), p);
        }
        if let Some(ps) = paths.list.get_mut(p) {
            ps.samples += count;
            let list = &mut fns.list;
            once_each(&ps.frames, &mut seen, |g| {
                if let Some(f) = list.get_mut(g) {
                    f.total_samples += count;
                }
            });
        }
    }
    for ((fi, line), n) in line_counts {
        if let Some(f) = fns.list.get_mut(fi) {
            f.lines.push((line.clone(), n));
        }
    }
    for f in &mut fns.list {
        f.lines.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    }
    key_path
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::functions::{fold, tests::frame};

    #[test]
    fn self_total_lines_and_the_hottest_line() {
        // Addresses: 0 rec (line 1), 1 rec (line 2), 2 main; stack 1: rec under rec under
        // main (frames innermost first: 1, 1, 2).
        let frames = [
            frame("rec", "/bin/a", Some("a.c:1")),
            frame("rec", "/bin/a", Some("a.c:2")),
            frame("main", "/bin/a", None),
        ];
        let mut fns = fold(&frames, 1);
        let mut addrs = Addresses { samples: vec![0, 1, 0], ..Addresses::default() };
        addrs.stacks.insert((0, 1), vec![1, 1, 2]);
        let keys = [((0, 0x10, 1), 5), ((0, 0x20, 1), 7), ((0, 0x10, 0), 2)];
        let mut paths = Paths::new(1);
        let kp = attribute(&keys, &addrs, &frames, &mut fns, &mut paths, true);
        let (rec, main) = (&fns.list[0], &fns.list[1]);
        assert_eq!((rec.samples, rec.total_samples), (14, 14), "recursion counts once");
        assert_eq!((main.samples, main.total_samples), (0, 12));
        assert_eq!(rec.source.as_deref(), Some("a.c:2"), "the most sampled address's line");
        assert_eq!(rec.lines, [("a.c:1".to_string(), 7), ("a.c:2".to_string(), 7)]);
        assert_eq!(paths.list.len(), 2);
        assert_eq!(paths.list[kp[&(0, 0x10, 1)]].frames, [1, 0, 0, 0]);
        assert_eq!(paths.list[kp[&(0, 0x10, 1)]].samples, 12);
        assert_eq!(paths.list[kp[&(0, 0x10, 0)]].samples, 2);
    }
}
