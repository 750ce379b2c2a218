//! A process's mappings, `/proc/PID/maps`: the one parser every part of strobe reads them
//! with.
//!
//! [`parse_line`] and [`parse`] borrow from the text and never allocate, so the agent can
//! run them inside the target (outside any signal handler: reading procfs is a system
//! call). Each line is `start-end perms offset major:minor inode [path]`; the path is
//! everything after the inode and the blanks that pad it, so it may contain spaces, and it
//! keeps the kernel's ` (deleted)` suffix ([`MapLine::file`] strips it). Paths are bytes
//! ([`OsStr`]): a file name that is not UTF-8 must not make the whole table unreadable.
//! Lines that do not parse are skipped (a torn read can cut the last one).
//!
//! Above the parser sit owned conveniences for the host: [`mappings`], [`mapped_files`],
//! [`resolve_address`].
//!
//! This module uses std alone, reads procfs only, and never touches the process itself.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A mapping's permissions (`r-xp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Perms {
    /// Readable.
    pub read: bool,
    /// Writable.
    pub write: bool,
    /// Executable.
    pub exec: bool,
    /// Shared (`s`) rather than private copy-on-write (`p`).
    pub shared: bool,
}

impl Perms {
    /// Parses the four-character permission field.
    pub fn parse(field: &[u8]) -> Option<Perms> {
        let [r, w, x, s] = *field else { return None };
        Some(Perms { read: r == b'r', write: w == b'w', exec: x == b'x', shared: s == b's' })
    }
}

/// One line of a maps file, borrowed from its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapLine<'a> {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Permissions.
    pub perms: Perms,
    /// Offset in the mapped file of the byte at `start`.
    pub offset: u64,
    /// Device major number of the mapped file.
    pub dev_major: u32,
    /// Device minor number of the mapped file.
    pub dev_minor: u32,
    /// Inode of the mapped file (0 for anonymous memory).
    pub inode: u64,
    /// The path as the kernel prints it: a file (with ` (deleted)` if it was removed), a
    /// pseudo name (`[vdso]`, `[stack]`, `[heap]`), or empty for anonymous memory.
    pub path: &'a OsStr,
}

const DELETED: &[u8] = b" (deleted)";

impl<'a> MapLine<'a> {
    /// The mapped file, when a file backs the mapping: an absolute path, without the
    /// ` (deleted)` suffix.
    pub fn file(&self) -> Option<&'a Path> {
        let b = self.path.as_bytes();
        if !b.starts_with(b"/") {
            return None;
        }
        Some(Path::new(OsStr::from_bytes(b.strip_suffix(DELETED).unwrap_or(b))))
    }

    /// True when the mapped file has been removed since it was mapped.
    pub fn deleted(&self) -> bool {
        self.path.as_bytes().starts_with(b"/") && self.path.as_bytes().ends_with(DELETED)
    }

    /// True when `addr` lies in the mapping.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr < self.end
    }

    /// The file offset that `addr` (inside the mapping) corresponds to.
    pub fn file_offset_of(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.start).wrapping_add(self.offset)
    }

    /// The owned form.
    pub fn to_mapping(&self) -> Mapping {
        Mapping {
            start: self.start,
            end: self.end,
            perms: self.perms,
            offset: self.offset,
            dev: (self.dev_major, self.dev_minor),
            inode: self.inode,
            path: PathBuf::from(self.path),
        }
    }
}

fn hex(field: &[u8]) -> Option<u64> {
    if field.is_empty() || field.len() > 16 {
        return None;
    }
    let mut v = 0u64;
    for &c in field {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | u64::from(d);
    }
    Some(v)
}

fn dec(field: &[u8]) -> Option<u64> {
    if field.is_empty() || field.len() > 20 {
        return None;
    }
    let mut v = 0u64;
    for &c in field {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(v)
}

/// Splits off the next field up to a single space: `(field, rest after the space)`.
fn field(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = s.iter().position(|&b| b == b' ')?;
    Some((&s[..i], &s[i + 1..]))
}

/// Parses one line (without its newline). `None` when it is not a maps line.
pub fn parse_line(line: &[u8]) -> Option<MapLine<'_>> {
    let (range, rest) = field(line)?;
    let (perms, rest) = field(rest)?;
    let (offset, rest) = field(rest)?;
    let (dev, rest) = field(rest)?;
    // The inode is the last fixed field: a line may end right after it (no path).
    let (inode, path) = match field(rest) {
        Some((inode, path)) => (inode, path),
        None => (rest, &[][..]),
    };
    let dash = range.iter().position(|&b| b == b'-')?;
    let colon = dev.iter().position(|&b| b == b':')?;
    let start = hex(&range[..dash])?;
    let end = hex(&range[dash + 1..])?;
    let path = &path[path.iter().position(|&b| b != b' ').unwrap_or(path.len())..];
    Some(MapLine {
        start,
        end,
        perms: Perms::parse(perms)?,
        offset: hex(offset)?,
        dev_major: u32::try_from(hex(&dev[..colon])?).ok()?,
        dev_minor: u32::try_from(hex(&dev[colon + 1..])?).ok()?,
        inode: dec(inode)?,
        path: OsStr::from_bytes(path),
    })
}

/// The lines of a maps file that parse, in file order.
pub fn parse(text: &[u8]) -> impl Iterator<Item = MapLine<'_>> {
    text.split(|&b| b == b'\n').filter_map(parse_line)
}

/// The text of `/proc/PID/maps` (`None`: this process's, `/proc/self/maps`).
pub fn read(pid: Option<u32>) -> std::io::Result<Vec<u8>> {
    match pid {
        Some(pid) => std::fs::read(format!("/proc/{pid}/maps")),
        None => std::fs::read("/proc/self/maps"),
    }
}

/// One mapping, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// Permissions.
    pub perms: Perms,
    /// Offset in the mapped file of the byte at `start`.
    pub offset: u64,
    /// Device (major, minor) of the mapped file.
    pub dev: (u32, u32),
    /// Inode of the mapped file.
    pub inode: u64,
    /// The path as the kernel prints it (see [`MapLine::path`]).
    pub path: PathBuf,
}

impl Mapping {
    /// The borrowed form, for [`MapLine`]'s helpers.
    pub fn as_line(&self) -> MapLine<'_> {
        MapLine {
            start: self.start,
            end: self.end,
            perms: self.perms,
            offset: self.offset,
            dev_major: self.dev.0,
            dev_minor: self.dev.1,
            inode: self.inode,
            path: self.path.as_os_str(),
        }
    }
}

/// Every mapping of process `pid` (`None`: this process).
pub fn mappings(pid: Option<u32>) -> std::io::Result<Vec<Mapping>> {
    Ok(parse(&read(pid)?).map(|m| m.to_mapping()).collect())
}

/// The distinct files process `pid` (`None`: this process) has mapped, in address order.
pub fn mapped_files(pid: Option<u32>) -> std::io::Result<Vec<PathBuf>> {
    let text = read(pid)?;
    let mut files: Vec<PathBuf> = Vec::new();
    for f in parse(&text).filter_map(|m| m.file()) {
        if !files.iter().any(|g| g == f) {
            files.push(f.to_path_buf());
        }
    }
    Ok(files)
}

/// The file and file offset that address `addr` of process `pid` (`None`: this process)
/// maps, if a file backs it.
pub fn resolve_address(pid: Option<u32>, addr: u64) -> std::io::Result<Option<(PathBuf, u64)>> {
    let text = read(pid)?;
    let found = parse(&text)
        .find(|m| m.contains(addr))
        .and_then(|m| Some((m.file()?.to_path_buf(), m.file_offset_of(addr))));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &[u8] = b"\
55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 123                        /usr/bin/true
55d0c0a01000-55d0c0a05000 r-xp 00001000 fd:01 123                        /usr/bin/true
7ffd1000-7ffd2000 rw-p 00000000 00:00 0                                  [stack]
7f00000-7f01000 rw-p 00000000 00:00 0 
7f02000-7f03000 rw-s 00000000 00:05 0
7f10000-7f11000 r-xp 00002000 103:02 9                         /tmp/lib x.so (deleted)
7f20000-7f21000 r-xp 00000000 fd:01 77 /tmp/caf\xe9.so
bad line
7f30000-7f31000 r-xp 0000zz00 fd:01 77 /tmp/bad-offset.so
7f40000-7f41";

    #[test]
    fn every_field_of_every_well_formed_line_is_read() {
        let m: Vec<MapLine<'_>> = parse(TEXT).collect();
        assert_eq!(m.len(), 7, "{m:#?}");
        assert_eq!((m[1].start, m[1].end, m[1].offset), (0x55d0c0a01000, 0x55d0c0a05000, 0x1000));
        assert_eq!(m[1].perms, Perms { read: true, write: false, exec: true, shared: false });
        assert_eq!((m[1].dev_major, m[1].dev_minor, m[1].inode), (0xfd, 1, 123));
        assert_eq!(m[1].file(), Some(Path::new("/usr/bin/true")));
        assert_eq!(m[2].path, "[stack]");
        assert_eq!(m[2].file(), None, "a pseudo mapping has no file");
        assert_eq!((m[3].path, m[4].path), (OsStr::new(""), OsStr::new("")), "anonymous");
        assert!(m[4].perms.shared);
        assert_eq!(m[5].file(), Some(Path::new("/tmp/lib x.so")), "spaces kept, suffix gone");
        assert!(m[5].deleted() && !m[1].deleted());
        assert_eq!((m[5].dev_major, m[5].dev_minor), (0x103, 2));
        assert_eq!(m[6].path.as_bytes(), b"/tmp/caf\xe9.so", "a non-UTF-8 name survives");
        assert_eq!(m[1].file_offset_of(0x55d0c0a01010), 0x1010);
    }

    #[test]
    fn malformed_lines_are_skipped_not_misread() {
        for bad in [
            &b""[..],
            b"bad line",
            b"1000-2000 r-xp 0000zz00 fd:01 77 /x",
            b"1000 r-xp 00000000 fd:01 77 /x",
            b"1000-2000 r-x 00000000 fd:01 77 /x",
            b"1000-2000 r-xp 00000000 fd01 77 /x",
            b"1000-2000 r-xp 00000000 fd:01 7x7 /x",
            b"10000000000000000-2000 r-xp 00000000 fd:01 77 /x",
        ] {
            assert_eq!(parse_line(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn own_code_address_resolves_to_own_executable() {
        let f = own_code_address_resolves_to_own_executable as fn() as usize as u64;
        let (path, off) = resolve_address(None, f).unwrap().expect("code is file-backed");
        assert_eq!(
            std::fs::canonicalize(path).unwrap(),
            std::fs::canonicalize("/proc/self/exe").unwrap()
        );
        assert!(off > 0);
        let files = mapped_files(None).unwrap();
        assert!(files.iter().any(|f| f.to_string_lossy().contains("libc.so")), "{files:?}");
        let own = mappings(None).unwrap();
        assert!(own.iter().any(|m| m.path == Path::new("[vdso]")), "the vDSO is listed");
        assert!(own.iter().all(|m| m.start < m.end));
    }

    /// Parsing a whole maps file must not allocate: the agent reads one in the target.
    #[test]
    fn parsing_allocates_nothing() {
        let text = read(None).unwrap();
        let before = alloc_count::count();
        let n = parse(&text).filter(|m| m.perms.exec).count();
        let after = alloc_count::count();
        assert!(n > 0);
        assert_eq!(after - before, 0, "allocations while parsing");
    }

    /// A counting global allocator for this test binary (counts per thread, so tests
    /// running in parallel do not disturb each other).
    mod alloc_count {
        use std::alloc::{GlobalAlloc, Layout, System};
        use std::cell::Cell;

        struct Counting;

        thread_local! {
            static COUNT: Cell<u64> = const { Cell::new(0) };
        }

        // SAFETY: every call is forwarded to the system allocator unchanged; the count is a
        // const-initialised thread-local Cell, which itself never allocates.
        unsafe impl GlobalAlloc for Counting {
            unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
                let _ = COUNT.try_with(|c| c.set(c.get() + 1));
                // SAFETY: the caller's contract for `alloc` is passed on as is.
                unsafe { System.alloc(layout) }
            }
            unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
                // SAFETY: the caller's contract for `dealloc` is passed on as is.
                unsafe { System.dealloc(ptr, layout) }
            }
            unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
                let _ = COUNT.try_with(|c| c.set(c.get() + 1));
                // SAFETY: the caller's contract for `realloc` is passed on as is.
                unsafe { System.realloc(ptr, layout, new) }
            }
        }

        #[global_allocator]
        static GLOBAL: Counting = Counting;

        pub(super) fn count() -> u64 {
            COUNT.with(Cell::get)
        }
    }
}
