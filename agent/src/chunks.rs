//! The chunks an agent writes to the record file itself, from normal context: its
//! PROCESS chunk at start, MAPS snapshots (at start, after `dlopen`, before `dlclose` and
//! `exec`), and NOTEs. Samples, losses, thread names and END are the recorder's: it
//! drains them from the arena, so they survive the target.
//!
//! Owns: encoding those chunks and appending them with one `write(2)` each (`O_APPEND`:
//! chunks of concurrent writers stay whole). Must never run in a signal handler (it
//! allocates and reads /proc) and never write when the calling process is not the one
//! the agent records (a `vfork` child).

use std::sync::atomic::{AtomicU64, Ordering};

use strobe_format::{Encoder, Mapping, MapsSnapshot, Note, NoteLevel};

use crate::clock::mono_ns;
use crate::Agent;

/// Writes all of `bytes` to `fd` (one call per buffer when the kernel allows).
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

/// Appends a note to the file.
pub fn note(a: &Agent, level: NoteLevel, message: String) {
    if let Some(ar) = crate::arena() {
        ar.push_note(&message);
    }
    let mut e = Encoder::new();
    e.note(a.stream, &Note { level, message });
    write_all(crate::out_fd(), e.as_bytes());
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

/// A hash of the last snapshot written, so an unchanged one is not written again. An
/// atomic, not a lock: a lock held by another thread at `fork` would stay held forever
/// in the child. Two threads racing (two `dlopen`s at once) may both write a snapshot,
/// which is harmless.
static LAST_MAPS: AtomicU64 = AtomicU64::new(0);
/// When the mappings were last read (ns), for callers that rate-limit.
static MAPS_READ_AT: AtomicU64 = AtomicU64::new(0);

fn fnv1a(text: &str) -> u64 {
    text.bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// Encodes a MAPS snapshot into `e` if the executable mappings changed since the last.
pub fn maps_if_changed(a: &Agent, e: &mut Encoder) {
    let (maps, key) = read_maps();
    MAPS_READ_AT.store(mono_ns(), Ordering::Relaxed);
    let h = fnv1a(&key) | 1;
    // Relaxed: a heuristic against duplicates, not a synchronisation.
    if LAST_MAPS.swap(h, Ordering::Relaxed) != h {
        e.maps(a.stream, &maps);
    }
}

/// Writes a MAPS snapshot if the mappings changed (after `dlopen`, before `dlclose` or
/// `exec`).
pub fn write_maps(a: &Agent) {
    let mut e = Encoder::new();
    maps_if_changed(a, &mut e);
    if !e.is_empty() {
        write_all(crate::out_fd(), e.as_bytes());
    }
}

/// Writes a MAPS snapshot if the mappings changed and none was read for `min_ns` (a
/// thread start: programs that churn threads must not re-read /proc each time).
pub fn write_maps_every(a: &Agent, min_ns: u64) {
    if mono_ns().saturating_sub(MAPS_READ_AT.load(Ordering::Relaxed)) >= min_ns {
        write_maps(a);
    }
}

/// Forgets the last snapshot (a forked child starts its own stream).
pub fn reset_in_child() {
    LAST_MAPS.store(0, Ordering::Relaxed);
    MAPS_READ_AT.store(0, Ordering::Relaxed);
}
