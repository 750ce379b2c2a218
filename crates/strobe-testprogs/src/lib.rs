//! Paths of the test programs built from `tests/c/*.c`, `tests/rust/*.rs` and `tests/go/`
//! (see build.rs).
//!
//! Owns only the paths. Must never be a dependency of anything but tests and benchmarks.

use std::path::PathBuf;

include!(concat!(env!("OUT_DIR"), "/programs.rs"));

/// The path of test program `name` (the file stem of `tests/c/NAME.c` or `tests/rust/NAME.rs`).
///
/// # Panics
/// If no such program was built: the list of programs is fixed at build time, so a typo
/// is a bug in the test.
pub fn path(name: &str) -> PathBuf {
    assert!(PROGRAMS.contains(&name), "no test program '{name}' in tests/c (have: {PROGRAMS:?})");
    PathBuf::from(env!("OUT_DIR")).join(name)
}

/// The probe library (`libstrobe_probe_c.so`, crate strobe-probe-c) the test programs
/// with probe points are linked against, for tests that inject it with `LD_PRELOAD`.
pub fn probe_library() -> PathBuf {
    PathBuf::from(PROBE_LIBRARY)
}

/// The path of shared library `name` (`tests/c/NAME.c` with the `shared` marker), built as
/// `libNAME.so`.
///
/// # Panics
/// If no such library was built (a typo in the test).
pub fn shared_lib(name: &str) -> PathBuf {
    assert!(
        SHARED_LIBS.contains(&name),
        "no shared library '{name}' in tests/c (have: {SHARED_LIBS:?})"
    );
    PathBuf::from(env!("OUT_DIR")).join(format!("lib{name}.so"))
}

/// The path of Go test program `name` (`gospin_static`, `gospin_cgo`: tests/go built
/// statically and with cgo), or why it was not built (the go tool is missing), for the
/// test to print as its reason to skip.
pub fn go_program(name: &str) -> Result<PathBuf, String> {
    if GO_PROGRAMS.contains(&name) {
        Ok(PathBuf::from(env!("OUT_DIR")).join(name))
    } else if GO_SKIP.is_empty() {
        panic!("no Go test program '{name}' (have: {GO_PROGRAMS:?})")
    } else {
        Err(GO_SKIP.to_string())
    }
}
