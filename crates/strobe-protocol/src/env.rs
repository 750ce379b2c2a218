//! The environment variables that cross from `strobe` into the target, named once, and
//! the one way to add a library to `LD_PRELOAD`. Their values are written and read by the
//! module that types them: [`crate::watch`] for `strobe watch`'s, [`crate::probe`] for
//! the probe library's.
//!
//! Owns: the names and the preload list's syntax. Must never carry configuration the
//! arena can carry: the environment is visible to the target and its children, so for a
//! recording it holds only what the agent needs to find the arena.

use std::ffi::{OsStr, OsString};

/// The arena to attach to: a path the agent opens (`/proc/<recorder>/fd/<n>`).
pub const ARENA: &str = "STROBE_ARENA";
/// Set by an agent to its pid: a new image with the same pid (after exec) continues the
/// recording; a different pid is a forked child's new image.
pub const AGENT_PID: &str = "STROBE_AGENT_PID";
/// The dynamic loader's preload list.
pub const LD_PRELOAD: &str = "LD_PRELOAD";

/// `strobe watch`: the write end of the pipe the agent streams its messages to, in
/// decimal (`watch::fd_to_env`, `watch::fd_from_env`).
pub const WATCH_FD: &str = "STROBE_WATCH_FD";
/// `strobe watch`: what to watch and how (`watch::WatchRequest::to_env`).
pub const WATCH: &str = "STROBE_WATCH";
/// Every variable `strobe watch` sets, for the agent to remove once read (a program the
/// target execs must not mistake an unrelated fd with the same number for the channel).
pub const WATCH_ALL: &[&str] = &[WATCH_FD, WATCH];

/// Probe points: attach a counting consumer to these points (`a,b`; `*`: every Rust site).
pub const PROBE_COUNT: &str = "STROBE_PROBE_COUNT";
/// Probe points: at exit, list every registered site (on unless unset, empty or `0`).
pub const PROBE_LIST: &str = "STROBE_PROBE_LIST";
/// Probe points: where the exit report goes (default: stderr).
pub const PROBE_OUT: &str = "STROBE_PROBE_OUT";
/// Probe points: attach a tracing consumer to these points: one line per hit.
pub const PROBE_TRACE: &str = "STROBE_PROBE_TRACE";
/// Probe points: where trace lines go (default: stderr).
pub const PROBE_TRACE_OUT: &str = "STROBE_PROBE_TRACE_OUT";

/// Every variable `strobe` sets for a recording, for a launcher to clear from an
/// inherited environment before setting its own.
pub const ALL: &[&str] = &[ARENA, AGENT_PID];

/// `LD_PRELOAD` with `lib` first and the caller's own list after it. The dynamic loader
/// accepts colons and spaces as separators; strobe always writes a colon.
pub fn preload_with(lib: &OsStr, existing: Option<&OsStr>) -> OsString {
    let mut v = lib.to_os_string();
    if let Some(old) = existing.filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(old);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_goes_first_and_the_users_list_is_kept() {
        assert_eq!(preload_with(OsStr::new("/a.so"), None), "/a.so");
        assert_eq!(preload_with(OsStr::new("/a.so"), Some(OsStr::new(""))), "/a.so");
        assert_eq!(
            preload_with(OsStr::new("/a.so"), Some(OsStr::new("/b.so /c.so"))),
            "/a.so:/b.so /c.so"
        );
    }
}
