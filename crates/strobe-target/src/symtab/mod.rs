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
//! - **Lookup.** perf keeps the symbols in a red-black tree (`tree`); an address gets
//!   the first symbol holding it on the path from the root. Where a stretched symbol
//!   covers PLT entries (`_init` before `.plt`) or nested labels, which one that is depends
//!   on the tree's shape, so the tree is perf's, node for node; it is built only when an
//!   address under such overlapping symbols is looked up. Elsewhere a binary search on
//!   the symbols sorted by offset gives the same answer for a fraction of the cost.
//! - **Names** stay in the file (they are most of a table's bytes) and are read when an
//!   address is named, from the file as it was when the table was parsed.
//!
//! This module must never guess a name for an address no symbol holds (the report has
//! its own names for those), nor read DWARF.

mod tree;

use std::cmp::Ordering;
use std::path::Path;

use object::elf;
use object::read::elf::{ElfFile64, ProgramHeader as _, SectionHeader as _, Sym as _};
use object::Endianness;

use crate::mapped::MappedFile;
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
    /// The furthest (exclusive) end of the symbols before this one in offset order: an
    /// address below it is held by an earlier symbol too.
    reach: u64,
    /// Where the name starts in the string table (`.dynstr` for a PLT entry);
    /// [`NO_NAME`] for none.
    name: u32,
    /// The order perf inserted it in (its node in the tree).
    seq: u32,
    binding: Binding,
    /// A PLT entry (`name@plt`).
    plt: bool,
}

/// A PLT entry whose relocation names no readable symbol.
const NO_NAME: u32 = u32::MAX;

/// The function found at an address; its name is read with [`FunctionTable::names`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// The file offset of its first byte.
    pub start: u64,
    /// A PLT entry: its name is the function it calls, shown as `name@plt`.
    pub plt: bool,
    /// Where its name is in its string table.
    name: u32,
}

/// Where a table's names are: string tables are most of a symbol table's bytes, and a
/// report reads a few of its names, so a file's names stay in the file until looked up.
#[derive(Debug, Clone)]
enum Names {
    /// In memory (an image with no file, such as the vDSO's).
    Held {
        /// The symbol table's string table.
        strtab: Box<[u8]>,
        /// `.dynstr`, for the PLT entries.
        dynstr: Box<[u8]>,
    },
    /// In the files, read when looked up.
    Files {
        /// The symbol table's string table (in the debug file when the symbols are its).
        strtab: Region,
        /// `.dynstr`, for the PLT entries.
        dynstr: Region,
    },
}

impl Default for Names {
    fn default() -> Names {
        Names::Held { strtab: Box::default(), dynstr: Box::default() }
    }
}

impl Names {
    fn heap_bytes(&self) -> usize {
        match self {
            Names::Held { strtab, dynstr } => strtab.len() + dynstr.len(),
            Names::Files { .. } => 2 * std::mem::size_of::<Region>(),
        }
    }
}

/// A string table in a file, as the file was when the table was parsed.
#[derive(Debug, Clone, Default)]
struct Region {
    path: std::path::PathBuf,
    /// Device, inode, size, modification time (s, ns): a file replaced or rewritten since
    /// is not read.
    id: (u64, u64, u64, i64, i64),
    offset: u64,
    len: u64,
}

/// What identifies a file's contents.
fn file_id(m: &std::fs::Metadata) -> (u64, u64, u64, i64, i64) {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec())
}

impl Region {
    /// The region of `section_bytes` (a slice of `file`'s map) in `file`.
    fn of(file: &MappedFile, section_bytes: &[u8]) -> Region {
        let bytes = file.bytes();
        let offset = (section_bytes.as_ptr() as usize).wrapping_sub(bytes.as_ptr() as usize);
        let inside = !section_bytes.is_empty()
            && offset.checked_add(section_bytes.len()).is_some_and(|e| e <= bytes.len());
        Region {
            path: file.path().to_path_buf(),
            id: file_id(file.meta()),
            offset: if inside { offset as u64 } else { 0 },
            len: if inside { section_bytes.len() as u64 } else { 0 },
        }
    }

    /// The file, open, when it is still the one parsed.
    fn open(&self) -> Option<std::fs::File> {
        let f = std::fs::File::open(&self.path).ok()?;
        (file_id(&f.metadata().ok()?) == self.id).then_some(f)
    }

    /// The region's bytes in `mapped`, when that is the file parsed, as it was.
    fn in_map<'m>(&self, mapped: &'m MappedFile) -> Option<&'m [u8]> {
        if mapped.path() != self.path || file_id(mapped.meta()) != self.id {
            return None;
        }
        let start = usize::try_from(self.offset).ok()?;
        let end = start.checked_add(usize::try_from(self.len).ok()?)?;
        mapped.bytes().get(start..end)
    }

    /// The NUL-terminated UTF-8 string at `off`, read with `pread` (a file truncated
    /// meanwhile gives a short read, never a fault).
    fn name(&self, file: &std::fs::File, off: u32) -> Option<String> {
        use std::os::unix::fs::FileExt;
        let mut buf = Vec::new();
        let mut chunk = 256usize;
        let start = u64::from(off);
        loop {
            let have = buf.len() as u64;
            let left = self.len.checked_sub(start + have)?;
            if left == 0 {
                return None;
            }
            let want = chunk.min(left as usize);
            let old = buf.len();
            buf.resize(old + want, 0);
            let n = file.read_at(buf.get_mut(old..)?, self.offset + start + have).ok()?;
            buf.truncate(old + n);
            if let Some(end) = buf.get(old..).and_then(|b| b.iter().position(|&c| c == 0)) {
                buf.truncate(old + end);
                return String::from_utf8(buf).ok();
            }
            if n == 0 {
                return None;
            }
            chunk = chunk.saturating_mul(4).min(1 << 20);
        }
    }
}

/// Every function of one file as `perf report` sees it, by file offset.
///
/// How it is kept, for speed: parsing a table is most of what a continuous recording
/// spends on a file it sees for the first time (a 40,000-symbol test binary took 10 ms
/// when each name was copied into a growing string and each symbol inserted into the
/// tree). So the symbols are sorted once into an array, names stay where the string
/// table has them (one copy of the table, names found when looked up), and perf's tree
/// is built only for an address that two symbols hold or that lies under a symbol
/// reaching past others (the only addresses where the tree's shape can change the
/// answer: elsewhere the search on the array finds what the tree's search finds).
#[derive(Debug, Default)]
pub struct FunctionTable {
    /// The symbols perf keeps, in offset order (ties in perf's insertion order).
    syms: Vec<Sym>,
    /// Where the names are.
    names: Names,
    /// How perf built its tree: the key of every node in insertion order, and the nodes
    /// dropped as aliases, in order; the tree itself is built on first need.
    replay: Replay,
    tree: std::sync::OnceLock<Tree>,
}

/// What rebuilds perf's tree.
#[derive(Debug, Default)]
struct Replay {
    /// Node `i`'s key (file offset), for every node perf inserted (aliases too).
    keys: Vec<u64>,
    /// The number of nodes inserted before the aliases were dropped (the symbol table's;
    /// the rest are PLT entries).
    elf: u32,
    /// Nodes dropped as aliases, in the order perf dropped them.
    erased: Vec<u32>,
}

/// The tree, and where each node's symbol is in the array.
#[derive(Debug, Default)]
struct Tree {
    tree: tree::Tree,
    /// Node -> index into `syms` (`u32::MAX` for an erased node).
    at: Vec<u32>,
}

impl Clone for FunctionTable {
    fn clone(&self) -> FunctionTable {
        FunctionTable {
            syms: self.syms.clone(),
            names: self.names.clone(),
            replay: Replay {
                keys: self.replay.keys.clone(),
                elf: self.replay.elf,
                erased: self.replay.erased.clone(),
            },
            tree: std::sync::OnceLock::new(),
        }
    }
}

/// A string table's names: whether each can be read at an offset without a check of
/// its own (the whole table is UTF-8 and ends in NUL, as linkers write it).
struct Strings<'d> {
    bytes: &'d [u8],
    clean: Option<&'d str>,
}

impl<'d> Strings<'d> {
    fn new(bytes: &'d [u8]) -> Strings<'d> {
        let clean = (bytes.last() == Some(&0)).then(|| std::str::from_utf8(bytes).ok()).flatten();
        Strings { bytes, clean }
    }

    /// Whether the name at `off` is one (NUL-terminated, UTF-8): what decides whether
    /// the symbol is kept.
    fn readable(&self, off: usize) -> bool {
        match self.clean {
            Some(s) => off < s.len() && s.is_char_boundary(off),
            None => name_at(self.bytes, off).is_some(),
        }
    }
}

/// The NUL-terminated UTF-8 string at `off` of `bytes`.
fn name_at(bytes: &[u8], off: usize) -> Option<&str> {
    let rest = bytes.get(off..)?;
    let len = rest.iter().position(|&b| b == 0)?;
    std::str::from_utf8(rest.get(..len)?).ok()
}

/// What a symbol's section says, looked up once per section.
#[derive(Debug, Clone, Copy)]
struct SectionFacts {
    /// Loaded (`SHF_ALLOC`).
    alloc: bool,
    /// Its name holds `text` or `data` (where untyped labels count).
    code_or_data: bool,
    /// `sh_addr - sh_offset` of the section's bytes (the file's own header for a debug
    /// file's NOBITS section).
    bias: u64,
}

impl FunctionTable {
    /// The memory the table holds, bytes (for callers that keep tables).
    pub fn heap_bytes(&self) -> usize {
        self.syms.capacity() * std::mem::size_of::<Sym>()
            + self.names.heap_bytes()
            + (self.replay.keys.capacity() + self.replay.erased.capacity() / 2) * 8
            + self.tree.get().map_or(0, |t| t.tree.heap_bytes() + t.at.capacity() * 4)
    }

    /// The table of the ELF file at `path`, with symbols from `debug` (its separate debug
    /// file) when given.
    pub fn open(path: &Path, debug: Option<&Path>) -> Result<FunctionTable, Error> {
        let file = MappedFile::open(path)?;
        let debug = debug.map(MappedFile::open).transpose()?;
        Self::from_mapped(&file, debug.as_ref())
    }

    /// The same from files mapped already (by a caller that reads more of them).
    pub fn from_mapped(
        file: &MappedFile,
        debug: Option<&MappedFile>,
    ) -> Result<FunctionTable, Error> {
        let path = file.path();
        let (mut t, (strtab, dynstr)) =
            Self::parse_with(path, file.bytes(), debug.map(MappedFile::bytes))?;
        // The names stay in the files (the symbols' string table is the debug file's when
        // the symbols are).
        let strtab = match debug {
            Some(d) if strtab.from_debug => Region::of(d, strtab.bytes),
            _ => Region::of(file, strtab.bytes),
        };
        t.names = Names::Files { strtab, dynstr: Region::of(file, dynstr) };
        Ok(t)
    }

    /// The table from the file's bytes (`path` names it in errors) and its debug file's.
    pub fn parse(path: &Path, file: &[u8], debug: Option<&[u8]>) -> Result<FunctionTable, Error> {
        let (mut t, (strtab, dynstr)) = Self::parse_with(path, file, debug)?;
        t.names = Names::Held { strtab: strtab.bytes.into(), dynstr: dynstr.into() };
        Ok(t)
    }

    /// The table, and the string tables its names are in.
    fn parse_with<'d>(
        path: &Path,
        file: &'d [u8],
        debug: Option<&'d [u8]>,
    ) -> Result<(FunctionTable, (StrTab<'d>, &'d [u8])), Error> {
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
        let strtab = match from_debug {
            Some(d) => StrTab { bytes: t.add_symbols(d, &runtime), from_debug: true },
            None => StrTab { bytes: t.add_symbols(&runtime, &runtime), from_debug: false },
        };
        t.sort();
        t.fixup_ends();
        t.fixup_aliases(strtab.bytes);
        t.replay.elf = t.replay.keys.len() as u32;
        let dynstr = t.add_plt(&runtime);
        t.set_reach();
        t.syms.shrink_to_fit();
        Ok((t, (strtab, dynstr)))
    }

    /// Functions in the table (PLT entries included, aliases left out).
    pub fn len(&self) -> usize {
        self.syms.len()
    }

    /// True when the table names nothing.
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// The function holding file offset `offset`, as perf finds it.
    pub fn find(&self, offset: u64) -> Option<Found> {
        let i = self.syms.partition_point(|s| s.start <= offset).checked_sub(1)?;
        let s = self.syms.get(i)?;
        let found = if s.reach > offset { self.find_in_tree(offset)? } else { s };
        holds(found, offset).then_some(Found {
            start: found.start,
            plt: found.plt,
            name: found.name,
        })
    }

    /// The names of `found` (as the symbol table spells them, mangled for Rust and C++),
    /// read from the file in one pass; `None` for a name that cannot be read (the file was
    /// replaced or rewritten since the table was parsed: parse it again).
    pub fn names(&self, found: &[Found]) -> Vec<Option<String>> {
        self.names_in(found, &[])
    }

    /// [`FunctionTable::names`], read from `mapped` (the file or its debug file, mapped
    /// already by the caller, as they were when the table was parsed) instead of opening
    /// the file again.
    pub fn names_in(&self, found: &[Found], mapped: &[&MappedFile]) -> Vec<Option<String>> {
        match &self.names {
            Names::Held { strtab, dynstr } => found
                .iter()
                .map(|f| {
                    if f.name == NO_NAME {
                        return Some(String::new());
                    }
                    let names = if f.plt { dynstr } else { strtab };
                    name_at(names, f.name as usize).map(str::to_string)
                })
                .collect(),
            Names::Files { strtab, dynstr } => {
                let in_maps = [strtab, dynstr].map(|r| mapped.iter().find_map(|m| r.in_map(m)));
                let mut files: [Option<Option<std::fs::File>>; 2] = [None, None];
                found
                    .iter()
                    .map(|f| {
                        if f.name == NO_NAME {
                            return Some(String::new());
                        }
                        if let Some(Some(names)) = in_maps.get(usize::from(f.plt)) {
                            return name_at(names, f.name as usize).map(str::to_string);
                        }
                        let region = if f.plt { dynstr } else { strtab };
                        let file = files
                            .get_mut(usize::from(f.plt))?
                            .get_or_insert_with(|| region.open())
                            .as_ref()?;
                        region.name(file, f.name)
                    })
                    .collect()
            }
        }
    }

    /// The symbol perf's tree search meets first holding `offset`.
    fn find_in_tree(&self, offset: u64) -> Option<&Sym> {
        let t = self.tree.get_or_init(|| self.build_tree());
        let sym = |n: u32| t.at.get(n as usize).and_then(|&i| self.syms.get(i as usize));
        let n = t.tree.search(|n| {
            let Some(s) = sym(n) else { return Ordering::Less };
            if offset < s.start {
                Ordering::Less
            } else if offset > s.end || (offset == s.end && offset != s.start) {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        })?;
        sym(n)
    }

    /// perf's tree, node for node: the symbol table's symbols inserted in its order, the
    /// aliases erased, then the PLT entries inserted.
    fn build_tree(&self) -> Tree {
        let keys = &self.replay.keys;
        let mut tree = tree::Tree::default();
        let key_of = |n: u32| keys.get(n as usize).copied().unwrap_or(0);
        for &k in keys.iter().take(self.replay.elf as usize) {
            tree.insert(k, key_of);
        }
        for &n in &self.replay.erased {
            tree.erase(n);
        }
        for &k in keys.iter().skip(self.replay.elf as usize) {
            tree.insert(k, key_of);
        }
        let mut at = vec![u32::MAX; keys.len()];
        for (i, s) in self.syms.iter().enumerate() {
            if let Some(slot) = at.get_mut(s.seq as usize) {
                *slot = i as u32;
            }
        }
        Tree { tree, at }
    }

    fn push(&mut self, start: u64, end: u64, binding: Binding, name: u32, plt: bool) {
        let seq = self.replay.keys.len() as u32;
        self.replay.keys.push(start);
        self.syms.push(Sym { start, end, reach: 0, name, seq, binding, plt });
    }

    /// The functions and text labels of `syms`' symbol table (else its dynamic one), at
    /// the file offsets `runtime` gives their addresses.
    /// Returns the symbol table's string table.
    fn add_symbols<'d>(&mut self, syms: &Elf<'d>, runtime: &Elf<'_>) -> &'d [u8] {
        let endian = syms.endian();
        let sections = syms.elf_section_table();
        let data = syms.data();
        let table = match sections.symbols(endian, data, elf::SHT_SYMTAB) {
            Ok(t) if !t.is_empty() => t,
            _ => match sections.symbols(endian, data, elf::SHT_DYNSYM) {
                Ok(t) => t,
                Err(_) => return &[],
            },
        };
        let strtab = sections
            .section(table.string_section())
            .ok()
            .and_then(|s| s.data(endian, data).ok())
            .unwrap_or(&[]);
        let strings = Strings::new(strtab);
        let run_sections = runtime.elf_section_table();
        let loads = loads(runtime);
        // Each section's facts, found on first use.
        let mut facts: Vec<Option<Option<SectionFacts>>> = vec![None; sections.len()];
        let mut section_facts = |index: usize| -> Option<SectionFacts> {
            *facts.get_mut(index)?.get_or_insert_with(|| {
                let index = object::SectionIndex(index);
                let mut section = sections.section(index).ok()?;
                let mut names = sections;
                let alloc = section.sh_flags(endian).0 & elf::SHF_ALLOC.0 != 0;
                // A debug file keeps its sections' headers but not their bytes (NOBITS):
                // then the file's own header says where the section is.
                if alloc && section.sh_type(endian) == elf::SHT_NOBITS {
                    section = run_sections.section(index).ok()?;
                    names = run_sections;
                }
                let name = names.section_name(endian, section).unwrap_or_default();
                Some(SectionFacts {
                    alloc,
                    code_or_data: name.windows(4).any(|w| w == b"text" || w == b"data"),
                    bias: section.sh_addr(endian).wrapping_sub(section.sh_offset(endian)),
                })
            })
        };
        self.syms.reserve(table.len());
        self.replay.keys.reserve(table.len());
        for sym in table.iter() {
            let kind = sym.st_type();
            let shndx = sym.st_shndx(endian);
            let name = sym.st_name(endian);
            if name == 0 || shndx == elf::SHN_UNDEF || shndx == elf::SHN_ABS {
                continue;
            }
            let label = kind == elf::STT_NOTYPE;
            if !matches!(kind, elf::STT_FUNC | elf::STT_GNU_IFUNC | elf::STT_OBJECT) && !label {
                continue;
            }
            let Some(section) = section_facts(usize::from(shndx.0)) else { continue };
            if !section.alloc || (label && !section.code_or_data) {
                continue;
            }
            if !strings.readable(name as usize) {
                continue;
            }
            let value = sym.st_value(endian);
            let offset = match vaddr_to_offset(&loads, value) {
                Some(o) => o,
                None => value.wrapping_sub(section.bias),
            };
            let binding = match sym.st_bind() {
                elf::STB_GLOBAL => Binding::Global,
                elf::STB_WEAK => Binding::Weak,
                _ => Binding::Local,
            };
            self.push(offset, offset.saturating_add(sym.st_size(endian)), binding, name, false);
        }
        strtab
    }

    /// Puts the symbols in offset order, those with the same start in perf's insertion
    /// order.
    fn sort(&mut self) {
        self.syms.sort_unstable_by_key(|s| (s.start, s.seq));
    }

    /// Stretches each symbol without a size to the next symbol.
    fn fixup_ends(&mut self) {
        let mut next_start = None;
        for s in self.syms.iter_mut().rev() {
            if s.end == s.start {
                s.end = match next_start {
                    Some(n) => n,
                    None => (s.start.div_ceil(4096) * 4096).saturating_add(4096),
                };
            }
            next_start = Some(s.start);
        }
    }

    /// Keeps one symbol of those starting at the same offset (walking them in order, as
    /// perf walks its tree: the survivor is compared with its own next in turn).
    fn fixup_aliases(&mut self, strtab: &[u8]) {
        let mut keep = vec![true; self.syms.len()];
        let mut curr = 0;
        for next in 1..self.syms.len() {
            let (Some(a), Some(b)) = (self.syms.get(curr), self.syms.get(next)) else { break };
            if a.start != b.start {
                curr = next;
                continue;
            }
            if first_is_better(strtab, a, b) {
                self.replay.erased.push(b.seq);
                keep[next] = false;
            } else {
                self.replay.erased.push(a.seq);
                keep[curr] = false;
                curr = next;
            }
        }
        let mut i = 0;
        self.syms.retain(|_| {
            i += 1;
            keep[i - 1]
        });
    }

    /// Sets each symbol's reach: the furthest end of the symbols before it.
    fn set_reach(&mut self) {
        let mut reach = 0;
        for s in &mut self.syms {
            s.reach = reach;
            // A symbol without a size holds its start only.
            reach = reach.max(s.end.max(s.start.saturating_add(1)));
        }
    }

    /// The PLT entries of `file`: `.plt` after its header, one per `.rela.plt` (or
    /// `.rel.plt`) entry, named after the `.dynsym` symbol the entry resolves.
    /// Returns `.dynstr`.
    fn add_plt<'d>(&mut self, file: &Elf<'d>) -> &'d [u8] {
        let endian = file.endian();
        let sections = file.elf_section_table();
        let data = file.data();
        let Some((dynsym_index, _)) =
            sections.enumerate().find(|(_, s)| s.sh_type(endian) == elf::SHT_DYNSYM)
        else {
            return &[];
        };
        let rel = sections
            .section_by_name(endian, b".rela.plt")
            .or_else(|| sections.section_by_name(endian, b".rel.plt"));
        let (Some((_, rel)), Some((_, plt))) = (rel, sections.section_by_name(endian, b".plt"))
        else {
            return &[];
        };
        if rel.sh_link(endian) as usize != dynsym_index.0 {
            return &[];
        }
        let Ok(dynsym) = sections.symbols(endian, data, elf::SHT_DYNSYM) else { return &[] };
        let entry = plt.sh_entsize(endian);
        if entry == 0 {
            return &[];
        }
        let mut at = plt.sh_offset(endian).saturating_add(entry);
        let symbols: Vec<u32> = if rel.sh_type(endian) == elf::SHT_RELA {
            match rel.data_as_array::<elf::Rela64<Endianness>, _>(endian, data) {
                Ok(r) => r.iter().map(|r| r.r_sym(endian, false)).collect(),
                Err(_) => return &[],
            }
        } else if rel.sh_type(endian) == elf::SHT_REL {
            match rel.data_as_array::<elf::Rel64<Endianness>, _>(endian, data) {
                Ok(r) => r.iter().map(|r| r.r_sym(endian)).collect(),
                Err(_) => return &[],
            }
        } else {
            return &[];
        };
        let dynstr = sections
            .section(dynsym.string_section())
            .ok()
            .and_then(|s| s.data(endian, data).ok())
            .unwrap_or(&[]);
        let first = self.syms.len();
        for index in symbols {
            let name = dynsym
                .symbol(object::SymbolIndex(index as usize))
                .ok()
                .map(|s| s.st_name(endian))
                .filter(|&n| name_at(dynstr, n as usize).is_some())
                .unwrap_or(NO_NAME);
            self.push(at, at.saturating_add(entry), Binding::Global, name, true);
            at = at.saturating_add(entry);
        }
        // Into offset order; after the symbols with the same start, as perf's tree puts a
        // later equal key.
        if self.syms.len() > first {
            self.sort();
        }
        dynstr
    }
}

/// perf's choice between two symbols at the same start (names in `strtab`): true for `a`.
fn first_is_better(strtab: &[u8], a: &Sym, b: &Sym) -> bool {
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
    let name = |s: &Sym| name_at(strtab, s.name as usize).unwrap_or("");
    let underscores = |s: &Sym| name(s).bytes().take_while(|&c| c == b'_').count();
    let (ua, ub) = (underscores(a), underscores(b));
    if ua != ub {
        return ua < ub;
    }
    let (la, lb) = (name(a).len(), name(b).len());
    if la != lb {
        return la > lb;
    }
    true
}

/// The string table a table's names are in.
struct StrTab<'d> {
    bytes: &'d [u8],
    /// In the debug file.
    from_debug: bool,
}

/// Whether `s` holds `offset`, as perf's search decides.
fn holds(s: &Sym, offset: u64) -> bool {
    s.start <= offset && (offset < s.end || (offset == s.end && offset == s.start))
}

type Elf<'d> = ElfFile64<'d, Endianness, &'d [u8]>;

fn has_section(file: &Elf<'_>, kind: object::elf::SectionType) -> bool {
    let endian = file.endian();
    file.elf_section_table().iter().any(|s| s.sh_type(endian) == kind)
}

/// The loadable segments of `file`: (vaddr, memsz, offset).
fn loads(file: &Elf<'_>) -> Vec<(u64, u64, u64)> {
    let endian = file.endian();
    file.elf_program_headers()
        .iter()
        .filter(|ph| ph.p_type(endian) == elf::PT_LOAD)
        .map(|ph| (ph.p_vaddr(endian), ph.p_memsz(endian), ph.p_offset(endian)))
        .collect()
}

/// The file offset of link-time address `vaddr`, through the loadable segment holding it.
fn vaddr_to_offset(loads: &[(u64, u64, u64)], vaddr: u64) -> Option<u64> {
    loads
        .iter()
        .find(|&&(va, memsz, _)| vaddr >= va && vaddr - va < memsz)
        .map(|&(va, _, off)| vaddr - va + off)
}

#[cfg(test)]
mod tests {
    use super::*;

    impl FunctionTable {
        /// (name, start, end, plt) of every symbol kept, in offset order.
        fn entries(&self) -> Vec<(String, u64, u64, bool)> {
            let found: Vec<Found> = self
                .syms
                .iter()
                .map(|s| Found { start: s.start, plt: s.plt, name: s.name })
                .collect();
            let names = self.names(&found);
            self.syms
                .iter()
                .zip(names)
                .map(|(s, n)| (n.expect("a readable name"), s.start, s.end, s.plt))
                .collect()
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
        let f = t.find(strong.1 + 1).unwrap();
        let name = t.names(&[f]).remove(0).unwrap();
        assert_eq!((name.as_str(), f.plt, f.start), ("__vdso_clock_gettime", false, strong.1));
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
        let name = |off| t.names(&[t.find(off)?]).remove(0);
        assert_eq!(name(main.1).as_deref(), Some("main"));
        assert_eq!(name(main.2 - 1).as_deref(), Some("main"));
        assert!(t.len() > 10 && !t.is_empty());
    }

    /// Names come from a map the caller holds, without opening the file again: a copy
    /// removed after it was mapped is still named (PLT entries too), where reading the
    /// file again finds nothing; a map of another file is not used.
    #[test]
    fn names_are_read_from_the_callers_map() {
        let dir = std::env::temp_dir().join(format!("strobe-symtab-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let copy = dir.join("clock_loop");
        std::fs::copy(strobe_testprogs::path("clock_loop"), &copy).unwrap();
        let mapped = MappedFile::open(&copy).unwrap();
        let t = FunctionTable::from_mapped(&mapped, None).unwrap();
        let e = t.entries();
        std::fs::remove_dir_all(&dir).unwrap();
        let main = e.iter().find(|x| x.0 == "main").unwrap();
        let plt = e.iter().find(|x| x.3 && x.0 == "clock_gettime").expect("a PLT entry");
        // The PLT entry as the table holds it (perf's search finds `_init` there, which
        // this file stretches over the PLT).
        let sym = |start, plt| {
            let s = t.syms.iter().find(|s| s.start == start && s.plt == plt).unwrap();
            Found { start: s.start, plt: s.plt, name: s.name }
        };
        let found = [sym(main.1, false), sym(plt.1, true)];
        assert_eq!(t.names(&found), [None, None], "the file is gone");
        let want = [Some("main".to_string()), Some("clock_gettime".to_string())];
        assert_eq!(t.names_in(&found, &[&mapped]), want);
        let other = MappedFile::open(&std::fs::read_link("/proc/self/exe").unwrap()).unwrap();
        assert_eq!(t.names_in(&found, &[&other]), [None, None]);
    }

    /// The search on the array answers as perf's tree does for every address: each
    /// symbol's edges and middle, in files with overlapping symbols (libc's nested
    /// assembly labels, `_init` stretched over the PLT) and without.
    #[test]
    fn the_array_finds_what_perfs_tree_finds() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let mut files = vec![strobe_testprogs::path("clock_loop"), exe];
        files.extend(
            ["/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"]
                .iter()
                .map(std::path::PathBuf::from)
                .filter(|p| p.exists())
                .take(1),
        );
        let mut tables: Vec<FunctionTable> =
            files.iter().map(|f| FunctionTable::open(f, None).unwrap()).collect();
        tables.push(FunctionTable::parse(Path::new("[vdso]"), &vdso(), None).unwrap());
        let mut overlaps = 0;
        for t in &tables {
            let tree = |off: u64| {
                let s = t.find_in_tree(off).filter(|s| holds(s, off))?;
                Some(Found { start: s.start, plt: s.plt, name: s.name })
            };
            for s in &t.syms {
                overlaps += usize::from(s.reach > s.start);
                let mid = s.start + (s.end - s.start) / 2;
                for off in [
                    s.start.saturating_sub(1),
                    s.start,
                    s.start + 1,
                    mid,
                    s.end - 1,
                    s.end,
                    s.end + 1,
                ] {
                    assert_eq!(t.find(off), tree(off), "offset {off:#x} of {s:?}");
                }
            }
        }
        // The files do hold overlapping symbols, where the tree decides.
        assert!(overlaps > 0);
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
