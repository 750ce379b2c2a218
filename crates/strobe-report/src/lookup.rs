//! Symbolizing code addresses that did not come from a recording: `(ELF file, file offset)`
//! pairs that another tool learned (the accessing instructions of `strobe watch`'s hits),
//! named by the same symbolization a report uses.
//!
//! Each distinct file is laid out in one synthetic address space at its own base, mapped
//! whole from offset 0, so that the report's normalization gives back exactly the file
//! offset asked for; the report's symbolizer then names them (ELF symbols, DWARF lines,
//! demangled Rust and C++ names), one blazesym pass per file.
//!
//! This module must never read a recording, nor symbolize any other way than the report.

use std::path::{Path, PathBuf};

use crate::input::Mapping;
use crate::symbolize::{symbolize, Spaces};

/// What a code address is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CodeLocation {
    /// The function (demangled).
    pub function: String,
    /// The file name of the module (`libc.so.6`).
    pub module: String,
    /// `file:line` of the address when DWARF line tables exist (the file as the compiler
    /// recorded it).
    pub source: Option<String>,
}

/// Each module gets 2^40 bytes (1 TiB) of the synthetic space: more than any file offset.
const SLOT_BITS: u32 = 40;

/// Symbolizes `(file, file offset)` pairs, one result per pair in order: `None` where the
/// file cannot be read or has no symbol there.
pub fn symbolize_file_offsets(addrs: &[(&Path, u64)]) -> Vec<Option<CodeLocation>> {
    let mut files: Vec<PathBuf> = Vec::new();
    let mut spaces = Spaces::default();
    let space = spaces.space_of(0);
    let mut ips = Vec::with_capacity(addrs.len());
    for &(path, offset) in addrs {
        let i = match files.iter().position(|f| f == path) {
            Some(i) => i,
            None => {
                files.push(path.to_path_buf());
                let start = (files.len() as u64) << SLOT_BITS;
                spaces.add_mapping(
                    0,
                    Mapping {
                        start,
                        end: start + (1 << SLOT_BITS),
                        offset: 0,
                        path: path.to_string_lossy().into_owned(),
                    },
                );
                files.len() - 1
            }
        };
        // Offsets beyond a slot cannot be in the file; they stay unknown.
        let ip = if offset < (1 << SLOT_BITS) { ((i as u64 + 1) << SLOT_BITS) + offset } else { 0 };
        ips.push((space, ip));
    }
    symbolize(&mut spaces, &ips)
        .into_iter()
        .map(|f| {
            // The report names what it cannot symbolize "[unknown ...]"; here that is None.
            (!f.function.starts_with("[unknown")).then_some(CodeLocation {
                function: f.function,
                module: f.module,
                source: f.source,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A function of this test binary, looked up by its file offset.
    #[inline(never)]
    #[no_mangle]
    extern "C" fn strobe_report_lookup_target() -> u64 {
        std::hint::black_box(41) + 1
    }

    #[test]
    fn a_file_offset_names_its_function_and_source_line() {
        let addr = strobe_report_lookup_target as *const () as u64;
        let m = strobe_target::maps::resolve_address(None, addr)
            .unwrap()
            .expect("this code is file-backed");
        let exe = m.0;
        let got = symbolize_file_offsets(&[
            (&exe, m.1),
            (Path::new("/nonexistent/x"), 0),
            (&exe, 1 << 50),
        ]);
        let loc = got[0].as_ref().expect("symbolized");
        assert_eq!(loc.function, "strobe_report_lookup_target");
        assert_eq!(Some(loc.module.as_str()), exe.file_name().and_then(|n| n.to_str()));
        assert!(loc.source.as_deref().is_some_and(|s| s.contains("lookup.rs:")), "{loc:?}");
        assert_eq!(got[1], None, "an unreadable file");
        assert_eq!(got[2], None, "an offset no file has");
    }
}
