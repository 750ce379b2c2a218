//! The registers a walk starts from and the stack it may read.
//!
//! Owns: [`Regs`] (taken from a signal's `ucontext_t`, async-signal-safe),
//! [`StackBounds`] (the calling thread's stack, taken outside handlers) and
//! [`Stack`], the one place the walkers read thread-stack memory: every read
//! is checked against the bounds first.
//!
//! Must never: read outside `[lo, hi)` of the bounds it was given, or do
//! anything in [`Regs::from_ucontext`] that is not async-signal-safe.

use std::io;

/// The registers a walk needs, as the interrupted code had them.
///
/// On x86_64: instruction pointer, stack pointer and frame pointer (`rbp`).
/// On aarch64: `ip` is the pc, `bp` the frame pointer (`x29`) and `lr` the
/// link register (`x30`). Other architectures have no walker (walks end at
/// once with [`WalkEnd::Unsupported`](crate::WalkEnd::Unsupported)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regs {
    /// The instruction pointer (exact: the interrupted instruction).
    pub ip: u64,
    /// The stack pointer.
    pub sp: u64,
    /// The frame pointer (`rbp` on x86_64, `x29` on aarch64).
    pub bp: u64,
    /// The link register (aarch64 only; zero elsewhere).
    pub lr: u64,
}

impl Regs {
    /// The interrupted registers from the third argument of an `SA_SIGINFO`
    /// handler. Async-signal-safe (a few loads).
    ///
    /// # Safety
    /// `uc` points at the `ucontext_t` the kernel passed to the handler (or
    /// one with the same layout that `getcontext` filled).
    #[inline]
    pub unsafe fn from_ucontext(uc: *const libc::c_void) -> Regs {
        #[cfg(target_arch = "x86_64")]
        {
            // SAFETY: the caller passes a valid ucontext_t.
            let g = unsafe { &(*uc.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
            Regs {
                ip: g[libc::REG_RIP as usize] as u64,
                sp: g[libc::REG_RSP as usize] as u64,
                bp: g[libc::REG_RBP as usize] as u64,
                lr: 0,
            }
        }
        #[cfg(target_arch = "aarch64")]
        {
            // SAFETY: the caller passes a valid ucontext_t.
            let m = unsafe { &(*uc.cast::<libc::ucontext_t>()).uc_mcontext };
            Regs { ip: m.pc, sp: m.sp, bp: m.regs[29], lr: m.regs[30] }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            let _ = uc;
            Regs::default()
        }
    }

    /// The caller's registers at the point of this call, for walks of the
    /// current thread outside a signal handler (tests, diagnostics). The
    /// first frame is this function's caller.
    #[inline(always)]
    pub fn here() -> Regs {
        #[cfg(target_arch = "x86_64")]
        {
            let (ip, sp, bp): (u64, u64, u64);
            // SAFETY: reads three registers; no memory access, no stack use.
            unsafe {
                std::arch::asm!(
                    "lea {ip}, [rip]",
                    "mov {sp}, rsp",
                    "mov {bp}, rbp",
                    ip = out(reg) ip, sp = out(reg) sp, bp = out(reg) bp,
                    options(nomem, nostack, preserves_flags)
                );
            }
            Regs { ip, sp, bp, lr: 0 }
        }
        #[cfg(target_arch = "aarch64")]
        {
            let (ip, sp, bp, lr): (u64, u64, u64, u64);
            // SAFETY: reads four registers; no memory access, no stack use.
            unsafe {
                std::arch::asm!(
                    "adr {ip}, .",
                    "mov {sp}, sp",
                    "mov {bp}, x29",
                    "mov {lr}, x30",
                    ip = out(reg) ip, sp = out(reg) sp, bp = out(reg) bp, lr = out(reg) lr,
                    options(nomem, nostack, preserves_flags)
                );
            }
            Regs { ip, sp, bp, lr }
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            Regs::default()
        }
    }
}

/// A thread's stack: the walkers read nothing outside `[lo, hi)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackBounds {
    /// Lowest address of the stack.
    pub lo: u64,
    /// One past the highest address of the stack.
    pub hi: u64,
}

impl StackBounds {
    /// The calling thread's stack, from `pthread_getattr_np` (for the main
    /// thread glibc derives it from the stack rlimit and the mappings).
    /// Call it at thread start, outside signal handlers: it may allocate
    /// and read `/proc/self/maps`.
    pub fn of_current_thread() -> io::Result<StackBounds> {
        // SAFETY: pthread_attr_t is plain data that pthread_getattr_np fills.
        let mut attr: libc::pthread_attr_t = unsafe { std::mem::zeroed() };
        // SAFETY: our own thread handle and a writable attr.
        let rc = unsafe { libc::pthread_getattr_np(libc::pthread_self(), &mut attr) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        // SAFETY: attr was initialised by pthread_getattr_np; outputs are writable.
        let rc = unsafe { libc::pthread_attr_getstack(&attr, &mut addr, &mut size) };
        // SAFETY: attr was initialised by pthread_getattr_np and is destroyed once.
        unsafe { libc::pthread_attr_destroy(&mut attr) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        let lo = addr as u64;
        Ok(StackBounds { lo, hi: lo + size as u64 })
    }

    /// True when `addr` lies in the stack.
    #[inline]
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.lo && addr < self.hi
    }
}

/// The x86-64 psABI red zone below the stack pointer.
const RED_ZONE: u64 = 128;

/// Bounds-checked reads of one thread's stack during a walk.
///
/// The lower bound is raised to the interrupted stack pointer less the
/// x86-64 red zone (128 bytes the ABI lets a function use below its sp; an
/// epilogue's unwind row can still name a register saved there): a walk
/// reads only the live part of the stack (callers' frames lie above the sp),
/// which is mapped on every kind of thread stack, so a read never faults
/// even when [`StackBounds`] were too generous.
///
/// A stack can also be a copy of another thread's ([`Stack::copied`]): the
/// same addresses, read from the copy.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stack {
    lo: u64,
    hi: u64,
    /// Added (wrapping) to an address to find its bytes in this process: 0
    /// for the calling process's own stack, the copy's place for a copy.
    delta: u64,
}

impl Stack {
    /// The readable part of `bounds` for a walk starting at `sp`, or `None`
    /// when `sp` lies outside the stack.
    #[inline]
    pub(crate) fn new(bounds: &StackBounds, sp: u64) -> Option<Stack> {
        (bounds.lo < bounds.hi && bounds.contains(sp)).then_some(Stack {
            lo: sp.saturating_sub(RED_ZONE).max(bounds.lo),
            hi: bounds.hi,
            delta: 0,
        })
    }

    /// A copy of another thread's stack from its `sp` up (what the kernel
    /// copies for `PERF_SAMPLE_STACK_USER`): addresses `[sp, sp + len)` read
    /// from `copy`, which must outlive every read.
    #[inline]
    pub(crate) fn copied(sp: u64, copy: &[u8]) -> Option<Stack> {
        let hi = sp.checked_add(copy.len() as u64)?;
        Some(Stack { lo: sp, hi, delta: (copy.as_ptr() as u64).wrapping_sub(sp) })
    }

    /// True when `addr` may be a stack pointer of an outer frame: inside the
    /// readable range or one past it (the outermost frame's CFA can be `hi`).
    #[inline]
    pub(crate) fn holds_sp(&self, addr: u64) -> bool {
        addr >= self.lo && addr <= self.hi
    }

    /// The 8 bytes at `addr`, or `None` when any of them lies outside.
    #[inline]
    pub(crate) fn read(&self, addr: u64) -> Option<u64> {
        if addr < self.lo || addr > self.hi.checked_sub(8)? {
            return None;
        }
        // SAFETY: [addr, addr + 8) lies in the live part of the thread's stack
        // (between the interrupted sp and the stack's top), which is mapped;
        // for a copy, `delta` moves it into the copy, which the caller keeps
        // alive for the walk.
        Some(unsafe { std::ptr::read_unaligned(addr.wrapping_add(self.delta) as *const u64) })
    }
}
