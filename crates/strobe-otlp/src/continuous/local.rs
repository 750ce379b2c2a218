//! The files of a continuous recording: the live record file the recorder and the agents
//! append to, read as it grows and given back to the file system behind the reader, and
//! the local copy `-o` asks for, rotated by size.
//!
//! - The live file lives in a private temporary directory. Writers only ever append
//!   (`O_APPEND`), so the bytes behind the reader are never written again: they are freed
//!   with `fallocate(FALLOC_FL_PUNCH_HOLE)`, which keeps the file's size (where the next
//!   append lands) and gives its blocks back. Disk use is what the reader has not read
//!   yet. A file system that cannot punch holes keeps the file whole (said once).
//! - The copy is the live file's bytes as they were read, chunk for chunk, so `strobe
//!   report` reads it as the recording itself. Past the rotation size, at an interval's
//!   end, it is renamed to `FILE.1` (replacing the last one) and a new `FILE` starts with
//!   the header, the recorder's chunks and each live process's state (process, mappings,
//!   thread names, stack table): each file reads on its own, and the two hold at most
//!   twice the rotation size.
//!
//! Owns: those files. Must never write into the live file, or keep bytes in memory
//! beyond one copy buffer.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::OtlpError;

/// Bytes copied per read.
const COPY_BUF: usize = 256 << 10;
/// Holes are punched in whole blocks of this many bytes.
const PUNCH_GRAIN: u64 = 1 << 20;

/// The live file, read behind its writers.
#[derive(Debug)]
pub(crate) struct Live {
    file: File,
    /// Bytes before this offset are given back.
    punched: u64,
    /// Punching is not supported here.
    no_punch: Option<std::io::Error>,
}

impl Live {
    pub(crate) fn open(path: &Path) -> std::io::Result<Live> {
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Live { file, punched: 0, no_punch: None })
    }

    /// Gives back the blocks before `read_to` (the reader's offset). Returns the error
    /// the first time the file system refuses.
    pub(crate) fn free_before(&mut self, read_to: u64) -> Option<std::io::Error> {
        let to = read_to / PUNCH_GRAIN * PUNCH_GRAIN;
        if to <= self.punched || self.no_punch.is_some() {
            return None;
        }
        let (from, len) = (self.punched as libc::off_t, (to - self.punched) as libc::off_t);
        // SAFETY: fallocate on a descriptor this struct owns; the range lies before every
        // writer's append position, so no data anyone will read is lost.
        let r = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                from,
                len,
            )
        };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            self.no_punch = Some(std::io::Error::new(e.kind(), e.to_string()));
            return Some(e);
        }
        self.punched = to;
        None
    }

    /// Blocks the file takes on disk, in bytes.
    pub(crate) fn disk_bytes(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        self.file.metadata().map_or(0, |m| m.blocks() * 512)
    }

    fn file(&self) -> &File {
        &self.file
    }
}

/// The local copy (`-o FILE`).
#[derive(Debug)]
pub(crate) struct Copy {
    path: PathBuf,
    out: File,
    /// Bytes in the current file.
    written: u64,
    /// Offset in the live file copied up to.
    copied: u64,
    rotate_bytes: u64,
    buf: Vec<u8>,
    /// Files rotated.
    pub rotations: u64,
}

impl Copy {
    pub(crate) fn create(path: &Path, rotate_bytes: u64) -> Result<Copy, OtlpError> {
        let out = File::create(path)
            .map_err(|e| OtlpError::io(&format!("the record file {}", path.display()), e))?;
        Ok(Copy {
            path: path.to_path_buf(),
            out,
            written: 0,
            copied: 0,
            rotate_bytes: rotate_bytes.max(1),
            buf: vec![0; COPY_BUF],
            rotations: 0,
        })
    }

    /// Copies the live file's bytes from where the last copy ended up to `to`.
    pub(crate) fn copy(&mut self, live: &Live, to: u64) -> Result<(), OtlpError> {
        let err = |e| OtlpError::io(&format!("the record file {}", self.path.display()), e);
        while self.copied < to {
            let n = ((to - self.copied) as usize).min(self.buf.len());
            let got = live.file().read_at(&mut self.buf[..n], self.copied).map_err(|e| {
                OtlpError::io("the live record file (reading it for the local copy)", e)
            })?;
            if got == 0 {
                break;
            }
            std::io::Write::write_all(&mut self.out, &self.buf[..got]).map_err(err)?;
            self.copied += got as u64;
            self.written += got as u64;
        }
        Ok(())
    }

    /// Whether the current file has reached the rotation size.
    pub(crate) fn full(&self) -> bool {
        self.written >= self.rotate_bytes
    }

    /// Renames the current file to `FILE.1` and starts a new one with `start` (a
    /// recording's beginning that the next chunks continue).
    pub(crate) fn rotate(&mut self, start: &[u8]) -> Result<(), OtlpError> {
        let mut old = self.path.as_os_str().to_owned();
        old.push(".1");
        let err = |e| OtlpError::io(&format!("the record file {}", self.path.display()), e);
        std::fs::rename(&self.path, PathBuf::from(old)).map_err(err)?;
        self.out = File::create(&self.path).map_err(err)?;
        std::io::Write::write_all(&mut self.out, start).map_err(err)?;
        self.written = start.len() as u64;
        self.rotations += 1;
        Ok(())
    }

    /// The copy's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}
