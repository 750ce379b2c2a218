//! A thread's registration with a domain ([`LocalHandle`]): its reader record and its
//! bag, and the retire path that fills the bag (the pipeline is `reclaim.rs`'s note).
//!
//! *The owner's fast path.* The owner fills its current block without a lock, inside a
//! read section of its own, only while the bag's `steal` flag is clear: a taker
//! (`collect.rs`) sets the flag and waits a grace period before it touches the bag, so
//! the fast path costs a read section and a load, no atomic RMW. Everything else
//! (a new block, sealing a batch, freeing the batches whose grace period completed,
//! backpressure, the emergency list) is the slow path, under the bag's lock.
//!
//! Must never: run a destructor while holding the bag's lock (destructors may retire),
//! free anything before its grace period, wait for a grace period inside a read section,
//! or be used from another thread (the handle is `!Send`).

use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use super::Domain;
use crate::primitive::{lock, Ordering};
use crate::reader::{ReadGuard, Reader};
use crate::reclaim::{
    alloc_block, block_push, drop_box, free_batch, free_block, Bag, Batch, Chain, DropFn, EList,
    RcuHead, Record, BATCH_BLOCKS, CHEAP_BATCH_BLOCKS, EMERGENCY_BATCH, EMERGENCY_LIMIT,
    LIMIT_BLOCKS, ORPHAN_LIMIT_BLOCKS, RECORDS_PER_BLOCK, RING,
};

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
        ReadGuard { reader: self.reader, on_exit: None, _not_send: PhantomData }
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
        // costs a few RMWs and a fence ("Lone writers" in `grace.rs`): seal
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
                    l.cur = if l.spare.is_null() { alloc_block(&d.stats) } else { l.spare };
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
            unsafe { free_batch(&d.stats, *b, &mut keep, Some(&*self.reader)) };
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
