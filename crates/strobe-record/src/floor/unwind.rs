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
use std::sync::Arc;

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
    /// Modules by mapping, across rebuilds and processes (`None`: the file has no
    /// unwind tables or cannot be read).
    modules: FxHashMap<(PathBuf, u64, u64, u64), Option<Arc<Module>>>,
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
            let module = self
                .modules
                .entry(key)
                .or_insert_with_key(|k| {
                    Module::from_file(&k.0, m.start, m.end, m.file_offset).map(Arc::new)
                })
                .clone();
            mods.extend(module);
        }
        self.generation += 1;
        Table::new(self.generation, mods)
    }
}
