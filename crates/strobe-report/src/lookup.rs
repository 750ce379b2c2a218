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
    /// `file:line` of the address in `function` when DWARF line tables exist (the file
    /// as the compiler recorded it): where the outermost inlined call is when code was
    /// inlined there, so the line is always one of `function`'s.
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

    /// A function inlined into [`strobe_report_inline_target`] in every build profile
    /// (debug builds honour `inline(always)` too).
    #[inline(always)]
    fn inlined_into_target() -> u64 {
        // Not 41: a release build would fold this function and the one below into one.
        std::hint::black_box(43)
    }

    /// The lines from here to [`TARGET_LAST_LINE`] hold [`strobe_report_inline_target`].
    const TARGET_FIRST_LINE: u32 = line!();
    /// A function whose code is mostly another function's, inlined.
    #[inline(never)]
    #[no_mangle]
    extern "C" fn strobe_report_inline_target() -> u64 {
        inlined_into_target() + 1
    }
    const TARGET_LAST_LINE: u32 = line!();

    #[test]
    fn code_inlined_into_a_function_names_a_line_of_that_function() {
        let addr = strobe_report_inline_target as *const () as u64;
        let (exe, off) = strobe_target::maps::resolve_address(None, addr)
            .unwrap()
            .expect("this code is file-backed");
        // Every byte from its entry on that is named after it (the function is a few
        // dozen bytes long; what follows is other functions').
        let addrs: Vec<(&Path, u64)> = (0..256).map(|k| (exe.as_path(), off + k)).collect();
        let got = symbolize_file_offsets(&addrs);
        let mine: Vec<&CodeLocation> = got
            .iter()
            .flatten()
            .take_while(|l| l.function == "strobe_report_inline_target")
            .collect();
        assert!(mine.len() >= 4, "{got:?}");
        let mut lines = 0;
        for loc in mine {
            let source = loc.source.as_deref().expect("a DWARF source");
            // The compiler's own code (a debug build's overflow check) has line 0, given
            // as the file alone.
            let (file, line) = source.rsplit_once(':').unwrap_or((source, ""));
            assert!(file.ends_with("lookup.rs"), "{source} is not in lookup.rs");
            let Ok(line) = line.parse::<u32>() else { continue };
            lines += 1;
            assert!(
                (TARGET_FIRST_LINE..=TARGET_LAST_LINE).contains(&line),
                "{source} is not a line of strobe_report_inline_target \
                 (lookup.rs:{TARGET_FIRST_LINE}-{TARGET_LAST_LINE})"
            );
        }
        assert!(lines >= 2, "{got:?}");
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
