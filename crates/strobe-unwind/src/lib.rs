//! strobe-unwind: call stacks taken inside the agent's sampling signal
//! handler, without allocating, locking or faulting.
//!
//! Owns: the walkers ([`walk_fp`], [`walk_fp_in`], [`walk_dwarf`]), the
//! registers and stack bounds they start from ([`Regs`], [`StackBounds`]),
//! the per-thread state the DWARF walker needs ([`ThreadCache`]), and the
//! module table published to handlers ([`modules`]).
//!
//! Must never: allocate, lock, make a system call, panic or read memory
//! outside the thread's stack bounds and the published modules' unwind
//! tables on a walk; start a thread in the target (see [`modules`]).
//!
//! # Use from a signal handler
//!
//! ```text
//! agent start:     modules::init()
//! thread start:    bounds = StackBounds::of_current_thread()?; cache = ThreadCache::new()
//! dlopen wrapper:  real dlopen(); modules::after_dlopen()
//! dlclose wrapper: modules::before_dlclose(); real dlclose(); modules::after_dlclose()
//! handler:         regs = Regs::from_ucontext(uc); walk_dwarf(&regs, &bounds, &mut cache, &mut buf)
//! ```
//!
//! `out` receives the callers' return addresses, innermost first; the
//! interrupted instruction pointer itself is `regs.ip` and is not repeated.
//! Every entry lies one past an instruction of its frame's function:
//! symbolize `addr - 1`. A return address points after its call instruction.
//! When the walk crosses a signal handler ([`walk_dwarf`] only), the sigreturn
//! trampoline (`__restore_rt`, which the handler returns to at its first
//! instruction) is listed as a frame of its own, then the instruction the
//! signal interrupted: those two entries are the exact addresses plus one.
//!
//! # Async-signal safety
//!
//! | function | signal-safe |
//! |---|---|
//! | [`Regs::from_ucontext`], [`walk_fp`] | yes, on any thread |
//! | [`walk_dwarf`], [`walk_fp_in`] | yes, on the thread that created the [`ThreadCache`] |
//! | [`StackBounds::of_current_thread`], [`ThreadCache::new`], everything in [`modules`] | **no** |
//!
//! # Why our own CFI walker rather than framehop
//!
//! framehop 0.16 (the newest) does the same job without allocating
//! (`MustNotAllocateDuringUnwind`), but it depends on gimli 0.33 while
//! blazesym brings gimli 0.34 into the workspace (one version of each crate),
//! and it does not evaluate DWARF expressions: it rejects a CFA given as an
//! expression, which is how glibc describes `__restore_rt` (the way out of a
//! signal handler), the PLT, and stack-realigning functions. This walker is
//! gimli 0.34's CFI parser plus what framehop adds on top (an address-keyed
//! rule cache, three tracked registers) plus a bounded expression
//! evaluator. Measured on this machine (2-vCPU VM, release builds, the same
//! Rust stack 24 frames deep, `.eh_frame` read in place for both; minimum of
//! 15 runs): a walk with warm rule caches costs 196 ns here against 177 ns
//! for framehop, a walk with empty rule caches 2.6 us against 2.7 us.
//!
//! Inside the sampling signal handler of a C program 19-22 frames deep
//! (`examples/unwind_preload.rs` with `STROBE_UNWIND_TIME=1` on
//! `tests/c/unwind_deep.c`), where the CPU's caches are cold after the
//! signal delivery: about 0.75 us for [`walk_fp`] and 1.3 us for
//! [`walk_dwarf`] per sample (40 and 240 ns when the same walk is repeated
//! warm), against a sample's ~30 us.
//!
//! # Architectures
//!
//! x86_64 has both walkers. aarch64 has the frame-pointer walker (frame
//! records `{x29, x30}` plus the link register of a leaf); its DWARF walker
//! ends at once with [`WalkEnd::Unsupported`]. Other architectures have
//! empty walks ([`WalkEnd::Unsupported`]).

#![cfg_attr(not(loom), deny(unsafe_op_in_unsafe_fn))]

mod dwarf;
mod fp;
pub mod modules;
mod regs;
mod sync;

pub use dwarf::{
    walk_dwarf, walk_dwarf_copied, walk_dwarf_with, CacheStats, RuleCache, ThreadCache,
    CACHE_ENTRIES,
};
pub use fp::{walk_fp, walk_fp_in};
pub use regs::{Regs, StackBounds};

/// The default depth limit: a walk writes at most this many frames when its
/// caller passes a buffer of this size.
pub const DEFAULT_DEPTH: usize = 128;

/// How a walk went: the number of return addresses written and why it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Walk {
    /// Return addresses written to the start of `out`.
    pub frames: usize,
    /// Why the walk stopped.
    pub end: WalkEnd,
}

/// Why a walk stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WalkEnd {
    /// Reached the outermost frame: the unwind information says the frame
    /// has no caller (`_start`, glibc's thread start), or the frame-pointer
    /// chain ended with a zero frame pointer.
    Complete,
    /// `out` is full.
    DepthLimit,
    /// A stack pointer, frame pointer or saved value lies outside the
    /// thread's stack bounds.
    OutOfBounds,
    /// The address lies in a module that has no unwind entry for it.
    NoUnwindInfo,
    /// The address lies in no known module (JIT code, a garbage return
    /// address, the module table not initialised or in a dlclose window).
    NotInModule,
    /// A value no real frame has: a stack pointer that does not increase, a
    /// zero or non-user return address, malformed unwind data.
    Implausible,
    /// The unwind information needs what the walker does not evaluate (a
    /// register other than the stack, frame and instruction pointers, a DWARF
    /// operation outside the supported set), or the architecture has no
    /// walker.
    Unsupported,
}
