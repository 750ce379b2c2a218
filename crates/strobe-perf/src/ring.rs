//! The perf mmap ring buffer: reading the records the kernel writes for a sampling event.
//!
//! # What this module owns
//!
//! Mapping an event's ring buffer ([`RingBuffer::map`]), consuming the records between the
//! reader's tail and the kernel's head (copying the rare record that wraps around the end
//! of the buffer), decoding `PERF_RECORD_SAMPLE` bodies for the fixed-position sample
//! fields strobe uses ([`SampleLayout`]), counting the samples the kernel reports as lost
//! (`PERF_RECORD_LOST`, `PERF_RECORD_LOST_SAMPLES`), the wakeup policy that makes the
//! kernel wake a reader on a threshold rather than per record ([`Wakeup`]), and waiting for
//! that wakeup with `poll(2)` ([`poll_readable`]).
//!
//! It must never block inside the kernel's buffer (the kernel never waits for us: when the
//! buffer is full it drops records and says how many) and never hand out a record after
//! the tail that covers it has been published.
//!
//! # The protocol with the kernel, and why these orderings
//!
//! The first page of the mapping is `struct perf_event_mmap_page`; the data area follows
//! (`data_offset`, `data_size`, a power of two). The kernel is the only writer of
//! `data_head` and of the data; the reader is the only writer of `data_tail`. Both are
//! free-running byte counters: positions are taken modulo `data_size`. The kernel side
//! (`perf_output_put_handle` in kernel/events/ring_buffer.c) is:
//!
//! ```text
//!   kernel                              reader (this module)
//!   if (LOAD ->data_tail) {             LOAD ->data_head          (acquire)
//!       STORE $data                     LOAD $data
//!       smp_wmb()                       STORE ->data_tail         (release)
//!       STORE ->data_head
//!   }
//! ```
//!
//! - **Head is loaded with `Acquire`.** The kernel writes a record's bytes, then issues
//!   `smp_wmb()`, then publishes the new `data_head`. Our acquire load pairs with that
//!   barrier: every byte below the head we observe is visible to the loads that follow.
//!   A relaxed load would let the CPU (or compiler) read record bytes speculatively before
//!   the head and see stale data. This is the `smp_rmb()` the kernel documentation asks of
//!   readers, which `tools/include/linux/ring_buffer.h` also spells as a load-acquire.
//! - **Tail is stored with `Release`.** Publishing the tail hands the space back to the
//!   kernel, which will overwrite it. Every read of those bytes must be complete first;
//!   a release store orders all our earlier loads (and stores) before it, which is the
//!   full barrier the kernel's comment requires between "LOAD $data" and "STORE
//!   ->data_tail" (the kernel pairs it with the control dependency on its tail load).
//! - **Tail is loaded `Relaxed`.** Only this reader writes it, so it reads its own value.
//!
//! Because the mapping is writable (`PROT_WRITE`), the kernel honours `data_tail` and never
//! overwrites unread records; when full it counts the records it drops and later writes a
//! `PERF_RECORD_LOST` with the count, which [`RingBuffer::lost`] accumulates.
//!
//! Records are 8-byte aligned and their headers are 8 bytes, so a header never straddles
//! the end of the data area; a body may, and is then copied into a scratch buffer so the
//! callback always sees one contiguous slice.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::event::PerfEvent;
use crate::sys::{self, perf_event_attr, perf_event_header, perf_event_mmap_page};

/// How the kernel decides to wake a reader blocked in `poll(2)` on the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wakeup {
    /// Wake once this many bytes of records are waiting (`watermark = 1`,
    /// `wakeup_watermark`). The batching policy strobe uses: one wakeup per many records.
    Bytes(u32),
    /// Wake after every N samples (`wakeup_events`). `Events(1)` is the per-record wakeup
    /// to avoid on a hot path.
    Events(u32),
}

impl Wakeup {
    /// Writes this policy into `attr`.
    pub fn apply(self, attr: &mut perf_event_attr) {
        match self {
            Wakeup::Bytes(n) => {
                attr.set_watermark(1);
                attr.__bindgen_anon_2.wakeup_watermark = n.max(1);
            }
            Wakeup::Events(n) => {
                attr.set_watermark(0);
                attr.__bindgen_anon_2.wakeup_events = n.max(1);
            }
        }
    }
}

/// Why a ring buffer could not be mapped.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// The size is not a power of two number of pages.
    #[error("ring buffer of {0} data pages: the kernel needs a power of two (1, 2, 4, ...)")]
    BadSize(usize),
    /// `mmap` was refused for lack of locked-memory allowance.
    #[error(
        "mapping a {kib} KiB perf ring buffer was refused (EPERM): it exceeds the locked-memory \
         allowance; raise kernel.perf_event_mlock_kb or `ulimit -l`, or use fewer/smaller buffers"
    )]
    LockedMemory {
        /// Size of the mapping that was refused, in KiB.
        kib: usize,
    },
    /// `mmap` was refused for another reason.
    #[error("mapping the perf ring buffer failed: {source}{hint}")]
    Mmap {
        /// A hint derived from the errno, possibly empty.
        hint: &'static str,
        /// The errno.
        source: io::Error,
    },
}

/// One record from the ring, borrowed for the duration of the callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    /// `PERF_RECORD_SAMPLE`: the body, to decode with the event's [`SampleLayout`].
    Sample {
        /// `perf_event_header.misc` (e.g. `PERF_RECORD_MISC_USER`).
        misc: u16,
        /// The record body after the header.
        body: &'a [u8],
    },
    /// `PERF_RECORD_LOST` or `PERF_RECORD_LOST_SAMPLES`: the kernel dropped `lost` records
    /// of event `id` (0 for LOST_SAMPLES, which is per event and carries no id) because
    /// the buffer was full.
    Lost {
        /// The id of the event whose records were lost (`PERF_RECORD_LOST`), else 0.
        id: u64,
        /// How many records were dropped.
        lost: u64,
        /// `perf_event_header.type` (`PERF_RECORD_LOST` or `PERF_RECORD_LOST_SAMPLES`).
        kind: u32,
        /// The record body after the header (with `sample_id_all`, it ends with the
        /// sample-id fields of the task that was running when the kernel wrote it).
        body: &'a [u8],
    },
    /// Any other record type (mmap, comm, exit, throttle ...), undecoded.
    Other {
        /// `perf_event_header.type`.
        kind: u32,
        /// `perf_event_header.misc`.
        misc: u16,
        /// The record body after the header.
        body: &'a [u8],
    },
}

/// An event's mmap ring buffer and the reader's position in it.
///
/// The mapping stays valid after the [`PerfEvent`] it came from is dropped (the mapping
/// holds its own reference to the kernel buffer); the ring also keeps a duplicate of the
/// event's fd so it can be polled on its own.
#[derive(Debug)]
pub struct RingBuffer {
    base: NonNull<u8>,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
    fd: OwnedFd,
    scratch: Vec<u8>,
    lost: u64,
    lost_records: u64,
    /// Records whose body wrapped around the end of the data area (tests check the copy
    /// path runs).
    #[cfg(test)]
    wrapped: u64,
}

// SAFETY: the mapping is owned by this value alone (no other handle to it exists in this
// process except through the kernel), and every access goes through `&mut self` or the
// atomics in the metadata page, so moving it to another thread is sound.
unsafe impl Send for RingBuffer {}

/// The system page size (the unit of a ring buffer's size), 4096 if sysconf fails.
pub fn page_size() -> usize {
    // SAFETY: sysconf with a valid name has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

impl RingBuffer {
    /// Maps `event`'s ring buffer with `data_pages` pages of data (a power of two) plus
    /// the metadata page, writable so the kernel respects the reader's tail.
    ///
    /// The kernel refuses to map an inherited event that follows one task on all CPUs
    /// (`inherit` with `cpu == -1`): use one event per CPU (with `pid` and `inherit`) and
    /// redirect further events of the same CPU with [`PerfEvent::set_output`].
    pub fn map(event: &PerfEvent, data_pages: usize) -> Result<RingBuffer, RingError> {
        if data_pages == 0 || !data_pages.is_power_of_two() {
            return Err(RingError::BadSize(data_pages));
        }
        let page = page_size();
        let map_len = (data_pages + 1) * page;
        // SAFETY: mmap with a null hint, a length we computed, and a live perf fd; the
        // kernel validates everything and returns MAP_FAILED on error.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                event.raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let err = io::Error::last_os_error();
            return Err(match err.raw_os_error() {
                Some(libc::EPERM) => RingError::LockedMemory { kib: map_len / 1024 },
                Some(libc::EINVAL) => RingError::Mmap {
                    hint: "; an inherited event must be opened per CPU (cpu >= 0) to be mapped",
                    source: err,
                },
                _ => RingError::Mmap { hint: "", source: err },
            });
        }
        let base = NonNull::new(ptr.cast::<u8>()).ok_or(RingError::Mmap {
            hint: "",
            source: io::Error::other("mmap returned a null mapping"),
        })?;
        // SAFETY: F_DUPFD_CLOEXEC on a live fd returns a new fd or -1.
        let dup = unsafe { libc::fcntl(event.raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            let err = io::Error::last_os_error();
            // SAFETY: unmapping the mapping we just created, which nothing else references.
            unsafe { libc::munmap(ptr, map_len) };
            return Err(RingError::Mmap { hint: "", source: err });
        }
        // SAFETY: `dup` is a fresh fd owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(dup) };
        let meta = base.as_ptr().cast::<perf_event_mmap_page>();
        // SAFETY: the first page of the mapping is the kernel's perf_event_mmap_page; the
        // kernel fills data_offset/data_size at mmap time and never changes them.
        let (data_offset, data_size) = unsafe {
            (
                std::ptr::addr_of!((*meta).data_offset).read_volatile() as usize,
                std::ptr::addr_of!((*meta).data_size).read_volatile() as usize,
            )
        };
        // Kernels before 4.1 leave these zero; the layout is then one page + data.
        let (data_offset, data_size) =
            if data_size == 0 { (page, data_pages * page) } else { (data_offset, data_size) };
        Ok(RingBuffer {
            base,
            map_len,
            data_offset,
            data_size,
            fd,
            scratch: Vec::new(),
            lost: 0,
            lost_records: 0,
            #[cfg(test)]
            wrapped: 0,
        })
    }

    /// The (duplicated) event fd, for `poll(2)`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: `self.fd` is open for as long as `self` lives, which bounds the borrow.
        unsafe { BorrowedFd::borrow_raw(self.fd.as_raw_fd()) }
    }

    /// Size of the data area in bytes.
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// Samples the kernel reported as dropped so far (sum of `PERF_RECORD_LOST` counts).
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// How many `PERF_RECORD_LOST` records were seen (each one is a burst of losses).
    pub fn lost_records(&self) -> u64 {
        self.lost_records
    }

    fn head_atomic(&self) -> &AtomicU64 {
        let meta = self.base.as_ptr().cast::<perf_event_mmap_page>();
        // SAFETY: data_head is an 8-byte aligned u64 inside the metadata page, mapped for
        // the lifetime of `self`; the kernel writes it concurrently, so it is accessed only
        // atomically (AtomicU64 has the same layout as u64).
        unsafe { &*std::ptr::addr_of!((*meta).data_head).cast::<AtomicU64>() }
    }

    fn tail_atomic(&self) -> &AtomicU64 {
        let meta = self.base.as_ptr().cast::<perf_event_mmap_page>();
        // SAFETY: as `head_atomic`, for data_tail, which the kernel reads concurrently.
        unsafe { &*std::ptr::addr_of!((*meta).data_tail).cast::<AtomicU64>() }
    }

    /// Bytes of records waiting to be read.
    pub fn pending_bytes(&self) -> u64 {
        // Acquire: see the module doc (pairs with the kernel's smp_wmb before data_head).
        let head = self.head_atomic().load(Ordering::Acquire);
        // Relaxed: only this reader stores the tail.
        let tail = self.tail_atomic().load(Ordering::Relaxed);
        head.wrapping_sub(tail)
    }

    /// Copies `len` bytes of the data area starting at ring position `pos` into `out`
    /// (handling the wrap).
    fn copy_out(&self, pos: u64, len: usize, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(len);
        let start = (pos as usize) & (self.data_size - 1);
        let first = len.min(self.data_size - start);
        // SAFETY: [start, start+first) and [0, len-first) lie inside the data area, which
        // is mapped for the lifetime of `self`; the kernel does not write between our tail
        // and its published head, and these bytes are below the head (see `read`).
        unsafe {
            let data = self.base.as_ptr().add(self.data_offset);
            out.extend_from_slice(std::slice::from_raw_parts(data.add(start), first));
            out.extend_from_slice(std::slice::from_raw_parts(data, len - first));
        }
    }

    /// Hands every record the kernel has published to `f`, oldest first, then returns the
    /// space to the kernel in one tail update. Returns the number of records read.
    ///
    /// Lost-record notices are counted into [`lost`](Self::lost) and also passed to `f`.
    /// A record with an impossible size (which would mean a corrupt buffer) stops the read
    /// and skips everything published so far, counting it as one lost record burst.
    pub fn read(&mut self, mut f: impl FnMut(Record<'_>)) -> usize {
        // Acquire pairs with the kernel's smp_wmb() before it stores data_head: all record
        // bytes below `head` are visible after this load (module doc).
        let head = self.head_atomic().load(Ordering::Acquire);
        // Relaxed: we are the only writer of data_tail.
        let mut tail = self.tail_atomic().load(Ordering::Relaxed);
        let hdr_len = std::mem::size_of::<perf_event_header>();
        let mut n = 0;
        let mut scratch = std::mem::take(&mut self.scratch);
        while head.wrapping_sub(tail) >= hdr_len as u64 {
            let start = (tail as usize) & (self.data_size - 1);
            // SAFETY: headers are 8-byte aligned and 8 bytes long and the data area is a
            // multiple of 8 bytes, so the header lies entirely at [start, start+8) inside
            // the mapping, below the head we acquired.
            let hdr: perf_event_header = unsafe {
                self.base
                    .as_ptr()
                    .add(self.data_offset + start)
                    .cast::<perf_event_header>()
                    .read_unaligned()
            };
            let size = hdr.size as usize;
            if size < hdr_len || size as u64 > head.wrapping_sub(tail) || size % 8 != 0 {
                // Corrupt or torn: drop everything up to the head rather than misparse.
                self.lost_records += 1;
                tail = head;
                break;
            }
            let body_len = size - hdr_len;
            let body_pos = tail.wrapping_add(hdr_len as u64);
            let body_start = (body_pos as usize) & (self.data_size - 1);
            let body: &[u8] = if body_start + body_len <= self.data_size {
                // SAFETY: the body is contiguous inside the data area, below the head, and
                // the kernel will not write it until we publish a tail past it (below).
                unsafe {
                    std::slice::from_raw_parts(
                        self.base.as_ptr().add(self.data_offset + body_start),
                        body_len,
                    )
                }
            } else {
                self.copy_out(body_pos, body_len, &mut scratch);
                #[cfg(test)]
                {
                    self.wrapped += 1;
                }
                &scratch
            };
            let rec = match hdr.type_ {
                sys::PERF_RECORD_SAMPLE => Record::Sample { misc: hdr.misc, body },
                kind @ sys::PERF_RECORD_LOST => {
                    let id = word(body, 0).unwrap_or(0);
                    let lost = word(body, 1).unwrap_or(0);
                    Record::Lost { id, lost, kind, body }
                }
                kind @ sys::PERF_RECORD_LOST_SAMPLES => {
                    Record::Lost { id: 0, lost: word(body, 0).unwrap_or(0), kind, body }
                }
                kind => Record::Other { kind, misc: hdr.misc, body },
            };
            if let Record::Lost { lost, .. } = rec {
                self.lost += lost;
                self.lost_records += 1;
            }
            f(rec);
            n += 1;
            tail = tail.wrapping_add(size as u64);
        }
        self.scratch = scratch;
        // Release: every read of the records above completes before the kernel can see
        // the space as free and overwrite it (the full barrier of the module doc).
        self.tail_atomic().store(tail, Ordering::Release);
        n
    }
}

impl Drop for RingBuffer {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping `map` created; no borrow of it outlives
        // `self` (records are only lent to callbacks inside `read`).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.map_len) };
    }
}

/// The `i`th native-endian u64 of `b`.
fn word(b: &[u8], i: usize) -> Option<u64> {
    let s = b.get(i * 8..i * 8 + 8)?;
    Some(u64::from_ne_bytes(s.try_into().ok()?))
}

/// The sample fields strobe decodes, in the order the kernel writes them. Each is present
/// only if its `PERF_SAMPLE_*` bit was set in the event's `sample_type`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample {
    /// `PERF_SAMPLE_IDENTIFIER`: the event id, first in the record.
    pub identifier: Option<u64>,
    /// `PERF_SAMPLE_IP`.
    pub ip: Option<u64>,
    /// `PERF_SAMPLE_TID`: process id.
    pub pid: Option<u32>,
    /// `PERF_SAMPLE_TID`: thread id.
    pub tid: Option<u32>,
    /// `PERF_SAMPLE_TIME`: nanoseconds of the event's clock (CLOCK_MONOTONIC with
    /// [`use_monotonic_clock`]).
    pub time: Option<u64>,
    /// `PERF_SAMPLE_ADDR`.
    pub addr: Option<u64>,
    /// `PERF_SAMPLE_ID`: the event id.
    pub id: Option<u64>,
    /// `PERF_SAMPLE_STREAM_ID`: the id of the event this one was inherited from.
    pub stream_id: Option<u64>,
    /// `PERF_SAMPLE_CPU`.
    pub cpu: Option<u32>,
    /// `PERF_SAMPLE_PERIOD`.
    pub period: Option<u64>,
}

impl Sample {
    /// The event id from `IDENTIFIER` or `ID`, whichever was sampled.
    pub fn event_id(&self) -> Option<u64> {
        self.identifier.or(self.id)
    }
}

/// The bits of `sample_type` that [`SampleLayout`] decodes. Fields the kernel writes after
/// these (READ, CALLCHAIN, RAW, ...) are allowed and left undecoded.
pub const DECODED_SAMPLE_BITS: u64 = (sys::PERF_SAMPLE_IDENTIFIER
    | sys::PERF_SAMPLE_IP
    | sys::PERF_SAMPLE_TID
    | sys::PERF_SAMPLE_TIME
    | sys::PERF_SAMPLE_ADDR
    | sys::PERF_SAMPLE_ID
    | sys::PERF_SAMPLE_STREAM_ID
    | sys::PERF_SAMPLE_CPU
    | sys::PERF_SAMPLE_PERIOD) as u64;

/// Decodes `PERF_RECORD_SAMPLE` bodies of events opened with a given `sample_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleLayout {
    sample_type: u64,
}

impl SampleLayout {
    /// The layout for events opened with `sample_type`.
    pub fn new(sample_type: u64) -> SampleLayout {
        SampleLayout { sample_type }
    }

    /// Decodes the leading fields of a sample body; `None` if the body is too short for
    /// the fields `sample_type` announces.
    pub fn parse(&self, body: &[u8]) -> Option<Sample> {
        let t = self.sample_type;
        let has = |bit: u32| t & u64::from(bit) != 0;
        let mut i = 0usize;
        let mut next = || {
            let w = word(body, i);
            i += 1;
            w
        };
        let mut s = Sample::default();
        if has(sys::PERF_SAMPLE_IDENTIFIER) {
            s.identifier = Some(next()?);
        }
        if has(sys::PERF_SAMPLE_IP) {
            s.ip = Some(next()?);
        }
        if has(sys::PERF_SAMPLE_TID) {
            let w = next()?;
            // The kernel writes `u32 pid, u32 tid`: in a native-endian u64 read, pid is the
            // low half on little-endian machines and the high half on big-endian ones.
            let (pid, tid) = split_u32_pair(w);
            s.pid = Some(pid);
            s.tid = Some(tid);
        }
        if has(sys::PERF_SAMPLE_TIME) {
            s.time = Some(next()?);
        }
        if has(sys::PERF_SAMPLE_ADDR) {
            s.addr = Some(next()?);
        }
        if has(sys::PERF_SAMPLE_ID) {
            s.id = Some(next()?);
        }
        if has(sys::PERF_SAMPLE_STREAM_ID) {
            s.stream_id = Some(next()?);
        }
        if has(sys::PERF_SAMPLE_CPU) {
            // `u32 cpu, u32 res`.
            s.cpu = Some(split_u32_pair(next()?).0);
        }
        if has(sys::PERF_SAMPLE_PERIOD) {
            s.period = Some(next()?);
        }
        Some(s)
    }
}

/// Splits a u64 read natively from two consecutive u32s into (first, second).
fn split_u32_pair(w: u64) -> (u32, u32) {
    let b = w.to_ne_bytes();
    let first = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
    let second = u32::from_ne_bytes([b[4], b[5], b[6], b[7]]);
    (first, second)
}

/// Stamps samples with CLOCK_MONOTONIC (`use_clockid`), so their times compare with
/// `clock_gettime(CLOCK_MONOTONIC)` in user space and across CPUs' buffers. Every event
/// sharing a buffer through [`PerfEvent::set_output`] must use the same clock.
pub fn use_monotonic_clock(attr: &mut perf_event_attr) {
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
}

/// Now, on CLOCK_MONOTONIC, in nanoseconds: the clock of [`use_monotonic_clock`].
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through the pointer; CLOCK_MONOTONIC
    // always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Waits until one of `fds` is readable (a ring crossed its wakeup threshold, or a pidfd's
/// process exited), `timeout` passes, or a signal arrives. Returns, for each fd, whether it
/// is ready (`POLLIN` or `POLLHUP`); all false on timeout or `EINTR`.
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|fd| libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 })
        .collect();
    let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as i32);
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structs for the call.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if r < 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![false; fds.len()]);
        }
        return Err(err);
    }
    Ok(pfds.iter().map(|p| p.revents & (libc::POLLIN | libc::POLLHUP) != 0).collect())
}

/// The raw fd of a ring, for callers that poll many rings together with other fds.
impl AsRawFd for RingBuffer {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Target;
    use crate::sys::{new_attr, PERF_COUNT_SW_PAGE_FAULTS, PERF_TYPE_SOFTWARE};

    // 8 (header) + 4 * 8 = 40-byte samples: 4096 is not a multiple of 40, so records
    // straddle the end of a one-page ring as it wraps.
    const SAMPLE_TYPE: u64 = (sys::PERF_SAMPLE_IDENTIFIER
        | sys::PERF_SAMPLE_IP
        | sys::PERF_SAMPLE_TID
        | sys::PERF_SAMPLE_TIME
        | sys::PERF_SAMPLE_CPU) as u64;

    /// A page-fault event on the calling thread sampling every fault into a ring.
    fn fault_sampler(wakeup: Wakeup) -> PerfEvent {
        let mut attr = new_attr(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS as u64);
        attr.__bindgen_anon_1.sample_period = 1;
        attr.sample_type = SAMPLE_TYPE;
        use_monotonic_clock(&mut attr);
        wakeup.apply(&mut attr);
        PerfEvent::open(&attr, Target::CALLING_THREAD, None, "page-faults")
            .expect("software events work at the default perf_event_paranoid")
    }

    /// Touches `pages` fresh anonymous pages: each first touch is one page fault.
    fn fault_pages(pages: usize) {
        let len = pages * page_size();
        // SAFETY: a fresh private anonymous mapping, written only inside its bounds and
        // unmapped before returning.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            for i in 0..pages {
                p.cast::<u8>().add(i * page_size()).write_volatile(1);
            }
            libc::munmap(p, len);
        }
    }

    struct Tally {
        samples: u64,
        lost: u64,
        last_time: u64,
        out_of_order: u64,
        wrong_tid: u64,
    }

    fn drain(ring: &mut RingBuffer, layout: SampleLayout, id: u64, t: &mut Tally) {
        let tid = sys::gettid() as u32;
        ring.read(|rec| match rec {
            Record::Sample { body, .. } => {
                let s = layout.parse(body).expect("a full sample body");
                assert_eq!(s.event_id(), Some(id));
                t.samples += 1;
                if s.tid != Some(tid) || s.pid != Some(std::process::id()) {
                    t.wrong_tid += 1;
                }
                let time = s.time.unwrap();
                if time < t.last_time {
                    t.out_of_order += 1;
                }
                t.last_time = time;
            }
            Record::Lost { lost, .. } => t.lost += lost,
            Record::Other { .. } => {}
        });
    }

    #[test]
    fn samples_wrap_around_a_small_ring_without_loss() {
        // One data page holds ~100 samples of 40 bytes; 40 rounds of 64 faults wrap it
        // about 25 times, with records straddling the end on the way.
        let ev = fault_sampler(Wakeup::Bytes(2048));
        let mut ring = RingBuffer::map(&ev, 1).unwrap();
        assert_eq!(ring.data_size(), page_size());
        let layout = SampleLayout::new(SAMPLE_TYPE);
        let id = ev.id().unwrap();
        let t0 = monotonic_ns();
        let mut t = Tally { samples: 0, lost: 0, last_time: t0, out_of_order: 0, wrong_tid: 0 };
        ev.enable().unwrap();
        for _ in 0..40 {
            fault_pages(64);
            drain(&mut ring, layout, id, &mut t);
        }
        ev.disable().unwrap();
        drain(&mut ring, layout, id, &mut t);
        let count = ev.read_count().unwrap();
        assert!(count >= 40 * 64, "at least one fault per touched page, got {count}");
        assert_eq!(t.lost, 0, "the reader kept up, so nothing may be lost");
        assert_eq!(t.samples, count, "one sample per fault with sample_period=1");
        assert_eq!(t.wrong_tid, 0, "every sample names this thread");
        assert_eq!(t.out_of_order, 0, "one thread's samples come in time order");
        assert!(t.last_time >= t0 && t.last_time <= monotonic_ns(), "times are CLOCK_MONOTONIC");
        assert_eq!(ring.pending_bytes(), 0);
        assert!(ring.wrapped > 0, "some records straddled the end and were reassembled");
    }

    #[test]
    fn a_full_ring_reports_what_it_lost() {
        let ev = fault_sampler(Wakeup::Bytes(2048));
        let mut ring = RingBuffer::map(&ev, 1).unwrap();
        let layout = SampleLayout::new(SAMPLE_TYPE);
        let id = ev.id().unwrap();
        let mut t = Tally { samples: 0, lost: 0, last_time: 0, out_of_order: 0, wrong_tid: 0 };
        ev.enable().unwrap();
        // Far more samples than one page holds, without reading: the kernel must drop.
        fault_pages(1024);
        drain(&mut ring, layout, id, &mut t);
        // The LOST record is written once there is room again: make room, fault more.
        fault_pages(16);
        ev.disable().unwrap();
        drain(&mut ring, layout, id, &mut t);
        let count = ev.read_count().unwrap();
        assert!(t.lost > 0 && ring.lost() == t.lost && ring.lost_records() > 0);
        assert_eq!(t.samples + t.lost, count, "every fault is either a sample or counted lost");
    }

    #[test]
    fn the_watermark_wakes_the_reader_on_a_threshold_not_per_record() {
        // 1 KiB watermark = about 25 samples of 40 bytes.
        let ev = fault_sampler(Wakeup::Bytes(1024));
        let ring = RingBuffer::map(&ev, 4).unwrap();
        ev.enable().unwrap();
        fault_pages(4);
        let ready = poll_readable(&[ring.fd()], Some(Duration::ZERO)).unwrap();
        assert!(!ready[0], "4 samples are below the watermark: no wakeup yet");
        fault_pages(64);
        let ready = poll_readable(&[ring.fd()], Some(Duration::from_secs(5))).unwrap();
        ev.disable().unwrap();
        assert!(ready[0], "crossing the watermark wakes the reader");
        assert!(ring.pending_bytes() >= 1024);
    }

    #[test]
    fn bad_sizes_are_refused() {
        let ev = fault_sampler(Wakeup::Events(1));
        assert!(matches!(RingBuffer::map(&ev, 3), Err(RingError::BadSize(3))));
        assert!(matches!(RingBuffer::map(&ev, 0), Err(RingError::BadSize(0))));
    }

    #[test]
    fn sample_layout_decodes_fields_in_kernel_order() {
        let st = (sys::PERF_SAMPLE_IDENTIFIER
            | sys::PERF_SAMPLE_IP
            | sys::PERF_SAMPLE_TID
            | sys::PERF_SAMPLE_TIME
            | sys::PERF_SAMPLE_CPU
            | sys::PERF_SAMPLE_PERIOD) as u64;
        let mut body = Vec::new();
        for w in [
            7u64,
            0x4000,
            u64::from_ne_bytes(
                [10u32.to_ne_bytes(), 11u32.to_ne_bytes()].concat().try_into().unwrap(),
            ),
            123,
            u64::from_ne_bytes(
                [1u32.to_ne_bytes(), 0u32.to_ne_bytes()].concat().try_into().unwrap(),
            ),
            1,
        ] {
            body.extend_from_slice(&w.to_ne_bytes());
        }
        let s = SampleLayout::new(st).parse(&body).unwrap();
        assert_eq!(s.event_id(), Some(7));
        assert_eq!(
            (s.ip, s.pid, s.tid, s.time, s.cpu, s.period),
            (Some(0x4000), Some(10), Some(11), Some(123), Some(1), Some(1))
        );
        assert!(SampleLayout::new(st).parse(&body[..40]).is_none(), "truncated body");
    }
}
