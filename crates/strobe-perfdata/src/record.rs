//! The records of a perf.data data section, typed: samples, the side-band records a
//! report needs (MMAP, MMAP2, COMM, FORK, EXIT, LOST, LOST_SAMPLES, SWITCH,
//! SWITCH_CPU_WIDE, THROTTLE/UNTHROTTLE), the round marker, and every other record as
//! raw bytes. Non-sample records of an attr with `sample_id_all` end with a sample-id
//! trailer, decoded into [`SampleId`].
//!
//! This module must never decide which attr a record belongs to (the reader does) or
//! what a record means for a report.

use crate::abi::*;
use crate::attr::Attr;
use crate::bytes::{until_nul, Cursor};
use crate::sample::Sample;

/// The fields that identify where and when a record was written: a sample's own
/// fields, or a non-sample record's trailer. Absent fields are `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampleId {
    /// Process id.
    pub pid: Option<u32>,
    /// Thread id.
    pub tid: Option<u32>,
    /// Timestamp.
    pub time: Option<u64>,
    /// Event id (`ID` or `IDENTIFIER`).
    pub id: Option<u64>,
    /// Stream id.
    pub stream_id: Option<u64>,
    /// CPU.
    pub cpu: Option<u32>,
}

impl SampleId {
    /// Decodes a trailer (exactly `attr.trailer_len()` bytes).
    pub(crate) fn decode_trailer(b: &[u8], attr: &Attr) -> Option<SampleId> {
        let t = attr.sample_type;
        let mut c = Cursor::new(b);
        let mut s = SampleId::default();
        if t & SAMPLE_TID != 0 {
            let (pid, tid) = c.u32_pair()?;
            s.pid = Some(pid);
            s.tid = Some(tid);
        }
        if t & SAMPLE_TIME != 0 {
            s.time = Some(c.u64()?);
        }
        if t & SAMPLE_ID != 0 {
            s.id = Some(c.u64()?);
        }
        if t & SAMPLE_STREAM_ID != 0 {
            s.stream_id = Some(c.u64()?);
        }
        if t & SAMPLE_CPU != 0 {
            s.cpu = Some(c.u32_pair()?.0);
        }
        if t & SAMPLE_IDENTIFIER != 0 {
            s.id = Some(c.u64()?);
        }
        Some(s)
    }

    /// The same fields of a sample.
    pub fn of_sample(s: &Sample<'_>) -> SampleId {
        SampleId {
            pid: s.pid(),
            tid: s.tid(),
            time: s.time(),
            id: s.identifier().or_else(|| s.id()),
            stream_id: s.stream_id(),
            cpu: s.cpu(),
        }
    }
}

/// The privilege level a record was taken at (`misc & PERF_RECORD_MISC_CPUMODE_MASK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CpuMode {
    /// Unknown (0).
    Unknown,
    /// The kernel.
    Kernel,
    /// User space.
    User,
    /// The hypervisor.
    Hypervisor,
    /// A guest's kernel.
    GuestKernel,
    /// A guest's user space.
    GuestUser,
}

impl CpuMode {
    /// The mode of a record header's `misc`.
    pub fn of_misc(misc: u16) -> CpuMode {
        match misc & MISC_CPUMODE_MASK {
            1 => CpuMode::Kernel,
            2 => CpuMode::User,
            3 => CpuMode::Hypervisor,
            4 => CpuMode::GuestKernel,
            5 => CpuMode::GuestUser,
            _ => CpuMode::Unknown,
        }
    }
}

/// A mapping (PERF_RECORD_MMAP or MMAP2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mmap<'a> {
    /// Process id (`u32::MAX`, perf's -1, for the kernel and its modules).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Offset in the file of the byte at `addr`.
    pub pgoff: u64,
    /// The mapped file's path (or a pseudo name such as `[vdso]`), as bytes.
    pub filename: &'a [u8],
    /// MMAP2 only: device, inode and generation, or a build id.
    pub mmap2: Option<Mmap2Extra<'a>>,
    /// MMAP only: `PERF_RECORD_MISC_MMAP_DATA` (a data mapping).
    pub data: bool,
}

impl Mmap<'_> {
    /// The path as text (invalid UTF-8 replaced).
    pub fn path(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.filename)
    }

    /// True when the mapping holds code: MMAP2's `prot` has `PROT_EXEC`; an MMAP is
    /// code unless it carries `PERF_RECORD_MISC_MMAP_DATA`.
    pub fn is_exec(&self) -> bool {
        match self.mmap2 {
            Some(m) => m.prot & 4 != 0,
            None => !self.data,
        }
    }
}

/// What MMAP2 adds to MMAP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mmap2Extra<'a> {
    /// Device, inode and inode generation; `None` when the record carries a build id.
    pub inode: Option<(u32, u32, u64, u64)>,
    /// The build id (`PERF_RECORD_MISC_MMAP_BUILD_ID`), at most 20 bytes.
    pub build_id: Option<&'a [u8]>,
    /// `PROT_*` bits.
    pub prot: u32,
    /// `MAP_*` flags.
    pub flags: u32,
}

/// A task's name (PERF_RECORD_COMM).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Comm<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The name, as bytes.
    pub comm: &'a [u8],
    /// True when the name changed because the process exec'd (`COMM_EXEC`).
    pub exec: bool,
}

/// A task created or ended (PERF_RECORD_FORK / PERF_RECORD_EXIT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Task {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Thread id.
    pub tid: u32,
    /// Parent thread id.
    pub ptid: u32,
    /// Timestamp.
    pub time: u64,
}

/// A context switch (PERF_RECORD_SWITCH or SWITCH_CPU_WIDE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switch {
    /// True for a switch out, false for a switch in.
    pub out: bool,
    /// A switch out by preemption (the task was runnable).
    pub preempt: bool,
    /// SWITCH_CPU_WIDE only: the (pid, tid) switched to (out) or from (in).
    pub next_prev: Option<(u32, u32)>,
}

/// Throttling of an event (PERF_RECORD_THROTTLE / UNTHROTTLE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    /// Timestamp.
    pub time: u64,
    /// Event id.
    pub id: u64,
    /// Stream id.
    pub stream_id: u64,
}

/// What a record is.
// Samples are most records and are decoded in place: boxing the large variant would
// allocate per sample.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// PERF_RECORD_SAMPLE.
    Sample(Sample<'a>),
    /// PERF_RECORD_MMAP or MMAP2.
    Mmap(Mmap<'a>),
    /// PERF_RECORD_COMM.
    Comm(Comm<'a>),
    /// PERF_RECORD_FORK.
    Fork(Task),
    /// PERF_RECORD_EXIT.
    Exit(Task),
    /// PERF_RECORD_LOST: the kernel dropped `lost` records of event `id` (ring full).
    Lost {
        /// Event id.
        id: u64,
        /// Records lost.
        lost: u64,
    },
    /// PERF_RECORD_LOST_SAMPLES: samples lost (e.g. to a full AUX buffer).
    LostSamples {
        /// Samples lost.
        lost: u64,
    },
    /// PERF_RECORD_SWITCH or SWITCH_CPU_WIDE.
    Switch(Switch),
    /// PERF_RECORD_THROTTLE.
    Throttle(Throttle),
    /// PERF_RECORD_UNTHROTTLE.
    Unthrottle(Throttle),
    /// PERF_RECORD_FINISHED_ROUND (perf's own).
    FinishedRound,
    /// Any other record: its body (after the header, trailer included).
    Other(&'a [u8]),
}

/// One record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Byte offset of the record's header in the file or stream.
    pub offset: u64,
    /// `header.type`.
    pub kind: u32,
    /// `header.misc`.
    pub misc: u16,
    /// The attr the record belongs to (index into [`crate::PerfData::attrs`]), from the
    /// record's event id (or the only attr). `None` for perf's own records, and for a
    /// record whose id names no attr: a sample is then [`Event::Other`], as it cannot
    /// be decoded without its attr.
    pub attr: Option<usize>,
    /// Where and when a non-sample record was written: its sample-id trailer (empty
    /// for samples, whose own fields say it: [`Record::id_fields`] gives either).
    pub sample_id: SampleId,
    /// The decoded record.
    pub event: Event<'a>,
}

impl Record<'_> {
    /// The privilege level from `misc`.
    pub fn cpumode(&self) -> CpuMode {
        CpuMode::of_misc(self.misc)
    }

    /// Where and when the record was written: a sample's own fields, another record's
    /// trailer.
    pub fn id_fields(&self) -> SampleId {
        match &self.event {
            Event::Sample(s) => SampleId::of_sample(s),
            _ => self.sample_id,
        }
    }
}

/// Decodes one record as the kernel wrote it into a perf ring buffer for an event opened
/// with `attr` (the reader of a live ring has no file around it): a SAMPLE decoded per
/// `attr.sample_type`, any other kernel record split from its sample-id trailer. `None`
/// when the body is shorter than its fields.
pub fn decode_ring_record<'a>(
    kind: u32,
    misc: u16,
    body: &'a [u8],
    attr: &Attr,
) -> Option<(Event<'a>, SampleId)> {
    if kind == RECORD_SAMPLE {
        let s = Sample::decode(body, attr)?;
        return Some((Event::Sample(s), SampleId::of_sample(&s)));
    }
    let split = body.len().checked_sub(attr.trailer_len())?;
    let (fields, trailer) = body.split_at(split);
    let id = if trailer.is_empty() {
        SampleId::default()
    } else {
        SampleId::decode_trailer(trailer, attr)?
    };
    Some((decode_other(kind, misc, fields)?, id))
}

/// Decodes a non-sample kernel record's body (`body` excludes the trailer).
pub(crate) fn decode_other(kind: u32, misc: u16, body: &[u8]) -> Option<Event<'_>> {
    let mut c = Cursor::new(body);
    Some(match kind {
        RECORD_MMAP | RECORD_MMAP2 => {
            let (pid, tid) = c.u32_pair()?;
            let (addr, len, pgoff) = (c.u64()?, c.u64()?, c.u64()?);
            let mmap2 = if kind == RECORD_MMAP2 {
                let (inode, build_id) = if misc & MISC_MMAP_BUILD_ID != 0 {
                    let size = c.take(4)?.first().copied().unwrap_or(0);
                    let id = c.take(20)?;
                    (None, Some(id.get(..usize::from(size).min(20)).unwrap_or(id)))
                } else {
                    let (maj, min) = c.u32_pair()?;
                    (Some((maj, min, c.u64()?, c.u64()?)), None)
                };
                let (prot, flags) = c.u32_pair()?;
                Some(Mmap2Extra { inode, build_id, prot, flags })
            } else {
                None
            };
            Event::Mmap(Mmap {
                pid,
                tid,
                addr,
                len,
                pgoff,
                filename: until_nul(c.rest()),
                mmap2,
                data: kind == RECORD_MMAP && misc & MISC_MMAP_DATA != 0,
            })
        }
        RECORD_COMM => {
            let (pid, tid) = c.u32_pair()?;
            Event::Comm(Comm {
                pid,
                tid,
                comm: until_nul(c.rest()),
                exec: misc & MISC_COMM_EXEC != 0,
            })
        }
        RECORD_FORK | RECORD_EXIT => {
            let (pid, ppid) = c.u32_pair()?;
            let (tid, ptid) = c.u32_pair()?;
            let t = Task { pid, ppid, tid, ptid, time: c.u64()? };
            if kind == RECORD_FORK {
                Event::Fork(t)
            } else {
                Event::Exit(t)
            }
        }
        RECORD_LOST => Event::Lost { id: c.u64()?, lost: c.u64()? },
        RECORD_LOST_SAMPLES => Event::LostSamples { lost: c.u64()? },
        RECORD_SWITCH | RECORD_SWITCH_CPU_WIDE => Event::Switch(Switch {
            out: misc & MISC_SWITCH_OUT != 0,
            preempt: misc & MISC_SWITCH_OUT_PREEMPT != 0,
            next_prev: if kind == RECORD_SWITCH_CPU_WIDE { Some(c.u32_pair()?) } else { None },
        }),
        RECORD_THROTTLE | RECORD_UNTHROTTLE => {
            let t = Throttle { time: c.u64()?, id: c.u64()?, stream_id: c.u64()? };
            if kind == RECORD_THROTTLE {
                Event::Throttle(t)
            } else {
                Event::Unthrottle(t)
            }
        }
        _ => Event::Other(body),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[u64]) -> Vec<u8> {
        w.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn mmap2_with_inode_and_with_build_id() {
        let mut b =
            words(&[7 | (8 << 32), 0x1000, 0x2000, 0x3000, 1 | (2 << 32), 99, 3, 5 | (2 << 32)]);
        b.extend(b"/bin/x\0\0");
        let Some(Event::Mmap(m)) = decode_other(RECORD_MMAP2, 0, &b) else { panic!() };
        assert_eq!((m.pid, m.tid, m.addr, m.len, m.pgoff), (7, 8, 0x1000, 0x2000, 0x3000));
        assert_eq!(m.filename, b"/bin/x");
        let x = m.mmap2.unwrap();
        assert_eq!((x.inode, x.prot, x.flags), (Some((1, 2, 99, 3)), 5, 2));
        assert!(m.is_exec());

        let mut b = words(&[1, 0, 0, 0]);
        b.extend([4u8, 0, 0, 0]);
        b.extend([0xab; 20]);
        b.extend(1u32.to_le_bytes()); // PROT_READ only
        b.extend(0u32.to_le_bytes());
        b.extend(b"[vdso]\0\0");
        let Some(Event::Mmap(m)) = decode_other(RECORD_MMAP2, MISC_MMAP_BUILD_ID, &b) else {
            panic!()
        };
        let x = m.mmap2.unwrap();
        assert_eq!((x.inode, x.build_id), (None, Some(&[0xab; 4][..])));
        assert!(!m.is_exec());
        assert_eq!(m.path(), "[vdso]");
    }

    #[test]
    fn short_bodies_are_none() {
        assert_eq!(decode_other(RECORD_FORK, 0, &words(&[1, 2])), None);
        assert_eq!(decode_other(RECORD_LOST, 0, &words(&[1])), None);
        assert_eq!(decode_other(RECORD_SWITCH_CPU_WIDE, 0, &[]), None);
        assert_eq!(
            decode_other(RECORD_SWITCH, MISC_SWITCH_OUT, &[])
                .map(|e| matches!(e, Event::Switch(Switch { out: true, .. }))),
            Some(true)
        );
        assert_eq!(decode_other(200, 0, b"xy"), Some(Event::Other(b"xy")));
    }

    #[test]
    fn ring_records_split_their_trailer_and_samples_decode_for_the_attr() {
        let a = Attr {
            sample_type: SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME,
            flags: ATTR_SAMPLE_ID_ALL,
            ..Attr::default()
        };
        // EXIT: pid, ppid, tid, ptid, time; trailer: tid, time, identifier.
        let mut b = words(&[5 | (1 << 32), 5 | (1 << 32), 77]);
        b.extend(words(&[5 | (5 << 32), 78, 9]));
        let (e, id) = decode_ring_record(RECORD_EXIT, 0, &b, &a).unwrap();
        assert!(matches!(e, Event::Exit(Task { pid: 5, ppid: 1, tid: 5, time: 77, .. })));
        assert_eq!((id.pid, id.tid, id.time, id.id), (Some(5), Some(5), Some(78), Some(9)));
        let s = words(&[9, 0x4000, 5 | (6 << 32), 100]);
        let (e, id) = decode_ring_record(RECORD_SAMPLE, 2, &s, &a).unwrap();
        let Event::Sample(s) = e else { panic!() };
        assert_eq!((s.ip(), id.tid, id.time, id.id), (Some(0x4000), Some(6), Some(100), Some(9)));
        assert_eq!(decode_ring_record(RECORD_SAMPLE, 2, &words(&[9, 1]), &a), None);
        assert_eq!(decode_ring_record(RECORD_EXIT, 0, &words(&[1]), &a), None);
    }

    #[test]
    fn trailer_fields_in_kernel_order() {
        let a = Attr {
            sample_type: SAMPLE_TID | SAMPLE_TIME | SAMPLE_ID | SAMPLE_CPU | SAMPLE_IDENTIFIER,
            flags: ATTR_SAMPLE_ID_ALL,
            ..Attr::default()
        };
        let s = SampleId::decode_trailer(&words(&[3 | (4 << 32), 1000, 55, 1, 55]), &a).unwrap();
        assert_eq!(
            s,
            SampleId {
                pid: Some(3),
                tid: Some(4),
                time: Some(1000),
                id: Some(55),
                stream_id: None,
                cpu: Some(1)
            }
        );
    }
}
