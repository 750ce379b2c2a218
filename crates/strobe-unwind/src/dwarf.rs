//! The DWARF CFI walker (`--call-graph dwarf`, the default): unwinds through
//! code built without frame pointers using each module's `.eh_frame`, found
//! through its `.eh_frame_hdr` binary-search table, and for code it does not
//! cover, the `.debug_frame` read from the module's file when it was scanned
//! (code built with `-fno-asynchronous-unwind-tables`).
//!
//! Owns: [`ThreadCache`] (the thread's strobe-rcu registration, gimli's
//! unwind context with fixed-size storage, and a direct-mapped cache of
//! compiled unwind rules keyed by address) and [`walk_dwarf`].
//!
//! Per frame: find the module of the address (binary search of the
//! published table), then the rule for the address: a cache hit is a
//! compare; a miss searches `.eh_frame_hdr`, parses the FDE and its CIE and
//! runs the CFA program up to the address (gimli, no allocation: the
//! context's storage is arrays), and compiles the row into a `Rule` that
//! the cache keeps. Cache entries carry the generation of the table they
//! were computed under, so a new table (dlopen, dlclose) invalidates them.
//! Rules are evaluated for the three registers a walk tracks (instruction,
//! stack and frame pointers) and may use DWARF expressions (the PLT's CFA,
//! a realigned `main`, glibc's `__restore_rt`), which a small bounded
//! evaluator runs.
//!
//! Signal frames: a CIE with the `S` augmentation marks a sigreturn
//! trampoline (glibc's `__restore_rt`, whose FDE describes the interrupted
//! registers in the `ucontext_t` on the stack with expressions). The walk
//! crosses it like any frame; the frame it yields is the interrupted code,
//! whose address is exact (looked up as is, not minus one). Both that
//! address and the trampoline's are written to the walk's output plus one,
//! so that every entry is symbolized as `addr - 1`.
//!
//! Must never: allocate, lock, make a system call or panic on the walk path
//! (gimli errors become [`WalkEnd`]s); read thread memory except through
//! `Stack::read`; read module memory except the `.eh_frame_hdr`/`.eh_frame`
//! (and the `.debug_frame` copy) of a module listed in the table loaded under
//! the current read section;
//! loop (the stack pointer must strictly increase, and the depth is bounded
//! by `out`).

use strobe_rcu::LocalHandle;

use crate::modules::{self, Module, Registry};
use crate::regs::{Regs, StackBounds};
use crate::{Walk, WalkEnd};

/// Entries of the per-thread rule cache (a power of two).
pub const CACHE_ENTRIES: usize = 512;

/// Cache figures of one thread (for benchmarks and tests).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Frames whose rule came from the cache.
    pub hits: u64,
    /// Frames whose rule was computed from the unwind tables.
    pub misses: u64,
}

/// The compiled-rule cache and gimli's unwind context a DWARF walk works in: about
/// 45 KiB. It is not tied to a thread: a [`ThreadCache`] owns one, or a program
/// with many threads keeps a few in a pool and lends one to each walk in
/// progress ([`walk_dwarf_with`]), so memory does not grow with the number of
/// threads. Allocate it outside signal handlers.
pub struct RuleCache {
    #[cfg(target_arch = "x86_64")]
    x86: x86::Cache,
    stats: CacheStats,
}

impl RuleCache {
    /// An empty cache (allocates; not async-signal-safe).
    pub fn new() -> RuleCache {
        RuleCache {
            #[cfg(target_arch = "x86_64")]
            x86: x86::Cache::new(),
            stats: CacheStats::default(),
        }
    }

    /// Hits and misses of the rule cache so far.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }
}

impl Default for RuleCache {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for RuleCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleCache").field("stats", &self.stats).finish_non_exhaustive()
    }
}

/// Per-thread state of the walkers: create it on the thread that will walk,
/// at thread start, outside signal handlers (it registers the thread with the
/// module table's RCU domain and, with [`ThreadCache::new`], allocates a
/// [`RuleCache`] of about 45 KiB; [`ThreadCache::without_rules`] allocates
/// none, for walks that borrow a pooled one). Not `Send`: the read-side
/// registration belongs to the creating thread.
pub struct ThreadCache {
    pub(crate) handle: LocalHandle,
    pub(crate) registry: Option<&'static Registry<Module>>,
    rules: Option<RuleCache>,
}

impl ThreadCache {
    /// Registers the calling thread and allocates its rule cache; initialises
    /// the module table first if [`modules::init`] has not run. Not
    /// async-signal-safe.
    pub fn new() -> ThreadCache {
        ThreadCache { rules: Some(RuleCache::new()), ..ThreadCache::without_rules() }
    }

    /// Registers the calling thread, with no rule cache of its own: its DWARF
    /// walks go through [`walk_dwarf_with`] and a borrowed [`RuleCache`]. Not
    /// async-signal-safe.
    pub fn without_rules() -> ThreadCache {
        modules::init();
        let registry = modules::registry();
        let domain = registry.map_or_else(strobe_rcu::Domain::new, |r| r.domain());
        ThreadCache { handle: domain.register(), registry, rules: None }
    }

    /// Runs `f` on the published module table inside a read section (`None`
    /// before [`modules::init`]). Async-signal-safe if `f` is; the table and
    /// every module it lists stay valid until `f` returns, and the modules
    /// stay mapped unless the program unloads one behind the interposed
    /// `dlclose` (see [`modules`]).
    pub fn with_table<R>(&mut self, f: impl FnOnce(Option<&modules::Table<Module>>) -> R) -> R {
        let guard = self.handle.read_lock();
        f(self.registry.and_then(|r| r.load(&guard)))
    }

    /// Hits and misses of the thread's own rule cache so far (zeros without one).
    pub fn stats(&self) -> CacheStats {
        self.rules.as_ref().map(RuleCache::stats).unwrap_or_default()
    }
}

impl Default for ThreadCache {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ThreadCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadCache").field("stats", &self.stats()).finish_non_exhaustive()
    }
}

/// Walks the stack from `regs` with the modules' DWARF unwind tables,
/// writing the callers' return addresses (innermost first) to `out`, with the
/// thread's own rule cache (a [`ThreadCache`] made by
/// [`ThreadCache::without_rules`] ends the walk at once with
/// [`WalkEnd::Unsupported`]: use [`walk_dwarf_with`]).
///
/// Async-signal-safe on the thread that created `cache` (it never allocates,
/// locks or makes a system call). Reads only the stack between the
/// interrupted sp less the 128-byte red zone and `bounds.hi` (clamped to
/// `bounds`), and the unwind tables of modules in the published table.
pub fn walk_dwarf(
    regs: &Regs,
    bounds: &StackBounds,
    cache: &mut ThreadCache,
    out: &mut [u64],
) -> Walk {
    let Some(mut rules) = cache.rules.take() else {
        return Walk { frames: 0, end: WalkEnd::Unsupported };
    };
    let w = walk_dwarf_with(regs, bounds, cache, &mut rules, out);
    cache.rules = Some(rules);
    w
}

/// [`walk_dwarf`] with a borrowed rule cache (one a pool lends to this walk;
/// no other walk may use it meanwhile). Async-signal-safe on the thread that
/// created `thread`.
pub fn walk_dwarf_with(
    regs: &Regs,
    bounds: &StackBounds,
    thread: &mut ThreadCache,
    rules: &mut RuleCache,
    out: &mut [u64],
) -> Walk {
    #[cfg(target_arch = "x86_64")]
    {
        let guard = thread.handle.read_lock();
        let Some(table) = thread.registry.and_then(|r| r.load(&guard)) else {
            return Walk { frames: 0, end: WalkEnd::NotInModule };
        };
        let stack = crate::regs::Stack::new(bounds, regs.sp);
        x86::walk(regs, stack, table, &mut rules.x86, &mut rules.stats, out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (regs, bounds, thread, rules, out);
        Walk { frames: 0, end: WalkEnd::Unsupported }
    }
}

/// Walks another thread's stack from a copy: `stack` holds the bytes from
/// `regs.sp` up (what the kernel copies for `PERF_SAMPLE_STACK_USER`), and
/// `table` that process's modules ([`Module::from_file`](crate::modules::Module::from_file)).
/// Reads only `stack` and the modules' tables; a frame whose caller lies past
/// the copy ends the walk with [`WalkEnd::OutOfBounds`]. `rules` may be shared
/// by the walks of every process, as long as each table's generation is
/// distinct.
pub fn walk_dwarf_copied(
    regs: &Regs,
    stack: &[u8],
    table: &crate::modules::Table<Module>,
    rules: &mut RuleCache,
    out: &mut [u64],
) -> Walk {
    #[cfg(target_arch = "x86_64")]
    {
        let copy = crate::regs::Stack::copied(regs.sp, stack);
        x86::walk(regs, copy, table, &mut rules.x86, &mut rules.stats, out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (regs, stack, table, rules, out);
        Walk { frames: 0, end: WalkEnd::Unsupported }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use gimli::{
        BaseAddresses, CfaRule, DebugFrame, DebugFrameOffset, EhFrame, EhFrameHdr, EndianSlice,
        LittleEndian, Reader, Register, RegisterRule, UnwindContext, UnwindContextStorage,
        UnwindSection, UnwindTableRow,
    };

    use super::{CacheStats, CACHE_ENTRIES};
    use crate::modules::{Module, Table};
    use crate::regs::{Regs, Stack};
    use crate::{Walk, WalkEnd};

    /// DWARF register numbers (x86-64 psABI, figure 3.36).
    const RBP: u8 = 6;
    const RSP: u8 = 7;
    const RA: u8 = 16;

    /// gimli's unwind context storage: fixed arrays, no allocation.
    pub(super) struct Store;

    impl UnwindContextStorage<usize> for Store {
        // x86-64 CFI names at most the 17 general registers and RA; the
        // vector registers never appear in practice.
        type Rules = [(Register, RegisterRule<usize>); 32];
        type Stack = [UnwindTableRow<usize, Self>; 4];
    }

    /// Where a register of the caller's frame is.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Loc {
        Undefined,
        Same,
        /// Saved at CFA + n.
        At(i32),
        /// Is CFA + n.
        Val(i32),
        /// Is the value of another register of this frame.
        Reg(u8),
        /// Saved at the address an expression computes (offset and length
        /// in the section the row came from).
        AtExpr(u32, u32),
        /// Is the value an expression computes.
        ValExpr(u32, u32),
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Cfa {
        Reg(u8, i32),
        Expr(u32, u32),
    }

    /// A compiled unwind row: how to find the caller's registers.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Rule {
        cfa: Cfa,
        ra: Loc,
        bp: Loc,
        /// `None`: the caller's stack pointer is the CFA (the usual case).
        sp: Option<Loc>,
        /// The FDE is a signal trampoline's: the caller's address is exact.
        signal: bool,
        /// Some rule is an expression (in the module's `.eh_frame`, or its
        /// `.debug_frame` when `debug`).
        exprs: bool,
        /// The row came from `.debug_frame`.
        debug: bool,
    }

    impl Rule {
        fn uses_expressions(&self) -> bool {
            let expr = |l: Loc| matches!(l, Loc::AtExpr(..) | Loc::ValExpr(..));
            matches!(self.cfa, Cfa::Expr(..))
                || expr(self.ra)
                || expr(self.bp)
                || self.sp.is_some_and(expr)
        }
    }

    #[derive(Clone, Copy)]
    struct Entry {
        key: u64,
        generation: u64,
        rule: Rule,
    }

    const EMPTY: Entry = Entry {
        key: 0,
        generation: 0,
        rule: Rule {
            cfa: Cfa::Reg(RSP, 8),
            ra: Loc::Undefined,
            bp: Loc::Same,
            sp: None,
            signal: false,
            exprs: false,
            debug: false,
        },
    };

    pub(super) struct Cache {
        ctx: Box<UnwindContext<usize, Store>>,
        entries: Box<[Entry]>,
    }

    impl Cache {
        pub(super) fn new() -> Cache {
            Cache {
                ctx: Box::new(UnwindContext::new_in()),
                entries: vec![EMPTY; CACHE_ENTRIES].into_boxed_slice(),
            }
        }
    }

    #[inline]
    fn slot(key: u64) -> usize {
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - CACHE_ENTRIES.trailing_zeros())) as usize
    }

    /// The registers of one frame.
    #[derive(Clone, Copy, Debug)]
    struct Frame {
        ip: u64,
        sp: u64,
        bp: u64,
        /// `ip` is an exact instruction address (the first frame, or one a
        /// signal interrupted), not a return address.
        exact: bool,
    }

    impl Frame {
        #[inline]
        fn lookup(&self) -> u64 {
            if self.exact {
                self.ip
            } else {
                self.ip.wrapping_sub(1)
            }
        }

        #[inline]
        fn reg(&self, r: u8) -> Result<u64, WalkEnd> {
            match r {
                RBP => Ok(self.bp),
                RSP => Ok(self.sp),
                RA => Ok(self.ip),
                _ => Err(WalkEnd::Unsupported),
            }
        }
    }

    pub(super) fn walk(
        regs: &Regs,
        stack: Option<Stack>,
        table: &Table<Module>,
        cache: &mut Cache,
        stats: &mut CacheStats,
        out: &mut [u64],
    ) -> Walk {
        let mut n = 0;
        let Some(stack) = stack else {
            return Walk { frames: 0, end: WalkEnd::OutOfBounds };
        };
        let mut f = Frame { ip: regs.ip, sp: regs.sp, bp: regs.bp, exact: true };
        if !table.contains(f.lookup()) {
            return Walk { frames: 0, end: WalkEnd::NotInModule };
        }
        loop {
            let next = match step(&f, table, &stack, cache, stats) {
                Ok(next) => next,
                Err(end) => return Walk { frames: n, end },
            };
            if next.ip == 0 || next.ip >= 1 << 56 || next.sp <= f.sp {
                return Walk { frames: n, end: WalkEnd::Implausible };
            }
            if !table.contains(next.lookup()) {
                return Walk { frames: n, end: WalkEnd::NotInModule };
            }
            if n == out.len() {
                return Walk { frames: n, end: WalkEnd::DepthLimit };
            }
            // Every entry lies one past an instruction of its frame's function
            // (crate note), so that its users symbolize `addr - 1` throughout: a
            // return address already does. The frame a signal interrupted is an
            // exact address, and the sigreturn trampoline before it is one too
            // (the handler returns to its first instruction, not after a call):
            // both are stored plus one.
            if next.exact && !f.exact && n > 0 {
                if let Some(prev) = out.get_mut(n - 1) {
                    *prev = f.ip.wrapping_add(1);
                }
            }
            out[n] = if next.exact { next.ip.wrapping_add(1) } else { next.ip };
            n += 1;
            f = next;
        }
    }

    /// The caller of frame `f` (whose address lies in a module of `table`),
    /// or why there is none.
    #[inline]
    fn step(
        f: &Frame,
        table: &Table<Module>,
        stack: &Stack,
        cache: &mut Cache,
        stats: &mut CacheStats,
    ) -> Result<Frame, WalkEnd> {
        let key = f.lookup();
        let i = slot(key);
        let e = &cache.entries[i];
        let rule = if e.key == key && e.generation == table.generation {
            stats.hits += 1;
            e.rule
        } else {
            stats.misses += 1;
            let m = table.find(key).ok_or(WalkEnd::NotInModule)?;
            let rule = compile(m, key, &mut cache.ctx)?;
            cache.entries[i] = Entry { key, generation: table.generation, rule };
            rule
        };
        if rule.exprs {
            // Expressions live in the section the row came from.
            let m = table.find(key).ok_or(WalkEnd::NotInModule)?;
            let section = if rule.debug {
                m.debug.as_ref().map(|d| &*d.data)
            } else {
                m.cfi.as_ref().map(|c| c.eh())
            };
            apply(&rule, f, stack, section.ok_or(WalkEnd::NoUnwindInfo)?)
        } else {
            apply(&rule, f, stack, &[])
        }
    }

    /// Searches the module's tables for `addr` (`.eh_frame`, then
    /// `.debug_frame`) and compiles its row.
    #[cold]
    fn compile(
        m: &Module,
        addr: u64,
        ctx: &mut UnwindContext<usize, Store>,
    ) -> Result<Rule, WalkEnd> {
        let from_eh = match m.cfi.as_ref() {
            Some(cfi) => compile_eh(cfi, addr, ctx),
            None => Err(WalkEnd::NoUnwindInfo),
        };
        match (from_eh, m.debug.as_ref()) {
            (Err(WalkEnd::NoUnwindInfo), Some(df)) => {
                compile_debug(df, addr.wrapping_sub(m.bias), ctx)
            }
            (r, _) => r,
        }
    }

    fn compile_eh(
        cfi: &crate::modules::Tables,
        addr: u64,
        ctx: &mut UnwindContext<usize, Store>,
    ) -> Result<Rule, WalkEnd> {
        let bases =
            BaseAddresses::default().set_eh_frame_hdr(cfi.hdr_addr).set_eh_frame(cfi.eh_addr);
        let hdr = EhFrameHdr::new(cfi.hdr(), LittleEndian)
            .parse(&bases, 8)
            .map_err(|_| WalkEnd::Implausible)?;
        let mut eh = EhFrame::new(cfi.eh(), LittleEndian);
        eh.set_address_size(8);
        let table = hdr.table().ok_or(WalkEnd::NoUnwindInfo)?;
        let fde = table
            .fde_for_address(&eh, &bases, addr, EhFrame::cie_from_offset)
            .map_err(gimli_end)?;
        let row = fde.unwind_info_for_address(&eh, &bases, ctx, addr).map_err(gimli_end)?;
        convert(row, fde.is_signal_trampoline(), false)
    }

    /// `svma`: the address as the module's file states it.
    fn compile_debug(
        df: &crate::modules::DebugFrame,
        svma: u64,
        ctx: &mut UnwindContext<usize, Store>,
    ) -> Result<Rule, WalkEnd> {
        let offset = df.fde_offset(svma).ok_or(WalkEnd::NoUnwindInfo)?;
        let mut section = DebugFrame::new(&df.data, LittleEndian);
        section.set_address_size(8);
        let bases = BaseAddresses::default();
        let fde = section
            .fde_from_offset(&bases, DebugFrameOffset(offset), DebugFrame::cie_from_offset)
            .map_err(gimli_end)?;
        let row = fde.unwind_info_for_address(&section, &bases, ctx, svma).map_err(gimli_end)?;
        convert(row, fde.is_signal_trampoline(), true)
    }

    fn convert(
        row: &UnwindTableRow<usize, Store>,
        signal: bool,
        debug: bool,
    ) -> Result<Rule, WalkEnd> {
        let cfa = match *row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => {
                Cfa::Reg(reg8(register)?, i32::try_from(offset).map_err(|_| WalkEnd::Implausible)?)
            }
            CfaRule::Expression(e) => Cfa::Expr(off32(e.offset)?, off32(e.length)?),
        };
        let ra = match row.register(Register(RA.into())) {
            None => return Err(WalkEnd::Unsupported),
            Some(r) => loc(r)?,
        };
        let bp = row.register(Register(RBP.into())).map_or(Ok(Loc::Same), loc)?;
        let sp = row.register(Register(RSP.into())).map(loc).transpose()?;
        let mut rule = Rule { cfa, ra, bp, sp, signal, exprs: false, debug };
        rule.exprs = rule.uses_expressions();
        Ok(rule)
    }

    fn gimli_end(e: gimli::Error) -> WalkEnd {
        match e {
            gimli::Error::NoUnwindInfoForAddress => WalkEnd::NoUnwindInfo,
            gimli::Error::TooManyRegisterRules | gimli::Error::StackFull => WalkEnd::Unsupported,
            _ => WalkEnd::Implausible,
        }
    }

    fn reg8(r: Register) -> Result<u8, WalkEnd> {
        u8::try_from(r.0).map_err(|_| WalkEnd::Unsupported)
    }

    fn off32(v: usize) -> Result<u32, WalkEnd> {
        u32::try_from(v).map_err(|_| WalkEnd::Implausible)
    }

    fn i32of(v: i64) -> Result<i32, WalkEnd> {
        i32::try_from(v).map_err(|_| WalkEnd::Implausible)
    }

    fn loc(r: RegisterRule<usize>) -> Result<Loc, WalkEnd> {
        Ok(match r {
            RegisterRule::Undefined => Loc::Undefined,
            RegisterRule::SameValue => Loc::Same,
            RegisterRule::Offset(o) => Loc::At(i32of(o)?),
            RegisterRule::ValOffset(o) => Loc::Val(i32of(o)?),
            RegisterRule::Register(r) => Loc::Reg(reg8(r)?),
            RegisterRule::Expression(e) => Loc::AtExpr(off32(e.offset)?, off32(e.length)?),
            RegisterRule::ValExpression(e) => Loc::ValExpr(off32(e.offset)?, off32(e.length)?),
            _ => return Err(WalkEnd::Unsupported),
        })
    }

    /// Applies a rule to frame `f`: the caller's frame.
    #[inline(always)]
    fn apply(rule: &Rule, f: &Frame, stack: &Stack, eh: &[u8]) -> Result<Frame, WalkEnd> {
        let cfa = match rule.cfa {
            Cfa::Reg(r, off) => f.reg(r)?.wrapping_add(off as i64 as u64),
            Cfa::Expr(o, l) => eval(expr(eh, o, l)?, f, stack, None)?,
        };
        if !stack.holds_sp(cfa) {
            return Err(WalkEnd::OutOfBounds);
        }
        if rule.ra == Loc::Undefined {
            return Err(WalkEnd::Complete);
        }
        let ip = value(rule.ra, f.ip, cfa, f, stack, eh)?;
        // A frame pointer we cannot recover is only fatal if an outer rule
        // needs it: zero makes any CFA based on it fall out of bounds there.
        let bp = value(rule.bp, f.bp, cfa, f, stack, eh).unwrap_or(0);
        let sp = match rule.sp {
            None => cfa,
            Some(l) => value(l, f.sp, cfa, f, stack, eh)?,
        };
        if !stack.holds_sp(sp) {
            return Err(WalkEnd::OutOfBounds);
        }
        Ok(Frame { ip, sp, bp, exact: rule.signal })
    }

    /// The caller's value of a register whose rule is `l` (`same`: its value
    /// in this frame).
    #[inline(always)]
    fn value(
        l: Loc,
        same: u64,
        cfa: u64,
        f: &Frame,
        stack: &Stack,
        eh: &[u8],
    ) -> Result<u64, WalkEnd> {
        match l {
            Loc::At(o) => stack.read(cfa.wrapping_add(o as i64 as u64)).ok_or(WalkEnd::OutOfBounds),
            Loc::Same => Ok(same),
            Loc::Undefined => Ok(0),
            Loc::Val(o) => Ok(cfa.wrapping_add(o as i64 as u64)),
            Loc::Reg(r) => f.reg(r),
            Loc::AtExpr(o, l) => {
                let a = eval(expr(eh, o, l)?, f, stack, Some(cfa))?;
                stack.read(a).ok_or(WalkEnd::OutOfBounds)
            }
            Loc::ValExpr(o, l) => eval(expr(eh, o, l)?, f, stack, Some(cfa)),
        }
    }

    fn expr(eh: &[u8], off: u32, len: u32) -> Result<&[u8], WalkEnd> {
        let (o, l) = (off as usize, len as usize);
        eh.get(o..o.checked_add(l).ok_or(WalkEnd::Implausible)?).ok_or(WalkEnd::Implausible)
    }

    /// Most operations an expression may run (a bound on its cost).
    const MAX_OPS: usize = 64;
    /// Depth of the expression stack.
    const MAX_STACK: usize = 8;

    /// Evaluates a DWARF expression over the frame's registers, reading
    /// memory only through `stack`. `cfa` is pushed first for register rules.
    #[inline(never)]
    fn eval(code: &[u8], f: &Frame, stack: &Stack, cfa: Option<u64>) -> Result<u64, WalkEnd> {
        let mut st = [0u64; MAX_STACK];
        let mut n = 0usize;
        let bad = |_| WalkEnd::Implausible;
        macro_rules! push {
            ($v:expr) => {{
                let v: u64 = $v;
                if n == MAX_STACK {
                    return Err(WalkEnd::Unsupported);
                }
                st[n] = v;
                n += 1;
            }};
        }
        macro_rules! pop {
            () => {{
                if n == 0 {
                    return Err(WalkEnd::Implausible);
                }
                n -= 1;
                st[n]
            }};
        }
        if let Some(c) = cfa {
            push!(c);
        }
        let mut r = EndianSlice::new(code, LittleEndian);
        let mut ops = 0;
        while !r.is_empty() {
            ops += 1;
            if ops > MAX_OPS {
                return Err(WalkEnd::Unsupported);
            }
            let op = r.read_u8().map_err(bad)?;
            match op {
                // DW_OP_lit0..31
                0x30..=0x4f => push!(u64::from(op - 0x30)),
                // DW_OP_breg0..31
                0x70..=0x8f => {
                    let off = r.read_sleb128().map_err(bad)?;
                    push!(f.reg(op - 0x70)?.wrapping_add(off as u64));
                }
                // DW_OP_deref
                0x06 => {
                    let a = pop!();
                    push!(stack.read(a).ok_or(WalkEnd::OutOfBounds)?);
                }
                0x08 => push!(u64::from(r.read_u8().map_err(bad)?)),
                0x09 => push!(r.read_i8().map_err(bad)? as i64 as u64),
                0x0a => push!(u64::from(r.read_u16().map_err(bad)?)),
                0x0b => push!(r.read_i16().map_err(bad)? as i64 as u64),
                0x0c => push!(u64::from(r.read_u32().map_err(bad)?)),
                0x0d => push!(r.read_i32().map_err(bad)? as i64 as u64),
                0x0e => push!(r.read_u64().map_err(bad)?),
                0x0f => push!(r.read_i64().map_err(bad)? as u64),
                0x10 => push!(r.read_uleb128().map_err(bad)?),
                0x11 => push!(r.read_sleb128().map_err(bad)? as u64),
                // DW_OP_dup, drop, over, swap
                0x12 => {
                    let a = pop!();
                    push!(a);
                    push!(a);
                }
                0x13 => {
                    pop!();
                }
                0x14 => {
                    let b = pop!();
                    let a = pop!();
                    push!(a);
                    push!(b);
                    push!(a);
                }
                0x16 => {
                    let b = pop!();
                    let a = pop!();
                    push!(b);
                    push!(a);
                }
                // DW_OP_plus_uconst
                0x23 => {
                    let a = pop!();
                    push!(a.wrapping_add(r.read_uleb128().map_err(bad)?));
                }
                // Binary operations.
                0x1a | 0x1c | 0x1e | 0x21 | 0x22 | 0x24 | 0x25 | 0x26 | 0x27 | 0x29..=0x2e => {
                    let b = pop!();
                    let a = pop!();
                    let (sa, sb) = (a as i64, b as i64);
                    push!(match op {
                        0x1a => a & b,
                        0x1c => a.wrapping_sub(b),
                        0x1e => a.wrapping_mul(b),
                        0x21 => a | b,
                        0x22 => a.wrapping_add(b),
                        0x24 => a.checked_shl(b as u32).unwrap_or(0),
                        0x25 => a.checked_shr(b as u32).unwrap_or(0),
                        0x26 => sa.checked_shr(b as u32).unwrap_or(sa >> 63) as u64,
                        0x27 => a ^ b,
                        0x29 => u64::from(sa == sb),
                        0x2a => u64::from(sa >= sb),
                        0x2b => u64::from(sa > sb),
                        0x2c => u64::from(sa <= sb),
                        0x2d => u64::from(sa < sb),
                        _ => u64::from(sa != sb),
                    });
                }
                _ => return Err(WalkEnd::Unsupported),
            }
        }
        Ok(pop!())
    }
}
