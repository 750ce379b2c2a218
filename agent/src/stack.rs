//! Walking the interrupted thread's stack inside the SIGTRAP handler.
//!
//! Owns: reading the interrupted registers from the signal's `ucontext` and the
//! frame-pointer walk. Must never read memory outside the thread's stack bounds (taken at
//! thread start), never fault, never allocate, lock or panic, and stop at the depth
//! limit or at the first implausible frame.

/// The registers a walk starts from.
#[derive(Debug, Clone, Copy, Default)]
pub struct Regs {
    /// The interrupted instruction.
    pub ip: u64,
    /// The stack pointer.
    pub sp: u64,
    /// The frame pointer (rbp on x86-64, x29 on aarch64).
    pub fp: u64,
}

/// The interrupted registers from the handler's context (zeros when unknown).
#[inline]
pub fn regs(uc: *mut libc::c_void) -> Regs {
    if uc.is_null() {
        return Regs::default();
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO handler.
        let uc = unsafe { &*(uc as *const libc::ucontext_t) };
        let g = |r: libc::c_int| uc.uc_mcontext.gregs.get(r as usize).map_or(0, |&v| v as u64);
        Regs { ip: g(libc::REG_RIP), sp: g(libc::REG_RSP), fp: g(libc::REG_RBP) }
    }
    #[cfg(target_arch = "aarch64")]
    {
        // SAFETY: the kernel passes a valid ucontext_t to an SA_SIGINFO handler.
        let uc = unsafe { &*(uc as *const libc::ucontext_t) };
        Regs { ip: uc.uc_mcontext.pc, sp: uc.uc_mcontext.sp, fp: uc.uc_mcontext.regs[29] }
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        Regs::default()
    }
}

/// How a walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The chain ended with a null frame pointer: the thread's outermost frame.
    Complete,
    /// `out` is full.
    DepthLimit,
    /// A frame outside the stack, misaligned, or not above the previous one.
    Implausible,
}

/// Follows the frame-pointer chain from `r`, writing return addresses into `out`
/// (innermost caller first). Reads only 16-byte frames that lie within `[lo, hi)`.
#[inline]
pub fn walk_fp(r: &Regs, lo: u64, hi: u64, out: &mut [u64]) -> (usize, End) {
    let mut n = 0;
    let mut fp = r.fp;
    let mut prev = r.sp.saturating_sub(1);
    loop {
        if fp == 0 {
            return (n, End::Complete);
        }
        if fp % 8 != 0 || fp <= prev || fp < lo || fp.saturating_add(16) > hi {
            return (n, End::Implausible);
        }
        if n >= out.len() {
            return (n, End::DepthLimit);
        }
        // SAFETY: `fp .. fp + 16` lies within the thread's stack (checked above), which
        // is mapped for as long as the thread runs, and the thread is stopped in our
        // handler on this very stack.
        let (next, ret) = unsafe {
            let p = fp as *const u64;
            (std::ptr::read_volatile(p), std::ptr::read_volatile(p.add(1)))
        };
        if ret == 0 {
            return (n, End::Complete);
        }
        out[n] = ret;
        n += 1;
        prev = fp;
        fp = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_on_a_fake_stack_is_followed_and_bad_links_stop_it() {
        // A fake stack: three frames at rising addresses, then a null frame pointer.
        let mut stack = [0u64; 32];
        let p = stack.as_mut_ptr();
        let base = p as u64;
        let at = |i: usize| base + 8 * i as u64;
        // SAFETY: every index is within the 32-word array `p` points into; all accesses go
        // through `p`, so the walk's reads through addresses derived from it are valid.
        let set = |i: usize, v: u64| unsafe { p.add(i).write_volatile(v) };
        set(4, at(10)); // frame 1 -> frame 2
        set(5, 0x1111);
        set(10, at(20));
        set(11, 0x2222);
        set(20, 0); // outermost
        set(21, 0x3333);
        let (lo, hi) = (base, base + 8 * 32);
        let r = Regs { ip: 1, sp: at(2), fp: at(4) };
        let mut out = [0u64; 8];
        assert_eq!(walk_fp(&r, lo, hi, &mut out), (3, End::Complete));
        assert_eq!(out[..3], [0x1111, 0x2222, 0x3333]);
        let mut two = [0u64; 2];
        assert_eq!(walk_fp(&r, lo, hi, &mut two), (2, End::DepthLimit));
        // A link pointing below the current frame, or off the stack, stops the walk.
        set(10, at(6));
        assert_eq!(walk_fp(&r, lo, hi, &mut out), (2, End::Implausible));
        set(10, u64::MAX - 8);
        assert_eq!(walk_fp(&r, lo, hi, &mut out), (2, End::Implausible));
        let outside = Regs { fp: base + 8 * 40, ..r };
        assert_eq!(walk_fp(&outside, lo, hi, &mut out), (0, End::Implausible));
    }
}
