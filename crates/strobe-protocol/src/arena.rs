//! The arena: the one shared mapping of a recording. `strobe record` creates it (a memfd,
//! close-on-exec) and passes its path (`/proc/<recorder>/fd/<n>`, so no descriptor leaks
//! into the target) in `STROBE_ARENA`; every profiled process maps it at load, forked
//! children inherit the mapping, exec'd images map it again.
//!
//! ```text
//! 0        ArenaHeader: magic, version, the sizes of the shared types (a layout check
//!          between the agent and strobe, separate builds), region offsets, counters,
//!          and the custody pool's head
//! 4 KiB    the configuration (RecordConfig, encoded), written before any agent starts
//! 68 KiB   the calibration result (Calibration, encoded), written by a calibrating agent
//! ...      the process table (ProcEntry), the slots (SharedSlot), the block heads, the
//!          block words
//! ```
//!
//! Owns: the layout, creating and attaching, and the typed views of each region. Must
//! never be used from a signal handler except through the views (`pool`, `slots`),
//! which are plain memory; and never trust an arena whose layout differs from its own
//! (attach refuses it).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use strobe_sampler::custody::{BlockHead, Pool, PoolHead, SharedSlot, Word};

use crate::calibration::Calibration;
use crate::config::RecordConfig;
use crate::wire::DecodeError;

/// The arena's first bytes.
pub const MAGIC: [u8; 8] = *b"STROBEAR";
/// The layout's version.
pub const VERSION: u32 = 1;
const HEADER_BYTES: usize = 4096;
const CONFIG_MAX: usize = 64 << 10;
const CALIB_MAX: usize = 4 << 10;
const NOTES_MAX: usize = 16 << 10;

/// A process's state in the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcState {
    /// The entry is unused.
    Free,
    /// The process records.
    Running,
    /// It ended through `exit`/`_exit` (its agent said so).
    Exited,
    /// It replaced its image (its agent said so before `execve`).
    Execed,
}

impl ProcState {
    fn code(self) -> u32 {
        match self {
            ProcState::Free => 0,
            ProcState::Running => 1,
            ProcState::Exited => 2,
            ProcState::Execed => 3,
        }
    }

    fn from_code(c: u32) -> ProcState {
        match c {
            1 => ProcState::Running,
            2 => ProcState::Exited,
            3 => ProcState::Execed,
            _ => ProcState::Free,
        }
    }
}

/// One profiled process (one agent instance: a process, or one image of it).
#[repr(C, align(64))]
#[derive(Debug)]
pub struct ProcEntry {
    state: AtomicU32,
    /// Process id.
    pub pid: AtomicU32,
    /// Its record stream.
    pub stream: AtomicU32,
    /// Its parent.
    pub ppid: AtomicU32,
    /// The long period it samples at (leader units).
    pub period: AtomicU64,
    /// The jitter on the period.
    pub jitter: AtomicU64,
    /// The window (0: fixed-period sampling).
    pub window: AtomicU64,
    /// Its claim's number (1, 2, ...: the order agents started in): an entry the
    /// recorder freed is claimed again under a new number, so the number, not the
    /// index, names one agent instance.
    pub seq: AtomicU64,
}

impl ProcEntry {
    /// The entry's state (Acquire: the agent's fields are visible once Running is seen).
    pub fn state(&self) -> ProcState {
        ProcState::from_code(self.state.load(Ordering::Acquire))
    }

    /// The agent ends its entry (exit or exec). Release: what it did before is visible
    /// to the recorder that sees the new state.
    pub fn set_state(&self, s: ProcState) {
        self.state.store(s.code(), Ordering::Release);
    }
}

/// Counts that size an arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArenaSizes {
    /// Threads alive at once that can sample (slots).
    pub slots: u32,
    /// Blocks in the pool.
    pub blocks: u32,
    /// Words per block.
    pub block_words: u32,
    /// Processes (agent instances) per recording.
    pub procs: u32,
    /// Records published before the recorder is woken.
    pub wakeup: u64,
}

impl ArenaSizes {
    /// Sizes for a pool of `pool_bytes` in blocks of `block_bytes`.
    pub fn for_pool(pool_bytes: u64, block_bytes: u32, wakeup: u64) -> ArenaSizes {
        let block_words = (block_bytes / 8).max(strobe_sampler::custody::record::MAX_WORDS as u32);
        let blocks = (pool_bytes / (u64::from(block_words) * 8)).clamp(4, 1 << 22) as u32;
        ArenaSizes { slots: 16_384, blocks, block_words, procs: 4096, wakeup }
    }

    /// The mapping's length and the offsets of its regions.
    fn layout(&self) -> Layout {
        let align = |v: usize, a: usize| v.div_ceil(a) * a;
        let config = HEADER_BYTES;
        let calib = config + CONFIG_MAX;
        let notes = calib + CALIB_MAX;
        let procs = align(notes + NOTES_MAX, 64);
        let slots = align(procs + self.procs as usize * std::mem::size_of::<ProcEntry>(), 128);
        let blocks = align(slots + self.slots as usize * std::mem::size_of::<SharedSlot>(), 64);
        let words = align(blocks + self.blocks as usize * std::mem::size_of::<BlockHead>(), 4096);
        let len = align(words + self.blocks as usize * self.block_words as usize * 8, 4096);
        Layout { procs, slots, blocks, words, len }
    }
}

#[derive(Debug, Clone, Copy)]
struct Layout {
    procs: usize,
    slots: usize,
    blocks: usize,
    words: usize,
    len: usize,
}

/// The arena's header (see the module note).
#[repr(C)]
#[derive(Debug)]
pub struct ArenaHeader {
    magic: [u8; 8],
    version: u32,
    header_bytes: u32,
    pool_head_size: u32,
    block_head_size: u32,
    slot_size: u32,
    proc_size: u32,
    nslots: u32,
    nblocks: u32,
    block_words: u32,
    nprocs: u32,
    procs_off: u64,
    slots_off: u64,
    blocks_off: u64,
    words_off: u64,
    len: u64,
    config_len: u32,
    /// Bytes of calibration result written (0 until a calibrating agent wrote it).
    calib_len: AtomicU32,
    /// One past the highest slot ever claimed.
    high_water: AtomicU32,
    /// Agents that attached.
    attached: AtomicU32,
    /// One past the highest process entry ever claimed.
    proc_high_water: AtomicU32,
    /// Process entries claimed so far (the last claim's number).
    proc_claims: AtomicU64,
    /// Agents that found every process entry taken.
    no_proc: AtomicU32,
    /// Threads that could not get a slot (all taken).
    no_slot: AtomicU32,
    /// Threads whose events could not be opened (EMFILE: the open-file limit, ...).
    no_events: AtomicU32,
    /// Threads whose overflow ring could not be mapped (the locked-memory allowance).
    no_ring: AtomicU32,
    /// Threads the agent left to the kernel floor because they blocked the sampler's
    /// signal (at their start, or later with sigprocmask/pthread_sigmask).
    signal_blocked: AtomicU32,
    /// Threads the agent left to the kernel floor because its descriptor budget was
    /// spent.
    over_budget: AtomicU32,
    /// Bytes of the notes region reserved by agents (each note: a u16 length, then text).
    notes_len: AtomicU32,
    /// The custody pool's head.
    pub pool: PoolHead,
}

const _: () = assert!(std::mem::size_of::<ArenaHeader>() <= HEADER_BYTES);

/// Why an arena could not be created or attached.
#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    /// Creating the mapping failed.
    #[error("cannot create the shared buffer of {bytes} bytes: {source}")]
    Create {
        /// Its size.
        bytes: usize,
        /// Why.
        source: io::Error,
    },
    /// Opening or mapping an existing arena failed.
    #[error("cannot map the shared buffer {path}: {source}")]
    Attach {
        /// Its path.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file is not an arena of this layout.
    #[error("{path} is not a strobe arena of this version ({why})")]
    Layout {
        /// Its path.
        path: PathBuf,
        /// What differs.
        why: String,
    },
    /// The configuration does not fit or does not decode.
    #[error("the recording's configuration: {0}")]
    Config(String),
}

impl From<DecodeError> for ArenaError {
    fn from(e: DecodeError) -> Self {
        ArenaError::Config(e.to_string())
    }
}

/// A mapped arena.
#[derive(Debug)]
pub struct Arena {
    base: *mut u8,
    len: usize,
    /// The memfd, for the recorder (None in an agent, which closes its descriptor).
    fd: Option<OwnedFd>,
}

// SAFETY: the mapping is shared memory accessed only through atomics (header, pool,
// slots, processes) or under the custody protocol (block words); `Arena` hands out shared
// references only.
unsafe impl Send for Arena {}
// SAFETY: as above.
unsafe impl Sync for Arena {}

impl Arena {
    /// Creates an arena (the recorder), with `config` encoded in it.
    pub fn create(sizes: ArenaSizes, config: &RecordConfig) -> Result<Arena, ArenaError> {
        let l = sizes.layout();
        let cfg = config.encode();
        if cfg.len() > CONFIG_MAX {
            return Err(ArenaError::Config(format!("{} bytes, more than {CONFIG_MAX}", cfg.len())));
        }
        let err = |source| ArenaError::Create { bytes: l.len, source };
        // SAFETY: a NUL-terminated name; plain flags.
        let fd = unsafe { libc::memfd_create(c"strobe-arena".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(err(io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: plain arguments on our descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), l.len as libc::off_t) } != 0 {
            return Err(err(io::Error::last_os_error()));
        }
        let base = map(fd.as_raw_fd(), l.len).map_err(err)?;
        let arena = Arena { base, len: l.len, fd: Some(fd) };
        // SAFETY: a fresh zeroed mapping of `l.len` bytes, not yet shared: we are its only
        // user while we fill the header and the configuration.
        unsafe {
            let h = base.cast::<ArenaHeader>();
            (*h).magic = MAGIC;
            (*h).version = VERSION;
            (*h).header_bytes = HEADER_BYTES as u32;
            (*h).pool_head_size = std::mem::size_of::<PoolHead>() as u32;
            (*h).block_head_size = std::mem::size_of::<BlockHead>() as u32;
            (*h).slot_size = std::mem::size_of::<SharedSlot>() as u32;
            (*h).proc_size = std::mem::size_of::<ProcEntry>() as u32;
            (*h).nslots = sizes.slots;
            (*h).nblocks = sizes.blocks;
            (*h).block_words = sizes.block_words;
            (*h).nprocs = sizes.procs;
            (*h).procs_off = l.procs as u64;
            (*h).slots_off = l.slots as u64;
            (*h).blocks_off = l.blocks as u64;
            (*h).words_off = l.words as u64;
            (*h).len = l.len as u64;
            (*h).config_len = cfg.len() as u32;
            std::ptr::copy_nonoverlapping(cfg.as_ptr(), base.add(HEADER_BYTES), cfg.len());
        }
        arena.pool().init(sizes.block_words, sizes.wakeup);
        Ok(arena)
    }

    /// Maps the arena at `path` (an agent).
    pub fn attach(path: &Path) -> Result<Arena, ArenaError> {
        let err = |source| ArenaError::Attach { path: path.to_path_buf(), source };
        let c = CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()))
            .map_err(|_| err(io::Error::from(io::ErrorKind::InvalidInput)))?;
        // SAFETY: a NUL-terminated path; plain flags.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(err(io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor we own (closed when this drops, after mapping).
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: `st` is a valid out-pointer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(err(io::Error::last_os_error()));
        }
        let len = st.st_size as usize;
        if len < HEADER_BYTES + CONFIG_MAX + CALIB_MAX + NOTES_MAX {
            return Err(ArenaError::Layout { path: path.into(), why: format!("only {len} bytes") });
        }
        let base = map(fd.as_raw_fd(), len).map_err(err)?;
        let arena = Arena { base, len, fd: None };
        arena.check(path)?;
        arena.header().attached.fetch_add(1, Ordering::Relaxed);
        Ok(arena)
    }

    fn check(&self, path: &Path) -> Result<(), ArenaError> {
        let h = self.header();
        let bad = |why: String| Err(ArenaError::Layout { path: path.into(), why });
        if h.magic != MAGIC {
            return bad("no magic".into());
        }
        if h.version != VERSION {
            return bad(format!("layout version {} (this build: {VERSION})", h.version));
        }
        let sizes = [
            (h.pool_head_size, std::mem::size_of::<PoolHead>(), "pool head"),
            (h.block_head_size, std::mem::size_of::<BlockHead>(), "block head"),
            (h.slot_size, std::mem::size_of::<SharedSlot>(), "slot"),
            (h.proc_size, std::mem::size_of::<ProcEntry>(), "process entry"),
        ];
        for (theirs, ours, what) in sizes {
            if theirs as usize != ours {
                return bad(format!("{what} of {theirs} bytes, this build's is {ours}"));
            }
        }
        let l = ArenaSizes {
            slots: h.nslots,
            blocks: h.nblocks,
            block_words: h.block_words,
            procs: h.nprocs,
            wakeup: 1,
        }
        .layout();
        if l.len as u64 != h.len
            || h.len as usize > self.len
            || l.procs as u64 != h.procs_off
            || l.slots as u64 != h.slots_off
            || l.blocks as u64 != h.blocks_off
            || l.words as u64 != h.words_off
        {
            return bad("its regions do not match its sizes".into());
        }
        Ok(())
    }

    /// The header.
    pub fn header(&self) -> &ArenaHeader {
        // SAFETY: the mapping starts with a header (created or checked); it lives as long
        // as `self`; every field the others touch after creation is atomic.
        unsafe { &*self.base.cast::<ArenaHeader>() }
    }

    /// The path a child process opens to attach (the recorder's memfd through /proc).
    pub fn child_path(&self) -> Option<PathBuf> {
        let fd = self.fd.as_ref()?;
        Some(PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd())))
    }

    /// The recording's configuration.
    pub fn config(&self) -> Result<RecordConfig, ArenaError> {
        let n = (self.header().config_len as usize).min(CONFIG_MAX);
        // SAFETY: the configuration region lies within the mapping and is written once,
        // before any agent attached.
        let bytes = unsafe { std::slice::from_raw_parts(self.base.add(HEADER_BYTES), n) };
        Ok(RecordConfig::decode(bytes)?)
    }

    /// Stores the calibration result (the calibrating agent, once).
    pub fn set_calibration(&self, c: &Calibration) -> bool {
        let bytes = c.encode();
        if bytes.len() > CALIB_MAX || self.header().calib_len.load(Ordering::Relaxed) != 0 {
            return false;
        }
        // SAFETY: the calibration region lies within the mapping; only the one
        // calibrating agent writes it, once (checked above), before publishing its length.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.base.add(HEADER_BYTES + CONFIG_MAX),
                bytes.len(),
            )
        };
        // Release: the bytes are visible to a reader that sees the length.
        self.header().calib_len.store(bytes.len() as u32, Ordering::Release);
        true
    }

    /// The calibration result, once written.
    pub fn calibration(&self) -> Option<Result<Calibration, DecodeError>> {
        // Acquire: pairs with `set_calibration`.
        let n = self.header().calib_len.load(Ordering::Acquire) as usize;
        if n == 0 || n > CALIB_MAX {
            return None;
        }
        // SAFETY: written and published (Acquire above), within the mapping.
        let bytes =
            unsafe { std::slice::from_raw_parts(self.base.add(HEADER_BYTES + CONFIG_MAX), n) };
        Some(Calibration::decode(bytes))
    }

    /// Leaves a one-line note for the recorder's summary (an agent, normal context).
    /// Notes that do not fit are dropped (the record file has them all as NOTE chunks).
    pub fn push_note(&self, text: &str) {
        let bytes = &text.as_bytes()[..text.len().min(1000)];
        // Even sizes keep every length word 2-aligned (the region starts page-aligned).
        let need = (2 + bytes.len()).next_multiple_of(2);
        // Relaxed: reserving space; the text is published by its length word below.
        let at = self.header().notes_len.fetch_add(need as u32, Ordering::Relaxed) as usize;
        if at + need > NOTES_MAX {
            return;
        }
        let base = HEADER_BYTES + CONFIG_MAX + CALIB_MAX + at;
        // SAFETY: `at..at + need` of the notes region was reserved by us alone (the
        // fetch_add) and lies within the mapping. The length goes last, with a release
        // store, so a reader that sees it non-zero sees the text.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.add(base + 2), bytes.len());
            let len = &*(self.base.add(base).cast::<std::sync::atomic::AtomicU16>());
            len.store(bytes.len() as u16 + 1, Ordering::Release);
        }
    }

    /// The notes agents left (the recorder, after they are done).
    pub fn notes(&self) -> Vec<String> {
        let end = (self.header().notes_len.load(Ordering::Relaxed) as usize).min(NOTES_MAX);
        let mut out = Vec::new();
        let mut at = 0;
        while at + 2 <= end {
            let base = HEADER_BYTES + CONFIG_MAX + CALIB_MAX + at;
            // SAFETY: within the notes region of the mapping, at an even offset (every
            // reservation has an even size): a valid, aligned AtomicU16. Acquire pairs
            // with the writer's Release: the text is visible.
            let len = unsafe {
                (*self.base.add(base).cast::<std::sync::atomic::AtomicU16>())
                    .load(Ordering::Acquire)
            } as usize;
            if len == 0 {
                break; // reserved, not yet written (or a writer died): stop here
            }
            let n = len - 1;
            if at + 2 + n > end {
                break;
            }
            // SAFETY: the note's text, published before its length, within the region.
            let text = unsafe { std::slice::from_raw_parts(self.base.add(base + 2), n) };
            out.push(String::from_utf8_lossy(text).into_owned());
            at += (2 + n).next_multiple_of(2);
        }
        out
    }

    /// The custody pool.
    pub fn pool(&self) -> Pool<'_> {
        let h = self.header();
        // SAFETY: the regions were laid out by `create` (or checked by `attach`) within
        // the mapping; a zeroed BlockHead or Word is a valid value; all shared access is
        // atomic or under the custody protocol.
        unsafe {
            Pool {
                head: &h.pool,
                blocks: std::slice::from_raw_parts(
                    self.base.add(h.blocks_off as usize).cast::<BlockHead>(),
                    h.nblocks as usize,
                ),
                words: std::slice::from_raw_parts(
                    self.base.add(h.words_off as usize).cast::<Word>(),
                    h.nblocks as usize * h.block_words as usize,
                ),
            }
        }
    }

    /// The slots.
    pub fn slots(&self) -> &[SharedSlot] {
        let h = self.header();
        // SAFETY: as in `pool`; a zeroed SharedSlot is a FREE slot.
        unsafe {
            std::slice::from_raw_parts(
                self.base.add(h.slots_off as usize).cast::<SharedSlot>(),
                h.nslots as usize,
            )
        }
    }

    /// The process table.
    pub fn procs(&self) -> &[ProcEntry] {
        let h = self.header();
        // SAFETY: as in `pool`; a zeroed ProcEntry is a free entry.
        unsafe {
            std::slice::from_raw_parts(
                self.base.add(h.procs_off as usize).cast::<ProcEntry>(),
                h.nprocs as usize,
            )
        }
    }

    /// Claims a free slot for the calling thread: its index and new generation. Not
    /// signal-safe (thread setup).
    pub fn claim_slot(&self) -> Option<(u32, u32)> {
        for (i, s) in self.slots().iter().enumerate() {
            if let Some(g) = s.ctl.try_claim() {
                // Relaxed: only bounds scans; a slot missed now is found next time.
                self.header().high_water.fetch_max(i as u32 + 1, Ordering::Relaxed);
                return Some((i as u32, g));
            }
        }
        self.header().no_slot.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// One past the highest slot ever claimed.
    pub fn high_water(&self) -> usize {
        self.header().high_water.load(Ordering::Relaxed) as usize
    }

    /// Threads that found every slot taken.
    pub fn threads_without_slot(&self) -> u32 {
        self.header().no_slot.load(Ordering::Relaxed)
    }

    /// A thread's events could not be opened (the agent counts it here).
    pub fn count_unprofiled_thread(&self) {
        self.header().no_events.fetch_add(1, Ordering::Relaxed);
    }

    /// Threads whose events could not be opened.
    pub fn threads_without_events(&self) -> u32 {
        self.header().no_events.load(Ordering::Relaxed)
    }

    /// A thread's overflow ring could not be mapped (the agent counts it here): its
    /// windows begin at the handler, never inside a system call.
    pub fn count_thread_without_ring(&self) {
        self.header().no_ring.fetch_add(1, Ordering::Relaxed);
    }

    /// Threads whose overflow ring could not be mapped.
    pub fn threads_without_ring(&self) -> u32 {
        self.header().no_ring.load(Ordering::Relaxed)
    }

    /// A thread blocked the sampler's signal: the kernel floor samples it (the agent
    /// counts it here, once per thread).
    pub fn count_signal_blocked(&self) {
        self.header().signal_blocked.fetch_add(1, Ordering::Relaxed);
    }

    /// Threads left to the floor because they blocked the sampler's signal.
    pub fn threads_signal_blocked(&self) -> u32 {
        self.header().signal_blocked.load(Ordering::Relaxed)
    }

    /// A thread found the agent's descriptor budget spent: the kernel floor samples it.
    pub fn count_over_budget(&self) {
        self.header().over_budget.fetch_add(1, Ordering::Relaxed);
    }

    /// Threads left to the floor by the descriptor budget.
    pub fn threads_over_budget(&self) -> u32 {
        self.header().over_budget.load(Ordering::Relaxed)
    }

    /// Agents that attached so far.
    pub fn attached(&self) -> u32 {
        self.header().attached.load(Ordering::Relaxed)
    }

    /// Claims a process entry (an agent at start).
    pub fn claim_proc(&self, pid: u32, ppid: u32, stream: u32) -> Option<&ProcEntry> {
        let h = self.header();
        for (i, p) in self.procs().iter().enumerate() {
            // Acquire on success: the recorder's Release store of Free ordered its last
            // reads of the entry before our writes.
            if p.state.compare_exchange(0, u32::MAX, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                p.pid.store(pid, Ordering::Relaxed);
                p.ppid.store(ppid, Ordering::Relaxed);
                p.stream.store(stream, Ordering::Relaxed);
                p.period.store(0, Ordering::Relaxed);
                p.jitter.store(0, Ordering::Relaxed);
                p.window.store(0, Ordering::Relaxed);
                // Relaxed: a unique number is all it needs; it is published with the
                // entry by the Release store of Running below.
                p.seq.store(h.proc_claims.fetch_add(1, Ordering::Relaxed) + 1, Ordering::Relaxed);
                // Relaxed: only bounds the recorder's scans; an entry above a stale bound
                // is seen at its next scan.
                h.proc_high_water.fetch_max(i as u32 + 1, Ordering::Relaxed);
                p.set_state(ProcState::Running);
                return Some(p);
            }
        }
        h.no_proc.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Frees process entry `index` for a later agent, if it still holds claim `seq` (the
    /// recorder, once the process can no longer write: dead, or its image replaced).
    /// Returns whether it did.
    pub fn free_proc(&self, index: usize, seq: u64) -> bool {
        let Some(p) = self.procs().get(index) else { return false };
        // Only the recorder frees, and only a claim it saw published, so nothing can
        // change the entry between this check and the store.
        if p.state() == ProcState::Free || p.seq.load(Ordering::Relaxed) != seq {
            return false;
        }
        // Release: the recorder's reads of the entry come before an agent's new claim
        // (its Acquire compare-exchange) can write it.
        p.state.store(0, Ordering::Release);
        true
    }

    /// One past the highest process entry ever claimed.
    pub fn proc_high_water(&self) -> usize {
        self.header().proc_high_water.load(Ordering::Relaxed) as usize
    }

    /// Agents that found every process entry taken (they ran with the floor only).
    pub fn processes_without_entry(&self) -> u32 {
        self.header().no_proc.load(Ordering::Relaxed)
    }

    /// Wakes the recorder waiting on the pool's futex word (after `append` said so).
    /// Async-signal-safe: one system call.
    pub fn wake_recorder(&self) {
        futex_wake(self.header().pool.wake_word());
    }

    /// Waits (the recorder) until the pool's futex word differs from `seen` or `timeout`
    /// passes.
    pub fn wait_for_wake(&self, seen: u32, timeout: Duration) {
        futex_wait(self.header().pool.wake_word(), seen, timeout);
    }

    /// Bumps the futex word and wakes the recorder (another thread of the recorder, to end
    /// its wait early).
    pub fn nudge(&self) {
        self.header().pool.wake_word().fetch_add(1, Ordering::Release);
        futex_wake(self.header().pool.wake_word());
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: the mapping we made, unmapped once; nothing borrows it past `self`.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fn map(fd: libc::c_int, len: usize) -> io::Result<*mut u8> {
    // SAFETY: a shared mapping of `len` bytes of an open descriptor; we check the result.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

/// FUTEX_WAKE on a shared (not process-private) word. Async-signal-safe.
fn futex_wake(word: &AtomicU32) {
    // SAFETY: the address of a live atomic; FUTEX_WAKE reads nothing else.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            0usize,
            0usize,
            0u32,
        )
    };
}

fn futex_wait(word: &AtomicU32, seen: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: the address of a live atomic and a valid relative timeout; FUTEX_WAIT
    // returns at once if the word differs from `seen`.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            seen,
            &ts as *const libc::timespec,
            0usize,
            0u32,
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CallGraph;
    use strobe_sampler::custody::record::Rec;
    use strobe_sampler::custody::{append, Drain, SlotEvent};

    fn config() -> RecordConfig {
        RecordConfig {
            output: "/tmp/x.strobe".into(),
            events: "task-clock".into(),
            hardware: false,
            kernel: false,
            overhead_ppm: 20_000,
            follow_fork: false,
            call_graph: CallGraph::Dwarf,
            max_depth: 128,
            costs: None,
            calibrate: false,
            tail_dead: 0,
            cycle_extra: 0,
            lateness: 0,
            window_dead: 0,
            seccomp_filters: 0,
            pid_ns: 0,
        }
    }

    /// A forked child maps the arena by its /proc path, appends a record and exits; the
    /// parent (the recorder) drains it. Real memfd, real fork.
    #[test]
    fn a_child_process_attaches_by_path_and_its_records_reach_the_recorder() {
        let arena = Arena::create(ArenaSizes::for_pool(1 << 20, 4096, 1), &config()).unwrap();
        let path = arena.child_path().unwrap();
        // SAFETY: fork in a test; the child only maps, appends and _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let ok = (|| {
                let a = Arena::attach(&path).ok()?;
                let cfg = a.config().ok()?;
                let (i, _g) = a.claim_slot()?;
                let slot = &a.slots()[i as usize];
                slot.reset_custody(std::process::id(), 77, 5);
                slot.ctl.activate();
                let rec = Rec {
                    kind: 1,
                    flags: 0,
                    time: 123,
                    ip: cfg.max_depth.into(),
                    counters: &[9],
                    frames: &[1, 2],
                };
                // SAFETY: this thread owns the slot.
                unsafe { append(&a.pool(), slot, i, &rec) };
                a.set_calibration(&Calibration {
                    notes: vec!["from the child".into()],
                    ..Default::default()
                });
                a.push_note("odd");
                a.push_note("a note of even length");
                Some(())
            })();
            // SAFETY: the child ends here without running the parent's destructors.
            unsafe { libc::_exit(if ok.is_some() { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: our child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_eq!(status, 0, "the child could not attach and append");
        let mut got = Vec::new();
        let mut d = Drain::new(arena.pool().len(), arena.slots().len());
        // SAFETY: one recorder.
        unsafe {
            d.pass(
                &arena.pool(),
                arena.slots(),
                arena.high_water(),
                |_| false,
                |_, s, ev| {
                    if let SlotEvent::Record(r) = ev {
                        got.push((
                            s.tid.load(Ordering::Relaxed),
                            r.time,
                            r.ip,
                            r.counters.to_vec(),
                            r.frames.to_vec(),
                        ));
                    }
                },
            )
        };
        assert_eq!(got, [(77, 123, 128, vec![9], vec![1, 2])]);
        assert_eq!(arena.calibration().unwrap().unwrap().notes, ["from the child"]);
        assert_eq!(arena.notes(), ["odd", "a note of even length"]);
        assert_eq!(arena.attached(), 1);
    }

    #[test]
    fn a_file_that_is_not_an_arena_is_refused() {
        let dir = std::env::temp_dir().join(format!("strobe-arena-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("not-an-arena");
        std::fs::write(&f, vec![0u8; 200_000]).unwrap();
        let e = Arena::attach(&f).unwrap_err().to_string();
        assert!(e.contains("is not a strobe arena of this version (no magic)"), "{e}");
        std::fs::write(&f, b"short").unwrap();
        assert!(Arena::attach(&f).is_err());
        let e = Arena::attach(&dir.join("missing")).unwrap_err().to_string();
        assert!(e.contains("cannot map the shared buffer"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Entries freed by the recorder serve later agents under new claim numbers; a free
    /// of a claim the entry no longer holds does nothing; a full table is counted.
    #[test]
    fn process_entries_are_given_back_and_claimed_again() {
        let sizes = ArenaSizes { procs: 3, ..ArenaSizes::for_pool(1 << 16, 4096, 1) };
        let arena = Arena::create(sizes, &config()).unwrap();
        let seqs: Vec<u64> = (0..3)
            .map(|i| arena.claim_proc(100 + i, 1, 7 + i).unwrap().seq.load(Ordering::Relaxed))
            .collect();
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!(arena.proc_high_water(), 3);
        assert!(arena.claim_proc(200, 1, 20).is_none());
        assert_eq!(arena.processes_without_entry(), 1);
        assert!(!arena.free_proc(1, 1), "entry 1 holds claim 2");
        assert!(arena.free_proc(1, 2));
        assert!(!arena.free_proc(1, 2), "already free");
        let p = arena.claim_proc(300, 1, 30).unwrap();
        assert_eq!((p.pid.load(Ordering::Relaxed), p.seq.load(Ordering::Relaxed)), (300, 4));
        assert_eq!(p.state(), ProcState::Running);
        assert!(std::ptr::eq(p, &arena.procs()[1]), "the freed entry");
        assert!(!arena.free_proc(1, 2), "an old claim cannot free the new one");
    }

    #[test]
    fn the_recorder_sleeps_until_woken() {
        let arena = std::sync::Arc::new(
            Arena::create(ArenaSizes::for_pool(1 << 16, 4096, 1), &config()).unwrap(),
        );
        let seen = arena.header().pool.wake_word().load(Ordering::Acquire);
        let a = arena.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            a.nudge();
        });
        let t0 = std::time::Instant::now();
        arena.wait_for_wake(seen, Duration::from_secs(10));
        assert!(t0.elapsed() < Duration::from_secs(5), "the nudge woke the waiter");
        t.join().unwrap();
    }
}
