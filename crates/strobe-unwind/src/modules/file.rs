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
