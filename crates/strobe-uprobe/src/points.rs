//! The host side of in-program probe points (`point:NAME`): asking the program's probe
//! library to count or list them, and reading what it reports at exit.
//!
//! Probe points are declared inside the program with strobe-probe (Rust macro) or
//! `strobe_probe.h` (C), and the probe library itself attaches the consumers: it reads
//! `STROBE_PROBE_COUNT=a,b` (attach counting consumers), `STROBE_PROBE_LIST=1` (list every
//! site) and `STROBE_PROBE_OUT=FILE` when it loads, and at exit writes JSON lines to FILE
//! (the format is documented in strobe-probe's `env.rs`):
//! `{"type":"count","probe","hits","exits","total_ns","log2_ns":[...]}`,
//! `{"type":"site","probe","file","line","nargs"}` and `{"type":"unknown","probe","hint"}`.
//! [`PointsFile`] creates FILE, sets those variables in the target's environment (and,
//! for programs built with `STROBE_PROBE_OPTIONAL`, preloads the library), and parses the
//! report after the target exits. Latencies come from the library's power-of-two
//! histogram, so their percentiles are bucket upper bounds.
//!
//! This module must never run inside the target or touch its memory: the program reports
//! through a file strobe created for it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

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

    /// Sets the variables the probe library reads at load time in `cmd`'s environment:
    /// count the points in `count`, list every site with `list`, and preload `lib` (before
    /// any `LD_PRELOAD` strobe itself was given) when the program does not link it.
    pub fn configure(
        &self,
        cmd: &mut Command,
        count: Option<&[&str]>,
        list: bool,
        lib: Option<&Path>,
    ) {
        if let Some(names) = count {
            cmd.env.push(("STROBE_PROBE_COUNT".into(), names.join(",").into()));
        }
        if list {
            cmd.env.push(("STROBE_PROBE_LIST".into(), "1".into()));
        }
        cmd.env.push(("STROBE_PROBE_OUT".into(), self.path.clone().into_os_string()));
        if let Some(lib) = lib {
            let mut preload = OsString::from(lib.as_os_str());
            if let Some(old) = cmd.env_var("LD_PRELOAD").filter(|v| !v.is_empty()) {
                preload.push(":");
                preload.push(old);
            }
            cmd.env.push(("LD_PRELOAD".into(), preload));
        }
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
        PointReport::parse(&text)
            .map(Some)
            .map_err(|why| Error::PointReport { path: self.path.clone(), why })
    }
}

impl Drop for PointsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One probe point's counts, as the probe library reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointCount {
    /// The point's name.
    pub probe: String,
    /// Plain hits and scope entries.
    pub hits: u64,
    /// Scope exits.
    pub exits: u64,
    /// Sum of the scopes' durations.
    pub total_ns: u64,
    /// `log2_ns[i]`: exits that took `[2^i, 2^(i+1))` ns (bucket 0 also holds 0 ns).
    pub log2_ns: Vec<u64>,
}

impl PointCount {
    /// Percentiles from the histogram: each is the upper bound of the bucket that holds
    /// that rank; the mean is exact. None without exits (not a scoped probe).
    pub fn summary(&self) -> Option<Summary> {
        let count: u64 = self.log2_ns.iter().sum();
        if count == 0 {
            return None;
        }
        let upper = |i: usize| if i >= 63 { u64::MAX } else { (1u64 << (i + 1)) - 1 };
        let lower = |i: usize| if i == 0 { 0 } else { 1u64 << i.min(63) };
        let rank = |q: f64| {
            let want = ((q * count as f64).ceil() as u64).clamp(1, count);
            let mut seen = 0;
            for (i, &n) in self.log2_ns.iter().enumerate() {
                seen += n;
                if seen >= want {
                    return upper(i);
                }
            }
            upper(self.log2_ns.len().saturating_sub(1))
        };
        let first = self.log2_ns.iter().position(|&n| n > 0)?;
        let last = self.log2_ns.iter().rposition(|&n| n > 0)?;
        Some(Summary {
            count,
            min: lower(first),
            mean: self.total_ns / count,
            p50: rank(0.5),
            p90: rank(0.9),
            p99: rank(0.99),
            max: upper(last),
        })
    }
}

/// A probe point declared by the program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointSite {
    /// The point's name.
    pub probe: String,
    /// Where it is declared.
    pub file: String,
    /// The line.
    pub line: u64,
    /// How many arguments it passes.
    pub nargs: u64,
}

/// What the probe library wrote at the program's exit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PointReport {
    /// Counts of the requested points.
    pub counts: Vec<PointCount>,
    /// Every site (with `STROBE_PROBE_LIST`).
    pub sites: Vec<PointSite>,
    /// Requested names the program does not declare, with a "did you mean" hint.
    pub unknown: Vec<(String, String)>,
}

impl PointReport {
    /// Parses the JSON lines; lines of unknown types are skipped (a newer library). The
    /// error names the first line that is not JSON.
    pub fn parse(text: &str) -> Result<PointReport, String> {
        let mut r = PointReport::default();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(|e| format!("{e}: {line}"))?;
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            let n = |k: &str| v[k].as_u64().unwrap_or(0);
            match v["type"].as_str() {
                Some("count") => r.counts.push(PointCount {
                    probe: s("probe"),
                    hits: n("hits"),
                    exits: n("exits"),
                    total_ns: n("total_ns"),
                    log2_ns: v["log2_ns"]
                        .as_array()
                        .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(0)).collect())
                        .unwrap_or_default(),
                }),
                Some("site") => r.sites.push(PointSite {
                    probe: s("probe"),
                    file: s("file"),
                    line: n("line"),
                    nargs: n("nargs"),
                }),
                Some("unknown") => r.unknown.push((s("probe"), s("hint"))),
                _ => {}
            }
        }
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn point_reports_parse_and_histograms_give_bucket_bounds() {
        let mut hist = vec![0u64; 64];
        hist[10] = 90; // [1024, 2048)
        hist[20] = 10; // [1 Mi, 2 Mi)
        let count = serde_json::json!({
            "type": "count", "probe": "req", "hits": 100, "exits": 100,
            "total_ns": 12_345_600u64, "log2_ns": hist,
        });
        let text = format!(
            "{count}\n\
             {{\"type\":\"site\",\"probe\":\"req\",\"file\":\"a.c\",\"line\":7,\"nargs\":2}}\n\
             {{\"type\":\"unknown\",\"probe\":\"rq\",\"hint\":\" (did you mean req?)\"}}\n\
             {{\"type\":\"future\"}}\n"
        );
        let r = PointReport::parse(&text).unwrap();
        assert_eq!(r.counts.len(), 1);
        let site = PointSite { probe: "req".into(), file: "a.c".into(), line: 7, nargs: 2 };
        assert_eq!(r.sites, vec![site]);
        assert_eq!(r.unknown, vec![("rq".to_string(), " (did you mean req?)".to_string())]);
        let s = r.counts[0].summary().unwrap();
        assert_eq!((s.count, s.min, s.mean), (100, 1024, 123_456));
        assert_eq!((s.p50, s.p90, s.p99, s.max), (2047, 2047, (1 << 21) - 1, (1 << 21) - 1));
        let plain =
            PointCount { probe: "x".into(), hits: 5, exits: 0, total_ns: 0, log2_ns: vec![0; 64] };
        assert_eq!(plain.summary(), None);
        assert!(PointReport::parse("not json").unwrap_err().contains("not json"));
    }

    #[test]
    fn configure_sets_the_library_variables_and_keeps_an_earlier_preload() {
        let f = PointsFile::create().unwrap();
        assert!(f.path().exists());
        let mut cmd = Command::new("true", Vec::<String>::new());
        cmd.env.push(("LD_PRELOAD".into(), "/x/agent.so".into()));
        f.configure(&mut cmd, Some(&["a", "b"]), true, Some(Path::new("/lib/probe.so")));
        assert_eq!(cmd.env_var("STROBE_PROBE_COUNT").unwrap(), "a,b");
        assert_eq!(cmd.env_var("STROBE_PROBE_LIST").unwrap(), "1");
        assert_eq!(cmd.env_var("STROBE_PROBE_OUT").unwrap(), f.path().as_os_str());
        assert_eq!(cmd.env_var("LD_PRELOAD").unwrap(), "/lib/probe.so:/x/agent.so");
        assert_eq!(f.read().unwrap(), None, "an empty file: no probe library ran");
        let path = f.path().to_path_buf();
        drop(f);
        assert!(!path.exists(), "removed when dropped");
    }
}
