//! The recorder's side of custody: draining the arena into the record file while the
//! target runs, and once more after it ends, however it ends.
//!
//! Each pass reads every published sample (crate strobe-sampler's `custody::Drain`),
//! interns its stack in its stream's stack table, and appends STACKS, THREADS, SAMPLES
//! and LOST chunks; it also re-reads the mappings of live processes now and then (a
//! library loaded with `dlopen` after the agent's last snapshot). A stream whose process
//! is gone ends in the pass that read its last blocks: its END is written and nothing of
//! it is held after, so a program that starts processes without end does not grow the
//! recorder; at the end, the streams still followed end.
//!
//! Owns: the file's sample chunks and the per-stream statistics. Must never free the
//! blocks of a thread that may still write (see `procs`), and never drop a sample it read
//! or a loss the agent counted.

use std::fs::File;
use std::io::Write;
use std::time::{Duration, Instant};

use rustc_hash::{FxHashMap, FxHashSet};
use strobe_format::{Encoder, EndReason, LostCount, ProcessEnd, SampleKind, ThreadInfo};
use strobe_protocol::{Arena, ProcState};
use strobe_sampler::custody::record::FLAG_HAS_STACK;
use strobe_sampler::custody::{Drain, SlotEvent};

use crate::procs::Procs;
use crate::served::Served;
use crate::stacks::StackTable;

/// How often live processes' mappings are re-read.
const MAPS_EVERY: Duration = Duration::from_millis(200);

/// One stream's running totals.
#[derive(Debug, Default)]
struct StreamStats {
    stacks: StackTable,
    samples: u64,
    window_ends: u64,
    lost: u64,
    windows: u64,
    window_sum: u64,
    unsampled_ns: u64,
    /// Threads named in the file already.
    named: FxHashSet<u32>,
    /// A hash of the last mappings written for it.
    maps_hash: u64,
}

/// A sample read in a pass (from an agent's buffer, or a kernel ring in kernel mode),
/// waiting to be encoded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    pub(crate) stream: u32,
    pub(crate) tid: u32,
    pub(crate) kind: SampleKind,
    pub(crate) time: u64,
    pub(crate) ip: u64,
    pub(crate) stack: u32,
    /// Counters in `counters`.
    pub(crate) n: u8,
    pub(crate) counters: [u64; strobe_format::MAX_COUNTERS],
}

/// The most samples in one SAMPLES chunk.
const BLOCK_SAMPLES: usize = 4096;

/// Encodes a pass's samples (each thread's together, in time order) into `enc`, one
/// SAMPLES chunk per run of a thread's samples (at most [`BLOCK_SAMPLES`] each), and
/// counts them into `totals`: the one flush of samples both modes write.
pub(crate) fn encode_samples(
    enc: &mut Encoder,
    ncounters: usize,
    pending: &[Pending],
    totals: &mut Totals,
) {
    let mut i = 0;
    while i < pending.len() {
        let (stream, tid) = (pending[i].stream, pending[i].tid);
        let mut b = enc.samples(stream, tid, ncounters);
        while let Some(p) = pending.get(i).filter(|p| p.stream == stream && p.tid == tid) {
            b.push(p.kind, p.time, p.ip, p.stack, &p.counters[..usize::from(p.n)]);
            i += 1;
            if b.len() >= BLOCK_SAMPLES {
                break;
            }
        }
        drop(b);
    }
    for p in pending {
        match p.kind {
            SampleKind::WindowEnd => totals.window_ends += 1,
            SampleKind::CallTail => totals.tails += 1,
            SampleKind::Overflow => {}
            _ => totals.samples += 1,
        }
    }
}

/// What the drain totals at the end.
#[derive(Debug, Clone, Default)]
pub struct Totals {
    /// Samples (window starts and plain samples).
    pub samples: u64,
    /// Window ends.
    pub window_ends: u64,
    /// Windows that began inside the kernel (their `CallTail` samples).
    pub tails: u64,
    /// Samples lost, all threads.
    pub lost: u64,
    /// Distinct threads that sampled.
    pub threads: usize,
    /// Wakeups of the recorder by the agents.
    pub wakeups: u64,
    /// Passes made.
    pub passes: u64,
    /// Records that did not parse (never expected; reported if seen).
    pub malformed: u64,
}

/// What the agent served of one thread: its CPU time in served stretches that ended,
/// the thread's CPU time where an open stretch began (0: none open), and the agent's own
/// set-up time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ServedCpu {
    /// CPU time (ns) in ended stretches.
    pub closed_ns: u64,
    /// The thread's CPU time when its open stretch began (0: none open): the stretch
    /// runs to the thread's end.
    pub open_from_ns: u64,
    /// CPU time (ns) the agent spent setting the thread up.
    pub setup_ns: u64,
}

impl ServedCpu {
    /// The served CPU time, given the thread's whole CPU time (for an open stretch).
    pub(crate) fn served_ns(&self, total_ns: Option<u64>) -> u64 {
        let open = match (self.open_from_ns, total_ns) {
            (0, _) | (_, None) => 0,
            (from, Some(t)) => t.saturating_sub(from),
        };
        self.closed_ns.saturating_add(open)
    }
}

/// One process's THREADCPU rows, by tid: every thread with a kernel count (`counts`, tid
/// -> ns) or a served time (`served`, tid -> what the agent served), the two joined.
pub(crate) fn thread_cpu_rows(
    counts: FxHashMap<u32, u64>,
    mut served: FxHashMap<u32, ServedCpu>,
) -> Vec<strobe_format::ThreadCpu> {
    let mut rows: Vec<strobe_format::ThreadCpu> = counts
        .into_iter()
        .map(|(tid, ns)| thread_cpu_row(tid, Some(ns), served.remove(&tid).unwrap_or_default()))
        .collect();
    rows.extend(served.into_iter().map(|(tid, s)| thread_cpu_row(tid, None, s)));
    rows.sort_unstable_by_key(|t| t.tid);
    rows
}

/// A thread's THREADCPU row: its whole CPU time as the kernel counted it (`total`, when
/// known) and what the agent served of it (`s`), never more than the whole.
fn thread_cpu_row(tid: u32, total: Option<u64>, s: ServedCpu) -> strobe_format::ThreadCpu {
    strobe_format::ThreadCpu {
        tid,
        cpu_ns: total.unwrap_or(0),
        served_ns: s.served_ns(total).min(total.unwrap_or(u64::MAX)),
        agent_ns: s.setup_ns,
    }
}

fn served_cpu_of(slot: &strobe_sampler::custody::SharedSlot) -> ServedCpu {
    let (_, _, closed, open_from) = slot.stretch();
    ServedCpu {
        closed_ns: closed,
        open_from_ns: open_from,
        setup_ns: slot.setup_ns.load(std::sync::atomic::Ordering::Relaxed),
    }
}

/// The launched command at its end, for its streams' END chunks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Launched {
    /// Its pid.
    pub pid: u32,
    /// How it ended.
    pub exit: strobe_target::Exit,
    /// Its own CPU time (ns), when read before it was reaped.
    pub cpu_ns: Option<u64>,
    /// Its whole tree's CPU time (ns, `wait4` rusage).
    pub tree_cpu_ns: Option<u64>,
}

/// Drains an arena into a record file.
pub(crate) struct Drainer<'a> {
    arena: &'a Arena,
    file: &'a mut File,
    drain: Drain,
    procs: Procs,
    streams: FxHashMap<u32, StreamStats>,
    ncounters: usize,
    enc: Encoder,
    pending: Vec<Pending>,
    lost: Vec<(u32, u32, u64)>,
    threads: Vec<(u32, ThreadInfo)>,
    tids: FxHashSet<(u32, u32)>,
    maps_at: Instant,
    wake_seen: u32,
    totals: Totals,
    write_error: Option<std::io::Error>,
    /// When the agent served which thread (for the kernel floor's samples).
    served: Served,
    /// What the agent served of each thread (pid -> tid -> served), from slots that were
    /// freed or live at the end, until the session takes a process's
    /// ([`Drainer::take_served_of`]).
    served_cpu: FxHashMap<u32, FxHashMap<u32, ServedCpu>>,
    /// (stream, tid) pairs seen, ended streams' included.
    threads_seen: usize,
    /// The launched command's pid, and the command at its end (set by
    /// [`Drainer::finish`]).
    launched_pid: Option<u32>,
    launched: Option<Launched>,
}

fn kind_of(byte: u8) -> SampleKind {
    match strobe_sampler::Kind::from_word(u64::from(byte)) {
        strobe_sampler::Kind::Plain => SampleKind::Plain,
        strobe_sampler::Kind::WindowStart => SampleKind::WindowStart,
        strobe_sampler::Kind::WindowEnd => SampleKind::WindowEnd,
        strobe_sampler::Kind::CallTail => SampleKind::CallTail,
        strobe_sampler::Kind::Overflow => SampleKind::Overflow,
    }
}

fn comm_name(c: [u8; 16]) -> String {
    let end = c.iter().position(|&b| b == 0).unwrap_or(c.len());
    String::from_utf8_lossy(&c[..end]).into_owned()
}

impl<'a> Drainer<'a> {
    /// A drainer of `arena` into `file` (positioned at its end), for a group of
    /// `ncounters` events.
    pub(crate) fn new(arena: &'a Arena, file: &'a mut File, ncounters: usize) -> Drainer<'a> {
        let wake_seen = arena.header().pool.wake_word().load(std::sync::atomic::Ordering::Acquire);
        Drainer {
            arena,
            file,
            drain: Drain::new(arena.pool().len(), arena.slots().len()),
            procs: Procs::default(),
            streams: FxHashMap::default(),
            ncounters,
            enc: Encoder::with_capacity(1 << 20),
            pending: Vec::new(),
            lost: Vec::new(),
            threads: Vec::new(),
            tids: FxHashSet::default(),
            maps_at: Instant::now(),
            wake_seen,
            totals: Totals::default(),
            write_error: None,
            served: Served::default(),
            served_cpu: FxHashMap::default(),
            threads_seen: 0,
            launched_pid: None,
            launched: None,
        }
    }

    /// `pid` is the launched command: its END waits for how it ends.
    pub(crate) fn set_launched(&mut self, pid: u32) {
        self.launched_pid = Some(pid);
    }

    /// The processes seen.
    pub(crate) fn procs(&self) -> &Procs {
        &self.procs
    }

    /// When the agent served which thread, as of the last pass.
    pub(crate) fn served(&self) -> &Served {
        &self.served
    }

    /// What the agent served of each thread (pid -> tid -> served) whose slot was freed
    /// (and, after [`Drainer::finish`], of every thread), less the processes taken.
    pub(crate) fn served_cpu(&self) -> &FxHashMap<u32, FxHashMap<u32, ServedCpu>> {
        &self.served_cpu
    }

    /// The processes some instance of which is followed still. The agent's data of any
    /// other process is all in the file: each instance of it ended (its slots were
    /// drained and freed, its END written).
    pub(crate) fn held_pids(&self) -> FxHashSet<u32> {
        self.procs.all().map(|p| p.pid).collect()
    }

    /// Takes what the agent served of process `pid`'s threads (once it is final: see
    /// [`Drainer::held_pids`]), and forgets their served stretches that ended before `before`
    /// (the floor applied every record up to then: none of them can ask any more).
    pub(crate) fn take_served_of(&mut self, pid: u32, before: u64) -> FxHashMap<u32, ServedCpu> {
        let taken = self.served_cpu.remove(&pid).unwrap_or_default();
        for &tid in taken.keys() {
            self.served.forget_ended(tid, before);
        }
        taken
    }

    fn add_served_cpu(&mut self, pid: u32, tid: u32, c: ServedCpu) {
        let e = self.served_cpu.entry(pid).or_default().entry(tid).or_default();
        e.closed_ns = e.closed_ns.saturating_add(c.closed_ns);
        // One thread may have had two slots (its image before and after an exec): the one
        // still serving at the end has the open stretch.
        if c.open_from_ns != 0 {
            e.open_from_ns = c.open_from_ns;
        }
        e.setup_ns = e.setup_ns.saturating_add(c.setup_ns);
    }

    /// Reads every claimed slot's served stretch (before a pass frees any).
    fn scan_served(&mut self) {
        use strobe_sampler::slot::{ACTIVE, CLAIMED, CLOSING, DEAD};
        let slots = self.arena.slots();
        for (i, s) in slots.iter().enumerate().take(self.arena.high_water()) {
            if matches!(s.ctl.state(), CLAIMED | ACTIVE | CLOSING | DEAD) {
                let (from, to, _, _) = s.stretch();
                let tid = s.tid.load(std::sync::atomic::Ordering::Relaxed);
                self.served.slot(i, tid, from, to);
            }
        }
    }

    /// The recorder reaped `pid` (the launched command).
    pub(crate) fn reaped(&mut self, pid: u32) {
        self.procs.reaped(pid);
    }

    /// Sleeps until an agent wakes the recorder or `timeout` passes.
    pub(crate) fn wait(&mut self, timeout: Duration) {
        self.arena.wait_for_wake(self.wake_seen, timeout);
        let now = self.arena.header().pool.wake_word().load(std::sync::atomic::Ordering::Acquire);
        if now != self.wake_seen {
            self.totals.wakeups += u64::from(now.wrapping_sub(self.wake_seen));
            self.wake_seen = now;
        }
    }

    /// One pass: drains what was published, frees what is done, writes the chunks.
    pub(crate) fn pass(&mut self) -> std::io::Result<()> {
        self.procs.refresh(self.arena);
        self.scan_served();
        let now = mono_ns();
        // Freed slots, read in the callback (once freed, an agent may claim one again).
        let mut freed: Vec<(usize, u32, u32, u64, u64, ServedCpu)> = Vec::new();
        let gone = self.procs.gone_streams();
        let pool = self.arena.pool();
        let slots = self.arena.slots();
        let high = self.arena.high_water();
        let (pending, lost, threads, streams, tids, threads_seen) = (
            &mut self.pending,
            &mut self.lost,
            &mut self.threads,
            &mut self.streams,
            &mut self.tids,
            &mut self.threads_seen,
        );
        let ncounters = self.ncounters;
        // SAFETY: this drainer is the arena's only recorder, and `gone` holds only streams
        // whose processes are dead or replaced their image (see `procs`).
        let stats = unsafe {
            self.drain.pass(
                &pool,
                slots,
                high,
                |s| gone.contains(&s.stream.load(std::sync::atomic::Ordering::Relaxed)),
                |index, slot, ev| {
                    let stream = slot.stream.load(std::sync::atomic::Ordering::Relaxed);
                    let tid = slot.tid.load(std::sync::atomic::Ordering::Relaxed);
                    let st = streams.entry(stream).or_default();
                    let first = tids.insert((stream, tid));
                    *threads_seen += usize::from(first);
                    if first || (matches!(ev, SlotEvent::Freed) && st.named.contains(&tid)) {
                        st.named.insert(tid);
                        threads.push((stream, ThreadInfo { tid, name: comm_name(slot.comm()) }));
                    }
                    match ev {
                        SlotEvent::Record(r) => {
                            let kind = kind_of(r.kind);
                            let stack = if r.flags & FLAG_HAS_STACK != 0 {
                                st.stacks.intern(r.frames)
                            } else {
                                0
                            };
                            match kind {
                                SampleKind::WindowEnd
                                | SampleKind::CallTail
                                | SampleKind::Overflow => st.window_ends += 1,
                                _ => st.samples += 1,
                            }
                            let mut counters = [0u64; strobe_format::MAX_COUNTERS];
                            let n = r.counters.len().min(ncounters).min(counters.len());
                            counters[..n].copy_from_slice(&r.counters[..n]);
                            pending.push(Pending {
                                stream,
                                tid,
                                kind,
                                time: r.time,
                                ip: r.ip,
                                stack,
                                n: n as u8,
                                counters,
                            });
                        }
                        SlotEvent::Lost(n) => {
                            st.lost += n;
                            lost.push((stream, tid, n));
                        }
                        SlotEvent::Freed => {
                            let (from, to, _, _) = slot.stretch();
                            let pid = slot.pid.load(std::sync::atomic::Ordering::Relaxed);
                            freed.push((index as usize, pid, tid, from, to, served_cpu_of(slot)));
                            let (w, sum) = slot.alt.windows();
                            st.windows += w;
                            st.window_sum = st.window_sum.wrapping_add(sum);
                            st.unsampled_ns +=
                                slot.cpu_before_ns.load(std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                },
            )
        };
        for (index, pid, tid, from, to, cpu) in freed {
            self.served.freed(index, tid, from, to, now);
            self.add_served_cpu(pid, tid, cpu);
        }
        // The gone processes' data was read in this pass: their table entries can serve
        // later agents.
        self.procs.free_gone(self.arena, &gone);
        self.totals.passes += 1;
        self.totals.malformed += stats.malformed;
        if self.maps_at.elapsed() >= MAPS_EVERY {
            self.maps_at = Instant::now();
            self.poll_maps();
        }
        self.encode();
        // ... so they end now, after their last chunks: nothing of them is held after.
        for (p, replaced) in self.procs.take_freed(self.launched_pid) {
            self.end_stream(&p, replaced, now);
        }
        self.flush()
    }

    /// Writes the END of process instance `p` (`replaced`: a later image of its process
    /// registered) and forgets its stream's state.
    fn end_stream(&mut self, p: &crate::procs::Proc, replaced: bool, now: u64) {
        let st = self.streams.remove(&p.stream).unwrap_or_default();
        for tid in &st.named {
            self.tids.remove(&(p.stream, *tid));
        }
        let this = self.launched.filter(|l| l.pid == p.pid && !replaced);
        let (cpu_ns, tree_cpu_ns) = (this.and_then(|l| l.cpu_ns), this.and_then(|l| l.tree_cpu_ns));
        let (reason, status) = match (p.state, this) {
            (_, Some(Launched { exit, .. })) => match exit {
                strobe_target::Exit::Code(c) => (EndReason::Exit, Some(c as u64)),
                strobe_target::Exit::Signal { signal, .. } => {
                    (EndReason::Killed, Some(signal as u64))
                }
            },
            (ProcState::Exited, _) => (EndReason::Exit, None),
            (ProcState::Execed, _) => (EndReason::Exec, None),
            _ if p.dead => (EndReason::Vanished, None),
            _ => (EndReason::Stopped, None),
        };
        self.enc.end_process(
            p.stream,
            &ProcessEnd {
                reason,
                time_mono_ns: now,
                samples: st.samples + st.window_ends,
                lost: st.lost,
                wakeups: self.totals.wakeups,
                windows: st.windows,
                window_sum: st.window_sum,
                status,
                unsampled_ns: st.unsampled_ns,
                cpu_ns,
                tree_cpu_ns,
            },
        );
    }

    /// Re-reads the mappings of processes that still run; writes those that changed.
    fn poll_maps(&mut self) {
        let running: Vec<(u32, u32)> = self.procs.running().map(|p| (p.pid, p.stream)).collect();
        for (pid, stream) in running {
            let Ok(text) = strobe_target::maps::read(Some(pid)) else { continue };
            let mut maps: Vec<strobe_format::Mapping> = strobe_target::maps::parse(&text)
                .filter(|m| m.perms.exec)
                .map(|m| strobe_format::Mapping {
                    start: m.start,
                    end: m.end,
                    file_offset: m.offset,
                    path: m.path.into(),
                })
                .collect();
            if maps.is_empty() {
                continue; // exiting, or not readable
            }
            maps.sort_by_key(|m| m.start);
            let h = maps.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, m| {
                let b = m.path.as_os_str().as_encoded_bytes();
                b.iter()
                    .chain(&m.start.to_le_bytes())
                    .fold(h, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3))
            });
            let st = self.streams.entry(stream).or_default();
            if st.maps_hash != h {
                // The first poll of a stream finds what the agent wrote at start; writing
                // it again is harmless and keeps this simple.
                st.maps_hash = h;
                let snap = strobe_format::MapsSnapshot { time_mono_ns: mono_ns(), maps };
                self.enc.maps(stream, &snap);
            }
        }
    }

    /// Encodes the pass's stacks, threads, samples and losses.
    fn encode(&mut self) {
        for (&stream, st) in self.streams.iter_mut() {
            if let Some((first, nodes)) = st.stacks.take_new() {
                self.enc.stacks(stream, first, &nodes);
            }
        }
        let mut by_stream: FxHashMap<u32, Vec<ThreadInfo>> = FxHashMap::default();
        for (stream, t) in self.threads.drain(..) {
            by_stream.entry(stream).or_default().push(t);
        }
        for (stream, ts) in by_stream {
            self.enc.threads(stream, &ts);
        }
        encode_samples(&mut self.enc, self.ncounters, &self.pending, &mut self.totals);
        self.pending.clear();
        let mut by_stream: FxHashMap<u32, Vec<LostCount>> = FxHashMap::default();
        for (stream, tid, n) in self.lost.drain(..) {
            by_stream.entry(stream).or_default().push(LostCount { tid, lost: n });
            self.totals.lost += n;
        }
        for (stream, l) in by_stream {
            self.enc.lost(stream, &l);
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.enc.is_empty() {
            return Ok(());
        }
        let r = self.file.write_all(self.enc.as_bytes());
        self.enc.clear();
        if let Err(e) = &r {
            self.write_error.get_or_insert(std::io::Error::new(e.kind(), e.to_string()));
        }
        r
    }

    /// The last pass, once every process ended (or the recording stops): reads every
    /// thread's blocks to their end, then writes each stream's END. `launched` is the
    /// launched command's pid and how it ended.
    pub(crate) fn finish(&mut self, launched: Option<Launched>) -> std::io::Result<Totals> {
        if let Some(l) = launched {
            self.procs.reaped(l.pid);
        }
        self.launched = launched;
        self.launched_pid = None;
        self.pass()?;
        // Threads of processes that still run (a daemon that outlived the command) keep
        // their slots; their samples so far were read above. Windows of live slots:
        let slots = self.arena.slots();
        let mut live = Vec::new();
        for s in slots.iter().take(self.arena.high_water()) {
            let state = s.ctl.state();
            if matches!(state, strobe_sampler::slot::ACTIVE | strobe_sampler::slot::CLOSING) {
                let stream = s.stream.load(std::sync::atomic::Ordering::Relaxed);
                let st = self.streams.entry(stream).or_default();
                let (w, sum) = s.alt.windows();
                st.windows += w;
                st.window_sum = st.window_sum.wrapping_add(sum);
                st.unsampled_ns += s.cpu_before_ns.load(std::sync::atomic::Ordering::Relaxed);
                let pid = s.pid.load(std::sync::atomic::Ordering::Relaxed);
                let tid = s.tid.load(std::sync::atomic::Ordering::Relaxed);
                live.push((pid, tid, served_cpu_of(s)));
            }
        }
        for (pid, tid, c) in live {
            self.add_served_cpu(pid, tid, c);
        }
        let now = mono_ns();
        let procs: Vec<_> = self.procs.all().map(|p| (p.clone(), self.procs.replaced(p))).collect();
        for (p, replaced) in &procs {
            self.end_stream(p, *replaced, now);
        }
        self.flush()?;
        self.totals.threads = self.threads_seen;
        Ok(self.totals.clone())
    }
}

/// `CLOCK_MONOTONIC` in ns.
pub(crate) fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each thread's samples go out in order, in chunks of at most `BLOCK_SAMPLES`, and
    /// every kind is counted where the totals say.
    #[test]
    fn samples_go_out_per_thread_in_bounded_chunks() {
        let kinds = [
            SampleKind::Plain,
            SampleKind::WindowStart,
            SampleKind::WindowEnd,
            SampleKind::CallTail,
            SampleKind::Overflow,
        ];
        let sample = |tid: u32, k: usize| {
            let mut counters = [0; strobe_format::MAX_COUNTERS];
            counters[..2].copy_from_slice(&[k as u64, 2 * k as u64]);
            Pending {
                stream: 0,
                tid,
                kind: kinds[k % kinds.len()],
                time: 1_000 + k as u64,
                ip: 0x1000 + k as u64,
                stack: 0,
                n: 2,
                counters,
            }
        };
        let n = BLOCK_SAMPLES + 10;
        let pending: Vec<Pending> =
            (0..n).map(|k| sample(7, k)).chain((0..3).map(|k| sample(8, k))).collect();
        let mut enc = Encoder::new();
        enc.preamble();
        enc.header(&strobe_format::Header::task_clock());
        let mut totals = Totals::default();
        encode_samples(&mut enc, 2, &pending, &mut totals);
        let reader = strobe_format::Reader::new(enc.as_bytes(), "test").unwrap();
        let mut batches = Vec::new();
        for r in reader {
            if let strobe_format::Record::Samples(b) = r.unwrap() {
                let got: Vec<(u64, u64, u64)> =
                    b.iter().map(|s| s.unwrap()).map(|s| (s.time, s.ip, s.counters[1])).collect();
                batches.push((b.tid, got));
            }
        }
        let sizes: Vec<(u32, usize)> = batches.iter().map(|(t, s)| (*t, s.len())).collect();
        assert_eq!(sizes, [(7, BLOCK_SAMPLES), (7, 10), (8, 3)]);
        let all: Vec<(u64, u64, u64)> = batches.into_iter().flat_map(|(_, s)| s).collect();
        let want: Vec<(u64, u64, u64)> =
            pending.iter().map(|p| (p.time, p.ip, p.counters[1])).collect();
        assert_eq!(all, want);
        let per_kind = |k: SampleKind| pending.iter().filter(|p| p.kind == k).count() as u64;
        assert_eq!(totals.window_ends, per_kind(SampleKind::WindowEnd));
        assert_eq!(totals.tails, per_kind(SampleKind::CallTail));
        assert_eq!(totals.samples, per_kind(SampleKind::Plain) + per_kind(SampleKind::WindowStart));
    }
}
