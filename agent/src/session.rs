//! Finding the recording: the arena named by `STROBE_ARENA`, its configuration, and the
//! small facts a process needs about its place in the recording (its stream id, whether
//! an earlier image of it recorded already).
//!
//! Owns: reading and setting the agent's environment variables (names from
//! `strobe_protocol::env`) and opening the record file. Must never be called from a
//! signal handler (it allocates and makes system calls freely).

use std::ffi::OsStr;
use std::path::Path;

use strobe_format::{Encoder, NoteLevel};
use strobe_protocol::{env, Arena, RecordConfig};

/// The arena and the configuration in it, when this process was launched by `strobe
/// record` (or is a descendant that kept its environment). `None` leaves the agent inert:
/// with no arena there is nowhere to say anything, and the recorder notices that no agent
/// attached.
pub fn attach() -> Option<(Arena, RecordConfig)> {
    let path = std::env::var_os(env::ARENA)?;
    let arena = Arena::attach(Path::new(&path)).ok()?;
    let cfg = arena.config().ok()?;
    Some((arena, cfg))
}

/// The pid an earlier image of the recording set, if any.
pub fn previous_agent_pid() -> Option<libc::pid_t> {
    std::env::var(env::AGENT_PID).ok()?.parse().ok()
}

/// Records our pid for a later image (after exec). Only in the constructor, which runs
/// single-threaded before `main`.
pub fn set_agent_pid(pid: libc::pid_t) {
    std::env::set_var(env::AGENT_PID, pid.to_string());
}

/// Opens the record file for appending; -1 on failure.
pub fn open_output(path: &OsStr) -> libc::c_int {
    let Ok(c) = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(path)) else {
        return -1;
    };
    // SAFETY: a NUL-terminated path; plain flags.
    unsafe { libc::open(c.as_ptr(), libc::O_WRONLY | libc::O_APPEND | libc::O_CLOEXEC) }
}

/// A random non-zero stream id.
pub fn new_stream_id() -> u32 {
    let mut stream = 0u32;
    while stream == 0 {
        // SAFETY: fills 4 bytes of a live local.
        unsafe { libc::getrandom((&mut stream as *mut u32).cast(), 4, 0) };
        if stream == 0 {
            stream = crate::clock::mono_ns() as u32 | 1;
        }
    }
    stream
}

/// Appends an error note to the record file before the agent has a stream.
pub fn note_to_path(path: &OsStr, msg: &str) {
    if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(path) {
        let mut e = Encoder::new();
        e.note(
            0x5707_0001,
            &strobe_format::Note { level: NoteLevel::Error, message: msg.to_string() },
        );
        let _ = std::io::Write::write_all(&mut f, e.as_bytes());
    }
}

/// Whether the program this process runs is a Go program (its main executable carries
/// the Go toolchain's build-id note: name "Go", type 4). Go's runtime installs its own
/// handler for every signal with raw system calls and starts its threads itself, so the
/// agent stays out of a Go image (reached by an exec from a program the agent serves,
/// `sh -c ./gobin`): the kernel floor samples it.
pub fn is_go_image() -> bool {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for the call; `data` is our bool.
        let (info, found) = unsafe { (&*info, &mut *data.cast::<bool>()) };
        // SAFETY: the program headers are mapped (they describe a loaded object).
        let phdrs =
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
        for ph in phdrs.iter().filter(|p| p.p_type == libc::PT_NOTE) {
            let start = info.dlpi_addr.wrapping_add(ph.p_vaddr) as *const u8;
            // SAFETY: a PT_NOTE segment of a loaded object is mapped readable.
            let notes = unsafe { std::slice::from_raw_parts(start, ph.p_memsz as usize) };
            *found |= has_go_note(notes);
        }
        1 // the first object is the program: stop
    }
    let mut found = false;
    // SAFETY: the callback has the signature dl_iterate_phdr expects and only reads.
    unsafe { libc::dl_iterate_phdr(Some(first), (&mut found as *mut bool).cast()) };
    found
}

/// Whether an ELF note segment holds the Go build id note.
fn has_go_note(mut b: &[u8]) -> bool {
    let word = |b: &[u8], i: usize| -> Option<usize> {
        Some(u32::from_ne_bytes(b.get(i..i + 4)?.try_into().ok()?) as usize)
    };
    while let (Some(namesz), Some(descsz), Some(ty)) = (word(b, 0), word(b, 4), word(b, 8)) {
        let name = b.get(12..12 + namesz).unwrap_or_default();
        if ty == 4 && name == b"Go\0" {
            return true;
        }
        let next = 12 + namesz.next_multiple_of(4) + descsz.next_multiple_of(4);
        match b.get(next..) {
            Some(rest) if !rest.is_empty() => b = rest,
            _ => break,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_go_build_id_note_is_found_among_others() {
        let mut b = Vec::new();
        for (name, ty, desc) in [(&b"GNU\0"[..], 3u32, &[1u8; 20][..]), (b"Go\0", 4, b"abc")] {
            b.extend((name.len() as u32).to_ne_bytes());
            b.extend((desc.len() as u32).to_ne_bytes());
            b.extend(ty.to_ne_bytes());
            b.extend(name);
            b.resize(b.len().next_multiple_of(4), 0);
            b.extend(desc);
            b.resize(b.len().next_multiple_of(4), 0);
        }
        assert!(has_go_note(&b));
        assert!(!has_go_note(&b[..32]), "the GNU note alone");
        assert!(!is_go_image(), "this test program is not Go");
    }
}
