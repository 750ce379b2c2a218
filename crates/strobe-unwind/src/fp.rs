//! The frame-pointer walker (`--call-graph fp`): follows the chain of saved
//! frame pointers, `[bp] = caller's bp` and `[bp + 8] = return address` on
//! x86_64 (the frame record `{x29, x30}` on aarch64).
//!
//! Owns: [`walk_fp`] and [`walk_fp_in`]. Cheap (two loads per frame) and
//! right only through code built with frame pointers: a function without one
//! (Debian's libc, most -O2 C) hides its caller, and the chain then continues
//! from whatever the register held; the plausibility checks end such a walk
//! instead of following garbage.
//!
//! Must never: read outside the stack bounds (every load goes through
//! `Stack::read`), loop (the frame pointer must strictly increase), allocate,
//! lock or panic.

use crate::modules::{Module, Table};
use crate::regs::{Regs, Stack, StackBounds};
use crate::{Walk, WalkEnd};

/// Walks the frame-pointer chain from `regs`, writing the callers' return
/// addresses (innermost first) to `out`. Async-signal-safe on any thread.
///
/// Every frame pointer must lie in `bounds`, be 8-aligned (16 on aarch64)
/// and be above the previous one; a return address must be non-zero and a
/// user-space address. The walk is [`Complete`](WalkEnd::Complete) when the
/// chain ends with a zero frame pointer (what `_start` and glibc's thread
/// start leave). [`walk_fp_in`] also requires every return address to lie in
/// a known module.
pub fn walk_fp(regs: &Regs, bounds: &StackBounds, out: &mut [u64]) -> Walk {
    walk(regs, bounds, None, out)
}

/// [`walk_fp`] that also ends the walk ([`WalkEnd::NotInModule`]) at a return
/// address outside every module's code, reading the module table published
/// by [`modules`](crate::modules). Async-signal-safe on the thread that owns
/// `cache`.
pub fn walk_fp_in(
    regs: &Regs,
    bounds: &StackBounds,
    cache: &mut crate::ThreadCache,
    out: &mut [u64],
) -> Walk {
    let guard = cache.handle.read_lock();
    let table = cache.registry.and_then(|r| r.load(&guard));
    match table {
        Some(t) => walk(regs, bounds, Some(t), out),
        None => Walk { frames: 0, end: WalkEnd::NotInModule },
    }
}

/// Lowest address a return address may take: the first page is never mapped.
const MIN_CODE: u64 = 4096;
/// One past the highest user-space address (47-bit and 48-bit VA layouts;
/// with 5-level paging user space can reach 2^56, which we accept too).
const MAX_USER: u64 = 1 << 56;

#[cfg(target_arch = "x86_64")]
const FRAME_ALIGN: u64 = 8;
#[cfg(target_arch = "aarch64")]
const FRAME_ALIGN: u64 = 16;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const FRAME_ALIGN: u64 = 8;

fn walk(regs: &Regs, bounds: &StackBounds, table: Option<&Table<Module>>, out: &mut [u64]) -> Walk {
    let end = |frames, end| Walk { frames, end };
    if cfg!(not(any(target_arch = "x86_64", target_arch = "aarch64"))) {
        return end(0, WalkEnd::Unsupported);
    }
    let Some(stack) = Stack::new(bounds, regs.sp) else {
        return end(0, WalkEnd::OutOfBounds);
    };
    let mut n = 0;
    let mut bp = regs.bp;
    // aarch64: a leaf that saved no frame record still has its caller in lr.
    // We cannot tell from registers alone whether the interrupted function
    // pushed its record yet, so lr is used only when it differs from the
    // saved return address of the first record (perf does the same).
    #[cfg(target_arch = "aarch64")]
    let mut pending_lr = regs.lr;
    let mut prev_bp = regs.sp.saturating_sub(1);
    loop {
        if bp == 0 {
            return end(n, WalkEnd::Complete);
        }
        if bp % FRAME_ALIGN != 0 || bp <= prev_bp {
            return end(n, WalkEnd::Implausible);
        }
        let (Some(next_bp), Some(ra)) = (stack.read(bp), stack.read(bp.wrapping_add(8))) else {
            return end(n, WalkEnd::OutOfBounds);
        };
        #[cfg(target_arch = "aarch64")]
        {
            let lr = std::mem::take(&mut pending_lr);
            if lr != 0 && lr != ra && plausible_code(lr, table).is_ok() {
                if n == out.len() {
                    return end(n, WalkEnd::DepthLimit);
                }
                out[n] = lr;
                n += 1;
            }
        }
        if ra == 0 && next_bp == 0 {
            // glibc's thread start and _start leave both zero.
            return end(n, WalkEnd::Complete);
        }
        if let Err(e) = plausible_code(ra, table) {
            return end(n, e);
        }
        if n == out.len() {
            return end(n, WalkEnd::DepthLimit);
        }
        out[n] = ra;
        n += 1;
        prev_bp = bp;
        bp = next_bp;
    }
}

/// Whether `addr` can be a return address: user space, past page zero, and
/// in a module's code when a table is given.
#[inline]
fn plausible_code(addr: u64, table: Option<&Table<Module>>) -> Result<(), WalkEnd> {
    if !(MIN_CODE..MAX_USER).contains(&addr) {
        return Err(WalkEnd::Implausible);
    }
    match table {
        Some(t) if t.find(addr.wrapping_sub(1)).is_none() => Err(WalkEnd::NotInModule),
        _ => Ok(()),
    }
}
