//! Cutting a growing recording into intervals: what the file said so far about each
//! process (its stream), and the samples read and not yet given to an interval.
//!
//! A sample goes to exactly one interval, the first one cut after it was read whose end
//! lies after it; nothing is dropped or given twice:
//!
//! - each thread's samples (per stream) wait in a queue in file order; a cut at boundary
//!   `T` takes from the front of each queue every sample before the thread's first time
//!   sample (a plain sample or a window start) at or after `T`;
//! - a window is never split: the samples that open it (a call tail or an overflow
//!   before its start) go with its start, and its end (and the overflow before the end)
//!   with its start's interval. A window still open at the cut (its end not read yet) is
//!   kept for the next interval with its start, unless it has waited a whole interval
//!   already (a thread that ended or sleeps inside a window): then it goes as it is;
//! - a sample that arrives after its interval was cut (the recorder wrote it late) goes
//!   to the next interval cut, and is counted as late.
//!
//! What a process's profile needs besides its samples (its PROCESS chunk, mappings,
//! thread names, stack table) is kept per stream for as long as the process lives: a
//! stream whose process is gone and that brought nothing for two intervals is forgotten,
//! so the memory held follows the processes alive, not all that ever ran.
//!
//! Owns: the per-stream state and the cut rule. Must never interpret a sample beyond its
//! kind and time (the report does), or read anything but the records it is given.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use strobe_format::{
    Baseline, Encoder, Header, Image, KernelSymbol, LostCount, Mapping, MapsSnapshot, Note,
    OffCpuInterval, ProcessInfo, Record, Sample, SampleKind, StackNode, StreamId, RECORDER_STREAM,
};

/// Stack nodes per STACKS chunk when a table is written again (well under the largest
/// payload: a node takes at most 15 bytes).
const STACK_CHUNK: usize = 512 << 10;
/// Samples per SAMPLES chunk written.
const SAMPLE_CHUNK: usize = 4096;
/// Thread names a stream keeps before forgetting those of threads that have not sampled
/// for the longest.
const MAX_NAMES: usize = 4096;

/// One thread's samples waiting for a cut.
#[derive(Debug, Default)]
struct Queue {
    samples: VecDeque<Sample>,
    ncounters: usize,
}

/// What the recording said about one process image (one stream).
#[derive(Debug)]
struct Stream {
    info: Option<ProcessInfo>,
    /// Executable mappings, later ones replacing those they overlap.
    maps: Vec<Mapping>,
    /// tid -> (name, the interval it last sampled in).
    names: FxHashMap<u32, (String, u64)>,
    /// Node `id` is `stacks[id - 1]`.
    stacks: Vec<StackNode>,
    queues: FxHashMap<u32, Queue>,
    /// This interval's other records: losses, off-CPU intervals, notes.
    lost: Vec<LostCount>,
    off_cpu: Vec<(u32, Vec<OffCpuInterval>)>,
    notes: Vec<Note>,
    /// The last interval it brought anything in.
    active_in: u64,
    /// Its END was read: nothing more of it comes.
    ended: bool,
}

impl Stream {
    fn new(interval: u64) -> Stream {
        Stream {
            info: None,
            maps: Vec::new(),
            names: FxHashMap::default(),
            stacks: Vec::new(),
            queues: FxHashMap::default(),
            lost: Vec::new(),
            off_cpu: Vec::new(),
            notes: Vec::new(),
            active_in: interval,
            ended: false,
        }
    }

    fn add_maps(&mut self, snap: MapsSnapshot) {
        for m in snap.maps {
            self.maps.retain(|old| old.end <= m.start || old.start >= m.end);
            self.maps.push(m);
        }
        self.maps.sort_by_key(|m| m.start);
    }

    fn add_stacks(&mut self, first_id: u32, nodes: Vec<StackNode>) {
        let first = first_id.max(1) as usize;
        // A gap (a lost chunk) reads as roots, as the report reads it.
        if self.stacks.len() + 1 < first {
            self.stacks.resize(first - 1, StackNode { parent: 0, addr: 0 });
        }
        self.stacks.truncate(first - 1);
        self.stacks.extend(nodes);
    }

    /// Writes what a reader needs before this stream's samples: its process, mappings,
    /// thread names and stack table.
    fn write_state(&self, id: StreamId, e: &mut Encoder) {
        if let Some(info) = &self.info {
            e.process(id, info);
        }
        if !self.maps.is_empty() {
            e.maps(id, &MapsSnapshot { time_mono_ns: 0, maps: self.maps.clone() });
        }
        if !self.names.is_empty() {
            let mut threads: Vec<strobe_format::ThreadInfo> = self
                .names
                .iter()
                .map(|(&tid, (name, _))| strobe_format::ThreadInfo { tid, name: name.clone() })
                .collect();
            threads.sort_by_key(|t| t.tid);
            e.threads(id, &threads);
        }
        for (i, nodes) in self.stacks.chunks(STACK_CHUNK).enumerate() {
            e.stacks(id, (i * STACK_CHUNK + 1) as u32, nodes);
        }
    }

    fn forget_old_names(&mut self) {
        if self.names.len() <= MAX_NAMES {
            return;
        }
        let mut last: Vec<u64> = self.names.values().map(|(_, at)| *at).collect();
        last.sort_unstable();
        let keep_from = last[last.len() - MAX_NAMES / 2];
        self.names.retain(|_, (_, at)| *at >= keep_from);
    }
}

/// Where each thread's queue is cut at boundary `t`: the samples before the index go.
/// `old`: a window opened before this time that is still open goes anyway, and so do
/// boundary samples read before it whose window never started.
fn split(q: &VecDeque<Sample>, t: u64, old: u64) -> usize {
    let boundary = |s: &Sample| matches!(s.kind, SampleKind::CallTail | SampleKind::Overflow);
    // The call tail or overflow samples just before a start belong to its window.
    let back_over = |mut i: usize| {
        while i > 0 && boundary(&q[i - 1]) {
            i -= 1;
        }
        i
    };
    if let Some(i) = q.iter().position(|s| s.kind.is_time_sample() && s.time >= t) {
        return back_over(i);
    }
    let last_start = q.iter().rposition(|s| s.kind == SampleKind::WindowStart);
    let last_end = q.iter().rposition(|s| s.kind == SampleKind::WindowEnd);
    match last_start.filter(|&s| last_end.is_none_or(|e| e < s)) {
        // A window whose end has not been read yet waits for it, with its start.
        Some(i) if q[i].time >= old => back_over(i),
        Some(_) => q.len(),
        None => {
            // Boundary samples after the last window wait for the start they precede.
            let mut c = q.len();
            while c > 0 && boundary(&q[c - 1]) && q[c - 1].time >= old {
                c -= 1;
            }
            c
        }
    }
}

/// One stream's part of a cut interval: a small recording of its own.
#[derive(Debug)]
pub(crate) struct Part {
    /// Its process.
    pub info: Option<ProcessInfo>,
    /// Time samples in it.
    pub time_samples: u64,
    /// The recording (preamble, header, the recorder's chunks, the stream's state and
    /// the interval's samples).
    pub bytes: Vec<u8>,
}

/// Everything read so far that is not yet in an interval, and what later intervals need.
#[derive(Debug)]
pub(crate) struct Cutter {
    header: Header,
    baseline: Option<Baseline>,
    images: Vec<Image>,
    ksyms: Vec<KernelSymbol>,
    streams: FxHashMap<StreamId, Stream>,
    /// The interval being filled (0 the first).
    interval: u64,
    /// The end of the last interval cut (mono ns): samples before it arrive late.
    cut_at: u64,
    /// Samples that arrived after their interval was cut.
    pub late: u64,
    /// Samples read.
    pub samples_read: u64,
    /// Samples given to intervals.
    pub samples_cut: u64,
    /// Notes (agents' warnings), one line each, first seen first.
    pub notes: Vec<String>,
}

impl Cutter {
    pub(crate) fn new(header: Header) -> Cutter {
        Cutter {
            cut_at: 0,
            header,
            baseline: None,
            images: Vec::new(),
            ksyms: Vec::new(),
            streams: FxHashMap::default(),
            interval: 0,
            late: 0,
            samples_read: 0,
            samples_cut: 0,
            notes: Vec::new(),
        }
    }

    pub(crate) fn header(&self) -> &Header {
        &self.header
    }

    fn stream(&mut self, id: StreamId) -> &mut Stream {
        let interval = self.interval;
        let s = self.streams.entry(id).or_insert_with(|| Stream::new(interval));
        s.active_in = interval;
        s
    }

    /// Takes one record of the file.
    pub(crate) fn add(&mut self, record: Record) {
        match record {
            Record::Process { stream, info } => {
                let s = self.stream(stream);
                s.info = Some(info);
            }
            Record::Threads { stream, threads } => {
                let now = self.interval;
                let s = self.stream(stream);
                for t in threads {
                    s.names.insert(t.tid, (t.name, now));
                }
                s.forget_old_names();
            }
            Record::Maps { stream, maps } => self.stream(stream).add_maps(maps),
            Record::Stacks { stream, first_id, nodes } => {
                self.stream(stream).add_stacks(first_id, nodes)
            }
            Record::Samples(batch) => {
                let cut_at = self.cut_at;
                let now = self.interval;
                let mut late = 0;
                let mut n = 0;
                let s = self.stream(batch.stream);
                if let Some(name) = s.names.get_mut(&batch.tid) {
                    name.1 = now;
                }
                let q = s.queues.entry(batch.tid).or_default();
                q.ncounters = batch.ncounters;
                // A batch whose tail is damaged keeps the samples before the damage.
                for smp in batch.iter().map_while(Result::ok) {
                    if smp.kind.is_time_sample() && smp.time < cut_at {
                        late += 1;
                    }
                    n += 1;
                    q.samples.push_back(smp);
                }
                self.late += late;
                self.samples_read += n;
            }
            Record::Lost { stream, lost } => self.stream(stream).lost.extend(lost),
            Record::OffCpu { stream, tid, intervals } => {
                self.stream(stream).off_cpu.push((tid, intervals))
            }
            Record::Note { stream, note } => {
                let line = match note.level {
                    strobe_format::NoteLevel::Info => None,
                    strobe_format::NoteLevel::Warning => Some(format!("warning: {}", note.message)),
                    strobe_format::NoteLevel::Error => {
                        Some(format!("error in the profiled program: {}", note.message))
                    }
                };
                if let Some(l) = line.filter(|l| !self.notes.contains(l)) {
                    self.notes.push(l);
                }
                if stream != RECORDER_STREAM {
                    self.stream(stream).notes.push(note);
                }
            }
            Record::Image { image, .. } => {
                if !self.images.iter().any(|i| i.name == image.name) {
                    self.images.push(image);
                }
            }
            Record::Baseline(b) => self.baseline = Some(b),
            Record::KernelSymbols(k) => {
                self.ksyms.extend(k);
                self.ksyms.sort_by_key(|k| k.start);
                self.ksyms.dedup_by_key(|k| k.start);
            }
            // The process's end and its threads' CPU times are whole-recording figures
            // (what the samples of the whole run do not account for): an interval's
            // profile carries its samples only. An END says the stream can go.
            Record::End { stream, .. } => {
                if let Some(s) = self.streams.get_mut(&stream) {
                    s.ended = true;
                }
            }
            Record::ThreadCpu { .. } | Record::Truncated { .. } => {}
        }
    }

    /// Writes the preamble, the header and the recorder's chunks.
    pub(crate) fn write_preamble(&self, e: &mut Encoder) {
        self.write_preamble_but_kernel(e);
        if !self.ksyms.is_empty() {
            e.kernel_symbols(&self.ksyms);
        }
    }

    /// The preamble, the header and the recorder's chunks but its kernel symbols.
    fn write_preamble_but_kernel(&self, e: &mut Encoder) {
        e.preamble();
        e.header(&self.header);
        if let Some(b) = &self.baseline {
            e.baseline(b);
        }
        for i in &self.images {
            e.image(RECORDER_STREAM, i);
        }
    }

    /// Writes the kernel symbols that name `addrs` (sorted and deduplicated by the call;
    /// the caller keeps only addresses at or above the first symbol's start): for each
    /// address, the symbol with the last start at or below it, which is the one a reader
    /// of the whole table would look at, so the names read are the same. The table holds
    /// every kernel function any process sampled since the start; a process's interval
    /// needs a few of them.
    fn write_kernel_symbols_for(&self, addrs: &mut Vec<u64>, e: &mut Encoder) {
        if addrs.is_empty() {
            return;
        }
        addrs.sort_unstable();
        addrs.dedup();
        let mut picked: Vec<usize> = addrs
            .iter()
            .filter_map(|&a| self.ksyms.partition_point(|k| k.start <= a).checked_sub(1))
            .collect();
        picked.dedup(); // sorted already: the addresses are
        e.kernel_symbols_of(picked.iter().map(|&i| &self.ksyms[i]));
    }

    /// Writes the preamble and every live stream's state: the start of a recording that
    /// later chunks of this one can be appended to (a rotated local copy).
    pub(crate) fn write_resume(&self, e: &mut Encoder) {
        self.write_preamble(e);
        let mut ids: Vec<&StreamId> = self.streams.keys().collect();
        ids.sort();
        for &id in ids {
            self.streams[&id].write_state(id, e);
        }
    }

    /// Cuts the interval that ends at `t` (mono ns; `None`: the last one, everything
    /// read), and starts the next. `alive(pid)` says whether a process still runs.
    pub(crate) fn cut(&mut self, t: Option<u64>, alive: &dyn Fn(u32) -> bool) -> Vec<Part> {
        // A window still open at this cut that was open at the last one has waited a
        // whole interval: it goes as it is.
        let (t, old) = match t {
            Some(t) => (t, self.cut_at),
            None => (u64::MAX, u64::MAX),
        };
        let mut pre = Encoder::with_capacity(16 << 10);
        self.write_preamble_but_kernel(&mut pre);
        let mut ids: Vec<StreamId> = self.streams.keys().copied().collect();
        ids.sort_unstable();
        let owners = self.owners();
        // Each resource's recording: the streams it holds, in stream order, its time
        // samples, and the addresses it may ask kernel names of.
        let mut by_owner: FxHashMap<StreamId, (Encoder, u64, Vec<u64>)> = FxHashMap::default();
        let kernel_from = self.ksyms.first().map_or(u64::MAX, |k| k.start);
        for id in ids {
            let s = self.streams.get_mut(&id).expect("listed");
            let mut taken: Vec<(u32, usize, Vec<Sample>)> = Vec::new();
            let mut tids: Vec<u32> = s.queues.keys().copied().collect();
            tids.sort_unstable();
            for tid in tids {
                let q = s.queues.get_mut(&tid).expect("listed");
                let n = split(&q.samples, t, old);
                if n > 0 {
                    taken.push((tid, q.ncounters, q.samples.drain(..n).collect()));
                }
                if q.samples.is_empty() {
                    s.queues.remove(&tid);
                }
            }
            let has = !taken.is_empty() || !s.lost.is_empty() || !s.off_cpu.is_empty();
            if has {
                let owner = owners.get(&id).copied().unwrap_or(id);
                let (e, time_samples, kernel) = by_owner
                    .entry(owner)
                    .or_insert_with(|| (Encoder::with_capacity(64 << 10), 0, Vec::new()));
                s.write_state(id, e);
                kernel.extend(s.stacks.iter().map(|n| n.addr).filter(|&a| a >= kernel_from));
                let ips = taken.iter().flat_map(|(_, _, v)| v.iter().map(|smp| smp.ip));
                kernel.extend(ips.filter(|&a| a >= kernel_from));
                for (tid, ncounters, samples) in &taken {
                    for chunk in samples.chunks(SAMPLE_CHUNK) {
                        let mut b = e.samples(id, *tid, *ncounters);
                        for smp in chunk {
                            *time_samples += u64::from(smp.kind.is_time_sample());
                            b.push(smp.kind, smp.time, smp.ip, smp.stack, smp.counters.as_slice());
                        }
                        b.finish();
                    }
                    self.samples_cut += samples.len() as u64;
                }
                if !s.lost.is_empty() {
                    e.lost(id, &std::mem::take(&mut s.lost));
                }
                for (tid, iv) in std::mem::take(&mut s.off_cpu) {
                    kernel.extend(iv.iter().map(|i| i.ip).filter(|&a| a >= kernel_from));
                    e.off_cpu(id, tid, &iv);
                }
                for n in std::mem::take(&mut s.notes) {
                    e.note(id, &n);
                }
            }
            s.notes.clear();
        }
        let mut owned: Vec<StreamId> = by_owner.keys().copied().collect();
        owned.sort_unstable();
        let mut parts = Vec::new();
        for owner in owned {
            let (e, time_samples, mut kernel) = by_owner.remove(&owner).expect("listed");
            let mut ksyms = Encoder::new();
            self.write_kernel_symbols_for(&mut kernel, &mut ksyms);
            // Chunks stand alone: the recorder's part, then the streams'.
            let mut bytes = Vec::with_capacity(pre.len() + ksyms.len() + e.len());
            bytes.extend_from_slice(pre.as_bytes());
            bytes.extend_from_slice(ksyms.as_bytes());
            bytes.extend_from_slice(e.as_bytes());
            let info = self.streams.get(&owner).and_then(|s| s.info.clone());
            parts.push(Part { info, time_samples, bytes });
        }
        // Forget the streams that ended, or whose processes are gone, once they brought
        // nothing for a whole interval (for an END, so a kernel-floor stream of the same
        // process that comes later still finds the agent's stream to join), or for two
        // (gone without an END yet); their last samples were cut above.
        let interval = self.interval;
        self.streams.retain(|_, s| {
            let quiet = |n: u64| s.active_in + n <= interval && s.queues.is_empty();
            !((s.ended && quiet(1)) || (quiet(2) && s.info.as_ref().is_none_or(|i| !alive(i.pid))))
        });
        self.interval += 1;
        self.cut_at = self.cut_at.max(t);
        parts
    }

    /// Which stream's resource each stream belongs to: a process's kernel-floor stream
    /// joins an agent stream of the same pid (the image with the same executable, else
    /// the one that started nearest in time), as a whole recording's export does; every
    /// other stream is its own.
    fn owners(&self) -> FxHashMap<StreamId, StreamId> {
        let mut out = FxHashMap::default();
        for (&id, s) in &self.streams {
            let Some(info) = s.info.as_ref().filter(|i| i.floor) else { continue };
            let owner = self
                .streams
                .iter()
                .filter_map(|(&o, os)| os.info.as_ref().map(|oi| (o, oi)))
                .filter(|(_, oi)| !oi.floor && oi.pid == info.pid)
                .min_by_key(|(o, oi)| {
                    (oi.exe != info.exe, oi.start_mono_ns.abs_diff(info.start_mono_ns), *o)
                })
                .map(|(o, _)| o);
            if let Some(o) = owner {
                out.insert(id, o);
            }
        }
        out
    }

    /// Streams whose state is held.
    pub(crate) fn streams(&self) -> usize {
        self.streams.len()
    }

    /// Samples read and not yet in an interval: every sample read waits in a queue, and
    /// leaves it only into an interval (asked after every read of the file, so counted,
    /// not summed over the queues of every stream held).
    pub(crate) fn queued(&self) -> usize {
        debug_assert_eq!(
            self.samples_read - self.samples_cut,
            self.streams
                .values()
                .flat_map(|s| s.queues.values())
                .map(|q| q.samples.len() as u64)
                .sum::<u64>()
        );
        (self.samples_read - self.samples_cut) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strobe_format::Counters;

    fn s(kind: SampleKind, time: u64) -> Sample {
        Sample { tid: 1, time, ip: 0, kind, stack: 0, counters: Counters::default() }
    }

    use SampleKind::{CallTail as T, Overflow as O, Plain as P, WindowEnd as E, WindowStart as S};

    fn q(v: &[(SampleKind, u64)]) -> VecDeque<Sample> {
        v.iter().map(|&(k, t)| s(k, t)).collect()
    }

    #[test]
    fn plain_samples_are_cut_at_the_boundary() {
        let x = q(&[(P, 1), (P, 5), (P, 9), (P, 10), (P, 12)]);
        assert_eq!(split(&x, 10, 0), 3);
        assert_eq!(split(&x, 100, 0), 5);
        assert_eq!(split(&x, 0, 0), 0);
    }

    #[test]
    fn a_window_stays_whole_with_the_samples_that_open_it() {
        // A window starting before the boundary keeps its end after it.
        let x = q(&[(S, 1), (E, 2), (T, 8), (S, 9), (O, 10), (E, 11), (O, 12), (S, 13), (E, 14)]);
        assert_eq!(split(&x, 10, 0), 6);
        // The overflow before the next start goes with that start.
        assert_eq!(split(&x, 13, 0), 6);
        // An open window waits for its end, with its call tail.
        let open = q(&[(S, 1), (E, 2), (T, 3), (S, 4), (O, 5)]);
        assert_eq!(split(&open, 10, 0), 2);
        // ... unless it opened before `old`: then it goes as it is.
        assert_eq!(split(&open, 10, 4), 2, "opened at 4, not before 4");
        assert_eq!(split(&open, 10, 5), 5);
        // Boundary samples whose start has not come wait for it.
        let tail = q(&[(S, 1), (E, 2), (O, 3)]);
        assert_eq!(split(&tail, 10, 0), 2);
        assert_eq!(split(&tail, 10, 4), 3, "old ones go");
    }

    fn header() -> Header {
        let bytes = {
            let mut e = Encoder::new();
            e.preamble();
            e.header(&Header {
                minor_version: 1,
                strobe_version: "t".into(),
                start_unix_ns: 0,
                start_mono_ns: 0,
                command: vec![],
                events: vec![],
                period: None,
                window: None,
                jitter: None,
                wakeup: 1,
                buffer_bytes: 1,
                overhead_ppm: 1,
                follow_fork: true,
                mode: strobe_format::RecordMode::Kernel,
                mode_reason: String::new(),
                call_graph: strobe_format::CallGraph::None,
                max_depth: 1,
            });
            e.as_bytes().to_vec()
        };
        strobe_format::Reader::new(&bytes[..], "h").unwrap().header().clone()
    }

    fn batch(stream: StreamId, tid: u32, samples: &[(SampleKind, u64)]) -> Record {
        let mut e = Encoder::new();
        e.preamble();
        e.header(&header());
        let mut b = e.samples(stream, tid, 1);
        for &(k, t) in samples {
            b.push(k, t, 0x1000, 0, &[t]);
        }
        b.finish();
        let bytes = e.as_bytes().to_vec();
        let mut r = strobe_format::Reader::new(&bytes[..], "b").unwrap();
        r.next().unwrap().unwrap()
    }

    /// One plain sample of `tid` in `stream` at `ip` with callers `stack`.
    fn sample_at(stream: StreamId, tid: u32, time: u64, ip: u64, stack: u32) -> Record {
        let mut e = Encoder::new();
        e.preamble();
        e.header(&header());
        let mut b = e.samples(stream, tid, 1);
        b.push(P, time, ip, stack, &[time]);
        b.finish();
        let bytes = e.as_bytes().to_vec();
        let mut r = strobe_format::Reader::new(&bytes[..], "b").unwrap();
        r.next().unwrap().unwrap()
    }

    /// The kernel symbols a part carries.
    fn part_ksyms(p: &Part) -> Vec<KernelSymbol> {
        let r = strobe_format::Reader::new(&p.bytes[..], "part").unwrap();
        r.filter_map(|x| match x.unwrap() {
            Record::KernelSymbols(k) => Some(k),
            _ => None,
        })
        .flatten()
        .collect()
    }

    #[test]
    fn a_part_carries_the_kernel_symbols_its_addresses_are_named_by() {
        const K: u64 = 0xffff_ffff_8100_0000;
        let sym = |at: u64, name: &str| KernelSymbol {
            start: K + at,
            size: 0x100,
            name: name.into(),
            module: String::new(),
        };
        let mut c = Cutter::new(header());
        c.add(Record::KernelSymbols(vec![sym(0x1000, "a"), sym(0x2000, "b"), sym(0x3000, "c")]));
        // Stream 7: a sample in `a`, one past the end of `b` (no name), callers through `c`.
        c.add(Record::Stacks {
            stream: 7,
            first_id: 1,
            nodes: vec![StackNode { parent: 0, addr: K + 0x3010 }],
        });
        c.add(sample_at(7, 1, 1, K + 0x1010, 1));
        c.add(sample_at(7, 1, 2, K + 0x2200, 0));
        // Stream 8: user code only.
        c.add(sample_at(8, 1, 3, 0x1000, 0));
        let parts = c.cut(Some(10), &|_| true);
        assert_eq!(parts.len(), 2);
        let names = |p: &Part| part_ksyms(p).into_iter().map(|k| k.name).collect::<Vec<_>>();
        assert_eq!(names(&parts[0]), ["a", "b", "c"]);
        assert!(names(&parts[1]).is_empty());
        // A reader names each address the same from the part's symbols as from the whole
        // table: the symbol with the last start at or below it, if the address is inside.
        let lookup = |t: &[KernelSymbol], a: u64| {
            let i = t.partition_point(|k| k.start <= a).checked_sub(1)?;
            t.get(i).filter(|k| a - k.start < k.size).map(|k| k.name.clone())
        };
        let part = part_ksyms(&parts[0]);
        for a in [K + 0x1010, K + 0x2200, K + 0x3010] {
            assert_eq!(lookup(&part, a), lookup(&c.ksyms, a), "{a:#x}");
        }
        // The whole table is still written where a whole recording starts again.
        let mut e = Encoder::new();
        c.write_preamble(&mut e);
        let whole = Part { info: None, time_samples: 0, bytes: e.as_bytes().to_vec() };
        assert_eq!(names(&whole), ["a", "b", "c"]);
    }

    fn count(parts: &[Part]) -> u64 {
        parts.iter().map(|p| p.time_samples).sum()
    }

    #[test]
    fn every_sample_goes_to_one_interval_late_ones_to_the_next() {
        let mut c = Cutter::new(header());
        let yes = |_: u32| true;
        c.add(batch(7, 1, &[(P, 1), (P, 2), (P, 11), (P, 12)]));
        c.add(batch(7, 2, &[(P, 3)]));
        let a = c.cut(Some(10), &yes);
        assert_eq!(count(&a), 3);
        // A sample of the first interval read after it was cut: late, in the next.
        c.add(batch(7, 2, &[(P, 9), (P, 15)]));
        assert_eq!(c.late, 1);
        let b = c.cut(Some(20), &yes);
        assert_eq!(count(&b), 4);
        assert_eq!(c.queued(), 0);
        c.add(batch(7, 1, &[(P, 25)]));
        let last = c.cut(None, &yes);
        assert_eq!(count(&last), 1);
        assert_eq!(c.samples_cut, c.samples_read);
    }

    #[test]
    fn streams_of_processes_that_are_gone_are_forgotten_after_two_quiet_intervals() {
        let mut c = Cutter::new(header());
        c.add(batch(7, 1, &[(P, 1)]));
        let dead = |_: u32| false;
        for i in 0..2 {
            c.cut(Some(10 * (i + 1)), &dead);
            assert_eq!(c.streams(), 1, "{i}");
        }
        c.cut(Some(30), &dead);
        assert_eq!(c.streams(), 0);
        // A live one stays.
        c.add(Record::Process {
            stream: 8,
            info: ProcessInfo { origin: strobe_format::ProcessOrigin::Start, ..info(42) },
        });
        c.add(batch(8, 1, &[(P, 31)]));
        for i in 0..5 {
            c.cut(Some(40 + 10 * i), &|pid| pid == 42);
        }
        assert_eq!(c.streams(), 1);
    }

    fn info(pid: u32) -> ProcessInfo {
        ProcessInfo {
            pid,
            ppid: 1,
            origin: strobe_format::ProcessOrigin::Fork,
            exe: "/bin/x".into(),
            start_mono_ns: 0,
            period: 1,
            window: 0,
            jitter: 0,
            period_source: strobe_format::PeriodSource::Explicit,
            sample_cost_ns: 0,
            floor_cost_ns: 0,
            predicted_overhead_ppm: 0,
            floor: false,
        }
    }

    /// The names of the threads a part carries, by stream.
    fn part_names(p: &Part) -> Vec<(StreamId, String)> {
        let r = strobe_format::Reader::new(&p.bytes[..], "part").unwrap();
        r.filter_map(|x| match x.unwrap() {
            Record::Threads { stream, threads } => {
                Some(threads.into_iter().map(move |t| (stream, t.name)).collect::<Vec<_>>())
            }
            _ => None,
        })
        .flatten()
        .collect()
    }

    /// Processes that each live one interval, with the END and thread CPU times the
    /// recorder writes as soon as they are gone: each one's last interval carries its
    /// samples with its thread's name, and the streams held stay at those of the last
    /// two intervals however many came and went (the pids look alive: only the ENDs
    /// let them go).
    #[test]
    fn a_process_that_ended_is_named_in_its_last_interval_and_then_forgotten() {
        let mut c = Cutter::new(header());
        let alive = |_: u32| true;
        for k in 0..300u32 {
            let (stream, pid, t) = (k + 2, 1000 + k, u64::from(k) * 10);
            c.add(Record::Process { stream, info: info(pid) });
            c.add(Record::Threads {
                stream,
                threads: vec![strobe_format::ThreadInfo { tid: pid, name: format!("p{k}") }],
            });
            c.add(batch(stream, pid, &[(P, t + 1), (P, t + 9)]));
            c.add(Record::ThreadCpu {
                stream,
                threads: vec![strobe_format::ThreadCpu {
                    tid: pid,
                    cpu_ns: 2,
                    served_ns: 0,
                    agent_ns: 0,
                }],
            });
            c.add(Record::End {
                stream,
                end: strobe_format::ProcessEnd {
                    reason: strobe_format::EndReason::Exit,
                    time_mono_ns: t + 9,
                    samples: 2,
                    lost: 0,
                    wakeups: 0,
                    windows: 0,
                    window_sum: 0,
                    status: None,
                    unsampled_ns: 0,
                    cpu_ns: None,
                    tree_cpu_ns: None,
                },
            });
            let parts = c.cut(Some(t + 10), &alive);
            assert_eq!(parts.len(), 1, "{k}");
            assert_eq!(parts[0].time_samples, 2);
            assert_eq!(parts[0].info.as_ref().map(|i| i.pid), Some(pid));
            assert_eq!(part_names(&parts[0]), [(stream, format!("p{k}"))]);
            assert!(c.streams() <= 2, "{k}: {} streams held", c.streams());
        }
        assert_eq!(c.samples_cut, 600);
    }
}
