//! Reading an ELF file: its functions and variables (from `.symtab` and `.dynsym`, with
//! Rust and C++ names demangled), its loadable segments (to turn a link-time address into
//! the file offset a uprobe or a symbolizer needs), its dynamic section (needed libraries,
//! rpath, runpath, soname), its program interpreter and its USDT notes.
//!
//! The file is read through a cache that fetches only the parts the summary needs (headers,
//! symbol and string tables, notes; never the debug sections), summarised, and closed:
//! nothing here keeps the file open or mapped. The summary is what probes (functions,
//! USDT), watchpoints (variables) and library lookup ([`crate::libpath`]) all read.
//!
//! This module must never guess: an address outside every file-backed segment has no
//! offset, and a symbol whose kind is unclear is left out rather than misfiled.

use std::fs::File;
use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{Dyn as _, ElfFile64, FileHeader, ProgramHeader as _, Sym as _};
use object::read::{ReadCache, ReadRef};
use object::{Object, ObjectSection, ObjectSymbol, SectionKind};

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
    /// Visible outside its compilation unit.
    pub global: bool,
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

/// A variable defined in the file: an `STT_OBJECT` symbol, an `STT_TLS` one, or a sized
/// untyped symbol in a data section (assembly written without `.type`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variable {
    /// The symbol name as stored (possibly mangled).
    pub name: String,
    /// The demangled name of a Rust or C++ static (`ns::state`, `app::COUNTER`).
    pub demangled: Option<String>,
    /// Link-time virtual address; for a thread-local, its offset in the TLS block.
    pub vaddr: u64,
    /// Size in bytes (0 when the symbol does not say).
    pub size: u64,
    /// Thread-local (`STT_TLS`): one copy per thread, at a per-thread address.
    pub tls: bool,
    /// Visible outside its compilation unit.
    pub global: bool,
}

impl Variable {
    /// The name to show people: demangled when possible.
    pub fn display_name(&self) -> &str {
        self.demangled.as_deref().unwrap_or(&self.name)
    }

    /// True when `query` is the stored or the demangled name.
    pub fn matches(&self, query: &str) -> bool {
        self.name == query || self.demangled.as_deref() == Some(query)
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

/// An ELF file, summarised.
#[derive(Debug, Clone)]
pub struct ElfFile {
    path: PathBuf,
    machine: u16,
    shared: bool,
    has_symtab: bool,
    segments: Vec<Segment>,
    functions: Vec<Function>,
    variables: Vec<Variable>,
    dynamic: DynamicInfo,
    usdt: Vec<UsdtNote>,
    interp: Option<PathBuf>,
}

/// The first four bytes of every ELF file.
pub const ELF_MAGIC: &[u8; 4] = b"\x7fELF";

impl ElfFile {
    /// Reads and summarises the ELF file at `path`.
    ///
    /// Errors: the file cannot be read, is not ELF (with a hint for scripts), or is an ELF
    /// strobe cannot read (32-bit, corrupt).
    ///
    /// A relative `path` is made absolute against the current directory first: the
    /// kernel takes uprobe paths only as absolute ones, and a relative one would mean
    /// something else in another process.
    pub fn open(path: &Path) -> Result<ElfFile, Error> {
        let path = &std::path::absolute(path).map_err(|source| Error::Io {
            what: format!("finding {} from the current directory", path.display()),
            source,
        })?;
        let file = File::open(path)
            .map_err(|source| Error::Io { what: format!("reading {}", path.display()), source })?;
        let cache = ReadCache::new(file);
        Self::summarise(path, &cache)
    }

    /// Summarises ELF bytes read from `path` (used in errors and for `$ORIGIN`).
    pub fn parse(path: &Path, data: &[u8]) -> Result<ElfFile, Error> {
        Self::summarise(path, data)
    }

    fn summarise<'d, R: ReadRef<'d>>(path: &Path, data: R) -> Result<ElfFile, Error> {
        let not_elf = |why: String| Error::NotElf { path: path.to_path_buf(), why };
        let ident = data.read_bytes_at(0, 5).unwrap_or_default();
        if ident.get(..4) != Some(ELF_MAGIC) {
            let head = data.read_bytes_at(0, 2).unwrap_or_default();
            return Err(not_elf(if head == b"#!" {
                "it is a script (starts with #!); name its interpreter or the program it runs"
                    .to_string()
            } else if head.is_empty() {
                "the file is empty".to_string()
            } else {
                "it does not start with the ELF magic bytes".to_string()
            }));
        }
        if ident.get(4) != Some(&elf::ELFCLASS64.0) {
            return Err(not_elf(
                "it is a 32-bit ELF file; strobe works with 64-bit programs".to_string(),
            ));
        }
        let file = ElfFile64::<object::Endianness, R>::parse(data)
            .map_err(|e| not_elf(format!("it is a corrupt ELF file ({e})")))?;
        let endian = file.endian();
        let header = file.elf_header();

        let mut segments = Vec::new();
        let mut interp = None;
        for ph in file.elf_program_headers() {
            match ph.p_type(endian) {
                elf::PT_LOAD => segments.push(Segment {
                    vaddr: ph.p_vaddr(endian),
                    memsz: ph.p_memsz(endian),
                    offset: ph.p_offset(endian),
                    filesz: ph.p_filesz(endian),
                    exec: ph.p_flags(endian).0 & elf::PF_X.0 != 0,
                }),
                elf::PT_INTERP => {
                    interp = ph.interpreter(endian, data).ok().flatten().map(cstr_path);
                }
                _ => {}
            }
        }

        let mut me = ElfFile {
            path: path.to_path_buf(),
            machine: header.e_machine(endian).0,
            shared: header.e_type(endian) == elf::ET_DYN,
            has_symtab: file.symbol_table().is_some(),
            segments,
            functions: Vec::new(),
            variables: Vec::new(),
            dynamic: read_dynamic(&file),
            usdt: Vec::new(),
            interp,
        };
        me.read_symbols(&file);
        me.usdt = me.read_usdt(&file)?;
        Ok(me)
    }

    fn read_symbols<'d, R: ReadRef<'d>>(&mut self, file: &ElfFile64<'d, object::Endianness, R>) {
        let endian = file.endian();
        for sym in file.symbols().chain(file.dynamic_symbols()) {
            let raw = sym.elf_symbol();
            let st_type = raw.st_type();
            let shndx = raw.st_shndx(endian);
            if shndx == elf::SHN_UNDEF || sym.is_undefined() {
                continue;
            }
            // Absolute and other special-index symbols are no code or data of the file;
            // a thread-local's value is an offset in the TLS block, whatever its section.
            if sym.section_index().is_none() && st_type != elf::STT_TLS {
                continue;
            }
            let Ok(name) = sym.name() else { continue };
            if name.is_empty() || name.starts_with('$') || name.starts_with(".L") {
                continue;
            }
            let vaddr = sym.address();
            let global = sym.is_global();
            let section_kind = || {
                sym.section_index().and_then(|i| file.section_by_index(i).ok()).map(|s| s.kind())
            };
            match st_type {
                elf::STT_FUNC | elf::STT_GNU_IFUNC => {
                    self.add_function(name, vaddr, sym.size(), st_type, global)
                }
                // Untyped symbols count as code only when they sit in executable code
                // (assembly routines written without `.type`); data labels like `_end` do not.
                elf::STT_NOTYPE if self.segment_of(vaddr).is_some_and(|s| s.exec) => {
                    self.add_function(name, vaddr, sym.size(), st_type, global);
                }
                elf::STT_NOTYPE => {
                    // A sized label in a data section is a variable; unsized ones are
                    // section markers (`__bss_start`, `_edata`).
                    let data = matches!(
                        section_kind(),
                        Some(
                            SectionKind::Data
                                | SectionKind::UninitializedData
                                | SectionKind::ReadOnlyData
                        )
                    );
                    if data && sym.size() != 0 {
                        self.add_variable(name, vaddr, sym.size(), false, global);
                    }
                }
                elf::STT_OBJECT | elf::STT_COMMON => {
                    self.add_variable(name, vaddr, sym.size(), false, global)
                }
                elf::STT_TLS => self.add_variable(name, vaddr, sym.size(), true, global),
                _ => {}
            }
        }
        self.functions.sort_by(|a, b| a.vaddr.cmp(&b.vaddr).then_with(|| a.name.cmp(&b.name)));
        self.variables.sort_by(|a, b| a.vaddr.cmp(&b.vaddr).then_with(|| a.name.cmp(&b.name)));
    }

    fn add_function(
        &mut self,
        name: &str,
        vaddr: u64,
        size: u64,
        st_type: elf::SymbolType,
        global: bool,
    ) {
        if vaddr == 0 {
            return;
        }
        let Some(file_offset) = self.vaddr_to_offset(vaddr) else { return };
        if self.functions.iter().any(|f| f.vaddr == vaddr && f.name == name) {
            return;
        }
        let (demangled, demangled_base) = demangle(name);
        self.functions.push(Function {
            name: name.to_string(),
            demangled,
            demangled_base,
            vaddr,
            size,
            file_offset,
            ifunc: st_type == elf::STT_GNU_IFUNC,
            global,
        });
    }

    fn add_variable(&mut self, name: &str, vaddr: u64, size: u64, tls: bool, global: bool) {
        if self.variables.iter().any(|v| v.vaddr == vaddr && v.name == name) {
            return;
        }
        self.variables.push(Variable {
            name: name.to_string(),
            demangled: demangle(name).0,
            vaddr,
            size,
            tls,
            global,
        });
    }

    fn read_usdt<'d, R: ReadRef<'d>>(
        &self,
        file: &ElfFile64<'d, object::Endianness, R>,
    ) -> Result<Vec<UsdtNote>, Error> {
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

    /// The path this file was read from (absolute).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `e_machine` (e.g. `EM_X86_64` = 62).
    pub fn machine(&self) -> u16 {
        self.machine
    }

    /// True for `ET_DYN` files: shared libraries and position-independent executables,
    /// which are loaded at a bias chosen at run time.
    pub fn is_position_independent(&self) -> bool {
        self.shared
    }

    /// True when the file has a `.symtab` (it is not stripped): without one only the
    /// exported symbols (`.dynsym`) remain, which in an executable are hardly ever its
    /// variables or static functions.
    pub fn has_symtab(&self) -> bool {
        self.has_symtab
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

    /// Variables (including thread-locals), sorted by address.
    pub fn variables(&self) -> &[Variable] {
        &self.variables
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
    /// because uprobes and symbolizers key code by (file, file offset), not by address.
    pub fn vaddr_to_offset(&self, vaddr: u64) -> Option<u64> {
        segment_offset(&self.segments, vaddr)
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

/// What an ELF file's headers say about running it, read without its symbols.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// A 64-bit file (`ELFCLASS64`).
    pub is_64: bool,
    /// `e_machine`.
    pub machine: u16,
    /// `ET_DYN` (a shared library or a position-independent executable).
    pub position_independent: bool,
    /// The `PT_INTERP` program interpreter, if any: a dynamically linked executable has
    /// one, a static one has none.
    pub interpreter: Option<PathBuf>,
    /// Loadable segments.
    pub segments: Vec<Segment>,
}

impl Identity {
    /// The file offset of link-time address `vaddr` (see [`ElfFile::vaddr_to_offset`]).
    pub fn vaddr_to_offset(&self, vaddr: u64) -> Option<u64> {
        segment_offset(&self.segments, vaddr)
    }
}

fn segment_offset(segments: &[Segment], vaddr: u64) -> Option<u64> {
    segments
        .iter()
        .find(|s| vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz)
        .map(|s| vaddr - s.vaddr + s.offset)
}

/// Reads the ELF header and program headers of `path` (nothing else): enough to know how
/// the file runs and where its link-time addresses lie in it, without its symbols. `Ok(None)` when
/// the file is not an ELF file; an error when it cannot be read or its headers are corrupt.
pub fn identify(path: &Path) -> Result<Option<Identity>, Error> {
    let file = File::open(path)
        .map_err(|source| Error::Io { what: format!("reading {}", path.display()), source })?;
    let cache = ReadCache::new(file);
    let data = &cache;
    if data.read_bytes_at(0, 4).ok() != Some(&ELF_MAGIC[..]) {
        return Ok(None);
    }
    let corrupt = |e: object::Error| Error::NotElf {
        path: path.to_path_buf(),
        why: format!("its headers are corrupt ({e})"),
    };
    match data.read_bytes_at(4, 1).ok() {
        Some([c]) if *c == elf::ELFCLASS64.0 => {
            identify_as::<elf::FileHeader64<object::Endianness>, _>(data).map(Some).map_err(corrupt)
        }
        Some([c]) if *c == elf::ELFCLASS32.0 => {
            identify_as::<elf::FileHeader32<object::Endianness>, _>(data).map(Some).map_err(corrupt)
        }
        _ => Err(Error::NotElf {
            path: path.to_path_buf(),
            why: "its ELF class is not recognised".to_string(),
        }),
    }
}

fn identify_as<'d, H: FileHeader<Endian = object::Endianness>, R: ReadRef<'d>>(
    data: R,
) -> Result<Identity, object::Error> {
    let header = H::parse(data)?;
    let endian = header.endian()?;
    let mut interpreter = None;
    let mut segments = Vec::new();
    for ph in header.program_headers(endian, data)? {
        if let Some(i) = ph.interpreter(endian, data)? {
            interpreter = Some(cstr_path(i));
        }
        if ph.p_type(endian) == elf::PT_LOAD {
            segments.push(Segment {
                vaddr: ph.p_vaddr(endian).into(),
                memsz: ph.p_memsz(endian).into(),
                offset: ph.p_offset(endian).into(),
                filesz: ph.p_filesz(endian).into(),
                exec: ph.p_flags(endian).0 & elf::PF_X.0 != 0,
            });
        }
    }
    Ok(Identity {
        is_64: header.is_type_64(),
        machine: header.e_machine(endian).0,
        position_independent: header.e_type(endian) == elf::ET_DYN,
        interpreter,
        segments,
    })
}

/// True when the ELF file at `path` is a Go program: it has the `.go.buildinfo` section
/// every Go linker since 1.13 writes (static or with cgo, stripped or not), or, failing
/// that, Go's `runtime.main` among its symbols. Reads section headers (and the symbol
/// table only when that section is absent). `Ok(false)` for a file that is not ELF.
pub fn is_go_program(path: &Path) -> Result<bool, Error> {
    let file = File::open(path)
        .map_err(|source| Error::Io { what: format!("reading {}", path.display()), source })?;
    let cache = ReadCache::new(file);
    let data = &cache;
    if data.read_bytes_at(0, 4).ok() != Some(&ELF_MAGIC[..]) {
        return Ok(false);
    }
    let Ok(obj) = object::File::parse(data) else {
        return Err(Error::NotElf {
            path: path.to_path_buf(),
            why: "its headers are corrupt".to_string(),
        });
    };
    if obj.section_by_name(".go.buildinfo").is_some() {
        return Ok(true);
    }
    Ok(obj.symbols().any(|s| s.name_bytes().is_ok_and(|n| n == b"runtime.main")))
}

/// A path from the bytes of a C string (up to its first NUL).
fn cstr_path(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let s = bytes.split(|&b| b == 0).next().unwrap_or_default();
    PathBuf::from(std::ffi::OsStr::from_bytes(s))
}

fn read_dynamic<'d, R: ReadRef<'d>>(file: &ElfFile64<'d, object::Endianness, R>) -> DynamicInfo {
    let endian = file.endian();
    let data = file.data();
    let mut info = DynamicInfo::default();
    let Ok(Some((dyns, strtab_index))) = file.elf_section_table().dynamic(endian, data) else {
        return info;
    };
    let strings = file.elf_section_table().strings(endian, data, strtab_index).ok();
    let string = |val: u64| -> Option<String> {
        let s = strings?.get(u32::try_from(val).ok()?).ok()?;
        Some(String::from_utf8_lossy(s).into_owned())
    };
    for d in dyns {
        let val = d.d_val(endian);
        match d.d_tag(endian) {
            elf::DT_NULL => break,
            elf::DT_NEEDED => info.needed.extend(string(val)),
            elf::DT_SONAME => info.soname = string(val),
            elf::DT_RPATH => {
                info.rpath.extend(string(val).iter().flat_map(|s| split_path_list(s)));
            }
            elf::DT_RUNPATH => {
                info.runpath.extend(string(val).iter().flat_map(|s| split_path_list(s)));
            }
            elf::DT_FLAGS_1 => info.nodeflib = val & elf::DF_1_NODEFLIB.0 != 0,
            _ => {}
        }
    }
    info
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
        assert_eq!(demangle("_ZN2ns5stateE").0.as_deref(), Some("ns::state"));
        assert_eq!(
            demangle("_ZN4prog7COUNTER17h0123456789abcdefE").0.as_deref(),
            Some("prog::COUNTER")
        );
        assert_eq!(demangle("plain_c"), (None, None));
    }

    /// Go programs built from tests/go, static and with cgo, are told from C programs
    /// (dynamic and static) and from files that are not ELF.
    #[test]
    fn go_programs_are_recognised_static_or_with_cgo() {
        assert!(!is_go_program(&std::env::current_exe().unwrap()).unwrap(), "a Rust test");
        assert!(!is_go_program(&strobe_testprogs::path("static_hello")).unwrap());
        assert!(!is_go_program(&strobe_testprogs::path("hello_threads")).unwrap());
        let dir = std::env::temp_dir().join(format!("strobe-go-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = dir.join("x.sh");
        std::fs::write(&text, b"#!/bin/sh\n").unwrap();
        assert!(!is_go_program(&text).unwrap());
        std::fs::write(&text, b"\x7fELF\x02\x01").unwrap();
        assert!(is_go_program(&text).is_err(), "corrupt ELF");
        std::fs::remove_dir_all(&dir).unwrap();
        for name in ["gospin_static", "gospin_cgo"] {
            match strobe_testprogs::go_program(name) {
                Ok(p) => assert!(is_go_program(&p).unwrap(), "{name}"),
                Err(why) => eprintln!("skipping {name}: {why}"),
            }
        }
    }

    #[test]
    fn non_elf_files_are_diagnosed() {
        let e = ElfFile::parse(Path::new("run.sh"), b"#!/bin/sh\necho hi\n").unwrap_err();
        assert!(e.to_string().contains("script"), "{e}");
        let e = ElfFile::parse(Path::new("notes.txt"), b"hello").unwrap_err();
        assert!(e.to_string().contains("not an ELF file"), "{e}");
        let e = ElfFile::parse(Path::new("empty"), b"").unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        let e = ElfFile::parse(Path::new("cut"), b"\x7fELF\x02\x01\x01").unwrap_err();
        assert!(e.to_string().contains("corrupt"), "{e}");
    }

    #[test]
    fn own_executable_functions_resolve_to_offsets_inside_executable_segments() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let f = ElfFile::open(&exe).unwrap();
        assert!(f.has_symtab(), "test binaries are not stripped");
        assert_eq!(f.machine(), if cfg!(target_arch = "x86_64") { 62 } else { f.machine() });
        let main = f.find_functions("main");
        assert_eq!(main.len(), 1, "one main");
        let main = main[0];
        let seg = f.segment_of(main.vaddr).unwrap();
        assert!(seg.exec, "main is code");
        assert_eq!(main.file_offset, main.vaddr - seg.vaddr + seg.offset);
        // The Rust test function itself is found by its demangled path.
        let me = "strobe_target::elf::tests::own_executable_functions_resolve_to_offsets_inside_executable_segments";
        assert_eq!(f.find_functions(me).len(), 1, "demangled Rust names resolve");
        assert!(f.interpreter().is_some_and(|i| i.to_string_lossy().contains("ld-linux")));
        assert!(f.dynamic().needed.iter().any(|n| n.starts_with("libc.so")), "{:?}", f.dynamic());
        let id = identify(&exe).unwrap().expect("an ELF file");
        assert_eq!(
            (id.is_64, id.machine, id.position_independent, id.interpreter.as_deref()),
            (true, f.machine(), f.is_position_independent(), f.interpreter())
        );
        assert_eq!(id.segments, f.segments());
        assert_eq!(id.vaddr_to_offset(main.vaddr), Some(main.file_offset));
        let script = std::env::temp_dir().join(format!("strobe-identify-{}", std::process::id()));
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        assert_eq!(identify(&script).unwrap(), None, "a script is no ELF file");
        let _ = std::fs::remove_file(&script);
    }

    /// A static of this test binary, at an address the ELF reader must report.
    #[no_mangle]
    #[used]
    static STROBE_TARGET_TEST_VARIABLE: std::sync::atomic::AtomicU64 =
        std::sync::atomic::AtomicU64::new(7);

    thread_local! {
        static PER_THREAD: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    #[test]
    fn own_variables_are_found_with_their_runtime_address_and_size() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let f = ElfFile::open(&exe).unwrap();
        let v = f
            .variables()
            .iter()
            .find(|v| v.name == "STROBE_TARGET_TEST_VARIABLE")
            .expect("the static is listed");
        assert_eq!(v.size, 8);
        assert!(!v.tls && v.global, "{v:?}");
        // Its run-time address is the link-time one plus this executable's load bias,
        // which /proc/self/maps gives: the mapping of file offset 0.
        let runtime = &STROBE_TARGET_TEST_VARIABLE as *const _ as u64;
        let maps = crate::maps::read(None).unwrap();
        let me = std::fs::canonicalize(&exe).unwrap();
        let first = crate::maps::parse(&maps)
            .find(|m| m.file() == Some(me.as_path()) && m.offset == 0)
            .expect("the executable's first mapping");
        let bias = if f.is_position_independent() { first.start } else { 0 };
        assert_eq!(bias + v.vaddr, runtime, "link-time address + bias");
        // Thread-locals are kept apart.
        PER_THREAD.with(|c| c.set(1));
        assert!(f.variables().iter().any(|v| v.tls), "Rust's thread_local! makes TLS symbols");
        assert!(f.functions().iter().all(|g| g.name != "STROBE_TARGET_TEST_VARIABLE"));
    }
}
