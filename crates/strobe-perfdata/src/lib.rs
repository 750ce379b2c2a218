//! strobe-perfdata: reads what Linux perf writes. A perf.data file (`perf record -o
//! FILE`) or a pipe-mode stream (`perf record -o -`) becomes its attrs (with names from
//! the EVENT_DESC feature and each attr's event ids), facts from its feature sections,
//! and a stream of typed [`Record`]s, in file order ([`PerfData::records`]) or in the
//! order `perf report` processes them ([`PerfData::ordered`]).
//!
//! - [`header`]-level framing (file header, attr section, feature sections) and
//!   [`sample`] decoding are strobe's own: samples are decoded per the attr's
//!   `sample_type` in the kernel's order, including PERF_SAMPLE_READ in every
//!   `read_format` combination and callchains with their context markers.
//!   (`linux-perf-data` 0.12 was considered for the framing and not taken: it reads
//!   feature sections into buffers sized by the file's own claims, works through
//!   `Read + Seek` rather than a slice, and pulls `linux-perf-event-reader`, whose
//!   READ decoding is wrong for groups, with prost and zstd besides.)
//! - [`PerfData::parse`] works on a byte slice (tests, fuzzing); [`PerfFile`] maps a
//!   file and parses that.
//! - Bad input is a typed [`Error`] with the byte offset: nothing here panics, indexes
//!   unchecked or sizes an allocation from a count the file claims.
//! - Only little-endian files are read (perf's own cross-endian support is not
//!   reproduced). Files whose records are zstd-compressed (`perf record -z`:
//!   COMPRESSED and COMPRESSED2 records, file and pipe mode) are read through their
//!   uncompressed image ([`decompress`], which [`PerfFile`] applies).
//!
//! This crate must never know about reports, symbols or strobe's own record format: it
//! turns bytes into perf's records and stops there.

pub mod abi;
mod attr;
mod bytes;
mod decompress;
mod error;
pub mod header;
mod reader;
mod record;
pub mod sample;

use std::path::Path;

pub use attr::Attr;
pub use decompress::{decompress, MAX_RATIO};
pub use error::Error;
pub use header::{BuildId, EventAttr, FileInfo, GroupDesc};
pub use reader::{Ordered, PerfData, Records};
pub use record::{
    decode_ring_record, Comm, CpuMode, Event, Mmap, Mmap2Extra, Record, SampleId, Switch, Task,
    Throttle,
};
pub use sample::{
    BranchEntry, BranchStack, Callchain, Context, ReadValue, ReadValues, Regs, Sample, StackUser,
};

/// True when `bytes` start like a perf.data file or stream (either byte order).
pub fn is_perf_data(bytes: &[u8]) -> bool {
    matches!(bytes.get(..8), Some(m) if m == abi::MAGIC || m == abi::MAGIC_BIG_ENDIAN)
}

/// A perf.data file's bytes: memory-mapped for a regular file, read into memory for
/// anything else (a pipe, `/dev/stdin`); with compressed records, their uncompressed
/// image.
#[derive(Debug)]
pub struct PerfFile {
    bytes: Bytes,
    expanded: Option<Vec<u8>>,
}

#[derive(Debug)]
enum Bytes {
    Mapped(memmap2::Mmap),
    Read(Vec<u8>),
}

impl PerfFile {
    /// Opens `path`.
    pub fn open(path: &Path) -> Result<PerfFile, Error> {
        let io = |source| Error::Io { path: path.to_path_buf(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        let bytes = if meta.is_file() && meta.len() > 0 {
            // SAFETY: the map is read-only and private to this process. perf.data files
            // are complete once `perf record` exits; if another process truncated or
            // rewrote the file while it is mapped, reads would see other bytes (every
            // read here is bounds-checked against the map's length, fixed at map
            // time) or fault with SIGBUS on a truncated tail, as for any mapped input.
            Bytes::Mapped(unsafe { memmap2::Mmap::map(&file) }.map_err(io)?)
        } else {
            use std::io::Read;
            let mut v = Vec::new();
            (&file).read_to_end(&mut v).map_err(io)?;
            Bytes::Read(v)
        };
        let mut me = PerfFile { bytes, expanded: None };
        me.expanded = decompress(me.bytes())?;
        Ok(me)
    }

    /// The file's bytes.
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Mapped(m) => m,
            Bytes::Read(v) => v,
        }
    }

    /// Parses the file (the uncompressed image of compressed records).
    pub fn parse(&self) -> Result<PerfData<'_>, Error> {
        PerfData::parse(self.expanded.as_deref().unwrap_or(self.bytes()))
    }

    /// True when the file's records were zstd-compressed.
    pub fn was_compressed(&self) -> bool {
        self.expanded.is_some()
    }
}
