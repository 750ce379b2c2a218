//! The record format through its public API: round trips, truncation at every byte,
//! corruption, torn writes, and the size of a window.

use std::path::PathBuf;

use strobe_format::*;

/// xorshift64*: deterministic test data without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn header() -> Header {
    let mut h = Header {
        strobe_version: "0.1.0".into(),
        start_unix_ns: 1_700_000_000_000_000_000,
        start_mono_ns: 7_000_000_000_000,
        command: vec!["./prog".into(), "--flag".into(), "ünïcode arg".into()],
        window: Some(20_000),
        jitter: Some(0),
        wakeup: 512,
        buffer_bytes: 64 << 20,
        overhead_ppm: 20_000,
        follow_fork: true,
        mode: RecordMode::Agent,
        mode_reason: "launched by strobe record".into(),
        call_graph: CallGraph::Dwarf,
        max_depth: 128,
        ..Header::task_clock()
    };
    h.events.push(EventDesc::software("page-faults", 2)); // PERF_COUNT_SW_PAGE_FAULTS
    h
}

fn process(pid: u32) -> ProcessInfo {
    ProcessInfo {
        pid,
        ppid: 1,
        origin: ProcessOrigin::Start,
        exe: PathBuf::from("/usr/bin/prog"),
        start_mono_ns: 7_000_000_100_000,
        period: 2_600_000,
        window: 20_000,
        jitter: 325_000,
        period_source: PeriodSource::Budget,
        sample_cost_ns: 26_000,
        floor_cost_ns: 15_700,
        predicted_overhead_ppm: 19_800,
        floor: false,
    }
}

/// Realistic window samples of one thread: long period ~1 ms with jitter, window ~27 us.
fn window_samples(rng: &mut Rng, n_windows: usize, ncounters: usize) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut t = 7_000_001_000_000u64;
    let mut c = [0u64; 8];
    let text = 0x5555_5555_0000u64;
    for _ in 0..n_windows {
        // end of a long period: counters advance a lot.
        t += 1_000_000 + rng.below(125_000);
        let ip = text + rng.below(2 << 20);
        let long = [3_000_000, 6_000_000, 2_000, 1_000, 40, 3, 1, 0];
        for i in 0..ncounters {
            c[i] += long[i] / 2 + rng.below(long[i] + 1);
        }
        let mut start = sample(1234, t, ip, SampleKind::WindowStart, &c[..ncounters]);
        start.stack = 1 + rng.below(50) as u32;
        out.push(start);
        // end of the window: a few hundred cycles later, usually in the same function.
        t += 27_000 + rng.below(4_000);
        let ip2 = ip.wrapping_add(rng.below(400)).wrapping_sub(200);
        let short = [300, 600, 2, 1, 1, 0, 0, 0];
        for i in 0..ncounters {
            c[i] += short[i] / 2 + rng.below(short[i] + 1);
        }
        out.push(sample(1234, t, ip2, SampleKind::WindowEnd, &c[..ncounters]));
    }
    out
}

fn sample(tid: u32, time: u64, ip: u64, kind: SampleKind, c: &[u64]) -> Sample {
    Sample { tid, time, ip, kind, stack: 0, counters: Counters::from_slice(c).unwrap() }
}

/// A small file: preamble, header, and one of each chunk. Returns the bytes and the
/// offset at which each chunk after the header starts.
fn small_file() -> (Vec<u8>, Vec<usize>, Vec<Sample>) {
    let mut e = Encoder::new();
    e.preamble();
    e.header(&header());
    let mut starts = vec![e.len()];
    e.process(7, &process(100));
    starts.push(e.len());
    e.threads(7, &[ThreadInfo { tid: 100, name: "main".into() }]);
    starts.push(e.len());
    e.maps(
        7,
        &MapsSnapshot {
            time_mono_ns: 5,
            maps: vec![Mapping {
                start: 0x1000,
                end: 0x3000,
                file_offset: 0x1000,
                path: "/usr/bin/prog".into(),
            }],
        },
    );
    starts.push(e.len());
    let samples = window_samples(&mut Rng(9), 3, 2);
    let mut b = e.samples(7, 1234, 2);
    for s in &samples {
        b.push(s.kind, s.time, s.ip, s.stack, &s.counters);
    }
    b.finish();
    starts.push(e.len());
    e.lost(7, &[LostCount { tid: 1234, lost: 2 }]);
    starts.push(e.len());
    e.end_process(
        7,
        &ProcessEnd {
            reason: EndReason::Exit,
            time_mono_ns: 9,
            samples: 6,
            lost: 2,
            wakeups: 1,
            windows: 3,
            window_sum: 81_000,
            status: Some(3),
            unsampled_ns: 1234,
            cpu_ns: Some(99_000_000),
            tree_cpu_ns: None,
        },
    );
    starts.push(e.len());
    e.note(7, &Note { level: NoteLevel::Warning, message: "a note".into() });
    starts.push(e.len());
    e.image(0, &vdso_image());
    starts.push(e.len());
    e.stacks(7, 1, &stack_nodes());
    starts.push(e.len());
    e.baseline(&baseline());
    (e.as_bytes().to_vec(), starts, samples)
}

/// A prefix tree: main <- a <- b, main <- c, and a second thread's root.
fn stack_nodes() -> Vec<StackNode> {
    vec![
        StackNode { parent: 0, addr: 0x5555_0000_1000 },
        StackNode { parent: 1, addr: 0x5555_0000_2000 },
        StackNode { parent: 2, addr: 0x7f00_1234_5678 },
        StackNode { parent: 1, addr: 0x5555_0000_0400 },
        StackNode { parent: 0, addr: 0x7f00_0000_0010 },
    ]
}

fn baseline() -> Baseline {
    Baseline {
        windows: true,
        requested: 20_000,
        intervals: 200,
        work_ns: 11_250.5,
        counters: vec![
            BaselineCounter { mean: 27_800.25, sd: 900.0 },
            BaselineCounter { mean: 0.015, sd: 0.12 },
        ],
        tail: vec![
            BaselineCounter { mean: 8_700.0, sd: 300.0 },
            BaselineCounter { mean: 0.0, sd: 0.0 },
        ],
        end: vec![
            BaselineCounter { mean: 13_100.0, sd: 700.0 },
            BaselineCounter { mean: 0.0, sd: 0.0 },
        ],
        uncounted: 4_100.25,
    }
}

/// A stand-in for the vDSO's bytes: the chunk carries any bytes, zeros included.
fn vdso_image() -> Image {
    Image { name: "[vdso]".into(), bytes: (0..=255u8).cycle().take(8192).chain([0, 0]).collect() }
}

fn records(bytes: &[u8]) -> Vec<Result<Record, FormatError>> {
    Reader::new(bytes, "mem").unwrap().collect()
}

#[test]
fn every_chunk_round_trips() {
    let (bytes, _, samples) = small_file();
    let r = Reader::new(&bytes[..], "mem").unwrap();
    assert_eq!(r.header(), &header());
    let recs: Vec<Record> = r.map(Result::unwrap).collect();
    assert_eq!(recs.len(), 10, "{recs:?}");
    assert!(matches!(&recs[0], Record::Process { stream: 7, info } if *info == process(100)));
    assert!(matches!(&recs[1], Record::Threads { threads, .. } if threads[0].name == "main"));
    assert!(matches!(&recs[2], Record::Maps { maps, .. } if maps.maps[0].end == 0x3000));
    let Record::Samples(batch) = &recs[3] else { panic!("{:?}", recs[3]) };
    let got: Vec<Sample> = batch.iter().map(Result::unwrap).collect();
    assert_eq!(got, samples);
    assert!(matches!(&recs[4], Record::Lost { lost, .. } if lost[0].lost == 2));
    assert!(matches!(&recs[5], Record::End { end, .. } if end.mean_window() == Some(27_000.0)));
    assert!(matches!(&recs[6], Record::Note { note, .. } if note.message == "a note"));
    assert!(matches!(&recs[7], Record::Image { stream: 0, image } if *image == vdso_image()));
    assert!(
        matches!(&recs[8], Record::Stacks { stream: 7, first_id: 1, nodes } if *nodes == stack_nodes())
    );
    assert!(matches!(&recs[9], Record::Baseline(b) if *b == baseline()));
    let dir = std::env::temp_dir().join(format!("strobe-format-image-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("img.strobe");
    std::fs::write(&p, &bytes).unwrap();
    assert_eq!(read_all(&p).unwrap().images, [vdso_image()]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn random_sample_batches_round_trip() {
    let mut rng = Rng(0x1234_5678);
    for round in 0..300 {
        let nc = round % (MAX_COUNTERS + 1);
        let n = rng.below(200) as usize;
        let mut samples = Vec::new();
        let mut t = rng.next() >> 4;
        for _ in 0..n {
            // Edge values: huge jumps, wrapping IPs, counters that go down (reset).
            t = t
                .saturating_add(match rng.below(4) {
                    0 => 0,
                    1 => rng.below(100),
                    2 => rng.next() >> 40,
                    _ => rng.next() >> 8,
                })
                .min(u64::MAX >> 3);
            let ip = match rng.below(3) {
                0 => rng.next(),
                1 => u64::MAX - rng.below(10),
                _ => rng.below(1 << 20),
            };
            let c: Vec<u64> = (0..nc)
                .map(|_| if rng.below(5) == 0 { u64::MAX } else { rng.next() >> rng.below(64) })
                .collect();
            let kind = [
                SampleKind::Plain,
                SampleKind::WindowStart,
                SampleKind::WindowEnd,
                SampleKind::CallTail,
                SampleKind::Overflow,
            ][rng.below(5) as usize];
            samples.push(sample(77, t, ip, kind, &c));
        }
        let mut e = Encoder::new();
        e.preamble();
        e.header(&header());
        let mut b = e.samples(3, 77, nc);
        for s in &samples {
            b.push(s.kind, s.time, s.ip, s.stack, &s.counters);
        }
        drop(b);
        let recs = records(e.as_bytes());
        if n == 0 {
            assert!(recs.is_empty(), "an empty batch leaves no chunk");
            continue;
        }
        let Ok(Record::Samples(batch)) = &recs[0] else { panic!("{recs:?}") };
        let got: Vec<Sample> = batch.iter().map(Result::unwrap).collect();
        assert_eq!(got, samples, "round {round}");
    }
}

#[test]
fn truncation_at_every_byte_yields_the_whole_chunks_before_it() {
    let (bytes, starts, _) = small_file();
    let header_end = starts[0];
    for cut in 0..=bytes.len() {
        let part = &bytes[..cut];
        let r = Reader::new(part, "cut.strobe");
        if cut < header_end {
            let err = r.unwrap_err();
            assert!(matches!(err, FormatError::NoHeader { .. }), "cut {cut}: {err}");
            continue;
        }
        let recs: Vec<Record> = r.unwrap().map(|r| r.unwrap()).collect();
        let len = bytes.len();
        let whole = starts.iter().skip(1).chain([&len]).filter(|&&e| e <= cut).count();
        let at_boundary = starts.contains(&cut) || cut == bytes.len();
        if at_boundary {
            assert_eq!(recs.len(), whole, "cut {cut}");
        } else {
            assert_eq!(recs.len(), whole + 1, "cut {cut}");
            let last_start = *starts.iter().rfind(|&&s| s <= cut).unwrap();
            assert!(
                matches!(recs.last(), Some(Record::Truncated { offset }) if *offset == last_start as u64),
                "cut {cut}: {:?}",
                recs.last()
            );
        }
    }
}

#[test]
fn a_flipped_byte_is_reported_with_its_chunk_offset_and_reading_resumes() {
    let (bytes, starts, _) = small_file();
    // Damage each chunk after the header in turn, at its first, a middle and its last byte.
    for (i, w) in starts.windows(2).enumerate() {
        for at in [w[0], (w[0] + w[1]) / 2, w[1] - 1] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x40;
            let recs = records(&bad);
            let errs: Vec<&FormatError> = recs.iter().filter_map(|r| r.as_ref().err()).collect();
            assert_eq!(errs.len(), 1, "chunk {i} byte {at}: {recs:?}");
            assert_eq!(errs[0].offset(), Some(w[0] as u64), "chunk {i} byte {at}: {}", errs[0]);
            assert!(errs[0].to_string().contains(&format!("byte {}", w[0])), "{}", errs[0]);
            // Every other chunk still reads: 10 records in all, one of them the error.
            assert_eq!(recs.len(), 10, "chunk {i} byte {at}: {}", recs.len());
        }
    }
    // read_all refuses a corrupt file.
    let dir = std::env::temp_dir().join(format!("strobe-format-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("bad.strobe");
    let mut bad = bytes.clone();
    bad[starts[3] + 20] ^= 1;
    std::fs::write(&p, &bad).unwrap();
    let err = read_all(&p).unwrap_err();
    assert!(err.to_string().contains("corrupt recording at byte"), "{err}");
    std::fs::write(&p, &bytes[..starts[4] + 3]).unwrap();
    let rec = read_all(&p).unwrap();
    assert_eq!(rec.truncated_at, Some(starts[4] as u64));
    assert_eq!(rec.total_samples(), 6);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn damaged_header_and_foreign_files_are_refused() {
    let (bytes, starts, _) = small_file();
    let mut bad = bytes.clone();
    bad[starts[0] - 1] ^= 0xff;
    assert!(matches!(
        Reader::new(&bad[..], "x").unwrap_err(),
        FormatError::Corrupt { offset: 8, .. }
    ));
    let err = Reader::new(&b"\x7fELF\x02\x01\x01\x00junk"[..], "x").unwrap_err();
    assert!(matches!(err, FormatError::NotARecording { .. }), "{err}");
    // A file of the first format (strobe before stack tables) and one of a future
    // major version are refused with the versions named.
    for major in [1u8, 3] {
        let mut other = bytes.clone();
        other[6] = major;
        let err = Reader::new(&other[..], "x").unwrap_err();
        assert!(
            matches!(err, FormatError::UnsupportedVersion { found, supported: 2, .. } if found == u16::from(major)),
            "{err}"
        );
    }
    let mut v1 = bytes.clone();
    v1[6] = 1;
    let msg = Reader::new(&v1[..], "old.strobe").unwrap_err().to_string();
    assert!(msg.contains("format version 1") && msg.contains("record it again"), "{msg}");
}

#[test]
fn a_torn_chunk_followed_by_other_writers_chunks_is_skipped() {
    // Writer A is killed in the middle of a chunk; writer B appends after the fragment.
    let (bytes, starts, _) = small_file();
    let mut torn = bytes[..starts[3] + 10].to_vec(); // half of the samples chunk
    let mut e = Encoder::new();
    e.note(9, &Note { level: NoteLevel::Info, message: "from another process".into() });
    torn.extend_from_slice(e.as_bytes());
    let recs = records(&torn);
    assert!(
        matches!(&recs[3], Err(FormatError::Corrupt { offset, .. }) if *offset == starts[3] as u64),
        "{recs:?}"
    );
    assert!(matches!(recs.last(), Some(Ok(Record::Note { stream: 9, .. }))), "{recs:?}");
}

#[test]
fn unknown_chunk_tags_are_skipped() {
    let (mut bytes, _, _) = small_file();
    // A chunk with tag 200 from a future minor version, built by hand.
    let payload = b"future";
    let mut h = vec![0xB5, 0x7E, 200, 0, 1, 0, 0, 0];
    h.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&h);
    hasher.update(payload);
    h.extend_from_slice(&hasher.finalize().to_le_bytes());
    h.extend_from_slice(payload);
    bytes.extend_from_slice(&h);
    let recs = records(&bytes);
    // The small file's 10 records; the unknown chunk adds none.
    assert_eq!(recs.len(), 10);
    assert!(recs.iter().all(Result::is_ok));
}

#[test]
fn a_window_takes_at_most_40_bytes_with_four_counters() {
    // Batches as the agent writes them at the default wakeup threshold (512 samples).
    let mut rng = Rng(42);
    let samples = window_samples(&mut rng, 10_000, 4);
    let mut e = Encoder::new();
    for chunk in samples.chunks(512) {
        let mut b = e.samples(5, 1234, 4);
        for s in chunk {
            b.push(s.kind, s.time, s.ip, s.stack, &s.counters);
        }
    }
    let per_window = e.len() as f64 / 10_000.0;
    println!(
        "{per_window:.1} bytes per window (start + end sample, 4 counters, chunk headers included)"
    );
    assert!(per_window <= 40.0, "{per_window:.1} bytes per window");
    // And it decodes back.
    let mut all = Vec::new();
    let mut f = Encoder::new();
    f.preamble();
    f.header(&header());
    let mut bytes = f.as_bytes().to_vec();
    bytes.extend_from_slice(e.as_bytes());
    for r in Reader::new(&bytes[..], "mem").unwrap() {
        let Record::Samples(b) = r.unwrap() else { panic!() };
        all.extend(b.iter().map(Result::unwrap));
    }
    assert_eq!(all, samples);
}

#[test]
fn stack_tables_continue_across_chunks_and_a_forward_parent_is_corrupt() {
    let mut e = Encoder::new();
    e.preamble();
    e.header(&header());
    e.stacks(7, 1, &stack_nodes()[..2]);
    e.stacks(7, 3, &stack_nodes()[2..]);
    let dir = std::env::temp_dir().join(format!("strobe-format-stacks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("s.strobe");
    std::fs::write(&p, e.as_bytes()).unwrap();
    let rec = read_all(&p).unwrap();
    assert_eq!(rec.processes[0].stacks, stack_nodes());
    std::fs::remove_dir_all(&dir).unwrap();
    // A node whose parent is itself or later cannot come from an encoder: corrupt.
    let mut bad = Encoder::new();
    bad.preamble();
    bad.header(&header());
    bad.stacks(7, 5, &[StackNode { parent: 9, addr: 1 }]);
    let recs = records(bad.as_bytes());
    let err = recs[0].as_ref().unwrap_err().to_string();
    assert!(err.contains("parent is not an earlier node"), "{err}");
}

/// Frames `payload` as one chunk the way the encoder does, with a correct checksum, so
/// that a payload no encoder writes reaches its parser.
fn raw_chunk(out: &mut Vec<u8>, tag: u8, stream: u32, payload: &[u8]) {
    let mut h = Vec::with_capacity(CHUNK_HEADER_LEN);
    h.extend_from_slice(&CHUNK_SYNC);
    h.extend_from_slice(&[tag, 0]);
    h.extend_from_slice(&stream.to_le_bytes());
    h.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&h);
    crc.update(payload);
    h.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Found by the fuzzer: a stack delta that overflows i64 when added to the previous id
/// is corruption, not a panic.
#[test]
fn a_stack_delta_past_i64_is_corrupt() {
    let mut e = Encoder::new();
    e.preamble();
    e.header(&header());
    let mut bytes = e.as_bytes().to_vec();
    let mut p = Vec::new();
    varint(&mut p, 11); // thread id
    p.push(0); // no counters
    p.extend_from_slice(&2u32.to_le_bytes());
    for ds in [zigzag(1), zigzag(i64::MAX)] {
        varint(&mut p, 8); // time delta 1, kind plain
        varint(&mut p, 0); // ip delta
        varint(&mut p, ds);
    }
    raw_chunk(&mut bytes, tag::SAMPLES, 7, &p);
    let recs = records(&bytes);
    let Ok(Record::Samples(batch)) = &recs[0] else { panic!("{:?}", recs[0]) };
    let got: Vec<_> = batch.iter().collect();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].as_ref().unwrap().stack, 1);
    let err = got[1].as_ref().unwrap_err().to_string();
    assert!(err.contains("stack id out of range"), "{err}");
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// A stack chunk whose ids start billions past the table is corruption, not a request to
/// pad the table with billions of nodes.
#[test]
fn a_stack_id_jump_past_any_loss_is_corrupt() {
    let mut e = Encoder::new();
    e.preamble();
    e.header(&header());
    e.stacks(7, 1, &stack_nodes()[..2]);
    e.stacks(7, 3_000_000_000, &[StackNode { parent: 0, addr: 1 }]);
    let dir = std::env::temp_dir().join(format!("strobe-format-jump-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("j.strobe");
    std::fs::write(&p, e.as_bytes()).unwrap();
    let err = read_all(&p).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(err.contains("jumps from id 2 to 3000000000"), "{err}");
    assert!(err.contains(&format!("at byte {}", e.len())), "{err}");
}

/// A file another writer is still appending to: reads what has been written so far.
#[derive(Clone, Default)]
struct Growing {
    bytes: std::rc::Rc<std::cell::RefCell<Vec<u8>>>,
    at: usize,
}

impl std::io::Read for Growing {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let b = self.bytes.borrow();
        let n = out.len().min(b.len() - self.at);
        out[..n].copy_from_slice(&b[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Follows `bytes` written `step(i)` bytes at a time from `from` on, reading after each
/// write, then stops following and reads to the end.
fn followed(bytes: &[u8], from: usize, mut step: impl FnMut() -> usize) -> Vec<String> {
    let g = Growing::default();
    g.bytes.borrow_mut().extend_from_slice(&bytes[..from]);
    let mut r = Reader::new(g.clone(), "mem").unwrap();
    r.set_follow(true);
    let mut got = Vec::new();
    let mut at = from;
    loop {
        for rec in r.by_ref() {
            got.push(format!("{rec:?}"));
        }
        if at == bytes.len() {
            break;
        }
        let n = step().clamp(1, bytes.len() - at);
        g.bytes.borrow_mut().extend_from_slice(&bytes[at..at + n]);
        at += n;
    }
    r.set_follow(false);
    got.extend(r.map(|rec| format!("{rec:?}")));
    got
}

#[test]
fn a_followed_file_reads_every_chunk_once_however_its_writes_are_cut() {
    let (bytes, starts, _) = small_file();
    let want: Vec<String> = records(&bytes).iter().map(|r| format!("{r:?}")).collect();
    let mut rng = Rng(5);
    for max in [1, 7, 16, 100, 5000] {
        assert_eq!(followed(&bytes, starts[0], || 1 + rng.below(max) as usize), want, "{max}");
    }
    // A chunk still being written at the end is waited for, never a truncation; when
    // following stops, a chunk still cut is one.
    let cut = starts[3] + 5;
    let mut r = Reader::new(&bytes[..cut], "cut").unwrap();
    r.set_follow(true);
    assert!(r.by_ref().all(|rec| !matches!(rec, Ok(Record::Truncated { .. }))));
    assert_eq!(r.offset(), starts[3] as u64, "stopped before the cut chunk");
    r.set_follow(false);
    assert!(
        matches!(r.next(), Some(Ok(Record::Truncated { offset })) if offset == starts[3] as u64)
    );
}

#[test]
fn a_followed_file_reports_a_torn_chunk_and_reads_on_once_later_chunks_come() {
    // A writer killed inside its chunk (the SAMPLES chunk), another appending after it.
    let (bytes, starts, _) = small_file();
    let mut torn = bytes[..starts[3] + 9].to_vec();
    torn.extend_from_slice(&bytes[starts[4]..]);
    let want: Vec<String> = records(&torn).iter().map(|r| format!("{r:?}")).collect();
    assert!(want.iter().any(|r| r.contains("Corrupt")), "{want:?}");
    let mut rng = Rng(11);
    for max in [3, 40, 1000] {
        assert_eq!(followed(&torn, starts[0], || 1 + rng.below(max) as usize), want, "{max}");
    }
}
