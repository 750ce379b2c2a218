//! Helpers shared by the integration tests: a scratch directory per test and a
//! `strobe` command builder.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `strobe` binary under test.
pub(crate) fn strobe() -> Command {
    Command::new(env!("CARGO_BIN_EXE_strobe"))
}

/// `strobe record -o FILE`, to which a test adds its options and `-- COMMAND`.
pub(crate) fn record_to(file: &Path) -> Command {
    let mut cmd = strobe();
    cmd.arg("record").arg("-o").arg(file);
    cmd
}

/// A fresh scratch directory for one test, removed when dropped.
pub(crate) struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    /// Creates `target/it-scratch/<name>-<pid>`.
    pub(crate) fn new(name: &str) -> Scratch {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch { dir }
    }

    /// A path inside the scratch directory.
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The directory itself.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Runs a command, returning its output; panics with the command line if it cannot start.
pub(crate) fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// Stdout and stderr of `out`, for assertion messages.
pub(crate) fn show(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Tests that compare a value with the truth a program measured, and tests that load the
/// machine heavily (thousands of threads), run in parallel in this binary: the load of the
/// second kind moves the first kind's values past their tolerances on a 2-CPU machine.
/// Value tests hold [`quiet`] (any number at once); heavy tests hold [`alone`] (none of
/// the value tests meanwhile).
static LOAD: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Held by a test whose values need the machine free of the heavy tests.
pub(crate) fn quiet() -> std::sync::RwLockReadGuard<'static, ()> {
    // A test that panicked while holding the lock poisons it; the lock guards nothing.
    LOAD.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Held by a test that loads the machine heavily.
pub(crate) fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    LOAD.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}
