//! The built-in counting consumer, driven by environment variables, so that
//! `strobe probe` can enable probe points of a program it launches without
//! the program's cooperation.
//!
//! Read once when the library is loaded (an `.init_array` constructor; also
//! callable as [`init_from_env`]):
//!
//! | variable | effect |
//! |---|---|
//! | `STROBE_PROBE_COUNT=a,b` | attach a counting consumer to probes `a` and `b` (`*`: every Rust site's name) |
//! | `STROBE_PROBE_LIST=1` | at exit, list every registered site |
//! | `STROBE_PROBE_OUT=PATH` | where the exit report goes (default: stderr) |
//!
//! The exit report is JSON lines:
//!
//! ```text
//! {"type":"count","probe":"NAME","hits":N,"exits":N,"total_ns":N,"log2_ns":[c0,c1,...]}
//! {"type":"site","probe":"NAME","file":"F","line":L,"nargs":K}
//! {"type":"unknown","probe":"NAME","hint":" (did you mean X?)"}
//! ```
//!
//! `hits` counts plain hits and scope entries; `exits` counts scope exits,
//! `total_ns` sums their durations and `log2_ns[i]` counts exits that took
//! `[2^i, 2^(i+1))` ns (`log2_ns[0]` also holds 0 ns), enough for percentiles.
//! `unknown` lines name requested probes that never got a site.
//!
//! The counting handler is async-signal-safe (relaxed atomic adds only).
//!
//! Must never: do anything at all when none of the variables is set.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};

use crate::{attach, Action, Attachment, Consumer, HitKind};

/// Histogram buckets: one per power of two of nanoseconds.
pub const LOG2_BUCKETS: usize = 64;

/// Counts of one probe, as the counting consumer keeps them.
#[derive(Debug)]
pub struct Counts {
    /// The probe's name.
    pub probe: String,
    hits: AtomicU64,
    exits: AtomicU64,
    total_ns: AtomicU64,
    log2_ns: [AtomicU64; LOG2_BUCKETS],
}

impl Counts {
    fn new(probe: &str) -> Self {
        Counts {
            probe: probe.to_string(),
            hits: AtomicU64::new(0),
            exits: AtomicU64::new(0),
            total_ns: AtomicU64::new(0),
            log2_ns: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Plain hits plus scope entries.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// Scope exits.
    pub fn exits(&self) -> u64 {
        self.exits.load(Ordering::Relaxed)
    }

    fn record(&self, kind: HitKind) {
        // Relaxed: independent counters read after the threads that fired
        // are done (at exit), nothing is published through them.
        match kind {
            HitKind::Fire | HitKind::Entry => {
                self.hits.fetch_add(1, Ordering::Relaxed);
            }
            HitKind::Exit { ns } => {
                self.exits.fetch_add(1, Ordering::Relaxed);
                self.total_ns.fetch_add(ns, Ordering::Relaxed);
                let b = (63 - ns.max(1).leading_zeros()) as usize;
                if let Some(c) = self.log2_ns.get(b) {
                    c.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// One JSON line (without the newline).
    pub fn to_json_line(&self) -> String {
        let hist: Vec<String> =
            self.log2_ns.iter().map(|c| c.load(Ordering::Relaxed).to_string()).collect();
        format!(
            "{{\"type\":\"count\",\"probe\":{},\"hits\":{},\"exits\":{},\"total_ns\":{},\"log2_ns\":[{}]}}",
            json_str(&self.probe),
            self.hits(),
            self.exits(),
            self.total_ns.load(Ordering::Relaxed),
            hist.join(",")
        )
    }
}

/// Attaches a counting consumer to `name` and returns its counts (kept alive
/// by the consumer and by the returned `Arc`).
///
/// # Errors
/// As [`attach`].
pub fn attach_counter(
    name: &str,
) -> Result<(std::sync::Arc<Counts>, Attachment), crate::ProbeError> {
    let counts = std::sync::Arc::new(Counts::new(name));
    let c = counts.clone();
    let a = attach(
        name,
        Consumer::new(move |hit| {
            c.record(hit.kind);
            Action::Keep
        }),
    )?;
    Ok((counts, a))
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

struct EnvState {
    counters: Vec<(std::sync::Arc<Counts>, Attachment)>,
    list: bool,
    out: Option<std::ffi::OsString>,
}

static STATE: Mutex<Option<EnvState>> = Mutex::new(None);
static INIT: Once = Once::new();

/// Reads the `STROBE_PROBE_*` variables and sets up counting and listing.
/// Runs once per process (later calls do nothing); the library's load-time
/// constructor calls it.
pub fn init_from_env() {
    INIT.call_once(|| {
        let count = std::env::var("STROBE_PROBE_COUNT").ok().filter(|s| !s.is_empty());
        let list = std::env::var_os("STROBE_PROBE_LIST").is_some_and(|v| !v.is_empty() && v != "0");
        if count.is_none() && !list {
            return;
        }
        let mut names: Vec<String> = Vec::new();
        for n in count.iter().flat_map(|c| c.split(',')).map(str::trim).filter(|n| !n.is_empty()) {
            if n == "*" {
                names.extend(crate::probe_names());
            } else {
                names.push(n.to_string());
            }
        }
        names.sort();
        names.dedup();
        let counters = names.iter().filter_map(|n| attach_counter(n).ok()).collect();
        let st = EnvState { counters, list, out: std::env::var_os("STROBE_PROBE_OUT") };
        *STATE.lock().unwrap_or_else(|e| e.into_inner()) = Some(st);
        // SAFETY: registering a plain extern "C" function with no arguments.
        unsafe { libc::atexit(at_exit) };
    });
}

/// The exit report as text (JSON lines), or None when nothing was asked.
pub fn report() -> Option<String> {
    let st = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let st = st.as_ref()?;
    let mut out = String::new();
    let known = crate::probe_names();
    for (c, _) in &st.counters {
        out.push_str(&c.to_json_line());
        out.push('\n');
        if !known.contains(&c.probe) {
            let hint = match crate::ProbeError::unknown(&c.probe, &known) {
                crate::ProbeError::UnknownProbe { hint, .. } => hint,
                crate::ProbeError::BadName => String::new(),
            };
            out.push_str(&format!(
                "{{\"type\":\"unknown\",\"probe\":{},\"hint\":{}}}\n",
                json_str(&c.probe),
                json_str(&hint)
            ));
        }
    }
    if st.list {
        for s in crate::sites() {
            out.push_str(&format!(
                "{{\"type\":\"site\",\"probe\":{},\"file\":{},\"line\":{},\"nargs\":{}}}\n",
                json_str(&s.name),
                json_str(&s.file),
                s.line,
                s.nargs
            ));
        }
    }
    Some(out)
}

extern "C" fn at_exit() {
    // No unwinding out of an atexit handler.
    let _ = std::panic::catch_unwind(|| {
        let Some(text) = report() else { return };
        let out = STATE.lock().ok().and_then(|s| s.as_ref().and_then(|s| s.out.clone()));
        let written = match out {
            Some(path) => std::fs::write(&path, &text).is_ok(),
            None => false,
        };
        if !written {
            let _ = std::io::stderr().write_all(text.as_bytes());
        }
    });
}

extern "C" fn load_ctor() {
    // No unwinding out of a constructor.
    let _ = std::panic::catch_unwind(init_from_env);
}

/// Runs [`init_from_env`] when the program (or the shared library holding
/// this crate) is loaded.
#[used]
#[link_section = ".init_array"]
static LOAD_CTOR: extern "C" fn() = load_ctor;
