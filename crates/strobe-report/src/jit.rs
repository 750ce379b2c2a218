//! Names for JIT-compiled code: the symbol files a JIT writes for profilers.
//!
//! - `/tmp/perf-PID.map`: one `START SIZE name` line per compiled function (hex start and
//!   size), as V8 (`node --perf-basic-prof`), the JVM's perf-map-agent, .NET, LuaJIT and
//!   others write it.
//! - `jit-PID.dump`: the binary jitdump format (Linux perf's `tools/perf/util/jitdump.h`):
//!   a header, then records; `JIT_CODE_LOAD` names a code range and `JIT_CODE_MOVE` moves
//!   one. The JIT maps the file executable so that a profiler sees where it is; a report
//!   looks for it among the recorded mappings, then in `/tmp` and `~/.debug/jit/*/`.
//!
//! A later entry for an address replaces an earlier one (code memory is reused).
//!
//! The files are read at report time, from the pids the recording names: they must still
//! exist then (as for `perf report`).
//!
//! This module must never guess a name for an address no file names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One named range of JIT code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JitSymbol {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// The name the JIT gave it.
    pub name: String,
}

/// The JIT code of one process, from its perf map and jitdump files.
#[derive(Debug, Clone, Default)]
pub(crate) struct JitSymbols {
    /// start -> (end, name, source index), non-overlapping.
    ranges: BTreeMap<u64, (u64, String, usize)>,
    /// The files the names came from (their file names: `perf-123.map`).
    pub sources: Vec<String>,
}

impl JitSymbols {
    /// Loads the JIT symbol files of process `pid`: `/tmp/perf-PID.map` and the jitdump
    /// file among `mapped` (paths the process had mapped), or in the usual places; under
    /// `symfs` instead of `/` when given (then not in the home directory).
    pub(crate) fn load<'a>(
        pid: u32,
        mapped: impl IntoIterator<Item = &'a str>,
        symfs: Option<&Path>,
    ) -> JitSymbols {
        let under = |p: &str| match symfs {
            Some(root) => root.join(p.trim_start_matches('/')),
            None => PathBuf::from(p),
        };
        let mut out = JitSymbols::default();
        let dump_name = format!("jit-{pid}.dump");
        let mut dumps: Vec<PathBuf> = mapped
            .into_iter()
            .filter(|p| Path::new(p).file_name().is_some_and(|n| n == dump_name.as_str()))
            .map(under)
            .collect();
        if dumps.is_empty() {
            dumps.push(under("/tmp").join(&dump_name));
            if let Some(home) = std::env::var_os("HOME").filter(|_| symfs.is_none()) {
                let jit = Path::new(&home).join(".debug/jit");
                if let Ok(dirs) = std::fs::read_dir(jit) {
                    dumps.extend(dirs.flatten().map(|d| d.path().join(&dump_name)));
                }
            }
        }
        for d in dumps {
            if let Ok(bytes) = std::fs::read(&d) {
                if let Ok(syms) = parse_jitdump(&bytes) {
                    out.add(&dump_name, syms);
                    break;
                }
            }
        }
        // The map file last: for the same range, its later entries win.
        let map = under(&format!("/tmp/perf-{pid}.map"));
        if let Ok(text) = std::fs::read_to_string(&map) {
            out.add(&format!("perf-{pid}.map"), parse_perf_map(&text));
        }
        out
    }

    /// Adds symbols in order: each replaces whatever earlier symbols it overlaps.
    pub(crate) fn add(&mut self, source: &str, syms: Vec<JitSymbol>) {
        let si = self.sources.len();
        self.sources.push(source.to_string());
        for s in syms {
            if s.end <= s.start {
                continue;
            }
            // Drop earlier ranges the new one overlaps (they were replaced).
            let overlapping: Vec<u64> = self
                .ranges
                .range(..s.end)
                .rev()
                .take_while(|(_, (end, _, _))| *end > s.start)
                .map(|(&k, _)| k)
                .collect();
            for k in overlapping {
                self.ranges.remove(&k);
            }
            // The kept ranges never overlap each other, so walking back from the new
            // range's end until one ends before its start finds every overlapping one.
            self.ranges.insert(s.start, (s.end, s.name, si));
        }
    }

    /// The symbol holding `addr`, and the file that named it.
    pub(crate) fn find(&self, addr: u64) -> Option<(&str, &str)> {
        let (_, (end, name, si)) = self.ranges.range(..=addr).next_back()?;
        (addr < *end).then(|| (name.as_str(), self.sources.get(*si).map_or("", String::as_str)))
    }
}

/// Parses a perf map file: `START SIZE name` per line (hex, with or without `0x`); lines
/// that do not parse are skipped.
pub(crate) fn parse_perf_map(text: &str) -> Vec<JitSymbol> {
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    text.lines()
        .filter_map(|line| {
            let mut parts = line.trim().splitn(3, ' ');
            let start = hex(parts.next()?)?;
            let size = hex(parts.next()?)?;
            let name = parts.next().unwrap_or("").trim();
            Some(JitSymbol {
                start,
                end: start.checked_add(size)?,
                name: if name.is_empty() { format!("jit@{start:#x}") } else { name.to_string() },
            })
        })
        .collect()
}

/// Why a jitdump file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum JitdumpError {
    /// The file does not start with the jitdump magic.
    #[error("not a jitdump file (bad magic)")]
    BadMagic,
    /// Written on a machine of the other byte order.
    #[error("a jitdump file of the other byte order")]
    ByteOrder,
    /// Cut short inside the header.
    #[error("the jitdump header is cut short")]
    Short,
}

const JITDUMP_MAGIC: u32 = 0x4A69_5444; // "JiTD"
const JIT_CODE_LOAD: u32 = 0;
const JIT_CODE_MOVE: u32 = 1;

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Parses a jitdump file (little-endian): the code ranges its `JIT_CODE_LOAD` records
/// name, moved by `JIT_CODE_MOVE` records, in file order. A record cut short (the JIT
/// was still writing) ends the list.
pub(crate) fn parse_jitdump(b: &[u8]) -> Result<Vec<JitSymbol>, JitdumpError> {
    let magic = u32_at(b, 0).ok_or(JitdumpError::Short)?;
    if magic == JITDUMP_MAGIC.swap_bytes() {
        return Err(JitdumpError::ByteOrder);
    }
    if magic != JITDUMP_MAGIC {
        return Err(JitdumpError::BadMagic);
    }
    let header_size = u32_at(b, 8).ok_or(JitdumpError::Short)? as usize;
    let mut at = header_size.max(40);
    let mut out: Vec<JitSymbol> = Vec::new();
    // code index -> position in out, for moves.
    let mut by_index: BTreeMap<u64, usize> = BTreeMap::new();
    while let (Some(id), Some(size)) = (u32_at(b, at), u32_at(b, at + 4)) {
        let size = size as usize;
        if size < 16 || at + size > b.len() {
            break;
        }
        let body = &b[at + 16..at + size];
        match id {
            JIT_CODE_LOAD => {
                // pid u32, tid u32, vma u64, code_addr u64, code_size u64, code_index u64,
                // name (NUL-terminated), code bytes.
                let (Some(addr), Some(len), Some(index)) =
                    (u64_at(body, 16), u64_at(body, 24), u64_at(body, 32))
                else {
                    break;
                };
                let name_bytes = body.get(40..).unwrap_or(&[]);
                let end = name_bytes.iter().position(|&c| c == 0).unwrap_or(name_bytes.len());
                let name = String::from_utf8_lossy(&name_bytes[..end]).into_owned();
                by_index.insert(index, out.len());
                out.push(JitSymbol { start: addr, end: addr.saturating_add(len), name });
            }
            JIT_CODE_MOVE => {
                // pid, tid, vma, old_code_addr, new_code_addr, code_size, code_index.
                let (Some(new), Some(len), Some(index)) =
                    (u64_at(body, 24), u64_at(body, 32), u64_at(body, 40))
                else {
                    break;
                };
                if let Some(name) = by_index.get(&index).map(|&i| out[i].name.clone()) {
                    by_index.insert(index, out.len());
                    out.push(JitSymbol { start: new, end: new.saturating_add(len), name });
                }
            }
            _ => {} // debug info, unwinding info, close: names nothing
        }
        at += size;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_map_lines_and_later_entries_win() {
        let syms = parse_perf_map(
            "7f0000001000 40 LazyCompile:~add /app.js:1\n0x7f0000001040 0x20 short\nbad\n7f0000001000 10 Recompiled\n",
        );
        assert_eq!(syms.len(), 3);
        assert_eq!(syms[0].name, "LazyCompile:~add /app.js:1");
        assert_eq!((syms[1].start, syms[1].end), (0x7f00_0000_1040, 0x7f00_0000_1060));
        let mut j = JitSymbols::default();
        j.add("perf-1.map", syms);
        assert_eq!(j.find(0x7f00_0000_1008), Some(("Recompiled", "perf-1.map")));
        assert_eq!(j.find(0x7f00_0000_1020), None, "the replaced range is gone");
        assert_eq!(j.find(0x7f00_0000_1050).map(|s| s.0), Some("short"));
        assert_eq!(j.find(0x7f00_0000_1060), None);
    }

    fn record(id: u32, body: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&id.to_le_bytes());
        r.extend_from_slice(&(16 + body.len() as u32).to_le_bytes());
        r.extend_from_slice(&7u64.to_le_bytes());
        r.extend_from_slice(body);
        r
    }

    #[test]
    fn jitdump_loads_and_moves() {
        let mut f = Vec::new();
        f.extend_from_slice(&JITDUMP_MAGIC.to_le_bytes());
        f.extend_from_slice(&1u32.to_le_bytes());
        f.extend_from_slice(&40u32.to_le_bytes());
        f.extend_from_slice(&62u32.to_le_bytes());
        f.extend_from_slice(&[0; 24]);
        let mut load = Vec::new();
        for v in [1u32, 2] {
            load.extend_from_slice(&v.to_le_bytes());
        }
        for v in [0x1000u64, 0x1000, 0x30, 5] {
            load.extend_from_slice(&v.to_le_bytes());
        }
        load.extend_from_slice(b"jitted_fn\0\xc3\xc3");
        f.extend(record(JIT_CODE_LOAD, &load));
        let mut mv = Vec::new();
        for v in [1u32, 2] {
            mv.extend_from_slice(&v.to_le_bytes());
        }
        for v in [0x1000u64, 0x1000, 0x2000, 0x30, 5] {
            mv.extend_from_slice(&v.to_le_bytes());
        }
        f.extend(record(JIT_CODE_MOVE, &mv));
        f.extend_from_slice(&[0, 0, 0]); // a record cut short
        let syms = parse_jitdump(&f).unwrap();
        assert_eq!(
            syms,
            [
                JitSymbol { start: 0x1000, end: 0x1030, name: "jitted_fn".into() },
                JitSymbol { start: 0x2000, end: 0x2030, name: "jitted_fn".into() },
            ]
        );
        assert_eq!(parse_jitdump(b"ELF!xxxx"), Err(JitdumpError::BadMagic));
        assert_eq!(
            parse_jitdump(&JITDUMP_MAGIC.swap_bytes().to_le_bytes()),
            Err(JitdumpError::ByteOrder)
        );
    }
}
