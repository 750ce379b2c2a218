//! strobe-format: the record file `strobe record` writes and `strobe report` reads.
//!
//! The byte-level layout is documented in `docs/format.md`; this crate is its only
//! implementation. In short: an 8-byte preamble (`STROBE` + major version), then an
//! append-only stream of self-delimiting chunks, each `sync, tag, stream, length, crc32,
//! payload`. Because every chunk is whole and checksummed:
//!
//! - several writers (the recorder, a forked child, an exec'd image) append whole chunks
//!   to one file opened with `O_APPEND`, each chunk carrying its writer's [`StreamId`];
//! - a file cut anywhere (a target killed with SIGKILL) reads up to its last whole chunk
//!   and then reports [`Record::Truncated`] with the byte offset of the cut;
//! - a damaged chunk is reported as [`FormatError::Corrupt`] naming its byte offset.
//!
//! Writing: [`Encoder`] appends encoded chunks to a reusable buffer (`strobe record`
//! drains the agents' sample buffers into it and hands the bytes to one `write(2)`; agents
//! write their own process, mappings and note chunks the same way). Samples are encoded
//! per thread in batches with delta + varint encoding ([`SampleBatchEncoder`]); each
//! refers to its stack by id in its stream's stack table ([`Encoder::stacks`]).
//!
//! Reading: [`Reader`] streams records; sample batches stay encoded until iterated
//! ([`SampleBatch::iter`]), which decodes without allocating. [`read_all`] collects a
//! whole file into a [`Recording`] for callers that want everything in memory.
//!
//! This crate never decides where files go, and never panics on bad input: every
//! malformed byte becomes a [`FormatError`] naming its offset.

mod encode;
mod error;
mod read;
mod types;
mod varint;

pub use encode::{Encoder, SampleBatchEncoder};
pub use error::FormatError;
pub use read::{read_all, ProcessData, Reader, Record, Recording, SampleBatch, SampleIter};
pub use types::*;

/// Replaces the header of the recording at `path` with `header`, keeping every chunk
/// after it: the file is rewritten beside itself and renamed over it. For a recorder
/// that learns after the header was written what the recording became (a launched
/// program its agent left, followed from the kernel's side from then on). The file must
/// start with an intact preamble and header.
pub fn rewrite_header(path: &std::path::Path, header: &Header) -> Result<(), FormatError> {
    let io = |source| FormatError::Io { path: path.to_path_buf(), source };
    // Checks the preamble and the header chunk (version, checksum).
    Reader::open(path)?;
    let bytes = std::fs::read(path).map_err(io)?;
    let len_at = PREAMBLE_LEN + 8;
    let len = bytes
        .get(len_at..len_at + 4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| FormatError::NoHeader { path: path.to_path_buf(), offset: 0 })?;
    let rest_at = PREAMBLE_LEN + CHUNK_HEADER_LEN + len as usize;
    let mut enc = Encoder::with_capacity(bytes.len());
    enc.preamble();
    enc.header(header);
    let mut out = enc.as_bytes().to_vec();
    out.extend_from_slice(bytes.get(rest_at..).unwrap_or_default());
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".header");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, &out).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// The file's first six bytes.
pub const MAGIC: [u8; 6] = *b"STROBE";
/// The major format version this crate writes and reads (bytes 6..8 of the file, LE).
/// A reader rejects any other major version; compatible additions bump
/// [`MINOR_VERSION`] instead (new chunk tags are skipped, new trailing fields ignored).
pub const MAJOR_VERSION: u16 = 2;
/// The minor version this crate writes in the header chunk.
pub const MINOR_VERSION: u32 = 1;
/// Length of the file preamble (magic + major version).
pub const PREAMBLE_LEN: usize = 8;
/// The two bytes every chunk starts with, so a reader can find the next chunk after damage.
pub const CHUNK_SYNC: [u8; 2] = [0xB5, 0x7E];
/// Length of a chunk header.
pub const CHUNK_HEADER_LEN: usize = 16;
/// The largest payload a chunk may carry; a larger length field is corruption.
pub const MAX_PAYLOAD: u32 = 16 << 20;
/// The most counters (leader first) a sample carries.
pub const MAX_COUNTERS: usize = 8;

/// Chunk tags (byte 2 of a chunk header).
pub mod tag {
    /// The recording's header, written by the recorder before the target starts.
    pub const HEADER: u8 = 1;
    /// One process (agent instance) and the sampling parameters it used.
    pub const PROCESS: u8 = 2;
    /// Thread ids and names.
    pub const THREADS: u8 = 3;
    /// Executable memory mappings.
    pub const MAPS: u8 = 4;
    /// A batch of one thread's samples.
    pub const SAMPLES: u8 = 5;
    /// Per-thread counts of samples dropped because a buffer was full.
    pub const LOST: u8 = 6;
    /// A process's end-of-recording statistics.
    pub const END: u8 = 7;
    /// A message from the agent (a warning, or why it could not start).
    pub const NOTE: u8 = 8;
    /// The bytes of a module that exists only in memory (the kernel's vDSO), so that
    /// its addresses can be symbolized later, on any machine (minor version 1).
    pub const IMAGE: u8 = 9;
    /// Nodes of a stream's stack table (a prefix tree of caller frames) that samples
    /// refer to by id.
    pub const STACKS: u8 = 10;
    /// The empty-interval deltas of every counter, measured before the target started
    /// and subtracted by `strobe report` from every window.
    pub const BASELINE: u8 = 11;
    /// The kernel symbols a recording's kernel addresses fall in (stream 0, written by
    /// the recorder in kernel mode where `/proc/kallsyms` shows addresses).
    pub const KSYMS: u8 = 12;
    /// One thread's off-CPU intervals (`--off-cpu`): when it was switched out, for how
    /// long, and its stack at the switch-out.
    pub const OFFCPU: u8 = 13;
    /// Threads' CPU time as the kernel counted it exactly, and the part the agent
    /// served (minor version 1): what the samples stand for, per thread.
    pub const THREADCPU: u8 = 14;
}
