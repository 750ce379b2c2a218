//! Ground truth for the walk tests: function symbols read from the ELF files
//! of the modules a walk passed through.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

/// Function symbols of one ELF file: `(start, end, name)` by start, in file
/// addresses, and its loadable segments' bytes.
pub(crate) struct Symbols(Vec<(u64, u64, String)>, Vec<(u64, Vec<u8>)>);

/// x86-64 `rt_sigreturn`: `mov $15, %rax; syscall`, the body of glibc's
/// `__restore_rt` (a local symbol Debian's stripped libc does not name).
const SIGRETURN: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

impl Symbols {
    /// The function symbols (`.symtab` and `.dynsym`) of `path`.
    pub(crate) fn load(path: &Path) -> Symbols {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let file = object::File::parse(&*data).expect("an ELF file");
        let mut v: Vec<(u64, u64, String)> = file
            .symbols()
            .chain(file.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
            .filter_map(|s| Some((s.address(), s.address() + s.size(), s.name().ok()?.to_string())))
            .collect();
        v.sort();
        v.dedup_by_key(|s| s.0);
        let segs =
            file.segments().filter_map(|s| Some((s.address(), s.data().ok()?.to_vec()))).collect();
        Symbols(v, segs)
    }

    /// The file's bytes at file address `addr`.
    fn bytes(&self, addr: u64, n: usize) -> Option<&[u8]> {
        let (a, d) =
            self.1.iter().find(|(a, d)| addr >= *a && addr - *a + n as u64 <= d.len() as u64)?;
        let o = (addr - a) as usize;
        Some(&d[o..o + n])
    }

    /// The function containing file address `addr` (`__restore_rt` for the
    /// sigreturn trampoline and the byte before it, whatever the symbols say).
    pub(crate) fn name(&self, addr: u64) -> Option<&str> {
        if [addr, addr + 1].iter().any(|&a| self.bytes(a, 9) == Some(&SIGRETURN[..])) {
            return Some("__restore_rt");
        }
        let i = self.0.partition_point(|s| s.0 <= addr).checked_sub(1)?;
        let s = &self.0[i];
        (addr < s.1).then_some(s.2.as_str())
    }
}

/// A loaded module: `(bias, code start, code end, path)`.
#[derive(Clone, Debug)]
pub(crate) struct Mod {
    pub bias: u64,
    pub start: u64,
    pub end: u64,
    pub path: PathBuf,
}

/// Names run-time addresses through the modules' ELF symbols.
pub(crate) struct Symbolizer {
    mods: Vec<Mod>,
    cache: HashMap<PathBuf, Option<Symbols>>,
}

impl Symbolizer {
    pub(crate) fn new(mods: Vec<Mod>) -> Self {
        Self { mods, cache: HashMap::new() }
    }

    /// The modules of the running process.
    pub(crate) fn of_self() -> Self {
        let mods = strobe_unwind::modules::loaded()
            .iter()
            .map(|m| Mod {
                bias: m.bias(),
                start: m.code().0,
                end: m.code().1,
                path: if m.name().is_empty() {
                    std::fs::read_link("/proc/self/exe").unwrap()
                } else {
                    PathBuf::from(m.name())
                },
            })
            .collect();
        Self::new(mods)
    }

    /// The modules.
    pub(crate) fn modules(&self) -> &[Mod] {
        &self.mods
    }

    /// The function containing `addr`, or "?".
    pub(crate) fn name(&mut self, addr: u64) -> String {
        let Some(m) = self.mods.iter().find(|m| addr >= m.start && addr < m.end).cloned() else {
            return "?".into();
        };
        let syms = self
            .cache
            .entry(m.path.clone())
            .or_insert_with(|| m.path.is_file().then(|| Symbols::load(&m.path)));
        syms.as_ref()
            .and_then(|s| s.name(addr - m.bias))
            .map_or_else(|| "?".into(), |n| n.to_string())
    }

    /// The names of a walk's frames (return addresses: looked up at `addr - 1`).
    pub(crate) fn frames(&mut self, frames: &[u64]) -> Vec<String> {
        frames.iter().map(|&a| self.name(a.wrapping_sub(1))).collect()
    }
}
