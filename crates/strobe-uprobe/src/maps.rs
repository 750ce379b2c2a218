//! A running process's mappings (`/proc/PID/maps`): which files it has mapped, and which
//! file and offset a code address belongs to (what a uprobe on that address attaches to).
//!
//! Reads procfs only; never touches the process.

use std::path::PathBuf;

/// One file-backed mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Permissions, e.g. `r-xp`.
    pub perms: String,
    /// File offset of `start`.
    pub offset: u64,
    /// The mapped file.
    pub path: PathBuf,
}

/// Parses the text of a `/proc/PID/maps` file, keeping file-backed mappings only.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(off), Some(_dev), Some(_inode), Some(path)) =
            (f.next(), f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let path = path.trim_start();
        if !path.starts_with('/') {
            continue;
        }
        let path = path.strip_suffix(" (deleted)").unwrap_or(path);
        let Some((s, e)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end), Ok(offset)) =
            (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16), u64::from_str_radix(off, 16))
        else {
            continue;
        };
        out.push(Mapping {
            start,
            end,
            perms: perms.to_string(),
            offset,
            path: PathBuf::from(path),
        });
    }
    out
}

/// The file-backed mappings of process `pid` (`0` for this process).
pub fn mappings(pid: i32) -> std::io::Result<Vec<Mapping>> {
    let path = if pid == 0 { "/proc/self/maps".to_string() } else { format!("/proc/{pid}/maps") };
    Ok(parse_maps(&std::fs::read_to_string(path)?))
}

/// The distinct files process `pid` has mapped, in address order.
pub fn mapped_files(pid: i32) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = Vec::new();
    for m in mappings(pid)? {
        if !files.contains(&m.path) {
            files.push(m.path);
        }
    }
    Ok(files)
}

/// The file and file offset that address `addr` of process `pid` (`0`: this process)
/// maps, if a file backs it.
pub fn resolve_address(pid: i32, addr: u64) -> std::io::Result<Option<(PathBuf, u64)>> {
    Ok(mappings(pid)?
        .into_iter()
        .find(|m| addr >= m.start && addr < m.end)
        .map(|m| (m.path, addr - m.start + m.offset)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_file_mappings_and_skips_anonymous_ones() {
        let text = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 123 /usr/bin/true
55d0c0a01000-55d0c0a05000 r-xp 00001000 fd:01 123 /usr/bin/true
7ffd1000-7ffd2000 rw-p 00000000 00:00 0 [stack]
7f00000-7f01000 rw-p 00000000 00:00 0
7f10000-7f11000 r-xp 00002000 fd:01 9 /tmp/lib x.so (deleted)
";
        let m = parse_maps(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].offset, 0x1000);
        assert_eq!(m[1].perms, "r-xp");
        assert_eq!(m[2].path, PathBuf::from("/tmp/lib x.so"));
    }

    #[test]
    fn own_code_address_resolves_to_own_executable() {
        let f = parses_file_mappings_and_skips_anonymous_ones as fn() as usize as u64;
        let (path, off) = resolve_address(0, f).unwrap().expect("code is file-backed");
        assert_eq!(
            std::fs::canonicalize(path).unwrap(),
            std::fs::canonicalize("/proc/self/exe").unwrap()
        );
        assert!(off > 0);
    }
}
