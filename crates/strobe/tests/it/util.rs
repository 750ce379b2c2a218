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
/// machine heavily (thousands of threads), take turns in this binary; the other tests run
/// beside them. Two value tests at once put four or more busy threads of two workloads on
/// this 2-CPU machine, and each then measures the other's preemption as well as its own
/// program (a sleeping function's switches per ms read -26% in a full run, -12% to -24%
/// in eight runs alone). strobe's values under oversubscription are a claim of their own, tested
/// where a test says so (`rates::fault_rates_hold_on_eight_threads`: eight threads on two
/// CPUs). Value tests hold [`quiet`], heavy tests [`alone`]: the same turn.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Held by a test whose values need the machine free of the other value tests and of
/// the heavy ones.
pub(crate) fn quiet() -> std::sync::MutexGuard<'static, ()> {
    // A test that panicked while holding the lock poisons it; the lock guards nothing.
    TURN.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Held by a test that loads the machine heavily.
pub(crate) fn alone() -> std::sync::MutexGuard<'static, ()> {
    quiet()
}
