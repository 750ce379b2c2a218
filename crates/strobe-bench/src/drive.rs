//! What the benchmarks that drive whole commands share: a scratch directory and running
//! a command quietly with its failure phrased for the user.
//!
//! Owns those two helpers. Must never measure anything.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::BenchError;

/// A private scratch directory, removed when dropped.
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    /// A fresh directory for benchmark `bench`.
    pub(crate) fn new(bench: &str) -> Result<Scratch, BenchError> {
        let dir = std::env::temp_dir().join(format!("strobe-bench-{bench}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|source| BenchError::Io {
            what: format!("creating {}", dir.display()),
            source,
        })?;
        Ok(Scratch(dir))
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The last non-empty line of a command's stderr, for error messages.
pub(crate) fn last_line(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr)
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no message)")
        .trim()
        .to_string()
}

/// Runs `cmd` with stdout discarded; an error names `what` and the command's last line.
pub(crate) fn run_quiet(cmd: &mut Command, what: &str) -> Result<std::process::Output, BenchError> {
    let out = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|source| BenchError::Io { what: format!("starting {what}"), source })?;
    if !out.status.success() {
        return Err(BenchError::Other(format!(
            "{what} failed ({}): {}",
            out.status,
            last_line(&out.stderr)
        )));
    }
    Ok(out)
}
