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
            stream = crate::sampler::mono_ns() as u32 | 1;
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
