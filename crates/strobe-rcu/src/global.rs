//! The process-wide domain, the per-thread registration kept in TLS, and the
//! background reclaimer thread.
//!
//! # Thread-local layout
//!
//! The read path touches one `const`-initialised, destructor-free TLS cell,
//! `READER`, so that it never registers a TLS destructor, never allocates and
//! is safe in a signal handler once the thread is registered. The owning
//! [`LocalHandle`] lives in a second TLS slot, `OWNER`, whose destructor runs
//! at thread exit: it marks the cells dead and drops the handle, which hands
//! the thread's garbage to the orphan queue and releases its records for
//! reuse. Code that runs after that (other TLS destructors) still gets correct
//! read sections: each outermost one borrows a free record for its duration.
//!
//! `READER` is never null: before registration it points at the static
//! record `UNREGISTERED`, after the thread's TLS teardown at `EXITED`. Both
//! show a `ctr` whose low field is not zero (`reader.rs`) and are never
//! written, so `read_lock` needs no registration check of its own: the
//! entry's one test ("low field zero") sends an unregistered or exited
//! thread to the same cold path as a nested or heavy entry, which tells them
//! apart by address.
//!
//! # Background reclaimer
//!
//! Started on the first request, it runs the grace periods that sealed batches
//! ask for (so the retiring threads never pay the membarrier), and every
//! [`SCAN_PERIOD`] frees the garbage of idle threads and exited ones. It only
//! helps: retiring threads enforce the ceiling themselves, so nothing depends
//! on it being scheduled (for example in a child after `fork`).
//!
//! Must never: allocate, lock or register anything on the `read_lock` path of a
//! registered thread.

use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::domain::{Domain, GlobalHooks, LocalHandle};
use crate::error::Error;
use crate::primitive::{lock, Ordering};
use crate::reader::{ReadGuard, Reader, NEST_MASK};
use crate::reclaim::{drop_box, DropFn, RcuHead};
use crate::stats::Stats;

/// What the global domain has that others lack, handed to it at construction.
static HOOKS: GlobalHooks =
    GlobalHooks { request_gp, kick_reclaimer, retire: retire_tls, read_depth };

static GLOBAL: Domain = Domain::global_init(&HOOKS);

/// The process-wide domain behind the free functions.
pub fn global() -> &'static Domain {
    &GLOBAL
}

/// Marks the handle cell of a thread whose TLS destructors already ran.
const DEAD: usize = 1;

/// A [`Reader::sentinel`] in a static: `READER`'s value on threads that have
/// no record (module note).
struct Sentinel(Reader);

// SAFETY: a sentinel is only ever read (its atomics' loads); no code path
// writes it or hands it to a domain (`live` guards every use that could).
unsafe impl Sync for Sentinel {}

/// `READER` of a thread that has not registered.
static UNREGISTERED: Sentinel = Sentinel(Reader::sentinel());
/// `READER` of a thread whose TLS destructors already ran.
static EXITED: Sentinel = Sentinel(Reader::sentinel());

#[inline(always)]
fn unregistered() -> *const Reader {
    &UNREGISTERED.0
}

#[inline(always)]
fn exited() -> *const Reader {
    &EXITED.0
}

/// True when `r` (a value of `READER`) is a record claimed by this thread
/// rather than a sentinel.
#[inline(always)]
fn live(r: *const Reader) -> bool {
    !ptr::eq(r, unregistered()) && !ptr::eq(r, exited())
}

struct Owner(Cell<*mut LocalHandle>);

impl Drop for Owner {
    fn drop(&mut self) {
        let h = self.0.replace(ptr::null_mut());
        READER.set(exited());
        HANDLE.set(DEAD as *const LocalHandle);
        if !h.is_null() {
            // SAFETY: `h` came from Box::into_raw in `register_current_thread`
            // and is dropped once; the cells no longer point at it.
            drop(unsafe { Box::from_raw(h) });
        }
    }
}

thread_local! {
    static READER: Cell<*const Reader> = const { Cell::new(&UNREGISTERED.0 as *const Reader) };
    static HANDLE: Cell<*const LocalHandle> = const { Cell::new(ptr::null()) };
    static OWNER: Owner = const { Owner(Cell::new(ptr::null_mut())) };
}

/// Registers the calling thread with the global domain (claims its reader
/// record and reclamation bag, and installs the thread-exit hook).
///
/// Call it in normal context when a thread starts if that thread may enter
/// read sections from a signal handler: afterwards [`read_lock`] and dropping
/// its guard on this thread neither allocate nor lock. Idempotent and cheap
/// after the first call. Not async-signal-safe (it may allocate).
pub fn register_current_thread() {
    if !ptr::eq(READER.get(), unregistered()) {
        return; // registered, or past thread exit
    }
    let h = Box::into_raw(Box::new(GLOBAL.register()));
    // Install the owner first: registering its destructor may allocate.
    let installed = OWNER.try_with(|o| o.0.set(h)).is_ok();
    if !installed {
        // The thread is already tearing down its TLS.
        // SAFETY: `h` is ours and was never published.
        drop(unsafe { Box::from_raw(h) });
        READER.set(exited());
        HANDLE.set(DEAD as *const LocalHandle);
        return;
    }
    HANDLE.set(h);
    // SAFETY: `h` is live until the owner's destructor.
    READER.set(unsafe { (*h).reader });
}

/// Enters a read-side critical section of the global domain.
///
/// Costs a load and a store on this thread's own cache line and a compiler
/// fence (plus a `SeqCst` fence when the kernel lacks membarrier). Nestable.
///
/// **Async-signal-safe** on a thread that called [`register_current_thread`]
/// (or already used `read_lock`/`retire`) in normal context: then it neither
/// allocates nor locks, and a handler's section nested in an interrupted one
/// is correct. The first call on an unregistered thread registers it, which
/// may allocate.
#[inline]
pub fn read_lock() -> ReadGuard<'static> {
    let r = READER.get();
    // SAFETY: `READER` always points at a record: one of the global domain
    // claimed by this thread until its TLS teardown, or a static sentinel.
    // Relaxed: as in `Reader::enter_in`.
    let v = unsafe { (*r).ctr.load(Ordering::Relaxed) };
    if v & NEST_MASK == 0 {
        // SAFETY: a sentinel's low field is never zero, so `r` is this
        // thread's own record, outside sections, under membarrier.
        unsafe { (*r).enter_light(GLOBAL.epoch_word()) };
        return ReadGuard { reader: r, on_exit: None, _not_send: PhantomData };
    }
    read_lock_slow(r, v)
}

/// [`read_lock`] on a registered thread, or `None` (and no section) on a
/// thread that has not registered yet or whose TLS is gone (even inside a
/// section that [`read_lock`] entered after the TLS teardown): it never
/// registers, allocates or locks, so it is async-signal-safe on any thread.
/// Hot paths that can send the rare unregistered caller elsewhere use it to
/// keep their common path free of the registration branch's merge (the guard
/// it returns is known not to be a borrowed record, so dropping it is the
/// exit store alone).
#[inline(always)]
pub fn try_read_lock() -> Option<ReadGuard<'static>> {
    let r = READER.get();
    // Relaxed: as in `read_lock`.
    // SAFETY: as in `read_lock` (`READER` always points at a record).
    let v = unsafe { (*r).ctr.load(Ordering::Relaxed) };
    if v & NEST_MASK == 0 {
        // SAFETY: as in `read_lock`.
        unsafe { (*r).enter_light(GLOBAL.epoch_word()) };
    } else if !try_enter_slow(r, v) {
        return None;
    }
    // Built here for both paths, so that the compiler sees `on_exit` empty
    // and the guard's drop is the exit store alone.
    Some(ReadGuard { reader: r, on_exit: None, _not_send: PhantomData })
}

/// The common entry alone: an outermost section on this thread's own
/// record, under membarrier. Returns `None`, having entered nothing, in
/// every other case (already inside a section, a heavy record, a thread
/// that has not registered or whose TLS is gone); the caller then takes
/// [`read_lock`] or [`try_read_lock`], whose cold paths handle them.
/// Async-signal-safe on any thread, like [`try_read_lock`].
///
/// For hot paths that call out inside their section (a probe calling its
/// consumer): with no slow entry called from the middle of it, the `None`
/// arm can be a tail call, and the caller keeps nothing but the record's
/// address live across its section (the guard's exit is then one
/// decrement through that register).
#[inline(always)]
pub fn try_read_lock_outermost() -> Option<ReadGuard<'static>> {
    let r = READER.get();
    // Relaxed: as in `read_lock`.
    // SAFETY: as in `read_lock` (`READER` always points at a record).
    let v = unsafe { (*r).ctr.load(Ordering::Relaxed) };
    if v & NEST_MASK != 0 {
        return None;
    }
    // SAFETY: as in `read_lock`: a sentinel's low field is never zero.
    unsafe { (*r).enter_light(GLOBAL.epoch_word()) };
    // Built here, so the compiler sees `on_exit` empty and the guard's
    // drop is the exit store alone.
    Some(ReadGuard { reader: r, on_exit: None, _not_send: PhantomData })
}

/// [`try_read_lock`] off the common path: a nested or heavy entry (true), or
/// false (and no section) for a thread without a record.
#[cold]
#[inline(never)]
fn try_enter_slow(r: *const Reader, v: usize) -> bool {
    if !live(r) || borrowed() {
        // No record, or one borrowed past thread exit: the guard built by
        // the caller could not give it back (see `read_lock_slow`).
        return false;
    }
    // SAFETY: this thread's own record; `v` is its `ctr` as just read.
    unsafe { (*r).enter_slow(v, GLOBAL.epoch_word()) };
    true
}

/// [`read_lock`] off the common path: a nested or heavy entry, the first
/// section of an unregistered thread, or one after the thread's TLS teardown.
#[cold]
#[inline(never)]
fn read_lock_slow(r: *const Reader, v: usize) -> ReadGuard<'static> {
    if live(r) {
        // SAFETY: this thread's own record; `v` is its `ctr` as just read.
        unsafe { (*r).enter_slow(v, GLOBAL.epoch_word()) };
        // A section nested in one that borrowed the record past thread exit
        // is transient too: whichever guard drops last (guards may be
        // dropped in any order) gives the record back.
        let on_exit = if borrowed() { Some(release_transient as fn(*const Reader)) } else { None };
        return ReadGuard { reader: r, on_exit, _not_send: PhantomData };
    }
    if ptr::eq(r, unregistered()) {
        register_current_thread();
        let r = READER.get();
        if live(r) {
            // SAFETY: the record just claimed for this thread.
            unsafe { (*r).enter() };
            return ReadGuard { reader: r, on_exit: None, _not_send: PhantomData };
        }
    }
    // Past thread exit: borrow a record for this outermost section.
    let r = GLOBAL.acquire_reader();
    // SAFETY: just claimed.
    unsafe { (*r).enter() };
    READER.set(r);
    ReadGuard { reader: r, on_exit: Some(release_transient), _not_send: PhantomData }
}

/// True when `READER` holds a record borrowed past thread exit (the handle
/// is gone, so a live `READER` can only be a borrowed record).
fn borrowed() -> bool {
    HANDLE.get() as usize == DEAD
}

/// Gives back the record a post-exit section borrowed (see `read_lock_slow`).
/// Cold: only sections run after thread exit get here, and the guard's drop
/// then falls through on the common path.
#[cold]
#[inline(never)]
fn release_transient(r: *const Reader) {
    // SAFETY: the record is claimed by this thread.
    if unsafe { (*r).depth() } == 0 {
        READER.set(exited());
        GLOBAL.release_reader(r);
    }
}

/// Nesting depth of the calling thread's read sections in the global domain.
/// Async-signal-safe.
pub fn read_depth() -> usize {
    let r = READER.get();
    if live(r) {
        // SAFETY: a record claimed by this thread.
        unsafe { (*r).depth() }
    } else {
        0
    }
}

fn handle() -> Option<&'static LocalHandle> {
    let mut h = HANDLE.get();
    if h.is_null() {
        register_current_thread();
        h = HANDLE.get();
    }
    if h as usize > DEAD {
        // SAFETY: live until this thread's TLS teardown, which cannot run
        // while we are inside a call on this thread.
        Some(unsafe { &*h })
    } else {
        None
    }
}

fn outside_section(what: &'static str) -> Result<(), Error> {
    match read_depth() {
        0 => Ok(()),
        depth => Err(Error::InReadSection { what, depth }),
    }
}

/// Waits for a grace period: returns once every read section that began before
/// the call has ended. Concurrent callers share grace periods.
///
/// Not async-signal-safe. Panics if called inside a read section (see
/// [`try_synchronize`] for the non-panicking form).
pub fn synchronize() {
    if let Err(e) = try_synchronize() {
        panic!("{e}");
    }
}

/// [`synchronize`], or [`Error::InReadSection`] instead of a deadlock when the
/// calling thread is inside a read section.
pub fn try_synchronize() -> Result<(), Error> {
    outside_section("synchronize")?;
    GLOBAL.wait_for_as(GLOBAL.snapshot(), my_reader());
    Ok(())
}

/// The calling thread's live reader record, or null.
fn my_reader() -> *const Reader {
    let r = READER.get();
    if live(r) {
        r
    } else {
        ptr::null()
    }
}

/// Waits for a grace period without interrupting any reader's CPU: for
/// writers that can wait longer (detaching a probe under churn) but must not
/// disturb the readers. Returns once every read section that began before the
/// call has ended, like [`synchronize`]; it waits (sleeping) for each reader
/// thread to pass a section boundary, which busy readers do within
/// microseconds, and for threads that stay silent past
/// [`LAZY_PATIENCE`](crate::LAZY_PATIENCE) uses the kernel's non-expedited,
/// IPI-free `MEMBARRIER_CMD_GLOBAL` (milliseconds). See
/// [`Domain::synchronize_lazy`].
///
/// Not async-signal-safe. Panics inside a read section (see
/// [`try_synchronize_lazy`]).
pub fn synchronize_lazy() {
    if let Err(e) = try_synchronize_lazy() {
        panic!("{e}");
    }
}

/// [`synchronize_lazy`], or [`Error::InReadSection`] instead of a deadlock
/// when the calling thread is inside a read section.
pub fn try_synchronize_lazy() -> Result<(), Error> {
    outside_section("synchronize_lazy")?;
    GLOBAL.synchronize_lazy_as(my_reader());
    Ok(())
}

/// Returns once every object retired before the call, by any thread, has been
/// freed (tests use it to count leaks; shutdown code to flush). Costs two
/// grace periods plus a lock per registered thread.
///
/// Not async-signal-safe. Panics if called inside a read section (see
/// [`try_barrier`]).
pub fn barrier() {
    if let Err(e) = try_barrier() {
        panic!("{e}");
    }
}

/// [`barrier`], or [`Error::InReadSection`] instead of a deadlock when the
/// calling thread is inside a read section.
pub fn try_barrier() -> Result<(), Error> {
    outside_section("barrier")?;
    GLOBAL.barrier();
    Ok(())
}

/// Retires a boxed value: it is dropped after a grace period, in bulk with
/// other retired objects, usually on the retiring thread.
///
/// The value must already be unreachable for new readers (unpublished).
/// Not async-signal-safe (it may allocate a record block).
pub fn retire<T: Send + 'static>(b: Box<T>) {
    // SAFETY: a Box pointer with its matching drop function.
    unsafe { retire_raw(Box::into_raw(b).cast(), drop_box::<T>) }
}

/// Retires `ptr`: `drop(ptr)` runs on some thread after a grace period.
///
/// # Safety
/// `ptr` is unreachable for readers that start from now on, is retired once,
/// and `drop(ptr)` is sound to call from any thread.
pub unsafe fn retire_raw(ptr: *mut (), drop: DropFn) {
    match handle() {
        // SAFETY: forwarded contract.
        Some(h) => unsafe { h.retire_raw(ptr, drop) },
        // SAFETY: forwarded contract.
        None => unsafe { GLOBAL.retire_orphan(ptr, drop, ptr::null_mut(), read_depth() > 0) },
    }
}

/// Retires an object through its embedded [`RcuHead`]: `drop(head)` runs
/// after a grace period. Unlike [`retire`], this never needs memory: when no
/// record block can be allocated, the object is queued through its head.
///
/// # Safety
/// As [`retire_raw`], with `head` embedded in the retired object and left
/// alone by everyone else until `drop` runs.
pub unsafe fn retire_head(head: std::ptr::NonNull<RcuHead>, drop: DropFn) {
    match handle() {
        // SAFETY: forwarded contract.
        Some(h) => unsafe { h.retire_head(head, drop) },
        // SAFETY: forwarded contract.
        None => unsafe {
            GLOBAL.retire_orphan(head.as_ptr().cast(), drop, head.as_ptr(), read_depth() > 0)
        },
    }
}

/// [`GlobalHooks::retire`]: retires through the calling thread's handle, as
/// [`retire_head`] when `head` is not null, else as [`retire_raw`].
///
/// # Safety
/// As [`retire_raw`]; `head`, if non-null, is embedded in the object and is the
/// pointer retired.
unsafe fn retire_tls(ptr: *mut (), drop: DropFn, head: *mut RcuHead) {
    match std::ptr::NonNull::new(head) {
        // SAFETY: forwarded contract.
        Some(h) => unsafe { retire_head(h, drop) },
        // SAFETY: forwarded contract.
        None => unsafe { retire_raw(ptr, drop) },
    }
}

/// Seals what this thread retired so far into a batch and asks for its grace
/// period, so it is freed soon even if the thread retires nothing more (the
/// background reclaimer would otherwise pick it up within [`SCAN_PERIOD`]).
pub fn flush() {
    if let Some(h) = handle() {
        h.flush();
    }
}

/// Starts a grace period without waiting for it (the kernel's
/// `start_poll_synchronize_rcu`): returns a cookie that
/// [`poll_synchronize`] reports complete once every read section that began
/// before this call has ended. The background reclaimer runs the grace
/// period, so the caller never pays the membarrier; one grace period serves
/// every cookie taken before it starts. Not async-signal-safe (it may lock).
pub fn start_poll_synchronize() -> u64 {
    let cookie = GLOBAL.snapshot();
    if !GLOBAL.poll(cookie) {
        request_gp(cookie);
    }
    cookie
}

/// True once the grace period named by `cookie` (from
/// [`start_poll_synchronize`] or [`Domain::snapshot`]) has completed: every
/// read section that began before the cookie was taken has ended. One load;
/// async-signal-safe.
#[inline]
pub fn poll_synchronize(cookie: u64) -> bool {
    GLOBAL.poll(cookie)
}

/// Reclamation figures of the global domain.
pub fn stats() -> Stats {
    GLOBAL.stats()
}

/// How often the background reclaimer frees the garbage of idle and exited
/// threads.
pub const SCAN_PERIOD: Duration = Duration::from_millis(50);

struct ReclaimerState {
    wanted: u64,
    kicked: bool,
    started: bool,
    sleeping: bool,
}

static RECLAIMER: Mutex<ReclaimerState> =
    Mutex::new(ReclaimerState { wanted: 0, kicked: false, started: false, sleeping: false });
static RECLAIMER_CV: Condvar = Condvar::new();

fn ensure_started(s: &mut ReclaimerState) {
    if s.started {
        return;
    }
    let spawned =
        std::thread::Builder::new().name("strobe-rcu".into()).spawn(reclaimer_main).is_ok();
    // If the spawn failed, retiring threads still reclaim by themselves.
    s.started = spawned;
}

/// Asks the reclaimer to complete grace period `cookie`.
fn request_gp(cookie: u64) {
    let mut s = lock(&RECLAIMER);
    if cookie > s.wanted {
        s.wanted = cookie;
        ensure_started(&mut s);
        if s.sleeping {
            RECLAIMER_CV.notify_one();
        }
    }
}

/// Asks the reclaimer to free orphaned garbage soon.
fn kick_reclaimer() {
    let mut s = lock(&RECLAIMER);
    s.kicked = true;
    ensure_started(&mut s);
    if s.sleeping {
        RECLAIMER_CV.notify_one();
    }
}

fn reclaimer_main() {
    let d = &GLOBAL;
    let mut last_scan = Instant::now();
    loop {
        let (target, kicked) = {
            let mut s = lock(&RECLAIMER);
            loop {
                if (s.wanted > 0 && !d.poll(s.wanted)) || s.kicked {
                    break;
                }
                let since = last_scan.elapsed();
                if since >= SCAN_PERIOD {
                    break;
                }
                s.sleeping = true;
                s = RECLAIMER_CV
                    .wait_timeout(s, SCAN_PERIOD - since)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|e| e.into_inner().0);
                s.sleeping = false;
            }
            (s.wanted, std::mem::take(&mut s.kicked))
        };
        if target > 0 {
            d.wait_for(target);
        }
        if kicked || last_scan.elapsed() >= SCAN_PERIOD {
            d.reclaim_taken(false);
            last_scan = Instant::now();
        }
    }
}
