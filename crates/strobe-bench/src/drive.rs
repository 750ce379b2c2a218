//! What the benchmarks that drive whole commands share: a scratch directory, running a
//! command with its failure phrased for the user, finding perf and counting the samples in
//! its file, the children's CPU time, and rounding figures for JSON.
//!
//! Owns those helpers. Must never measure anything by itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::BenchError;

/// A private scratch directory, removed when dropped (kept, and named on stderr, when
/// `STROBE_BENCH_KEEP` is set).
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
        if std::env::var_os("STROBE_BENCH_KEEP").is_some() {
            eprintln!("strobe bench: kept {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
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

/// Maps an I/O error to one that says what was being done.
pub(crate) fn io(what: &str) -> impl FnOnce(std::io::Error) -> BenchError + '_ {
    move |source| BenchError::Io { what: what.to_string(), source }
}

/// Runs `cmd` with stdout discarded; an error names `what` and the command's last line.
pub(crate) fn run_quiet(cmd: &mut Command, what: &str) -> Result<std::process::Output, BenchError> {
    run(cmd.stdout(Stdio::null()), what)
}

/// Runs `cmd` to its end and returns its stdout.
pub(crate) fn run_stdout(cmd: &mut Command, what: &str) -> Result<Vec<u8>, BenchError> {
    Ok(run(cmd.stdout(Stdio::piped()), what)?.stdout)
}

fn run(cmd: &mut Command, what: &str) -> Result<std::process::Output, BenchError> {
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|source| BenchError::Io { what: format!("starting {what}"), source })?;
    check(out, what)
}

/// `out` when its command succeeded; otherwise an error naming `what` and its last line.
pub(crate) fn check(
    out: std::process::Output,
    what: &str,
) -> Result<std::process::Output, BenchError> {
    if !out.status.success() {
        return Err(BenchError::Other(format!(
            "{what} failed ({}): {}",
            out.status,
            last_line(&out.stderr)
        )));
    }
    Ok(out)
}

/// CPU time (s) of this process's reaped children so far.
pub(crate) fn children_cpu_s() -> f64 {
    // SAFETY: getrusage fills a valid, zeroed struct.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut r) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(r.ru_utime) + tv(r.ru_stime)
}

/// `perf`, if it is installed and runs; otherwise why not, for the skipped row.
pub(crate) fn find_perf() -> Result<PathBuf, String> {
    let perf = PathBuf::from("perf");
    match Command::new(&perf).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status()
    {
        Ok(s) if s.success() => Ok(perf),
        Ok(s) => Err(format!("`perf --version` failed ({s})")),
        Err(e) => {
            Err(format!("perf is not installed ({e}); on Debian: apt-get install linux-perf"))
        }
    }
}

/// SAMPLE records in a perf.data file.
pub(crate) fn perf_samples(file: &Path) -> Result<u64, BenchError> {
    let bad = |e: &dyn std::fmt::Display| BenchError::Other(format!("{}: {e}", file.display()));
    let f = strobe_perfdata::PerfFile::open(file).map_err(|e| bad(&e))?;
    let data = f.parse().map_err(|e| bad(&e))?;
    Ok(data
        .records()
        .filter(|r| r.as_ref().is_ok_and(|r| r.kind == strobe_perfdata::abi::RECORD_SAMPLE))
        .count() as u64)
}

/// The median of `xs` (NaN when empty).
pub(crate) fn med(xs: impl Iterator<Item = f64>) -> f64 {
    crate::stats::median(&xs.collect::<Vec<_>>())
}

/// Rounds for JSON: figures here carry 3-4 significant digits at best; a figure that is
/// not finite (nothing measured) becomes 0.
pub(crate) fn r3(v: f64) -> f64 {
    if v.is_finite() {
        (v * 1e3).round() / 1e3
    } else {
        0.0
    }
}
