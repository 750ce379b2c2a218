//! Writes the seed corpora in `fuzz/seeds/` (run from the repository root):
//!
//! ```text
//! cargo run --manifest-path fuzz/Cargo.toml --example seeds
//! ```
//!
//! Every seed is made here from strobe's own encoder or from text a user would type, so
//! the corpora can be rebuilt when a format changes; `usdt_notes/real-*` is the exception,
//! a section cut out of a test program (see `fuzz/README.md`). Seeds are small on purpose:
//! they show the fuzzer the shapes, and it finds the rest.

use std::path::{Path, PathBuf};

use strobe_format::*;

fn main() {
    let root = PathBuf::from("fuzz/seeds");
    record_reader(&root.join("record_reader"));
    text(&root.join("event_spec"), EVENT_SPECS, |i, s| {
        // First byte: bit 0 hardware PMU, bit 1 PMU check passes, bit 2 kernel counting.
        let mut v = vec![(i % 8) as u8];
        v.extend_from_slice(s.as_bytes());
        v
    });
    text(&root.join("watch_spec"), WATCH_SPECS, |_, s| s.as_bytes().to_vec());
    text(&root.join("probe_spec"), PROBE_SPECS, |_, s| s.as_bytes().to_vec());
    usdt_notes(&root.join("usdt_notes"));
    protocol(&root.join("protocol"));
}

/// One seed per decoder of strobe-protocol, from its own encoders; the first byte picks
/// the decoder (see the target's body).
fn protocol(dir: &Path) {
    use strobe_protocol::probe::{self, PointCount, PointReport, PointSite};
    use strobe_protocol::watch::*;
    let with = |which: u8, bytes: &[u8]| [&[which][..], bytes].concat();
    let request = WatchRequest {
        points: vec![
            WatchPoint { base: Base::Executable, addr: 0x4010, len: 8, access: Access::Write },
            WatchPoint {
                base: Base::Library { dev: 0x803, ino: 0x1f },
                addr: 0x20,
                len: 4,
                access: Access::ReadWrite,
            },
            WatchPoint { base: Base::Absolute, addr: 0x601040, len: 1, access: Access::Write },
        ],
        options: WatchOptions {
            per_thread: true,
            multiplex: true,
            stack: true,
            rotate: std::time::Duration::from_millis(4),
        },
    };
    write(dir, "watch_request", &with(0, request.to_env().as_encoded_bytes()));
    let mut stream = Vec::new();
    let mut hit = HitRecord::new(1, 4242, false, Some(6), 7);
    hit.push(CodeAddr { module: 1, vaddr: 0x1139 });
    hit.push(CodeAddr { module: 2, vaddr: 0x2a000 });
    for m in [
        Message::Hello { version: VERSION },
        Message::Start { pid: 4241, watchpoints: 3, slots: 3, multiplexed: false },
        Message::Watchpoint { index: 0, addr: 0x5555_5555_8010, len: 8, access: Access::Write },
        Message::Module { id: 1, bias: 0x5555_5555_4000, path: b"/usr/bin/app" },
        Message::Module { id: 2, bias: 0x7f00_0000_0000, path: b"/lib/libc.so.6" },
        Message::Hit(hit),
        Message::Armed { wp: 0, hits: 1, armed_ns: 900, enabled_ns: 1000, times: 2 },
        Message::Threads(3),
        Message::Lost(0),
        Message::Chained(1),
        Message::Error("a watchpoint could not be armed"),
        Message::End,
    ] {
        m.encode(&mut stream);
    }
    write(dir, "watch_stream", &with(1, &stream));
    let mut log2_ns = [0; probe::LOG2_BUCKETS];
    log2_ns[10] = 3;
    let report = PointReport {
        counts: vec![PointCount {
            probe: "req".into(),
            hits: 3,
            exits: 3,
            total_ns: 4000,
            log2_ns,
        }],
        sites: vec![PointSite {
            probe: "req".into(),
            file: "src/a \"b\".c".into(),
            line: 7,
            nargs: 2,
        }],
        unknown: vec![("rq".into(), " (did you mean req?)".into())],
    };
    write(dir, "probe_report", &with(2, report.encode().as_bytes()));
    let mut line = String::new();
    let kind = probe::TraceKind::Exit { dur_ns: 1234 };
    probe::TraceLine { probe: "c_scope", tid: 77, ns: 123_456_789, kind, args: &[10, 20] }
        .encode(&mut line);
    write(dir, "trace_line", &with(3, line.trim_end().as_bytes()));
}

fn write(dir: &Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).expect("create the seed directory");
    std::fs::write(dir.join(name), bytes).expect("write a seed");
}

fn text(dir: &Path, specs: &[&str], bytes: impl Fn(usize, &str) -> Vec<u8>) {
    for (i, s) in specs.iter().enumerate() {
        write(dir, &format!("{i:02}"), &bytes(i, s));
    }
}

const EVENT_SPECS: &[&str] = &[
    "{task-clock/period=1ms,window=20us/,page-faults,context-switches}",
    "{cycles/period=999700,window=300/,instructions,branch-misses}:u",
    "task-clock/period=2ms,alt-period=30us,jitter=100us/,page-faults",
    "page-faults,context-switches",
    "cpu-clock/period=1s/:uk",
    "r003c,instructions:k",
    "{task-clock/hf-period=0.5us/}",
    "cycles/freq=1000/",
];

const WATCH_SPECS: &[&str] = &[
    "counter",
    "counter:w",
    "table+16:4:rw",
    "0x7ffd1000:8",
    "libfoo.so:counter:2:w",
    "ns::value+8",
    "0x1003:1:rw",
    "counter:x",
];

const PROBE_SPECS: &[&str] = &[
    "main",
    "work+0x10",
    "libc:malloc",
    "/usr/lib/libz.so.1:deflate+4",
    "usdt:app:tick",
    "usdt:libapp.so:app:tick",
    "app::run::{{closure}}",
    "ns::f:bad",
];

fn header() -> Header {
    let mut h = Header {
        strobe_version: "0.1.0".into(),
        start_unix_ns: 1_700_000_000_000_000_000,
        start_mono_ns: 7_000_000_000_000,
        command: vec!["./prog".into(), "--flag".into()],
        window: Some(20_000),
        jitter: Some(0),
        wakeup: 512,
        buffer_bytes: 64 << 20,
        overhead_ppm: 20_000,
        follow_fork: true,
        mode: RecordMode::Agent,
        call_graph: CallGraph::Dwarf,
        max_depth: 128,
        ..Header::task_clock()
    };
    h.events.push(EventDesc::software("page-faults", 2)); // PERF_COUNT_SW_PAGE_FAULTS
    h
}

/// A recording with one chunk of every kind.
fn recording() -> Vec<u8> {
    let mut e = Encoder::new();
    e.preamble();
    e.header(&header());
    e.process(
        7,
        &ProcessInfo {
            pid: 100,
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
        },
    );
    e.threads(7, &[ThreadInfo { tid: 100, name: "main".into() }]);
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
    e.baseline(&Baseline {
        windows: true,
        requested: 50_000,
        intervals: 200,
        work_ns: 21_000.0,
        counters: vec![
            BaselineCounter { mean: 29_000.0, sd: 900.0 },
            BaselineCounter { mean: 0.0, sd: 0.0 },
        ],
        tail: vec![
            BaselineCounter { mean: 8_800.0, sd: 300.0 },
            BaselineCounter { mean: 0.0, sd: 0.0 },
        ],
        end: vec![
            BaselineCounter { mean: 13_500.0, sd: 700.0 },
            BaselineCounter { mean: 0.0, sd: 0.0 },
        ],
        uncounted: 4_000.0,
    });
    e.stacks(7, 1, &[StackNode { parent: 0, addr: 0x1400 }, StackNode { parent: 1, addr: 0x1500 }]);
    let mut b = e.samples(7, 100, 2);
    let mut t = 7_000_001_000_000u64;
    for i in 0..6u64 {
        t += if i % 2 == 0 { 1_000_000 } else { 27_000 };
        let kind = if i % 2 == 0 { SampleKind::WindowStart } else { SampleKind::WindowEnd };
        // Each window's ends come with their overflows' own values (one a system call's).
        let overflow = if i == 0 { SampleKind::CallTail } else { SampleKind::Overflow };
        b.push(overflow, t, 0x1100 + 8 * i, 0, &[1_000 * i, 3 * i]);
        b.push(kind, t, 0x1100 + 8 * i, (i % 3) as u32, &[1_000 * i, 3 * i]);
    }
    b.finish();
    e.lost(7, &[LostCount { tid: 100, lost: 2 }]);
    e.note(7, &Note { level: NoteLevel::Warning, message: "a warning".into() });
    e.image(7, &Image { name: "[vdso]".into(), bytes: vec![0x7f, b'E', b'L', b'F'] });
    e.end_process(
        7,
        &ProcessEnd {
            reason: EndReason::Exit,
            time_mono_ns: 7_000_002_000_000,
            samples: 6,
            lost: 2,
            wakeups: 1,
            windows: 3,
            window_sum: 81_000,
            status: Some(0),
            unsampled_ns: 40_000,
            cpu_ns: Some(3_100_000),
            tree_cpu_ns: None,
        },
    );
    e.as_bytes().to_vec()
}

/// A kernel-mode recording's own chunks: kernel symbols and off-CPU intervals.
fn kernel_recording() -> Vec<u8> {
    let mut e = Encoder::new();
    e.preamble();
    e.header(&Header { mode: RecordMode::Kernel, mode_reason: "static".into(), ..header() });
    e.kernel_symbols(&[
        KernelSymbol {
            start: 0xffff_ffff_8100_0000,
            size: 0x40,
            name: "clear_page_erms".into(),
            module: String::new(),
        },
        KernelSymbol {
            start: 0xffff_ffff_c000_1000,
            size: 0x80,
            name: "ext4_read".into(),
            module: "ext4".into(),
        },
    ]);
    e.off_cpu(
        1,
        100,
        &[
            OffCpuInterval {
                start: 7_000_000,
                duration: 1_000_000,
                ip: 0x1100,
                stack: 2,
                preempted: false,
            },
            OffCpuInterval {
                start: 9_000_000,
                duration: 40_000,
                ip: 0x1200,
                stack: 1,
                preempted: true,
            },
        ],
    );
    e.as_bytes().to_vec()
}

fn record_reader(dir: &Path) {
    let file = recording();
    let raw = |b: &[u8]| [&[0u8][..], b].concat();
    write(dir, "whole", &raw(&file));
    write(dir, "cut", &raw(&file[..file.len() - 7]));
    let framed = strobe_fuzz::unframe(&file).expect("the encoder writes whole chunks");
    write(dir, "framed", &[&[1u8][..], &framed].concat());
    let kernel = kernel_recording();
    write(dir, "kernel-whole", &raw(&kernel));
    let framed = strobe_fuzz::unframe(&kernel).expect("the encoder writes whole chunks");
    write(dir, "kernel-framed", &[&[1u8][..], &framed].concat());
}

/// One `.note.stapsdt` note: owner `stapsdt`, type 3, then pc, base, semaphore and the
/// three strings, in the given byte order.
fn note(le: bool, pc: u64, sem: u64, provider: &str, name: &str, args: &str) -> Vec<u8> {
    let u32b = |v: u32| if le { v.to_le_bytes() } else { v.to_be_bytes() };
    let u64b = |v: u64| if le { v.to_le_bytes() } else { v.to_be_bytes() };
    let mut desc = Vec::new();
    desc.extend_from_slice(&u64b(pc));
    desc.extend_from_slice(&u64b(0x2000));
    desc.extend_from_slice(&u64b(sem));
    for s in [provider, name, args] {
        desc.extend_from_slice(s.as_bytes());
        desc.push(0);
    }
    let mut n = Vec::new();
    n.extend_from_slice(&u32b(8));
    n.extend_from_slice(&u32b(desc.len() as u32));
    n.extend_from_slice(&u32b(3));
    n.extend_from_slice(b"stapsdt\0");
    n.extend_from_slice(&desc);
    while n.len() % 4 != 0 {
        n.push(0);
    }
    n
}

fn usdt_notes(dir: &Path) {
    for (le, order, file) in [(true, 0u8, "le"), (false, 1u8, "be")] {
        let mut section = vec![order];
        section.extend(note(le, 0x1139, 0, "app", "tick", "-4@%edi 8@%rsi"));
        section.extend(note(le, 0x1150, 0x4010, "app", "guarded", ""));
        // A note of another owner (a GNU build id), which the parser skips.
        let u32b = |v: u32| if le { v.to_le_bytes() } else { v.to_be_bytes() };
        section.extend_from_slice(&u32b(4));
        section.extend_from_slice(&u32b(8));
        section.extend_from_slice(&u32b(3));
        section.extend_from_slice(b"GNU\0");
        section.extend_from_slice(&[0xab; 8]);
        write(dir, file, &section);
    }
}
