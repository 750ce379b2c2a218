//! Batched deferred reclamation: the kfree_rcu design of seed 002, in user space.
//!
//! This module owns the garbage and its containers (records, page-sized blocks, chains,
//! batches, a thread's [`Bag`], the domain's [`Orphans`] queue) and freeing a batch in
//! bulk. The code that moves garbage between them is the domain's: a thread's retire
//! path in `domain/handle.rs`, the orphan queue, stealing and `barrier` in
//! `domain/collect.rs`.
//!
//! # Pipeline
//!
//! Each thread owns a [`Bag`]. `retire` appends a record (pointer + drop
//! function) to the bag's current *block*, a 4 KiB array of 255 records (one
//! page, like `kfree_rcu_bulk_data`). A full block joins the bag's `full`
//! chain; when `full` holds [`BATCH_BLOCKS`] blocks it is *sealed* into a
//! batch tagged with a grace-period cookie (one `SeqCst` fence), and the
//! background reclaimer is asked to run that grace period. The retiring thread
//! later finds the cookie reached (one load) and frees the whole batch in bulk
//! on its own thread, which is also where the allocator wants the memory
//! back. One emptied block is kept as a spare so steady state allocates no
//! blocks at all. One membarrier therefore pays for about 2,000 objects.
//!
//! *Emergency path.* If a block cannot be allocated, an object that carries an
//! embedded [`RcuHead`] is linked into the bag's intrusive emergency list
//! through that head (no memory needed) and rides along with the next batch.
//! A head-less object cannot be linked anywhere, so the retiring thread waits
//! for a grace period and frees it at once (the head-less `kvfree_rcu` rule);
//! inside a read section, where it cannot wait, it reports the allocation
//! failure like `Box::new` would. Nothing is ever dropped on the floor.
//!
//! *Ceiling and backpressure.* A bag never holds more than [`LIMIT_BLOCKS`]
//! sealed-or-full blocks plus the current one and [`EMERGENCY_LIMIT`] emergency
//! objects: past that, `retire` waits for the oldest batch's grace period and
//! frees it synchronously. So one thread keeps at most
//! [`MAX_OUTSTANDING_PER_THREAD`] objects retired-but-unfreed, whatever the
//! rate (crossbeam-epoch with one pin per loop grew to 1.2 GB here). The one
//! exception: `retire` called *inside* a read section cannot wait for a grace
//! period (it would wait for itself), so there the ceiling is enforced at the
//! next `retire` outside one.
//!
//! *Garbage other threads hold.* `barrier()` and the reclaimer's idle scan
//! take garbage out of other threads' bags. The owner fills its current block
//! without a lock, inside a read section of its own, only while the bag's
//! `steal` flag is clear; a taker sets `steal`, waits one grace period (after
//! which every owner section either ended or sees the flag and takes the
//! locked slow path), then empties the bag under its lock and clears the flag.
//! The owner's fast path thus costs a read section and a load, no atomic RMW.
//! Exiting threads hand everything to the domain's orphan queue.
//!
//! Must never: run a destructor while holding a bag lock (destructors may
//! retire), free anything before its grace period, or lose a record.

use std::alloc::Layout;
use std::mem::MaybeUninit;
use std::ptr;

use crate::primitive::UnsafeCell;
use crate::primitive::{AtomicBool, AtomicPtr, AtomicUsize, Mutex, Ordering};
use crate::reader::Reader;
use crate::stats::Counters;

/// A function that frees one retired object, given the pointer retired.
pub type DropFn = unsafe fn(*mut ());

/// Records per block: a 4 KiB block (two header words + 255 records of two
/// words). Tiny under loom so models reach block boundaries.
#[cfg(not(loom))]
pub const RECORDS_PER_BLOCK: usize = 255;
/// Records per block (loom).
#[cfg(loom)]
pub const RECORDS_PER_BLOCK: usize = 2;

/// Full blocks that make a batch: one grace period per this many blocks.
#[cfg(not(loom))]
pub const BATCH_BLOCKS: usize = 8;
/// Full blocks that make a batch (loom).
#[cfg(loom)]
pub const BATCH_BLOCKS: usize = 1;

/// Full blocks that make a batch when grace periods are cheap (no barrier:
/// see "Polling" in `domain/grace.rs`), which the retiring thread then runs at
/// once: small batches are freed while still in cache.
pub(crate) const CHEAP_BATCH_BLOCKS: usize = 1;

/// Records freed between two quiescent-state reports of the freeing thread.
pub(crate) const QUIESCE_EVERY: usize = 32;

/// Blocks a thread may hold retired-but-unfreed before `retire` waits.
///
/// One batch: while the thread fills the next batch, the previous one waits
/// for its grace period; if that has not completed when the next block fills,
/// the thread waits for it (usually sharing the grace period the reclaimer is
/// already running). A small backlog is also the faster one: retired objects
/// go cold and the allocator has to take them back through its slow bins. In
/// `strobe bench reclaim --quick` here, 24 blocks gave ~6,400 objects
/// outstanding per thread and 65-85 ns of process CPU per object (100-114 on
/// 2 threads), 8 blocks ~2,300 and 55-74 (58-60 on 2 threads).
#[cfg(not(loom))]
pub const LIMIT_BLOCKS: usize = 8;
/// Blocks a thread may hold retired-but-unfreed before `retire` waits (loom).
#[cfg(loom)]
pub const LIMIT_BLOCKS: usize = 2;

/// Emergency-list objects that are sealed into a batch of their own.
pub(crate) const EMERGENCY_BATCH: usize = if cfg!(loom) { 2 } else { 256 };
/// Emergency-list objects a thread may hold before `retire` waits.
pub const EMERGENCY_LIMIT: usize = if cfg!(loom) { 4 } else { 4096 };

/// The most objects one thread can have retired but not yet freed when it
/// calls `retire` outside a read section: the ceiling blocks, the one being
/// sealed, the current block, and the emergency list.
pub const MAX_OUTSTANDING_PER_THREAD: usize =
    (LIMIT_BLOCKS + BATCH_BLOCKS + 1) * RECORDS_PER_BLOCK + EMERGENCY_LIMIT;

/// Sealed batches a bag can hold waiting for their grace periods.
pub(crate) const RING: usize = LIMIT_BLOCKS / BATCH_BLOCKS + 2;

/// Blocks the orphan queue may hold before the thread feeding it reclaims.
pub(crate) const ORPHAN_LIMIT_BLOCKS: usize = if cfg!(loom) { 2 } else { 256 };

#[derive(Clone, Copy)]
pub(crate) struct Record {
    pub(crate) ptr: *mut (),
    pub(crate) drop: DropFn,
}

#[repr(C)]
pub(crate) struct Block {
    pub(crate) next: *mut Block,
    pub(crate) len: usize,
    pub(crate) records: [MaybeUninit<Record>; RECORDS_PER_BLOCK],
}

#[cfg(not(loom))]
const _: () = assert!(std::mem::size_of::<Block>() == 4096);

/// Reclamation header embedded in an object, for the emergency path.
///
/// Embed one in objects you retire with [`retire_head`](crate::retire_head)
/// (the kernel's `rcu_head`): when a record block cannot be allocated, the
/// object is queued through its own head instead, so retiring it needs no
/// memory at all. Readers never look at the head; only reclamation writes it.
#[repr(C)]
pub struct RcuHead {
    next: std::cell::UnsafeCell<*mut RcuHead>,
    drop: std::cell::UnsafeCell<Option<DropFn>>,
}

impl RcuHead {
    /// A fresh, unqueued head.
    pub const fn new() -> Self {
        Self {
            next: std::cell::UnsafeCell::new(ptr::null_mut()),
            drop: std::cell::UnsafeCell::new(None),
        }
    }
}

impl Default for RcuHead {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for RcuHead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RcuHead")
    }
}

// SAFETY: the head's cells are written only by the reclamation side, which
// owns the object exclusively once it is retired (the retiring thread before
// hand-off, then whoever holds the batch under a bag or orphan lock).
unsafe impl Sync for RcuHead {}
// SAFETY: as above.
unsafe impl Send for RcuHead {}

#[derive(Clone, Copy)]
pub(crate) struct Chain {
    pub(crate) head: *mut Block,
    pub(crate) tail: *mut Block,
    pub(crate) blocks: usize,
    pub(crate) records: usize,
}

impl Chain {
    pub(crate) const EMPTY: Chain =
        Chain { head: ptr::null_mut(), tail: ptr::null_mut(), blocks: 0, records: 0 };

    /// # Safety
    /// `b` is a valid block owned by the caller.
    pub(crate) unsafe fn push(&mut self, b: *mut Block) {
        // SAFETY: caller passes an owned block.
        unsafe {
            (*b).next = ptr::null_mut();
            if self.tail.is_null() {
                self.head = b;
            } else {
                (*self.tail).next = b;
            }
            self.records += (*b).len;
        }
        self.tail = b;
        self.blocks += 1;
    }

    /// # Safety
    /// Both chains are owned by the caller.
    pub(crate) unsafe fn append(&mut self, other: Chain) {
        if other.head.is_null() {
            return;
        }
        if self.tail.is_null() {
            *self = other;
            return;
        }
        // SAFETY: caller owns both chains.
        unsafe { (*self.tail).next = other.head };
        self.tail = other.tail;
        self.blocks += other.blocks;
        self.records += other.records;
    }
}

#[derive(Clone, Copy)]
pub(crate) struct EList {
    pub(crate) head: *mut RcuHead,
    pub(crate) len: usize,
}

impl EList {
    pub(crate) const EMPTY: EList = EList { head: ptr::null_mut(), len: 0 };

    /// # Safety
    /// `h` is the head of a retired object owned by the caller.
    pub(crate) unsafe fn push(&mut self, h: *mut RcuHead, drop: DropFn) {
        // SAFETY: the caller owns the retired object and so its head.
        unsafe {
            *(*h).next.get() = self.head;
            *(*h).drop.get() = Some(drop);
        }
        self.head = h;
        self.len += 1;
    }

    /// # Safety
    /// Both lists are owned by the caller.
    pub(crate) unsafe fn append(&mut self, other: EList) {
        if other.head.is_null() {
            return;
        }
        let mut t = other.head;
        // SAFETY: walking a list the caller owns.
        unsafe {
            while !(*(*t).next.get()).is_null() {
                t = *(*t).next.get();
            }
            *(*t).next.get() = self.head;
        }
        self.head = other.head;
        self.len += other.len;
    }
}

/// Garbage that waits for one grace period.
#[derive(Clone, Copy)]
pub(crate) struct Batch {
    pub(crate) chain: Chain,
    pub(crate) elist: EList,
    pub(crate) cookie: u64,
}

impl Batch {
    pub(crate) const EMPTY: Batch = Batch { chain: Chain::EMPTY, elist: EList::EMPTY, cookie: 0 };

    pub(crate) fn objects(&self) -> usize {
        self.chain.records + self.elist.len
    }
}

pub(crate) struct BagLocal {
    pub(crate) cur: *mut Block,
    pub(crate) spare: *mut Block,
    pub(crate) full: Chain,
    pub(crate) elist: EList,
    pub(crate) ring: [Batch; RING],
    pub(crate) ring_start: usize,
    pub(crate) ring_len: usize,
}

impl BagLocal {
    pub(crate) const fn new() -> Self {
        Self {
            cur: ptr::null_mut(),
            spare: ptr::null_mut(),
            full: Chain::EMPTY,
            elist: EList::EMPTY,
            ring: [Batch::EMPTY; RING],
            ring_start: 0,
            ring_len: 0,
        }
    }

    pub(crate) fn pending_blocks(&self) -> usize {
        let mut n = self.full.blocks;
        for i in 0..self.ring_len {
            n += self.ring[(self.ring_start + i) % RING].chain.blocks;
        }
        n
    }

    pub(crate) fn outstanding(&self) -> usize {
        let mut n = self.full.records + self.elist.len;
        for i in 0..self.ring_len {
            n += self.ring[(self.ring_start + i) % RING].objects();
        }
        if !self.cur.is_null() {
            // SAFETY: `cur` is a live block owned by this bag.
            n += unsafe { (*self.cur).len };
        }
        n
    }

    pub(crate) fn push_ring(&mut self, b: Batch) {
        debug_assert!(self.ring_len < RING);
        self.ring[(self.ring_start + self.ring_len) % RING] = b;
        self.ring_len += 1;
    }

    pub(crate) fn pop_ring(&mut self) -> Batch {
        debug_assert!(self.ring_len > 0);
        let b = self.ring[self.ring_start];
        self.ring_start = (self.ring_start + 1) % RING;
        self.ring_len -= 1;
        b
    }

    /// Moves every piece of garbage (including a partial current block) into
    /// `out`, leaving only the spare block.
    ///
    /// # Safety
    /// The caller has exclusive access to the bag's local state.
    pub(crate) unsafe fn take_all(&mut self, out: &mut Vec<Batch>) {
        let mut all = Batch::EMPTY;
        // SAFETY: exclusive access per the contract.
        unsafe {
            if !self.cur.is_null() {
                if (*self.cur).len > 0 {
                    self.full.push(self.cur);
                } else if self.spare.is_null() {
                    self.spare = self.cur;
                } else {
                    free_block(self.cur);
                }
                self.cur = ptr::null_mut();
            }
            all.chain.append(self.full);
            all.elist.append(self.elist);
        }
        self.full = Chain::EMPTY;
        self.elist = EList::EMPTY;
        if all.objects() > 0 {
            out.push(all);
        }
        while self.ring_len > 0 {
            out.push(self.pop_ring());
        }
    }
}

/// One thread's reclamation state (see the module note). Registered in the
/// domain and reused after the thread exits.
pub(crate) struct Bag {
    /// Set by a taker: the owner must not touch `local` without the lock.
    pub(crate) steal: AtomicBool,
    /// Serialises the owner's slow path with takers.
    pub(crate) lock: Mutex<()>,
    /// Held while the owner frees batches it took out of the bag, so that
    /// `barrier` can wait for frees already in progress.
    pub(crate) free_lock: Mutex<()>,
    pub(crate) local: UnsafeCell<BagLocal>,
    pub(crate) in_use: AtomicBool,
    pub(crate) next: AtomicPtr<Bag>,
    /// Retired-but-unfreed objects as of the owner's last slow path.
    pub(crate) outstanding: AtomicUsize,
    /// The bag holds garbage a taker could free.
    pub(crate) dirty: AtomicBool,
    /// Bumped on every owner slow path: the idle scan leaves busy bags alone.
    pub(crate) slow_calls: AtomicUsize,
    /// `slow_calls` as of the reclaimer's previous idle scan.
    pub(crate) seen_calls: AtomicUsize,
}

// SAFETY: `local` is accessed by the owner in read sections while `steal` is
// clear and otherwise only under `lock` (module note); everything else is
// atomic or a mutex.
unsafe impl Sync for Bag {}
// SAFETY: as above.
unsafe impl Send for Bag {}

impl Bag {
    pub(crate) fn new() -> Self {
        Self {
            steal: AtomicBool::new(false),
            lock: Mutex::new(()),
            free_lock: Mutex::new(()),
            local: UnsafeCell::new(BagLocal::new()),
            in_use: AtomicBool::new(true),
            next: AtomicPtr::new(ptr::null_mut()),
            outstanding: AtomicUsize::new(0),
            dirty: AtomicBool::new(false),
            slow_calls: AtomicUsize::new(0),
            seen_calls: AtomicUsize::new(0),
        }
    }
}

/// Garbage of exited threads and of retires made without a handle.
pub(crate) struct Orphans {
    pub(crate) batches: Vec<Batch>,
    pub(crate) cur: *mut Block,
    pub(crate) elist: EList,
    pub(crate) blocks: usize,
}

// SAFETY: only accessed under the domain's `orphans` mutex.
unsafe impl Send for Orphans {}

impl Orphans {
    pub(crate) const fn new() -> Self {
        Self { batches: Vec::new(), cur: ptr::null_mut(), elist: EList::EMPTY, blocks: 0 }
    }

    pub(crate) fn take(&mut self, out: &mut Vec<Batch>) {
        out.append(&mut self.batches);
        let mut b = Batch::EMPTY;
        if !self.cur.is_null() {
            // SAFETY: the orphan block is owned by the queue (we hold its lock).
            unsafe { b.chain.push(self.cur) };
            self.cur = ptr::null_mut();
        }
        b.elist = self.elist;
        self.elist = EList::EMPTY;
        if b.objects() > 0 {
            out.push(b);
        }
        self.blocks = 0;
    }

    pub(crate) fn outstanding(&self) -> usize {
        let mut n = self.elist.len + self.batches.iter().map(Batch::objects).sum::<usize>();
        if !self.cur.is_null() {
            // SAFETY: owned by the queue, read under its lock.
            n += unsafe { (*self.cur).len };
        }
        n
    }
}

#[cfg(not(loom))]
static FAIL_BLOCK_ALLOCS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Makes the next `n` record-block allocations (in every domain) fail, to test
/// the emergency path. Test support; costs one relaxed load per block.
pub fn fail_next_block_allocs(n: usize) {
    #[cfg(not(loom))]
    FAIL_BLOCK_ALLOCS.store(n, std::sync::atomic::Ordering::Relaxed);
    #[cfg(loom)]
    let _ = n;
}

pub(crate) fn alloc_block(c: &Counters) -> *mut Block {
    #[cfg(not(loom))]
    {
        use std::sync::atomic::Ordering as O;
        if FAIL_BLOCK_ALLOCS.load(O::Relaxed) > 0
            && FAIL_BLOCK_ALLOCS.fetch_update(O::Relaxed, O::Relaxed, |n| n.checked_sub(1)).is_ok()
        {
            c.block_alloc_failures.fetch_add(1, Ordering::Relaxed);
            return ptr::null_mut();
        }
    }
    // SAFETY: Block has non-zero size.
    let b = unsafe { std::alloc::alloc(Layout::new::<Block>()) }.cast::<Block>();
    if b.is_null() {
        c.block_alloc_failures.fetch_add(1, Ordering::Relaxed);
        return b;
    }
    // SAFETY: freshly allocated, properly sized and aligned.
    unsafe {
        ptr::addr_of_mut!((*b).next).write(ptr::null_mut());
        ptr::addr_of_mut!((*b).len).write(0);
    }
    c.blocks_allocated.fetch_add(1, Ordering::Relaxed);
    b
}

/// # Safety
/// `b` came from `alloc_block` and is no longer referenced.
pub(crate) unsafe fn free_block(b: *mut Block) {
    // SAFETY: per the contract.
    unsafe { std::alloc::dealloc(b.cast(), Layout::new::<Block>()) }
}

/// # Safety
/// `b` is a valid block owned by the caller with room for one record.
#[inline(always)]
pub(crate) unsafe fn block_push(b: *mut Block, rec: Record) {
    // SAFETY: per the contract; `len < RECORDS_PER_BLOCK` keeps the write in
    // bounds.
    unsafe {
        let len = (*b).len;
        ptr::addr_of_mut!((*b).records)
            .cast::<MaybeUninit<Record>>()
            .add(len)
            .write(MaybeUninit::new(rec));
        (*b).len = len + 1;
    }
}

/// Aborts if a destructor unwinds out of bulk freeing: the rest of the batch
/// could be neither freed nor safely kept.
pub(crate) struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        eprintln!("strobe-rcu: a destructor panicked during deferred reclamation; aborting");
        std::process::abort();
    }
}

/// Frees a batch whose grace period has completed, keeping one emptied block
/// in `*keep` if it is empty.
///
/// # Safety
/// The batch's grace period has completed and the caller owns it.
pub(crate) unsafe fn free_batch(
    c: &Counters,
    b: Batch,
    keep: &mut *mut Block,
    me: Option<&Reader>,
) {
    let guard = AbortOnUnwind;
    let mut blk = b.chain.head;
    while !blk.is_null() {
        // SAFETY: the caller owns the chain; records below `len` are written.
        unsafe {
            let next = (*blk).next;
            let len = (*blk).len;
            let recs = ptr::addr_of!((*blk).records).cast::<Record>();
            for i in 0..len {
                let r = recs.add(i).read();
                (r.drop)(r.ptr);
                // A block takes microseconds to free, during which this
                // thread enters no section: report quiescent states so that
                // another thread's grace period, polling for our epoch, need
                // not pay a membarrier for us. A no-op inside a section.
                if i % QUIESCE_EVERY == QUIESCE_EVERY - 1 {
                    if let Some(me) = me {
                        me.quiesce();
                    }
                }
            }
            (*blk).len = 0;
            if keep.is_null() {
                *keep = blk;
            } else {
                free_block(blk);
            }
            blk = next;
        }
    }
    let mut h = b.elist.head;
    while !h.is_null() {
        // SAFETY: the caller owns the list; read `next` before the drop frees
        // the object holding the head.
        unsafe {
            let next = *(*h).next.get();
            if let Some(f) = *(*h).drop.get() {
                f(h.cast());
            }
            h = next;
        }
    }
    std::mem::forget(guard);
    c.freed.fetch_add(b.objects() as u64, Ordering::Relaxed);
}

/// The drop function of a retired `Box<T>`.
///
/// # Safety
/// `p` came from `Box::<T>::into_raw`.
pub(crate) unsafe fn drop_box<T>(p: *mut ()) {
    // SAFETY: per the contract.
    drop(unsafe { Box::from_raw(p.cast::<T>()) });
}
