//! Each thread's sample ring: single producer (the owning thread's signal handler),
//! single consumer (the writer thread), fixed-size records, loss counting, and the
//! threshold wakeup that lets the writer sleep through thousands of samples (seed 003).
//!
//! Owns: the ring's storage, its cursors, the lost-sample counters and the wakeup flag.
//! Must never allocate, lock, block or panic on the producer side ([`SampleRing::push`]
//! runs in a signal handler), and never drop a sample without counting it.
//!
//! # Design
//!
//! `head` counts records ever published, `tail` records ever consumed; record `i` lives
//! at word `(i % capacity) * stride`. Only the producer stores `head` and `lost`; only
//! the consumer stores `tail` and `lost_reported`.
//!
//! - The producer reads `tail` with Acquire (pairing with the consumer's Release store of
//!   it, so the consumer's copies of a record happen before the producer overwrites it),
//!   refuses when `head - tail >= capacity` (counting the sample in `lost`), writes the
//!   record's words, and publishes it with a Release store of `head`.
//! - The consumer reads `head` with Acquire (the records below it are fully written),
//!   copies them out, and hands their space back with a Release store of `tail`.
//!
//! The producer's `tail` may be stale (older than the consumer's latest): it then sees
//! the ring fuller than it is, never emptier, so it never overwrites an unconsumed record.
//!
//! # Wakeup: level-triggered with a pending flag
//!
//! After publishing, the producer signals the writer when the ring holds at least
//! `threshold` records *and* no wakeup is pending (`wake_pending.swap(true)` returned
//! false); the consumer clears the flag (`swap(false)`) before it reads `head`. Both are
//! AcqRel read-modify-writes, so whichever comes second in the flag's modification order
//! synchronises with the first: a producer that finds the flag already set (and so does
//! not signal) published its record before the consumer's clear, which therefore makes
//! the record visible to the drain that follows. Either a signal is pending or the
//! consumer's next drain takes the record: a ring at or above the threshold is never left
//! without a wakeup.
//!
//! An edge-triggered rule ("signal when the occupancy after the push equals the
//! threshold") misses wakeups: with a threshold of 1, a push that reads `tail` just
//! before a concurrent drain stores it computes an occupancy of 2, signals nothing, and
//! leaves a record (and every later one) in the ring until something else wakes the
//! writer. `tests/loom.rs` (`wakeup_is_never_missed`) finds that interleaving.

use crate::sync::{AtomicBool, AtomicPtr, AtomicU64, Ordering, UnsafeCell};

/// Words of a record before the counters: time, ip, kind.
pub const RECORD_HEAD: usize = 3;
/// Most counters a record carries (strobe reads groups of at most 8 events).
pub const MAX_COUNTERS: usize = 8;
/// Most words in a record.
pub const MAX_STRIDE: usize = RECORD_HEAD + MAX_COUNTERS;

type Word = UnsafeCell<u64>;

/// What [`SampleRing::push`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Push {
    /// The record was stored.
    Stored {
        /// Records in the ring after the push, as the producer saw it (an upper bound).
        occupancy: u64,
        /// The ring is at or above the threshold and no wakeup was pending: the caller
        /// must wake the consumer now.
        wake: bool,
    },
    /// The ring was full (or had no storage): the sample was counted in
    /// [`SampleRing::lost`].
    Lost,
}

/// A single-producer single-consumer ring of fixed-size `u64` records. See the module
/// note for the protocol.
#[derive(Debug)]
pub struct SampleRing {
    /// `words` cells, owned by the ring (freed on drop, kept across owners).
    buf: AtomicPtr<Word>,
    /// Length of `buf` in words.
    words: AtomicU64,
    /// Records the ring holds.
    capacity: AtomicU64,
    /// Words per record.
    stride: AtomicU64,
    /// Records in the ring that make the producer wake the consumer.
    threshold: AtomicU64,
    /// Records published (producer only).
    head: AtomicU64,
    /// Records consumed (consumer only).
    tail: AtomicU64,
    /// Samples dropped because the ring was full (producer only).
    lost: AtomicU64,
    /// Lost samples already handed out by [`SampleRing::take_lost`] (consumer only).
    lost_reported: AtomicU64,
    /// A wakeup was signalled and the consumer has not started draining since.
    wake_pending: AtomicBool,
}

impl SampleRing {
    crate::sync::const_fn! {
    /// An empty ring with no storage: every push is counted lost until
    /// [`SampleRing::prepare`].
    #[allow(clippy::new_without_default)]
    pub fn new() -> SampleRing {
        SampleRing {
            buf: AtomicPtr::new(core::ptr::null_mut()),
            words: AtomicU64::new(0),
            capacity: AtomicU64::new(0),
            stride: AtomicU64::new(0),
            threshold: AtomicU64::new(1),
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            lost_reported: AtomicU64::new(0),
            wake_pending: AtomicBool::new(false),
        }
    }
    }

    /// Gives the ring storage for `capacity` records of `stride` words (clamped to
    /// `RECORD_HEAD..=MAX_STRIDE`), keeping the storage it has when the size matches, and
    /// empties it: cursors, loss counters and the wakeup flag start at zero. The consumer
    /// is woken once `threshold` records (clamped to `1..=capacity`) are waiting.
    /// Allocates: call at thread setup, never from a signal handler.
    ///
    /// # Safety
    ///
    /// No other thread may use the ring during the call, and the consumer must
    /// synchronise with its end before it next consumes (the agent: the slot's Release
    /// store of ACTIVE, read with Acquire by the writer).
    pub unsafe fn prepare(&self, capacity: u64, stride: usize, threshold: u64) {
        let capacity = capacity.max(1);
        let stride = stride.clamp(RECORD_HEAD, MAX_STRIDE) as u64;
        let words = capacity.saturating_mul(stride);
        // Relaxed throughout: the caller guarantees exclusive use (see Safety), and the
        // values are published by the caller's own Release.
        if self.words.load(Ordering::Relaxed) != words {
            let old = self.buf.swap(core::ptr::null_mut(), Ordering::Relaxed);
            let old_words = self.words.load(Ordering::Relaxed);
            // SAFETY: `old` is null or came from `alloc_words(old_words)`, and nobody else
            // uses the ring (the caller's contract).
            unsafe { free_words(old, old_words) };
            self.buf.store(alloc_words(words), Ordering::Relaxed);
            self.words.store(words, Ordering::Relaxed);
        }
        self.capacity.store(capacity, Ordering::Relaxed);
        self.stride.store(stride, Ordering::Relaxed);
        self.threshold.store(threshold.clamp(1, capacity), Ordering::Relaxed);
        self.head.store(0, Ordering::Relaxed);
        self.tail.store(0, Ordering::Relaxed);
        self.lost.store(0, Ordering::Relaxed);
        self.lost_reported.store(0, Ordering::Relaxed);
        self.wake_pending.store(false, Ordering::Relaxed);
    }

    /// Appends one record: `time`, `ip`, `kind`, then `counters` (cut or zero-padded to
    /// the stride). Async-signal-safe: no allocation, no lock, no panic. A full ring
    /// counts the sample as lost.
    ///
    /// # Safety
    ///
    /// One producer: no other thread pushes to this ring, nor calls
    /// [`SampleRing::prepare`], while this runs. (A signal handler re-entering `push` on
    /// the producer's own thread is excluded by the caller: SIGTRAP is blocked while its
    /// handler runs.)
    #[inline]
    pub unsafe fn push(&self, time: u64, ip: u64, kind: u64, counters: &[u64]) -> Push {
        // Relaxed: set by `prepare` on this thread (or before it synchronised with us).
        let buf = self.buf.load(Ordering::Relaxed);
        let capacity = self.capacity.load(Ordering::Relaxed);
        let stride = self.stride.load(Ordering::Relaxed);
        // Relaxed: only the producer stores `head`.
        let head = self.head.load(Ordering::Relaxed);
        // Acquire: the consumer's copies of the records it consumed happen before we
        // overwrite them (pairs with the Release store of `tail` in `consume`).
        let tail = self.tail.load(Ordering::Acquire);
        let used = head.wrapping_sub(tail);
        if buf.is_null() || used >= capacity {
            // Relaxed: a counter only this producer writes; the consumer reads it after
            // a synchronising event (a drain following the owner's exit, or at the end).
            self.lost.store(self.lost.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
            return Push::Lost;
        }
        let at = (head % capacity).wrapping_mul(stride);
        let mut words = [time, ip, kind].into_iter().chain(counters.iter().copied());
        for i in 0..stride {
            let v = words.next().unwrap_or(0);
            // SAFETY: `buf` holds `capacity * stride` words and `at + i < capacity *
            // stride` because `head % capacity < capacity` and `i < stride`. Record
            // `head` is not visible to the consumer until the Release store of `head`
            // below, and the consumer is done with it (`used < capacity`), so this
            // producer is its only user.
            unsafe { (*buf.add((at + i) as usize)).with_mut(|w| w.write(v)) };
        }
        // Release: the record's words are visible to a consumer that sees the new head.
        self.head.store(head.wrapping_add(1), Ordering::Release);
        let occupancy = used + 1;
        // Relaxed: our own value from `prepare`.
        let wake = occupancy >= self.threshold.load(Ordering::Relaxed)
            // AcqRel: see the module note; the Release half carries the record published
            // above to the consumer's clearing swap, the Acquire half orders us after it.
            && !self.wake_pending.swap(true, Ordering::AcqRel);
        Push::Stored { occupancy, wake }
    }

    /// Hands every published record to `f`, oldest first, then gives their space back.
    /// Clears the wakeup flag first, so a producer that crosses the threshold during the
    /// drain signals again. Returns the number of records consumed.
    ///
    /// # Safety
    ///
    /// One consumer at a time (the agent: the holder of the drain lock), and it has
    /// synchronised with the end of the last [`SampleRing::prepare`].
    pub unsafe fn consume(&self, mut f: impl FnMut(&[u64])) -> u64 {
        // AcqRel: pairs with the producers' swaps (module note). Before `head` is read.
        self.wake_pending.swap(false, Ordering::AcqRel);
        let buf = self.buf.load(Ordering::Relaxed);
        let capacity = self.capacity.load(Ordering::Relaxed);
        let stride = self.stride.load(Ordering::Relaxed);
        // Acquire: pairs with the producer's Release store of `head`: the records up to
        // it are fully written.
        let head = self.head.load(Ordering::Acquire);
        // Relaxed: only the consumer stores `tail`.
        let tail = self.tail.load(Ordering::Relaxed);
        if buf.is_null() || head == tail {
            return 0;
        }
        let mut rec = [0u64; MAX_STRIDE];
        let mut r = tail;
        while r != head {
            let at = (r % capacity).wrapping_mul(stride);
            for (i, w) in rec.iter_mut().take(stride as usize).enumerate() {
                // SAFETY: records tail..head were published (Acquire above) and are not
                // overwritten before our Release store of `tail` below; `at + i` is
                // within the `capacity * stride` words of `buf`.
                *w = unsafe { (*buf.add(at as usize + i)).with(|p| p.read()) };
            }
            f(rec.get(..stride as usize).unwrap_or(&[]));
            r = r.wrapping_add(1);
        }
        // Release: our reads of the records happen before the producer reuses them.
        self.tail.store(head, Ordering::Release);
        head.wrapping_sub(tail)
    }

    /// Samples lost so far (full ring) since `prepare`.
    pub fn lost(&self) -> u64 {
        // Relaxed: a statistic; exact once the caller synchronised with the producer.
        self.lost.load(Ordering::Relaxed)
    }

    /// Lost samples not yet handed out by an earlier call (consumer side, one consumer
    /// at a time).
    pub fn take_lost(&self) -> u64 {
        // Relaxed: `lost` only grows; what we miss now we take next time.
        let lost = self.lost.load(Ordering::Relaxed);
        let reported = self.lost_reported.load(Ordering::Relaxed);
        self.lost_reported.store(lost, Ordering::Relaxed);
        lost.wrapping_sub(reported)
    }

    /// Records published since `prepare` (stored, not lost).
    pub fn published(&self) -> u64 {
        // Relaxed: a statistic.
        self.head.load(Ordering::Relaxed)
    }

    /// Records published and not yet consumed, as of loads the caller has synchronised
    /// with.
    pub fn occupancy(&self) -> u64 {
        // Acquire on both: the caller sees a state no older than what it synchronised with.
        self.head.load(Ordering::Acquire).wrapping_sub(self.tail.load(Ordering::Acquire))
    }
}

impl Drop for SampleRing {
    fn drop(&mut self) {
        let buf = self.buf.load(Ordering::Relaxed);
        let words = self.words.load(Ordering::Relaxed);
        // SAFETY: `&mut self`: nobody else uses the ring; `buf` came from
        // `alloc_words(words)` or is null.
        unsafe { free_words(buf, words) };
    }
}

fn alloc_words(words: u64) -> *mut Word {
    let b: alloc::boxed::Box<[Word]> = (0..words).map(|_| Word::new(0)).collect();
    alloc::boxed::Box::into_raw(b).cast::<Word>()
}

/// # Safety
///
/// `p` is null or came from `alloc_words(words)` and is not used afterwards.
unsafe fn free_words(p: *mut Word, words: u64) {
    if !p.is_null() {
        let s = core::ptr::slice_from_raw_parts_mut(p, words as usize);
        // SAFETY: the caller's contract: `s` is exactly the boxed slice `alloc_words` leaked.
        drop(unsafe { alloc::boxed::Box::from_raw(s) });
    }
}

// SAFETY: the storage cells are only accessed under the protocol of the module note: the
// single producer writes a record before publishing it with Release, the single consumer
// reads it after the matching Acquire, and hands it back with Release/Acquire on `tail`.
unsafe impl Sync for SampleRing {}
// SAFETY: the ring owns its storage (a boxed slice of u64 cells) outright.
unsafe impl Send for SampleRing {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn ring(cap: u64, stride: usize, threshold: u64) -> SampleRing {
        let r = SampleRing::new();
        // SAFETY: fresh ring, one thread.
        unsafe { r.prepare(cap, stride, threshold) };
        r
    }

    /// A producer thread pushes records as fast as it can while a consumer drains: every
    /// record arrives once, in order, intact, or is counted as lost; none vanishes.
    #[test]
    fn ring_stress_delivers_or_counts_every_record() {
        const N: u64 = 200_000;
        let r = std::sync::Arc::new(ring(64, RECORD_HEAD + 2, 16));
        let p = r.clone();
        let producer = std::thread::spawn(move || {
            for i in 0..N {
                // SAFETY: the only producer.
                unsafe { p.push(i, i * 3, 1, &[i ^ 0x55, !i]) };
            }
        });
        let mut seen = 0u64;
        let mut last: Option<u64> = None;
        let mut check = |rec: &[u64]| {
            let t = rec[0];
            assert_eq!(rec[1..], [t * 3, 1, t ^ 0x55, !t], "a torn record");
            assert!(last.is_none_or(|l| t > l), "out of order: {t} after {last:?}");
            last = Some(t);
            seen += 1;
        };
        while !producer.is_finished() {
            // SAFETY: the only consumer.
            unsafe { r.consume(&mut check) };
        }
        producer.join().unwrap();
        // SAFETY: the only consumer.
        unsafe { r.consume(&mut check) };
        assert_eq!(seen + r.lost(), N, "seen {seen}, lost {}", r.lost());
        assert!(seen > 0);
    }

    #[test]
    fn a_full_ring_counts_losses_and_push_reports_the_occupancy() {
        let r = ring(4, RECORD_HEAD + 1, 3);
        // SAFETY: one thread.
        let out: Vec<_> = (0..6).map(|i| unsafe { r.push(i, 0, 0, &[i]) }).collect();
        let st = |occupancy, wake| Push::Stored { occupancy, wake };
        assert_eq!(
            out,
            [st(1, false), st(2, false), st(3, true), st(4, false), Push::Lost, Push::Lost]
        );
        assert_eq!(r.lost(), 2);
        assert_eq!(r.take_lost(), 2);
        assert_eq!(r.take_lost(), 0, "losses are handed out once");
        let mut times = Vec::new();
        // SAFETY: one thread.
        assert_eq!(unsafe { r.consume(|rec| times.push((rec[0], rec[3]))) }, 4);
        assert_eq!(times, [(0, 0), (1, 1), (2, 2), (3, 3)]);
        // The drain cleared the pending wakeup: crossing the threshold again signals.
        // SAFETY: one thread.
        let again: Vec<_> = (0..3).map(|i| unsafe { r.push(i, 0, 0, &[]) }).collect();
        assert_eq!(again, [st(1, false), st(2, false), st(3, true)]);
    }

    #[test]
    fn records_wrap_and_keep_their_words() {
        let r = ring(3, RECORD_HEAD + 2, 100);
        let mut got = Vec::new();
        for i in 0..10u64 {
            // SAFETY: one thread.
            unsafe { r.push(i, i + 100, 2, &[i * 7, i * 11, 99]) };
            if i % 2 == 1 {
                // SAFETY: one thread.
                unsafe { r.consume(|rec| got.push(rec.to_vec())) };
            }
        }
        let want: Vec<Vec<u64>> = (0..10u64).map(|i| vec![i, i + 100, 2, i * 7, i * 11]).collect();
        assert_eq!(got, want, "wrapping three times keeps every record whole");
        assert_eq!(r.lost(), 0);
    }

    #[test]
    fn prepare_empties_a_reused_ring_and_keeps_its_storage() {
        let r = ring(4, RECORD_HEAD, 2);
        // SAFETY: one thread.
        unsafe {
            for i in 0..6 {
                r.push(i, 0, 0, &[]);
            }
            let before = r.buf.load(Ordering::Relaxed);
            r.prepare(4, RECORD_HEAD, 2);
            assert_eq!(r.buf.load(Ordering::Relaxed), before, "same size: storage kept");
            assert_eq!((r.occupancy(), r.lost(), r.take_lost()), (0, 0, 0));
            assert_eq!(r.push(7, 0, 0, &[]), Push::Stored { occupancy: 1, wake: false });
            r.prepare(8, RECORD_HEAD + 1, 2);
            assert_eq!(r.push(8, 0, 0, &[5]), Push::Stored { occupancy: 1, wake: false });
            let mut got = Vec::new();
            r.consume(|rec| got.push(rec.to_vec()));
            assert_eq!(got, [vec![8, 0, 0, 5]]);
        }
    }

    #[test]
    fn a_ring_without_storage_counts_every_push_lost() {
        let r = SampleRing::new();
        // SAFETY: one thread.
        unsafe {
            assert_eq!(r.push(1, 2, 0, &[]), Push::Lost);
            assert_eq!(r.consume(|_| panic!("nothing to consume")), 0);
        }
        assert_eq!(r.lost(), 1);
    }
}
