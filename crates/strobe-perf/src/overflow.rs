//! The group's values at the instant of each overflow, read from the overflow's own
//! signal handler: the leader samples `PERF_SAMPLE_READ` into the smallest ring the
//! kernel allows (one metadata page and one data page), and the handler copies each
//! record's words out.
//!
//! Why: a SIGTRAP is delivered only on the way back to user space, so an overflow inside
//! a system call is handled when the call returns. Reading the group in the handler gives
//! the values at that return, not at the overflow; the kernel's record gives the values at
//! the overflow itself, and the difference is the part of the call that ran after it.
//!
//! Owns: mapping and unmapping such a ring, and an allocation-free, lock-free reader of its
//! sample records that a signal handler may call. Must never allocate, block or panic in
//! [`OverflowRing::drain`], and never publish a tail past a record it has not copied.
//!
//! The protocol with the kernel and its orderings are those of [`crate::ring`] (module
//! note there): acquire `data_head`, copy the records below it, release `data_tail`.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::ring::page_size;
use crate::sys::{self, perf_event_header, perf_event_mmap_page};

/// The most words of one record body [`OverflowRing::drain`] hands out (a group read of
/// `nr, time_enabled, time_running` and up to 13 values).
pub const MAX_WORDS: usize = 16;

/// A mapped one-page ring of an event that samples `PERF_SAMPLE_READ` only.
#[derive(Debug)]
pub struct OverflowRing {
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the mapping belongs to this value; every access to the kernel-shared words is
// atomic and the data reads are below the published head (see `drain`).
unsafe impl Send for OverflowRing {}
// SAFETY: as above; `drain` takes `&self` but only its one caller (the event's thread, in
// its handler) ever calls it, which the owner guarantees (documented on `drain`).
unsafe impl Sync for OverflowRing {}

impl OverflowRing {
    /// Bytes one ring maps (locked memory charged to the user): two pages.
    pub fn bytes() -> usize {
        2 * page_size()
    }

    /// Maps the ring of the sampling event `fd`. Fails with EPERM when the locked-memory
    /// allowance (`perf_event_mlock_kb` plus `RLIMIT_MEMLOCK`) is used up.
    pub fn map(fd: RawFd) -> io::Result<OverflowRing> {
        let page = page_size();
        let map_len = 2 * page;
        // SAFETY: a fresh shared mapping of a perf fd with a length we computed; the kernel
        // validates it and returns MAP_FAILED on error.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let meta = ptr.cast::<perf_event_mmap_page>();
        // SAFETY: the first page is the kernel's metadata page; it fills data_offset and
        // data_size at mmap time and never changes them.
        let (off, size) = unsafe {
            (
                std::ptr::addr_of!((*meta).data_offset).read_volatile() as usize,
                std::ptr::addr_of!((*meta).data_size).read_volatile() as usize,
            )
        };
        let (data_offset, data_size) = if size == 0 { (page, page) } else { (off, size) };
        Ok(OverflowRing { base: ptr.cast(), map_len, data_offset, data_size })
    }

    fn word_atomic(&self, field: *const u64) -> &AtomicU64 {
        // SAFETY: `field` points at an 8-byte aligned u64 of the metadata page, mapped for
        // the lifetime of `self`; the kernel accesses it concurrently, so only atomically.
        unsafe { &*field.cast::<AtomicU64>() }
    }

    fn head(&self) -> &AtomicU64 {
        let meta = self.base.cast::<perf_event_mmap_page>();
        // SAFETY: the field's address inside the mapped metadata page.
        self.word_atomic(unsafe { std::ptr::addr_of!((*meta).data_head) })
    }

    fn tail(&self) -> &AtomicU64 {
        let meta = self.base.cast::<perf_event_mmap_page>();
        // SAFETY: as `head`.
        self.word_atomic(unsafe { std::ptr::addr_of!((*meta).data_tail) })
    }

    /// The u64 at ring position `pos` (a multiple of 8; wraps).
    fn word(&self, pos: u64) -> u64 {
        let at = (pos as usize) & (self.data_size - 1);
        // SAFETY: `at` is 8-aligned (records and the data area are multiples of 8) and
        // inside the data area, which is mapped for the lifetime of `self`; the caller
        // reads only below the acquired head, which the kernel does not rewrite before
        // the tail passes it.
        unsafe { self.base.add(self.data_offset + at).cast::<u64>().read_volatile() }
    }

    /// Hands each sample record published since the last call to `f`, oldest first, as
    /// whether the overflow interrupted the kernel (the record's cpumode) and the words of
    /// its body (at most [`MAX_WORDS`]), then frees the space. Returns the number of
    /// records the kernel reported dropped (a full ring) since the last call.
    ///
    /// Async-signal-safe. Only one thread may call it for a given ring: the event's own
    /// thread, from its overflow handler (or with that handler blocked).
    pub fn drain(&self, mut f: impl FnMut(bool, &[u64])) -> u64 {
        // Acquire pairs with the kernel's write barrier before it publishes data_head.
        let head = self.head().load(Ordering::Acquire);
        // Relaxed: this reader is the only writer of data_tail.
        let mut tail = self.tail().load(Ordering::Relaxed);
        let hdr = std::mem::size_of::<perf_event_header>() as u64;
        let mut lost = 0;
        let mut words = [0u64; MAX_WORDS];
        while head.wrapping_sub(tail) >= hdr {
            let h = self.word(tail);
            // perf_event_header: u32 type, u16 misc, u16 size (little-endian on x86-64).
            let (kind, misc, size) = (h as u32, (h >> 32) as u16, h >> 48);
            let kernel = u32::from(misc) & sys::PERF_RECORD_MISC_CPUMODE_MASK
                == sys::PERF_RECORD_MISC_KERNEL;
            if size < hdr || size > head.wrapping_sub(tail) || size % 8 != 0 {
                // Torn or corrupt: skip everything published.
                tail = head;
                break;
            }
            let n = (((size - hdr) / 8) as usize).min(MAX_WORDS);
            match kind {
                sys::PERF_RECORD_SAMPLE => {
                    for (i, w) in words.iter_mut().enumerate().take(n) {
                        *w = self.word(tail + hdr + 8 * i as u64);
                    }
                    f(kernel, &words[..n]);
                }
                // LOST: id, lost.
                sys::PERF_RECORD_LOST if n >= 2 => lost += self.word(tail + hdr + 8),
                _ => {}
            }
            tail = tail.wrapping_add(size);
        }
        // Release: the copies above complete before the kernel may reuse the space.
        self.tail().store(tail, Ordering::Release);
        lost
    }

    /// Unmaps the ring.
    ///
    /// # Safety
    /// Nothing may call [`drain`](Self::drain) on it any more (the event's handler can no
    /// longer run for it).
    pub unsafe fn unmap(self) {
        // SAFETY: our own mapping, unused from now on (the caller's contract).
        unsafe { libc::munmap(self.base.cast(), self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Target;
    use crate::group::EventGroup;
    use crate::spec;

    /// A task-clock leader overflowing every 50 us with a page-faults member: each record
    /// carries the group at the overflow, the leader's value grows by about one period per
    /// record, and the page faults made between two overflows show in the difference.
    #[test]
    fn records_carry_the_group_at_each_overflow() {
        let g = spec::parse("{task-clock,page-faults}", false).unwrap();
        let grp =
            EventGroup::open_sampling(&g, Target::CALLING_THREAD, 50_000, 1, false, true).unwrap();
        let ring = OverflowRing::map(grp.leader().raw_fd()).unwrap();
        // Not armed for a signal here: block SIGTRAP so the overflows only write records.
        // SAFETY: an all-zero sigset_t is a valid (empty) set.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: plain sigset manipulation and a thread-local mask change.
        unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTRAP);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        grp.leader().enable().unwrap();
        let mut recs: Vec<Vec<u64>> = Vec::new();
        let t0 = std::time::Instant::now();
        let mut pages = Vec::new();
        while recs.len() < 20 && t0.elapsed().as_secs() < 5 {
            // Touch a fresh page now and then so the member counts something.
            pages.push(vec![1u8; 4096 * 4]);
            ring.drain(|_, w| recs.push(w.to_vec()));
        }
        grp.leader().disable().unwrap();
        // Consume the pending SIGTRAP (sigtimedwait), then unblock.
        // SAFETY: as above; a zero timeout makes it non-blocking.
        unsafe {
            let ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            while libc::sigtimedwait(&set, std::ptr::null_mut(), &ts) > 0 {}
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            ring.unmap();
        }
        assert!(recs.len() >= 10, "{} records", recs.len());
        for w in &recs {
            assert_eq!(w.len(), 5, "nr, enabled, running, two values: {w:?}");
            assert_eq!(w[0], 2);
        }
        for p in recs.windows(2) {
            assert!(p[1][3] > p[0][3], "the leader grows: {p:?}");
            assert!(p[1][4] >= p[0][4], "page faults never decrease");
        }
        // About the period (50 us) apart on average. One delta alone is not: a timer
        // interrupt late by L makes its delta longer by L and the next one shorter by as
        // much (the timer is re-armed from its due time), and a host that stalls the VM
        // longer than a period skips periods. The mean over n deltas is at least
        // (50 n - 50) / n us, and at most a generous multiple on a slow VM.
        let n = recs.len() as u64 - 1;
        let mean = (recs[recs.len() - 1][3] - recs[0][3]) / n;
        assert!((40_000..5_000_000).contains(&mean), "mean leader delta {mean} over {n}");
        drop(pages);
    }
}
