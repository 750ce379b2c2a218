//! Garbage no single thread frees: objects retired without a thread handle (separate
//! domains, threads past their TLS teardown) and the garbage of exited threads, held in
//! the domain's orphan queue; taking garbage out of idle threads' bags (the background
//! reclaimer's idle scan, [`Domain::barrier`]); and the head-less emergency path.
//!
//! *Garbage other threads hold.* A taker sets a bag's `steal` flag, waits one grace
//! period (after which every owner section either ended or sees the flag and takes the
//! locked slow path), then empties the bag under its lock and clears the flag
//! (`reclaim.rs` has the whole pipeline).
//!
//! Must never: run a destructor while holding a bag or orphan lock (destructors may
//! retire), free anything before its grace period, or wait for a grace period inside a
//! read section.

use std::alloc::Layout;
use std::ptr;

use super::Domain;
use crate::primitive::{lock, Ordering};
use crate::reclaim::{
    alloc_block, block_push, free_batch, free_block, AbortOnUnwind, Bag, Batch, Block, DropFn,
    RcuHead, Record, EMERGENCY_LIMIT, ORPHAN_LIMIT_BLOCKS, RECORDS_PER_BLOCK,
};

impl Domain {
    /// Retires without a thread handle: straight into the orphan queue. Used
    /// by separate domains and by threads whose TLS is already gone.
    ///
    /// # Safety
    /// As [`LocalHandle::retire_raw`](super::LocalHandle::retire_raw); `head`,
    /// if non-null, is embedded in the object.
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
            o.cur = alloc_block(&self.stats);
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
    pub(crate) unsafe fn headless_fallback(&self, rec: Record, in_read: bool) {
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
            unsafe { free_batch(&self.stats, g, &mut keep, None) };
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

    /// Asks the background reclaimer (global domain only) to complete the
    /// grace period `cookie` soon.
    pub(crate) fn request_gp(&self, cookie: u64) {
        if let Some(g) = self.global {
            if !self.poll(cookie) {
                (g.request_gp)(cookie);
            }
        }
    }

    /// Asks the background reclaimer (global domain only) to free orphaned
    /// garbage soon.
    pub(crate) fn kick_reclaimer(&self) {
        if let Some(g) = self.global {
            (g.kick_reclaimer)();
        }
    }

    /// Retires into this domain from code that has no handle: the calling
    /// thread's TLS handle for the global domain, the orphan queue otherwise.
    ///
    /// # Safety
    /// As [`LocalHandle::retire_raw`](super::LocalHandle::retire_raw); `head`,
    /// if non-null, is embedded in the object and is the pointer retired.
    pub(crate) unsafe fn retire_any(&'static self, ptr: *mut (), drop: DropFn, head: *mut RcuHead) {
        if let Some(g) = self.global {
            // SAFETY: forwarded contract.
            unsafe { (g.retire)(ptr, drop, head) };
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
        self.global.is_some_and(|g| (g.read_depth)() > 0)
    }
}

fn drop_guard<G>(g: G) {
    drop(g)
}
