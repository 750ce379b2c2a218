//! Paths of the C test programs built from `tests/c/*.c` (see build.rs).

use std::path::PathBuf;

include!(concat!(env!("OUT_DIR"), "/programs.rs"));

/// The path of test program `name` (the file stem of `tests/c/NAME.c`).
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
