//! [`PerfData`]: a parsed view of a perf.data file or pipe-mode stream held in memory,
//! and its two record iterators: [`Records`] in file order and [`Ordered`] in the order
//! `perf report` processes them.
//!
//! **Which attr a record belongs to.** With one attr, every record is its. With several,
//! the record's event id decides: a sample's `IDENTIFIER` (first word) or `ID` (at a
//! position fixed by `sample_type`), a non-sample record's trailer (`IDENTIFIER` last, or
//! `ID` before `STREAM_ID` and `CPU`). Like perf, the reader requires every attr to put
//! the id in the same place, and refuses a file whose attrs disagree.
//!
//! **Order.** The kernel writes one ring buffer per CPU; `perf record` drains them in
//! turn and writes a FINISHED_ROUND record after each pass, so records are sorted only
//! within a CPU. `perf report` queues every timed kernel record and, at each
//! FINISHED_ROUND, delivers in time order those not later than the newest time seen
//! before the *previous* round marker (a record of a round can be older than anything in
//! the previous round, never older than the round before that). Records without a time
//! (perf's own records, and records of attrs without `sample_id_all`) are delivered as
//! they are read. [`Ordered`] does the same, so mappings and execs take effect before the
//! samples that follow them in time. Its queue holds at most two rounds of 16-byte
//! entries (the whole data section for a file without round markers: 16 bytes per
//! record of at least 16, bounded by the input's size).
//!
//! This module must never panic or allocate from a size the input claims.

use std::collections::VecDeque;

use crate::abi::*;
use crate::attr::Attr;
use crate::bytes::{u16_at, u32_at, u64_at};
use crate::header::{self, EventAttr, FileInfo, PipeHeader};
use crate::record::{decode_other, Event, Record, SampleId};
use crate::sample::{Sample, SamplePlan};
use crate::Error;

/// Facts about one attr's record layout, computed once.
#[derive(Debug, Clone, Copy)]
struct Layout {
    plan: SamplePlan,
    trailer_len: usize,
    sample_time_pos: Option<usize>,
    trailer_time_from_end: Option<usize>,
}

/// A perf.data file (or pipe-mode stream) parsed from a byte slice: its attrs, facts
/// from its feature sections, and its records on demand.
#[derive(Debug)]
pub struct PerfData<'a> {
    bytes: &'a [u8],
    pipe: bool,
    attrs: Vec<EventAttr>,
    layouts: Vec<Layout>,
    info: FileInfo,
    /// (id, attr index), sorted by id.
    ids: Vec<(u64, usize)>,
    /// Where samples carry their id, the same for every attr.
    sample_id_pos: Option<usize>,
    /// Where non-sample trailers carry their id, counted back from the record's end.
    trailer_id_from_end: Option<usize>,
    data_start: usize,
    data_end: usize,
    /// A record crossing `data_end` is a truncation (the data runs to the end of the
    /// file), not a corruption.
    data_open_ended: bool,
    truncated_at: Option<u64>,
    data_size_unknown: bool,
}

/// The frame of one record: type, misc, where it ends.
#[derive(Debug, Clone, Copy)]
struct Frame {
    offset: usize,
    kind: u32,
    misc: u16,
    /// End of the record proper (`offset + header.size`).
    end: usize,
    /// Where the next record starts (past AUXTRACE data).
    next: usize,
}

impl<'a> PerfData<'a> {
    /// Parses the header, attrs and feature sections of a perf.data file or pipe-mode
    /// stream. Records are read later, by [`PerfData::records`] or
    /// [`PerfData::ordered`].
    pub fn parse(bytes: &'a [u8]) -> Result<PerfData<'a>, Error> {
        let magic = bytes.get(..8).unwrap_or(bytes);
        if magic == MAGIC_BIG_ENDIAN {
            return Err(Error::BigEndian);
        }
        if magic != MAGIC {
            return Err(Error::NotPerfData { found: String::from_utf8_lossy(magic).into_owned() });
        }
        match u64_at(bytes, 8) {
            Some(PIPE_HEADER_SIZE) => Self::parse_pipe(bytes),
            Some(FILE_HEADER_SIZE) => Self::parse_file(bytes),
            Some(other) => Err(Error::corrupt(
                8,
                format!("header size {other} is neither 104 (file) nor 16 (pipe)"),
            )),
            None => Err(Error::Truncated {
                offset: 0,
                what: "the file header",
                need: 16,
                end: bytes.len() as u64,
            }),
        }
    }

    fn parse_file(bytes: &'a [u8]) -> Result<PerfData<'a>, Error> {
        let h = header::file_header(bytes)?;
        let len = bytes.len();
        let start =
            usize::try_from(h.data.offset).ok().filter(|&s| s <= len).ok_or(Error::Truncated {
                offset: h.data.offset,
                what: "the data section",
                need: h.data.size,
                end: len as u64,
            })?;
        let claimed_end = h.data.offset.saturating_add(h.data.size);
        let (end, open_ended, truncated_at, unknown) = if h.data.size == 0 {
            // perf was killed before it wrote the data size: the data runs to the end.
            (len, true, None, true)
        } else if claimed_end > len as u64 {
            (len, true, Some(len as u64), false)
        } else {
            (claimed_end as usize, false, h.features_cut_at, false)
        };
        let mut attrs = h.attrs;
        header::name_attrs(&mut attrs, &h.features.descs);
        Self::finish(
            bytes,
            false,
            attrs,
            h.features.info,
            start,
            end,
            open_ended,
            truncated_at,
            unknown,
        )
    }

    fn parse_pipe(bytes: &'a [u8]) -> Result<PerfData<'a>, Error> {
        let mut ph = PipeHeader::default();
        let start = PIPE_HEADER_SIZE as usize;
        let mut pos = start;
        // One pass over the record headers collects the attrs, features and names;
        // a framing error ends it (the record iterators report it).
        while let Ok(Some(f)) = frame(bytes, pos, bytes.len(), true) {
            if f.kind == RECORD_COMPRESSED || f.kind == RECORD_COMPRESSED2 {
                return Err(Error::Compressed { offset: f.offset as u64 });
            }
            if f.kind >= USER_RECORD_START {
                if let Some(rec) = bytes.get(f.offset..f.end) {
                    ph.add(f.kind, rec, f.offset as u64);
                }
            }
            pos = f.next;
        }
        if ph.attrs.is_empty() {
            return Err(Error::corrupt(
                start as u64,
                "the stream holds no HEADER_ATTR record: no events",
            ));
        }
        let mut attrs = ph.attrs;
        header::name_attrs(&mut attrs, &ph.features.descs);
        for (id, name) in &ph.names {
            if let Some(a) = attrs.iter_mut().find(|a| a.ids.contains(id)) {
                a.name.clone_from(name);
            }
        }
        Self::finish(bytes, true, attrs, ph.features.info, start, bytes.len(), true, None, false)
    }

    #[allow(clippy::too_many_arguments)]
    fn finish(
        bytes: &'a [u8],
        pipe: bool,
        attrs: Vec<EventAttr>,
        info: FileInfo,
        data_start: usize,
        data_end: usize,
        data_open_ended: bool,
        truncated_at: Option<u64>,
        data_size_unknown: bool,
    ) -> Result<PerfData<'a>, Error> {
        let first = attrs.first().map(|a| a.attr).unwrap_or_default();
        let sample_id_pos = first.sample_id_pos();
        let trailer_id_from_end = first.trailer_id_from_end();
        if attrs.len() > 1 {
            for a in &attrs {
                if a.attr.sample_id_pos() != sample_id_pos
                    || (a.attr.sample_id_all()
                        && a.attr.trailer_id_from_end() != trailer_id_from_end)
                {
                    return Err(Error::corrupt(
                        data_start as u64,
                        format!(
                            "events '{}' and '{}' put their event id at different places in records (sample_type {:#x} and {:#x}); perf cannot read such a file either",
                            attrs.first().map_or("", |a| a.name.as_str()),
                            a.name,
                            first.sample_type,
                            a.attr.sample_type
                        ),
                    ));
                }
            }
        }
        let mut ids: Vec<(u64, usize)> = attrs
            .iter()
            .enumerate()
            .flat_map(|(i, a)| a.ids.iter().map(move |&id| (id, i)))
            .collect();
        ids.sort_unstable();
        let layouts = attrs
            .iter()
            .map(|a| Layout {
                plan: SamplePlan::new(&a.attr),
                trailer_len: a.attr.trailer_len(),
                sample_time_pos: a.attr.sample_time_pos(),
                trailer_time_from_end: a.attr.trailer_time_from_end(),
            })
            .collect();
        Ok(PerfData {
            bytes,
            pipe,
            attrs,
            layouts,
            info,
            ids,
            sample_id_pos,
            trailer_id_from_end,
            data_start,
            data_end,
            data_open_ended,
            truncated_at,
            data_size_unknown,
        })
    }

    /// The attrs, in file order, with names and ids.
    pub fn attrs(&self) -> &[EventAttr] {
        &self.attrs
    }

    /// Facts from the feature sections.
    pub fn info(&self) -> &FileInfo {
        &self.info
    }

    /// True for a pipe-mode stream (`perf record -o -`).
    pub fn is_pipe(&self) -> bool {
        self.pipe
    }

    /// True when the header's data size was 0 (perf was killed before it finished the
    /// file): the data was read up to the end of the file and event names may be
    /// missing.
    pub fn data_size_unknown(&self) -> bool {
        self.data_size_unknown
    }

    /// Where the file was found to be cut before any record was read: the data section
    /// or a feature section runs past the end. Records before the cut are readable.
    pub fn truncated_at(&self) -> Option<u64> {
        self.truncated_at
    }

    /// The bytes the data was parsed from.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The attr with event id `id`.
    pub fn attr_of_id(&self, id: u64) -> Option<usize> {
        self.ids
            .binary_search_by_key(&id, |&(i, _)| i)
            .ok()
            .and_then(|k| self.ids.get(k))
            .map(|&(_, a)| a)
    }

    /// The records in file order.
    pub fn records(&self) -> Records<'_, 'a> {
        Records { data: self, pos: self.data_start, done: false }
    }

    /// The records in the order `perf report` processes them (see the module notes).
    pub fn ordered(&self) -> Ordered<'_, 'a> {
        Ordered {
            inner: self.records(),
            queue: Vec::new(),
            ready: VecDeque::new(),
            next_flush: 0,
            max_time: 0,
            error: None,
            finished: false,
        }
    }

    /// The attr a kernel record (`rec`, the whole record) belongs to.
    #[inline]
    fn attr_of(&self, kind: u32, rec: &[u8]) -> Option<usize> {
        if self.attrs.len() == 1 {
            return Some(0);
        }
        let id = if kind == RECORD_SAMPLE {
            match self.sample_id_pos {
                Some(p) => u64_at(rec, 8 + p)?,
                None => return Some(0),
            }
        } else {
            match self.trailer_id_from_end {
                Some(k) if rec.len() >= 8 + k => u64_at(rec, rec.len() - k)?,
                _ => return Some(0),
            }
        };
        // perf synthesizes records with an id of zero; like perf, give them the first attr.
        if id == 0 {
            return Some(0);
        }
        self.attr_of_id(id)
    }

    /// The time of a record for ordering: `None` for records delivered as read.
    #[inline]
    fn time_of(&self, f: &Frame) -> Option<u64> {
        if f.kind >= USER_RECORD_START {
            return None;
        }
        let rec = self.bytes.get(f.offset..f.end)?;
        let layout = self.layouts.get(self.attr_of(f.kind, rec)?)?;
        let t = if f.kind == RECORD_SAMPLE {
            u64_at(rec, 8 + layout.sample_time_pos?)?
        } else {
            let k = layout.trailer_time_from_end?;
            u64_at(rec, rec.len().checked_sub(k).filter(|&p| p >= 8)?)?
        };
        (t != 0 && t != u64::MAX).then_some(t)
    }

    /// Decodes the record framed by `f`. Samples take the short path.
    #[inline]
    fn decode(&self, f: &Frame) -> Result<Record<'a>, Error> {
        let rec = self.bytes.get(f.offset..f.end).unwrap_or(&[]);
        let body = rec.get(8..).unwrap_or(&[]);
        if f.kind != RECORD_SAMPLE {
            return self.decode_other(f, rec, body);
        }
        let attr = self.attr_of(f.kind, rec);
        let event = match attr.and_then(|i| self.layouts.get(i)) {
            Some(layout) => match Sample::decode_planned(body, &layout.plan) {
                Some(s) => Event::Sample(s),
                None => return Err(self.short_sample(f, attr)),
            },
            None => Event::Other(body),
        };
        Ok(Record {
            offset: f.offset as u64,
            kind: f.kind,
            misc: f.misc,
            attr,
            sample_id: SampleId::default(),
            event,
        })
    }

    #[cold]
    fn short_sample(&self, f: &Frame, attr: Option<usize>) -> Error {
        let ea = attr.and_then(|i| self.attrs.get(i));
        Error::corrupt(
            f.offset as u64,
            format!(
                "a SAMPLE record of {} bytes is too short for the sample_type {:#x} of event '{}'",
                f.end - f.offset,
                ea.map_or(0, |a| a.attr.sample_type),
                ea.map_or("?", |a| a.name.as_str())
            ),
        )
    }

    /// Decodes a record other than a sample.
    fn decode_other(&self, f: &Frame, rec: &'a [u8], body: &'a [u8]) -> Result<Record<'a>, Error> {
        let offset = f.offset as u64;
        let mut r = Record {
            offset,
            kind: f.kind,
            misc: f.misc,
            attr: None,
            sample_id: SampleId::default(),
            event: Event::Other(body),
        };
        if f.kind >= USER_RECORD_START {
            if f.kind == RECORD_FINISHED_ROUND {
                r.event = Event::FinishedRound;
            } else if f.kind == RECORD_COMPRESSED || f.kind == RECORD_COMPRESSED2 {
                return Err(Error::Compressed { offset });
            }
            return Ok(r);
        }
        r.attr = self.attr_of(f.kind, rec);
        let (Some(ea), Some(layout)) =
            (r.attr.and_then(|i| self.attrs.get(i)), r.attr.and_then(|i| self.layouts.get(i)))
        else {
            return Ok(r);
        };
        let attr: &Attr = &ea.attr;
        let tlen = layout.trailer_len;
        let Some(split) = body.len().checked_sub(tlen) else {
            return Err(Error::corrupt(
                offset,
                format!("a record of type {} is shorter than its sample-id trailer", f.kind),
            ));
        };
        let (fields, trailer) = body.split_at(split);
        if tlen > 0 {
            r.sample_id = SampleId::decode_trailer(trailer, attr).unwrap_or_default();
        }
        r.event = decode_other(f.kind, f.misc, fields).ok_or_else(|| {
            Error::corrupt(
                offset,
                format!("a record of type {} is too short ({} bytes)", f.kind, rec.len()),
            )
        })?;
        Ok(r)
    }
}

/// Frames the record at `pos` (None at the end of the data).
#[inline]
fn frame(bytes: &[u8], pos: usize, end: usize, open_ended: bool) -> Result<Option<Frame>, Error> {
    if pos >= end {
        return Ok(None);
    }
    let cut = |need: u64, what: &'static str| {
        if open_ended {
            Error::Truncated { offset: pos as u64, what, need, end: end as u64 }
        } else {
            Error::corrupt(
                pos as u64,
                format!(
                    "{what} of {need} bytes runs past the end of the data section at byte {end}"
                ),
            )
        }
    };
    if end - pos < 8 {
        return Err(cut(8, "a record header"));
    }
    let (Some(kind), Some(misc), Some(size)) =
        (u32_at(bytes, pos), u16_at(bytes, pos + 4), u16_at(bytes, pos + 6))
    else {
        return Err(cut(8, "a record header"));
    };
    if size < 8 {
        return Err(Error::corrupt(
            pos as u64,
            format!("a record of type {kind} claims {size} bytes, fewer than its own header"),
        ));
    }
    let rec_end = pos + usize::from(size);
    if rec_end > end {
        return Err(cut(u64::from(size), "a record"));
    }
    let mut next = rec_end;
    if kind == RECORD_AUXTRACE {
        // The AUX data follows the record; its size is the body's first word.
        let extra = u64_at(bytes, pos + 8).unwrap_or(0);
        next = usize::try_from(extra)
            .ok()
            .and_then(|e| rec_end.checked_add(e))
            .filter(|&n| n <= end)
            .ok_or_else(|| {
                cut(u64::from(size).saturating_add(extra), "an AUXTRACE record's data")
            })?;
    }
    Ok(Some(Frame { offset: pos, kind, misc, end: rec_end, next }))
}

/// The records of a [`PerfData`] in file order. After an error it ends.
#[derive(Debug)]
pub struct Records<'d, 'a> {
    data: &'d PerfData<'a>,
    pos: usize,
    done: bool,
}

impl<'a> Records<'_, 'a> {
    fn next_frame(&mut self) -> Option<Result<Frame, Error>> {
        if self.done {
            return None;
        }
        let d = self.data;
        match frame(d.bytes, self.pos, d.data_end, d.data_open_ended) {
            Ok(Some(f)) => {
                self.pos = f.next;
                Some(Ok(f))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl<'a> Iterator for Records<'_, 'a> {
    type Item = Result<Record<'a>, Error>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let f = match self.next_frame()? {
            Ok(f) => f,
            Err(e) => return Some(Err(e)),
        };
        let r = self.data.decode(&f);
        if r.is_err() {
            self.done = true;
        }
        Some(r)
    }
}

/// A queued record: its time and where it is. Offsets grow in arrival order, so
/// (time, offset) orders equal times by arrival, as perf does.
#[derive(Debug, Clone, Copy)]
struct Queued {
    time: u64,
    offset: usize,
}

/// The records of a [`PerfData`] in `perf report`'s order (see the module notes). An
/// error in the data ends the stream after every record queued before it.
#[derive(Debug)]
pub struct Ordered<'d, 'a> {
    inner: Records<'d, 'a>,
    queue: Vec<Queued>,
    /// Offsets of records to deliver, in order.
    ready: VecDeque<usize>,
    next_flush: u64,
    max_time: u64,
    error: Option<Error>,
    finished: bool,
}

impl Ordered<'_, '_> {
    /// Moves queued records not later than `limit` to `ready`, in time order.
    fn flush(&mut self, limit: u64) {
        // The queue is the sorted rest of earlier rounds followed by this round's
        // records, each CPU's already in time order: a run-adaptive (stable) sort
        // merges those runs in near-linear time.
        self.queue.sort_by_key(|q| (q.time, q.offset));
        let n = self.queue.partition_point(|q| q.time <= limit);
        self.ready.extend(self.queue.drain(..n).map(|q| q.offset));
    }
}

impl<'a> Iterator for Ordered<'_, 'a> {
    type Item = Result<Record<'a>, Error>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(offset) = self.ready.pop_front() {
                let d = self.inner.data;
                let r = match frame(d.bytes, offset, d.data_end, d.data_open_ended) {
                    Ok(Some(f)) => d.decode(&f),
                    // Framed once already; cannot fail the second time.
                    Ok(None) => Err(Error::corrupt(offset as u64, "a record vanished")),
                    Err(e) => Err(e),
                };
                if r.is_err() {
                    // Undecodable: end here, as the file-order iterator would.
                    self.ready.clear();
                    self.queue.clear();
                    self.finished = true;
                    self.error = None;
                }
                return Some(r);
            }
            if self.finished {
                return self.error.take().map(Err);
            }
            match self.inner.next_frame() {
                None => {
                    self.flush(u64::MAX);
                    self.finished = true;
                }
                Some(Err(e)) => {
                    self.flush(u64::MAX);
                    self.error = Some(e);
                    self.finished = true;
                }
                Some(Ok(f)) if f.kind == RECORD_FINISHED_ROUND => {
                    self.flush(self.next_flush);
                    self.next_flush = self.max_time;
                    self.ready.push_back(f.offset);
                }
                Some(Ok(f)) => match self.inner.data.time_of(&f) {
                    Some(time) => {
                        self.max_time = self.max_time.max(time);
                        self.queue.push(Queued { time, offset: f.offset });
                    }
                    None => self.ready.push_back(f.offset),
                },
            }
        }
    }
}
