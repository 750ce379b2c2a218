//! Batched deferred reclamation: the kfree_rcu design of seed 002, in user space.
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
use std::cell::Cell;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};

use crate::domain::Domain;
use crate::primitive::UnsafeCell;
use crate::primitive::{lock, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Mutex, Ordering};
use crate::reader::{ReadGuard, Reader};

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
/// see "Polling" in `domain.rs`), which the retiring thread then runs at
/// once: small batches are freed while still in cache.
const CHEAP_BATCH_BLOCKS: usize = 1;

/// Records freed between two quiescent-state reports of the freeing thread.
const QUIESCE_EVERY: usize = 32;

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
const EMERGENCY_BATCH: usize = if cfg!(loom) { 2 } else { 256 };
/// Emergency-list objects a thread may hold before `retire` waits.
pub const EMERGENCY_LIMIT: usize = if cfg!(loom) { 4 } else { 4096 };

/// The most objects one thread can have retired but not yet freed when it
/// calls `retire` outside a read section: the ceiling blocks, the one being
/// sealed, the current block, and the emergency list.
pub const MAX_OUTSTANDING_PER_THREAD: usize =
    (LIMIT_BLOCKS + BATCH_BLOCKS + 1) * RECORDS_PER_BLOCK + EMERGENCY_LIMIT;

/// Sealed batches a bag can hold waiting for their grace periods.
const RING: usize = LIMIT_BLOCKS / BATCH_BLOCKS + 2;

/// Blocks the orphan queue may hold before the thread feeding it reclaims.
const ORPHAN_LIMIT_BLOCKS: usize = if cfg!(loom) { 2 } else { 256 };

#[derive(Clone, Copy)]
struct Record {
    ptr: *mut (),
    drop: DropFn,
}

#[repr(C)]
struct Block {
    next: *mut Block,
    len: usize,
    records: [MaybeUninit<Record>; RECORDS_PER_BLOCK],
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
struct Chain {
    head: *mut Block,
    tail: *mut Block,
    blocks: usize,
    records: usize,
}

impl Chain {
    const EMPTY: Chain =
        Chain { head: ptr::null_mut(), tail: ptr::null_mut(), blocks: 0, records: 0 };

    /// # Safety
    /// `b` is a valid block owned by the caller.
    unsafe fn push(&mut self, b: *mut Block) {
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
    unsafe fn append(&mut self, other: Chain) {
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
struct EList {
    head: *mut RcuHead,
    len: usize,
}

impl EList {
    const EMPTY: EList = EList { head: ptr::null_mut(), len: 0 };

    /// # Safety
    /// `h` is the head of a retired object owned by the caller.
    unsafe fn push(&mut self, h: *mut RcuHead, drop: DropFn) {
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
    unsafe fn append(&mut self, other: EList) {
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
    chain: Chain,
    elist: EList,
    cookie: u64,
}

impl Batch {
    const EMPTY: Batch = Batch { chain: Chain::EMPTY, elist: EList::EMPTY, cookie: 0 };

    fn objects(&self) -> usize {
        self.chain.records + self.elist.len
    }
}

struct BagLocal {
    cur: *mut Block,
    spare: *mut Block,
    full: Chain,
    elist: EList,
    ring: [Batch; RING],
    ring_start: usize,
    ring_len: usize,
}

impl BagLocal {
    const fn new() -> Self {
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

    fn pending_blocks(&self) -> usize {
        let mut n = self.full.blocks;
        for i in 0..self.ring_len {
            n += self.ring[(self.ring_start + i) % RING].chain.blocks;
        }
        n
    }

    fn outstanding(&self) -> usize {
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

    fn push_ring(&mut self, b: Batch) {
        debug_assert!(self.ring_len < RING);
        self.ring[(self.ring_start + self.ring_len) % RING] = b;
        self.ring_len += 1;
    }

    fn pop_ring(&mut self) -> Batch {
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
    unsafe fn take_all(&mut self, out: &mut Vec<Batch>) {
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
    steal: AtomicBool,
    /// Serialises the owner's slow path with takers.
    lock: Mutex<()>,
    /// Held while the owner frees batches it took out of the bag, so that
    /// `barrier` can wait for frees already in progress.
    free_lock: Mutex<()>,
    local: UnsafeCell<BagLocal>,
    in_use: AtomicBool,
    next: AtomicPtr<Bag>,
    /// Retired-but-unfreed objects as of the owner's last slow path.
    outstanding: AtomicUsize,
    /// The bag holds garbage a taker could free.
    dirty: AtomicBool,
    /// Bumped on every owner slow path: the idle scan leaves busy bags alone.
    slow_calls: AtomicUsize,
    /// `slow_calls` as of the reclaimer's previous idle scan.
    seen_calls: AtomicUsize,
}

// SAFETY: `local` is accessed by the owner in read sections while `steal` is
// clear and otherwise only under `lock` (module note); everything else is
// atomic or a mutex.
unsafe impl Sync for Bag {}
// SAFETY: as above.
unsafe impl Send for Bag {}

impl Bag {
    fn new() -> Self {
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
    batches: Vec<Batch>,
    cur: *mut Block,
    elist: EList,
    blocks: usize,
}

// SAFETY: only accessed under the domain's `orphans` mutex.
unsafe impl Send for Orphans {}

impl Orphans {
    pub(crate) const fn new() -> Self {
        Self { batches: Vec::new(), cur: ptr::null_mut(), elist: EList::EMPTY, blocks: 0 }
    }

    fn take(&mut self, out: &mut Vec<Batch>) {
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

    fn outstanding(&self) -> usize {
        let mut n = self.elist.len + self.batches.iter().map(Batch::objects).sum::<usize>();
        if !self.cur.is_null() {
            // SAFETY: owned by the queue, read under its lock.
            n += unsafe { (*self.cur).len };
        }
        n
    }
}

/// Event counters of a domain (all relaxed: statistics only).
pub(crate) struct Counters {
    pub(crate) grace_periods: AtomicU64,
    pub(crate) lone_grace_periods: AtomicU64,
    pub(crate) polled_grace_periods: AtomicU64,
    pub(crate) blocks_allocated: AtomicU64,
    pub(crate) block_alloc_failures: AtomicU64,
    pub(crate) emergency: AtomicU64,
    pub(crate) headless_sync: AtomicU64,
    pub(crate) backpressure: AtomicU64,
    pub(crate) freed: AtomicU64,
    pub(crate) steals: AtomicU64,
}

macro_rules! counters_init {
    () => {
        crate::reclaim::Counters {
            grace_periods: AtomicU64::new(0),
            lone_grace_periods: AtomicU64::new(0),
            polled_grace_periods: AtomicU64::new(0),
            blocks_allocated: AtomicU64::new(0),
            block_alloc_failures: AtomicU64::new(0),
            emergency: AtomicU64::new(0),
            headless_sync: AtomicU64::new(0),
            backpressure: AtomicU64::new(0),
            freed: AtomicU64::new(0),
            steals: AtomicU64::new(0),
        }
    };
}
pub(crate) use counters_init;

/// A snapshot of a domain's reclamation figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Grace periods completed.
    pub grace_periods: u64,
    /// Of those, the ones that skipped the membarrier because no other thread
    /// held a reader record.
    pub lone_grace_periods: u64,
    /// Of those, the ones that completed without any barrier: every other
    /// reader was seen carrying the new epoch (this includes lone ones).
    pub polled_grace_periods: u64,
    /// Objects retired but not yet freed, as of each thread's last slow path
    /// (so it can lag by up to one block per thread).
    pub outstanding: usize,
    /// Record blocks allocated (steady state reuses a cached spare instead).
    pub blocks_allocated: u64,
    /// Block allocations that failed (really or by fault injection).
    pub block_alloc_failures: u64,
    /// Objects queued through their embedded [`RcuHead`] because no block
    /// could be allocated.
    pub emergency: u64,
    /// Head-less objects freed synchronously because no block could be
    /// allocated.
    pub headless_sync: u64,
    /// Times `retire` hit the ceiling and waited for a grace period.
    pub backpressure_waits: u64,
    /// Objects freed after their grace period.
    pub freed: u64,
    /// Bags emptied by `barrier` or the idle scan.
    pub steals: u64,
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

fn alloc_block(d: &Domain) -> *mut Block {
    #[cfg(not(loom))]
    {
        use std::sync::atomic::Ordering as O;
        if FAIL_BLOCK_ALLOCS.load(O::Relaxed) > 0
            && FAIL_BLOCK_ALLOCS.fetch_update(O::Relaxed, O::Relaxed, |n| n.checked_sub(1)).is_ok()
        {
            d.stats.block_alloc_failures.fetch_add(1, Ordering::Relaxed);
            return ptr::null_mut();
        }
    }
    // SAFETY: Block has non-zero size.
    let b = unsafe { std::alloc::alloc(Layout::new::<Block>()) }.cast::<Block>();
    if b.is_null() {
        d.stats.block_alloc_failures.fetch_add(1, Ordering::Relaxed);
        return b;
    }
    // SAFETY: freshly allocated, properly sized and aligned.
    unsafe {
        ptr::addr_of_mut!((*b).next).write(ptr::null_mut());
        ptr::addr_of_mut!((*b).len).write(0);
    }
    d.stats.blocks_allocated.fetch_add(1, Ordering::Relaxed);
    b
}

/// # Safety
/// `b` came from `alloc_block` and is no longer referenced.
unsafe fn free_block(b: *mut Block) {
    // SAFETY: per the contract.
    unsafe { std::alloc::dealloc(b.cast(), Layout::new::<Block>()) }
}

/// # Safety
/// `b` is a valid block owned by the caller with room for one record.
#[inline(always)]
unsafe fn block_push(b: *mut Block, rec: Record) {
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
struct AbortOnUnwind;

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
unsafe fn free_batch(d: &Domain, b: Batch, keep: &mut *mut Block, me: Option<&Reader>) {
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
    d.stats.freed.fetch_add(b.objects() as u64, Ordering::Relaxed);
}

/// A thread's registration with a domain: its reader record and its bag.
///
/// The free functions keep one per thread for the global domain; explicit
/// handles exist for separate [`Domain`]s (tests, models). Dropping the handle
/// hands its garbage to the domain's orphan queue and releases its records.
pub struct LocalHandle {
    domain: &'static Domain,
    pub(crate) reader: *const Reader,
    bag: *const Bag,
    in_reclaim: Cell<bool>,
    _not_send: PhantomData<*mut ()>,
}

impl Domain {
    /// Registers the calling thread: claims a reader record and a bag. May
    /// allocate; never call from a signal handler.
    pub fn register(&'static self) -> LocalHandle {
        let reader = self.acquire_reader();
        let bag = self.acquire_bag();
        LocalHandle {
            domain: self,
            reader,
            bag,
            in_reclaim: Cell::new(false),
            _not_send: PhantomData,
        }
    }

    fn acquire_bag(&self) -> *const Bag {
        // Acquire (here and on `next`): pairs with the Release CAS that pushed
        // each bag, so its fields are initialised when we look at them.
        let mut p = self.bags.load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: bags are never freed while the domain lives.
            let b = unsafe { &*p };
            // Acquire: the previous owner's release happens-before reuse.
            if !b.in_use.load(Ordering::Relaxed)
                && b.in_use
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return p;
            }
            p = b.next.load(Ordering::Acquire);
        }
        let bag = Box::into_raw(Box::new(Bag::new()));
        let mut head = self.bags.load(Ordering::Relaxed);
        loop {
            // SAFETY: `bag` is ours until the CAS publishes it.
            unsafe { (*bag).next.store(head, Ordering::Relaxed) };
            // Release: publishes the initialised bag to scanners.
            match self.bags.compare_exchange_weak(head, bag, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return bag,
                Err(h) => head = h,
            }
        }
    }

    /// Retires without a thread handle: straight into the orphan queue. Used
    /// by separate domains and by threads whose TLS is already gone.
    ///
    /// # Safety
    /// As [`LocalHandle::retire_raw`]; `head`, if non-null, is embedded in the
    /// object.
    pub(crate) unsafe fn retire_orphan(
        &self,
        ptr: *mut (),
        drop: DropFn,
        head: *mut RcuHead,
        in_read: bool,
    ) {
        let rec = Record { ptr, drop };
        let mut o = lock(&self.orphans);
        if !o.cur.is_null() {
            // SAFETY: the orphan block is owned by the queue under its lock.
            if unsafe { (*o.cur).len } >= RECORDS_PER_BLOCK {
                let mut b = Batch::EMPTY;
                // SAFETY: as above.
                unsafe { b.chain.push(o.cur) };
                o.batches.push(b);
                o.cur = ptr::null_mut();
            }
        }
        if o.cur.is_null() {
            o.cur = alloc_block(self);
            if !o.cur.is_null() {
                o.blocks += 1;
            }
        }
        if !o.cur.is_null() {
            // SAFETY: room was made above.
            unsafe { block_push(o.cur, rec) };
        } else if !head.is_null() {
            // SAFETY: the caller gave us the retired object's head.
            unsafe { o.elist.push(head, drop) };
            self.stats.emergency.fetch_add(1, Ordering::Relaxed);
        } else {
            drop_guard(o);
            // SAFETY: per the contract.
            unsafe { self.headless_fallback(rec, in_read) };
            return;
        }
        let over = o.blocks > ORPHAN_LIMIT_BLOCKS || o.elist.len > EMERGENCY_LIMIT;
        drop_guard(o);
        if over && !in_read {
            self.reclaim_taken(false);
        } else {
            self.kick_reclaimer();
        }
    }

    /// The head-less emergency path: no block, no head; wait and free now.
    ///
    /// # Safety
    /// `rec` is a retired object's record.
    unsafe fn headless_fallback(&self, rec: Record, in_read: bool) {
        if in_read {
            // Cannot wait for a grace period inside a read section, cannot
            // queue without memory: the process is out of memory.
            std::alloc::handle_alloc_error(Layout::new::<Block>());
        }
        self.stats.headless_sync.fetch_add(1, Ordering::Relaxed);
        self.synchronize();
        let guard = AbortOnUnwind;
        // SAFETY: a grace period has passed since the object was retired.
        unsafe { (rec.drop)(rec.ptr) };
        std::mem::forget(guard);
        self.stats.freed.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes garbage out of other threads' bags (every dirty bag when `all`,
    /// else only the ones idle since the previous scan) and the orphan queue,
    /// waits one grace period, and frees it.
    pub(crate) fn reclaim_taken(&self, all: bool) {
        let _s = lock(&self.steal_lock);
        let mut victims: Vec<*const Bag> = Vec::new();
        let mut p = self.bags.load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: bags are never freed while the domain lives.
            let b = unsafe { &*p };
            // Relaxed: `slow_calls`, `seen_calls` and `dirty` are hints for
            // choosing victims. A stale value only delays a steal or wastes
            // one; what a steal may touch is decided under `lock` and by the
            // grace period below.
            let calls = b.slow_calls.load(Ordering::Relaxed);
            let idle = b.seen_calls.swap(calls, Ordering::Relaxed) == calls;
            if b.dirty.load(Ordering::Relaxed) && (all || idle) {
                let _g = lock(&b.lock);
                // Relaxed: the grace period below starts with a SeqCst fence,
                // which orders this store before the readers' scan.
                b.steal.store(true, Ordering::Relaxed);
                victims.push(p);
            }
            p = b.next.load(Ordering::Acquire);
        }
        let mut garbage = Vec::new();
        if !victims.is_empty() {
            // After this every owner fast path has ended or sees `steal`.
            self.synchronize();
            for &v in &victims {
                // SAFETY: as above.
                let b = unsafe { &*v };
                let _g = lock(&b.lock);
                // SAFETY: `steal` is set and a grace period passed, so the
                // owner touches `local` only under `lock`, which we hold.
                b.local.with_mut(|l| unsafe { (*l).take_all(&mut garbage) });
                b.outstanding.store(0, Ordering::Relaxed);
                b.dirty.store(false, Ordering::Relaxed);
                // Release: the owner's Acquire load of a clear flag sees the
                // emptied `local`.
                b.steal.store(false, Ordering::Release);
            }
            self.stats.steals.fetch_add(victims.len() as u64, Ordering::Relaxed);
        }
        lock(&self.orphans).take(&mut garbage);
        if garbage.is_empty() {
            return;
        }
        // Objects retired during the steal grace period may still be held by
        // readers that began after it started: one more grace period.
        self.synchronize();
        let mut keep = ptr::null_mut();
        for g in garbage {
            // SAFETY: a full grace period passed after we took ownership.
            unsafe { free_batch(self, g, &mut keep, None) };
        }
        if !keep.is_null() {
            // SAFETY: the kept block is ours and empty.
            unsafe { free_block(keep) };
        }
    }

    /// Returns once every object retired before the call (by any thread,
    /// including exited ones) has been freed. Must not be called inside a read
    /// section or from a destructor run by reclamation.
    pub fn barrier(&self) {
        self.reclaim_taken(true);
        // Owners that took batches out of their bags before our steal free
        // them under `free_lock`: wait for those frees to finish.
        let mut p = self.bags.load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: bags are never freed while the domain lives.
            let b = unsafe { &*p };
            drop(lock(&b.free_lock));
            p = b.next.load(Ordering::Acquire);
        }
    }

    /// A snapshot of this domain's reclamation figures.
    pub fn stats(&self) -> Stats {
        let c = &self.stats;
        let mut outstanding = lock(&self.orphans).outstanding();
        let mut p = self.bags.load(Ordering::Acquire);
        while !p.is_null() {
            // SAFETY: bags are never freed while the domain lives.
            let b = unsafe { &*p };
            outstanding += b.outstanding.load(Ordering::Relaxed);
            p = b.next.load(Ordering::Acquire);
        }
        Stats {
            grace_periods: c.grace_periods.load(Ordering::Relaxed),
            lone_grace_periods: c.lone_grace_periods.load(Ordering::Relaxed),
            polled_grace_periods: c.polled_grace_periods.load(Ordering::Relaxed),
            outstanding,
            blocks_allocated: c.blocks_allocated.load(Ordering::Relaxed),
            block_alloc_failures: c.block_alloc_failures.load(Ordering::Relaxed),
            emergency: c.emergency.load(Ordering::Relaxed),
            headless_sync: c.headless_sync.load(Ordering::Relaxed),
            backpressure_waits: c.backpressure.load(Ordering::Relaxed),
            freed: c.freed.load(Ordering::Relaxed),
            steals: c.steals.load(Ordering::Relaxed),
        }
    }

    /// Asks the background reclaimer (global domain only) to complete the
    /// grace period `cookie` soon.
    fn request_gp(&self, cookie: u64) {
        #[cfg(not(loom))]
        if self.background && !self.poll(cookie) {
            crate::global::request_gp(cookie);
        }
        #[cfg(loom)]
        let _ = cookie;
    }

    fn kick_reclaimer(&self) {
        #[cfg(not(loom))]
        if self.background {
            crate::global::kick_reclaimer();
        }
    }
}

fn drop_guard<G>(g: G) {
    drop(g)
}

impl LocalHandle {
    /// The domain this handle belongs to.
    pub fn domain(&self) -> &'static Domain {
        self.domain
    }

    /// Enters a read section on this handle's reader record.
    #[inline]
    pub fn read_lock(&self) -> ReadGuard<'_> {
        // SAFETY: the record is claimed by this handle for its lifetime.
        unsafe { (*self.reader).enter() };
        ReadGuard { reader: self.reader, transient: false, _not_send: PhantomData }
    }

    /// The current nesting depth of this thread's read sections.
    pub fn depth(&self) -> usize {
        // SAFETY: the record is claimed by this handle.
        unsafe { (*self.reader).depth() }
    }

    /// Retires a boxed value: it is dropped after a grace period.
    pub fn retire<T: Send + 'static>(&self, b: Box<T>) {
        // SAFETY: a Box pointer with its matching drop function.
        unsafe { self.retire_raw(Box::into_raw(b).cast(), drop_box::<T>) }
    }

    /// Retires `ptr`: `drop(ptr)` runs on some thread after a grace period.
    ///
    /// # Safety
    /// `ptr` is unreachable for readers that start from now on (unpublished),
    /// is retired once, and `drop(ptr)` is sound to call from any thread.
    #[inline]
    pub unsafe fn retire_raw(&self, ptr: *mut (), drop: DropFn) {
        let rec = Record { ptr, drop };
        if !self.try_fast(rec) {
            // SAFETY: forwarded contract.
            unsafe { self.retire_slow(Some(rec), ptr::null_mut(), false) };
        }
    }

    /// Retires an object through its embedded [`RcuHead`]: `drop(head)` runs
    /// after a grace period (recover the object from the head's address).
    /// Needs no memory when record blocks cannot be allocated.
    ///
    /// # Safety
    /// As [`retire_raw`](Self::retire_raw) with `head` as the pointer; the head
    /// lives inside the object and is not touched by anyone else until `drop`.
    #[inline]
    pub unsafe fn retire_head(&self, head: NonNull<RcuHead>, drop: DropFn) {
        let rec = Record { ptr: head.as_ptr().cast(), drop };
        if !self.try_fast(rec) {
            // SAFETY: forwarded contract.
            unsafe { self.retire_slow(Some(rec), head.as_ptr(), false) };
        }
    }

    /// Seals everything this thread retired so far (including a partly filled
    /// block) into a batch and asks for its grace period, so it is freed soon
    /// even if the thread retires nothing more.
    pub fn flush(&self) {
        // Twice: if every batch slot was taken, the first call freed the
        // oldest batch and the second seals what remained.
        for _ in 0..2 {
            // SAFETY: no record is passed.
            unsafe { self.retire_slow(None, ptr::null_mut(), true) };
        }
    }

    /// The lock-free path: append to the current block inside a read section
    /// while no taker has claimed the bag.
    #[inline(always)]
    fn try_fast(&self, rec: Record) -> bool {
        // SAFETY: the handle's records are claimed for its lifetime.
        let (r, bag) = unsafe { (&*self.reader, &*self.bag) };
        r.enter();
        // Acquire: pairs with a taker's Release clear, so we see the bag it
        // emptied. A set flag we miss is covered by the taker's grace period:
        // this section started before it and the taker waits for it.
        let ok = !bag.steal.load(Ordering::Acquire)
            && bag.local.with_mut(|l| {
                // SAFETY: owner inside a read section with `steal` clear: no
                // taker touches `local` until this section ends.
                let l = unsafe { &mut *l };
                let b = l.cur;
                // SAFETY: `cur` is a live block of this bag.
                if b.is_null() || unsafe { (*b).len } >= RECORDS_PER_BLOCK {
                    return false;
                }
                // SAFETY: room checked above.
                unsafe { block_push(b, rec) };
                true
            });
        r.exit();
        ok
    }

    /// The locked path: new blocks, sealing, freeing, backpressure,
    /// emergency.
    ///
    /// # Safety
    /// `rec`/`head` as in `retire_raw`/`retire_head`.
    #[cold]
    unsafe fn retire_slow(&self, rec: Option<Record>, head: *mut RcuHead, force_seal: bool) {
        let d = self.domain;
        // SAFETY: the handle's records are claimed for its lifetime.
        let bag = unsafe { &*self.bag };
        let in_read = self.depth() > 0;
        let in_reclaim = self.in_reclaim.get();
        // Relaxed, no RMW: only the owner writes it; the idle scan reads it as
        // a hint (see `reclaim_taken`).
        bag.slow_calls.store(bag.slow_calls.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        // Alone: no other thread holds a reader record, so a grace period
        // costs a few RMWs and a fence ("Lone writers" in `domain.rs`): seal
        // every block as it fills and free it at once, while it is still in
        // cache, instead of letting a batch of thousands go cold.
        // Cheap: the last grace period needed no barrier (every other reader
        // was busy entering sections, or there was none), so this thread
        // runs its own right away, in the same way.
        let inline = !in_read && !in_reclaim;
        let alone = inline && !d.others_reading(self.reader);
        // Relaxed: a hint; any answer is correct, only the speed differs.
        let cheap = alone || (inline && d.gp_was_cheap.load(Ordering::Relaxed));
        if inline {
            // SAFETY: our own record; outside sections (`in_read` is false).
            unsafe { (*self.reader).quiesce() };
        }
        let g = lock(&bag.lock);
        let mut ready = [Batch::EMPTY; RING];
        let mut nready = 0;
        let mut wait_cookie = None;
        let mut headless = None;
        let mut sealed = None;
        // SAFETY: we hold `lock`; the owner's fast path is not running (this
        // is the owner's thread), and takers need `lock`.
        bag.local.with_mut(|l| unsafe {
            let l = &mut *l;
            if let Some(rec) = rec {
                if !l.cur.is_null() && (*l.cur).len >= RECORDS_PER_BLOCK {
                    l.full.push(l.cur);
                    l.cur = ptr::null_mut();
                }
                if l.cur.is_null() {
                    l.cur = if l.spare.is_null() { alloc_block(d) } else { l.spare };
                    if l.cur == l.spare {
                        l.spare = ptr::null_mut();
                    }
                }
                if !l.cur.is_null() {
                    block_push(l.cur, rec);
                } else if !head.is_null() {
                    l.elist.push(head, rec.drop);
                    d.stats.emergency.fetch_add(1, Ordering::Relaxed);
                } else {
                    headless = Some(rec);
                }
            }
            if force_seal && !l.cur.is_null() && (*l.cur).len > 0 {
                l.full.push(l.cur);
                l.cur = ptr::null_mut();
            }
            let want_seal = l.full.blocks >= BATCH_BLOCKS
                || (cheap && l.full.blocks >= CHEAP_BATCH_BLOCKS)
                || l.elist.len >= EMERGENCY_BATCH
                || (force_seal && (l.full.blocks > 0 || l.elist.len > 0));
            if want_seal && l.ring_len < RING {
                let cookie = d.snapshot();
                l.push_ring(Batch { chain: l.full, elist: l.elist, cookie });
                l.full = Chain::EMPTY;
                l.elist = EList::EMPTY;
                sealed = Some(cookie);
            }
            if !in_reclaim {
                if let (true, Some(c)) = (cheap, sealed) {
                    // Under `lock`: takers never hold `gp_lock` while taking
                    // a bag lock, and no section waits for this lock.
                    d.wait_for_as(c, self.reader);
                }
                while l.ring_len > 0 && d.poll(l.ring[l.ring_start].cookie) {
                    ready[nready] = l.pop_ring();
                    nready += 1;
                }
                let over = l.pending_blocks() > LIMIT_BLOCKS
                    || l.ring_len == RING
                    || l.elist.len > EMERGENCY_LIMIT;
                if over && !in_read && l.ring_len > 0 && nready < RING {
                    let b = l.pop_ring();
                    wait_cookie = Some(b.cookie);
                    ready[nready] = b;
                    nready += 1;
                }
            }
            let out = l.outstanding();
            // Relaxed: figures for `stats()` and a hint for the idle scan.
            bag.outstanding.store(out, Ordering::Relaxed);
            bag.dirty.store(out > 0, Ordering::Relaxed);
        });
        if let Some(c) = sealed {
            d.request_gp(c);
        }
        if nready == 0 {
            drop(g);
            if let Some(rec) = headless {
                // SAFETY: forwarded contract.
                unsafe { d.headless_fallback(rec, in_read) };
            }
            return;
        }
        // Take `free_lock` before releasing `lock`: a `barrier` that steals
        // after this point must find our frees in progress (see `barrier`).
        let fg = lock(&bag.free_lock);
        drop(g);
        if let Some(c) = wait_cookie {
            d.stats.backpressure.fetch_add(1, Ordering::Relaxed);
            // Outside sections (backpressure requires `!in_read`): wait
            // offline, so that other threads' grace periods skip us.
            d.wait_for_as(c, self.reader);
        }
        self.in_reclaim.set(true);
        let mut keep = ptr::null_mut();
        for b in ready.iter().take(nready) {
            // SAFETY: each batch's cookie has been reached and we own it; the
            // record is ours, claimed for the handle's lifetime.
            unsafe { free_batch(d, *b, &mut keep, Some(&*self.reader)) };
        }
        self.in_reclaim.set(false);
        drop(fg);
        if !keep.is_null() {
            let _g = lock(&bag.lock);
            // SAFETY: under `lock`, as above.
            let kept = bag.local.with_mut(|l| unsafe {
                if (*l).spare.is_null() {
                    (*l).spare = keep;
                    true
                } else {
                    false
                }
            });
            if !kept {
                // SAFETY: the block is ours and empty.
                unsafe { free_block(keep) };
            }
        }
        if let Some(rec) = headless {
            // SAFETY: forwarded contract.
            unsafe { d.headless_fallback(rec, in_read) };
        }
    }
}

impl Drop for LocalHandle {
    fn drop(&mut self) {
        let d = self.domain;
        // SAFETY: the handle's records are claimed until the end of this drop.
        let bag = unsafe { &*self.bag };
        let mut garbage = Vec::new();
        let over;
        {
            let _g = lock(&bag.lock);
            // SAFETY: under `lock`; the owner (us) is not in its fast path.
            bag.local.with_mut(|l| unsafe {
                (*l).take_all(&mut garbage);
                if !(*l).spare.is_null() {
                    free_block((*l).spare);
                    (*l).spare = ptr::null_mut();
                }
            });
            bag.outstanding.store(0, Ordering::Relaxed);
            bag.dirty.store(false, Ordering::Relaxed);
            // Hand over while still holding `lock`, so a `barrier` that
            // visits this bag after us finds the garbage in the orphan queue.
            let mut o = lock(&d.orphans);
            o.blocks += garbage.iter().map(|b| b.chain.blocks).sum::<usize>();
            o.batches.append(&mut garbage);
            over = o.blocks > ORPHAN_LIMIT_BLOCKS || o.elist.len > EMERGENCY_LIMIT;
        }
        // Release: the next owner's Acquire CAS sees the emptied bag.
        bag.in_use.store(false, Ordering::Release);
        let depth = self.depth();
        d.release_reader(self.reader);
        if over && depth == 0 {
            d.reclaim_taken(false);
        } else {
            d.kick_reclaimer();
        }
    }
}

impl std::fmt::Debug for LocalHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalHandle").field("depth", &self.depth()).finish_non_exhaustive()
    }
}

/// The drop function of a retired `Box<T>`.
///
/// # Safety
/// `p` came from `Box::<T>::into_raw`.
pub(crate) unsafe fn drop_box<T>(p: *mut ()) {
    // SAFETY: per the contract.
    drop(unsafe { Box::from_raw(p.cast::<T>()) });
}

impl Domain {
    /// Retires into this domain from code that has no handle: the calling
    /// thread's TLS handle for the global domain, the orphan queue otherwise.
    ///
    /// # Safety
    /// As [`LocalHandle::retire_raw`]; `head`, if non-null, is embedded in
    /// the object and is the pointer retired.
    pub(crate) unsafe fn retire_any(&'static self, ptr: *mut (), drop: DropFn, head: *mut RcuHead) {
        #[cfg(not(loom))]
        if std::ptr::eq(self, crate::global::global()) {
            match NonNull::new(head) {
                // SAFETY: forwarded contract.
                Some(h) => unsafe { crate::global::retire_head(h, drop) },
                // SAFETY: forwarded contract.
                None => unsafe { crate::global::retire_raw(ptr, drop) },
            }
            return;
        }
        // A separate domain: we cannot tell whether the caller is inside one
        // of its read sections, so never wait here.
        // SAFETY: forwarded contract.
        unsafe { self.retire_orphan(ptr, drop, head, true) }
    }

    /// True when the calling thread is inside a read section of this domain
    /// (known only for the global domain; false otherwise).
    pub(crate) fn caller_in_section(&self) -> bool {
        #[cfg(not(loom))]
        if std::ptr::eq(self, crate::global::global()) {
            return crate::global::read_depth() > 0;
        }
        false
    }
}
