//! The streaming reader.
//!
//! [`Reader`] reads the preamble and header at open, then yields one [`Record`] per
//! chunk. Damage is handled so that a reader always gets everything that is intact:
//!
//! - a file that ends inside a chunk (a writer was killed) yields every whole chunk and
//!   then [`Record::Truncated`] with the offset of the incomplete chunk;
//! - a chunk whose sync bytes, length or checksum are wrong yields
//!   `Err(FormatError::Corrupt { offset, .. })`; iterating further skips to the next
//!   intact chunk (found by its sync bytes and checksum), so a caller may choose to
//!   stop at the first error (as [`read_all`] does) or to salvage the rest;
//! - an incomplete chunk followed by intact ones (a writer killed in the middle of a
//!   write while another process kept appending) is reported as corrupt, not truncated,
//!   and reading resumes after it.
//!
//! Sample batches are returned undecoded ([`SampleBatch`]); iterating one decodes
//! samples into plain values without allocating.
//!
//! A reader can also *follow* a file that is still being written ([`Reader::set_follow`],
//! as `tail -f` does): the end of the input, at a chunk boundary or inside a chunk whose
//! writer has not finished it, is then "nothing more yet" (`next` returns `None`, and a
//! later `next` reads on from there), never a truncation. A chunk torn by a killed writer
//! is still found, as damage, once later writers' bytes run past its length.
//!
//! Owns the reading side of the layout: the preamble and header checks, chunk framing and
//! checksums, resynchronising after damage, each chunk's payload into a [`Record`], and
//! the lazy decoding of sample batches. It must never panic on any input, never trust a
//! length or count before checking it against the bytes that remain (and against
//! [`MAX_PAYLOAD`](crate::MAX_PAYLOAD)), and never decide which file to read.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::encode::chunk_crc;
use crate::error::FormatError;
use crate::types::*;
use crate::varint::{unzigzag, Cursor};
use crate::{
    tag, CHUNK_HEADER_LEN, CHUNK_SYNC, MAGIC, MAJOR_VERSION, MAX_COUNTERS, MAX_PAYLOAD,
    PREAMBLE_LEN,
};

/// One record of the stream.
#[derive(Debug, Clone)]
pub enum Record {
    /// A process (agent instance) began; its stream's chunks follow.
    Process {
        /// The stream.
        stream: StreamId,
        /// The process and its sampling parameters.
        info: ProcessInfo,
    },
    /// Thread names.
    Threads {
        /// The stream.
        stream: StreamId,
        /// Threads; a later entry for a tid replaces an earlier one.
        threads: Vec<ThreadInfo>,
    },
    /// A snapshot of executable mappings, in effect for the stream's later samples.
    Maps {
        /// The stream.
        stream: StreamId,
        /// The mappings.
        maps: MapsSnapshot,
    },
    /// A batch of one thread's samples, decoded lazily.
    Samples(SampleBatch),
    /// Lost-sample counts (add them up per thread).
    Lost {
        /// The stream.
        stream: StreamId,
        /// Per-thread counts.
        lost: Vec<LostCount>,
    },
    /// End-of-process statistics.
    End {
        /// The stream.
        stream: StreamId,
        /// The statistics.
        end: ProcessEnd,
    },
    /// The bytes of a module with no file (the vDSO).
    Image {
        /// The stream (the recorder's, 0).
        stream: StreamId,
        /// The image.
        image: Image,
    },
    /// Nodes of a stream's stack table.
    Stacks {
        /// The stream.
        stream: StreamId,
        /// The id of `nodes[0]`.
        first_id: u32,
        /// The nodes, in id order.
        nodes: Vec<StackNode>,
    },
    /// The empty-interval baseline.
    Baseline(Baseline),
    /// Kernel symbols (kernel-mode recordings).
    KernelSymbols(Vec<KernelSymbol>),
    /// One thread's off-CPU intervals.
    OffCpu {
        /// The stream.
        stream: StreamId,
        /// The thread.
        tid: u32,
        /// Its intervals, in start order.
        intervals: Vec<OffCpuInterval>,
    },
    /// Threads' CPU time (add entries up per process and thread).
    ThreadCpu {
        /// The stream.
        stream: StreamId,
        /// The threads.
        threads: Vec<ThreadCpu>,
    },
    /// A message from the agent.
    Note {
        /// The stream.
        stream: StreamId,
        /// The message.
        note: Note,
    },
    /// The file ends inside the chunk at `offset` (its writer was stopped mid-write);
    /// everything before it was yielded. Always the last record.
    Truncated {
        /// Byte offset of the incomplete chunk.
        offset: u64,
    },
}

/// A batch of one thread's samples as stored: decode it with [`SampleBatch::iter`].
#[derive(Debug, Clone)]
pub struct SampleBatch {
    /// The stream.
    pub stream: StreamId,
    /// The thread.
    pub tid: u32,
    /// Counter values per sample.
    pub ncounters: usize,
    /// Samples in the batch.
    pub count: u32,
    /// The chunk payload; samples start at `start`.
    data: Vec<u8>,
    start: usize,
    data_offset: u64,
    path: PathBuf,
}

impl SampleBatch {
    /// Decodes the samples in order. Allocation-free.
    pub fn iter(&self) -> SampleIter<'_> {
        SampleIter {
            batch: self,
            cur: Cursor::new(self.data.get(self.start..).unwrap_or(&[])),
            remaining: self.count,
            time: 0,
            ip: 0,
            stack: 0,
            prev: [0; MAX_COUNTERS],
        }
    }

    /// Encoded size of the samples, in bytes.
    pub fn encoded_len(&self) -> usize {
        self.data.len() - self.start
    }
}

/// Iterator over a [`SampleBatch`].
#[derive(Debug, Clone)]
pub struct SampleIter<'a> {
    batch: &'a SampleBatch,
    cur: Cursor<'a>,
    remaining: u32,
    time: u64,
    ip: u64,
    stack: u32,
    prev: [u64; MAX_COUNTERS],
}

impl SampleIter<'_> {
    fn corrupt(&mut self, what: &str) -> Option<Result<Sample, FormatError>> {
        self.remaining = 0;
        Some(Err(FormatError::Corrupt {
            path: self.batch.path.clone(),
            offset: self.batch.data_offset + self.cur.pos as u64,
            what: what.to_string(),
        }))
    }
}

impl Iterator for SampleIter<'_> {
    type Item = Result<Sample, FormatError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        let Some(tk) = self.cur.varint() else { return self.corrupt("sample time cut short") };
        let Some(kind) = SampleKind::from_bits(tk & 7) else {
            return self.corrupt("unknown sample kind");
        };
        self.time = self.time.wrapping_add(tk >> 3);
        let Some(dip) = self.cur.varint() else { return self.corrupt("sample IP cut short") };
        self.ip = self.ip.wrapping_add(unzigzag(dip) as u64);
        let Some(ds) = self.cur.varint() else { return self.corrupt("sample stack cut short") };
        let stack =
            i64::from(self.stack).checked_add(unzigzag(ds)).and_then(|s| u32::try_from(s).ok());
        let Some(stack) = stack else {
            return self.corrupt("sample stack id out of range");
        };
        self.stack = stack;
        let n = self.batch.ncounters.min(MAX_COUNTERS);
        for i in 0..n {
            let Some(d) = self.cur.varint() else {
                return self.corrupt("sample counter cut short");
            };
            self.prev[i] = self.prev[i].wrapping_add(d);
        }
        self.remaining -= 1;
        let mut counters = Counters::default();
        if let Some(c) = Counters::from_slice(&self.prev[..n]) {
            counters = c;
        }
        Some(Ok(Sample {
            tid: self.batch.tid,
            time: self.time,
            ip: self.ip,
            kind,
            stack: self.stack,
            counters,
        }))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining as usize))
    }
}

/// Streams the records of a recording.
#[derive(Debug)]
pub struct Reader<R = File> {
    src: R,
    path: PathBuf,
    /// Bytes read; `buf[start..]` are not consumed yet, and `buf[start]` is at file
    /// offset `buf_off`. Consuming a chunk moves `start`; the consumed bytes are dropped
    /// only when more must be read (dropping them per chunk moved the rest of the buffer,
    /// up to 64 KiB, for every chunk of a few hundred bytes).
    buf: Vec<u8>,
    start: usize,
    buf_off: u64,
    eof: bool,
    /// After a corrupt chunk: scan for the next intact one before reading on.
    resync_from: Option<u64>,
    done: bool,
    /// The input is still being written: its end is not the recording's.
    follow: bool,
    header: Header,
}

impl Reader<File> {
    /// Opens `path` and reads its preamble and header.
    pub fn open(path: impl AsRef<Path>) -> Result<Reader<File>, FormatError> {
        let path = path.as_ref();
        let f = File::open(path)
            .map_err(|source| FormatError::Io { path: path.to_path_buf(), source })?;
        Reader::new(f, path)
    }
}

impl<R: Read> Reader<R> {
    /// Reads a recording from `src`; `path` names it in errors.
    pub fn new(src: R, path: impl AsRef<Path>) -> Result<Reader<R>, FormatError> {
        let mut r = Reader {
            src,
            path: path.as_ref().to_path_buf(),
            buf: Vec::with_capacity(1 << 16),
            start: 0,
            buf_off: 0,
            eof: false,
            resync_from: None,
            done: false,
            follow: false,
            header: Header::empty(),
        };
        r.fill(PREAMBLE_LEN)?;
        let pre = &r.buf[..r.buf.len().min(PREAMBLE_LEN)];
        if pre.len() < PREAMBLE_LEN {
            if MAGIC.starts_with(&pre[..pre.len().min(MAGIC.len())]) {
                return Err(FormatError::NoHeader {
                    path: r.path.clone(),
                    offset: pre.len() as u64,
                });
            }
            return Err(FormatError::NotARecording { path: r.path.clone() });
        }
        if pre[..6] != MAGIC {
            return Err(FormatError::NotARecording { path: r.path.clone() });
        }
        let version = u16::from_le_bytes([pre[6], pre[7]]);
        if version != MAJOR_VERSION {
            return Err(FormatError::UnsupportedVersion {
                path: r.path.clone(),
                found: version,
                supported: MAJOR_VERSION,
            });
        }
        r.consume(PREAMBLE_LEN);
        match r.next_chunk()? {
            Chunk::Whole { tag: tag::HEADER, offset, payload, .. } => {
                r.header = parse_header(&payload, offset + CHUNK_HEADER_LEN as u64, &r.path)?;
                Ok(r)
            }
            Chunk::Whole { offset, .. } => Err(FormatError::Corrupt {
                path: r.path.clone(),
                offset,
                what: "the first chunk is not the header".into(),
            }),
            Chunk::Truncated { offset } | Chunk::End { offset } => {
                Err(FormatError::NoHeader { path: r.path.clone(), offset })
            }
        }
    }

    /// The recording's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The file name errors mention.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// File offset of the next unread byte: every byte before it belongs to a record
    /// already returned (or to damage already reported).
    pub fn offset(&self) -> u64 {
        self.buf_off
    }

    /// Follows an input that is still being written (or stops following it). While
    /// following, the end of the input is "nothing more yet": the iterator returns `None`
    /// and may be called again once the input has grown; a chunk cut by the end is
    /// waited for, not reported as [`Record::Truncated`]. Stop following after the
    /// last writer is done to read to the end as a plain reader does (a chunk still cut
    /// then is a truncation).
    pub fn set_follow(&mut self, follow: bool) {
        self.follow = follow;
    }

    /// Ensures `n` unconsumed bytes are buffered, unless the input ends first.
    fn fill(&mut self, n: usize) -> Result<(), FormatError> {
        while self.live().len() < n && !self.eof {
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            let have = self.buf.len();
            let want = (n - have).max(1 << 16);
            self.buf.resize(have + want, 0);
            let got = loop {
                match self.src.read(&mut self.buf[have..]) {
                    Ok(g) => break g,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(source) => {
                        self.buf.truncate(have);
                        return Err(FormatError::Io { path: self.path.clone(), source });
                    }
                }
            };
            self.buf.truncate(have + got);
            if got == 0 {
                self.eof = true;
            }
        }
        Ok(())
    }

    fn consume(&mut self, n: usize) {
        self.start += n.min(self.live().len());
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        self.buf_off += n as u64;
    }

    /// The bytes read and not consumed (`live()[0]` is at file offset `buf_off`).
    fn live(&self) -> &[u8] {
        self.buf.get(self.start..).unwrap_or(&[])
    }

    /// Checks whether a whole, intact chunk starts at `buf[at]`; reads more as needed.
    fn check_at(&mut self, at: usize) -> Result<Check, FormatError> {
        self.fill(at + CHUNK_HEADER_LEN)?;
        let buf = self.live();
        let avail = buf.len().saturating_sub(at);
        if avail == 0 {
            return Ok(Check::End);
        }
        if avail < CHUNK_HEADER_LEN {
            let sync_ok = buf[at..].iter().zip(CHUNK_SYNC).all(|(a, b)| *a == b);
            return Ok(if sync_ok { Check::Short } else { Check::Bad("bad chunk sync bytes") });
        }
        let h = &buf[at..at + CHUNK_HEADER_LEN];
        if h[..2] != CHUNK_SYNC {
            return Ok(Check::Bad("bad chunk sync bytes"));
        }
        let len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
        if len > MAX_PAYLOAD {
            return Ok(Check::Bad("chunk length out of range"));
        }
        let total = CHUNK_HEADER_LEN + len as usize;
        self.fill(at + total)?;
        let buf = self.live();
        if buf.len() - at < total {
            return Ok(Check::Short);
        }
        let h = &buf[at..at + CHUNK_HEADER_LEN];
        let want = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
        let got = chunk_crc(&h[..12], &buf[at + CHUNK_HEADER_LEN..at + total]);
        if want != got {
            return Ok(Check::Bad("checksum mismatch"));
        }
        Ok(Check::Whole { total })
    }

    /// Scans forward from `buf[from]` for the next intact chunk; returns its index.
    fn find_next_whole(&mut self, from: usize) -> Result<Option<usize>, FormatError> {
        let mut i = from;
        loop {
            self.fill(i + CHUNK_HEADER_LEN)?;
            let Some(rel) =
                self.live().get(i..).and_then(|s| s.windows(2).position(|w| w == CHUNK_SYNC))
            else {
                if self.eof {
                    return Ok(None);
                }
                // Keep the last byte: it may be the first sync byte.
                i = self.live().len().saturating_sub(1).max(i);
                self.fill(self.live().len() + (1 << 16))?;
                continue;
            };
            let at = i + rel;
            if let Check::Whole { .. } = self.check_at(at)? {
                return Ok(Some(at));
            }
            i = at + 1;
        }
    }

    fn next_chunk(&mut self) -> Result<Chunk, FormatError> {
        if let Some(bad) = self.resync_from.take() {
            // `buf[0]` is the damaged chunk at `bad`: skip to the next intact one.
            debug_assert_eq!(bad, self.buf_off);
            match self.find_next_whole(1)? {
                Some(at) => self.consume(at),
                None if self.follow => {
                    // The next intact chunk may be the one still being written.
                    self.resync_from = Some(bad);
                    return Ok(Chunk::End { offset: bad });
                }
                None => {
                    let n = self.live().len();
                    self.consume(n);
                    return Ok(Chunk::End { offset: self.buf_off });
                }
            }
        }
        let offset = self.buf_off;
        match self.check_at(0)? {
            Check::End => Ok(Chunk::End { offset }),
            Check::Whole { total } => {
                let buf = self.live();
                let h = &buf[..CHUNK_HEADER_LEN];
                let tag = h[2];
                let stream = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
                let payload = buf[CHUNK_HEADER_LEN..total].to_vec();
                self.consume(total);
                Ok(Chunk::Whole { tag, stream, offset, payload })
            }
            Check::Short if self.follow => Ok(Chunk::End { offset }),
            Check::Short => {
                // The file ends inside this chunk. If intact chunks follow its start, it
                // was torn by a killed writer while others appended: that is damage.
                if self.find_next_whole(1)?.is_some() {
                    self.resync_from = Some(offset);
                    return Err(
                        self.corrupt(offset, "incomplete chunk (its writer was killed mid-write)")
                    );
                }
                Ok(Chunk::Truncated { offset })
            }
            Check::Bad(what) => {
                self.resync_from = Some(offset);
                Err(self.corrupt(offset, what))
            }
        }
    }

    fn corrupt(&self, offset: u64, what: &str) -> FormatError {
        FormatError::Corrupt { path: self.path.clone(), offset, what: what.to_string() }
    }

    fn parse(
        &self,
        tag: u8,
        stream: StreamId,
        offset: u64,
        payload: Vec<u8>,
    ) -> Result<Option<Record>, FormatError> {
        let base = offset + CHUNK_HEADER_LEN as u64;
        let mut c = Cursor::new(&payload);
        let path = &self.path;
        let bad = |c: &Cursor<'_>, what: &str| FormatError::Corrupt {
            path: path.clone(),
            offset: base + c.pos as u64,
            what: what.to_string(),
        };
        macro_rules! v {
            ($what:literal) => {
                c.varint().ok_or_else(|| bad(&c, concat!("bad ", $what)))?
            };
        }
        macro_rules! b {
            ($what:literal) => {
                c.u8().ok_or_else(|| bad(&c, concat!("bad ", $what)))?
            };
        }
        macro_rules! s {
            ($what:literal) => {
                String::from_utf8_lossy(c.bytes().ok_or_else(|| bad(&c, concat!("bad ", $what)))?)
                    .into_owned()
            };
        }
        macro_rules! p {
            ($what:literal) => {
                PathBuf::from(std::ffi::OsStr::from_bytes(
                    c.bytes().ok_or_else(|| bad(&c, concat!("bad ", $what)))?,
                ))
            };
        }
        let rec = match tag {
            tag::HEADER => return Err(bad(&c, "a second header chunk")),
            tag::PROCESS => {
                let pid = v!("pid") as u32;
                let ppid = v!("parent pid") as u32;
                let origin = match b!("process origin") {
                    0 => ProcessOrigin::Start,
                    1 => ProcessOrigin::Fork,
                    2 => ProcessOrigin::Exec,
                    _ => return Err(bad(&c, "unknown process origin")),
                };
                let exe = p!("executable path");
                let info = ProcessInfo {
                    pid,
                    ppid,
                    origin,
                    exe,
                    start_mono_ns: v!("start time"),
                    period: v!("period"),
                    window: v!("window"),
                    jitter: v!("jitter"),
                    period_source: match b!("period source") {
                        0 => PeriodSource::Budget,
                        1 => PeriodSource::Explicit,
                        _ => return Err(bad(&c, "unknown period source")),
                    },
                    sample_cost_ns: v!("sample cost"),
                    floor_cost_ns: v!("floor cost"),
                    predicted_overhead_ppm: v!("predicted overhead"),
                    // Minor version 1; absent before.
                    floor: if c.pos < payload.len() { b!("floor flag") != 0 } else { false },
                };
                Record::Process { stream, info }
            }
            tag::THREADS => {
                let n = v!("thread count");
                let mut threads = Vec::with_capacity(n.min(4096) as usize);
                for _ in 0..n {
                    let tid = v!("thread id") as u32;
                    threads.push(ThreadInfo { tid, name: s!("thread name") });
                }
                Record::Threads { stream, threads }
            }
            tag::MAPS => {
                let time_mono_ns = v!("maps time");
                let n = v!("mapping count");
                let mut maps = Vec::with_capacity(n.min(4096) as usize);
                for _ in 0..n {
                    let start = v!("mapping start");
                    let len = v!("mapping length");
                    let file_offset = v!("mapping offset");
                    maps.push(Mapping {
                        start,
                        end: start.wrapping_add(len),
                        file_offset,
                        path: p!("mapping path"),
                    });
                }
                Record::Maps { stream, maps: MapsSnapshot { time_mono_ns, maps } }
            }
            tag::SAMPLES => {
                let tid = v!("sample thread id") as u32;
                let ncounters = usize::from(b!("counter count"));
                if ncounters > MAX_COUNTERS {
                    return Err(bad(&c, "more counters than a sample may carry"));
                }
                let count = c.u32_le().ok_or_else(|| bad(&c, "bad sample count"))?;
                let start = c.pos;
                return Ok(Some(Record::Samples(SampleBatch {
                    stream,
                    tid,
                    ncounters,
                    count,
                    data: payload,
                    start,
                    data_offset: base + start as u64,
                    path: self.path.clone(),
                })));
            }
            tag::LOST => {
                let n = v!("lost count");
                let mut lost = Vec::with_capacity(n.min(4096) as usize);
                for _ in 0..n {
                    let tid = v!("lost thread id") as u32;
                    lost.push(LostCount { tid, lost: v!("lost samples") });
                }
                Record::Lost { stream, lost }
            }
            tag::END => {
                let reason = match b!("end reason") {
                    0 => EndReason::Exit,
                    1 => EndReason::Exec,
                    2 => EndReason::Stopped,
                    3 => EndReason::Killed,
                    4 => EndReason::Vanished,
                    _ => return Err(bad(&c, "unknown end reason")),
                };
                let end = ProcessEnd {
                    reason,
                    time_mono_ns: v!("end time"),
                    samples: v!("sample total"),
                    lost: v!("lost total"),
                    wakeups: v!("wakeups"),
                    windows: v!("window count"),
                    window_sum: v!("window sum"),
                    status: v!("exit status").checked_sub(1),
                    unsampled_ns: v!("unsampled time"),
                    cpu_ns: v!("process CPU time").checked_sub(1),
                    // Minor version 1; absent before.
                    tree_cpu_ns: if c.pos < payload.len() {
                        v!("tree CPU time").checked_sub(1)
                    } else {
                        None
                    },
                };
                Record::End { stream, end }
            }
            tag::NOTE => {
                let level = match b!("note level") {
                    0 => NoteLevel::Info,
                    1 => NoteLevel::Warning,
                    _ => NoteLevel::Error,
                };
                Record::Note { stream, note: Note { level, message: s!("note text") } }
            }
            tag::STACKS => {
                let first = v!("first stack id");
                let first_id = u32::try_from(first)
                    .ok()
                    .filter(|&f| f > 0)
                    .ok_or_else(|| bad(&c, "stack ids start at 1"))?;
                let n = v!("stack node count");
                if n > u64::from(u32::MAX - first_id) {
                    return Err(bad(&c, "stack ids out of range"));
                }
                let mut nodes = Vec::with_capacity(n.min(1 << 16) as usize);
                let mut prev_addr = 0u64;
                for i in 0..n {
                    let id = u64::from(first_id) + i;
                    let back = v!("stack parent");
                    let parent = id
                        .checked_sub(back)
                        .filter(|&p| p < id)
                        .ok_or_else(|| bad(&c, "a stack node's parent is not an earlier node"))?;
                    let d = v!("stack address");
                    prev_addr = prev_addr.wrapping_add(unzigzag(d) as u64);
                    nodes.push(StackNode { parent: parent as u32, addr: prev_addr });
                }
                Record::Stacks { stream, first_id, nodes }
            }
            tag::BASELINE => {
                let f = |c: &mut Cursor<'_>| -> Option<f64> {
                    let b = c.take(8)?;
                    Some(f64::from_bits(u64::from_le_bytes(b.try_into().ok()?)))
                };
                let windows = b!("baseline kind") != 0;
                let requested = v!("baseline interval");
                let intervals = v!("baseline interval count");
                let work_ns = f(&mut c).ok_or_else(|| bad(&c, "bad baseline work"))?;
                let uncounted = f(&mut c).ok_or_else(|| bad(&c, "bad baseline uncounted time"))?;
                let mut lists = [Vec::new(), Vec::new(), Vec::new()];
                for list in &mut lists {
                    let n = v!("baseline counter count");
                    if n > MAX_COUNTERS as u64 {
                        return Err(bad(&c, "more baseline counters than a sample may carry"));
                    }
                    for _ in 0..n {
                        let mean = f(&mut c).ok_or_else(|| bad(&c, "bad baseline mean"))?;
                        let sd = f(&mut c).ok_or_else(|| bad(&c, "bad baseline spread"))?;
                        list.push(BaselineCounter { mean, sd });
                    }
                }
                let [counters, tail, end] = lists;
                Record::Baseline(Baseline {
                    windows,
                    requested,
                    intervals,
                    work_ns,
                    counters,
                    tail,
                    end,
                    uncounted,
                })
            }
            tag::IMAGE => {
                let name = s!("image name");
                let bytes = c.bytes().ok_or_else(|| bad(&c, "bad image bytes"))?.to_vec();
                Record::Image { stream, image: Image { name, bytes } }
            }
            tag::KSYMS => {
                let n = v!("kernel symbol count");
                let mut syms = Vec::with_capacity(n.min(4096) as usize);
                let mut prev = 0u64;
                for _ in 0..n {
                    prev = prev.wrapping_add(unzigzag(v!("kernel symbol address")) as u64);
                    let size = v!("kernel symbol size");
                    let name = s!("kernel symbol name");
                    syms.push(KernelSymbol {
                        start: prev,
                        size,
                        name,
                        module: s!("kernel module"),
                    });
                }
                Record::KernelSymbols(syms)
            }
            tag::OFFCPU => {
                let tid = v!("off-CPU thread id") as u32;
                let n = v!("off-CPU interval count");
                let mut intervals = Vec::with_capacity(n.min(4096) as usize);
                let (mut t, mut ip, mut stack) = (0u64, 0u64, 0u32);
                for _ in 0..n {
                    t = t.wrapping_add(v!("off-CPU start"));
                    let duration = v!("off-CPU duration");
                    ip = ip.wrapping_add(unzigzag(v!("off-CPU address")) as u64);
                    stack = i64::from(stack)
                        .checked_add(unzigzag(v!("off-CPU stack")))
                        .and_then(|s| u32::try_from(s).ok())
                        .ok_or_else(|| bad(&c, "off-CPU stack id out of range"))?;
                    let flags = b!("off-CPU flags");
                    intervals.push(OffCpuInterval {
                        start: t,
                        duration,
                        ip,
                        stack,
                        preempted: flags & 1 != 0,
                    });
                }
                Record::OffCpu { stream, tid, intervals }
            }
            tag::THREADCPU => {
                let n = v!("thread count");
                let mut threads = Vec::with_capacity(n.min(4096) as usize);
                for _ in 0..n {
                    threads.push(ThreadCpu {
                        tid: v!("thread id") as u32,
                        cpu_ns: v!("thread CPU time"),
                        served_ns: v!("served CPU time"),
                        agent_ns: v!("agent CPU time"),
                    });
                }
                Record::ThreadCpu { stream, threads }
            }
            // A tag from a newer minor version: skip it.
            _ => return Ok(None),
        };
        Ok(Some(rec))
    }
}

enum Check {
    End,
    Short,
    Bad(&'static str),
    Whole { total: usize },
}

enum Chunk {
    Whole { tag: u8, stream: StreamId, offset: u64, payload: Vec<u8> },
    Truncated { offset: u64 },
    End { offset: u64 },
}

impl<R: Read> Iterator for Reader<R> {
    type Item = Result<Record, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.follow {
            // The input may have grown since its end was last seen.
            self.eof = false;
        }
        loop {
            if self.done {
                return None;
            }
            match self.next_chunk() {
                Err(e) => {
                    if self.resync_from.is_none() {
                        self.done = true; // an I/O error: nothing more to read
                    }
                    return Some(Err(e));
                }
                Ok(Chunk::End { .. }) => {
                    self.done = !self.follow;
                    return None;
                }
                Ok(Chunk::Truncated { offset }) => {
                    self.done = true;
                    return Some(Ok(Record::Truncated { offset }));
                }
                Ok(Chunk::Whole { tag, stream, offset, payload }) => {
                    match self.parse(tag, stream, offset, payload) {
                        Ok(Some(r)) => return Some(Ok(r)),
                        Ok(None) => continue,
                        Err(e) => return Some(Err(e)),
                    }
                }
            }
        }
    }
}

fn parse_header(payload: &[u8], base: u64, path: &Path) -> Result<Header, FormatError> {
    let mut c = Cursor::new(payload);
    let bad = |c: &Cursor<'_>, what: &str| FormatError::Corrupt {
        path: path.to_path_buf(),
        offset: base + c.pos as u64,
        what: format!("bad {what} in the header"),
    };
    let v = |c: &mut Cursor<'_>, what: &str| c.varint().ok_or_else(|| bad(c, what));
    let mut h = Header::empty();
    h.minor_version = v(&mut c, "minor version")? as u32;
    let s = |c: &mut Cursor<'_>, what: &str| {
        c.bytes().map(|b| String::from_utf8_lossy(b).into_owned()).ok_or_else(|| bad(c, what))
    };
    h.strobe_version = s(&mut c, "strobe version")?;
    h.start_unix_ns = v(&mut c, "start time")?;
    h.start_mono_ns = v(&mut c, "start time")?;
    let n = v(&mut c, "command length")?;
    for _ in 0..n {
        h.command.push(s(&mut c, "command")?);
    }
    let n = v(&mut c, "event count")?;
    for _ in 0..n {
        let name = s(&mut c, "event name")?;
        let type_ = v(&mut c, "event type")? as u32;
        let config = v(&mut c, "event config")?;
        let flags = v(&mut c, "event flags")?;
        h.events.push(EventDesc {
            name,
            type_,
            config,
            is_time: flags & 1 != 0,
            is_hardware: flags & 2 != 0,
            exclude_user: flags & 4 != 0,
            exclude_kernel: flags & 8 != 0,
        });
    }
    let opt = |x: u64| x.checked_sub(1);
    h.period = opt(v(&mut c, "period")?);
    h.window = opt(v(&mut c, "window")?);
    h.jitter = opt(v(&mut c, "jitter")?);
    h.wakeup = v(&mut c, "wakeup")?;
    h.buffer_bytes = v(&mut c, "buffer size")?;
    h.overhead_ppm = v(&mut c, "overhead budget")?;
    h.follow_fork = c.u8().ok_or_else(|| bad(&c, "follow-fork flag"))? != 0;
    h.mode = match c.u8().ok_or_else(|| bad(&c, "recording mode"))? {
        0 => RecordMode::Agent,
        1 => RecordMode::Kernel,
        _ => return Err(bad(&c, "recording mode")),
    };
    h.mode_reason = s(&mut c, "mode reason")?;
    h.call_graph = match c.u8().ok_or_else(|| bad(&c, "call graph"))? {
        0 => CallGraph::None,
        1 => CallGraph::Fp,
        2 => CallGraph::Dwarf,
        _ => return Err(bad(&c, "call graph")),
    };
    h.max_depth = u32::try_from(v(&mut c, "stack depth")?).map_err(|_| bad(&c, "stack depth"))?;
    Ok(h)
}

/// Everything a recording holds about one process (one stream).
#[derive(Debug, Clone, Default)]
pub struct ProcessData {
    /// The stream.
    pub stream: StreamId,
    /// The process chunk (`None` if the file lost it).
    pub info: Option<ProcessInfo>,
    /// Threads, one entry per tid, with the last name recorded.
    pub threads: Vec<ThreadInfo>,
    /// Mapping snapshots in file order.
    pub maps: Vec<MapsSnapshot>,
    /// The stack table: node `id` is `stacks[id - 1]`.
    pub stacks: Vec<StackNode>,
    /// All samples in file order (per thread, in time order).
    pub samples: Vec<Sample>,
    /// Lost samples per thread, summed.
    pub lost: Vec<LostCount>,
    /// The last end-of-process chunk.
    pub end: Option<ProcessEnd>,
    /// Notes from the agent.
    pub notes: Vec<Note>,
    /// Off-CPU intervals per thread, in file order.
    pub off_cpu: Vec<(u32, OffCpuInterval)>,
    /// Threads' CPU time, one entry per tid (entries of the file added up).
    pub thread_cpu: Vec<ThreadCpu>,
}

impl ProcessData {
    /// Lost samples of all threads.
    pub fn lost_total(&self) -> u64 {
        self.lost.iter().fold(0u64, |a, l| a.saturating_add(l.lost))
    }
}

/// A whole recording in memory (see [`read_all`]).
#[derive(Debug, Clone)]
pub struct Recording {
    /// The header.
    pub header: Header,
    /// One entry per stream, in order of first appearance (the recorder's stream 0
    /// appears only if it wrote notes).
    pub processes: Vec<ProcessData>,
    /// Where the file was cut, if it was.
    pub truncated_at: Option<u64>,
    /// Modules with no file (the vDSO), for symbolizing.
    pub images: Vec<Image>,
    /// The empty-interval baseline, when one was measured.
    pub baseline: Option<Baseline>,
    /// Kernel symbols (kernel-mode recordings).
    pub kernel_symbols: Vec<KernelSymbol>,
}

impl Recording {
    /// Samples of all processes.
    pub fn total_samples(&self) -> usize {
        self.processes.iter().map(|p| p.samples.len()).sum()
    }

    /// Lost samples of all processes.
    pub fn total_lost(&self) -> u64 {
        self.processes.iter().fold(0u64, |a, p| a.saturating_add(p.lost_total()))
    }
}

/// Reads a whole recording into memory. A truncated file is not an error (see
/// [`Recording::truncated_at`]); a corrupt one is.
pub fn read_all(path: impl AsRef<Path>) -> Result<Recording, FormatError> {
    let reader = Reader::open(path)?;
    collect(reader)
}

/// The most stack nodes that lost chunks may account for (each node takes at
/// least two bytes, so this is 32 MiB of lost chunks); a larger jump is corruption.
const MAX_STACK_GAP: usize = 1 << 24;

pub(crate) fn collect<R: Read>(mut reader: Reader<R>) -> Result<Recording, FormatError> {
    let header = reader.header().clone();
    let mut processes: Vec<ProcessData> = Vec::new();
    let mut truncated_at = None;
    let mut images = Vec::new();
    let mut baseline = None;
    let mut kernel_symbols = Vec::new();
    fn proc_mut(ps: &mut Vec<ProcessData>, stream: StreamId) -> &mut ProcessData {
        let i = match ps.iter().position(|p| p.stream == stream) {
            Some(i) => i,
            None => {
                ps.push(ProcessData { stream, ..Default::default() });
                ps.len() - 1
            }
        };
        &mut ps[i]
    }
    while let Some(rec) = reader.next() {
        match rec? {
            Record::Process { stream, info } => proc_mut(&mut processes, stream).info = Some(info),
            Record::Threads { stream, threads } => {
                let p = proc_mut(&mut processes, stream);
                for t in threads {
                    match p.threads.iter_mut().find(|x| x.tid == t.tid) {
                        Some(x) => x.name = t.name,
                        None => p.threads.push(t),
                    }
                }
            }
            Record::Maps { stream, maps } => proc_mut(&mut processes, stream).maps.push(maps),
            Record::Samples(batch) => {
                let p = proc_mut(&mut processes, batch.stream);
                // Every sample takes at least three bytes: a count beyond that is a lie.
                p.samples.reserve((batch.count as usize).min(batch.encoded_len() / 3));
                for s in batch.iter() {
                    p.samples.push(s?);
                }
            }
            Record::Lost { stream, lost } => {
                let p = proc_mut(&mut processes, stream);
                for l in lost {
                    match p.lost.iter_mut().find(|x| x.tid == l.tid) {
                        Some(x) => x.lost = x.lost.saturating_add(l.lost),
                        None => p.lost.push(l),
                    }
                }
            }
            Record::End { stream, end } => proc_mut(&mut processes, stream).end = Some(end),
            Record::Note { stream, note } => proc_mut(&mut processes, stream).notes.push(note),
            Record::Image { image, .. } => images.push(image),
            Record::Stacks { stream, first_id, nodes } => {
                let p = proc_mut(&mut processes, stream);
                // Ids continue across chunks; a gap (a lost chunk) is padded with roots.
                let at = first_id as usize - 1;
                if at > p.stacks.len() + MAX_STACK_GAP {
                    // The chunk just read ends where the reader stands.
                    return Err(FormatError::Corrupt {
                        path: reader.path.clone(),
                        offset: reader.offset(),
                        what: format!(
                            "the stack chunk ending here jumps from id {} to {first_id}",
                            p.stacks.len()
                        ),
                    });
                }
                if p.stacks.len() < at {
                    p.stacks.resize(at, StackNode { parent: 0, addr: 0 });
                }
                p.stacks.truncate(at);
                p.stacks.extend(nodes);
            }
            Record::Baseline(b) => baseline = Some(b),
            Record::KernelSymbols(k) => kernel_symbols.extend(k),
            Record::OffCpu { stream, tid, intervals } => {
                let p = proc_mut(&mut processes, stream);
                p.off_cpu.extend(intervals.into_iter().map(|i| (tid, i)));
            }
            Record::ThreadCpu { stream, threads } => {
                let p = proc_mut(&mut processes, stream);
                for t in threads {
                    match p.thread_cpu.iter_mut().find(|x| x.tid == t.tid) {
                        Some(x) => {
                            x.cpu_ns = x.cpu_ns.saturating_add(t.cpu_ns);
                            x.served_ns = x.served_ns.saturating_add(t.served_ns);
                            x.agent_ns = x.agent_ns.saturating_add(t.agent_ns);
                        }
                        None => p.thread_cpu.push(t),
                    }
                }
            }
            Record::Truncated { offset } => truncated_at = Some(offset),
        }
    }
    Ok(Recording { header, processes, truncated_at, images, baseline, kernel_symbols })
}
