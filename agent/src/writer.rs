//! The writer thread and the drain: the only code that consumes the per-thread rings and
//! writes the record file.
//!
//! Owns: the drain lock, the encoder, the maps snapshot, END statistics. Runs only in
//! normal context (never in a signal handler): it allocates and locks freely. The writer
//! thread is created with every signal blocked and no perf event: it is never profiled.
//!
//! The writer sleeps in read(2) on an eventfd; a handler writes to it only when its ring's
//! occupancy reaches the wakeup threshold (once per crossing, never per sample), and a
//! thread writes to it when it exits (so its slot is reclaimed). Everything else is
//! drained at exit or before exec by the thread that exits or execs, under the same lock.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

use strobe_format::{
    Encoder, EndReason, LostCount, Mapping, MapsSnapshot, Note, NoteLevel, ProcessEnd, SampleKind,
    ThreadInfo,
};

use strobe_sampler::Kind;

use crate::sampler::mono_ns;
use crate::slots::{self, RECORD_HEAD};
use crate::Agent;

/// Set once the final END is written: nothing more goes to the file.
static FINISHED: AtomicBool = AtomicBool::new(false);

/// State only touched under [`DrainLock`].
pub struct WriterState {
    enc: Encoder,
    last_maps: String,
    maps_read_at: u64,
    samples: u64,
    lost: u64,
    wakeups: u64,
    dead_windows: u64,
    dead_window_sum: u64,
}

struct Locked {
    mutex: UnsafeCell<libc::pthread_mutex_t>,
    state: UnsafeCell<Option<WriterState>>,
}
// SAFETY: `state` is only accessed between pthread_mutex_lock and unlock of `mutex`
// (see `with_lock`); the mutex itself is designed for shared use.
unsafe impl Sync for Locked {}

static LOCK: Locked = Locked {
    mutex: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
    state: UnsafeCell::new(None),
};

/// Takes the drain lock (fork's prepare handler holds it across fork).
pub fn lock() {
    // SAFETY: a statically initialised mutex.
    unsafe { libc::pthread_mutex_lock(LOCK.mutex.get()) };
}

/// Releases the drain lock.
pub fn unlock() {
    // SAFETY: called by the holder (ours, or the forked child's copy of it).
    unsafe { libc::pthread_mutex_unlock(LOCK.mutex.get()) };
}

fn with_lock<R>(f: impl FnOnce(&mut WriterState) -> R) -> R {
    lock();
    // SAFETY: we hold the mutex, so no one else accesses `state`.
    let st = unsafe { &mut *LOCK.state.get() };
    let ws = st.get_or_insert_with(|| WriterState {
        enc: Encoder::with_capacity(1 << 16),
        last_maps: String::new(),
        maps_read_at: 0,
        samples: 0,
        lost: 0,
        wakeups: 0,
        dead_windows: 0,
        dead_window_sum: 0,
    });
    let r = f(ws);
    unlock();
    r
}

/// Forgets all writer state (a forked child starting its own stream).
pub fn reset_in_child() {
    // SAFETY: in a forked child only this thread exists and the caller holds the lock.
    unsafe { *LOCK.state.get() = None };
    FINISHED.store(false, Ordering::Relaxed);
}

/// Writes all of `bytes` to `fd` (O_APPEND: each write lands at the end; one call per
/// buffer keeps chunks of concurrent writers whole).
pub fn write_all(fd: libc::c_int, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: `bytes` is valid for reads of its length.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        bytes = bytes.get(n as usize..).unwrap_or(&[]);
    }
}

/// Executable mappings of this process, and the text they came from.
pub fn read_maps() -> (MapsSnapshot, String) {
    let text = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut maps = Vec::new();
    let mut key = String::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms), Some(off)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if !perms.contains('x') {
            continue;
        }
        let path = f.nth(2).unwrap_or("");
        let Some((s, e)) = range.split_once('-') else { continue };
        let (Ok(start), Ok(end), Ok(file_offset)) =
            (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16), u64::from_str_radix(off, 16))
        else {
            continue;
        };
        key.push_str(line);
        key.push('\n');
        maps.push(Mapping { start, end, file_offset, path: path.into() });
    }
    maps.sort_by_key(|m| m.start);
    (MapsSnapshot { time_mono_ns: mono_ns(), maps }, key)
}

/// Encodes the stream's first MAPS snapshot into `e` (written with the PROCESS chunk at
/// start), and remembers it so the writer repeats it only when mappings change.
pub fn first_maps(a: &Agent, e: &mut Encoder) {
    with_lock(|ws| {
        let (maps, key) = read_maps();
        e.maps(a.stream, &maps);
        ws.last_maps = key;
        ws.maps_read_at = mono_ns();
    });
}

/// Appends a note to the file (normal context).
pub fn note(a: &Agent, level: NoteLevel, message: String) {
    let mut e = Encoder::new();
    e.note(a.stream, &Note { level, message });
    write_all(a.out_fd, e.as_bytes());
}

/// Drains every ring into the file. Called with the lock held.
fn drain(a: &Agent, ws: &mut WriterState, final_drain: bool) {
    if FINISHED.load(Ordering::Relaxed) {
        return;
    }
    // Mappings change after dlopen: re-read them before writing samples, so a snapshot
    // covering a new library precedes its samples in the file. At most every 50 ms (a
    // program that churns threads wakes us at each thread exit), and always at the end.
    let now = mono_ns();
    if final_drain || now.saturating_sub(ws.maps_read_at) >= 50_000_000 {
        let (maps, key) = read_maps();
        ws.maps_read_at = now;
        if key != ws.last_maps {
            ws.enc.maps(a.stream, &maps);
            ws.last_maps = key;
        }
    }
    let ncounters = a.stride - RECORD_HEAD;
    let mut lost = Vec::new();
    let high = slots::HIGH_WATER.load(Ordering::Relaxed) as usize;
    for slot in slots::SLOTS.iter().take(high) {
        // Acquire: pairs with the owner's Release stores of ACTIVE (ring, tid visible)
        // and DEAD (final head and lost count visible).
        let state = slot.ctl.state();
        if !matches!(state, slots::ACTIVE | slots::CLOSING | slots::DEAD) {
            continue;
        }
        let tid = slot.tid.load(Ordering::Relaxed);
        if slot.named.load(Ordering::Relaxed) == 0 {
            let name = std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
                .map(|s| s.trim_end().to_string())
                .unwrap_or_default();
            ws.enc.threads(a.stream, &[ThreadInfo { tid, name }]);
            slot.named.store(1, Ordering::Relaxed);
        }
        let mut batch = ws.enc.samples(a.stream, tid, ncounters);
        // SAFETY: we hold the drain lock, so we are the ring's only consumer, and the
        // Acquire load of ACTIVE/CLOSING/DEAD above synchronised with the owner's set-up.
        let n = unsafe {
            slot.ring.consume(|rec| {
                let kind = match Kind::from_word(rec.get(2).copied().unwrap_or(0)) {
                    Kind::WindowStart => SampleKind::WindowStart,
                    Kind::WindowEnd => SampleKind::WindowEnd,
                    Kind::Plain => SampleKind::Plain,
                };
                let (time, ip) = (rec.first().copied(), rec.get(1).copied());
                batch.push(
                    kind,
                    time.unwrap_or(0),
                    ip.unwrap_or(0),
                    rec.get(RECORD_HEAD..).unwrap_or(&[]),
                );
            })
        };
        drop(batch); // a batch with no sample leaves no chunk
        ws.samples += n;
        let l = slot.ring.take_lost();
        if l > 0 {
            lost.push(LostCount { tid, lost: l });
            ws.lost += l;
        }
        if state == slots::DEAD {
            let (windows, window_sum) = slot.alt.windows();
            ws.dead_windows += windows;
            ws.dead_window_sum += window_sum;
            // Release (in `release`): our use of the slot (and its ring, which it keeps)
            // happens before a new owner claims it.
            slot.ctl.release();
        }
        if ws.enc.len() > 1 << 20 {
            write_all(a.out_fd, ws.enc.as_bytes());
            ws.enc.clear();
        }
    }
    if !lost.is_empty() {
        ws.enc.lost(a.stream, &lost);
    }
    write_all(a.out_fd, ws.enc.as_bytes());
    ws.enc.clear();
}

/// Drains everything and writes END with `reason`. With `Exit`, nothing is written
/// afterwards.
pub fn finish(a: &Agent, reason: EndReason) {
    with_lock(|ws| {
        drain(a, ws, true);
        if FINISHED.load(Ordering::Relaxed) {
            return;
        }
        let high = slots::HIGH_WATER.load(Ordering::Relaxed) as usize;
        let (mut windows, mut window_sum) = (ws.dead_windows, ws.dead_window_sum);
        for slot in slots::SLOTS.iter().take(high) {
            if matches!(slot.ctl.state(), slots::ACTIVE | slots::CLOSING) {
                let (w, sum) = slot.alt.windows();
                windows += w;
                window_sum += sum;
            }
        }
        ws.enc.end_process(
            a.stream,
            &ProcessEnd {
                reason,
                time_mono_ns: mono_ns(),
                samples: ws.samples,
                lost: ws.lost,
                writer_wakeups: ws.wakeups,
                windows,
                window_sum,
            },
        );
        write_all(a.out_fd, ws.enc.as_bytes());
        ws.enc.clear();
        if reason == EndReason::Exit {
            FINISHED.store(true, Ordering::Relaxed);
        }
    });
}

/// The writer thread's body: sleep on the eventfd, drain on each wakeup.
pub extern "C" fn writer_main(_arg: *mut libc::c_void) -> *mut libc::c_void {
    while let Some(a) = crate::agent() {
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into a live local.
        let n = unsafe { libc::read(a.event_fd, (&mut v as *mut u64).cast(), 8) };
        if n != 8 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break;
        }
        if FINISHED.load(Ordering::Relaxed) {
            break;
        }
        with_lock(|ws| {
            ws.wakeups += 1;
            drain(a, ws, false);
        });
    }
    std::ptr::null_mut()
}
