//! `perf record -z`: records compressed with zstd into `PERF_RECORD_COMPRESSED` records
//! (the payload is the record's body) and `PERF_RECORD_COMPRESSED2` records (a u64 data
//! size, then the payload, padded to 8 bytes). The payloads of one recording form one
//! zstd stream (perf flushes it after each record rather than ending a frame), and what
//! they decompress to is a stream of ordinary records, one of which may begin in one
//! payload and end in the next.
//!
//! [`decompress`] gives back the same recording uncompressed, so the reader sees what
//! `perf report` sees: each compressed record is replaced, in place, by the whole records
//! its payload completes (a record split across payloads comes out where it is
//! completed, as perf delivers it, after any uncompressed record between the parts:
//! FINISHED_ROUND markers stay where perf met them), every other record is kept as it is,
//! and in file mode the header's data size and the feature sections' offsets move to
//! match. Offsets in later errors are offsets in that image.
//!
//! The decoder is the zstd library perf itself uses (crate `zstd`, which builds it from
//! source): it hands out everything a payload decodes to at once. The pure-Rust
//! `ruzstd` holds back a window's worth of output until its frame ends, and perf's
//! frame never ends before the recording does, so the records would come out behind the
//! round markers that follow them.
//!
//! This module must never size an allocation from a size the file claims: the output
//! grows as it is decoded, up to [`MAX_RATIO`] times the input.

use zstd::zstd_safe::{DCtx, InBuffer, OutBuffer};

use crate::abi::{
    FEAT_BITS, FILE_HEADER_SIZE, PIPE_HEADER_SIZE, RECORD_AUXTRACE, RECORD_COMPRESSED,
    RECORD_COMPRESSED2,
};
use crate::bytes::{u16_at, u32_at, u64_at};
use crate::Error;

/// The most a recording may grow by decompression (perf's data compresses about 5 to 20
/// times): more is taken for a decompression bomb.
pub const MAX_RATIO: usize = 256;

/// The uncompressed image of a perf.data file or pipe-mode stream whose records are
/// zstd-compressed; `None` when none is (read `bytes` as they are).
pub fn decompress(bytes: &[u8]) -> Result<Option<Vec<u8>>, Error> {
    let pipe = u64_at(bytes, 8) == Some(PIPE_HEADER_SIZE);
    let (start, end) = if pipe {
        (PIPE_HEADER_SIZE as usize, bytes.len())
    } else {
        if u64_at(bytes, 8) != Some(FILE_HEADER_SIZE) {
            return Ok(None); // the reader says what is wrong with it
        }
        let (Some(offset), Some(size)) = (u64_at(bytes, 40), u64_at(bytes, 48)) else {
            return Ok(None);
        };
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(bytes.len());
        let end = match size {
            0 => bytes.len(), // perf was killed before it wrote the size
            n => usize::try_from(offset.saturating_add(n)).unwrap_or(usize::MAX).min(bytes.len()),
        };
        (start, end)
    };
    if !has_compressed(bytes, start, end) {
        return Ok(None);
    }
    let limit = bytes.len().saturating_mul(MAX_RATIO);
    let data = expand(bytes, start, end, limit)?;
    let mut out = Vec::with_capacity(data.len() + bytes.len().saturating_sub(end) + start);
    out.extend_from_slice(bytes.get(..start).unwrap_or(&[]));
    out.extend_from_slice(&data);
    if !pipe {
        // The header's data size, and the feature sections after the data, which move.
        let delta = data.len() as i128 - (end - start) as i128;
        let size = (data.len() as u64).to_le_bytes();
        if let Some(slot) = out.get_mut(48..56) {
            slot.copy_from_slice(&size);
        }
        let mut tail = bytes.get(end..).unwrap_or(&[]).to_vec();
        let features: u32 =
            (0..4).map(|i| u64_at(bytes, 72 + 8 * i).unwrap_or(0).count_ones()).sum();
        for k in 0..features.min(FEAT_BITS) as usize {
            let at = 16 * k;
            let Some(offset) = u64_at(&tail, at) else { break };
            if offset >= end as u64 {
                let moved = (i128::from(offset) + delta).max(0) as u64;
                if let Some(slot) = tail.get_mut(at..at + 8) {
                    slot.copy_from_slice(&moved.to_le_bytes());
                }
            }
        }
        out.extend_from_slice(&tail);
    }
    Ok(Some(out))
}

/// True when a record of `bytes[start..end]` is compressed.
fn has_compressed(bytes: &[u8], mut pos: usize, end: usize) -> bool {
    while let Some((kind, _, next)) = header(bytes, pos, end) {
        if kind == RECORD_COMPRESSED || kind == RECORD_COMPRESSED2 {
            return true;
        }
        pos = next;
    }
    false
}

/// The record at `pos`: its type, where it ends, where the next one starts (past an
/// AUXTRACE record's data). `None` at the end or at a record that does not fit.
fn header(bytes: &[u8], pos: usize, end: usize) -> Option<(u32, usize, usize)> {
    let kind = u32_at(bytes, pos)?;
    let size = usize::from(u16_at(bytes, pos + 6)?);
    let rec_end = pos.checked_add(size).filter(|&e| size >= 8 && e <= end)?;
    let next = if kind == RECORD_AUXTRACE {
        let extra = usize::try_from(u64_at(bytes, pos + 8)?).ok()?;
        rec_end.checked_add(extra).filter(|&n| n <= end)?
    } else {
        rec_end
    };
    Some((kind, rec_end, next))
}

/// The records of `bytes[pos..end]` with the compressed ones decompressed in place.
fn expand(bytes: &[u8], mut pos: usize, end: usize, limit: usize) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut dctx: Option<DCtx<'static>> = None;
    let mut buf = vec![0u8; 256 << 10];
    while let Some((kind, rec_end, next)) = header(bytes, pos, end) {
        let rec = bytes.get(pos..rec_end).unwrap_or(&[]);
        let payload = match kind {
            RECORD_COMPRESSED => rec.get(8..),
            RECORD_COMPRESSED2 => {
                let size = u64_at(rec, 8).and_then(|n| usize::try_from(n).ok()).unwrap_or(0);
                rec.get(16..16usize.saturating_add(size))
            }
            _ => {
                out.extend_from_slice(bytes.get(pos..next).unwrap_or(&[]));
                pos = next;
                continue;
            }
        };
        let Some(payload) = payload else {
            return Err(Error::corrupt(
                pos as u64,
                "a COMPRESSED2 record's data size runs past the record",
            ));
        };
        let ctx = dctx.get_or_insert_with(DCtx::create);
        let mut input = InBuffer::around(payload);
        loop {
            let mut output = OutBuffer::around(&mut buf[..]);
            ctx.decompress_stream(&mut output, &mut input).map_err(|code| {
                Error::corrupt(
                    pos as u64,
                    format!(
                        "its zstd-compressed records cannot be decompressed ({})",
                        zstd::zstd_safe::get_error_name(code)
                    ),
                )
            })?;
            let n = output.pos();
            pending.extend_from_slice(buf.get(..n).unwrap_or(&[]));
            if out.len() + pending.len() > limit {
                return Err(Error::corrupt(
                    pos as u64,
                    format!("its compressed records decompress to more than {MAX_RATIO} times the file's size"),
                ));
            }
            if input.pos() >= payload.len() && n < buf.len() {
                break;
            }
        }
        // The whole records decompressed so far; a partial one waits for the next payload.
        let mut at = 0;
        while let Some(size) = u16_at(&pending, at + 6).map(usize::from) {
            if size < 8 || at + size > pending.len() {
                break;
            }
            at += size;
        }
        out.extend_from_slice(pending.get(..at).unwrap_or(&[]));
        pending.drain(..at);
        pos = next;
    }
    // What follows (a record cut short, or the rest of a damaged file) is the reader's to
    // report.
    out.extend_from_slice(&pending);
    out.extend_from_slice(bytes.get(pos..end).unwrap_or(&[]));
    Ok(out)
}
