//! Walks from a copy of a stack with modules built from their files (what
//! kernel mode does with `PERF_SAMPLE_STACK_USER`), checked against the walk
//! of the same stack in place with the process's own module table: the same
//! frames, to the thread's entry.

use std::sync::Arc;

use strobe_unwind::modules::{Module, Table};
use strobe_unwind::{
    walk_dwarf, walk_dwarf_copied, Regs, RuleCache, StackBounds, ThreadCache, WalkEnd,
};

/// Recurses `n` more times, then runs `leaf`.
#[inline(never)]
fn level<R>(n: u32, leaf: &mut dyn FnMut() -> R) -> R {
    let r = if n == 0 { leaf() } else { level(n - 1, leaf) };
    std::hint::black_box(r)
}

/// This process's executable file mappings, as modules built from their files.
fn modules_from_maps() -> Table<Module> {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mut modules = Vec::new();
    for l in maps.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 || !f[1].contains('x') || !f[5].starts_with('/') {
            continue;
        }
        let (s, e) = f[0].split_once('-').unwrap();
        let (s, e) = (u64::from_str_radix(s, 16).unwrap(), u64::from_str_radix(e, 16).unwrap());
        let off = u64::from_str_radix(f[2], 16).unwrap();
        if let Some(m) = Module::from_file(std::path::Path::new(f[5]), s, e, off) {
            modules.push(Arc::new(m));
        }
    }
    Table::new(1, modules)
}

#[test]
fn a_copied_stack_walks_as_the_stack_in_place() {
    std::thread::spawn(|| {
        let bounds = StackBounds::of_current_thread().unwrap();
        let mut cache = ThreadCache::new();
        let table = modules_from_maps();
        let mut rules = RuleCache::new();
        let (mut here, mut there) = ([0u64; 128], [0u64; 128]);
        let (w_here, w_there) = level(20, &mut || {
            let regs = Regs::here();
            let w_here = walk_dwarf(&regs, &bounds, &mut cache, &mut here);
            // Everything from the sp to the stack's top, as the kernel copies it.
            let len = (bounds.hi - regs.sp) as usize;
            // SAFETY: [sp, hi) is this thread's live stack.
            let copy = unsafe { std::slice::from_raw_parts(regs.sp as *const u8, len) }.to_vec();
            let w_there = walk_dwarf_copied(&regs, &copy, &table, &mut rules, &mut there);
            (w_here, w_there)
        });
        assert_eq!(w_here.end, WalkEnd::Complete, "{w_here:?}");
        assert!(w_here.frames > 21, "{w_here:?}");
        assert_eq!(w_there, w_here);
        assert_eq!(there[..w_there.frames], here[..w_here.frames]);
    })
    .join()
    .unwrap();
}

#[test]
fn a_short_copy_ends_the_walk_where_the_copy_ends() {
    let table = modules_from_maps();
    let mut rules = RuleCache::new();
    let mut out = [0u64; 128];
    let w = level(20, &mut || {
        let regs = Regs::here();
        // SAFETY: the 256 bytes above the sp are this thread's live stack.
        let copy = unsafe { std::slice::from_raw_parts(regs.sp as *const u8, 256) }.to_vec();
        walk_dwarf_copied(&regs, &copy, &table, &mut rules, &mut out)
    });
    assert_eq!(w.end, WalkEnd::OutOfBounds, "{w:?}");
    assert!(w.frames < 20, "{w:?}");
}
