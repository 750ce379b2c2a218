//! The built-in counting and tracing consumers, driven by environment variables, so that
//! `strobe probe` can enable probe points of a program it launches without the program's
//! cooperation.
//!
//! Read once when the library is loaded (an `.init_array` constructor; also callable as
//! [`init_from_env`]):
//!
//! | variable | effect |
//! |---|---|
//! | `STROBE_PROBE_COUNT=a,b` | attach a counting consumer to probes `a` and `b` (`*`: every Rust site's name) |
//! | `STROBE_PROBE_LIST=1` | at exit, list every registered site |
//! | `STROBE_PROBE_OUT=PATH` | where the exit report goes (default: stderr) |
//! | `STROBE_PROBE_TRACE=a,b` | attach a tracing consumer: one JSON line per hit |
//! | `STROBE_PROBE_TRACE_OUT=PATH` | where trace lines go (default: stderr) |
//!
//! The variables, the exit report and the trace lines are typed in strobe-protocol's
//! `probe` module (which documents them), shared with `strobe probe`, which sets the
//! variables and reads the report. The exit report is JSON lines: the format's version,
//! then per counted probe its `count` line (and an `unknown` line, with a "did you mean"
//! hint, when no site has that name), then with listing one `site` line per site.
//! `hits` counts plain hits and scope entries; `exits` counts scope exits, `total_ns` sums
//! their durations and `log2_ns[i]` counts exits that took `[2^i, 2^(i+1))` ns (`log2_ns[0]`
//! also holds 0 ns), enough for percentiles.
//!
//! Trace lines are written as the hits happen (one `write(2)` each, so lines of concurrent
//! threads never interleave).
//!
//! Both handlers are async-signal-safe: the counter does relaxed atomic adds, the tracer
//! encodes into a stack buffer and calls `write(2)`.
//!
//! Must never: do anything at all when none of the variables is set.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};

use strobe_protocol::probe::{
    LineBuf, PointCount, PointSite, ProbeRequest, ReportLine, TraceKind, TraceLine, VERSION,
};

use crate::{attach, Action, Attachment, Consumer, HitKind};

/// Histogram buckets: one per power of two of nanoseconds.
pub const LOG2_BUCKETS: usize = strobe_protocol::probe::LOG2_BUCKETS;

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

    /// The counts as they are now, as the exit report carries them.
    pub fn snapshot(&self) -> PointCount {
        PointCount {
            probe: self.probe.clone(),
            hits: self.hits(),
            exits: self.exits(),
            total_ns: self.total_ns.load(Ordering::Relaxed),
            log2_ns: std::array::from_fn(|i| self.log2_ns[i].load(Ordering::Relaxed)),
        }
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

/// The tracing consumer's file descriptor (stderr unless
/// `STROBE_PROBE_TRACE_OUT` names a file).
static TRACE_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(2);

/// Encodes one trace line for `hit` and writes it with one `write(2)`.
/// Async-signal-safe: no allocation, no lock.
fn trace_hit(hit: &crate::Hit<'_>) {
    let kind = match hit.kind {
        HitKind::Fire => TraceKind::Fire,
        HitKind::Entry => TraceKind::Entry,
        HitKind::Exit { ns } => TraceKind::Exit { dur_ns: ns },
    };
    let mut l = LineBuf::<512>::new();
    TraceLine {
        probe: hit.name(),
        // SAFETY: gettid has no preconditions.
        tid: unsafe { libc::gettid() } as u64,
        ns: crate::now_ns(),
        kind,
        args: hit.args,
    }
    .encode(&mut l);
    let fd = TRACE_FD.load(Ordering::Relaxed);
    let out = l.as_bytes();
    // SAFETY: writing initialised bytes from a live buffer; a failed write
    // loses this line only.
    unsafe { libc::write(fd, out.as_ptr().cast(), out.len()) };
}

/// Attaches a tracing consumer to `name`: one JSON line per hit on the trace
/// descriptor (see the module note).
///
/// # Errors
/// As [`attach`].
pub fn attach_tracer(name: &str) -> Result<Attachment, crate::ProbeError> {
    attach(
        name,
        Consumer::new(|hit| {
            trace_hit(hit);
            Action::Keep
        }),
    )
}

struct EnvState {
    _tracers: Vec<Attachment>,
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
        let req = ProbeRequest::from_env(|k| std::env::var_os(k));
        if !req.is_active() {
            return;
        }
        if let Some(path) = &req.trace_out {
            use std::os::unix::io::IntoRawFd;
            if let Ok(f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
                // Relaxed: set before any tracer is attached (the attach
                // publishes it with the consumer list's Release).
                TRACE_FD.store(f.into_raw_fd(), Ordering::Relaxed);
            }
        }
        let tracers =
            expand_names(&req.trace).iter().filter_map(|n| attach_tracer(n).ok()).collect();
        let counters =
            expand_names(&req.count).iter().filter_map(|n| attach_counter(n).ok()).collect();
        let st = EnvState { _tracers: tracers, counters, list: req.list, out: req.out };
        *STATE.lock().unwrap_or_else(|e| e.into_inner()) = Some(st);
        // SAFETY: registering a plain extern "C" function with no arguments.
        unsafe { libc::atexit(at_exit) };
    });
}

/// The requested names with `*` standing for every Rust site's name, sorted, each once.
fn expand_names(list: &[String]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for n in list {
        if n == "*" {
            names.extend(crate::probe_names());
        } else {
            names.push(n.clone());
        }
    }
    names.sort();
    names.dedup();
    names
}

/// The exit report as text (JSON lines), or None when nothing was asked.
pub fn report() -> Option<String> {
    let st = STATE.lock().unwrap_or_else(|e| e.into_inner());
    let st = st.as_ref()?;
    let mut out = String::new();
    ReportLine::Version(VERSION).encode(&mut out);
    let known = crate::probe_names();
    for (c, _) in &st.counters {
        ReportLine::Count(Box::new(c.snapshot())).encode(&mut out);
        if !known.contains(&c.probe) {
            let hint = match crate::ProbeError::unknown(&c.probe, &known) {
                crate::ProbeError::UnknownProbe { hint, .. } => hint,
                crate::ProbeError::BadName => String::new(),
            };
            ReportLine::Unknown { probe: c.probe.clone(), hint }.encode(&mut out);
        }
    }
    if st.list {
        for s in crate::sites() {
            let site = PointSite {
                probe: s.name,
                file: s.file,
                line: u64::from(s.line),
                nargs: s.nargs as u64,
            };
            ReportLine::Site(site).encode(&mut out);
        }
    }
    Some(out)
}

extern "C" fn at_exit() {
    // No unwinding out of an atexit handler.
    let _ = std::panic::catch_unwind(|| {
        let Some(text) = report() else { return };
        let out =
            STATE.lock().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(|s| s.out.clone());
        if let Some(path) = out {
            match std::fs::write(&path, &text) {
                Ok(()) => return,
                Err(e) => {
                    let _ = writeln!(
                        std::io::stderr(),
                        "strobe-probe: cannot write {}: {e}; the report follows",
                        std::path::Path::new(&path).display()
                    );
                }
            }
        }
        let _ = std::io::stderr().write_all(text.as_bytes());
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
