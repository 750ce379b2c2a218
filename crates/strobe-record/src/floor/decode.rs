//! Records from the kernel's ring buffers, decoded into owned events that outlive the
//! read (the writer applies them only once they are in time order, which may be a pass
//! later).
//!
//! Every sample begins with its event's id (`PERF_SAMPLE_IDENTIFIER`), which says which
//! attr decodes it (the sampling leader or the switch-out sampler); every other record
//! ends with the same sample-id trailer for both, so the leader's attr splits it. Fields
//! are decoded by crate strobe-perfdata, the same decoder `strobe report` reads
//! perf.data files with.
//!
//! Owns: that decoding and the shape of the events. Must never drop a record it cannot
//! decode without counting it ([`Decoder::malformed`]), and never trust a count the ring
//! gives (the decoder checks every length).

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use strobe_format::MAX_COUNTERS;
use strobe_perf::percpu::{CpuRings, Role};
use strobe_perf::ring::Record;
use strobe_perfdata::{decode_ring_record, Attr, Context, CpuMode, Event, SampleId};

/// One sample of the leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SampleEv {
    pub pid: u32,
    pub tid: u32,
    pub ip: u64,
    /// Taken in the kernel (its IP is a kernel address).
    pub kernel: bool,
    /// The CPU it was taken on (whose copy of the thread's events counted it).
    pub cpu: u32,
    /// The period that ended in this sample.
    pub period: u64,
    /// The group's values for the sampled thread (leader first), when read.
    pub n: u8,
    pub values: [u64; MAX_COUNTERS],
    /// Return addresses, innermost first (kernel frames, then user frames).
    pub callers: Vec<u64>,
    /// Where the user frames (the kernel's frame-pointer chain) begin in `callers`.
    pub user_at: Option<usize>,
    /// With `--call-graph dwarf`: the user registers and stack copy the writer walks
    /// for the user frames (`callers` then holds the kernel's only).
    pub user: Option<super::unwind::UserStack>,
}

/// What a record says, in the writer's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ev {
    /// A sample of the leader.
    Sample(SampleEv),
    /// The switch-out sampler: `tid` leaves the CPU at user address `leaf`.
    SwitchOut { pid: u32, tid: u32, leaf: u64, callers: Vec<u64> },
    /// A context switch record (in or out; `preempt`: switched out while runnable).
    Switch { pid: u32, tid: u32, out: bool, preempt: bool },
    /// An executable mapping.
    Mmap { pid: u32, start: u64, len: u64, pgoff: u64, path: PathBuf },
    /// A thread's new name (`exec`: the process replaced its image).
    Comm { pid: u32, tid: u32, name: String, exec: bool },
    /// A thread or process was created.
    Fork { pid: u32, ppid: u32, tid: u32, ptid: u32 },
    /// A thread (or, when `pid == tid`, a process) ended.
    Exit { pid: u32, tid: u32 },
    /// The kernel dropped `lost` records (a full ring) while `tid` ran.
    Lost { pid: Option<u32>, tid: Option<u32>, lost: u64 },
    /// A thread's copy of one CPU's exit counter ended with the thread: its final count
    /// (`inherit_stat`), `task-clock` ns. Summed over CPUs, the thread's exact CPU time.
    TaskCount { pid: u32, tid: u32, ns: u64 },
}

/// An event and when it happened (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Timed {
    pub time: u64,
    pub ev: Ev,
}

/// Decodes the records of one set of rings.
#[derive(Debug)]
pub(crate) struct Decoder {
    leader: Attr,
    off_cpu: Option<Attr>,
    roles: Vec<(u64, Role)>,
    max_depth: usize,
    /// Records that did not decode (never expected).
    pub malformed: u64,
    /// Samples of an id no event of ours has (never expected).
    pub unknown_id: u64,
}

fn attr_of(a: &strobe_perf::sys::perf_event_attr) -> Attr {
    Attr::parse(&strobe_perf::sys::attr_bytes(a))
}

impl Decoder {
    /// A decoder for `rings`' records, keeping at most `max_depth` frames a sample.
    pub(crate) fn new(rings: &CpuRings, ids: Vec<(u64, Role)>, max_depth: usize) -> Decoder {
        Decoder {
            leader: rings.attr_of(Role::Leader).map(attr_of).unwrap_or_default(),
            off_cpu: rings.attr_of(Role::OffCpu).map(attr_of),
            roles: ids,
            max_depth,
            malformed: 0,
            unknown_id: 0,
        }
    }

    fn role(&self, id: u64) -> Option<Role> {
        self.roles.iter().find(|(i, _)| *i == id).map(|(_, r)| *r)
    }

    /// Decodes one ring record; `None` for records the writer does not need (throttling,
    /// and anything undecodable, which is counted).
    pub(crate) fn decode(&mut self, rec: Record<'_>) -> Option<Timed> {
        let (kind, misc, body) = match rec {
            Record::Sample { misc, body } => (strobe_perf::sys::PERF_RECORD_SAMPLE, misc, body),
            Record::Lost { kind, body, .. } => (kind, 0, body),
            Record::Other { kind, misc, body } => (kind, misc, body),
        };
        let mut is_off_cpu = false;
        let attr = if kind == strobe_perf::sys::PERF_RECORD_SAMPLE {
            let id = body.get(..8).map(|b| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])));
            match id.and_then(|id| self.role(id)) {
                Some(Role::Leader) => &self.leader,
                Some(Role::OffCpu) => {
                    is_off_cpu = true;
                    self.off_cpu.as_ref()?
                }
                // The exit counter never samples.
                Some(Role::Exits) | None => {
                    self.unknown_id += 1;
                    return None;
                }
            }
        } else {
            &self.leader
        };
        let Some((event, id)) = decode_ring_record(kind, misc, body, attr) else {
            self.malformed += 1;
            return None;
        };
        let time = id.time.unwrap_or(0);
        let ev = match event {
            Event::Sample(s) => {
                let (pid, tid) = (s.pid().unwrap_or(0), s.tid().unwrap_or(0));
                let ip = s.ip().unwrap_or(0);
                let mut chain: Vec<u64> = Vec::new();
                let mut user_at = None;
                for (ctx, a) in s.callchain().iter().flat_map(|c| c.frames()) {
                    match ctx {
                        Context::Kernel => chain.push(a),
                        Context::User => {
                            user_at.get_or_insert(chain.len());
                            chain.push(a);
                        }
                        _ => {}
                    }
                }
                if is_off_cpu {
                    // The user part of the chain only: its first frame is where the
                    // thread left user space.
                    if chain.is_empty() {
                        return None; // a kernel thread
                    }
                    let leaf = chain.remove(0);
                    chain.truncate(self.max_depth);
                    Ev::SwitchOut { pid, tid, leaf, callers: chain }
                } else {
                    // The chain starts at the sampled address itself.
                    if chain.first() == Some(&ip) {
                        chain.remove(0);
                        user_at = user_at.map(|u| u.saturating_sub(1));
                    }
                    chain.truncate(self.max_depth);
                    let user_at = user_at.filter(|&u| u < chain.len());
                    let mut values = [0u64; MAX_COUNTERS];
                    let mut n = 0u8;
                    if let Some(read) = s.read() {
                        for (slot, v) in values.iter_mut().zip(read.iter()) {
                            *slot = v.value;
                            n += 1;
                        }
                    }
                    Ev::Sample(SampleEv {
                        pid,
                        tid,
                        ip,
                        kernel: matches!(CpuMode::of_misc(misc), CpuMode::Kernel),
                        cpu: s.cpu().unwrap_or(0),
                        period: s.period().unwrap_or(0),
                        n,
                        values,
                        callers: chain,
                        user_at,
                        user: s
                            .regs_user()
                            .zip(s.stack_user())
                            .and_then(|(r, st)| super::unwind::UserStack::of(r, st)),
                    })
                }
            }
            Event::Mmap(m) => {
                if !m.is_exec() {
                    return None;
                }
                Ev::Mmap {
                    pid: m.pid,
                    start: m.addr,
                    len: m.len,
                    pgoff: m.pgoff,
                    path: PathBuf::from(std::ffi::OsStr::from_bytes(m.filename)),
                }
            }
            Event::Comm(c) => Ev::Comm {
                pid: c.pid,
                tid: c.tid,
                name: String::from_utf8_lossy(c.comm).into_owned(),
                exec: c.exec,
            },
            Event::Fork(t) => Ev::Fork { pid: t.pid, ppid: t.ppid, tid: t.tid, ptid: t.ptid },
            Event::Exit(t) => Ev::Exit { pid: t.pid, tid: t.tid },
            Event::Switch(sw) => {
                let SampleId { pid, tid, .. } = id;
                Ev::Switch {
                    pid: pid.unwrap_or(0),
                    tid: tid.unwrap_or(0),
                    out: sw.out,
                    preempt: sw.preempt,
                }
            }
            Event::Lost { lost, .. } | Event::LostSamples { lost } => {
                Ev::Lost { pid: id.pid, tid: id.tid, lost }
            }
            // Only the exit counter's (inherit_stat is on it alone).
            Event::Other(fields)
                if kind == strobe_perf::sys::PERF_RECORD_READ
                    && id.id.is_some_and(|i| self.role(i) == Some(Role::Exits)) =>
            {
                match task_count(fields) {
                    Some(ev) => ev,
                    None => {
                        self.malformed += 1;
                        return None;
                    }
                }
            }
            _ => return None,
        };
        Some(Timed { time, ev })
    }
}

/// A READ record's fields: `pid, tid`, then the exit counter's value (its `read_format`
/// is the plain value, with its lost count after it when asked for).
fn task_count(fields: &[u8]) -> Option<Ev> {
    let word = |i: usize| -> Option<u64> {
        Some(u64::from_ne_bytes(fields.get(i * 8..i * 8 + 8)?.try_into().ok()?))
    };
    let first = word(0)?;
    Some(Ev::TaskCount { pid: first as u32, tid: (first >> 32) as u32, ns: word(1)? })
}

#[cfg(test)]
mod tests {
    use super::*;
    use strobe_perf::percpu::{RingSampling, Scope};
    use strobe_perf::ring::Wakeup;

    /// This thread sampled into rings, with a mapping made meanwhile: the samples name
    /// this thread and carry the group's values and a call chain; the mapping comes as
    /// an executable MMAP of this process.
    #[test]
    fn a_threads_samples_and_mappings_decode() {
        let g = strobe_perf::spec::parse("{task-clock,page-faults}", false).unwrap();
        let s = RingSampling {
            period: 100_000,
            window: 0,
            callchain: true,
            user_stack: 0,
            max_stack: 32,
            kernel_allowed: false,
            wakeup: Wakeup::Bytes(4096),
            off_cpu: false,
        };
        let me = strobe_perf::sys::gettid();
        // 64 pages: room for the 300 samples of 30 ms and the mapping record.
        let mut rings = CpuRings::open(&g, &s, Scope::Threads(vec![me]), 64).unwrap();
        let ids = rings.roles();
        rings.enable().unwrap();
        let end = std::time::Instant::now() + std::time::Duration::from_millis(30);
        let mut v = 0u64;
        while std::time::Instant::now() < end {
            v = std::hint::black_box(v.wrapping_mul(31).wrapping_add(7));
        }
        // An executable mapping of this process, made while sampling.
        let exe = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
        // SAFETY: a private read-only executable mapping of our own binary, unmapped below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&exe),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        rings.disable();
        let mut d = Decoder::new(&rings, ids, 16);
        let mut out = Vec::new();
        for r in rings.rings_mut() {
            r.read(|rec| out.extend(d.decode(rec)));
        }
        // SAFETY: unmapping the mapping made above.
        unsafe { libc::munmap(p, 4096) };
        let pid = std::process::id();
        let samples: Vec<&SampleEv> = out
            .iter()
            .filter_map(|t| match &t.ev {
                Ev::Sample(s) => Some(s),
                _ => None,
            })
            .collect();
        assert!(samples.len() >= 20, "{} samples", samples.len());
        assert!(samples.iter().all(|s| s.pid == pid && s.tid == me as u32 && s.n == 2));
        assert!(samples.iter().all(|s| s.period == 100_000 && !s.kernel));
        assert!(samples.iter().any(|s| !s.callers.is_empty()));
        assert!(samples.iter().all(|s| s.callers.len() <= 16));
        // The thread's events are one copy per CPU, each counting the time the thread ran
        // there: per CPU (in its ring's order), the group's values only grow. (Across
        // CPUs they do not: a thread that migrated reads another copy's values.)
        for cpu in rings.cpus().to_vec() {
            let on: Vec<u64> = samples
                .iter()
                .filter(|s| i64::from(s.cpu) == i64::from(cpu))
                .map(|s| s.values[0])
                .collect();
            assert!(on.windows(2).all(|w| w[1] >= w[0]), "cpu {cpu}: {on:?}");
        }
        let exe_path = std::env::current_exe().unwrap();
        assert!(
            out.iter().any(|t| matches!(&t.ev, Ev::Mmap { pid: p, path, .. }
                if *p == pid && *path == exe_path)),
            "the new executable mapping is seen"
        );
        assert_eq!((d.malformed, d.unknown_id), (0, 0));
    }
}
