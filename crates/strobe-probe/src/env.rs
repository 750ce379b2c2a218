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
//! | `STROBE_PROBE_TRACE=a,b` | attach a tracing consumer: one JSON line per hit |
//! | `STROBE_PROBE_TRACE_OUT=PATH` | where trace lines go (default: stderr) |
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
//! Trace lines, written as the hits happen (one `write(2)` each, so lines of
//! concurrent threads never interleave):
//!
//! ```text
//! {"type":"hit","probe":"NAME","tid":T,"ns":CLOCK_MONOTONIC,"kind":"fire","args":[a,b]}
//! {"type":"hit","probe":"NAME","tid":T,"ns":N,"kind":"exit","dur_ns":D,"args":[]}
//! ```
//!
//! Both handlers are async-signal-safe: the counter does relaxed atomic adds,
//! the tracer formats into a stack buffer and calls `write(2)`.
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

/// The tracing consumer's file descriptor (stderr unless
/// `STROBE_PROBE_TRACE_OUT` names a file).
static TRACE_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(2);

/// A fixed buffer that formats without allocating (truncates when full).
struct LineBuf {
    buf: [u8; 512],
    len: usize,
}

impl LineBuf {
    fn new() -> Self {
        LineBuf { buf: [0; 512], len: 0 }
    }

    fn bytes(&mut self, b: &[u8]) {
        for &c in b {
            if let Some(slot) = self.buf.get_mut(self.len) {
                *slot = c;
                self.len += 1;
            }
        }
    }

    fn num(&mut self, mut v: u64) {
        let mut d = [0u8; 20];
        let mut i = d.len();
        loop {
            i -= 1;
            if let Some(x) = d.get_mut(i) {
                *x = b'0' + (v % 10) as u8;
            }
            v /= 10;
            if v == 0 || i == 0 {
                break;
            }
        }
        self.bytes(d.get(i..).unwrap_or(&[]));
    }

    /// A JSON string body (quotes and backslashes escaped, controls dropped).
    fn json_str(&mut self, s: &str) {
        self.bytes(b"\"");
        for &c in s.as_bytes() {
            match c {
                b'"' | b'\\' => self.bytes(&[b'\\', c]),
                c if c < 0x20 => {}
                c => self.bytes(&[c]),
            }
        }
        self.bytes(b"\"");
    }
}

/// Formats one trace line for `hit` and writes it with one `write(2)`.
/// Async-signal-safe: no allocation, no lock.
fn trace_hit(hit: &crate::Hit<'_>) {
    let mut l = LineBuf::new();
    l.bytes(b"{\"type\":\"hit\",\"probe\":");
    l.json_str(hit.name());
    l.bytes(b",\"tid\":");
    // SAFETY: gettid has no preconditions.
    l.num(unsafe { libc::gettid() } as u64);
    l.bytes(b",\"ns\":");
    l.num(crate::now_ns());
    match hit.kind {
        HitKind::Fire => l.bytes(b",\"kind\":\"fire\""),
        HitKind::Entry => l.bytes(b",\"kind\":\"entry\""),
        HitKind::Exit { ns } => {
            l.bytes(b",\"kind\":\"exit\",\"dur_ns\":");
            l.num(ns);
        }
    }
    l.bytes(b",\"args\":[");
    for (i, a) in hit.args.iter().enumerate() {
        if i > 0 {
            l.bytes(b",");
        }
        l.num(*a);
    }
    l.bytes(b"]}\n");
    let fd = TRACE_FD.load(Ordering::Relaxed);
    let out = l.buf.get(..l.len).unwrap_or(&[]);
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
        let count = std::env::var("STROBE_PROBE_COUNT").ok().filter(|s| !s.is_empty());
        let list = std::env::var_os("STROBE_PROBE_LIST").is_some_and(|v| !v.is_empty() && v != "0");
        let trace = std::env::var("STROBE_PROBE_TRACE").ok().filter(|s| !s.is_empty());
        if count.is_none() && !list && trace.is_none() {
            return;
        }
        if let Some(path) = std::env::var_os("STROBE_PROBE_TRACE_OUT") {
            use std::os::unix::io::IntoRawFd;
            if let Ok(f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
                // Relaxed: set before any tracer is attached (the attach
                // publishes it with the consumer list's Release).
                TRACE_FD.store(f.into_raw_fd(), Ordering::Relaxed);
            }
        }
        let tracers =
            split_names(trace.as_deref()).iter().filter_map(|n| attach_tracer(n).ok()).collect();
        let names = split_names(count.as_deref());
        let counters = names.iter().filter_map(|n| attach_counter(n).ok()).collect();
        let st = EnvState {
            _tracers: tracers,
            counters,
            list,
            out: std::env::var_os("STROBE_PROBE_OUT"),
        };
        *STATE.lock().unwrap_or_else(|e| e.into_inner()) = Some(st);
        // SAFETY: registering a plain extern "C" function with no arguments.
        unsafe { libc::atexit(at_exit) };
    });
}

/// Probe names from a comma-separated list; `*` stands for every Rust site's name.
fn split_names(list: Option<&str>) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for n in list.into_iter().flat_map(|c| c.split(',')).map(str::trim).filter(|n| !n.is_empty()) {
        if n == "*" {
            names.extend(crate::probe_names());
        } else {
            names.push(n.to_string());
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
