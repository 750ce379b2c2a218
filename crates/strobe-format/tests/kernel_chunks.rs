//! The chunks kernel-mode recordings add (KSYMS and OFFCPU): round trips through the
//! encoder, the streaming reader and `read_all`; every cut of them reads as a truncation;
//! a damaged field is an error naming its offset.

use std::path::PathBuf;

use strobe_format::*;

fn header() -> Header {
    let mut h = Header {
        strobe_version: "0.1.0".into(),
        start_unix_ns: 1,
        start_mono_ns: 2,
        command: vec!["./prog".into()],
        period: Some(1_000_000),
        window: Some(0),
        jitter: Some(0),
        wakeup: 2048,
        buffer_bytes: 512 << 10,
        overhead_ppm: 20_000,
        follow_fork: true,
        mode: RecordMode::Kernel,
        mode_reason: "the program is statically linked".into(),
        call_graph: CallGraph::Fp,
        max_depth: 127,
        ..Header::task_clock()
    };
    // Recorded from the kernel's side, kernel time included.
    h.events[0].exclude_kernel = false;
    h
}

fn symbols() -> Vec<KernelSymbol> {
    vec![
        KernelSymbol {
            start: 0xffff_ffff_8100_0000,
            size: 0x40,
            name: "_stext".into(),
            module: String::new(),
        },
        KernelSymbol {
            start: 0xffff_ffff_8123_4560,
            size: 0x1a0,
            name: "clear_page_erms".into(),
            module: String::new(),
        },
        // A module's symbol below the previous one: deltas go both ways.
        KernelSymbol {
            start: 0xffff_ffff_c000_1000,
            size: 0x80,
            name: "ext4_file_read_iter".into(),
            module: "ext4".into(),
        },
        KernelSymbol {
            start: 0xffff_ffff_8000_0000,
            size: 1,
            name: "x".into(),
            module: "m".into(),
        },
    ]
}

fn intervals() -> Vec<OffCpuInterval> {
    vec![
        OffCpuInterval {
            start: 7_000_000_000,
            duration: 1_000_000,
            ip: 0x7f00_1234_5678,
            stack: 3,
            preempted: false,
        },
        OffCpuInterval {
            start: 7_002_000_000,
            duration: 40_000,
            ip: 0x5555_0000_1000,
            stack: 1,
            preempted: true,
        },
        // Out of order: stored as the previous start (a writer sorts; the encoder never
        // goes backwards).
        OffCpuInterval { start: 7_001_000_000, duration: 5, ip: 0, stack: 0, preempted: false },
    ]
}

/// The file's bytes and where each chunk after the header starts (and the end).
fn file() -> (Vec<u8>, Vec<usize>) {
    let mut e = Encoder::new();
    e.preamble();
    e.header(&header());
    let mut at = vec![e.len()];
    e.kernel_symbols(&symbols());
    at.push(e.len());
    e.off_cpu(3, 77, &intervals());
    at.push(e.len());
    e.kernel_symbols(&[]);
    at.push(e.len());
    (e.as_bytes().to_vec(), at)
}

#[test]
fn kernel_symbols_and_off_cpu_intervals_round_trip() {
    let (bytes, _) = file();
    let recs: Vec<Record> = Reader::new(&bytes[..], "mem").unwrap().map(Result::unwrap).collect();
    assert_eq!(recs.len(), 3);
    assert!(matches!(&recs[0], Record::KernelSymbols(k) if *k == symbols()));
    let Record::OffCpu { stream: 3, tid: 77, intervals: got } = &recs[1] else {
        panic!("{:?}", recs[1])
    };
    let mut want = intervals();
    want[2].start = want[1].start;
    assert_eq!(*got, want);
    assert!(matches!(&recs[2], Record::KernelSymbols(k) if k.is_empty()));

    let dir = std::env::temp_dir().join(format!("strobe-format-kchunks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p: PathBuf = dir.join("k.strobe");
    std::fs::write(&p, &bytes).unwrap();
    let rec = read_all(&p).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(rec.header.mode, RecordMode::Kernel);
    assert_eq!(rec.kernel_symbols, symbols());
    let p3 = rec.processes.iter().find(|p| p.stream == 3).unwrap();
    assert_eq!(p3.off_cpu.len(), 3);
    assert!(p3.off_cpu.iter().all(|(tid, _)| *tid == 77));
}

#[test]
fn every_cut_reads_as_a_truncation() {
    let (bytes, at) = file();
    for cut in at[0] + 1..bytes.len() {
        let recs: Vec<Record> =
            Reader::new(&bytes[..cut], "mem").unwrap().map(Result::unwrap).collect();
        let whole = at.iter().skip(1).filter(|&&end| end <= cut).count();
        if at.contains(&cut) {
            assert_eq!(recs.len(), whole, "cut at a chunk boundary: whole chunks only");
        } else {
            assert_eq!(recs.len(), whole + 1);
            assert!(
                matches!(recs.last(), Some(Record::Truncated { offset }) if at.contains(&(*offset as usize)))
            );
        }
    }
}

#[test]
fn a_damaged_field_names_its_offset() {
    // An off-CPU chunk claiming an interval whose fields are missing: re-framed with a
    // correct checksum, so only the payload is wrong.
    let mut e = Encoder::new();
    e.preamble();
    e.header(&header());
    let at = e.len();
    e.off_cpu(3, 77, &intervals()[..1]);
    let mut bytes = e.as_bytes().to_vec();
    // Keep the tid and count, drop the interval: patch the length and the CRC.
    let payload_at = at + CHUNK_HEADER_LEN;
    let keep = 2; // tid 77 and count 1 are one byte each
    bytes.truncate(payload_at + keep);
    bytes[at + 8..at + 12].copy_from_slice(&(keep as u32).to_le_bytes());
    let mut h = crc32(&bytes[at..at + 12]);
    h = crc32_continue(h, &bytes[payload_at..]);
    bytes[at + 12..at + 16].copy_from_slice(&h.to_le_bytes());
    let recs: Vec<_> = Reader::new(&bytes[..], "mem").unwrap().collect();
    let err = recs[0].as_ref().unwrap_err().to_string();
    assert!(err.contains("off-CPU start") && err.contains("byte"), "{err}");
}

/// CRC-32 (IEEE), bitwise: the format's chunk checksum, computed here independently.
fn crc32(b: &[u8]) -> u32 {
    crc32_continue(0, b)
}

fn crc32_continue(crc: u32, b: &[u8]) -> u32 {
    let mut c = !crc;
    for &x in b {
        c ^= u32::from(x);
        for _ in 0..8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0xEDB8_8320 } else { c >> 1 };
        }
    }
    !c
}

/// A header rewritten after the fact: the chunks after it are kept byte for byte.
#[test]
fn a_rewritten_header_keeps_every_chunk_after_it() {
    let (bytes, at) = file();
    let dir = std::env::temp_dir().join(format!("strobe-format-rehdr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("r.strobe");
    std::fs::write(&p, &bytes).unwrap();
    let mut h = header();
    h.mode = RecordMode::Agent;
    h.mode_reason = "a much longer reason than before, so the header grows".into();
    rewrite_header(&p, &h).unwrap();
    let after = std::fs::read(&p).unwrap();
    assert!(after.ends_with(&bytes[at[0]..]), "the chunks after the header are unchanged");
    let r = read_all(&p).unwrap();
    assert_eq!(r.header, h);
    assert_eq!(r.kernel_symbols, symbols());
    std::fs::write(&p, b"not a recording").unwrap();
    assert!(matches!(rewrite_header(&p, &h), Err(FormatError::NotARecording { .. })));
    std::fs::remove_dir_all(&dir).unwrap();
}
