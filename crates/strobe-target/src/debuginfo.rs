//! Names for code that has no symbol: what an ELF file still says about its functions when
//! its symbol table is gone, and how to find the debug information kept elsewhere.
//!
//! - [`CodeIndex::fde_ranges`]: the `.eh_frame` FDEs. Every function compiled with
//!   unwind tables (the default on x86-64, stripped or not) has one, starting at the
//!   function's first instruction, so a stripped library still splits into functions at
//!   its FDE boundaries (`liblzma.so.5+0x15b70`).
//! - [`CodeIndex::mini_symbols`]: MiniDebugInfo, the `.gnu_debugdata` section some
//!   distributions add to stripped files: an xz-compressed ELF whose `.symtab` names the
//!   functions the dynamic symbol table does not.
//! - [`build_id`]: the GNU build id note, by which separate debug files are found
//!   (`/usr/lib/debug/.build-id/ab/cdef....debug`) and profiles name their mappings.
//!
//! Addresses here are link-time virtual addresses; [`CodeIndex::offset_to_vaddr`] turns a
//! file offset (what a report normalizes a sampled address to) into one.
//!
//! This module must never symbolize with DWARF or symbol tables the normal way (that is
//! the report's symbolizer) nor decide how a name is shown: it says what the file holds.

use std::io::Cursor;
use std::path::Path;

use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::mapped::MappedFile;
use crate::Error;

/// A named range of code from MiniDebugInfo's symbol table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MiniSymbol {
    /// Link-time virtual address of the first byte.
    pub start: u64,
    /// One past the last byte (the start when the symbol has no size).
    pub end: u64,
    /// The name as stored (mangled for Rust and C++).
    pub name: String,
}

/// What one ELF file says about its functions without its symbol table.
#[derive(Debug, Clone, Default)]
pub struct CodeIndex {
    /// `(start, end)` of every FDE, sorted by start, link-time virtual addresses.
    pub fde_ranges: Vec<(u64, u64)>,
    /// MiniDebugInfo functions, sorted by start (empty when the file has none).
    pub mini_symbols: Vec<MiniSymbol>,
    /// `(file offset, vaddr, size)` of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
}

fn not_elf(path: &Path, why: String) -> Error {
    Error::NotElf { path: path.to_path_buf(), why }
}

impl CodeIndex {
    /// Reads the FDE boundaries, MiniDebugInfo symbols and segments of the ELF file at
    /// `path`.
    pub fn open(path: &Path) -> Result<CodeIndex, Error> {
        Self::parse(path, MappedFile::open(path)?.bytes())
    }

    /// The same from the file's bytes (`path` only names it in errors).
    pub fn parse(path: &Path, data: &[u8]) -> Result<CodeIndex, Error> {
        let file = object::File::parse(data).map_err(|e| not_elf(path, e.to_string()))?;
        let segments = file
            .segments()
            .map(|s| {
                let (off, size) = s.file_range();
                (off, s.address(), size)
            })
            .collect();
        let fde_ranges = match file.section_by_name(".eh_frame") {
            Some(sec) => fde_ranges(&file, &sec).map_err(|e| {
                not_elf(path, format!("its .eh_frame section cannot be read ({e})"))
            })?,
            None => Vec::new(),
        };
        let mini_symbols = match file.section_by_name(".gnu_debugdata") {
            Some(sec) => {
                let packed = sec.data().map_err(|e| not_elf(path, e.to_string()))?;
                mini_debuginfo(packed).map_err(|why| {
                    not_elf(
                        path,
                        format!("its MiniDebugInfo (.gnu_debugdata) is unreadable: {why}"),
                    )
                })?
            }
            None => Vec::new(),
        };
        Ok(CodeIndex { fde_ranges, mini_symbols, segments })
    }

    /// The link-time virtual address of file offset `offset`, through the loadable
    /// segment that maps it.
    pub fn offset_to_vaddr(&self, offset: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|&&(off, _, size)| offset >= off && offset - off < size)
            .map(|&(off, vaddr, _)| vaddr + (offset - off))
    }

    /// The FDE whose code holds `vaddr`: `(start, end)`.
    pub fn fde_at(&self, vaddr: u64) -> Option<(u64, u64)> {
        let i = self.fde_ranges.partition_point(|&(s, _)| s <= vaddr);
        let &(s, e) = self.fde_ranges.get(i.checked_sub(1)?)?;
        (vaddr < e).then_some((s, e))
    }

    /// The MiniDebugInfo function that holds `vaddr`.
    pub fn mini_symbol_at(&self, vaddr: u64) -> Option<&MiniSymbol> {
        let i = self.mini_symbols.partition_point(|s| s.start <= vaddr);
        let s = self.mini_symbols.get(i.checked_sub(1)?)?;
        (vaddr < s.end || (s.end == s.start && vaddr == s.start)).then_some(s)
    }
}

fn fde_ranges(
    file: &object::File<'_>,
    sec: &object::Section<'_, '_>,
) -> Result<Vec<(u64, u64)>, String> {
    let data = sec.data().map_err(|e| e.to_string())?;
    let mut eh = EhFrame::new(data, LittleEndian);
    eh.set_address_size(8);
    let mut bases = BaseAddresses::default().set_eh_frame(sec.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = file.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    let mut out = Vec::new();
    let mut entries = eh.entries(&bases);
    loop {
        match entries.next() {
            Ok(None) => break,
            Ok(Some(CieOrFde::Cie(_))) => {}
            Ok(Some(CieOrFde::Fde(partial))) => {
                // An FDE whose CIE is unreadable is skipped, not fatal: the others still
                // name their functions.
                if let Ok(fde) = partial.parse(EhFrame::cie_from_offset) {
                    if fde.len() > 0 {
                        out.push((fde.initial_address(), fde.initial_address() + fde.len()));
                    }
                }
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The function symbols of a `.gnu_debugdata` payload (an xz-compressed ELF), sorted.
fn mini_debuginfo(packed: &[u8]) -> Result<Vec<MiniSymbol>, String> {
    let mut elf = Vec::new();
    lzma_rs::xz_decompress(&mut Cursor::new(packed), &mut elf).map_err(|e| e.to_string())?;
    let file = object::File::parse(elf.as_slice()).map_err(|e| e.to_string())?;
    let mut out: Vec<MiniSymbol> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
        .filter_map(|s| {
            let name = s.name().ok()?.to_string();
            Some(MiniSymbol { start: s.address(), end: s.address() + s.size(), name })
        })
        .collect();
    out.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
    out.dedup_by_key(|s| s.start);
    Ok(out)
}

/// The GNU build id of the ELF file at `path`, when it has one.
pub fn build_id(path: &Path) -> Result<Option<Vec<u8>>, Error> {
    build_id_in(&MappedFile::open(path)?)
}

/// The GNU build id of a mapped ELF file, when it has one.
fn build_id_in(file: &MappedFile) -> Result<Option<Vec<u8>>, Error> {
    let elf = object::File::parse(file.bytes()).map_err(|e| not_elf(file.path(), e.to_string()))?;
    Ok(elf.build_id().ok().flatten().map(<[u8]>::to_vec))
}

/// The separate debug file of the ELF file at `path`, found by its build id under one of
/// `dirs` (`DIR/.build-id/ab/cdef....debug`, as gdb and debuginfod clients lay them out).
pub fn debug_file_by_build_id(
    path: &Path,
    dirs: &[std::path::PathBuf],
) -> Option<std::path::PathBuf> {
    debug_file_of(&MappedFile::open(path).ok()?, dirs)
}

/// [`debug_file_by_build_id`] of a file mapped already.
pub fn debug_file_of(file: &MappedFile, dirs: &[std::path::PathBuf]) -> Option<std::path::PathBuf> {
    let id = build_id_in(file).ok()??;
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let (head, tail) = hex.split_at_checked(2)?;
    dirs.iter()
        .map(|d| d.join(".build-id").join(head).join(format!("{tail}.debug")))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary is built with unwind tables: its FDEs cover its own functions,
    /// each starting where the symbol table says the function starts.
    #[test]
    fn fdes_start_at_functions() {
        let exe = std::env::current_exe().unwrap();
        let index = CodeIndex::open(&exe).unwrap();
        assert!(index.fde_ranges.len() > 100, "{} FDEs", index.fde_ranges.len());
        let elf = crate::elf::ElfFile::open(&exe).unwrap();
        let f = elf
            .functions()
            .iter()
            .find(|f| f.name.contains("fdes_start_at_functions") && f.size > 0)
            .expect("this test is in the symbol table");
        assert_eq!(index.fde_at(f.vaddr + 1), Some((f.vaddr, f.vaddr + f.size)));
        let off = elf.vaddr_to_offset(f.vaddr).unwrap();
        assert_eq!(index.offset_to_vaddr(off), Some(f.vaddr));
        assert!(build_id(&exe).unwrap().is_some_and(|id| id.len() >= 16));
    }
}
