//! The pool's memory layout, its two lists, and the producer's side: [`append`] (a
//! signal handler's write of one record) and [`close`] (a thread's hand-over of its last
//! block). See the parent module for the protocol and why each ordering is what it is.
//!
//! Must never allocate, lock or block in [`append`] or [`close`]: they run in signal
//! handlers and in the target's exiting threads.

use crate::alternate::AltCell;
use crate::custody::record::Rec;
use crate::custody::{BLOCK_FREE, BLOCK_FULL, BLOCK_WRITING};
use crate::slot::SlotCtl;
use crate::sync::{AtomicU32, AtomicU64, Ordering, UnsafeCell};

/// One word of block storage.
pub type Word = UnsafeCell<u64>;

/// The pool's shared head: list heads, counters and the recorder's futex word. `repr(C)`
/// with atomics only: the agent and `strobe record` are separate builds that map the
/// same bytes.
#[repr(C)]
#[derive(Debug)]
pub struct PoolHead {
    /// Free stack: `tag << 32 | (index + 1)`, 0 in the low half when empty.
    free: AtomicU64,
    /// Full stack: `index + 1` of its top, 0 when empty.
    full: AtomicU32,
    /// Blocks on the free stack (approximate while producers pop).
    free_count: AtomicU32,
    /// Records published and not yet drained.
    pending: AtomicU64,
    /// Records that make a producer wake the recorder.
    threshold: AtomicU64,
    /// A wakeup was signalled and the recorder has not started a pass since.
    wake_pending: AtomicU32,
    /// Bumped by every wakeup: the word the recorder waits on with FUTEX_WAIT.
    wake_seq: AtomicU32,
    /// Blocks in the pool.
    nblocks: AtomicU32,
    /// Words per block.
    block_words: AtomicU32,
}

impl PoolHead {
    crate::sync::const_fn! {
        /// A zeroed head (an empty pool of no blocks until [`Pool::init`]).
        #[allow(clippy::new_without_default)]
        pub fn new() -> PoolHead {
            PoolHead {
                free: AtomicU64::new(0),
                full: AtomicU32::new(0),
                free_count: AtomicU32::new(0),
                pending: AtomicU64::new(0),
                threshold: AtomicU64::new(1),
                wake_pending: AtomicU32::new(0),
                wake_seq: AtomicU32::new(0),
                nblocks: AtomicU32::new(0),
                block_words: AtomicU32::new(0),
            }
        }
    }

    /// The futex word the recorder waits on and producers bump when they wake it.
    pub fn wake_word(&self) -> &AtomicU32 {
        &self.wake_seq
    }
}

/// One block's header.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct BlockHead {
    /// Link in the free or full stack (`index + 1`, 0 ends the list).
    next: AtomicU32,
    /// The slot that owns it (while WRITING or FULL).
    owner: AtomicU32,
    /// Its position in its slot's sequence of blocks.
    seq: AtomicU32,
    /// FREE, WRITING or FULL.
    state: AtomicU32,
    /// Words published.
    head: AtomicU32,
}

impl BlockHead {
    crate::sync::const_fn! {
        /// A zeroed (free) block head.
        #[allow(clippy::new_without_default)]
        pub fn new() -> BlockHead {
            BlockHead {
                next: AtomicU32::new(0),
                owner: AtomicU32::new(0),
                seq: AtomicU32::new(0),
                state: AtomicU32::new(BLOCK_FREE),
                head: AtomicU32::new(0),
            }
        }
    }
}

/// One thread's custody state, in the shared mapping: the slot's life cycle, who owns it,
/// its current block and its losses, and the period alternation its handler keeps.
/// Written by the owner (and its handler); read by the recorder. Cache-line aligned:
/// neighbouring slots belong to threads that sample at the same time.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct SharedSlot {
    /// FREE, CLAIMED, ACTIVE, CLOSING or DEAD, and the generation (see `slot`).
    pub ctl: SlotCtl,
    /// The owning process.
    pub pid: AtomicU32,
    /// The owning thread.
    pub tid: AtomicU32,
    /// The owning process's record stream.
    pub stream: AtomicU32,
    /// `index + 1` of the block being written, 0 when none (owner only stores).
    block: AtomicU32,
    /// The sequence number the next block gets (owner only).
    next_seq: AtomicU32,
    /// Samples dropped because no block was free or a record did not fit (owner only
    /// stores; only grows while the owner lives).
    lost: AtomicU64,
    /// The owner's period alternation and window statistics.
    pub alt: AltCell,
    /// The thread's name (`comm`, NUL-padded), written by the owner in normal context.
    pub comm: [AtomicU64; 2],
    /// The thread's CPU time (ns) when its sampling was armed: what it ran before it could
    /// be sampled (thread start-up, the agent's set-up). The recorder reports it, so shares
    /// are of all CPU time and not only of the sampled part.
    pub cpu_before_ns: AtomicU64,
    /// CLOCK_MONOTONIC ns when the owner's sampling was last armed (0: not yet): where
    /// the stretch of time the agent serves the thread begins. The recorder drops the
    /// kernel floor's samples of the thread inside served stretches (strobe-record's
    /// `served`).
    pub served_from_ns: AtomicU64,
    /// When that stretch ended (0: still serving): the slot closed, the process exec'd,
    /// or the thread blocked the sampler's signal.
    pub served_to_ns: AtomicU64,
    /// The thread's CPU time (ns) when the open stretch began (0: none open).
    pub stretch_cpu_ns: AtomicU64,
    /// CPU time (ns) the thread ran in served stretches that ended.
    pub served_cpu_ns: AtomicU64,
    /// CPU time (ns) the agent spent setting the thread up before it armed it.
    pub setup_ns: AtomicU64,
}

impl SharedSlot {
    crate::sync::const_fn! {
        /// A FREE slot.
        #[allow(clippy::new_without_default)]
        pub fn new() -> SharedSlot {
            SharedSlot {
                ctl: SlotCtl::new(),
                pid: AtomicU32::new(0),
                tid: AtomicU32::new(0),
                stream: AtomicU32::new(0),
                block: AtomicU32::new(0),
                next_seq: AtomicU32::new(0),
                lost: AtomicU64::new(0),
                alt: AltCell::new(),
                comm: [AtomicU64::new(0), AtomicU64::new(0)],
                cpu_before_ns: AtomicU64::new(0),
                served_from_ns: AtomicU64::new(0),
                served_to_ns: AtomicU64::new(0),
                stretch_cpu_ns: AtomicU64::new(0),
                served_cpu_ns: AtomicU64::new(0),
                setup_ns: AtomicU64::new(0),
            }
        }
    }

    /// Starts a new owner's custody state. Call after a successful claim, before
    /// `activate` (whose Release publishes these stores).
    pub fn reset_custody(&self, pid: u32, tid: u32, stream: u32) {
        // Relaxed: the claimer owns the slot exclusively; `activate` publishes.
        self.pid.store(pid, Ordering::Relaxed);
        self.tid.store(tid, Ordering::Relaxed);
        self.stream.store(stream, Ordering::Relaxed);
        self.block.store(0, Ordering::Relaxed);
        self.next_seq.store(0, Ordering::Relaxed);
        self.lost.store(0, Ordering::Relaxed);
        for w in &self.comm {
            w.store(0, Ordering::Relaxed);
        }
        self.cpu_before_ns.store(0, Ordering::Relaxed);
        self.served_from_ns.store(0, Ordering::Relaxed);
        self.served_to_ns.store(0, Ordering::Relaxed);
        self.stretch_cpu_ns.store(0, Ordering::Relaxed);
        self.served_cpu_ns.store(0, Ordering::Relaxed);
        self.setup_ns.store(0, Ordering::Relaxed);
    }

    /// The owner begins a served stretch now (`mono_ns`, its CPU time `cpu_ns`), just
    /// before it arms its events. Owner only, normal context.
    pub fn begin_stretch(&self, mono_ns: u64, cpu_ns: u64) {
        // Relaxed for the CPU time (read with the stretch's start); Release on the start
        // time: a recorder that reads it (Acquire) sees the rest, and on the hardware
        // this runs on the store is visible before the arming that follows it.
        self.stretch_cpu_ns.store(cpu_ns.max(1), Ordering::Relaxed);
        self.served_to_ns.store(0, Ordering::Relaxed);
        self.served_from_ns.store(mono_ns.max(1), Ordering::Release);
    }

    /// The owner's served stretch ends now (after its events were disabled or closed).
    /// Owner only, normal context; does nothing when no stretch is open.
    pub fn end_stretch(&self, mono_ns: u64, cpu_ns: u64) {
        // Relaxed: the owner is the only writer; the recorder reads after Acquire loads.
        let start = self.stretch_cpu_ns.swap(0, Ordering::Relaxed);
        if start == 0 {
            return;
        }
        let add = cpu_ns.saturating_sub(start);
        self.served_cpu_ns.store(
            self.served_cpu_ns.load(Ordering::Relaxed).saturating_add(add),
            Ordering::Relaxed,
        );
        self.served_to_ns.store(mono_ns.max(1), Ordering::Release);
    }

    /// The served stretch as the recorder reads it: (start, end (0: open), CPU served
    /// in ended stretches, CPU at the open stretch's start (0: none)).
    pub fn stretch(&self) -> (u64, u64, u64, u64) {
        // Acquire: pairs with the owner's Release stores of the start and end.
        let from = self.served_from_ns.load(Ordering::Acquire);
        let to = self.served_to_ns.load(Ordering::Acquire);
        (
            from,
            to,
            self.served_cpu_ns.load(Ordering::Relaxed),
            self.stretch_cpu_ns.load(Ordering::Relaxed),
        )
    }

    /// Stores the thread's name (up to 16 bytes).
    pub fn set_comm(&self, name: &[u8]) {
        let mut b = [0u8; 16];
        for (d, s) in b.iter_mut().zip(name) {
            *d = *s;
        }
        let (lo, hi) = b.split_at(8);
        // Relaxed: a name; the recorder reads it after the slot's Acquire.
        self.comm[0].store(u64::from_le_bytes(lo.try_into().unwrap_or([0; 8])), Ordering::Relaxed);
        self.comm[1].store(u64::from_le_bytes(hi.try_into().unwrap_or([0; 8])), Ordering::Relaxed);
    }

    /// The thread's name as stored.
    pub fn comm(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        let lo = self.comm[0].load(Ordering::Relaxed).to_le_bytes();
        let hi = self.comm[1].load(Ordering::Relaxed).to_le_bytes();
        b[..8].copy_from_slice(&lo);
        b[8..].copy_from_slice(&hi);
        b
    }

    /// Samples this owner lost so far.
    pub fn lost(&self) -> u64 {
        // Relaxed: a counter; exact once the reader synchronised with the owner.
        self.lost.load(Ordering::Relaxed)
    }

    /// The current block's `index + 1` (0: none), for the recorder.
    pub(crate) fn current_block(&self) -> u32 {
        // Acquire: pairs with the producer's Release store when it starts a block: the
        // block's owner, seq and reset head are visible.
        self.block.load(Ordering::Acquire)
    }

    /// Forgets the current block (the recorder, freeing the slot of a thread that is
    /// gone).
    pub(crate) fn clear_block(&self) {
        // Relaxed: published by the slot's Release to FREE.
        self.block.store(0, Ordering::Relaxed);
    }

    fn count_lost(&self) {
        // Relaxed: only the owner (and its handler, which it cannot race) stores.
        self.lost.store(self.lost.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    }
}

/// A view of a pool: its head, block headers and block words, wherever they live (a
/// shared mapping in the agent and the recorder, the heap in tests and models).
#[derive(Debug, Clone, Copy)]
pub struct Pool<'a> {
    /// The shared head.
    pub head: &'a PoolHead,
    /// One header per block.
    pub blocks: &'a [BlockHead],
    /// `blocks.len() * block_words` words.
    pub words: &'a [Word],
}

/// What [`append`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Append {
    /// Stored. `wake`: the caller must wake the recorder (bump done: call FUTEX_WAKE on
    /// [`PoolHead::wake_word`]).
    Stored {
        /// Wake the recorder now.
        wake: bool,
    },
    /// Counted lost in the slot (no free block, or a record longer than a block).
    Lost {
        /// Wake the recorder now (the pool ran dry).
        wake: bool,
    },
}

impl<'a> Pool<'a> {
    /// Words per block.
    #[inline]
    pub fn block_words(&self) -> usize {
        // Relaxed: set once by `init`, before any process maps the pool for use.
        self.head.block_words.load(Ordering::Relaxed) as usize
    }

    /// Makes every block free and sets the wakeup threshold (in records). Not concurrent:
    /// the recorder calls it before it shares the pool.
    pub fn init(&self, block_words: u32, threshold: u64) {
        let n = self.blocks.len() as u32;
        self.head.nblocks.store(n, Ordering::Relaxed);
        self.head.block_words.store(block_words, Ordering::Relaxed);
        self.head.threshold.store(threshold.max(1), Ordering::Relaxed);
        self.head.pending.store(0, Ordering::Relaxed);
        self.head.wake_pending.store(0, Ordering::Relaxed);
        self.head.full.store(0, Ordering::Relaxed);
        for (i, b) in self.blocks.iter().enumerate() {
            let next = if i + 1 < n as usize { i as u32 + 2 } else { 0 };
            b.next.store(next, Ordering::Relaxed);
            b.state.store(BLOCK_FREE, Ordering::Relaxed);
            b.head.store(0, Ordering::Relaxed);
        }
        self.head.free.store(if n > 0 { 1 } else { 0 }, Ordering::Relaxed);
        // Release: whoever reads the count after us sees the lists set up above.
        self.head.free_count.store(n, Ordering::Release);
    }

    /// Blocks on the free stack.
    pub fn free_count(&self) -> u32 {
        self.head.free_count.load(Ordering::Relaxed)
    }

    /// Blocks in the pool.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// True for a pool of no blocks.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Pops a free block (producer side, any process; [`append`] calls it). Lock-free.
    pub fn pop_free(&self) -> Option<u32> {
        // Acquire: pairs with the Release of the push that put the top block there (the
        // recorder's reads of it happen before our writes), and lets us read its `next`.
        let mut cur = self.head.free.load(Ordering::Acquire);
        loop {
            let top = (cur & 0xffff_ffff) as u32;
            if top == 0 {
                return None;
            }
            let b = self.blocks.get(top as usize - 1)?;
            // Relaxed: if the block was popped (and its link changed) since our load of
            // the head, the tag makes the exchange below fail.
            let next = b.next.load(Ordering::Relaxed);
            let tag = (cur >> 32).wrapping_add(1);
            let new = (tag << 32) | u64::from(next);
            // AcqRel on success: Acquire as above for the block we take; Release so a
            // later popper that reads our head also sees... nothing of ours it needs, but
            // a uniform AcqRel keeps the argument local. Acquire on failure: we read the
            // new top's `next` next round.
            match self.head.free.compare_exchange_weak(
                cur,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    // Relaxed: a statistic for the low-water wakeup.
                    self.head.free_count.fetch_sub(1, Ordering::Relaxed);
                    return Some(top - 1);
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// Pushes a drained block back on the free stack (the recorder; [`Drain`] calls it).
    ///
    /// [`Drain`]: crate::custody::Drain
    pub fn push_free(&self, index: u32) {
        let Some(b) = self.blocks.get(index as usize) else { return };
        // Relaxed: published by the Release exchange below.
        b.state.store(BLOCK_FREE, Ordering::Relaxed);
        let mut cur = self.head.free.load(Ordering::Relaxed);
        loop {
            b.next.store((cur & 0xffff_ffff) as u32, Ordering::Relaxed);
            let tag = (cur >> 32).wrapping_add(1);
            let new = (tag << 32) | u64::from(index + 1);
            // Release: our reads of the block and the link above happen before a popper
            // that takes it (Acquire) writes it.
            match self.head.free.compare_exchange_weak(
                cur,
                new,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(actual) => cur = actual,
            }
        }
        self.head.free_count.fetch_add(1, Ordering::Relaxed);
    }

    /// Pushes a handed-over block on the full stack (producer side).
    fn push_full(&self, index: u32) {
        let Some(b) = self.blocks.get(index as usize) else { return };
        let mut cur = self.head.full.load(Ordering::Relaxed);
        loop {
            b.next.store(cur, Ordering::Relaxed);
            // Release: the block's final head, its state and our slot's cleared block
            // are visible to the recorder that takes the list (Acquire).
            match self.head.full.compare_exchange_weak(
                cur,
                index + 1,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(actual) => cur = actual,
            }
        }
    }

    /// Takes the whole full stack (the recorder): `index + 1` of its top.
    pub(crate) fn take_full(&self) -> u32 {
        // Acquire: pairs with the producers' Release pushes.
        self.head.full.swap(0, Ordering::Acquire)
    }

    /// The link of a block on a list the caller took.
    pub(crate) fn next_of(&self, index: u32) -> u32 {
        self.blocks.get(index as usize).map_or(0, |b| b.next.load(Ordering::Relaxed))
    }

    /// The block header at `index`.
    pub(crate) fn block(&self, index: u32) -> Option<&'a BlockHead> {
        self.blocks.get(index as usize)
    }

    /// The block's owner slot, sequence number and published words.
    pub(crate) fn block_info(&self, index: u32) -> Option<(u32, u32, u32, u32)> {
        let b = self.blocks.get(index as usize)?;
        // Relaxed for owner/seq/state: made visible by the Acquire that led us to the
        // block (the full-list swap or the slot's current block). Acquire on head: the
        // records below it are written.
        Some((
            b.owner.load(Ordering::Relaxed),
            b.seq.load(Ordering::Relaxed),
            b.state.load(Ordering::Relaxed),
            b.head.load(Ordering::Acquire),
        ))
    }

    /// Requests a wakeup: true if the caller must do it (no wakeup was pending).
    fn request_wake(&self) -> bool {
        // AcqRel: see the module note (the level-triggered rule).
        if self.head.wake_pending.swap(1, Ordering::AcqRel) != 0 {
            return false;
        }
        // Release: a recorder that wakes and reads the new value sees our records.
        self.head.wake_seq.fetch_add(1, Ordering::Release);
        true
    }

    /// The recorder starts a pass: clears the wake flag.
    pub(crate) fn begin_pass(&self) {
        // AcqRel: pairs with producers' swaps (module note).
        self.head.wake_pending.swap(0, Ordering::AcqRel);
    }

    /// The recorder drained `n` records.
    pub(crate) fn drained(&self, n: u64) {
        // Relaxed: a count; the wake flag carries the ordering.
        self.head.pending.fetch_sub(n, Ordering::Relaxed);
    }

    /// Records published and not yet drained.
    pub fn pending(&self) -> u64 {
        self.head.pending.load(Ordering::Relaxed)
    }

    /// Writes the record words at `at` in block `index`.
    ///
    /// # Safety
    /// The caller owns the block (WRITING, its producer) and `at + rec.words()` is within
    /// the block; the words are not yet published.
    #[inline]
    unsafe fn write(&self, index: u32, at: usize, rec: &Rec<'_>) {
        let base = index as usize * self.block_words() + at;
        rec.for_each_word(|i, w| {
            if let Some(cell) = self.words.get(base + i) {
                // SAFETY: unpublished words of a block this producer owns (caller's
                // contract): nobody reads them until the Release store of `head`.
                cell.with_mut(|p| unsafe { p.write(w) });
            }
        });
    }

    /// Writes zero to one word of every page that words `at..at + n` of block `index`
    /// lie on (the first and the last word, and one per 512 between), mapping them.
    ///
    /// # Safety
    /// As [`Pool::write`] for those words.
    #[inline]
    unsafe fn touch(&self, index: u32, at: usize, n: usize) {
        let base = index as usize * self.block_words() + at;
        let last = n.saturating_sub(1);
        let mut i = 0;
        loop {
            if let Some(cell) = self.words.get(base + i) {
                // SAFETY: unpublished words of a block this producer owns (caller's
                // contract): nobody reads them until the Release store of `head`.
                cell.with_mut(|p| unsafe { p.write(0) });
            }
            if i == last {
                break;
            }
            i = (i + 512).min(last);
        }
    }

    /// Reads words `from..to` of block `index` into `out` (the recorder).
    ///
    /// # Safety
    /// The words were published (an Acquire load of the block's head covers `to`) and the
    /// block is not freed before the call returns.
    pub(crate) unsafe fn read(&self, index: u32, from: usize, to: usize, out: &mut [u64]) {
        let base = index as usize * self.block_words();
        for (i, o) in (from..to).zip(out.iter_mut()) {
            if let Some(cell) = self.words.get(base + i) {
                // SAFETY: published, and not reused while we read (caller's contract).
                *o = cell.with(|p| unsafe { p.read() });
            }
        }
    }
}

/// Hands the slot's current block over to the recorder (full, or the thread is done).
fn hand_over(pool: &Pool<'_>, slot: &SharedSlot, index: u32) {
    if let Some(b) = pool.block(index) {
        // Relaxed: published by `push_full`'s Release.
        b.state.store(BLOCK_FULL, Ordering::Relaxed);
    }
    // Listed first, forgotten as current after: a thread killed between the two leaves
    // a block the recorder finds in the full list (and, as the dead slot's current
    // block, recognises by its sequence number as read already). The other order lost
    // it: neither listed nor current.
    pool.push_full(index);
    // Relaxed: the recorder that reads a stale current block meanwhile checks its owner
    // and sequence number before it reads or frees it (`drain`).
    slot.block.store(0, Ordering::Relaxed);
}

/// Makes sure the slot's current block has room for `need` more words, taking a new block
/// when it has not (as [`append`] would), and touches those words so their pages are
/// mapped: the appends that follow, within `need` words, neither take a block nor fault.
/// The sampler calls it before a window begins, so the first touch of a shared page (a
/// page fault) is not counted in the window. Returns whether the recorder should be
/// woken (a block was taken and few are free); `None` when no block was free (the
/// appends will count their records lost).
///
/// # Safety
///
/// As [`append`].
#[inline]
pub unsafe fn reserve(
    pool: &Pool<'_>,
    slot: &SharedSlot,
    slot_index: u32,
    need: usize,
) -> Option<bool> {
    let bw = pool.block_words();
    if need > bw || bw == 0 {
        return Some(false);
    }
    let (index, at, wake) = current_with_room(pool, slot, slot_index, need)?;
    // SAFETY: we own block `index` (WRITING, ours), `at + need <= bw`, and the words are
    // unpublished (above the head): writing zeros there is ours to do.
    unsafe { pool.touch(index, at, need) };
    Some(wake)
}

/// The slot's current block, with at least `need` free words from `at`: the current one,
/// or a fresh one after handing the current over. `None` when no block is free. Also
/// whether the recorder should be woken.
#[inline]
fn current_with_room(
    pool: &Pool<'_>,
    slot: &SharedSlot,
    slot_index: u32,
    need: usize,
) -> Option<(u32, usize, bool)> {
    let bw = pool.block_words();
    // Relaxed: only we store it.
    let cur = slot.block.load(Ordering::Relaxed);
    let at = match cur.checked_sub(1).and_then(|i| pool.block(i)) {
        // Relaxed: only we store it while the block is WRITING.
        Some(b) => b.head.load(Ordering::Relaxed) as usize,
        None => 0,
    };
    if cur != 0 && at + need <= bw {
        return Some((cur - 1, at, false));
    }
    if let Some(old) = cur.checked_sub(1) {
        hand_over(pool, slot, old);
    }
    let fresh = pool.pop_free()?;
    if let Some(b) = pool.block(fresh) {
        // Relaxed: published by the Release store of the slot's block below.
        b.owner.store(slot_index, Ordering::Relaxed);
        let seq = slot.next_seq.load(Ordering::Relaxed);
        b.seq.store(seq, Ordering::Relaxed);
        slot.next_seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        b.head.store(0, Ordering::Relaxed);
        b.state.store(BLOCK_WRITING, Ordering::Relaxed);
    }
    // Release: the block's owner, seq and empty head are visible to a recorder that
    // finds the block through the slot (Acquire in `current_block`).
    slot.block.store(fresh + 1, Ordering::Release);
    // Relaxed: a heuristic; fewer than a quarter free wakes the recorder early.
    let n = pool.blocks.len() as u32;
    let wake = pool.free_count() < n / 4 && pool.request_wake();
    Some((fresh, 0, wake))
}

/// Appends one record to the slot's current block, taking a new block when it is full.
/// Async-signal-safe: no allocation, no lock, no panic; a sample that cannot be stored is
/// counted in the slot's `lost`.
///
/// # Safety
///
/// The caller is the slot's only producer: its owner thread, with the handler not
/// re-entered (SIGTRAP is blocked while it runs), or the owner itself in normal context
/// with its handler unable to run.
#[inline]
pub unsafe fn append(pool: &Pool<'_>, slot: &SharedSlot, slot_index: u32, rec: &Rec<'_>) -> Append {
    let need = rec.words();
    let bw = pool.block_words();
    if need > bw || bw == 0 {
        slot.count_lost();
        return Append::Lost { wake: false };
    }
    let Some((index, at, mut wake)) = current_with_room(pool, slot, slot_index, need) else {
        slot.count_lost();
        return Append::Lost { wake: pool.request_wake() };
    };
    // SAFETY: we own block `index` (WRITING, ours), `at + need <= bw` (checked above or a
    // fresh block), and the words are unpublished.
    unsafe { pool.write(index, at, rec) };
    if let Some(b) = pool.block(index) {
        // Release: the record's words are visible to a recorder that sees this head.
        b.head.store((at + need) as u32, Ordering::Release);
    }
    // AcqRel: a count other producers add to; the wake flag below carries the ordering.
    let pending = pool.head.pending.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
    if pending >= pool.head.threshold.load(Ordering::Relaxed) {
        wake |= pool.request_wake();
    }
    Append::Stored { wake }
}

/// The thread is done (its events are closed): hands its last block over and marks the
/// slot DEAD for the recorder, which drains and frees it.
///
/// # Safety
/// As [`append`]: the slot's owner, with its handler unable to run (events closed, or the
/// slot already CLOSING).
pub unsafe fn close(pool: &Pool<'_>, slot: &SharedSlot) {
    // Relaxed: only we store it.
    if let Some(old) = slot.block.load(Ordering::Relaxed).checked_sub(1) {
        hand_over(pool, slot, old);
    }
    // Release (in `finish_close`): the hand-over above happens before a recorder that
    // sees DEAD takes the full list.
    slot.ctl.finish_close(false);
}

/// Storage for a pool on the heap, for tests and loom models.
#[derive(Debug)]
pub struct HeapPool {
    head: PoolHead,
    blocks: alloc::vec::Vec<BlockHead>,
    words: alloc::vec::Vec<Word>,
}

impl HeapPool {
    /// A pool of `nblocks` blocks of `block_words` words, initialised with `threshold`.
    pub fn new(nblocks: usize, block_words: u32, threshold: u64) -> HeapPool {
        let p = HeapPool {
            head: PoolHead::new(),
            blocks: (0..nblocks).map(|_| BlockHead::new()).collect(),
            words: (0..nblocks * block_words as usize).map(|_| Word::new(0)).collect(),
        };
        p.pool().init(block_words, threshold);
        p
    }

    /// The pool.
    pub fn pool(&self) -> Pool<'_> {
        Pool { head: &self.head, blocks: &self.blocks, words: &self.words }
    }
}

// SAFETY: the word cells are only accessed under the custody protocol (module note): a
// block's unpublished words by its one producer, published words by the recorder, with
// Release/Acquire on the block's head and the lists between them.
unsafe impl Sync for HeapPool {}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::custody::{Drain, SlotEvent};

    fn rec(i: u64, frames: &[u64]) -> Rec<'_> {
        Rec { kind: 1, flags: 0, time: i, ip: 0x40, counters: &[], frames }
    }

    fn drain_all(d: &mut Drain, pool: &Pool<'_>, slots: &[SharedSlot]) -> (Vec<u64>, u64, u64) {
        let (mut times, mut lost, mut freed) = (Vec::new(), 0, 0);
        // SAFETY: one recorder.
        unsafe {
            d.pass(
                pool,
                slots,
                slots.len(),
                |_| false,
                |_, _, ev| match ev {
                    SlotEvent::Record(r) => times.push(r.time),
                    SlotEvent::Lost(n) => lost += n,
                    SlotEvent::Freed => freed += 1,
                },
            )
        };
        (times, lost, freed)
    }

    /// Reserving room takes the block the next appends need (handing over a full one),
    /// so that those appends take none; every record still arrives, in order.
    #[test]
    fn reserving_takes_the_block_the_next_appends_need() {
        // Three blocks of 10 words: two 5-word records per block.
        let hp = HeapPool::new(3, 10, 1000);
        let pool = hp.pool();
        let slots = [SharedSlot::new()];
        slots[0].ctl.try_claim().unwrap();
        slots[0].reset_custody(1, 2, 3);
        slots[0].ctl.activate();
        let block = || slots[0].block.load(Ordering::Relaxed);
        // SAFETY: one producer.
        unsafe {
            assert_eq!(reserve(&pool, &slots[0], 0, 10), Some(false));
            let first = block();
            assert_ne!(first, 0, "a block was taken");
            append(&pool, &slots[0], 0, &rec(0, &[7, 8]));
            append(&pool, &slots[0], 0, &rec(1, &[7, 8]));
            assert_eq!(block(), first, "the reserved room held both");
            // No room left: reserving hands the block over and takes the next.
            assert_eq!(reserve(&pool, &slots[0], 0, 5), Some(false));
            let second = block();
            assert_ne!(second, first);
            append(&pool, &slots[0], 0, &rec(2, &[7, 8]));
            assert_eq!(block(), second);
            // More than a block can hold: nothing to prepare.
            assert_eq!(reserve(&pool, &slots[0], 0, 11), Some(false));
        }
        let mut d = Drain::new(pool.len(), 1);
        let (times, lost, _) = drain_all(&mut d, &pool, &slots);
        assert_eq!((times, lost), (vec![0, 1, 2], 0));
    }

    #[test]
    fn a_dry_pool_counts_losses_exactly_and_wakes_the_recorder_once() {
        // Two blocks of 10 words: two 5-word records per block.
        let hp = HeapPool::new(2, 10, 1000);
        let pool = hp.pool();
        let slots = [SharedSlot::new()];
        slots[0].ctl.try_claim().unwrap();
        slots[0].reset_custody(1, 2, 3);
        slots[0].ctl.activate();
        // SAFETY: one producer.
        let out: Vec<Append> =
            (0..6).map(|i| unsafe { append(&pool, &slots[0], 0, &rec(i, &[7, 8])) }).collect();
        assert_eq!(
            out,
            [
                Append::Stored { wake: false },
                Append::Stored { wake: false },
                // Two blocks are too few for the low-water wakeup (a quarter of 2 is 0).
                Append::Stored { wake: false },
                Append::Stored { wake: false },
                Append::Lost { wake: true },  // dry: wake the recorder
                Append::Lost { wake: false }, // a wakeup is already pending
            ]
        );
        assert_eq!(slots[0].lost(), 2);
        let mut d = Drain::new(pool.len(), 1);
        let (times, lost, freed) = drain_all(&mut d, &pool, &slots);
        assert_eq!((times, lost, freed), (vec![0, 1, 2, 3], 2, 0));
        assert_eq!(pool.pending(), 0);
        // Both blocks came back: the second was handed over when the fifth record did
        // not fit, before the pool turned out dry.
        assert_eq!(pool.free_count(), 2);
        // SAFETY: one producer.
        let again = unsafe { append(&pool, &slots[0], 0, &rec(9, &[])) };
        assert_eq!(again, Append::Stored { wake: false });
        assert!(slots[0].ctl.begin_close());
        // SAFETY: the owner, done.
        unsafe { close(&pool, &slots[0]) };
        let (times, lost, freed) = drain_all(&mut d, &pool, &slots);
        assert_eq!((times, lost, freed), (vec![9], 0, 1));
        assert_eq!(pool.free_count(), 2, "both blocks free again");
        assert!(slots[0].ctl.try_claim().is_some(), "the slot is free for a new owner");
    }

    #[test]
    fn a_gone_owners_partial_block_is_read_to_its_end_and_freed_with_its_slot() {
        let hp = HeapPool::new(4, 64, 1000);
        let pool = hp.pool();
        let slots = [SharedSlot::new(), SharedSlot::new()];
        for s in &slots {
            s.ctl.try_claim().unwrap();
            s.ctl.activate();
        }
        for i in 0..3 {
            // SAFETY: one producer per slot.
            unsafe {
                append(&pool, &slots[0], 0, &rec(i, &[]));
                append(&pool, &slots[1], 1, &rec(100 + i, &[]));
            }
        }
        // Slot 0's process was killed: its block was never handed over.
        let mut d = Drain::new(pool.len(), 2);
        let (mut times, mut freed) = (Vec::new(), Vec::new());
        // SAFETY: one recorder; slot 0's owner can no longer write.
        unsafe {
            d.pass(
                &pool,
                &slots,
                2,
                |s| std::ptr::eq(s, &slots[0]),
                |i, _, ev| match ev {
                    SlotEvent::Record(r) => times.push(r.time),
                    SlotEvent::Freed => freed.push(i),
                    SlotEvent::Lost(_) => {}
                },
            )
        };
        assert_eq!(times, [0, 1, 2, 100, 101, 102]);
        assert_eq!(freed, [0]);
        assert_eq!(pool.free_count(), 3, "the gone slot's block is back; slot 1 keeps its own");
        assert!(slots[0].ctl.try_claim().is_some(), "the gone slot is free");
    }

    /// An owner killed inside `hand_over` leaves its block FULL and still its current
    /// block, listed or not (killed before or after `push_full`): either way every record
    /// is read once, the block is freed once, and the slot is freed.
    #[test]
    fn an_owner_killed_while_handing_over_loses_nothing_and_frees_once() {
        for listed in [false, true] {
            let hp = HeapPool::new(3, 64, 1000);
            let pool = hp.pool();
            let slots = [SharedSlot::new()];
            slots[0].ctl.try_claim().unwrap();
            slots[0].ctl.activate();
            for i in 0..3 {
                // SAFETY: one producer.
                unsafe { append(&pool, &slots[0], 0, &rec(i, &[])) };
            }
            // hand_over's first steps, then the kill.
            let index = slots[0].current_block() - 1;
            pool.block(index).unwrap().state.store(BLOCK_FULL, Ordering::Relaxed);
            if listed {
                pool.push_full(index);
            }
            let mut d = Drain::new(pool.len(), 1);
            let (mut times, mut freed) = (Vec::new(), 0);
            for _ in 0..2 {
                // SAFETY: one recorder; the owner can no longer write.
                unsafe {
                    d.pass(
                        &pool,
                        &slots,
                        1,
                        |_| true,
                        |_, _, ev| match ev {
                            SlotEvent::Record(r) => times.push(r.time),
                            SlotEvent::Freed => freed += 1,
                            SlotEvent::Lost(_) => {}
                        },
                    )
                };
            }
            assert_eq!(times, [0, 1, 2], "listed {listed}");
            assert_eq!(freed, 1, "listed {listed}");
            assert_eq!(pool.free_count(), 3, "listed {listed}: the block is free, once");
        }
    }

    #[test]
    fn a_record_longer_than_a_block_is_lost_not_split() {
        let hp = HeapPool::new(4, 8, 1);
        let pool = hp.pool();
        let slot = SharedSlot::new();
        // SAFETY: one producer.
        let a = unsafe { append(&pool, &slot, 0, &rec(1, &[1, 2, 3, 4, 5, 6])) };
        assert_eq!(a, Append::Lost { wake: false });
        assert_eq!(slot.lost(), 1);
    }

    #[test]
    fn a_partial_block_is_read_once_and_continued_later() {
        let hp = HeapPool::new(3, 64, 1000);
        let pool = hp.pool();
        let slots = [SharedSlot::new()];
        slots[0].ctl.try_claim().unwrap();
        slots[0].ctl.activate();
        let mut d = Drain::new(pool.len(), 1);
        for round in 0..5u64 {
            for i in 0..3 {
                // SAFETY: one producer.
                unsafe { append(&pool, &slots[0], 0, &rec(round * 3 + i, &[])) };
            }
            let (times, _, _) = drain_all(&mut d, &pool, &slots);
            assert_eq!(times, (round * 3..round * 3 + 3).collect::<Vec<_>>(), "round {round}");
        }
    }

    #[test]
    fn the_comm_round_trips() {
        let s = SharedSlot::new();
        s.set_comm(b"worker-12");
        assert_eq!(&s.comm()[..10], b"worker-12\0");
        s.set_comm(b"a-name-longer-than-sixteen");
        assert_eq!(&s.comm(), b"a-name-longer-th");
    }
}
