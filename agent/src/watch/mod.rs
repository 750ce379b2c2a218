//! `strobe watch` inside the target: hardware watchpoints armed from the agent's
//! constructor, hits caught by a synchronous SIGTRAP handler, and a writer thread that
//! streams them to `strobe watch`.
//!
//! It owns: the watch configuration (read from the environment), the `PERF_TYPE_BREAKPOINT`
//! events (one per debug-register slot), the round-robin rotation of more watchpoints than
//! slots ([`strobe_watch::Multiplexer`]), the hit ring ([`ring`]) and the output channel.
//! It must never allocate, lock or panic in the SIGTRAP handler ([`trap`]), never kill or
//! stop the target (a failure is reported on the channel and the target runs unwatched),
//! and never write to the target's own output.
//!
//! # Configuration (set by `strobe watch`)
//!
//! - `STROBE_WATCH_FD=N`: the write end of a pipe `strobe watch` reads.
//! - `STROBE_WATCH_POINTS=P;P;...`, each `P` = `KIND,ADDR,LEN,ACCESS`: `KIND` is `pie` (an
//!   address in the main executable, relocated by its load bias), `lib=DEV:INO` (an
//!   address in the loaded shared library whose file has that device and inode number, hex,
//!   relocated by its load bias) or `abs`; `ADDR` hex;
//!   `LEN` 1, 2, 4 or 8; `ACCESS` `w` or `rw`.
//! - `STROBE_WATCH_OPTS=a,b,...`: `thread` (per-thread events: each thread gets its own
//!   instead of inherited ones: opened by the thread itself before its start routine runs
//!   when it is made with `pthread_create`, else by the writer thread when it finds the
//!   thread in `/proc/self/task`), `nomux` (never rotate), `stack` (walk frame pointers per hit),
//!   `rotate_us=N` (rotation interval).
//!
//! # Arming
//!
//! The writer thread is created first, so it never inherits the breakpoints. Then one
//! event per slot is opened on the constructor's thread, process-wide (`inherit` +
//! `inherit_thread`: every thread the target creates later gets the slot's breakpoint, and
//! forked children do not) or, with `thread`, on that thread alone, every other thread
//! getting its own events: one made with `pthread_create` opens them itself before its
//! start routine runs (the agent's trampoline calls [`on_thread_start`]; see [`born`] for
//! the lock-free hand-over to the writer), one made otherwise (raw `clone`) gets them from
//! the writer within about a millisecond of appearing (the writer polls `/proc/self/task`;
//! that thread's accesses before are missed). Each thread's slots are reserved in a
//! [`strobe_watch::SlotTable`] over strobe-rcu's hash multimap keyed by thread, so
//! reserving and releasing them costs the same with 1 or 4096 threads. Each
//! event raises SIGTRAP (perf's `sigtrap`, `remove_on_exec`) carrying `sig_data` =
//! [`SIG_TAG`] << 32 | watchpoint index, which is how the handler tells our traps from
//! the target's. With more watchpoints than slots, the writer thread rotates one slot
//! every `rotate_us` with `PERF_EVENT_IOC_MODIFY_ATTRIBUTES` (applied by the kernel to
//! every inherited copy) and keeps each watchpoint's armed time.
//!
//! # The channel: one text line per record
//!
//! ```text
//! start PID WATCHPOINTS SLOTS MULTIPLEXED(0|1)
//! wp INDEX ADDR_HEX LEN ACCESS
//! mod ID BIAS_HEX PATH                    a module hit addresses are relative to
//! hit WP TID FLAGS OLD_HEX NEW_HEX MOD:VADDR_HEX [MOD:VADDR_HEX ...]   ip, then frames
//! armed WP HITS ARMED_NS ENABLED_NS TIMES_ARMED
//! lost N            hits dropped (ring full)
//! chained N         SIGTRAPs handed to the target's own handler
//! threads N         per-thread mode: threads that got their own events
//! err MESSAGE       the agent could not watch; the target runs on unwatched
//! end
//! ```
//!
//! `FLAGS` bit 0: imprecise (the target had SIGTRAP blocked; the kernel delivered the hit
//! late, so the IP is not the access); bit 1: the old value is unknown. Module 0 with
//! vaddr 0 means an address in no module.
//!
//! # Exit, exec, fork
//!
//! At `exit` an atexit handler stops the rotation, has the writer drain the ring and write
//! the per-watchpoint armed times, and waits (at most two seconds) for it. The channel is
//! close-on-exec and the events are removed on exec, so an exec'd image runs unwatched; a
//! forked child inherits no breakpoint (`inherit_thread`) and writes nothing.

mod born;
mod decode;
mod ring;
mod trap;

pub use trap::{virtual_sigaction, virtual_signal};

use std::collections::HashMap;
use std::ffi::CStr;
use std::io::Write as _;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use strobe_perf::{PerfEvent, Target};
use strobe_watch::bp::{self, Breakpoint, Mode, Scope};
use strobe_watch::mux::monotonic_ns;
use strobe_watch::{Access, HitCounters, Len, Multiplexer, Policy, RcuHashMap, SlotTable};

use ring::{Hit, Ring};

/// The high half of every `sig_data` strobe puts in its watchpoint events ("STRB").
pub const SIG_TAG: u64 = 0x5354_5242;

/// One logical watchpoint at run time.
struct Wp {
    addr: u64,
    len: u64,
    /// Write-only: the handler may read the word directly.
    write_only: bool,
    access: Access,
    /// The value the last hit left (for the next hit's old value).
    shadow: AtomicU64,
    /// Whether `shadow` holds a value read since the watchpoint was last armed.
    shadow_valid: AtomicU64,
}

impl Wp {
    fn breakpoint(&self) -> Option<Breakpoint> {
        Some(Breakpoint { addr: self.addr, len: Len::new(self.len)?, access: self.access })
    }

    /// Refreshes the shadow copy from memory (when the watchpoint is armed).
    fn refresh_shadow(&self) {
        let mut b = [0u8; 8];
        let n = (self.len as usize).min(8);
        let ok = trap::safe_read(self.addr, &mut b[..n]);
        // Release: a handler's AcqRel swap on this word sees the value with the flag.
        self.shadow.store(u64::from_le_bytes(b), Ordering::Release);
        self.shadow_valid.store(u64::from(ok), Ordering::Release);
    }
}

/// What the handler needs, built once before any event is enabled.
struct State {
    wps: Box<[Wp]>,
    hits: HitCounters,
    ring: Ring,
    stack: bool,
}

static STATE: OnceLock<State> = OnceLock::new();
/// Set by the atexit handler: the writer thread finishes.
static STOP: AtomicBool = AtomicBool::new(false);
/// Set by the writer thread when its last line is written.
static DONE: AtomicBool = AtomicBool::new(false);
/// The process that armed the watchpoints: a forked child (which has no writer thread)
/// must not wait for one at exit.
static OWNER_PID: AtomicU64 = AtomicU64::new(0);

/// The handler's view of the state. Async-signal-safe (one Acquire load).
fn state() -> Option<&'static State> {
    STATE.get()
}

/// Options from `STROBE_WATCH_OPTS`.
#[derive(Debug, Clone, Copy)]
struct Opts {
    per_thread: bool,
    no_mux: bool,
    stack: bool,
    rotate: Duration,
}

/// Whether `strobe watch` asked this process to watch (the channel fd is set and is a
/// pipe). Also resolves the C library's `sigaction` and `signal` behind this library's
/// interposers, so that a target calling them from a signal handler never reaches
/// `dlsym` there.
pub fn configured() -> bool {
    trap::resolve_next();
    channel_fd().is_some()
}

fn channel_fd() -> Option<RawFd> {
    let fd: RawFd = std::env::var("STROBE_WATCH_FD").ok()?.parse().ok()?;
    // SAFETY: fstat on an arbitrary number writes one stat or fails with EBADF.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `st` is a valid out-parameter.
    let is_pipe =
        unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_mode & libc::S_IFMT == libc::S_IFIFO;
    is_pipe.then_some(fd)
}

/// Removes strobe's variables from the environment, so that a program this one execs (or
/// spawns) does not mistake an unrelated fd with the same number for the channel.
fn forget_config() {
    for v in ["STROBE_WATCH_FD", "STROBE_WATCH_POINTS", "STROBE_WATCH_OPTS"] {
        // Edition 2021: safe. Called from the constructor, before the target's main.
        std::env::remove_var(v);
    }
}

fn opts() -> Opts {
    let mut o =
        Opts { per_thread: false, no_mux: false, stack: false, rotate: Duration::from_millis(4) };
    for w in std::env::var("STROBE_WATCH_OPTS").unwrap_or_default().split(',') {
        match w {
            "thread" => o.per_thread = true,
            "nomux" => o.no_mux = true,
            "stack" => o.stack = true,
            _ => {
                if let Some(us) = w.strip_prefix("rotate_us=").and_then(|v| v.parse().ok()) {
                    o.rotate = Duration::from_micros(us);
                }
            }
        }
    }
    o
}

/// The main executable's load bias (0 for a non-PIE executable).
fn exe_bias() -> u64 {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info; `data` is the u64 below.
        unsafe { *(data as *mut u64) = (*info).dlpi_addr };
        1 // the first object is the main program
    }
    let mut bias = 0u64;
    // SAFETY: the callback matches the expected signature and writes only `bias`.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut bias as *mut u64).cast()) };
    bias
}

/// The load bias of the loaded object whose file has this device and inode number.
fn library_bias(dev: u64, ino: u64) -> Option<u64> {
    struct Find {
        dev: u64,
        ino: u64,
        bias: Option<u64>,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info; `data` is the Find below.
        let (info, find) = unsafe { (&*info, &mut *(data as *mut Find)) };
        if info.dlpi_name.is_null() {
            return 0;
        }
        // SAFETY: a zeroed stat is a valid out-parameter; dlpi_name is a NUL-terminated
        // path (empty for the main program, which stat refuses).
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::stat(info.dlpi_name, &mut st) } == 0
            && st.st_dev == find.dev
            && st.st_ino == find.ino
        {
            find.bias = Some(info.dlpi_addr);
            return 1;
        }
        0
    }
    let mut find = Find { dev, ino, bias: None };
    // SAFETY: the callback matches the expected signature and writes only `find`.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut find as *mut Find).cast()) };
    find.bias
}

fn parse_points(bias: u64) -> Result<Vec<Wp>, String> {
    let text = std::env::var("STROBE_WATCH_POINTS").unwrap_or_default();
    let mut out = Vec::new();
    for p in text.split(';').filter(|p| !p.is_empty()) {
        let f: Vec<&str> = p.split(',').collect();
        let bad = || format!("malformed STROBE_WATCH_POINTS entry '{p}'");
        let [kind, addr, len, acc] = f.as_slice() else { return Err(bad()) };
        let addr = u64::from_str_radix(addr.trim_start_matches("0x"), 16).map_err(|_| bad())?;
        let addr = match *kind {
            "pie" => bias.wrapping_add(addr),
            "abs" => addr,
            k => {
                let id = k.strip_prefix("lib=").and_then(|id| id.split_once(':'));
                let Some((dev, ino)) = id else { return Err(bad()) };
                let dev = u64::from_str_radix(dev, 16).map_err(|_| bad())?;
                let ino = u64::from_str_radix(ino, 16).map_err(|_| bad())?;
                let Some(lib_bias) = library_bias(dev, ino) else {
                    return Err(format!(
                        "watchpoint {}: its shared library (device {dev:#x}, inode {ino}) is \
                         not loaded in the program at start",
                        out.len()
                    ));
                };
                lib_bias.wrapping_add(addr)
            }
        };
        let len: u64 = len.parse().map_err(|_| bad())?;
        Len::new(len).ok_or_else(bad)?;
        let access = match *acc {
            "w" => Access::Write,
            "rw" => Access::ReadWrite,
            _ => return Err(bad()),
        };
        out.push(Wp {
            addr,
            len,
            write_only: access == Access::Write,
            access,
            shadow: AtomicU64::new(0),
            shadow_valid: AtomicU64::new(0),
        });
    }
    if out.is_empty() {
        return Err("no watchpoints configured".into());
    }
    Ok(out)
}

/// Writes whole lines to the channel; stops quietly once `strobe watch` went away.
struct Channel {
    fd: RawFd,
    /// The pipe's identity (device, inode): a target that closes the fd and opens a file
    /// that gets the same number must never receive our lines.
    id: (u64, u64),
    buf: Vec<u8>,
    broken: bool,
}

/// `(st_dev, st_ino)` of an open fd.
fn fd_identity(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: a zeroed stat is a valid out-parameter; fstat fails cleanly on a bad fd.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

impl Channel {
    /// Writes what the pipe takes now (the fd is non-blocking, so a slow reader never
    /// stalls rotation); the rest stays buffered for the next call.
    fn flush(&mut self) {
        if !self.buf.is_empty() && fd_identity(self.fd) != Some(self.id) {
            self.broken = true;
        }
        let mut off = 0;
        while off < self.buf.len() && !self.broken {
            let rest = self.buf.get(off..).unwrap_or_default();
            // SAFETY: writes from a valid buffer to our channel fd.
            let n = unsafe { libc::write(self.fd, rest.as_ptr().cast(), rest.len()) };
            if n < 0 {
                match std::io::Error::last_os_error().kind() {
                    std::io::ErrorKind::Interrupted => {}
                    std::io::ErrorKind::WouldBlock => break,
                    // EPIPE (SIGPIPE is blocked in this thread) or anything else.
                    _ => self.broken = true,
                }
            } else {
                off += n as usize;
            }
        }
        if self.broken {
            self.buf.clear();
        } else {
            self.buf.drain(..off);
        }
    }

    /// Writes everything, waiting for the reader at most `budget`.
    fn flush_all(&mut self, budget: Duration) {
        let until = monotonic_ns() + budget.as_nanos() as u64;
        loop {
            self.flush();
            if self.buf.is_empty() || self.broken || monotonic_ns() >= until {
                return;
            }
            let mut pfd = libc::pollfd { fd: self.fd, events: libc::POLLOUT, revents: 0 };
            // SAFETY: one valid pollfd, for at most 10 ms.
            unsafe { libc::poll(&mut pfd, 1, 10) };
        }
    }
}

/// Starts watching: called from the agent's constructor when [`configured`].
pub fn start() {
    let Some(fd) = channel_fd() else { return };
    // SAFETY: marks our own fd close-on-exec, so an exec'd image does not inherit it, and
    // non-blocking (strobe holds only the read end, so no one else shares the flag).
    unsafe {
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl >= 0 {
            libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
    }
    let Some(id) = fd_identity(fd) else { return };
    let mut ch = Channel { fd, id, buf: Vec::with_capacity(64 * 1024), broken: false };
    let opts = opts();
    let wps = parse_points(exe_bias());
    forget_config();
    let wps = match wps {
        Ok(w) => w,
        Err(e) => return fail(&mut ch, &e),
    };
    let n = wps.len();
    let st = State {
        hits: HitCounters::new(n),
        wps: wps.into(),
        ring: Ring::new(1 << 14),
        stack: opts.stack,
    };
    if STATE.set(st).is_err() {
        return;
    }
    let Some(st) = state() else { return };
    if let Err(e) = trap::install() {
        return fail(&mut ch, &e);
    }
    let (tx, rx) = std::sync::mpsc::channel::<Armed>();
    let writer = std::thread::Builder::new()
        .name("strobe-watch".into())
        .spawn(move || writer_thread(ch, rx, opts));
    if writer.is_err() {
        return;
    }
    // Armed on this thread, after the writer exists (so it inherits nothing).
    let armed = arm(st, opts);
    let _ = tx.send(armed);
    OWNER_PID.store(u64::from(std::process::id()), Ordering::Relaxed);
    // SAFETY: registers a plain extern "C" fn to run at exit.
    unsafe { libc::atexit(at_exit) };
}

/// What arming produced, handed to the writer thread.
struct Armed {
    /// The constructor thread's events (process-wide: the parents every thread inherits).
    events: Vec<PerfEvent>,
    mux: Option<Multiplexer>,
    scope: Scope,
    error: Option<String>,
    /// Per-thread slot accounting, keyed by thread in strobe-rcu's hash multimap.
    table: SlotTable<RcuHashMap>,
    reservation: Option<Slots>,
    /// The thread that ran the constructor.
    own_tid: i32,
    /// Per-thread mode: the other threads' own events, opened as they are found.
    others: HashMap<i32, ThreadEvents>,
    /// Per-thread mode: threads that got events, over the run.
    threads_armed: u64,
}

type Slots = strobe_watch::ReservationOf<RcuHashMap>;

/// One thread's events in per-thread mode.
struct ThreadEvents {
    events: Vec<ThreadEvent>,
    reservation: Slots,
}

/// One per-thread event: opened by the writer, or by the thread itself at birth (a raw fd
/// from the `perf_event_open` system call; see [`born`]).
enum ThreadEvent {
    Opened(PerfEvent),
    Born(OwnedFd),
}

impl ThreadEvent {
    fn fd(&self) -> RawFd {
        match self {
            ThreadEvent::Opened(e) => e.raw_fd(),
            ThreadEvent::Born(f) => f.as_raw_fd(),
        }
    }

    fn disable(&self) {
        // SAFETY: DISABLE takes an integer flag argument; the fd is a live perf event we own.
        unsafe { libc::ioctl(self.fd(), strobe_perf::sys::ioctl::DISABLE, 0) };
    }
}

thread_local! {
    /// Set in the writer thread: threads it creates (strobe-rcu's reclaimer) are strobe's
    /// own and never arm themselves. Const-initialised, no destructor: reading it allocates
    /// nothing.
    static IN_WRITER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Called by the agent's `pthread_create` interposer before it creates a thread: whether
/// the new thread must arm itself ([`on_thread_start`] with `true`), in which case it is
/// counted until it has. Runs on the target's thread: no lock, no allocation, no panic.
pub fn thread_coming() -> bool {
    let coming = born::arming() > 0
        && !IN_WRITER.with(std::cell::Cell::get)
        // Relaxed: written once by the owner's constructor; a forked child differs.
        && OWNER_PID.load(Ordering::Relaxed) == u64::from(std::process::id());
    if coming {
        born::coming();
    }
    coming
}

/// Called by the `pthread_create` interposer when the thread [`thread_coming`] counted was
/// not created after all.
pub fn thread_not_coming(counted: bool) {
    if counted {
        born::done();
    }
}

/// Called by the agent's trampoline in a new thread before its start routine runs, with
/// what [`thread_coming`] said: in per-thread mode the thread opens its own watchpoint
/// events (aimed at the watchpoints armed now), so even its first instruction is watched,
/// and hands them to the writer. Runs on the target's thread: no lock, no allocation, no
/// panic, errno preserved; a failure leaves the thread to the writer's polling.
pub fn on_thread_start(counted: bool) {
    if !counted {
        return;
    }
    // SAFETY: __errno_location returns this thread's errno, valid for the thread's life.
    let errno = unsafe { *libc::__errno_location() };
    arm_self();
    born::done();
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

fn arm_self() {
    let Some(st) = state() else { return };
    let slots = born::arming();
    if slots == 0 {
        return;
    }
    let Some(claim) = born::claim() else { return };
    for slot in 0..slots {
        let wp = born::aim(slot);
        let Some(bpt) = st.wps.get(wp).and_then(Wp::breakpoint) else { break };
        let mut a = bp::attr(bpt, Mode::Trap { sig_data: sig_data(wp) }, Scope::Thread);
        // Enabled from the start: one system call per slot.
        a.set_disabled(0);
        // SAFETY: `a` is a valid, initialised attr with its size set; pid 0 / cpu -1 is the
        // calling thread on any CPU; no group.
        let fd = unsafe {
            strobe_perf::sys::perf_event_open(
                &mut a,
                0,
                -1,
                -1,
                strobe_perf::sys::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
            )
        };
        if fd < 0 {
            break;
        }
        claim.put(slot, fd, wp);
    }
    claim.publish(strobe_perf::sys::gettid());
}

fn sig_data(wp: usize) -> u64 {
    SIG_TAG << 32 | wp as u64
}

fn arm(st: &State, opts: Opts) -> Armed {
    let scope = if opts.per_thread { Scope::Thread } else { Scope::Process };
    let n = st.wps.len();
    let table: SlotTable<RcuHashMap> = SlotTable::default();
    let mut armed = Armed {
        events: Vec::new(),
        mux: None,
        scope,
        error: None,
        table,
        reservation: None,
        own_tid: strobe_perf::sys::gettid(),
        others: HashMap::new(),
        threads_armed: 1,
    };
    let want = n.min(strobe_watch::slots::DEBUG_REGISTERS as usize);
    // Open one event per slot, aimed at the first watchpoints; stop at the first slot the
    // kernel refuses (ENOSPC: another user holds the thread's debug registers).
    for slot in 0..want {
        let Some(w) = st.wps.get(slot) else { break };
        let Some(bpt) = w.breakpoint() else { break };
        match bp::open(
            bpt,
            Mode::Trap { sig_data: sig_data(slot) },
            scope,
            Target::CALLING_THREAD,
            "watchpoint",
        ) {
            Ok(ev) => armed.events.push(ev),
            Err(e) => {
                if armed.events.is_empty() {
                    armed.error = Some(e.to_string());
                    return armed;
                }
                break;
            }
        }
    }
    let policy = if opts.no_mux { Policy::NoMultiplex } else { Policy::Multiplex };
    let mut mux = match Multiplexer::new(n, armed.events.len() as u32, policy) {
        Ok(m) => m,
        Err(e) => {
            armed.error = Some(e.to_string());
            armed.events.clear();
            return armed;
        }
    };
    let events = &armed.events;
    let r = mux.start(monotonic_ns(), |c| {
        let (Some(ev), Some(wp)) = (events.get(c.slot as usize), c.arm) else { return Ok(()) };
        let Some(w) = st.wps.get(wp) else { return Ok(()) };
        w.refresh_shadow();
        ev.enable()
    });
    if let Err(e) = r {
        armed.error = Some(format!("cannot enable a watchpoint: {e}"));
    }
    if opts.per_thread {
        for slot in 0..mux.slots() {
            born::set_aim(slot, mux.armed_in(slot).unwrap_or(0));
        }
        // After the aims: from here on, threads made with pthread_create arm themselves.
        born::set_arming(mux.slots());
    }
    armed.mux = Some(mux);
    armed
}

fn fail(ch: &mut Channel, msg: &str) {
    let _ = writeln!(ch.buf, "err {}", msg.replace('\n', " "));
    let _ = writeln!(ch.buf, "end");
    ch.flush_all(Duration::from_secs(1));
}

extern "C" fn at_exit() {
    // Relaxed: written once before atexit registration, in this same thread of the owner.
    if OWNER_PID.load(Ordering::Relaxed) != u64::from(std::process::id()) {
        return;
    }
    STOP.store(true, Ordering::Release);
    // Wait for the writer's last line, at most 2 s: exit must never hang on strobe.
    for _ in 0..2000 {
        // Acquire: pairs with the writer's Release store of DONE.
        if DONE.load(Ordering::Acquire) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Blocks every signal in the calling thread: the target's signals go to its threads,
/// and a write to a closed channel returns EPIPE instead of killing the process.
fn block_all_signals() {
    // SAFETY: a filled sigset and pthread_sigmask on the calling thread.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

/// `dladdr1` flag: return the `link_map` (glibc `<dlfcn.h>`; not in the libc crate).
const RTLD_DL_LINKMAP: libc::c_int = 2;

/// Bytes of written-out lines the writer keeps while strobe reads slower than hits arrive.
const CHANNEL_BACKLOG: usize = 4 << 20;

/// Modules seen in hit addresses, numbered from 1.
#[derive(Default)]
struct Modules {
    by_base: HashMap<u64, u32>,
    by_ip: HashMap<u64, (u32, u64)>,
}

impl Modules {
    /// `(module id, address relative to the module's bias)` for `ip`, announcing new
    /// modules on the channel.
    fn locate(&mut self, ip: u64, out: &mut Vec<u8>) -> (u32, u64) {
        if let Some(&(id, bias)) = self.by_ip.get(&ip) {
            return (id, ip.wrapping_sub(bias));
        }
        // SAFETY: dladdr1 fills `info` and the link_map pointer for an address; both are
        // valid out-parameters. (Not in a signal handler: this is the writer thread.)
        let (bias, name) = unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            let mut lm: *mut libc::c_void = std::ptr::null_mut();
            if libc::dladdr1(ip as *const libc::c_void, &mut info, &mut lm, RTLD_DL_LINKMAP) == 0
                || lm.is_null()
            {
                return (0, 0);
            }
            // struct link_map { ElfW(Addr) l_addr; char *l_name; ... }
            let l_addr = *(lm as *const u64);
            let l_name = *(lm as *const *const libc::c_char).add(1);
            let name = if l_name.is_null() || *l_name == 0 {
                std::fs::read_link("/proc/self/exe")
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default()
            } else {
                CStr::from_ptr(l_name).to_string_lossy().into_owned()
            };
            (l_addr, name)
        };
        let next = self.by_base.len() as u32 + 1;
        let id = *self.by_base.entry(bias).or_insert_with(|| {
            let _ = writeln!(out, "mod {next} {bias:x} {name}");
            next
        });
        self.by_ip.insert(ip, (id, bias));
        (id, ip.wrapping_sub(bias))
    }
}

fn write_hit(h: &Hit, mods: &mut Modules, ch: &mut Channel) {
    let mut line = Vec::with_capacity(128);
    let (m, v) = mods.locate(h.ip, &mut ch.buf);
    let _ = write!(line, "hit {} {} {} {:x} {:x} {m}:{v:x}", h.wp, h.tid, h.flags, h.old, h.new);
    for &f in h.frames.iter().take(h.nframes as usize) {
        let (m, v) = mods.locate(f, &mut ch.buf);
        let _ = write!(line, " {m}:{v:x}");
    }
    line.push(b'\n');
    ch.buf.extend_from_slice(&line);
}

fn writer_thread(mut ch: Channel, rx: std::sync::mpsc::Receiver<Armed>, opts: Opts) {
    block_all_signals();
    IN_WRITER.with(|w| w.set(true));
    let Some(st) = state() else { return };
    let Ok(mut armed) = rx.recv() else { return };
    // The constructor thread's slots are reserved here, not there: only this thread uses
    // the table, and so strobe-rcu. A target's thread registered with strobe-rcu would
    // start its reclaimer from its TLS destructors (main's run at exit), and that thread
    // would then arm itself as if it were the target's.
    if !armed.events.is_empty() {
        if let Err(e) = armed
            .table
            .reserve(armed.own_tid, armed.events.len() as u32)
            .map(|r| armed.reservation = Some(r))
        {
            for ev in &armed.events {
                let _ = ev.disable();
            }
            armed.events.clear();
            armed.error = Some(e.to_string());
        }
    }
    if let Some(e) = &armed.error {
        if armed.events.is_empty() {
            fail(&mut ch, e);
            DONE.store(true, Ordering::Release);
            return;
        }
    }
    let multiplexed = armed.mux.as_ref().is_some_and(Multiplexer::is_multiplexed);
    let _ = writeln!(
        ch.buf,
        "start {} {} {} {}",
        std::process::id(),
        st.wps.len(),
        armed.events.len(),
        u8::from(multiplexed)
    );
    for (i, w) in st.wps.iter().enumerate() {
        let _ = writeln!(ch.buf, "wp {i} {:x} {} {}", w.addr, w.len, w.access.as_str());
    }
    if let Some(e) = &armed.error {
        let _ = writeln!(ch.buf, "err {e}");
    }
    ch.flush();
    let mut mods = Modules::default();
    let mut next_rotate = monotonic_ns() + opts.rotate.as_nanos() as u64;
    let mut idle = 0u32;
    let me = strobe_perf::sys::gettid();
    loop {
        // Acquire: pairs with at_exit's Release.
        let stopping = STOP.load(Ordering::Acquire);
        if stopping {
            // Threads made from now on run unwatched; ones arming themselves now are
            // adopted (and disabled) below.
            born::set_arming(0);
            if opts.per_thread {
                adopt_born(st, &mut armed, &mut Default::default());
            }
            for ev in &armed.events {
                let _ = ev.disable();
            }
            for ev in armed.others.values().flat_map(|t| &t.events) {
                ev.disable();
            }
        } else if opts.per_thread {
            follow_threads(st, &mut armed, me);
        }
        let mut drained = false;
        // While strobe lags, hits wait in the ring (and past it are counted lost) rather
        // than in an ever-growing buffer; at stop everything left is written.
        while ch.buf.len() < CHANNEL_BACKLOG || stopping {
            // SAFETY: this writer thread is the ring's only consumer.
            let Some(h) = (unsafe { st.ring.pop() }) else { break };
            drained = true;
            write_hit(&h, &mut mods, &mut ch);
            if ch.buf.len() > 48 * 1024 {
                ch.flush();
            }
        }
        let now = monotonic_ns();
        if !stopping && now >= next_rotate {
            next_rotate = now + opts.rotate.as_nanos() as u64;
            rotate(st, &mut armed);
        }
        ch.flush();
        if stopping {
            break;
        }
        // Poll every millisecond while hits arrive, backing off to 16 ms when idle (but
        // never past the next rotation), so an idle target is woken rarely.
        // Per-thread mode looks for new threads every millisecond.
        idle = if drained || opts.per_thread { 0 } else { (idle + 1).min(4) };
        let mut nap = Duration::from_millis(1 << idle);
        if multiplexed {
            let to_rotation = next_rotate.saturating_sub(monotonic_ns());
            nap = nap.min(Duration::from_nanos(to_rotation.max(100_000)));
        }
        std::thread::sleep(nap);
    }
    let now = monotonic_ns();
    if let Some(mux) = armed.mux.as_mut() {
        let _ = mux.stop(now, |_| Ok::<(), ()>(()));
        for i in 0..st.wps.len() {
            if let Some(s) = mux.stats(i, now, &st.hits) {
                let _ = writeln!(
                    ch.buf,
                    "armed {i} {} {} {} {}",
                    s.hits, s.armed_ns, s.enabled_ns, s.times_armed
                );
            }
        }
    }
    if let Some(r) = armed.reservation.take() {
        armed.table.release(r);
    }
    for (_, t) in armed.others.drain() {
        armed.table.release(t.reservation);
    }
    if opts.per_thread {
        let _ = writeln!(ch.buf, "threads {}", armed.threads_armed);
    }
    let _ = writeln!(ch.buf, "lost {}", st.ring.lost());
    let _ = writeln!(ch.buf, "chained {}", trap::CHAINED.load(Ordering::Relaxed));
    let _ = writeln!(ch.buf, "end");
    // Within at_exit's two-second wait for us.
    ch.flush_all(Duration::from_millis(1500));
    // Release: at_exit may return once everything above is written.
    DONE.store(true, Ordering::Release);
}

fn rotate(st: &State, armed: &mut Armed) {
    let Armed { events, mux, scope, others, .. } = armed;
    let scope = *scope;
    let Some(mux) = mux.as_mut() else { return };
    let _: std::io::Result<bool> = mux.rotate(monotonic_ns(), |c| {
        let Some(wp) = c.arm else { return Ok(()) };
        let Some(w) = st.wps.get(wp) else { return Ok(()) };
        let Some(bpt) = w.breakpoint() else { return Ok(()) };
        w.refresh_shadow();
        let mode = Mode::Trap { sig_data: sig_data(wp) };
        // The constructor thread's event decides; other threads follow (one that has just
        // exited may refuse, which changes nothing for the rest).
        if let Some(ev) = events.get(c.slot as usize) {
            bp::retarget(ev, bpt, mode, scope)?;
        }
        // Threads arming themselves from now on aim at `wp`; one that read the old aim is
        // re-targeted when adopted.
        born::set_aim(c.slot, wp);
        for t in others.values() {
            if let Some(ev) = t.events.get(c.slot as usize) {
                let _ = bp::retarget_fd(ev.fd(), bpt, mode, scope);
            }
        }
        Ok(())
    });
}

/// Per-thread mode: adopts the events of threads that armed themselves at birth
/// ([`born`]), gives every other thread that appeared in `/proc/self/task` its own events
/// (aimed at the watchpoints armed now), reserving each thread's slots in the table, and
/// releases the slots of threads that are gone. A thread made by raw `clone` is found
/// within about a millisecond of its start; its accesses before that are not seen.
fn follow_threads(st: &State, armed: &mut Armed, me: i32) {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return };
    let listed: std::collections::HashSet<i32> =
        dir.flatten().filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok())).collect();
    // After listing, before adopting: see `born` for why this order means a thread that
    // arms itself is never armed here too, and never missed.
    let pending = born::pending();
    let mut adopted = std::collections::HashSet::new();
    adopt_born(st, armed, &mut adopted);
    for &tid in &listed {
        if pending > 0 {
            // A listed thread may still be arming itself: leave unknown ones to the next pass.
            break;
        }
        if tid == me || tid == armed.own_tid || armed.others.contains_key(&tid) {
            continue;
        }
        // strobe's own helper threads (this writer, strobe-rcu's reclaimer) never touch
        // the target's memory.
        let comm = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"));
        if comm.is_ok_and(|c| c.starts_with("strobe-")) {
            continue;
        }
        let Some(mux) = armed.mux.as_ref() else { return };
        let Ok(reservation) = armed.table.reserve(tid, mux.slots()) else { continue };
        let mut events = Vec::new();
        for slot in 0..mux.slots() {
            let wp = mux.armed_in(slot).unwrap_or(0);
            let Some(bpt) = st.wps.get(wp).and_then(Wp::breakpoint) else { break };
            let mode = Mode::Trap { sig_data: sig_data(wp) };
            match bp::open(bpt, mode, Scope::Thread, Target::thread(tid), "watchpoint") {
                Ok(ev) if ev.enable().is_ok() => events.push(ThreadEvent::Opened(ev)),
                _ => break,
            }
        }
        if events.len() == mux.slots() as usize {
            armed.others.insert(tid, ThreadEvents { events, reservation });
            armed.threads_armed += 1;
        } else {
            // The thread exited meanwhile (or refused): nothing to keep.
            armed.table.release(reservation);
            armed.table.forget(tid);
        }
    }
    // A thread adopted in this pass may have started after the listing.
    let gone: Vec<i32> = armed
        .others
        .keys()
        .filter(|t| !listed.contains(t) && !adopted.contains(t))
        .copied()
        .collect();
    for t in gone {
        if let Some(te) = armed.others.remove(&t) {
            armed.table.release(te.reservation);
            // The thread exited: drop its entry, so the table holds live threads only.
            armed.table.forget(t);
        }
    }
}

/// Takes the events of threads that armed themselves ([`born`]): reserves their slots,
/// re-targets a slot whose watchpoint was rotated since the thread read it, and keeps
/// them with the others. A thread that could not open every slot gets its events closed
/// and is armed by [`follow_threads`] instead.
fn adopt_born(st: &State, armed: &mut Armed, adopted: &mut std::collections::HashSet<i32>) {
    let Armed { mux, others, table, threads_armed, .. } = armed;
    let Some(mux) = mux.as_ref() else { return };
    born::adopt(|a| {
        let events: Vec<(ThreadEvent, usize)> = a
            .fds
            .iter()
            .take(a.opened)
            // SAFETY: the thread opened this fd and handed it over through the entry,
            // which the writer alone takes: we are its only owner.
            .map(|&(fd, wp)| (ThreadEvent::Born(unsafe { OwnedFd::from_raw_fd(fd) }), wp))
            .collect();
        if events.len() != mux.slots() as usize {
            return; // dropping closes the fds
        }
        // A thread arming itself is never armed by the writer, so a known tid is an
        // exited thread's, reused: its events are dead.
        if let Some(old) = others.remove(&a.tid) {
            table.release(old.reservation);
            table.forget(a.tid);
        }
        let Ok(reservation) = table.reserve(a.tid, mux.slots()) else { return };
        for (slot, (ev, wp)) in events.iter().enumerate() {
            let now = mux.armed_in(slot as u32).unwrap_or(0);
            let Some(bpt) = st.wps.get(now).and_then(Wp::breakpoint) else { continue };
            if *wp != now {
                let mode = Mode::Trap { sig_data: sig_data(now) };
                let _ = bp::retarget_fd(ev.fd(), bpt, mode, Scope::Thread);
            }
        }
        let events = events.into_iter().map(|(ev, _)| ev).collect();
        others.insert(a.tid, ThreadEvents { events, reservation });
        *threads_armed += 1;
        adopted.insert(a.tid);
    });
}
