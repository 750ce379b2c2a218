//! The agent's file descriptors, kept out of the program's way.
//!
//! Every thread the agent serves holds its perf group's descriptors (three with the
//! default group), and the process holds the record file's. Left where `open` puts them
//! (the lowest free numbers), a program with many threads would find its own files
//! failing with EMFILE under strobe, and a program that closes or `dup2`s by number
//! would touch ours. So:
//!
//! - **A budget.** The agent uses at most an eighth of the soft `RLIMIT_NOFILE` (capped
//!   at [`MAX_BAND`]) read at start. A thread whose group does not fit is left to the
//!   kernel floor, which needs no descriptor in the program; the recorder counts it.
//! - **A band.** Each descriptor is moved (`F_DUPFD_CLOEXEC`) into a band just below the
//!   soft limit, leaving the top [`reserve`] numbers free (shells and servers use the
//!   last ones, bash's 255 for one), so the low numbers the program's `open`s get are
//!   never ours.
//! - **Identity.** A set says which numbers are ours. The interposed `close`
//!   leaves ours open and answers success: a program that lists `/proc/self/fd` and
//!   closes each entry (daemons, Chromium's crashpad) saw the number and expects its close
//!   to work (EBADF made crashpad log one warning per agent descriptor), and one that
//!   closes a range blindly ignores the answer; `close_range` and `closefrom` close
//!   everything around ours;
//!   `dup2`/`dup3` onto one of ours first moves ours to another band number.
//!
//! Known limit: a `dup2` onto one of our numbers while the owning thread's handler is
//! between loading that number and using it can make that one use act on the program's
//! new file; the window is a few instructions, and only a program that `dup2`s onto a
//! number near its limit can open it.
//!
//! Owns: the band, the budget and the set, and the interposers above. Must never
//! allocate or lock (the interposers are async-signal-safe, as the functions they stand
//! for), and never close or move a descriptor that is not the agent's.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

/// The most descriptors the agent ever uses.
pub const MAX_BAND: usize = 4096;

/// The agent's descriptors: an open-addressing set (linear probing) twice the largest
/// budget, so probes stay short. Slots hold a descriptor, [`EMPTY`] or [`GONE`] (a removed
/// one, which probes step over).
const SET: usize = 2 * MAX_BAND;
const EMPTY: i32 = -1;
const GONE: i32 = -2;
static OURS: [AtomicI32; SET] = [const { AtomicI32::new(EMPTY) }; SET];
/// Descriptors in use (or reserved) by the agent.
static USED: AtomicU32 = AtomicU32::new(0);

/// The numbers left free at the top of the limit.
pub fn reserve(limit: u64) -> u64 {
    (limit / 32).clamp(16, 256)
}

/// The soft `RLIMIT_NOFILE` now.
fn soft_limit() -> Option<u64> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit with a valid out-pointer.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0)
        .then_some(r.rlim_cur.min(i32::MAX as u64 / 2))
}

/// The budget under `limit`: an eighth of it, at most [`MAX_BAND`].
fn budget_of(limit: u64) -> u64 {
    (limit / 8).min(MAX_BAND as u64)
}

/// The band now: `lo..hi`, just below the current soft limit (a program may lower or
/// raise it after start; descriptors placed earlier stay where they are).
fn band() -> Option<(RawFd, RawFd)> {
    let limit = soft_limit()?;
    let budget = budget_of(limit);
    let hi = limit.saturating_sub(reserve(limit));
    (budget >= 4 && hi > budget + 3).then(|| ((hi - budget) as RawFd, hi as RawFd))
}

/// Reserves `n` descriptors of the budget (an eighth of the soft `RLIMIT_NOFILE` now: a
/// program that lowers its limit after start gets a smaller one); `false` when they do
/// not fit.
pub fn take(n: u32) -> bool {
    let budget = soft_limit().map_or(0, budget_of) as u32;
    // Relaxed: a counter; no data is published through it.
    let before = USED.fetch_add(n, Ordering::Relaxed);
    if before + n > budget {
        USED.fetch_sub(n, Ordering::Relaxed);
        return false;
    }
    true
}

/// Returns `n` descriptors to the budget.
pub fn give_back(n: u32) {
    // Relaxed: a counter.
    let _ = USED.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| Some(u.saturating_sub(n)));
}

fn home(fd: RawFd) -> usize {
    (fd as u32).wrapping_mul(0x9e37_79b9) as usize % SET
}

/// Whether `fd` is one of the agent's.
#[inline]
pub fn is_ours(fd: RawFd) -> bool {
    if fd < 0 || USED.load(Ordering::Relaxed) == 0 {
        return false;
    }
    let h = home(fd);
    for i in 0..SET {
        // Acquire: pairs with the Release in `mark`: the descriptor was moved there first.
        match OURS[(h + i) % SET].load(Ordering::Acquire) {
            EMPTY => return false,
            x if x == fd => return true,
            _ => {}
        }
    }
    false
}

fn mark(fd: RawFd, ours: bool) {
    let h = home(fd);
    for i in 0..SET {
        let cell = &OURS[(h + i) % SET];
        let v = cell.load(Ordering::Acquire);
        if ours {
            // Release: the descriptor exists at `fd` before anyone sees it marked ours.
            if (v == EMPTY || v == GONE)
                && cell.compare_exchange(v, fd, Ordering::Release, Ordering::Relaxed).is_ok()
            {
                return;
            }
        } else if v == fd {
            cell.store(GONE, Ordering::Release);
            return;
        } else if v == EMPTY {
            return;
        }
    }
}

/// Moves `fd` (the agent's, just opened) into the band; returns the new number, or
/// `None` (and `fd` closed) when the band is full.
pub fn place(fd: RawFd) -> Option<RawFd> {
    let Some((lo, hi)) = band() else {
        real_close(fd);
        return None;
    };
    // SAFETY: F_DUPFD_CLOEXEC takes a plain minimum and returns a new descriptor.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, lo) };
    real_close(fd);
    if new < 0 {
        return None;
    }
    if new >= hi {
        real_close(new);
        return None;
    }
    mark(new, true);
    Some(new)
}

/// Closes one of the agent's descriptors.
pub fn close_own(fd: RawFd) {
    if fd < 0 {
        return;
    }
    mark(fd, false);
    real_close(fd);
}

/// Closes `fd` with the system call (our `close` would refuse one of ours).
fn real_close(fd: RawFd) {
    // SAFETY: a raw close of a descriptor the agent owns; the system call bypasses our
    // interposer.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

/// Moves the agent's descriptor at `fd` to another band number, updating whoever holds
/// it (`holders` is searched); `false` if no band number is free (then `fd` stays, and
/// the caller's `dup2` replaces it: the holder's uses fail from then on).
fn move_away(fd: RawFd, holders: &mut dyn Iterator<Item = &'static AtomicI32>) -> bool {
    let Some((lo, hi)) = band() else { return false };
    // SAFETY: F_DUPFD_CLOEXEC takes a plain minimum and returns a new descriptor.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, lo) };
    if new < 0 || new >= hi {
        if new >= 0 {
            real_close(new);
        }
        return false;
    }
    mark(new, true);
    for h in holders {
        // Relaxed: the owner's next load sees one of the two numbers; both are the
        // same event until the caller's dup2 replaces the old one.
        let _ = h.compare_exchange(fd, new, Ordering::Relaxed, Ordering::Relaxed);
    }
    mark(fd, false);
    true
}

// ---------------------------------------------------------------------------------
// Interposed functions.

fn errno_set(e: libc::c_int) {
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = e };
}

/// Interposes `close`: the agent's descriptors stay open, and the caller is told its
/// close succeeded (see the module note).
///
/// # Safety
/// Same contract as libc's `close`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: libc::c_int) -> libc::c_int {
    type CloseFn = unsafe extern "C" fn(libc::c_int) -> libc::c_int;
    static REAL: std::sync::atomic::AtomicPtr<libc::c_void> =
        std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
    if is_ours(fd) {
        return 0;
    }
    let f = crate::next_symbol(&REAL, c"close");
    if f.is_null() {
        // SAFETY: the system call libc's close makes.
        return unsafe { libc::syscall(libc::SYS_close, fd) as libc::c_int };
    }
    // SAFETY: libc's close has this signature; the argument forwarded unchanged.
    unsafe { std::mem::transmute::<*mut libc::c_void, CloseFn>(f)(fd) }
}

/// Closes `first..=last` around the agent's descriptors (`flags` as close_range's).
fn close_range_around(first: u32, last: u32, flags: libc::c_int) -> libc::c_int {
    // The agent's descriptors inside the range, in order (at most the budget's).
    let mut ours = [0u32; MAX_BAND];
    let mut n = 0;
    for cell in &OURS {
        let v = cell.load(Ordering::Acquire);
        if v >= 0 && (first..=last).contains(&(v as u32)) && n < MAX_BAND {
            ours[n] = v as u32;
            n += 1;
        }
    }
    let ours = &mut ours[..n];
    ours.sort_unstable();
    let mut from = first;
    for &fd in ours.iter() {
        if fd > from {
            // SAFETY: close_range on numbers that are not the agent's.
            let r = unsafe { libc::syscall(libc::SYS_close_range, from, fd - 1, flags) };
            if r != 0 {
                return r as libc::c_int;
            }
        }
        from = fd + 1;
    }
    if from > last {
        return 0;
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close_range, from, last, flags) as libc::c_int }
}

/// Interposes `close_range`: see the module note.
///
/// # Safety
/// Same contract as libc's `close_range`.
#[no_mangle]
pub unsafe extern "C" fn close_range(
    first: libc::c_uint,
    last: libc::c_uint,
    flags: libc::c_int,
) -> libc::c_int {
    if first > last {
        errno_set(libc::EINVAL);
        return -1;
    }
    close_range_around(first, last, flags)
}

/// Interposes `closefrom`: see the module note.
#[no_mangle]
pub extern "C" fn closefrom(lowfd: libc::c_int) {
    let _ = close_range_around(lowfd.max(0) as u32, u32::MAX, 0);
}

type Dup3Fn = unsafe extern "C" fn(libc::c_int, libc::c_int, libc::c_int) -> libc::c_int;
type Dup2Fn = unsafe extern "C" fn(libc::c_int, libc::c_int) -> libc::c_int;

fn holders() -> impl Iterator<Item = &'static AtomicI32> {
    let slots = crate::slots::LOCAL.iter();
    slots
        .flat_map(|l| l.fds.iter().chain(std::iter::once(&l.leader_fd)))
        .chain(std::iter::once(&crate::OUT_FD))
}

/// Interposes `dup2`: moves the agent's descriptor out of the way first.
///
/// # Safety
/// Same contract as libc's `dup2`.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: libc::c_int, new: libc::c_int) -> libc::c_int {
    static REAL: std::sync::atomic::AtomicPtr<libc::c_void> =
        std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
    if is_ours(new) && old != new {
        move_away(new, &mut holders());
    }
    let f = crate::next_symbol(&REAL, c"dup2");
    if f.is_null() {
        errno_set(libc::ENOSYS);
        return -1;
    }
    // SAFETY: libc's dup2 has this signature; arguments forwarded unchanged.
    unsafe { std::mem::transmute::<*mut libc::c_void, Dup2Fn>(f)(old, new) }
}

/// Interposes `dup3`: moves the agent's descriptor out of the way first.
///
/// # Safety
/// Same contract as libc's `dup3`.
#[no_mangle]
pub unsafe extern "C" fn dup3(
    old: libc::c_int,
    new: libc::c_int,
    flags: libc::c_int,
) -> libc::c_int {
    static REAL: std::sync::atomic::AtomicPtr<libc::c_void> =
        std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
    if is_ours(new) && old != new {
        move_away(new, &mut holders());
    }
    let f = crate::next_symbol(&REAL, c"dup3");
    if f.is_null() {
        errno_set(libc::ENOSYS);
        return -1;
    }
    // SAFETY: libc's dup3 has this signature; arguments forwarded unchanged.
    unsafe { std::mem::transmute::<*mut libc::c_void, Dup3Fn>(f)(old, new, flags) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_leaves_the_top_numbers_free() {
        assert_eq!(reserve(1024), 32);
        assert_eq!(reserve(256), 16);
        assert_eq!(reserve(1 << 20), 256);
    }
}
