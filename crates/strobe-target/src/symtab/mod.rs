//! The names Linux perf gives a file's code: the function table `perf report` (6.1, the
//! version Debian ships) builds for an ELF file, so that strobe names every address as
//! perf does, in perf.data files and in strobe's own recordings alike.
//!
//! What perf does, and so what this does:
//!
//! - **Which symbols.** The symbol table of the file's separate debug file when there is
//!   one (found by build id), else the file's own `.symtab`, else its `.dynsym`; from it,
//!   every named function (`STT_FUNC`, `STT_GNU_IFUNC`) and object (`STT_OBJECT`: perf
//!   keeps data in the same table, and it shapes the tree) and every named untyped label
//!   (`STT_NOTYPE`) in a section whose name contains `text` or `data`, defined in a loaded
//!   section (`SHF_ALLOC`), not absolute. Names stay as the table spells them (`clock_gettime@@GLIBC_2.17`,
//!   `init_cpu_features.constprop.0`); the report demangles them.
//! - **Where.** Each symbol's link-time address becomes a file offset through the
//!   loadable segment of the file that holds it (the file itself, not its debug file);
//!   sampled addresses are file offsets too.
//! - **Sizes.** A symbol without a size reaches the next symbol (the last one, the end of
//!   its page and one more page).
//! - **Aliases.** Of symbols starting at the same offset one is kept: the one with a
//!   size, else the strong over the weak, the global over the local, the one with fewer
//!   leading underscores, the longer name, the first (`__vdso_clock_gettime` over the
//!   weak `clock_gettime`).
//! - **PLT entries**, added after that, from the file's `.rela.plt` (or `.rel.plt`)
//!   against its `.dynsym`: entry `i` of `.plt` (after its header) is `NAME@plt`.
//! - **Lookup.** The symbols live in a red-black tree ([`tree`]); an address gets the
//!   first symbol holding it on the path from the root. Where a stretched symbol covers
//!   PLT entries (`_init` before `.plt`), which one that is depends on the tree's shape,
//!   so the tree is perf's, node for node.
//!
//! This module must never guess a name for an address no symbol holds (the report has
//! its own names for those), nor read DWARF.

mod tree;

use std::cmp::Ordering;
use std::path::Path;

use object::elf;
use object::read::elf::{ElfFile64, ProgramHeader as _, SectionHeader as _, Sym as _};
use object::Endianness;

use crate::Error;

/// A symbol's binding, as perf ranks aliases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binding {
    Local,
    Global,
    Weak,
}

/// One function of the table.
#[derive(Debug, Clone)]
struct Sym {
    /// File offset of the first byte.
    start: u64,
    /// File offset one past the last byte (the start, when the symbol has no size).
    end: u64,
    binding: Binding,
    /// Where the name is in `names`.
    name: (u32, u32),
    /// A PLT entry (`name@plt`).
    plt: bool,
}

/// A name from the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Name<'a> {
    /// The symbol's name as the symbol table spells it (mangled for Rust and C++); for a
    /// PLT entry, the name of the function it calls.
    pub raw: &'a str,
    /// A PLT entry: shown as `raw@plt`.
    pub plt: bool,
}

/// Every function of one file as `perf report` sees it, by file offset.
#[derive(Debug, Clone, Default)]
pub struct FunctionTable {
    syms: Vec<Sym>,
    names: String,
    tree: tree::Tree,
}

/// The file at `path`, mapped read-only.
fn map(path: &Path) -> Result<memmap2::Mmap, Error> {
    let io = |source| Error::Io { what: format!("reading {}", path.display()), source };
    let file = std::fs::File::open(path).map_err(io)?;
    // SAFETY: a private read-only map of a program or library; they are replaced by
    // rename, not rewritten in place, and every read is bounds-checked against the map.
    unsafe { memmap2::Mmap::map(&file) }.map_err(io)
}

impl FunctionTable {
    /// The memory the table holds, bytes (for callers that keep tables).
    pub fn heap_bytes(&self) -> usize {
        self.syms.capacity() * std::mem::size_of::<Sym>()
            + self.names.capacity()
            + self.tree.heap_bytes()
    }

    /// The table of the ELF file at `path`, with symbols from `debug` (its separate debug
    /// file) when given.
    pub fn open(path: &Path, debug: Option<&Path>) -> Result<FunctionTable, Error> {
        let file = map(path)?;
        match debug {
            Some(d) => {
                let syms = map(d)?;
                Self::parse(path, &file, Some(&syms))
            }
            None => Self::parse(path, &file, None),
        }
    }

    /// The table from the file's bytes (`path` names it in errors) and its debug file's.
    pub fn parse(path: &Path, file: &[u8], debug: Option<&[u8]>) -> Result<FunctionTable, Error> {
        let not_elf = |e: object::read::Error| Error::NotElf {
            path: path.to_path_buf(),
            why: format!("it is not a readable 64-bit ELF file ({e})"),
        };
        let runtime = ElfFile64::<Endianness, _>::parse(file).map_err(not_elf)?;
        let debug = match debug {
            Some(d) => ElfFile64::<Endianness, _>::parse(d).ok(),
            None => None,
        };
        let mut t = FunctionTable::default();
        // The debug file's symbols when it has a symbol table, else the file's own.
        let from_debug = debug.as_ref().filter(|d| has_section(d, elf::SHT_SYMTAB));
        match from_debug {
            Some(d) => t.add_symbols(d, &runtime),
            None => t.add_symbols(&runtime, &runtime),
        }
        t.fixup_ends();
        t.fixup_aliases();
        t.add_plt(&runtime);
        Ok(t)
    }

    /// Functions in the table (PLT entries included, aliases left out).
    pub fn len(&self) -> usize {
        let mut n = 0;
        let mut at = self.tree.first();
        while let Some(i) = at {
            n += 1;
            at = self.tree.next(i);
        }
        n
    }

    /// True when the table names nothing.
    pub fn is_empty(&self) -> bool {
        self.tree.first().is_none()
    }

    /// The function holding file offset `offset`, as perf finds it, and its start.
    pub fn find(&self, offset: u64) -> Option<(Name<'_>, u64)> {
        let i = self.tree.search(|n| {
            let Some(s) = self.syms.get(n as usize) else { return Ordering::Less };
            if offset < s.start {
                Ordering::Less
            } else if offset > s.end || (offset == s.end && offset != s.start) {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        })?;
        let s = self.syms.get(i as usize)?;
        let raw = self.names.get(s.name.0 as usize..s.name.1 as usize)?;
        Some((Name { raw, plt: s.plt }, s.start))
    }

    fn push(&mut self, start: u64, end: u64, binding: Binding, name: &str, plt: bool) {
        let from = self.names.len() as u32;
        self.names.push_str(name);
        let name = (from, self.names.len() as u32);
        self.syms.push(Sym { start, end, binding, name, plt });
        let syms = &self.syms;
        self.tree.insert(start, |n| syms.get(n as usize).map_or(0, |s| s.start));
    }

    fn name_of(&self, s: &Sym) -> &str {
        self.names.get(s.name.0 as usize..s.name.1 as usize).unwrap_or("")
    }

    /// The functions and text labels of `syms`' symbol table (else its dynamic one), at
    /// the file offsets `runtime` gives their addresses.
    fn add_symbols(&mut self, syms: &Elf<'_>, runtime: &Elf<'_>) {
        let endian = syms.endian();
        let sections = syms.elf_section_table();
        let data = syms.data();
        let table = match sections.symbols(endian, data, elf::SHT_SYMTAB) {
            Ok(t) if !t.is_empty() => t,
            _ => match sections.symbols(endian, data, elf::SHT_DYNSYM) {
                Ok(t) => t,
                Err(_) => return,
            },
        };
        let strings = table.strings();
        let run_sections = runtime.elf_section_table();
        for sym in table.iter() {
            let kind = sym.st_type();
            let shndx = sym.st_shndx(endian);
            if sym.st_name(endian) == 0 || shndx == elf::SHN_UNDEF || shndx == elf::SHN_ABS {
                continue;
            }
            let label = kind == elf::STT_NOTYPE;
            if !matches!(kind, elf::STT_FUNC | elf::STT_GNU_IFUNC | elf::STT_OBJECT) && !label {
                continue;
            }
            let index = object::SectionIndex(usize::from(shndx.0));
            let Ok(mut section) = sections.section(index) else { continue };
            let mut names = sections;
            if section.sh_flags(endian).0 & elf::SHF_ALLOC.0 == 0 {
                continue;
            }
            // A debug file keeps its sections' headers but not their bytes (NOBITS):
            // then the file's own header says where the section is.
            if section.sh_type(endian) == elf::SHT_NOBITS {
                let Ok(s) = run_sections.section(index) else { continue };
                section = s;
                names = run_sections;
            }
            if label {
                let name = names.section_name(endian, section).unwrap_or_default();
                if !name.windows(4).any(|w| w == b"text" || w == b"data") {
                    continue;
                }
            }
            let Ok(name) = sym.name(endian, strings) else { continue };
            let Ok(name) = std::str::from_utf8(name) else { continue };
            let value = sym.st_value(endian);
            let offset = match vaddr_to_offset(runtime, value) {
                Some(o) => o,
                None => value
                    .wrapping_sub(section.sh_addr(endian).wrapping_sub(section.sh_offset(endian))),
            };
            let binding = match sym.st_bind() {
                elf::STB_GLOBAL => Binding::Global,
                elf::STB_WEAK => Binding::Weak,
                _ => Binding::Local,
            };
            self.push(offset, offset.saturating_add(sym.st_size(endian)), binding, name, false);
        }
    }

    /// Stretches each symbol without a size to the next symbol.
    fn fixup_ends(&mut self) {
        let Some(mut curr) = self.tree.first() else { return };
        while let Some(next) = self.tree.next(curr) {
            let next_start = self.syms.get(next as usize).map_or(0, |s| s.start);
            if let Some(s) = self.syms.get_mut(curr as usize) {
                if s.end == s.start {
                    s.end = next_start;
                }
            }
            curr = next;
        }
        if let Some(s) = self.syms.get_mut(curr as usize) {
            if s.end == s.start {
                s.end = (s.start.div_ceil(4096) * 4096).saturating_add(4096);
            }
        }
    }

    /// Keeps one symbol of those starting at the same offset.
    fn fixup_aliases(&mut self) {
        let Some(mut curr) = self.tree.first() else { return };
        while let Some(next) = self.tree.next(curr) {
            let (Some(a), Some(b)) = (self.syms.get(curr as usize), self.syms.get(next as usize))
            else {
                return;
            };
            if a.start != b.start {
                curr = next;
                continue;
            }
            if self.first_is_better(a, b) {
                self.tree.erase(next);
            } else {
                // The survivor is compared with its own next in turn.
                self.tree.erase(curr);
                curr = next;
            }
        }
    }

    /// perf's choice between two symbols at the same start: true for `a`.
    fn first_is_better(&self, a: &Sym, b: &Sym) -> bool {
        let (sa, sb) = (a.end > a.start, b.end > b.start);
        if sa != sb {
            return sa;
        }
        let (wa, wb) = (a.binding == Binding::Weak, b.binding == Binding::Weak);
        if wa != wb {
            return wb;
        }
        let (ga, gb) = (a.binding == Binding::Global, b.binding == Binding::Global);
        if ga != gb {
            return ga;
        }
        let underscores = |s: &Sym| self.name_of(s).bytes().take_while(|&c| c == b'_').count();
        let (ua, ub) = (underscores(a), underscores(b));
        if ua != ub {
            return ua < ub;
        }
        let (la, lb) = (self.name_of(a).len(), self.name_of(b).len());
        if la != lb {
            return la > lb;
        }
        true
    }

    /// The PLT entries of `file`: `.plt` after its header, one per `.rela.plt` (or
    /// `.rel.plt`) entry, named after the `.dynsym` symbol the entry resolves.
    fn add_plt(&mut self, file: &Elf<'_>) {
        let endian = file.endian();
        let sections = file.elf_section_table();
        let data = file.data();
        let Some((dynsym_index, _)) =
            sections.enumerate().find(|(_, s)| s.sh_type(endian) == elf::SHT_DYNSYM)
        else {
            return;
        };
        let rel = sections
            .section_by_name(endian, b".rela.plt")
            .or_else(|| sections.section_by_name(endian, b".rel.plt"));
        let (Some((_, rel)), Some((_, plt))) = (rel, sections.section_by_name(endian, b".plt"))
        else {
            return;
        };
        if rel.sh_link(endian) as usize != dynsym_index.0 {
            return;
        }
        let Ok(dynsym) = sections.symbols(endian, data, elf::SHT_DYNSYM) else { return };
        let entry = plt.sh_entsize(endian);
        if entry == 0 {
            return;
        }
        let mut at = plt.sh_offset(endian).saturating_add(entry);
        let symbols: Vec<u32> = if rel.sh_type(endian) == elf::SHT_RELA {
            match rel.data_as_array::<elf::Rela64<Endianness>, _>(endian, data) {
                Ok(r) => r.iter().map(|r| r.r_sym(endian, false)).collect(),
                Err(_) => return,
            }
        } else if rel.sh_type(endian) == elf::SHT_REL {
            match rel.data_as_array::<elf::Rel64<Endianness>, _>(endian, data) {
                Ok(r) => r.iter().map(|r| r.r_sym(endian)).collect(),
                Err(_) => return,
            }
        } else {
            return;
        };
        for index in symbols {
            let name = dynsym
                .symbol(object::SymbolIndex(index as usize))
                .ok()
                .and_then(|s| s.name(endian, dynsym.strings()).ok())
                .and_then(|n| std::str::from_utf8(n).ok())
                .unwrap_or("");
            self.push(at, at.saturating_add(entry), Binding::Global, name, true);
            at = at.saturating_add(entry);
        }
    }
}

type Elf<'d> = ElfFile64<'d, Endianness, &'d [u8]>;

fn has_section(file: &Elf<'_>, kind: object::elf::SectionType) -> bool {
    let endian = file.endian();
    file.elf_section_table().iter().any(|s| s.sh_type(endian) == kind)
}

/// The file offset of link-time address `vaddr`, through the loadable segment holding it.
fn vaddr_to_offset(file: &Elf<'_>, vaddr: u64) -> Option<u64> {
    let endian = file.endian();
    file.elf_program_headers().iter().find_map(|ph| {
        let (va, memsz) = (ph.p_vaddr(endian), ph.p_memsz(endian));
        (ph.p_type(endian) == elf::PT_LOAD && vaddr >= va && vaddr - va < memsz)
            .then(|| vaddr - va + ph.p_offset(endian))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    impl FunctionTable {
        /// (name, start, end, plt) of every symbol kept, in offset order.
        fn entries(&self) -> Vec<(String, u64, u64, bool)> {
            let mut out = Vec::new();
            let mut at = self.tree.first();
            while let Some(i) = at {
                let s = &self.syms[i as usize];
                out.push((self.name_of(s).to_string(), s.start, s.end, s.plt));
                at = self.tree.next(i);
            }
            out
        }
    }

    /// This process's vDSO image, from its mapping.
    fn vdso() -> Vec<u8> {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = maps.lines().find(|l| l.ends_with("[vdso]")).expect("a vDSO mapping");
        let range = line.split_whitespace().next().unwrap();
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (usize::from_str_radix(a, 16).unwrap(), usize::from_str_radix(b, 16).unwrap());
        // SAFETY: the kernel maps the vDSO readable for the life of the process and never
        // unmaps it; the range is the mapping's, from /proc/self/maps.
        unsafe { std::slice::from_raw_parts(a as *const u8, b - a) }.to_vec()
    }

    #[test]
    fn the_vdso_strong_name_wins_over_its_weak_alias() {
        let image = vdso();
        let t = FunctionTable::parse(Path::new("[vdso]"), &image, None).unwrap();
        let e = t.entries();
        let strong = e.iter().find(|(n, ..)| n == "__vdso_clock_gettime").expect("in the vDSO");
        assert!(!e.iter().any(|(n, ..)| n == "clock_gettime"), "the weak alias is dropped: {e:?}");
        let (name, start) = t.find(strong.1 + 1).unwrap();
        assert_eq!((name.raw, name.plt, start), ("__vdso_clock_gettime", false, strong.1));
    }

    #[test]
    fn plt_entries_follow_the_header_one_per_relocation() {
        let prog = strobe_testprogs::path("clock_loop");
        let t = FunctionTable::open(&prog, None).unwrap();
        let e = t.entries();
        let plt: Vec<&(String, u64, u64, bool)> = e.iter().filter(|x| x.3).collect();
        assert!(plt.iter().any(|x| x.0 == "clock_gettime"), "{e:?}");
        // 16-byte entries, back to back.
        for w in plt.windows(2) {
            assert_eq!((w[0].2 - w[0].1, w[1].1), (16, w[0].2), "{plt:?}");
        }
        // main is found by any byte of it.
        let main = e.iter().find(|x| x.0 == "main").unwrap();
        assert_eq!(t.find(main.1).map(|(n, _)| n.raw), Some("main"));
        assert_eq!(t.find(main.2 - 1).map(|(n, _)| n.raw), Some("main"));
        assert!(t.len() > 10 && !t.is_empty());
    }

    #[test]
    fn an_unsized_symbol_reaches_the_next_one() {
        let prog = strobe_testprogs::path("clock_loop");
        let t = FunctionTable::open(&prog, None).unwrap();
        let e = t.entries();
        // `_init` has no size: it reaches the next symbol of the symbol table (PLT entries
        // are added after the stretch, as perf adds them).
        let init = e.iter().position(|x| x.0 == "_init").expect("_init");
        let next_elf = e[init + 1..].iter().find(|x| !x.3).unwrap();
        assert_eq!(e[init].2, next_elf.1, "{e:?}");
        assert!(FunctionTable::parse(Path::new("x"), b"not elf", None).is_err());
    }
}
