//! The recorder's side of custody: one [`Drain`] pass reads every published record in
//! each slot's order, reports losses, frees handed-over blocks and dead slots. See the
//! parent module for the protocol. Runs in `strobe record`, never in the target; it
//! allocates (its bookkeeping) but never blocks.

use alloc::vec;
use alloc::vec::Vec;

use crate::custody::pool::{Pool, SharedSlot};
use crate::custody::record::{self, RecView};
use crate::custody::BLOCK_FULL;
use crate::slot::{ACTIVE, CLAIMED, CLOSING, DEAD};

/// What a pass hands its callback, per slot.
#[derive(Debug)]
pub enum SlotEvent<'r> {
    /// A record, in the slot's order.
    Record(RecView<'r>),
    /// Records this slot's owner could not store since the last report.
    Lost(u64),
    /// The slot's owner is gone and the slot is about to be freed: the last event of this
    /// owner (read its statistics now).
    Freed,
}

/// What a pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassStats {
    /// Records read.
    pub records: u64,
    /// Blocks freed.
    pub blocks_freed: u64,
    /// Slots freed.
    pub slots_freed: u64,
    /// Malformed records skipped (a block that does not parse: reported, never trusted).
    pub malformed: u64,
}

/// The recorder's bookkeeping: how far it read each block, the next block it expects of
/// each slot, and the losses it already reported.
#[derive(Debug)]
pub struct Drain {
    consumed: Vec<u32>,
    expected: Vec<u32>,
    lost_seen: Vec<u64>,
    scratch: Vec<u64>,
}

impl Drain {
    /// Bookkeeping for a pool of `nblocks` blocks and `nslots` slots.
    pub fn new(nblocks: usize, nslots: usize) -> Drain {
        Drain {
            consumed: vec![0; nblocks],
            expected: vec![0; nslots],
            lost_seen: vec![0; nslots],
            scratch: Vec::new(),
        }
    }

    /// One pass over `slots[..high]` (see the parent module for its steps). `f` receives,
    /// per slot in order, its records, its new losses and, for a slot whose owner is
    /// gone, `Freed` just before the slot is freed.
    ///
    /// `gone` says which live-looking slots (CLAIMED, ACTIVE, CLOSING) belong to a
    /// thread that can no longer write: its process died (killed by a signal, or exited
    /// with threads still running) or replaced its image. The recorder knows that from
    /// outside the pool (the process table, `/proc`); such a slot is drained to the end
    /// of its current block and freed with its block, like a DEAD one.
    ///
    /// # Safety
    /// One recorder at a time per pool, always with the same `Drain`; and `gone` is true
    /// only of slots no thread can write any more (a thread that is merely slow would
    /// find its block freed under it).
    pub unsafe fn pass(
        &mut self,
        pool: &Pool<'_>,
        slots: &[SharedSlot],
        high: usize,
        gone: impl Fn(&SharedSlot) -> bool,
        mut f: impl FnMut(u32, &SharedSlot, SlotEvent<'_>),
    ) -> PassStats {
        let mut stats = PassStats::default();
        pool.begin_pass();
        let high = high.min(slots.len()).min(self.expected.len());
        // Step 2: which slots are DEAD (or gone) before we take the full list.
        let mut dead: Vec<u32> = Vec::new();
        let mut abandoned: Vec<u32> = Vec::new();
        for (i, s) in slots.iter().enumerate().take(high) {
            match s.ctl.state() {
                DEAD => dead.push(i as u32),
                CLAIMED | ACTIVE | CLOSING if gone(s) => abandoned.push(i as u32),
                _ => {}
            }
        }
        // Step 3: every handed-over block, in (slot, seq) order.
        let mut full: Vec<(u32, u32, u32)> = Vec::new();
        let mut top = pool.take_full();
        let mut guard = pool.len() + 1;
        while let Some(index) = top.checked_sub(1) {
            if guard == 0 {
                break; // a cycle cannot happen under the protocol; never loop forever
            }
            guard -= 1;
            if let Some((owner, seq, _, _)) = pool.block_info(index) {
                full.push((owner, seq, index));
            }
            top = pool.next_of(index);
        }
        full.sort_unstable();
        for &(owner, seq, index) in &full {
            let Some(slot) = slots.get(owner as usize) else { continue };
            // SAFETY: a block from the full list is ours until we free it below.
            unsafe { self.read_block(pool, index, owner, slot, &mut stats, &mut f) };
            if let Some(e) = self.expected.get_mut(owner as usize) {
                *e = seq.wrapping_add(1);
            }
            if let Some(c) = self.consumed.get_mut(index as usize) {
                *c = 0;
            }
            pool.push_free(index);
            stats.blocks_freed += 1;
        }
        // Step 4: the current block of each live slot, if it is the next one expected. A
        // FULL one is being handed over by a live owner (it will be in the full list) or,
        // if the owner is gone, was never listed (killed between marking it FULL and
        // listing it): read it here then, or its records would be lost.
        for (i, slot) in slots.iter().enumerate().take(high) {
            let state = slot.ctl.state();
            if !matches!(state, CLAIMED | ACTIVE | CLOSING | DEAD) {
                continue;
            }
            let over = dead.contains(&(i as u32)) || abandoned.contains(&(i as u32));
            if let Some(index) = slot.current_block().checked_sub(1) {
                if let Some((owner, seq, bstate, _)) = pool.block_info(index) {
                    let expected = self.expected.get(i).copied().unwrap_or(0);
                    if owner == i as u32 && seq == expected && (bstate != BLOCK_FULL || over) {
                        // SAFETY: only this recorder frees blocks, and it frees none in
                        // this step: the block stays valid while we read it.
                        unsafe { self.read_block(pool, index, i as u32, slot, &mut stats, &mut f) };
                    }
                }
            }
            let lost = slot.lost();
            if let Some(seen) = self.lost_seen.get_mut(i) {
                if lost > *seen {
                    f(i as u32, slot, SlotEvent::Lost(lost - *seen));
                    *seen = lost;
                }
            }
        }
        // Step 5: free the slots that were DEAD (or gone) before step 3; a gone slot's
        // current block, read to its end in step 4, goes back to the pool with it.
        for &i in &abandoned {
            let Some(slot) = slots.get(i as usize) else { continue };
            if let Some(index) = slot.current_block().checked_sub(1) {
                slot.clear_block();
                // Only a block still this slot's and not listed already (a listed one was
                // read and freed in step 3, and may be another slot's by now).
                let expected = self.expected.get(i as usize).copied().unwrap_or(0);
                let unlisted = pool
                    .block_info(index)
                    .is_some_and(|(owner, seq, _, _)| owner == i && seq == expected);
                if !unlisted {
                    continue;
                }
                if let Some(c) = self.consumed.get_mut(index as usize) {
                    *c = 0;
                }
                pool.push_free(index);
                stats.blocks_freed += 1;
            }
        }
        {
            for &i in dead.iter().chain(&abandoned) {
                let Some(slot) = slots.get(i as usize) else { continue };
                f(i, slot, SlotEvent::Freed);
                if let Some(e) = self.expected.get_mut(i as usize) {
                    *e = 0;
                }
                if let Some(l) = self.lost_seen.get_mut(i as usize) {
                    *l = 0;
                }
                // Release (in `release`): our reads of the slot happen before a new
                // owner's claim.
                slot.ctl.release();
                stats.slots_freed += 1;
            }
        }
        pool.drained(stats.records);
        stats
    }

    /// Reads block `index` from where we left it to its published head.
    ///
    /// # Safety
    /// The block is not freed during the call.
    unsafe fn read_block(
        &mut self,
        pool: &Pool<'_>,
        index: u32,
        owner: u32,
        slot: &SharedSlot,
        stats: &mut PassStats,
        f: &mut impl FnMut(u32, &SharedSlot, SlotEvent<'_>),
    ) {
        let Some((_, _, _, head)) = pool.block_info(index) else { return };
        let head = (head as usize).min(pool.block_words());
        let Some(consumed) = self.consumed.get_mut(index as usize) else { return };
        let from = (*consumed as usize).min(head);
        self.scratch.clear();
        self.scratch.resize(head - from, 0);
        // SAFETY: words below `head` are published (Acquire in `block_info`) and the
        // block is not freed meanwhile (the caller's contract).
        unsafe { pool.read(index, from, head, &mut self.scratch) };
        *consumed = head as u32;
        let mut at = 0usize;
        let words = &self.scratch;
        while at < words.len() {
            let len = record::len_of(words[at]);
            let Some(rec) = words.get(at..at + len).filter(|_| len > 0).and_then(record::decode)
            else {
                // A record that does not parse: the rest of the block cannot be framed.
                stats.malformed += 1;
                break;
            };
            stats.records += 1;
            f(owner, slot, SlotEvent::Record(rec));
            at += len;
        }
    }
}
