//! strobe's variables out of the program's sight, into the images it starts.
//!
//! A recording reaches each image of the tree through its environment: `LD_PRELOAD`
//! names the agent, `STROBE_ARENA` the recording, `STROBE_AGENT_PID` the image before an
//! exec. The program must not see them (a program that prints or checks its environment
//! would behave differently under strobe), yet every image it starts must get them. So:
//!
//! - at start (the constructor, single-threaded) the agent removes its own entry from
//!   `LD_PRELOAD` (the user's own entries stay) and strobe's variables from `environ`,
//!   keeping them;
//! - the exec family and `posix_spawn`/`posix_spawnp` (interposed) give the new image an
//!   environment with them added back, built on the caller's stack (no allocation: the
//!   caller may be a `vfork` child, or a signal handler).
//!
//! What still shows them: `/proc/PID/environ` (the kernel's copy of the environment the
//! image started with), and children that `system()`/`popen()` start (glibc starts those
//! with an internal spawn the agent cannot reach: they run without the agent, and the
//! kernel floor samples them).
//!
//! Owns: the kept values and the environments built for new images. Must never allocate,
//! lock or fail an exec: an environment that does not fit the stack buffers is passed on
//! unchanged (the new image then runs without the agent, sampled by the floor).

use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use strobe_protocol::env;

extern "C" {
    static mut environ: *const *const c_char;
}

/// The kept entries, NUL-terminated (`NAME=value`), and the agent's own preload entry.
struct Kept {
    /// The agent library, as `LD_PRELOAD` named it.
    agent: Vec<u8>,
    /// Every strobe variable's entry, ready to append.
    entries: Vec<Vec<u8>>,
}

static KEPT: OnceLock<Kept> = OnceLock::new();
/// Set once the variables were taken out (a recording agent, not a calibration).
static HIDDEN: AtomicBool = AtomicBool::new(false);

/// The most environment entries an image gets through the interposed calls.
const MAX_ENTRIES: usize = 4096;
/// The longest `LD_PRELOAD` entry built for a new image.
const MAX_PRELOAD: usize = 8192;

/// Takes strobe's variables out of this image's environment, keeping them for the images
/// it starts. Constructor only (single-threaded): `setenv`/`unsetenv` are not
/// thread-safe.
pub fn hide() {
    if HIDDEN.load(Ordering::Relaxed) {
        return;
    }
    let Some(preload) = std::env::var_os(env::LD_PRELOAD) else { return };
    let preload = preload.as_encoded_bytes().to_vec();
    // The agent is the first entry (strobe puts it there: `env::preload_with`).
    let cut = preload.iter().position(|&b| b == b':' || b == b' ').unwrap_or(preload.len());
    let agent = preload[..cut].to_vec();
    let rest = preload.get(cut + 1..).unwrap_or_default().to_vec();
    let mut entries = Vec::new();
    for name in env::ALL {
        if let Some(v) = std::env::var_os(name) {
            let mut e = format!("{name}=").into_bytes();
            e.extend_from_slice(v.as_encoded_bytes());
            e.push(0);
            entries.push(e);
            std::env::remove_var(name);
        }
    }
    if rest.is_empty() {
        std::env::remove_var(env::LD_PRELOAD);
    } else {
        // SAFETY: the bytes came from the environment, so they are valid for an OsStr.
        std::env::set_var(env::LD_PRELOAD, unsafe {
            std::ffi::OsStr::from_encoded_bytes_unchecked(&rest)
        });
    }
    if KEPT.set(Kept { agent, entries }).is_ok() {
        HIDDEN.store(true, Ordering::Release);
    }
}

/// Runs `f` with `envp` as a new image should get it: strobe's variables added back and
/// the agent first in its `LD_PRELOAD`; `envp` itself when nothing is hidden or it does
/// not fit.
///
/// # Safety
/// `envp` is null or a NULL-terminated array of NUL-terminated strings.
pub unsafe fn with_env<R>(
    envp: *const *const c_char,
    f: impl FnOnce(*const *const c_char) -> R,
) -> R {
    let kept = match KEPT.get() {
        Some(k) if HIDDEN.load(Ordering::Acquire) => k,
        _ => return f(envp),
    };
    let mut out: [*const c_char; MAX_ENTRIES + 8] = [std::ptr::null(); MAX_ENTRIES + 8];
    let mut preload = [0u8; MAX_PRELOAD];
    let prefix = env::LD_PRELOAD.as_bytes();
    let mut n = 0;
    let mut theirs: &[u8] = &[];
    if !envp.is_null() {
        let mut p = envp;
        loop {
            // SAFETY: a NULL-terminated array (the caller's contract).
            let e = unsafe { *p };
            if e.is_null() {
                break;
            }
            // SAFETY: a NUL-terminated entry.
            let bytes = unsafe { CStr::from_ptr(e) }.to_bytes();
            let is = |name: &str| {
                bytes.len() > name.len()
                    && bytes.starts_with(name.as_bytes())
                    && bytes[name.len()] == b'='
            };
            if bytes.len() > prefix.len()
                && bytes.starts_with(prefix)
                && bytes[prefix.len()] == b'='
            {
                theirs = &bytes[prefix.len() + 1..];
            } else if !env::ALL.iter().any(|name| is(name)) {
                if n == MAX_ENTRIES {
                    return f(envp);
                }
                out[n] = e;
                n += 1;
            }
            // SAFETY: within the array, up to its NULL.
            p = unsafe { p.add(1) };
        }
    }
    // LD_PRELOAD=agent[:theirs]
    let need = prefix.len() + 1 + kept.agent.len() + 1 + theirs.len() + 1;
    if need > MAX_PRELOAD {
        return f(envp);
    }
    let mut at = 0;
    for part in [prefix, b"=", &kept.agent] {
        preload[at..at + part.len()].copy_from_slice(part);
        at += part.len();
    }
    if !theirs.is_empty() {
        preload[at] = b':';
        at += 1;
        preload[at..at + theirs.len()].copy_from_slice(theirs);
        at += theirs.len();
    }
    preload[at] = 0;
    out[n] = preload.as_ptr().cast();
    n += 1;
    for e in &kept.entries {
        out[n] = e.as_ptr().cast();
        n += 1;
    }
    out[n] = std::ptr::null();
    f(out.as_ptr())
}

/// This image's environment (`environ`), for the calls that use it.
pub fn current() -> *const *const c_char {
    // SAFETY: reading the libc global; the pointer is what the exec calls would use.
    unsafe { std::ptr::addr_of!(environ).read() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_added_when_nothing_was_hidden() {
        let e = [c"A=1".as_ptr(), std::ptr::null()];
        // SAFETY: a NULL-terminated array of C strings.
        let same = unsafe { with_env(e.as_ptr(), |p| p == e.as_ptr()) };
        assert!(same);
    }
}
