//! perf.data with zstd-compressed records (`perf record -z`): COMPRESSED and COMPRESSED2,
//! file and pipe mode, records spanning the compressed chunks, read through their
//! uncompressed image. Inputs: linux-perf-data's fixtures (tests/data/linux-perf-data,
//! see its README); files Debian's perf writes here are compared with `perf report` in
//! crates/strobe/tests/it/perfdata.rs.

use std::path::PathBuf;

use strobe_perfdata::abi::{RECORD_COMPRESSED, RECORD_COMPRESSED2, RECORD_SAMPLE};
use strobe_perfdata::{decompress, Event, PerfData, PerfFile};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/linux-perf-data").join(name)
}

/// Kinds of the records in file order, read to the end: every record decodes, though
/// a stream may end in bytes that are no record (sleep.compressed2.pipe.data ends in
/// text written into the pipe after the last record).
fn kinds(data: &PerfData<'_>) -> Vec<u32> {
    let mut out = Vec::new();
    for r in data.records() {
        match r {
            Ok(r) => out.push(r.kind),
            Err(e) => {
                assert!(matches!(e, strobe_perfdata::Error::Truncated { .. }), "{e}");
                break;
            }
        }
    }
    out
}

/// The compressed records' payloads of `bytes` (a pipe-mode stream), in order.
fn payloads(bytes: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut pos = 16;
    while pos + 8 <= bytes.len() {
        let kind = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap());
        let size = usize::from(u16::from_le_bytes(bytes[pos + 6..pos + 8].try_into().unwrap()));
        if size < 8 || pos + size > bytes.len() {
            break; // trailing bytes that are no record
        }
        let rec = &bytes[pos..pos + size];
        match kind {
            RECORD_COMPRESSED => out.push(&rec[8..]),
            RECORD_COMPRESSED2 => {
                let n = u64::from_le_bytes(rec[8..16].try_into().unwrap()) as usize;
                out.push(&rec[16..16 + n]);
            }
            _ => {}
        }
        pos += size;
    }
    out
}

/// Sizes of the records in a stream of records.
fn record_sizes(mut b: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    while b.len() >= 8 {
        let size = usize::from(u16::from_le_bytes(b[6..8].try_into().unwrap()));
        assert!(size >= 8 && size <= b.len(), "a whole record");
        out.push(size);
        b = &b[size..];
    }
    assert!(b.is_empty());
    out
}

#[test]
fn compressed_records_are_read_in_file_and_pipe_mode() {
    for (name, samples) in [
        // perf 6.1's report of this file: 8 samples.
        ("sleep.compressed.pipe.data", Some(8)),
        ("sleep.compressed2.data", None),
        ("sleep.compressed2.pipe.data", None),
    ] {
        let file = PerfFile::open(&fixture(name)).unwrap();
        assert!(file.was_compressed(), "{name}");
        let data = file.parse().unwrap();
        let k = kinds(&data);
        assert!(!k.iter().any(|&t| t == RECORD_COMPRESSED || t == RECORD_COMPRESSED2), "{name}");
        let n = k.iter().filter(|&&t| t == RECORD_SAMPLE).count();
        assert!(n > 0, "{name}: samples");
        if let Some(want) = samples {
            assert_eq!(n, want, "{name}");
        }
        // perf's order too.
        assert_eq!(data.ordered().filter_map(Result::ok).count(), k.len(), "{name}");
        assert!(!data.attrs().is_empty(), "{name}");
    }
}

/// The fixture's records span its compressed chunks; read through the image, they are
/// the records of the whole stream decompressed at once.
#[test]
fn records_spanning_compressed_chunks_are_whole() {
    let bytes = std::fs::read(fixture("fibo.compressed2.pipe.data")).unwrap();
    let image = decompress(&bytes).unwrap().expect("compressed");
    let data = PerfData::parse(&image).unwrap();
    let samples = data
        .records()
        .map(|r| r.expect("every record decodes"))
        .filter(|r| matches!(r.event, Event::Sample(_)))
        .count();

    let parts = payloads(&bytes);
    // perf flushes its zstd stream after each record and never ends the frame: a
    // streaming decoder over all the payloads at once.
    let whole: Vec<u8> = parts.concat();
    let stream = {
        use zstd::stream::raw::Operation;
        let mut ctx = zstd::stream::raw::Decoder::new().unwrap();
        let mut out = vec![0u8; 64 << 20];
        let mut input = zstd::stream::raw::InBuffer::around(&whole[..]);
        let mut output = zstd::stream::raw::OutBuffer::around(&mut out[..]);
        while input.pos() < whole.len() {
            ctx.run(&mut input, &mut output).unwrap();
        }
        let n = output.pos();
        out.truncate(n);
        out
    };
    let sizes = record_sizes(&stream);
    let mut at = 0;
    let mut whole_samples = 0;
    for s in &sizes {
        if u32::from_le_bytes(stream[at..at + 4].try_into().unwrap()) == RECORD_SAMPLE {
            whole_samples += 1;
        }
        at += s;
    }
    assert_eq!(samples, whole_samples);
    assert!(samples > 500, "{samples} samples");

    // Some chunk's output ends inside a record (else the fixture tests nothing).
    let mut ctx = zstd::stream::raw::Decoder::new().unwrap();
    let mut ends_inside = 0;
    let mut done = 0usize;
    let boundaries: std::collections::HashSet<usize> = sizes
        .iter()
        .scan(0, |a, s| {
            *a += s;
            Some(*a)
        })
        .collect();
    for p in parts {
        use zstd::stream::raw::Operation;
        let mut out = vec![0u8; 4 << 20];
        let mut input = zstd::stream::raw::InBuffer::around(p);
        let mut output = zstd::stream::raw::OutBuffer::around(&mut out[..]);
        while input.pos() < p.len() {
            ctx.run(&mut input, &mut output).unwrap();
        }
        done += output.pos();
        if !boundaries.contains(&done) {
            ends_inside += 1;
        }
    }
    assert!(ends_inside > 0, "no record spans two chunks");
}

#[test]
fn an_uncompressed_file_is_left_alone_and_damage_is_an_error() {
    let plain = std::fs::read(fixture("sleep.compressed2.pipe.data")).unwrap();
    let image = decompress(&plain).unwrap().unwrap();
    assert_eq!(decompress(&image).unwrap(), None, "nothing compressed is left");
    // A payload cut in the middle of the stream: an error naming a byte, no panic.
    let mut bad = plain.clone();
    let parts = payloads(&plain);
    let first = parts[0].as_ptr() as usize - plain.as_ptr() as usize;
    for b in &mut bad[first + 4..first + 40] {
        *b ^= 0x5a;
    }
    match decompress(&bad) {
        Err(e) => assert!(e.to_string().contains("byte"), "{e}"),
        Ok(Some(image)) => {
            // zstd may decode damaged bytes to other bytes: the reader then meets them.
            let _ = PerfData::parse(&image).map(|d| d.records().count());
        }
        Ok(None) => panic!("still compressed"),
    }
}
