//! `--call-graph dwarf` in kernel mode: each sample carries the sampled thread's user
//! registers and a copy of its user stack (`PERF_SAMPLE_REGS_USER`,
//! `PERF_SAMPLE_STACK_USER`), and the writer walks that copy with the unwind tables of
//! the modules the process had mapped at the sample's time (crate strobe-unwind's
//! walker, the one agent mode runs in its signal handler).
//!
//! Owns: the copies' shape ([`UserStack`]), each process's module table built from its
//! executable mappings' files, and the walk. Must never read the other process's memory
//! (only the copy), nor keep a table after the process's mappings changed.

use std::path::PathBuf;
use std::sync::{Arc, Weak};

use rustc_hash::FxHashMap;
use strobe_format::Mapping;
use strobe_unwind::modules::{Module, Table};
use strobe_unwind::{walk_dwarf_copied, Regs, RuleCache};

/// The user registers and stack copy of one sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UserStack {
    pub regs: Regs,
    /// The bytes from `regs.sp` up that the kernel copied.
    pub bytes: Box<[u8]>,
}

impl UserStack {
    /// From a sample's register dump (the x86-64 registers of
    /// `strobe_perf::percpu::USER_STACK_REGS`) and stack copy; `None` for a thread with
    /// no user registers (a kernel thread) or an empty copy.
    pub(crate) fn of(
        regs: strobe_perfdata::Regs<'_>,
        stack: strobe_perfdata::StackUser<'_>,
    ) -> Option<Self> {
        let mut r = Regs::default();
        let mut seen = 0;
        for (n, v) in regs.iter() {
            match n {
                6 => r.bp = v,
                7 => r.sp = v,
                8 => r.ip = v,
                _ => continue,
            }
            seen += 1;
        }
        let len = usize::try_from(stack.dyn_size).ok()?.min(stack.data.len());
        (seen == 3 && len > 0).then(|| UserStack { regs: r, bytes: stack.data[..len].into() })
    }
}

/// One process's modules, rebuilt when its mappings change.
#[derive(Debug, Default)]
pub(crate) struct ProcModules {
    table: Option<Table<Module>>,
    /// The mappings changed since `table` was built.
    pub stale: bool,
}

/// The vDSO's image in a file of its own while the recording lasts: samples taken in a
/// system call the vDSO made (a CPU clock read, say) start their walk in it, and the
/// module table reads unwind tables from files. Every process maps the image this
/// process maps (one kernel).
#[derive(Debug)]
struct VdsoFile(PathBuf);

impl VdsoFile {
    fn write() -> Option<VdsoFile> {
        let image = crate::own_vdso()?;
        let path = std::env::temp_dir().join(format!(
            "strobe-vdso-{}-{}.so",
            std::process::id(),
            crate::drain::mono_ns()
        ));
        std::fs::write(&path, &image.bytes).ok()?;
        Some(VdsoFile(path))
    }
}

impl Drop for VdsoFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Walks copies for every process of a recording.
pub(crate) struct Unwinder {
    rules: RuleCache,
    /// The last table generation handed out (distinct per table: the rule cache is
    /// shared by every process's walks).
    generation: u64,
    /// Modules by mapping, across rebuilds and processes, held only while a process's
    /// table holds them (`None`: the file has no unwind tables or cannot be read). A
    /// module's tables are copies from its file placed at its address: each process
    /// that maps a library elsewhere gets its own, and a compiler loop mapped a new
    /// librustc_driver (megabytes of `.eh_frame`) every run, which kept strong here grew
    /// the recorder by 120-150 MB a second.
    modules: FxHashMap<(PathBuf, u64, u64, u64), Option<Weak<Module>>>,
    /// The map's size when its dead entries were last pruned.
    pruned_at: usize,
    out: Vec<u64>,
    vdso: Option<VdsoFile>,
}

impl std::fmt::Debug for Unwinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unwinder").field("modules", &self.modules.len()).finish_non_exhaustive()
    }
}

impl Unwinder {
    /// Walks of at most `max_depth` frames.
    pub(crate) fn new(max_depth: usize) -> Unwinder {
        Unwinder {
            rules: RuleCache::new(),
            generation: 0,
            modules: FxHashMap::default(),
            pruned_at: 0,
            out: vec![0; max_depth.max(1)],
            vdso: VdsoFile::write(),
        }
    }

    /// Appends to `callers` the user frames of a sample: its user instruction pointer
    /// when the sample was taken in the kernel (`kernel`), then the return addresses the
    /// walk of the copy finds, up to `max` entries in all.
    pub(crate) fn walk(
        &mut self,
        maps: &[Mapping],
        pm: &mut ProcModules,
        user: &UserStack,
        kernel: bool,
        callers: &mut Vec<u64>,
        max: usize,
    ) {
        if kernel && callers.len() < max {
            // The user frame the thread entered the kernel from: one past its
            // instruction, as every caller entry is (symbolized at addr - 1).
            callers.push(user.regs.ip.wrapping_add(1));
        }
        if pm.stale || pm.table.is_none() {
            pm.table = Some(self.table(maps));
            pm.stale = false;
        }
        let Some(table) = pm.table.as_ref() else { return };
        let room = max.saturating_sub(callers.len()).min(self.out.len());
        let w = walk_dwarf_copied(
            &user.regs,
            &user.bytes,
            table,
            &mut self.rules,
            &mut self.out[..room],
        );
        callers.extend_from_slice(&self.out[..w.frames]);
    }

    fn table(&mut self, maps: &[Mapping]) -> Table<Module> {
        let mut mods = Vec::new();
        for m in maps {
            let path = match (&self.vdso, m.path.as_os_str() == "[vdso]") {
                (Some(v), true) => v.0.clone(),
                _ if !m.path.is_absolute() => continue, // anonymous: no file to read
                _ => m.path.clone(),
            };
            let key = (path, m.start, m.end, m.file_offset);
            let held = match self.modules.get(&key) {
                Some(None) => continue,
                Some(Some(w)) => w.upgrade(),
                None => None,
            };
            let module = held.or_else(|| {
                let built = Module::from_file(&key.0, m.start, m.end, m.file_offset).map(Arc::new);
                self.modules.insert(key, built.as_ref().map(Arc::downgrade));
                built
            });
            mods.extend(module);
        }
        self.prune();
        self.generation += 1;
        Table::new(self.generation, mods)
    }

    /// Drops the entries of modules no process's table holds any more, once the map has
    /// doubled since the last time (amortized: each entry is looked at a bounded number
    /// of times), and those of files without unwind tables (looked at again if a process
    /// maps one there).
    fn prune(&mut self) {
        if self.modules.len() < 2 * self.pruned_at.max(64) {
            return;
        }
        self.modules.retain(|_, m| m.as_ref().is_some_and(|w| w.strong_count() > 0));
        self.pruned_at = self.modules.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test program's executable mapping, as /proc/self/maps gives it.
    fn own_code() -> Mapping {
        let exe = std::env::current_exe().unwrap();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let (range, perms, off, path) = (f[0], f[1], f[2], *f.get(5)?);
                let (s, e) = range.split_once('-')?;
                (perms.contains('x') && std::path::Path::new(path) == exe).then(|| Mapping {
                    start: u64::from_str_radix(s, 16).unwrap(),
                    end: u64::from_str_radix(e, 16).unwrap(),
                    file_offset: u64::from_str_radix(off, 16).unwrap(),
                    path: exe.clone(),
                })
            })
            .next()
            .expect("an executable mapping of the test program")
    }

    /// Processes that map the same file at their own addresses (ASLR) each get a module
    /// while their table lives, and the unwinder keeps none of them after: memory
    /// follows the processes alive, not every process the recording saw.
    #[test]
    fn modules_live_as_long_as_the_tables_that_hold_them() {
        let code = own_code();
        let mut u = Unwinder::new(8);
        let kept = u.table(std::slice::from_ref(&code));
        assert_eq!(kept.modules().len(), 1, "the test program has unwind tables");
        let same = u.table(std::slice::from_ref(&code));
        assert!(Arc::ptr_eq(&kept.modules()[0], &same.modules()[0]), "one copy per mapping");
        for i in 1..=1000u64 {
            let shift = i << 32;
            let elsewhere =
                Mapping { start: code.start + shift, end: code.end + shift, ..code.clone() };
            let t = u.table(&[elsewhere]);
            assert_eq!(t.modules().len(), 1);
        }
        // Every table but `kept`'s and `same`'s is gone, and so are their modules.
        let live = u.modules.values().filter(|m| m.as_ref().is_some_and(|w| w.strong_count() > 0));
        assert_eq!(live.count(), 1);
        assert!(u.modules.len() <= 2 * 64 + 1, "{} entries", u.modules.len());
        assert_eq!(Arc::strong_count(&kept.modules()[0]), 2);
    }
}
