//! Reading an ELF file for probing: its function symbols (from `.symtab` and `.dynsym`,
//! with Rust and C++ names demangled), its loadable segments (to turn a virtual address
//! into the file offset a uprobe needs), its dynamic section (needed libraries, rpath,
//! runpath, soname) and its USDT notes.
//!
//! The file is read once and summarised; nothing here keeps the file open or mapped. This
//! module must never guess: an address outside every file-backed segment has no offset.

use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{Dyn as _, FileHeader, ProgramHeader as _};
use object::{Object, ObjectSection, ObjectSymbol};

use crate::usdt::{self, UsdtNote};
use crate::Error;

/// A loadable segment (`PT_LOAD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Link-time virtual address.
    pub vaddr: u64,
    /// Size in memory.
    pub memsz: u64,
    /// Offset of its first byte in the file.
    pub offset: u64,
    /// Bytes backed by the file (the rest, up to `memsz`, is zero-filled).
    pub filesz: u64,
    /// Executable (`PF_X`).
    pub exec: bool,
}

/// A function defined in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// The symbol name as stored (mangled for Rust and C++).
    pub name: String,
    /// The demangled name, when the symbol is a Rust or C++ mangled name: Rust without its
    /// hash (`crate::module::func`), C++ with parameters (`ns::func(int)`).
    pub demangled: Option<String>,
    /// The C++ demangled name without parameters (`ns::func`), when it differs.
    pub demangled_base: Option<String>,
    /// Link-time virtual address.
    pub vaddr: u64,
    /// Size in bytes (0 when the symbol does not say).
    pub size: u64,
    /// Offset of the first instruction in the file: what a uprobe is attached to.
    pub file_offset: u64,
    /// A GNU indirect function: the symbol is the resolver that picks an implementation
    /// at load time, not the implementation itself.
    pub ifunc: bool,
}

impl Function {
    /// The name to show people: demangled when possible.
    pub fn display_name(&self) -> &str {
        self.demangled.as_deref().unwrap_or(&self.name)
    }

    /// True when `query` names this function: the stored name, the demangled name, or
    /// (C++) the demangled name without parameters.
    pub fn matches(&self, query: &str) -> bool {
        self.name == query
            || self.demangled.as_deref() == Some(query)
            || self.demangled_base.as_deref() == Some(query)
    }
}

/// What the dynamic section says about loading the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamicInfo {
    /// `DT_NEEDED` entries, in order.
    pub needed: Vec<String>,
    /// `DT_RPATH` directories (unexpanded).
    pub rpath: Vec<String>,
    /// `DT_RUNPATH` directories (unexpanded).
    pub runpath: Vec<String>,
    /// `DT_SONAME`.
    pub soname: Option<String>,
    /// `DF_1_NODEFLIB`: the default directories and cache are not searched.
    pub nodeflib: bool,
}

/// An ELF file, summarised for probing.
#[derive(Debug, Clone)]
pub struct ElfFile {
    path: PathBuf,
    machine: u16,
    is_64: bool,
    shared: bool,
    segments: Vec<Segment>,
    functions: Vec<Function>,
    dynamic: DynamicInfo,
    usdt: Vec<UsdtNote>,
    interp: Option<PathBuf>,
}

const ELF_MAGIC: &[u8; 4] = b"\x7fELF";

impl ElfFile {
    /// Reads and summarises the ELF file at `path`.
    ///
    /// Errors: the file cannot be read, is not ELF (with a hint for scripts), or is an ELF
    /// strobe cannot probe (32-bit, big-endian on a little-endian host, corrupt).
    ///
    /// A relative `path` is made absolute against the current directory first: the
    /// kernel takes uprobe paths only as absolute ones (tracefs definitions), and a
    /// relative one would mean something else in another process.
    pub fn open(path: &Path) -> Result<ElfFile, Error> {
        let path = &std::path::absolute(path).map_err(|source| Error::Io {
            what: format!("finding {} from the current directory", path.display()),
            source,
        })?;
        let data = std::fs::read(path)
            .map_err(|source| Error::Io { what: format!("reading {}", path.display()), source })?;
        Self::parse(path, &data)
    }

    /// Summarises ELF bytes read from `path` (used in errors and for `$ORIGIN`).
    pub fn parse(path: &Path, data: &[u8]) -> Result<ElfFile, Error> {
        if data.len() < 4 || &data[..4] != ELF_MAGIC {
            let why = if data.starts_with(b"#!") {
                "it is a script (starts with #!); probe the interpreter or the program it runs"
                    .to_string()
            } else if data.is_empty() {
                "the file is empty".to_string()
            } else {
                "it does not start with the ELF magic bytes".to_string()
            };
            return Err(Error::NotElf { path: path.to_path_buf(), why });
        }
        if data.get(4) != Some(&elf::ELFCLASS64) {
            return Err(Error::NotElf {
                path: path.to_path_buf(),
                why: "it is a 32-bit ELF file; strobe probes 64-bit programs".to_string(),
            });
        }
        let file =
            object::read::elf::ElfFile64::<object::Endianness>::parse(data).map_err(|e| {
                Error::NotElf {
                    path: path.to_path_buf(),
                    why: format!("it is a corrupt ELF file ({e})"),
                }
            })?;
        let endian = file.endian();
        let header = file.elf_header();
        let machine = header.e_machine(endian);
        let shared = header.e_type(endian) == elf::ET_DYN;

        let mut segments = Vec::new();
        let mut interp = None;
        for ph in file.elf_program_headers() {
            match ph.p_type(endian) {
                elf::PT_LOAD => segments.push(Segment {
                    vaddr: ph.p_vaddr(endian),
                    memsz: ph.p_memsz(endian),
                    offset: ph.p_offset(endian),
                    filesz: ph.p_filesz(endian),
                    exec: ph.p_flags(endian) & elf::PF_X != 0,
                }),
                elf::PT_INTERP => {
                    if let Ok(bytes) = ph.data(endian, data) {
                        let s = bytes.split(|&b| b == 0).next().unwrap_or_default();
                        interp = Some(PathBuf::from(String::from_utf8_lossy(s).into_owned()));
                    }
                }
                _ => {}
            }
        }

        let dynamic = read_dynamic(&file, data)?;
        let mut me = ElfFile {
            path: path.to_path_buf(),
            machine,
            is_64: true,
            shared,
            segments,
            functions: Vec::new(),
            dynamic,
            usdt: Vec::new(),
            interp,
        };
        me.functions = me.read_functions(&file);
        me.usdt = me.read_usdt(&file)?;
        Ok(me)
    }

    fn read_functions(&self, file: &object::read::elf::ElfFile64<'_>) -> Vec<Function> {
        let mut out: Vec<Function> = Vec::new();
        for sym in file.symbols().chain(file.dynamic_symbols()) {
            if sym.is_undefined() || sym.section_index().is_none() {
                continue;
            }
            let raw = sym.elf_symbol();
            let st_type = raw.st_type();
            let is_func = st_type == elf::STT_FUNC || st_type == elf::STT_GNU_IFUNC;
            let vaddr = sym.address();
            let Ok(name) = sym.name() else { continue };
            if name.is_empty() || name.starts_with('$') || name.starts_with(".L") || vaddr == 0 {
                continue;
            }
            // Untyped symbols count only when they sit in executable code (assembly
            // routines written without `.type`); data labels like `_end` do not.
            let untyped_code =
                st_type == elf::STT_NOTYPE && self.segment_of(vaddr).is_some_and(|s| s.exec);
            if !(is_func || untyped_code) {
                continue;
            }
            let Some(file_offset) = self.vaddr_to_offset(vaddr) else { continue };
            if out.iter().any(|f| f.name == name && f.vaddr == vaddr) {
                continue;
            }
            let (demangled, demangled_base) = demangle(name);
            out.push(Function {
                name: name.to_string(),
                demangled,
                demangled_base,
                vaddr,
                size: sym.size(),
                file_offset,
                ifunc: st_type == elf::STT_GNU_IFUNC,
            });
        }
        out.sort_by(|a, b| a.vaddr.cmp(&b.vaddr).then_with(|| a.name.cmp(&b.name)));
        out
    }

    fn read_usdt(&self, file: &object::read::elf::ElfFile64<'_>) -> Result<Vec<UsdtNote>, Error> {
        let Some(section) = file.section_by_name(".note.stapsdt") else { return Ok(Vec::new()) };
        let bytes = section.data().map_err(|e| Error::NotElf {
            path: self.path.clone(),
            why: format!("its .note.stapsdt section cannot be read ({e})"),
        })?;
        let base = file.section_by_name(".stapsdt.base").map(|s| s.address());
        let little = file.is_little_endian();
        let mut notes = usdt::parse_notes(bytes, little).map_err(|why| Error::NotElf {
            path: self.path.clone(),
            why: format!("its .note.stapsdt section is malformed ({why})"),
        })?;
        for n in &mut notes {
            // Prelink may have moved the file after the notes were written: the note
            // records where .stapsdt.base was, the section says where it is now.
            if let (Some(actual), true) = (base, n.base != 0) {
                n.pc = n.pc.wrapping_add(actual.wrapping_sub(n.base));
            }
            n.file_offset = self.vaddr_to_offset(n.pc);
            n.semaphore_offset =
                if n.semaphore == 0 { None } else { self.vaddr_to_offset(n.semaphore) };
        }
        Ok(notes)
    }

    /// The path this file was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `e_machine` (e.g. `EM_X86_64` = 62).
    pub fn machine(&self) -> u16 {
        self.machine
    }

    /// True for 64-bit files (the only kind [`open`](Self::open) accepts).
    pub fn is_64(&self) -> bool {
        self.is_64
    }

    /// True for `ET_DYN` files: shared libraries and position-independent executables.
    pub fn is_position_independent(&self) -> bool {
        self.shared
    }

    /// The `PT_INTERP` program interpreter (the dynamic linker), if any.
    pub fn interpreter(&self) -> Option<&Path> {
        self.interp.as_deref()
    }

    /// Loadable segments.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Function symbols, sorted by address.
    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// The dynamic section's loading information.
    pub fn dynamic(&self) -> &DynamicInfo {
        &self.dynamic
    }

    /// USDT probes (`.note.stapsdt`), in note order.
    pub fn usdt(&self) -> &[UsdtNote] {
        &self.usdt
    }

    /// The loadable segment containing `vaddr` in its file-backed part.
    pub fn segment_of(&self, vaddr: u64) -> Option<&Segment> {
        self.segments.iter().find(|s| vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz)
    }

    /// The file offset of link-time address `vaddr`, if it lies in a file-backed part of a
    /// loadable segment. Works the same for PIE and non-PIE files and shared libraries,
    /// because uprobes are keyed by (inode, file offset), not by address.
    pub fn vaddr_to_offset(&self, vaddr: u64) -> Option<u64> {
        self.segment_of(vaddr).map(|s| vaddr - s.vaddr + s.offset)
    }

    /// The functions that `query` names (see [`Function::matches`]); aliases at one address
    /// are reported once.
    pub fn find_functions(&self, query: &str) -> Vec<&Function> {
        let mut out: Vec<&Function> = Vec::new();
        for f in self.functions.iter().filter(|f| f.matches(query)) {
            if !out.iter().any(|o| o.vaddr == f.vaddr) {
                out.push(f);
            }
        }
        out
    }

    /// The function whose body contains `vaddr` (by symbol size), if any.
    pub fn function_at(&self, vaddr: u64) -> Option<&Function> {
        self.functions.iter().find(|f| vaddr >= f.vaddr && vaddr < f.vaddr + f.size.max(1))
    }
}

fn read_dynamic(
    file: &object::read::elf::ElfFile64<'_>,
    data: &[u8],
) -> Result<DynamicInfo, Error> {
    let endian = file.endian();
    let mut info = DynamicInfo::default();
    let Ok(Some((dyns, strtab_index))) = file.elf_section_table().dynamic(endian, data) else {
        return Ok(info);
    };
    let strings = file.elf_section_table().strings(endian, data, strtab_index).ok();
    let string = |val: u64| -> Option<String> {
        let s = strings?.get(u32::try_from(val).ok()?).ok()?;
        Some(String::from_utf8_lossy(s).into_owned())
    };
    for d in dyns {
        let tag = d.d_tag(endian) as u32;
        let val = d.d_val(endian);
        match tag {
            elf::DT_NULL => break,
            elf::DT_NEEDED => info.needed.extend(string(val)),
            elf::DT_SONAME => info.soname = string(val),
            elf::DT_RPATH => {
                info.rpath.extend(string(val).iter().flat_map(|s| split_path_list(s)));
            }
            elf::DT_RUNPATH => {
                info.runpath.extend(string(val).iter().flat_map(|s| split_path_list(s)));
            }
            elf::DT_FLAGS_1 => info.nodeflib = val & u64::from(elf::DF_1_NODEFLIB) != 0,
            _ => {}
        }
    }
    Ok(info)
}

fn split_path_list(s: &str) -> Vec<String> {
    s.split(':').filter(|p| !p.is_empty()).map(str::to_string).collect()
}

/// Demangles a Rust or C++ symbol: `(full, without parameters)`. Rust names come back
/// without their hash; the second element is set only for C++ names with parameters.
pub fn demangle(name: &str) -> (Option<String>, Option<String>) {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        return (Some(format!("{d:#}")), None);
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            let full = sym.demangle().ok();
            let base = sym
                .demangle_with_options(&cpp_demangle::DemangleOptions::new().no_params())
                .ok()
                .filter(|b| Some(b) != full.as_ref());
            return (full, base);
        }
    }
    (None, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_rust_and_cpp() {
        let (d, b) = demangle("_ZN4core3fmt5write17h0123456789abcdefE");
        assert_eq!(d.as_deref(), Some("core::fmt::write"));
        assert_eq!(b, None);
        let (d, b) = demangle("_ZN2ns4workEi");
        assert_eq!(d.as_deref(), Some("ns::work(int)"));
        assert_eq!(b.as_deref(), Some("ns::work"));
        assert_eq!(demangle("plain_c"), (None, None));
    }

    #[test]
    fn non_elf_files_are_diagnosed() {
        let e = ElfFile::parse(Path::new("run.sh"), b"#!/bin/sh\necho hi\n").unwrap_err();
        assert!(e.to_string().contains("script"), "{e}");
        let e = ElfFile::parse(Path::new("notes.txt"), b"hello").unwrap_err();
        assert!(e.to_string().contains("not an ELF file"), "{e}");
    }

    #[test]
    fn own_executable_functions_resolve_to_offsets_inside_executable_segments() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let f = ElfFile::open(&exe).unwrap();
        assert!(f.is_64());
        let main = f.find_functions("main");
        assert_eq!(main.len(), 1, "one main");
        let main = main[0];
        let seg = f.segment_of(main.vaddr).unwrap();
        assert!(seg.exec, "main is code");
        assert_eq!(main.file_offset, main.vaddr - seg.vaddr + seg.offset);
        // The Rust test function itself is found by its demangled path.
        let me = "strobe_uprobe::elf::tests::own_executable_functions_resolve_to_offsets_inside_executable_segments";
        assert_eq!(f.find_functions(me).len(), 1, "demangled Rust names resolve");
    }
}
