//! `.debug_frame` for modules whose `.eh_frame` does not cover their code
//! (built with `-fno-asynchronous-unwind-tables`): read from the module's
//! file when the module is first scanned, indexed by address.
//!
//! Owns: [`DebugFrame`] (the section's bytes and a sorted FDE index) and the
//! minimal ELF64 reader that finds it (also used for the modules of another
//! process, built from their files: [`section`], [`load_segments`]).
//!
//! Must never: run in a signal handler (it reads files and allocates); trust
//! the file (every offset is checked; a malformed file gives no table).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use gimli::{BaseAddresses, CieOrFde, LittleEndian, UnwindSection};

/// A module's `.debug_frame`, with its FDEs sorted by address (link-time
/// addresses: subtract the load bias before searching).
#[derive(Debug)]
pub(crate) struct DebugFrame {
    pub(crate) data: Box<[u8]>,
    /// `(start, end, offset of the FDE)`, sorted by start.
    index: Box<[(u64, u64, u32)]>,
}

impl DebugFrame {
    /// The section offset of the FDE covering link-time address `svma`.
    /// Async-signal-safe.
    #[inline]
    pub(crate) fn fde_offset(&self, svma: u64) -> Option<usize> {
        let i = self.index.partition_point(|e| e.0 <= svma).checked_sub(1)?;
        let e = self.index[i];
        (svma < e.1).then_some(e.2 as usize)
    }

    /// Loads and indexes the `.debug_frame` of the ELF file at `path`, if it
    /// has an uncompressed one with at least one FDE.
    pub(crate) fn load(path: &Path) -> Option<DebugFrame> {
        let data = read_section(path, b".debug_frame")?;
        let mut section = gimli::DebugFrame::new(&data, LittleEndian);
        section.set_address_size(8);
        let bases = BaseAddresses::default();
        let mut entries = section.entries(&bases);
        let mut index = Vec::new();
        while let Ok(Some(entry)) = entries.next() {
            if let CieOrFde::Fde(partial) = entry {
                let offset = u32::try_from(partial.offset()).ok()?;
                if let Ok(fde) = partial.parse(gimli::DebugFrame::cie_from_offset) {
                    if fde.len() > 0 {
                        index.push((fde.initial_address(), fde.end_address(), offset));
                    }
                }
            }
        }
        if index.is_empty() {
            return None;
        }
        index.sort_unstable();
        Some(DebugFrame { data: data.into_boxed_slice(), index: index.into_boxed_slice() })
    }
}

const SHF_COMPRESSED: u64 = 0x800;
const SHT_NOBITS: u32 = 8;

fn u16_at(b: &[u8], o: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], o: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], o: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?))
}

fn read_at(f: &mut File, offset: u64, len: u64) -> Option<Vec<u8>> {
    // A section larger than 256 MiB is not an unwind table we want.
    if len > 256 << 20 {
        return None;
    }
    let mut buf = vec![0; len as usize];
    f.seek(SeekFrom::Start(offset)).ok()?;
    f.read_exact(&mut buf).ok()?;
    Some(buf)
}

/// The file at `path` and its ELF header, if it is a little-endian ELF64 file.
fn open_elf64(path: &Path) -> Option<(File, Vec<u8>)> {
    let mut f = File::open(path).ok()?;
    let eh = read_at(&mut f, 0, 64)?;
    // ELF magic, 64-bit, little-endian.
    (eh.get(0..6)? == b"\x7fELF\x02\x01").then_some((f, eh))
}

/// The bytes of section `name` of a little-endian ELF64 file.
fn read_section(path: &Path, name: &[u8]) -> Option<Vec<u8>> {
    section(path, name).map(|(_, bytes)| bytes)
}

/// The `PT_LOAD` segments of a little-endian ELF64 file: (file offset, virtual
/// address, file size, executable).
pub(super) fn load_segments(path: &Path) -> Option<Vec<(u64, u64, u64, bool)>> {
    let (mut f, eh) = open_elf64(path)?;
    let phoff = u64_at(&eh, 0x20)?;
    let phentsize = u64::from(u16_at(&eh, 0x36)?);
    let phnum = u64::from(u16_at(&eh, 0x38)?);
    if phoff == 0 || phentsize < 56 || phnum == 0 {
        return None;
    }
    let ph = read_at(&mut f, phoff, phentsize * phnum)?;
    let mut out = Vec::new();
    for i in 0..phnum {
        let o = (i * phentsize) as usize;
        if u32_at(&ph, o)? == 1 {
            // PT_LOAD: p_flags, p_offset, p_vaddr, p_filesz.
            let exec = u32_at(&ph, o + 4)? & 1 != 0;
            out.push((u64_at(&ph, o + 8)?, u64_at(&ph, o + 0x10)?, u64_at(&ph, o + 0x20)?, exec));
        }
    }
    Some(out)
}

/// The link-time address and bytes of section `name` of a little-endian ELF64
/// file (`None` when absent, empty, compressed or without file bytes).
pub(super) fn section(path: &Path, name: &[u8]) -> Option<(u64, Vec<u8>)> {
    let (mut f, eh) = open_elf64(path)?;
    let shoff = u64_at(&eh, 0x28)?;
    let shentsize = u64::from(u16_at(&eh, 0x3a)?);
    let shnum = u64::from(u16_at(&eh, 0x3c)?);
    let shstrndx = u64::from(u16_at(&eh, 0x3e)?);
    if shoff == 0 || shentsize < 64 || shnum == 0 || shstrndx >= shnum {
        return None;
    }
    let sh = read_at(&mut f, shoff, shentsize * shnum)?;
    let header = |i: u64| -> Option<(u32, u32, u64, u64, u64, u64)> {
        let o = (i * shentsize) as usize;
        Some((
            u32_at(&sh, o)?,        // sh_name
            u32_at(&sh, o + 4)?,    // sh_type
            u64_at(&sh, o + 8)?,    // sh_flags
            u64_at(&sh, o + 0x18)?, // sh_offset
            u64_at(&sh, o + 0x20)?, // sh_size
            u64_at(&sh, o + 0x10)?, // sh_addr
        ))
    };
    let (_, _, _, str_off, str_size, _) = header(shstrndx)?;
    let names = read_at(&mut f, str_off, str_size)?;
    for i in 0..shnum {
        let (n, ty, flags, off, size, addr) = header(i)?;
        let start = n as usize;
        let matches = names.get(start..start + name.len()) == Some(name)
            && names.get(start + name.len()) == Some(&0);
        if matches {
            if ty == SHT_NOBITS || flags & SHF_COMPRESSED != 0 || size == 0 {
                return None;
            }
            return read_at(&mut f, off, size).map(|b| (addr, b));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_the_debug_frame_of_a_program_built_without_eh_frame_entries() {
        let path = strobe_testprogs::path("unwind_debugframe");
        let df = DebugFrame::load(&path).expect("a .debug_frame");
        // main, a, b (and nothing from crt, whose code has .eh_frame entries).
        assert!(df.index.len() >= 3, "{:?}", df.index);
        for &(start, end, offset) in df.index.iter() {
            assert!(start < end);
            assert_eq!(df.fde_offset(start), Some(offset as usize));
            assert_eq!(df.fde_offset(end - 1), Some(offset as usize));
        }
        assert_eq!(df.fde_offset(0), None);
        // The unwind_nofp build has no .debug_frame.
        assert!(DebugFrame::load(&strobe_testprogs::path("unwind_nofp")).is_none());
        assert!(DebugFrame::load(Path::new("/nonexistent")).is_none());
    }
}
