//! The host side of in-program probe points (`point:NAME`): asking the program's probe
//! library to count or list them, and reading what it reports at exit.
//!
//! Probe points are declared inside the program with strobe-probe (Rust macro) or
//! `strobe_probe.h` (C), and the probe library itself attaches the consumers: it reads its
//! request from the environment when it loads and at exit writes its report to a file.
//! Both are typed in strobe-protocol's `probe` module, shared with the library
//! ([`ProbeRequest`], [`PointReport`]). [`PointsFile`] creates the file, sets the request in
//! the target's environment (and, for programs built with `STROBE_PROBE_OPTIONAL`, preloads
//! the library), and reads the report after the target exits. Latencies come from the
//! library's power-of-two histogram, so their percentiles are bucket upper bounds
//! ([`latency`]).
//!
//! This module must never run inside the target or touch its memory: the program reports
//! through a file strobe created for it.

use std::path::{Path, PathBuf};

use strobe_protocol::env;
use strobe_protocol::probe::ProbeRequest;
pub use strobe_protocol::probe::{PointCount, PointReport, PointSite};
use strobe_target::Command;

use crate::latency::Summary;
use crate::Error;

/// The scheme of a probe point argument.
pub const POINT_PREFIX: &str = "point:";

/// The file the probe library writes its exit report to, created by strobe (exclusively,
/// so nobody else's file is overwritten) and removed when dropped.
#[derive(Debug)]
pub struct PointsFile {
    path: PathBuf,
}

impl PointsFile {
    /// Creates an empty report file in the temporary directory.
    pub fn create() -> Result<PointsFile, Error> {
        let dir = std::env::temp_dir();
        for i in 0..100u32 {
            let path = dir.join(format!("strobe-points-{}-{i}.jsonl", std::process::id()));
            match std::fs::OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(_) => return Ok(PointsFile { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(source) => {
                    return Err(Error::Io {
                        what: format!("creating {} for the probe-point report", path.display()),
                        source,
                    })
                }
            }
        }
        Err(Error::Io {
            what: format!("creating a probe-point report file in {}", dir.display()),
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "100 candidate names are taken",
            ),
        })
    }

    /// The report file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Sets the request the probe library reads at load time in `cmd`'s environment:
    /// count the points in `count`, list every site with `list`, report to this file, and
    /// preload `lib` (before any `LD_PRELOAD` strobe itself was given) when the program
    /// does not link it.
    pub fn configure(
        &self,
        cmd: &mut Command,
        count: Option<&[&str]>,
        list: bool,
        lib: Option<&Path>,
    ) -> Result<(), Error> {
        let req = ProbeRequest {
            count: count.unwrap_or_default().iter().map(|n| n.to_string()).collect(),
            list,
            out: Some(self.path.clone().into_os_string()),
            ..ProbeRequest::default()
        };
        for (k, v) in req.to_env()? {
            cmd.env.push((k.into(), v));
        }
        if let Some(lib) = lib {
            let old = cmd.env_var(env::LD_PRELOAD);
            let preload = env::preload_with(lib.as_os_str(), old.as_deref());
            cmd.env.push((env::LD_PRELOAD.into(), preload));
        }
        Ok(())
    }

    /// The report, or `None` when the program wrote none (no probe library in it).
    pub fn read(&self) -> Result<Option<PointReport>, Error> {
        let text = std::fs::read_to_string(&self.path).map_err(|source| Error::Io {
            what: format!("reading the probe-point report {}", self.path.display()),
            source,
        })?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        PointReport::decode(&text)
            .map(Some)
            .map_err(|source| Error::PointReport { path: self.path.clone(), source })
    }
}

impl Drop for PointsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A point's latencies from its histogram: each percentile is the upper bound of the
/// bucket that holds that rank; the mean is exact. None without exits (not a scoped probe).
pub fn latency(c: &PointCount) -> Option<Summary> {
    let count: u64 = c.log2_ns.iter().sum();
    if count == 0 {
        return None;
    }
    let upper = |i: usize| if i >= 63 { u64::MAX } else { (1u64 << (i + 1)) - 1 };
    let lower = |i: usize| if i == 0 { 0 } else { 1u64 << i.min(63) };
    let rank = |q: f64| {
        let want = ((q * count as f64).ceil() as u64).clamp(1, count);
        let mut seen = 0;
        for (i, &n) in c.log2_ns.iter().enumerate() {
            seen += n;
            if seen >= want {
                return upper(i);
            }
        }
        upper(c.log2_ns.len().saturating_sub(1))
    };
    let first = c.log2_ns.iter().position(|&n| n > 0)?;
    let last = c.log2_ns.iter().rposition(|&n| n > 0)?;
    Some(Summary {
        count,
        min: lower(first),
        mean: c.total_ns / count,
        p50: rank(0.5),
        p90: rank(0.9),
        p99: rank(0.99),
        max: upper(last),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_give_bucket_bounds() {
        let mut log2_ns = [0u64; 64];
        log2_ns[10] = 90; // [1024, 2048)
        log2_ns[20] = 10; // [1 Mi, 2 Mi)
        let c = PointCount {
            probe: "req".into(),
            hits: 100,
            exits: 100,
            total_ns: 12_345_600,
            log2_ns,
        };
        let s = latency(&c).unwrap();
        assert_eq!((s.count, s.min, s.mean), (100, 1024, 123_456));
        assert_eq!((s.p50, s.p90, s.p99, s.max), (2047, 2047, (1 << 21) - 1, (1 << 21) - 1));
        let plain =
            PointCount { probe: "x".into(), hits: 5, exits: 0, total_ns: 0, log2_ns: [0; 64] };
        assert_eq!(latency(&plain), None);
    }

    #[test]
    fn a_report_is_read_and_a_bad_one_is_named() {
        let f = PointsFile::create().unwrap();
        let site = PointSite { probe: "req".into(), file: "a.c".into(), line: 7, nargs: 2 };
        let want = PointReport { sites: vec![site], ..PointReport::default() };
        std::fs::write(f.path(), want.encode()).unwrap();
        assert_eq!(f.read().unwrap(), Some(want));
        std::fs::write(f.path(), "not json\n").unwrap();
        let e = f.read().unwrap_err().to_string();
        assert!(e.starts_with("the probe-point report ") && e.contains("line 1: "), "{e}");
    }

    #[test]
    fn configure_sets_the_library_variables_and_keeps_an_earlier_preload() {
        let f = PointsFile::create().unwrap();
        assert!(f.path().exists());
        let mut cmd = Command::new("true", Vec::<String>::new());
        cmd.env.push(("LD_PRELOAD".into(), "/x/agent.so".into()));
        f.configure(&mut cmd, Some(&["a", "b"]), true, Some(Path::new("/lib/probe.so"))).unwrap();
        assert_eq!(cmd.env_var("STROBE_PROBE_COUNT").unwrap(), "a,b");
        assert_eq!(cmd.env_var("STROBE_PROBE_LIST").unwrap(), "1");
        assert_eq!(cmd.env_var("STROBE_PROBE_OUT").unwrap(), f.path().as_os_str());
        assert_eq!(cmd.env_var("LD_PRELOAD").unwrap(), "/lib/probe.so:/x/agent.so");
        assert_eq!(f.read().unwrap(), None, "an empty file: no probe library ran");
        let e = f.configure(&mut cmd, Some(&["a,b"]), false, None).unwrap_err();
        assert!(e.to_string().contains("'a,b' cannot be passed to the program"), "{e}");
        let path = f.path().to_path_buf();
        drop(f);
        assert!(!path.exists(), "removed when dropped");
    }
}
