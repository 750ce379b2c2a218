//! Encoding chunks into a reusable buffer.
//!
//! [`Encoder`] appends whole chunks (header, payload, checksum) to its buffer; the caller
//! writes [`Encoder::as_bytes`] with one `write(2)` on an `O_APPEND` file and then
//! [`Encoder::clear`]s it, keeping the allocation. Nothing here does I/O except
//! [`Encoder::write_to`], a convenience for callers with a `Write`.
//!
//! Owns the byte layout on the writing side: chunk framing (sync, tag, stream, then the
//! length and CRC-32 patched in when the chunk ends), each chunk's payload, and the delta
//! and varint encoding of sample batches ([`SampleBatchEncoder`], which closes its chunk
//! when dropped and leaves nothing behind when it holds no sample). It must never do I/O
//! beyond [`Encoder::write_to`], never decide where bytes go, and never panic on a value it
//! is given (a length that does not fit saturates; counters past
//! [`MAX_COUNTERS`](crate::MAX_COUNTERS) are left out).

use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::types::*;
use crate::varint::{put, zigzag};
use crate::{tag, CHUNK_HEADER_LEN, CHUNK_SYNC, MAGIC, MAJOR_VERSION, MAX_COUNTERS};

/// Appends encoded chunks to a reusable buffer.
#[derive(Debug, Default)]
pub struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    /// An empty encoder.
    pub fn new() -> Encoder {
        Encoder { buf: Vec::new() }
    }

    /// An empty encoder with room for `bytes` bytes.
    pub fn with_capacity(bytes: usize) -> Encoder {
        Encoder { buf: Vec::with_capacity(bytes) }
    }

    /// The encoded bytes so far.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Bytes encoded so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when nothing is encoded.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Forgets the encoded bytes, keeping the allocation.
    pub fn clear(&mut self) {
        self.buf.clear();
    }

    /// Writes everything encoded so far with one `write_all` and clears the buffer.
    pub fn write_to(&mut self, w: &mut impl Write) -> io::Result<()> {
        w.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// The file preamble: magic and major version. Written once, first.
    pub fn preamble(&mut self) {
        self.buf.extend_from_slice(&MAGIC);
        self.buf.extend_from_slice(&MAJOR_VERSION.to_le_bytes());
    }

    fn begin(&mut self, tag: u8, stream: StreamId) -> usize {
        let start = self.buf.len();
        self.buf.extend_from_slice(&CHUNK_SYNC);
        self.buf.push(tag);
        self.buf.push(0);
        self.buf.extend_from_slice(&stream.to_le_bytes());
        self.buf.extend_from_slice(&[0; 8]); // length and crc, patched by `end`
        start
    }

    fn end(&mut self, start: usize) {
        let payload_len = self.buf.len() - start - CHUNK_HEADER_LEN;
        let len = u32::try_from(payload_len).unwrap_or(u32::MAX);
        self.buf[start + 8..start + 12].copy_from_slice(&len.to_le_bytes());
        let crc = chunk_crc(&self.buf[start..start + 12], &self.buf[start + CHUNK_HEADER_LEN..]);
        self.buf[start + 12..start + 16].copy_from_slice(&crc.to_le_bytes());
    }

    /// The header chunk (stream 0).
    pub fn header(&mut self, h: &Header) {
        let s = self.begin(tag::HEADER, RECORDER_STREAM);
        let b = &mut self.buf;
        put(b, u64::from(h.minor_version));
        put_str(b, &h.strobe_version);
        put(b, h.start_unix_ns);
        put(b, h.start_mono_ns);
        put(b, h.command.len() as u64);
        for a in &h.command {
            put_str(b, a);
        }
        put(b, h.events.len() as u64);
        for e in &h.events {
            put_str(b, &e.name);
            put(b, u64::from(e.type_));
            put(b, e.config);
            let flags = u64::from(e.is_time)
                | u64::from(e.is_hardware) << 1
                | u64::from(e.exclude_user) << 2
                | u64::from(e.exclude_kernel) << 3;
            put(b, flags);
        }
        put_opt(b, h.period);
        put_opt(b, h.window);
        put_opt(b, h.jitter);
        put(b, h.wakeup);
        put(b, h.buffer_bytes);
        put(b, h.overhead_ppm);
        b.push(u8::from(h.follow_fork));
        b.push(match h.mode {
            RecordMode::Agent => 0,
            RecordMode::Kernel => 1,
        });
        put_str(b, &h.mode_reason);
        b.push(match h.call_graph {
            CallGraph::None => 0,
            CallGraph::Fp => 1,
            CallGraph::Dwarf => 2,
        });
        put(b, u64::from(h.max_depth));
        self.end(s);
    }

    /// A process chunk: the first chunk of every agent stream.
    pub fn process(&mut self, stream: StreamId, p: &ProcessInfo) {
        let s = self.begin(tag::PROCESS, stream);
        let b = &mut self.buf;
        put(b, u64::from(p.pid));
        put(b, u64::from(p.ppid));
        b.push(match p.origin {
            ProcessOrigin::Start => 0,
            ProcessOrigin::Fork => 1,
            ProcessOrigin::Exec => 2,
        });
        put_path(b, &p.exe);
        put(b, p.start_mono_ns);
        put(b, p.period);
        put(b, p.window);
        put(b, p.jitter);
        b.push(match p.period_source {
            PeriodSource::Budget => 0,
            PeriodSource::Explicit => 1,
        });
        put(b, p.sample_cost_ns);
        put(b, p.floor_cost_ns);
        put(b, p.predicted_overhead_ppm);
        b.push(u8::from(p.floor));
        self.end(s);
    }

    /// A thread CPU-time chunk.
    pub fn thread_cpu(&mut self, stream: StreamId, threads: &[ThreadCpu]) {
        let s = self.begin(tag::THREADCPU, stream);
        let b = &mut self.buf;
        put(b, threads.len() as u64);
        for t in threads {
            put(b, u64::from(t.tid));
            put(b, t.cpu_ns);
            put(b, t.served_ns);
            put(b, t.agent_ns);
        }
        self.end(s);
    }

    /// A thread-table chunk.
    pub fn threads(&mut self, stream: StreamId, threads: &[ThreadInfo]) {
        let s = self.begin(tag::THREADS, stream);
        let b = &mut self.buf;
        put(b, threads.len() as u64);
        for t in threads {
            put(b, u64::from(t.tid));
            put_str(b, &t.name);
        }
        self.end(s);
    }

    /// A mappings chunk.
    pub fn maps(&mut self, stream: StreamId, m: &MapsSnapshot) {
        let s = self.begin(tag::MAPS, stream);
        let b = &mut self.buf;
        put(b, m.time_mono_ns);
        put(b, m.maps.len() as u64);
        for map in &m.maps {
            put(b, map.start);
            put(b, map.end.wrapping_sub(map.start));
            put(b, map.file_offset);
            put_path(b, &map.path);
        }
        self.end(s);
    }

    /// A lost-samples chunk.
    pub fn lost(&mut self, stream: StreamId, lost: &[LostCount]) {
        let s = self.begin(tag::LOST, stream);
        let b = &mut self.buf;
        put(b, lost.len() as u64);
        for l in lost {
            put(b, u64::from(l.tid));
            put(b, l.lost);
        }
        self.end(s);
    }

    /// An end-of-process chunk.
    pub fn end_process(&mut self, stream: StreamId, e: &ProcessEnd) {
        let s = self.begin(tag::END, stream);
        let b = &mut self.buf;
        b.push(match e.reason {
            EndReason::Exit => 0,
            EndReason::Exec => 1,
            EndReason::Stopped => 2,
            EndReason::Killed => 3,
            EndReason::Vanished => 4,
        });
        put(b, e.time_mono_ns);
        put(b, e.samples);
        put(b, e.lost);
        put(b, e.wakeups);
        put(b, e.windows);
        put(b, e.window_sum);
        put_opt(b, e.status);
        put(b, e.unsampled_ns);
        put_opt(b, e.cpu_ns);
        put_opt(b, e.tree_cpu_ns);
        self.end(s);
    }

    /// A note chunk.
    pub fn note(&mut self, stream: StreamId, n: &Note) {
        let s = self.begin(tag::NOTE, stream);
        let b = &mut self.buf;
        b.push(match n.level {
            NoteLevel::Info => 0,
            NoteLevel::Warning => 1,
            NoteLevel::Error => 2,
        });
        put_str(b, &n.message);
        self.end(s);
    }

    /// The bytes of a module with no file (the vDSO), written by the recorder on stream 0.
    pub fn image(&mut self, stream: StreamId, img: &Image) {
        let s = self.begin(tag::IMAGE, stream);
        put_str(&mut self.buf, &img.name);
        put(&mut self.buf, img.bytes.len() as u64);
        self.buf.extend_from_slice(&img.bytes);
        self.end(s);
    }

    /// Nodes of `stream`'s stack table: node `first_id + i` is `nodes[i]` (ids start at 1
    /// and continue across chunks; a node's parent is an earlier node or 0).
    pub fn stacks(&mut self, stream: StreamId, first_id: u32, nodes: &[StackNode]) {
        let s = self.begin(tag::STACKS, stream);
        let b = &mut self.buf;
        put(b, u64::from(first_id));
        put(b, nodes.len() as u64);
        let mut prev_addr = 0u64;
        for (i, n) in nodes.iter().enumerate() {
            // The parent as a distance back from this node (most are close).
            let id = u64::from(first_id) + i as u64;
            put(b, id.saturating_sub(u64::from(n.parent)));
            put(b, zigzag(n.addr.wrapping_sub(prev_addr) as i64));
            prev_addr = n.addr;
        }
        self.end(s);
    }

    /// The empty-interval baseline (stream 0, written by the recorder).
    pub fn baseline(&mut self, bl: &Baseline) {
        let s = self.begin(tag::BASELINE, RECORDER_STREAM);
        let b = &mut self.buf;
        b.push(u8::from(bl.windows));
        put(b, bl.requested);
        put(b, bl.intervals);
        b.extend_from_slice(&bl.work_ns.to_bits().to_le_bytes());
        b.extend_from_slice(&bl.uncounted.to_bits().to_le_bytes());
        for list in [&bl.counters, &bl.tail, &bl.end] {
            put(b, list.len() as u64);
            for c in list {
                b.extend_from_slice(&c.mean.to_bits().to_le_bytes());
                b.extend_from_slice(&c.sd.to_bits().to_le_bytes());
            }
        }
        self.end(s);
    }

    /// Kernel symbols (stream 0): each symbol's start as a zigzag delta from the previous
    /// one's, its size, name and module.
    pub fn kernel_symbols(&mut self, syms: &[KernelSymbol]) {
        self.kernel_symbols_of(syms);
    }

    /// The same as [`Encoder::kernel_symbols`], for symbols held elsewhere (a selection of a
    /// larger table, still in start order).
    pub fn kernel_symbols_of<'a, I>(&mut self, syms: I)
    where
        I: IntoIterator<Item = &'a KernelSymbol>,
        I::IntoIter: ExactSizeIterator,
    {
        let syms = syms.into_iter();
        let s = self.begin(tag::KSYMS, RECORDER_STREAM);
        let b = &mut self.buf;
        put(b, syms.len() as u64);
        let mut prev = 0u64;
        for k in syms {
            put(b, zigzag(k.start.wrapping_sub(prev) as i64));
            prev = k.start;
            put(b, k.size);
            put_str(b, &k.name);
            put_str(b, &k.module);
        }
        self.end(s);
    }

    /// Off-CPU intervals of thread `tid` of `stream`, in start order: per interval the
    /// start as a delta from the previous start, the duration, the zigzagged IP and stack
    /// deltas, and a flags byte (bit 0: preempted).
    pub fn off_cpu(&mut self, stream: StreamId, tid: u32, intervals: &[OffCpuInterval]) {
        let s = self.begin(tag::OFFCPU, stream);
        let b = &mut self.buf;
        put(b, u64::from(tid));
        put(b, intervals.len() as u64);
        let (mut t, mut ip, mut stack) = (0u64, 0u64, 0u32);
        for i in intervals {
            let start = i.start.max(t);
            put(b, start - t);
            t = start;
            put(b, i.duration);
            put(b, zigzag(i.ip.wrapping_sub(ip) as i64));
            ip = i.ip;
            put(b, zigzag(i64::from(i.stack) - i64::from(stack)));
            stack = i.stack;
            b.push(u8::from(i.preempted));
        }
        self.end(s);
    }

    /// Starts a batch of samples of thread `tid`, each carrying `ncounters` counter values
    /// (at most [`MAX_COUNTERS`]; more are cut). The chunk is completed when the returned
    /// encoder is finished or dropped; a batch with no sample leaves no chunk.
    pub fn samples(
        &mut self,
        stream: StreamId,
        tid: u32,
        ncounters: usize,
    ) -> SampleBatchEncoder<'_> {
        let ncounters = ncounters.min(MAX_COUNTERS);
        let start = self.begin(tag::SAMPLES, stream);
        put(&mut self.buf, u64::from(tid));
        self.buf.push(ncounters as u8);
        let count_pos = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        SampleBatchEncoder {
            enc: self,
            start,
            count_pos,
            count: 0,
            ncounters,
            prev_time: 0,
            prev_ip: 0,
            prev_stack: 0,
            prev: [0; MAX_COUNTERS],
        }
    }
}

/// Encodes one thread's samples into a SAMPLES chunk: per sample, the time delta shifted
/// left three bits with the kind in the low bits, the zigzagged IP delta, the zigzagged
/// stack id delta, and each counter's delta, all varints, each relative to the previous
/// sample of the batch.
#[derive(Debug)]
pub struct SampleBatchEncoder<'a> {
    enc: &'a mut Encoder,
    start: usize,
    count_pos: usize,
    count: u32,
    ncounters: usize,
    prev_time: u64,
    prev_ip: u64,
    prev_stack: u32,
    prev: [u64; MAX_COUNTERS],
}

impl SampleBatchEncoder<'_> {
    /// Appends one sample. `time` must not go backwards within a batch (an earlier time
    /// is recorded as the previous one); `counters` beyond the batch's count are ignored,
    /// missing ones are recorded as unchanged.
    #[inline]
    pub fn push(&mut self, kind: SampleKind, time: u64, ip: u64, stack: u32, counters: &[u64]) {
        let b = &mut self.enc.buf;
        let time = time.max(self.prev_time).min(u64::MAX >> 3);
        put(b, (time - self.prev_time) << 3 | kind as u64);
        self.prev_time = time;
        put(b, zigzag(ip.wrapping_sub(self.prev_ip) as i64));
        self.prev_ip = ip;
        put(b, zigzag(i64::from(stack) - i64::from(self.prev_stack)));
        self.prev_stack = stack;
        for i in 0..self.ncounters {
            let v = counters.get(i).copied().unwrap_or(self.prev[i]);
            put(b, v.wrapping_sub(self.prev[i]));
            self.prev[i] = v;
        }
        self.count += 1;
    }

    /// Samples pushed so far.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True when no sample was pushed.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes this batch's chunk takes so far (header included).
    pub fn encoded_len(&self) -> usize {
        self.enc.buf.len() - self.start
    }

    /// Completes the chunk (also done on drop).
    pub fn finish(self) {}
}

impl Drop for SampleBatchEncoder<'_> {
    fn drop(&mut self) {
        if self.count == 0 {
            self.enc.buf.truncate(self.start);
            return;
        }
        self.enc.buf[self.count_pos..self.count_pos + 4].copy_from_slice(&self.count.to_le_bytes());
        self.enc.end(self.start);
    }
}

/// The chunk checksum: CRC-32 (IEEE) of the header's first 12 bytes and the payload.
pub(crate) fn chunk_crc(header12: &[u8], payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(header12);
    h.update(payload);
    h.finalize()
}

fn put_str(b: &mut Vec<u8>, s: &str) {
    put(b, s.len() as u64);
    b.extend_from_slice(s.as_bytes());
}

fn put_path(b: &mut Vec<u8>, p: &Path) {
    let bytes = p.as_os_str().as_bytes();
    put(b, bytes.len() as u64);
    b.extend_from_slice(bytes);
}

fn put_opt(b: &mut Vec<u8>, v: Option<u64>) {
    match v {
        None => put(b, 0),
        Some(v) => put(b, v.saturating_add(1)),
    }
}
