//! Modules of another process, built from their files: what a walk of a
//! stack copied by the kernel (`PERF_SAMPLE_STACK_USER`) needs to know of the
//! code the process had mapped, from the mapping's address, length and file
//! offset (a `PERF_RECORD_MMAP2`).
//!
//! Owns: [`Module::from_file`]. Its unwind tables are copied from the file,
//! never read from the other process.
//!
//! Must never: run in a signal handler (it reads files and allocates); trust
//! the file (every offset is checked; a malformed file gives no module).

use std::path::Path;

use super::debug_frame::{load_segments, section};
use super::scan::Tables;
use super::{DebugFrame, Module};

impl Module {
    /// The module a process mapped from `path` at `[start, end)`, file offset
    /// `pgoff` (an executable mapping): its load bias from the `PT_LOAD`
    /// segment the mapping starts in, its `.eh_frame_hdr` and `.eh_frame`
    /// copied from the file, and its `.debug_frame` when it has one. `None`
    /// when the file is not a little-endian ELF64 with such a segment, or has
    /// no unwind tables at all.
    pub fn from_file(path: &Path, start: u64, end: u64, pgoff: u64) -> Option<Module> {
        let loads = load_segments(path)?;
        // The executable segment the mapping holds: its page-aligned file
        // range covers `pgoff` (the page may also hold the tail of the
        // segment before it, which is why the executable one is asked for).
        let &(p_offset, p_vaddr, _, _) = loads
            .iter()
            .find(|l| l.3 && (l.0 & !0xfff) <= pgoff && pgoff < l.0.saturating_add(l.2.max(1)))?;
        // The file byte at `pgoff` is at `start`, and file offset `p_offset`
        // holds virtual address `p_vaddr`.
        let bias = start.wrapping_add(p_offset).wrapping_sub(pgoff).wrapping_sub(p_vaddr);
        let cfi = match (section(path, b".eh_frame_hdr"), section(path, b".eh_frame")) {
            (Some((hdr_addr, hdr)), Some((eh_addr, eh))) => Some(Tables::owned(
                bias.wrapping_add(hdr_addr),
                hdr,
                bias.wrapping_add(eh_addr),
                eh,
            )),
            // Static programs often have no `.eh_frame_hdr`: its search table is built
            // here from the FDEs.
            (None, Some((eh_addr, eh))) => synthesize_hdr(eh_addr, &eh).map(|(hdr_addr, hdr)| {
                Tables::owned(bias.wrapping_add(hdr_addr), hdr, bias.wrapping_add(eh_addr), eh)
            }),
            _ => None,
        };
        let debug = DebugFrame::load(path);
        if cfi.is_none() && debug.is_none() {
            return None;
        }
        Some(Module {
            name: path.to_string_lossy().into(),
            bias,
            start,
            end,
            permanent: false,
            cfi,
            debug,
        })
    }
}

/// An `.eh_frame_hdr` for an `.eh_frame` at link-time address `eh_addr` that came
/// without one: version 1, the FDE table sorted by initial location, every pointer
/// relative to the header's own address (placed just past the `.eh_frame`, which the
/// walker never reads from memory: the tables are copies). `None` when the section has
/// no FDE or an address falls out of the table's 32-bit reach.
fn synthesize_hdr(eh_addr: u64, eh: &[u8]) -> Option<(u64, Vec<u8>)> {
    use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
    let section = EhFrame::new(eh, LittleEndian);
    let bases = BaseAddresses::default().set_eh_frame(eh_addr);
    let mut fdes: Vec<(u64, u64)> = Vec::new();
    let mut entries = section.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        if let CieOrFde::Fde(partial) = entry {
            let offset = partial.offset() as u64;
            if let Ok(fde) = partial.parse(EhFrame::cie_from_offset) {
                if fde.len() > 0 {
                    fdes.push((fde.initial_address(), eh_addr.wrapping_add(offset)));
                }
            }
        }
    }
    if fdes.is_empty() {
        return None;
    }
    fdes.sort_unstable();
    let hdr_addr = eh_addr.wrapping_add(eh.len() as u64).next_multiple_of(8);
    let rel = |a: u64| -> Option<[u8; 4]> {
        i32::try_from(a.wrapping_sub(hdr_addr) as i64).ok().map(i32::to_le_bytes)
    };
    // version, eh_frame_ptr: pcrel|sdata4, fde_count: udata4, table: datarel|sdata4.
    let mut h = vec![1u8, 0x1b, 0x03, 0x3b];
    let ptr = i32::try_from(eh_addr.wrapping_sub(hdr_addr.wrapping_add(4)) as i64).ok()?;
    h.extend_from_slice(&ptr.to_le_bytes());
    h.extend_from_slice(&u32::try_from(fdes.len()).ok()?.to_le_bytes());
    for (init, fde) in fdes {
        h.extend_from_slice(&rel(init)?);
        h.extend_from_slice(&rel(fde)?);
    }
    Some((hdr_addr, h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, Pointer, UnwindSection};

    /// The table built for an `.eh_frame` finds, for every address the linker's
    /// `.eh_frame_hdr` lists, the same FDE (this test program has both).
    #[test]
    fn a_synthesized_search_table_finds_what_the_linkers_finds() {
        let exe = std::env::current_exe().unwrap();
        let (hdr_addr, hdr) = section(&exe, b".eh_frame_hdr").expect(".eh_frame_hdr");
        let (eh_addr, eh) = section(&exe, b".eh_frame").expect(".eh_frame");
        let (syn_addr, syn) = synthesize_hdr(eh_addr, &eh).expect("a table");
        let b1 = BaseAddresses::default().set_eh_frame_hdr(hdr_addr).set_eh_frame(eh_addr);
        let b2 = BaseAddresses::default().set_eh_frame_hdr(syn_addr).set_eh_frame(eh_addr);
        let linker = EhFrameHdr::new(&hdr, LittleEndian).parse(&b1, 8).unwrap();
        let ours = EhFrameHdr::new(&syn, LittleEndian).parse(&b2, 8).unwrap();
        let (t1, t2) = (linker.table().unwrap(), ours.table().unwrap());
        let frame = EhFrame::new(&eh, LittleEndian);
        let mut checked = 0;
        let mut iter = t1.iter(&b1);
        while let Ok(Some((Pointer::Direct(init), _))) = iter.next() {
            let a = t1.lookup(init, &b1).unwrap();
            let b = t2.lookup(init, &b2).unwrap();
            assert_eq!(a, b, "at {init:#x}");
            assert!(t2.fde_for_address(&frame, &b2, init, EhFrame::cie_from_offset).is_ok());
            checked += 1;
        }
        assert!(checked > 100, "{checked} FDEs");
    }
}
