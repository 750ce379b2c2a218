//! strobe-perfdata against the perf on this machine: files written by `perf record` on
//! test programs built from source, decoded record by record and compared with what
//! `perf script -D` (perf's own raw dump) says each record holds; records ordered as
//! `perf script` orders them; damaged files read without a panic.
//!
//! perf comes from Debian's linux-perf (ci/setup.sh installs it); without it these tests
//! print why they skip.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use strobe_perfdata::{Error, Event, PerfData, PerfFile};

/// True when `perf` runs; otherwise says why the test skips.
fn have_perf() -> bool {
    let ok = Command::new("perf").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipped: `perf` does not run here (install linux-perf: ci/setup.sh)");
    }
    ok
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("perfdata-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `perf record -q -o DIR/NAME.data ARGS -- PROG PROG_ARGS`.
fn record(dir: &Path, name: &str, args: &[&str], prog: &str, prog_args: &[&str]) -> PathBuf {
    let out = dir.join(format!("{name}.data"));
    let o = Command::new("perf")
        .args(["record", "-q", "-o"])
        .arg(&out)
        .args(args)
        .arg("--")
        .arg(strobe_testprogs::path(prog))
        .args(prog_args)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "perf record {args:?} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn perf_stdout(args: &[&str], file: &Path) -> String {
    let o = Command::new("perf").args(args).arg("-i").arg(file).output().unwrap();
    assert!(o.status.success(), "perf {args:?} failed: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// What `perf script -D` prints about one record.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Dumped {
    time: u64,
    kind: String,
    /// The record's own line after `PERF_RECORD_KIND`.
    line: String,
    chain: Vec<u64>,
    /// (id, value, lost) of each read value.
    read: Vec<(u64, u64, Option<u64>)>,
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim().trim_start_matches("0x"), 16)
        .unwrap_or_else(|_| panic!("not hex: {s:?}"))
}

/// Records by file offset, from `perf script -D`.
fn dump(file: &Path) -> BTreeMap<u64, Dumped> {
    let text = perf_stdout(&["script", "-D"], file);
    let mut out = BTreeMap::new();
    let mut cur: Option<(u64, Dumped)> = None;
    for line in text.lines() {
        // "TIME 0xOFFSET [0xSIZE]: PERF_RECORD_KIND..."
        let head = line.split_once(": PERF_RECORD_").and_then(|(pre, post)| {
            let mut p = pre.split_whitespace();
            let time = p.next()?.parse::<u64>().ok()?;
            let off = p.next()?.strip_prefix("0x")?;
            let off = u64::from_str_radix(off, 16).ok()?;
            let kind_end = post
                .find(|c: char| !(c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit()))
                .unwrap_or(post.len());
            Some((
                off,
                Dumped {
                    time,
                    kind: post[..kind_end].to_string(),
                    line: post[kind_end..].to_string(),
                    ..Dumped::default()
                },
            ))
        });
        if let Some(h) = head {
            if let Some((off, d)) = cur.replace(h) {
                out.insert(off, d);
            }
            continue;
        }
        let Some((_, d)) = cur.as_mut() else { continue };
        let t = line.trim();
        // "..... id X, value Y" and ".....  N: ADDRESS"; not "...... dso: PATH".
        if let Some(rest) = t.strip_prefix(".....").filter(|r| r.starts_with(' ')) {
            let rest = rest.trim();
            if let Some(r) = rest.strip_prefix("id ") {
                // "id X, value Y[, lost Z]"
                let parts: Vec<&str> = r.split(", ").collect();
                let id = hex(parts[0]);
                let value = hex(parts[1].trim_start_matches("value "));
                let lost = parts.get(2).map(|l| l.trim_start_matches("lost ").parse().unwrap());
                d.read.push((id, value, lost));
            } else if let Some((_, w)) = rest.split_once(": ") {
                d.chain.push(hex(w));
            }
        }
    }
    if let Some((off, d)) = cur {
        out.insert(off, d);
    }
    out
}

/// Checks every record strobe-perfdata decodes against perf's dump of it.
fn assert_matches_dump(file: &Path) -> usize {
    let bytes = std::fs::read(file).unwrap();
    let data = PerfData::parse(&bytes).unwrap();
    let dumped = dump(file);
    let mut checked = 0;
    let mut seen = 0;
    for r in data.records() {
        let r = r.unwrap();
        seen += 1;
        let Some(d) = dumped.get(&r.offset) else {
            panic!("perf does not dump a record at {:#x}: {r:?}", r.offset)
        };
        let ctx = format!("record at {:#x}: {d:?} vs {r:?}", r.offset);
        match r.event {
            Event::Sample(s) => {
                assert_eq!(d.kind, "SAMPLE", "{ctx}");
                let attr = data.attrs()[r.attr.unwrap()].attr;
                // "(IP, 0x2): PID/TID: 0xIP period: N addr: A"
                let misc = d.line.split(", ").nth(1).unwrap().split(')').next().unwrap();
                assert_eq!(u64::from(r.misc), hex(misc), "{ctx}");
                let after = d.line.split("): ").nth(1).unwrap();
                let mut w = after.split_whitespace();
                let (pid, tid) = w.next().unwrap().trim_end_matches(':').split_once('/').unwrap();
                assert_eq!(
                    (s.pid(), s.tid()),
                    (Some(pid.parse().unwrap()), Some(tid.parse().unwrap())),
                    "{ctx}"
                );
                assert_eq!(s.ip(), Some(hex(w.next().unwrap())), "{ctx}");
                assert_eq!(w.next(), Some("period:"));
                let period: u64 = w.next().unwrap().parse().unwrap();
                assert_eq!(s.period().unwrap_or(attr.sample_period_or_freq), period, "{ctx}");
                assert_eq!(s.time().unwrap_or(0), d.time, "{ctx}");
                let chain: Vec<u64> = s.callchain().map(|c| c.raw().collect()).unwrap_or_default();
                assert_eq!(chain, d.chain, "{ctx}");
                let read: Vec<(u64, u64, Option<u64>)> = s
                    .read()
                    .map(|rv| rv.iter().map(|v| (v.id.unwrap_or(0), v.value, v.lost)).collect())
                    .unwrap_or_default();
                assert_eq!(read, d.read, "{ctx}");
                checked += 1;
            }
            Event::Mmap(m) => {
                assert!(d.kind.starts_with("MMAP"), "{ctx}");
                // " PID/TID: [0xADDR(0xLEN) @ 0xPGOFF ...]: PROT PATH"
                let (ids, rest) = d.line.trim().split_once(": [").unwrap();
                let (pid, tid) = ids.split_once('/').unwrap();
                assert_eq!(
                    (m.pid as i32, m.tid as i32),
                    (pid.parse().unwrap(), tid.parse().unwrap()),
                    "{ctx}"
                );
                let (addr, rest) = rest.split_once('(').unwrap();
                let (len, rest) = rest.split_once(')').unwrap();
                let pgoff = rest
                    .trim_start_matches(" @ ")
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .trim_end_matches("]:");
                assert_eq!((m.addr, m.len, m.pgoff), (hex(addr), hex(len), hex(pgoff)), "{ctx}");
                let path = rest.rsplit_once("]: ").unwrap().1;
                // After the protection ("r-xp" for MMAP2, "x" or "r" for MMAP).
                let path = path.split_once(' ').unwrap().1;
                assert_eq!(m.path(), path, "{ctx}");
                checked += 1;
            }
            Event::Comm(c) => {
                assert_eq!(d.kind, "COMM", "{ctx}");
                assert_eq!(c.exec, d.line.starts_with(" exec"), "{ctx}");
                let text = d.line.split_once(": ").unwrap().1;
                let (comm, ids) = text.rsplit_once(':').unwrap();
                assert_eq!(String::from_utf8_lossy(c.comm), comm, "{ctx}");
                assert_eq!(format!("{}/{}", c.pid, c.tid), ids, "{ctx}");
                checked += 1;
            }
            Event::Fork(t) | Event::Exit(t) => {
                assert!(d.kind == "FORK" || d.kind == "EXIT", "{ctx}");
                assert_eq!(
                    d.line,
                    format!("({}:{}):({}:{})", t.pid, t.tid, t.ppid, t.ptid),
                    "{ctx}"
                );
                checked += 1;
            }
            Event::FinishedRound => assert_eq!(d.kind, "FINISHED_ROUND", "{ctx}"),
            _ => {}
        }
    }
    assert_eq!(
        seen,
        dumped.len(),
        "perf dumps {} records, strobe-perfdata read {seen}",
        dumped.len()
    );
    checked
}

#[test]
fn group_reads_match_perf_record_by_record() {
    if !have_perf() {
        return;
    }
    let dir = scratch("group");
    let f = record(
        &dir,
        "group",
        &["-e", "{task-clock,page-faults}:S", "-c", "50000"],
        "perf_mix",
        &["20"],
    );
    let n = assert_matches_dump(&f);
    let bytes = std::fs::read(&f).unwrap();
    let data = PerfData::parse(&bytes).unwrap();
    let names: Vec<&str> = data.attrs().iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["task-clock", "page-faults"]);
    assert_eq!(data.info().groups.len(), 1);
    // Every sample reads both counters, leader first, cumulative (never decreasing) per
    // group: perf opens one group per CPU for the task, each counting while the task runs
    // there, so a task that migrates reads two sequences interleaved.
    let mut last: std::collections::HashMap<u64, [u64; 2]> = Default::default();
    for r in data.ordered() {
        if let Event::Sample(s) = r.unwrap().event {
            let read: Vec<_> = s.read().unwrap().iter().collect();
            assert_eq!(read.len(), 2);
            let leader = read[0].id.unwrap();
            assert_eq!(data.attr_of_id(leader), Some(0));
            assert_eq!(data.attr_of_id(read[1].id.unwrap()), Some(1));
            let before = last.entry(leader).or_default();
            assert!(
                read[0].value > before[0] && read[1].value >= before[1],
                "{read:?} after {before:?} of the same group"
            );
            *before = [read[0].value, read[1].value];
        }
    }
    let faults: u64 = last.values().map(|v| v[1]).sum();
    assert!(faults > 0, "perf_mix faults 64 pages per round");
    assert!(n > 500, "{n} records checked");
}

#[test]
fn callchains_match_perf_record_by_record() {
    if !have_perf() {
        return;
    }
    let dir = scratch("callchain");
    let f = record(&dir, "g", &["-g", "-e", "task-clock:u", "-c", "50000"], "perf_mix", &["20"]);
    assert!(assert_matches_dump(&f) > 500);
    // Frame pointers: a chain starts with the user marker and reaches main.
    let bytes = std::fs::read(&f).unwrap();
    let data = PerfData::parse(&bytes).unwrap();
    let deep = data
        .records()
        .filter_map(|r| match r.unwrap().event {
            Event::Sample(s) => s.callchain(),
            _ => None,
        })
        .filter(|c| c.frames().count() >= 4)
        .count();
    assert!(deep > 100, "{deep} samples with leaf <- middle <- outer <- main chains");
}

#[test]
fn threads_forks_execs_and_pipe_mode_match_perf_record_by_record() {
    if !have_perf() {
        return;
    }
    let dir = scratch("threads");
    let t =
        record(&dir, "threads", &["-e", "task-clock:u", "-c", "50000"], "perf_threads", &["10"]);
    assert!(assert_matches_dump(&t) > 500);
    let f = record(&dir, "forks", &["-e", "task-clock:u", "-c", "50000"], "perf_forks", &[]);
    assert!(assert_matches_dump(&f) > 500);
    let two = record(
        &dir,
        "two",
        &["-e", "task-clock/period=50000/u", "-e", "page-faults/period=4/u"],
        "perf_mix",
        &["20"],
    );
    assert!(assert_matches_dump(&two) > 500);

    // Pipe mode: the same facts arrive as records.
    let pipe = dir.join("pipe.data");
    let out = std::fs::File::create(&pipe).unwrap();
    let st = Command::new("perf")
        .args(["record", "-q", "-o", "-", "-e", "task-clock:u", "-c", "50000", "--"])
        .arg(strobe_testprogs::path("perf_mix"))
        .arg("20")
        .stdout(out)
        .status()
        .unwrap();
    assert!(st.success());
    let bytes = std::fs::read(&pipe).unwrap();
    let data = PerfData::parse(&bytes).unwrap();
    assert!(data.is_pipe());
    assert_eq!(data.attrs().iter().map(|a| a.name.as_str()).collect::<Vec<_>>(), ["task-clock:u"]);
    assert_eq!(data.info().command.get(1).map(String::as_str), Some("record"));
    let samples =
        data.records().filter(|r| matches!(r.as_ref().unwrap().event, Event::Sample(_))).count();
    let script = perf_stdout(&["script", "-F", "ip"], &pipe);
    assert_eq!(samples, script.lines().count());
}

#[test]
fn ordered_records_come_in_perf_script_order() {
    if !have_perf() {
        return;
    }
    let dir = scratch("order");
    // Four threads on two CPUs: the per-CPU buffers interleave in the file.
    let f =
        record(&dir, "threads", &["-e", "task-clock:u", "-c", "20000"], "perf_threads", &["10"]);
    let bytes = std::fs::read(&f).unwrap();
    let data = PerfData::parse(&bytes).unwrap();
    let ours: Vec<(u32, u64, u64)> = data
        .ordered()
        .filter_map(|r| match r.unwrap().event {
            Event::Sample(s) => Some((s.tid().unwrap(), s.time().unwrap(), s.ip().unwrap())),
            _ => None,
        })
        .collect();
    let text = perf_stdout(&["script", "-F", "tid,time,ip", "--ns"], &f);
    let perf: Vec<(u32, u64, u64)> = text
        .lines()
        .map(|l| {
            let mut w = l.split_whitespace();
            let tid = w.next().unwrap().parse().unwrap();
            let (s, ns) = w.next().unwrap().trim_end_matches(':').split_once('.').unwrap();
            let time = s.parse::<u64>().unwrap() * 1_000_000_000 + ns.parse::<u64>().unwrap();
            (tid, time, hex(w.next().unwrap()))
        })
        .collect();
    assert_eq!(ours.len(), perf.len());
    assert!(
        ours == perf,
        "the first difference: {:?}",
        ours.iter().zip(&perf).find(|(a, b)| a != b)
    );
    let file_order: Vec<u64> = data
        .records()
        .filter_map(|r| match r.unwrap().event {
            Event::Sample(s) => s.time(),
            _ => None,
        })
        .collect();
    let sorted = file_order.windows(2).all(|w| w[0] <= w[1]);
    eprintln!("file order already sorted by time: {sorted}");
}

/// Reads every record both ways; returns the error that ended the read, if any.
fn read_all(bytes: &[u8]) -> Option<Error> {
    let data = match PerfData::parse(bytes) {
        Ok(d) => d,
        Err(e) => return Some(e),
    };
    let mut first = None;
    for r in data.records() {
        if let Err(e) = r {
            first = Some(e);
        }
    }
    for r in data.ordered() {
        let _ = r;
    }
    first
}

#[test]
fn damaged_files_are_typed_errors_with_offsets_never_panics() {
    if !have_perf() {
        return;
    }
    let dir = scratch("damage");
    let f = record(
        &dir,
        "g",
        &["-g", "-e", "{task-clock,page-faults}:S", "-c", "100000"],
        "perf_mix",
        &["10"],
    );
    let good = std::fs::read(&f).unwrap();
    assert!(read_all(&good).is_none());
    let data = PerfData::parse(&good).unwrap();
    let data_start = data.records().next().unwrap().unwrap().offset as usize;

    // Cut anywhere: inside the header or attrs, an error; inside the data, records up to
    // the cut and then a truncation at or before the cut.
    for cut in (0..good.len()).step_by(37) {
        match read_all(&good[..cut]) {
            None => assert!(cut >= data_start, "a file cut at {cut} read without error"),
            Some(Error::Truncated { end, .. }) => assert_eq!(end, cut as u64, "cut at {cut}"),
            Some(e) => assert!(e.offset().is_some() || cut < 16, "cut at {cut}: {e}"),
        }
    }
    assert!(matches!(PerfData::parse(&good[..50]), Err(Error::Truncated { offset: 0, .. })));

    // A record claiming fewer bytes than its own header.
    let mut bad = good.clone();
    bad[data_start + 6..data_start + 8].copy_from_slice(&4u16.to_le_bytes());
    let e = read_all(&bad).unwrap();
    assert_eq!(e.offset(), Some(data_start as u64), "{e}");
    assert!(e.to_string().contains("fewer than its own header"), "{e}");

    // Every byte of the data flipped in turn (sampled): any result but a panic.
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..3000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut m = good.clone();
        let at = (x as usize) % m.len();
        m[at] ^= (x >> 32) as u8 | 1;
        if x & 3 == 0 {
            // Sometimes a size or count word to something huge.
            let w = at & !7;
            if w + 8 <= m.len() {
                m[w..w + 8].copy_from_slice(&(x | 0xffff_0000_0000).to_le_bytes());
            }
        }
        let _ = read_all(&m);
    }

    // Not perf.data at all.
    assert!(matches!(PerfData::parse(b"STROBE\0\0 something"), Err(Error::NotPerfData { .. })));
    assert!(matches!(PerfData::parse(b"2ELIFREP"), Err(Error::BigEndian)));
    let e = PerfFile::open(&dir.join("missing.data")).unwrap_err();
    assert!(e.to_string().contains("missing.data"), "{e}");
}
