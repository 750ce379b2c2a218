//! An ELF file mapped read-only once, for every reader that wants its bytes: the symbol
//! table, its build id, its code index, its names. A report that opened a library once
//! per reader mapped it three or four times; it now opens it once and lends the map.
//!
//! This module owns the one `mmap` of files this crate reads; it must never write to a
//! file or keep one mapped beyond its owner's life.

use std::path::{Path, PathBuf};

use crate::Error;

/// A file mapped read-only, with what identifies its contents.
#[derive(Debug)]
pub struct MappedFile {
    path: PathBuf,
    map: memmap2::Mmap,
    meta: std::fs::Metadata,
}

impl MappedFile {
    /// Opens and maps the file at `path` (one `open`, one `mmap`; the descriptor is closed
    /// again, the map stays).
    pub fn open(path: &Path) -> Result<MappedFile, Error> {
        let io = |source| Error::Io { what: format!("reading {}", path.display()), source };
        let file = std::fs::File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        // SAFETY: a private read-only map of a program or library. Executables and
        // libraries are replaced by rename, not rewritten in place (which leaves this
        // map's inode intact); a file truncated meanwhile could fault with SIGBUS, as any
        // mapped input, and every read is bounds-checked against the map's length.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Ok(MappedFile { path: path.to_path_buf(), map, meta })
    }

    /// The path it was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Its metadata as it was when opened.
    pub(crate) fn meta(&self) -> &std::fs::Metadata {
        &self.meta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_the_whole_file() {
        let exe = std::env::current_exe().unwrap();
        let m = MappedFile::open(&exe).unwrap();
        assert_eq!(m.bytes().len() as u64, std::fs::metadata(&exe).unwrap().len());
        assert_eq!(m.bytes().get(..4), Some(&b"\x7fELF"[..]));
        assert_eq!(m.path(), exe);
        let e = MappedFile::open(Path::new("/nonexistent/x")).unwrap_err();
        assert!(e.to_string().starts_with("reading /nonexistent/x: "), "{e}");
    }
}
