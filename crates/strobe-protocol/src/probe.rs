//! What crosses between `strobe probe` and the probe library (strobe-probe, linked into the
//! program or preloaded as `libstrobe_probe_c.so`), typed once for both ends:
//!
//! - the **request** ([`ProbeRequest`]): the `STROBE_PROBE_*` variables (named in
//!   [`crate::env`]), which a user may also set by hand. [`ProbeRequest::to_env`] writes
//!   them, [`ProbeRequest::from_env`] reads them;
//! - the **exit report** the library writes to `STROBE_PROBE_OUT` (or stderr): JSON lines,
//!   the first naming the format's version, then one line per count, unknown name and site
//!   ([`ReportLine`]); strobe reads it with [`PointReport::decode`] and refuses a foreign
//!   version;
//! - the **trace lines** the library writes per hit to `STROBE_PROBE_TRACE_OUT` (or stderr),
//!   read by people and tools rather than by strobe: [`TraceLine`], encoded into a fixed
//!   buffer ([`LineBuf`]) because they are written on the probe's trigger path.
//!
//! ```text
//! {"type":"report","version":1}
//! {"type":"count","probe":"NAME","hits":N,"exits":N,"total_ns":N,"log2_ns":[c0,...,c63]}
//! {"type":"unknown","probe":"NAME","hint":" (did you mean X?)"}
//! {"type":"site","probe":"NAME","file":"F","line":L,"nargs":K}
//! {"type":"hit","probe":"NAME","tid":T,"ns":N,"kind":"fire","args":[a,b]}
//! {"type":"hit","probe":"NAME","tid":T,"ns":N,"kind":"exit","dur_ns":D,"args":[]}
//! ```
//!
//! Unlike the agent, the probe library is built into the user's program, possibly by
//! another version of strobe: the report's version line is a real check.
//!
//! Owns: these formats, their JSON (strings escaped as JSON requires, numbers unsigned),
//! and their round-trip tests. Must never: allocate on the trace path ([`TraceLine::encode`]
//! writes into a caller's [`LineBuf`]); decide what to probe or how to show it; panic on
//! any report (every malformed line is a [`ReportError`] naming it).

use std::ffi::OsString;

use crate::env;

/// The version of the exit report.
pub const VERSION: u64 = 1;

/// Histogram buckets of a count: one per power of two of nanoseconds.
pub const LOG2_BUCKETS: usize = 64;

// ---------------------------------------------------------------------------------------
// The request

/// What the probe library is asked to do when it loads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeRequest {
    /// Attach a counting consumer to these points (`*`: every Rust site's name).
    pub count: Vec<String>,
    /// At exit, list every registered site.
    pub list: bool,
    /// Where the exit report goes (stderr when unset).
    pub out: Option<OsString>,
    /// Attach a tracing consumer to these points: one line per hit.
    pub trace: Vec<String>,
    /// Where trace lines go (stderr when unset).
    pub trace_out: Option<OsString>,
}

/// A request that cannot be put in the environment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// A name the list syntax cannot carry.
    #[error(
        "the probe point name '{0}' cannot be passed to the program: a name is not empty, has \
         no ',' and no space at either end"
    )]
    BadName(String),
}

/// The names of a list variable (`a,b`): split at commas, trimmed, empty ones dropped.
fn names(v: Option<OsString>) -> Vec<String> {
    let Some(text) = v.and_then(|v| v.into_string().ok()) else { return Vec::new() };
    text.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_string).collect()
}

fn join(names: &[String]) -> Result<OsString, RequestError> {
    for n in names {
        if n.is_empty() || n.contains(',') || n.trim() != n {
            return Err(RequestError::BadName(n.clone()));
        }
    }
    Ok(names.join(",").into())
}

impl ProbeRequest {
    /// Whether the library has anything to do (it does nothing at all otherwise).
    pub fn is_active(&self) -> bool {
        !self.count.is_empty() || self.list || !self.trace.is_empty()
    }

    /// The variables to set, each once; unset fields set nothing.
    pub fn to_env(&self) -> Result<Vec<(&'static str, OsString)>, RequestError> {
        let mut v = Vec::new();
        if !self.count.is_empty() {
            v.push((env::PROBE_COUNT, join(&self.count)?));
        }
        if self.list {
            v.push((env::PROBE_LIST, "1".into()));
        }
        if let Some(out) = &self.out {
            v.push((env::PROBE_OUT, out.clone()));
        }
        if !self.trace.is_empty() {
            v.push((env::PROBE_TRACE, join(&self.trace)?));
        }
        if let Some(out) = &self.trace_out {
            v.push((env::PROBE_TRACE_OUT, out.clone()));
        }
        Ok(v)
    }

    /// Reads the request from variables `var` looks up (`std::env::var_os` for the
    /// process's own). Lists that are not UTF-8 read as empty; `STROBE_PROBE_LIST` is on
    /// unless it is unset, empty or `0`.
    pub fn from_env(var: impl Fn(&str) -> Option<OsString>) -> ProbeRequest {
        ProbeRequest {
            count: names(var(env::PROBE_COUNT)),
            list: var(env::PROBE_LIST).is_some_and(|v| !v.is_empty() && v != "0"),
            out: var(env::PROBE_OUT),
            trace: names(var(env::PROBE_TRACE)),
            trace_out: var(env::PROBE_TRACE_OUT),
        }
    }
}

// ---------------------------------------------------------------------------------------
// JSON output, into a growing string or a fixed buffer

/// Where encoded text goes.
pub trait Sink {
    /// Appends `s`.
    fn put(&mut self, s: &str);
}

impl Sink for String {
    fn put(&mut self, s: &str) {
        self.push_str(s);
    }
}

/// A fixed buffer that encodes without allocating; text past its end is dropped and the
/// line marked cut.
#[derive(Debug, Clone)]
pub struct LineBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
    cut: bool,
}

impl<const N: usize> LineBuf<N> {
    /// An empty buffer.
    pub fn new() -> Self {
        LineBuf { buf: [0; N], len: 0, cut: false }
    }

    /// The bytes written (a cut line ends where the buffer did).
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }

    /// Whether text was dropped.
    pub fn is_cut(&self) -> bool {
        self.cut
    }
}

impl<const N: usize> Default for LineBuf<N> {
    fn default() -> Self {
        LineBuf::new()
    }
}

impl<const N: usize> Sink for LineBuf<N> {
    fn put(&mut self, s: &str) {
        for &c in s.as_bytes() {
            match self.buf.get_mut(self.len) {
                Some(slot) => {
                    *slot = c;
                    self.len += 1;
                }
                None => self.cut = true,
            }
        }
    }
}

/// A number in decimal.
fn num(out: &mut impl Sink, mut v: u64) {
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
    // Digits are ASCII.
    out.put(std::str::from_utf8(d.get(i..).unwrap_or_default()).unwrap_or_default());
}

/// A JSON string: quotes and backslashes escaped, control characters as `\u00XX`.
fn string(out: &mut impl Sink, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.put("\"");
    // Text since the last escape, written in one piece.
    let mut run = 0;
    for (i, c) in s.char_indices() {
        let control;
        let esc = match c {
            '"' => "\\\"",
            '\\' => "\\\\",
            c if (c as u32) < 0x20 => {
                let b = c as u8;
                control =
                    [b'\\', b'u', b'0', b'0', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]];
                // ASCII.
                std::str::from_utf8(&control).unwrap_or_default()
            }
            _ => continue,
        };
        out.put(s.get(run..i).unwrap_or_default());
        out.put(esc);
        run = i + c.len_utf8();
    }
    out.put(s.get(run..).unwrap_or_default());
    out.put("\"");
}

fn key(out: &mut impl Sink, k: &str) {
    out.put(",\"");
    out.put(k);
    out.put("\":");
}

fn nums(out: &mut impl Sink, v: &[u64]) {
    out.put("[");
    for (i, &x) in v.iter().enumerate() {
        if i > 0 {
            out.put(",");
        }
        num(out, x);
    }
    out.put("]");
}

// ---------------------------------------------------------------------------------------
// JSON input: the flat objects above, nothing more

/// A field's value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Value {
    Str(String),
    Num(u64),
    Nums(Vec<u64>),
}

struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\r')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Result<(), &'static str> {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.at += 1;
            Ok(())
        } else {
            Err(match c {
                b'{' => "a line is one JSON object: '{' expected",
                b'}' => "'}' or ',' expected",
                b':' => "':' expected after a key",
                b'"' => "a string expected",
                _ => "unexpected character",
            })
        }
    }

    fn num(&mut self) -> Result<u64, &'static str> {
        self.skip_ws();
        let start = self.at;
        let mut v: u64 = 0;
        while let Some(c @ b'0'..=b'9') = self.peek() {
            v = v
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(c - b'0')))
                .ok_or("a number larger than 2^64 - 1")?;
            self.at += 1;
        }
        if self.at == start {
            return Err("an unsigned number expected");
        }
        Ok(v)
    }

    fn hex4(&mut self) -> Result<u32, &'static str> {
        let h = self.s.get(self.at..self.at + 4).ok_or("four hex digits after \\u")?;
        let h = std::str::from_utf8(h).map_err(|_| "four hex digits after \\u")?;
        let v = u32::from_str_radix(h, 16).map_err(|_| "four hex digits after \\u")?;
        self.at += 4;
        Ok(v)
    }

    fn string(&mut self) -> Result<String, &'static str> {
        self.eat(b'"')?;
        let mut out = Vec::new();
        loop {
            let c = self.peek().ok_or("an unterminated string")?;
            self.at += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let e = self.peek().ok_or("an unterminated string")?;
                    self.at += 1;
                    let ch = match e {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let hi = self.hex4()?;
                            let code = if (0xd800..0xdc00).contains(&hi) {
                                if self.s.get(self.at..self.at + 2) != Some(b"\\u") {
                                    return Err("a surrogate pair cut in half");
                                }
                                self.at += 2;
                                let lo = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&lo) {
                                    return Err("a surrogate pair cut in half");
                                }
                                0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                            } else {
                                hi
                            };
                            char::from_u32(code).ok_or("an escaped character that is not one")?
                        }
                        _ => return Err("an unknown escape in a string"),
                    };
                    let mut b = [0u8; 4];
                    out.extend_from_slice(ch.encode_utf8(&mut b).as_bytes());
                }
                c if c < 0x20 => return Err("a control character in a string"),
                c => out.push(c),
            }
        }
        // The line is a &str, and escapes add whole characters.
        String::from_utf8(out).map_err(|_| "a string that is not UTF-8")
    }

    fn value(&mut self) -> Result<Value, &'static str> {
        self.skip_ws();
        match self.peek() {
            Some(b'"') => Ok(Value::Str(self.string()?)),
            Some(b'[') => {
                self.at += 1;
                let mut v = Vec::new();
                self.skip_ws();
                if self.peek() == Some(b']') {
                    self.at += 1;
                    return Ok(Value::Nums(v));
                }
                loop {
                    v.push(self.num()?);
                    self.skip_ws();
                    match self.peek() {
                        Some(b',') => self.at += 1,
                        Some(b']') => {
                            self.at += 1;
                            return Ok(Value::Nums(v));
                        }
                        _ => return Err("',' or ']' expected in a list of numbers"),
                    }
                }
            }
            _ => Ok(Value::Num(self.num()?)),
        }
    }
}

/// The fields of one flat JSON object, in order.
fn object(line: &str) -> Result<Vec<(String, Value)>, &'static str> {
    let mut p = Parser { s: line.as_bytes(), at: 0 };
    p.eat(b'{')?;
    let mut fields: Vec<(String, Value)> = Vec::new();
    p.skip_ws();
    if p.peek() == Some(b'}') {
        p.at += 1;
    } else {
        loop {
            let k = p.string()?;
            p.eat(b':')?;
            let v = p.value()?;
            if fields.iter().any(|(have, _)| *have == k) {
                return Err("a key given twice");
            }
            fields.push((k, v));
            p.skip_ws();
            match p.peek() {
                Some(b',') => p.at += 1,
                Some(b'}') => {
                    p.at += 1;
                    break;
                }
                _ => return Err("'}' or ',' expected"),
            }
        }
    }
    p.skip_ws();
    if p.at != line.len() {
        return Err("text after the object");
    }
    Ok(fields)
}

/// The fields of an object of a known type, taken by name; what is left over is an error.
struct Fields(Vec<(String, Value)>);

impl Fields {
    fn take(&mut self, k: &'static str) -> Result<Value, ReportError> {
        let i = self.0.iter().position(|(have, _)| have == k).ok_or(ReportError::Missing(k))?;
        Ok(self.0.swap_remove(i).1)
    }

    fn str(&mut self, k: &'static str) -> Result<String, ReportError> {
        match self.take(k)? {
            Value::Str(s) => Ok(s),
            _ => Err(ReportError::Kind(k, "a string")),
        }
    }

    fn num(&mut self, k: &'static str) -> Result<u64, ReportError> {
        match self.take(k)? {
            Value::Num(n) => Ok(n),
            _ => Err(ReportError::Kind(k, "a number")),
        }
    }

    fn nums(&mut self, k: &'static str) -> Result<Vec<u64>, ReportError> {
        match self.take(k)? {
            Value::Nums(n) => Ok(n),
            _ => Err(ReportError::Kind(k, "a list of numbers")),
        }
    }

    fn done(self) -> Result<(), ReportError> {
        match self.0.into_iter().next() {
            None => Ok(()),
            Some((k, _)) => Err(ReportError::Unknown(k)),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The exit report

/// Why a report line could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    /// Not one flat JSON object of the report's kinds of values.
    #[error("{0}")]
    Json(&'static str),
    /// No `type` field, or one this version does not write.
    #[error("a line of unknown type '{0}'")]
    Type(String),
    /// A field the line's type needs is missing.
    #[error("no '{0}' field")]
    Missing(&'static str),
    /// A field of the wrong kind.
    #[error("'{0}' is not {1}")]
    Kind(&'static str, &'static str),
    /// A field the line's type does not have.
    #[error("an unknown field '{0}'")]
    Unknown(String),
    /// A histogram of the wrong size.
    #[error("'log2_ns' has {0} buckets, not 64")]
    Buckets(usize),
    /// The report names another version.
    #[error(
        "the program's probe library writes probe-point reports of version {0}, this strobe \
         reads version {VERSION}: build the program against this strobe's probe library"
    )]
    Version(u64),
    /// The report does not begin with a version.
    #[error(
        "the program's probe-point report does not begin with its version (a probe library \
         older than this strobe): build the program against this strobe's probe library"
    )]
    NoVersion,
    /// A line of the report, by number from 1, is malformed.
    #[error("line {line}: {why}")]
    Line {
        /// The line number.
        line: usize,
        /// What is wrong with it.
        why: Box<ReportError>,
    },
}

/// One probe point's counts.
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
    pub log2_ns: [u64; LOG2_BUCKETS],
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

/// One line of the exit report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReportLine {
    /// The first line: the format's [`VERSION`].
    Version(u64),
    /// A requested point's counts (boxed: its histogram makes it large).
    Count(Box<PointCount>),
    /// A requested name no site has, with a hint (`" (did you mean X?)"`, or empty).
    Unknown {
        /// The name.
        probe: String,
        /// The hint.
        hint: String,
    },
    /// A registered site (with `STROBE_PROBE_LIST`).
    Site(PointSite),
}

impl ReportLine {
    /// Appends the line, newline included.
    pub fn encode(&self, out: &mut String) {
        match self {
            ReportLine::Version(v) => {
                out.put("{\"type\":\"report\"");
                key(out, "version");
                num(out, *v);
            }
            ReportLine::Count(c) => {
                out.put("{\"type\":\"count\"");
                key(out, "probe");
                string(out, &c.probe);
                key(out, "hits");
                num(out, c.hits);
                key(out, "exits");
                num(out, c.exits);
                key(out, "total_ns");
                num(out, c.total_ns);
                key(out, "log2_ns");
                nums(out, &c.log2_ns);
            }
            ReportLine::Unknown { probe, hint } => {
                out.put("{\"type\":\"unknown\"");
                key(out, "probe");
                string(out, probe);
                key(out, "hint");
                string(out, hint);
            }
            ReportLine::Site(s) => {
                out.put("{\"type\":\"site\"");
                key(out, "probe");
                string(out, &s.probe);
                key(out, "file");
                string(out, &s.file);
                key(out, "line");
                num(out, s.line);
                key(out, "nargs");
                num(out, s.nargs);
            }
        }
        out.put("}\n");
    }

    /// Reads one line (without its newline).
    pub fn decode(line: &str) -> Result<ReportLine, ReportError> {
        let mut f = Fields(object(line).map_err(ReportError::Json)?);
        let ty = f.str("type")?;
        let l = match ty.as_str() {
            "report" => ReportLine::Version(f.num("version")?),
            "count" => {
                let probe = f.str("probe")?;
                let (hits, exits, total_ns) = (f.num("hits")?, f.num("exits")?, f.num("total_ns")?);
                let h = f.nums("log2_ns")?;
                let log2_ns = h.as_slice().try_into().map_err(|_| ReportError::Buckets(h.len()))?;
                ReportLine::Count(Box::new(PointCount { probe, hits, exits, total_ns, log2_ns }))
            }
            "unknown" => ReportLine::Unknown { probe: f.str("probe")?, hint: f.str("hint")? },
            "site" => ReportLine::Site(PointSite {
                probe: f.str("probe")?,
                file: f.str("file")?,
                line: f.num("line")?,
                nargs: f.num("nargs")?,
            }),
            _ => return Err(ReportError::Type(ty)),
        };
        f.done()?;
        Ok(l)
    }
}

/// The exit report, read.
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
    /// Reads a report: its first line must name this [`VERSION`]; blank lines are skipped.
    pub fn decode(text: &str) -> Result<PointReport, ReportError> {
        let mut r = PointReport::default();
        let mut lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
        let at = |line: usize, why: ReportError| ReportError::Line {
            line: line + 1,
            why: Box::new(why),
        };
        match lines.next() {
            None => return Err(ReportError::NoVersion),
            Some((n, l)) => match ReportLine::decode(l) {
                Ok(ReportLine::Version(VERSION)) => {}
                Ok(ReportLine::Version(v)) => return Err(ReportError::Version(v)),
                Ok(_) => return Err(ReportError::NoVersion),
                Err(e) => return Err(at(n, e)),
            },
        }
        for (n, l) in lines {
            match ReportLine::decode(l).map_err(|e| at(n, e))? {
                ReportLine::Version(_) => {
                    return Err(at(n, ReportError::Json("a second version line")));
                }
                ReportLine::Count(c) => r.counts.push(*c),
                ReportLine::Unknown { probe, hint } => r.unknown.push((probe, hint)),
                ReportLine::Site(s) => r.sites.push(s),
            }
        }
        Ok(r)
    }

    /// The report's text: the version, the counts, the unknown names, the sites.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        ReportLine::Version(VERSION).encode(&mut out);
        for c in &self.counts {
            ReportLine::Count(Box::new(c.clone())).encode(&mut out);
        }
        for (probe, hint) in &self.unknown {
            ReportLine::Unknown { probe: probe.clone(), hint: hint.clone() }.encode(&mut out);
        }
        for s in &self.sites {
            ReportLine::Site(s.clone()).encode(&mut out);
        }
        out
    }
}

// ---------------------------------------------------------------------------------------
// Trace lines

/// What a traced hit was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceKind {
    /// A plain probe fired.
    Fire,
    /// A scope was entered.
    Entry,
    /// A scope was left, after this many ns.
    Exit {
        /// The scope's duration.
        dur_ns: u64,
    },
}

/// One traced hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceLine<'a> {
    /// The point's name.
    pub probe: &'a str,
    /// The firing thread.
    pub tid: u64,
    /// `CLOCK_MONOTONIC` at the hit, ns.
    pub ns: u64,
    /// What it was.
    pub kind: TraceKind,
    /// The point's arguments.
    pub args: &'a [u64],
}

impl TraceLine<'_> {
    /// Writes the line, newline included. With a [`LineBuf`], allocates nothing.
    pub fn encode(&self, out: &mut impl Sink) {
        out.put("{\"type\":\"hit\"");
        key(out, "probe");
        string(out, self.probe);
        key(out, "tid");
        num(out, self.tid);
        key(out, "ns");
        num(out, self.ns);
        match self.kind {
            TraceKind::Fire => out.put(",\"kind\":\"fire\""),
            TraceKind::Entry => out.put(",\"kind\":\"entry\""),
            TraceKind::Exit { dur_ns } => {
                out.put(",\"kind\":\"exit\"");
                key(out, "dur_ns");
                num(out, dur_ns);
            }
        }
        key(out, "args");
        nums(out, self.args);
        out.put("}\n");
    }
}

/// A trace line, read (for tools and tests: strobe itself does not read traces).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRecord {
    /// The point's name.
    pub probe: String,
    /// The firing thread.
    pub tid: u64,
    /// `CLOCK_MONOTONIC` at the hit, ns.
    pub ns: u64,
    /// What it was.
    pub kind: TraceKind,
    /// The point's arguments.
    pub args: Vec<u64>,
}

impl TraceRecord {
    /// Reads one line (without its newline).
    pub fn decode(line: &str) -> Result<TraceRecord, ReportError> {
        let mut f = Fields(object(line).map_err(ReportError::Json)?);
        let ty = f.str("type")?;
        if ty != "hit" {
            return Err(ReportError::Type(ty));
        }
        let probe = f.str("probe")?;
        let (tid, ns) = (f.num("tid")?, f.num("ns")?);
        let kind = match f.str("kind")?.as_str() {
            "fire" => TraceKind::Fire,
            "entry" => TraceKind::Entry,
            "exit" => TraceKind::Exit { dur_ns: f.num("dur_ns")? },
            _ => return Err(ReportError::Kind("kind", "fire, entry or exit")),
        };
        let args = f.nums("args")?;
        f.done()?;
        Ok(TraceRecord { probe, tid, ns, kind, args })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> PointReport {
        let mut log2_ns = [0u64; LOG2_BUCKETS];
        log2_ns[10] = 90;
        log2_ns[63] = u64::MAX;
        PointReport {
            counts: vec![
                PointCount {
                    probe: "req".into(),
                    hits: 100,
                    exits: 100,
                    total_ns: 12_345_600,
                    log2_ns,
                },
                PointCount {
                    probe: "plain".into(),
                    hits: 5,
                    exits: 0,
                    total_ns: 0,
                    log2_ns: [0; 64],
                },
            ],
            sites: vec![PointSite {
                probe: "a \"quoted\" \\ name\u{1}\u{1f}é\u{1F600}".into(),
                file: "src/a.c".into(),
                line: 7,
                nargs: 2,
            }],
            unknown: vec![
                ("rq".into(), " (did you mean req?)".into()),
                ("x".into(), String::new()),
            ],
        }
    }

    #[test]
    fn a_report_round_trips() {
        let r = report();
        let text = r.encode();
        assert_eq!(PointReport::decode(&text).unwrap(), r);
        assert!(text.starts_with("{\"type\":\"report\",\"version\":1}\n"), "{text}");
        assert_eq!(
            PointReport::decode(&PointReport::default().encode()).unwrap(),
            PointReport::default()
        );
    }

    #[test]
    fn report_lines_are_the_documented_json() {
        let r = report();
        let mut out = String::new();
        ReportLine::Count(Box::new(r.counts[1].clone())).encode(&mut out);
        let zeros = vec!["0"; 64].join(",");
        assert_eq!(
            out,
            format!(
                "{{\"type\":\"count\",\"probe\":\"plain\",\"hits\":5,\"exits\":0,\"total_ns\":0,\"log2_ns\":[{zeros}]}}\n"
            )
        );
        out.clear();
        ReportLine::Site(r.sites[0].clone()).encode(&mut out);
        assert_eq!(
            out,
            "{\"type\":\"site\",\"probe\":\"a \\\"quoted\\\" \\\\ name\\u0001\\u001fé\u{1F600}\",\
             \"file\":\"src/a.c\",\"line\":7,\"nargs\":2}\n"
        );
        out.clear();
        ReportLine::Unknown { probe: "rq".into(), hint: " (did you mean req?)".into() }
            .encode(&mut out);
        assert_eq!(
            out,
            "{\"type\":\"unknown\",\"probe\":\"rq\",\"hint\":\" (did you mean req?)\"}\n"
        );
    }

    #[test]
    fn every_cut_of_every_line_is_an_error() {
        let text = report().encode();
        for line in text.lines() {
            assert!(ReportLine::decode(line).is_ok(), "{line}");
            for cut in 0..line.len() {
                if line.is_char_boundary(cut) {
                    assert!(ReportLine::decode(&line[..cut]).is_err(), "{}", &line[..cut]);
                }
            }
        }
    }

    #[test]
    fn a_foreign_or_missing_version_is_refused() {
        let text = report().encode();
        let v2 = text.replacen("\"version\":1", "\"version\":2", 1);
        assert_eq!(PointReport::decode(&v2), Err(ReportError::Version(2)));
        assert!(ReportError::Version(2)
            .to_string()
            .contains("reports of version 2, this strobe reads version 1"));
        let headless: String = text.lines().skip(1).map(|l| format!("{l}\n")).collect();
        assert_eq!(PointReport::decode(&headless), Err(ReportError::NoVersion));
        assert_eq!(PointReport::decode(""), Err(ReportError::NoVersion));
        let twice = format!("{text}{{\"type\":\"report\",\"version\":1}}\n");
        assert!(matches!(PointReport::decode(&twice), Err(ReportError::Line { line: 7, .. })));
    }

    #[test]
    fn malformed_lines_are_named() {
        let head = "{\"type\":\"report\",\"version\":1}\n";
        let bad =
            |line: &str| PointReport::decode(&format!("{head}\n{line}\n")).unwrap_err().to_string();
        assert_eq!(bad("not json"), "line 3: a line is one JSON object: '{' expected");
        assert_eq!(bad("{\"type\":\"future\"}"), "line 3: a line of unknown type 'future'");
        assert_eq!(bad("{\"type\":\"site\",\"probe\":\"a\"}"), "line 3: no 'file' field");
        assert_eq!(
            bad("{\"type\":\"unknown\",\"probe\":\"a\",\"hint\":\"\",\"extra\":1}"),
            "line 3: an unknown field 'extra'"
        );
        assert_eq!(
            bad("{\"type\":\"count\",\"probe\":\"a\",\"hits\":1,\"exits\":0,\"total_ns\":0,\"log2_ns\":[1,2]}"),
            "line 3: 'log2_ns' has 2 buckets, not 64"
        );
        assert_eq!(bad("{\"type\":\"site\",\"probe\":1}"), "line 3: 'probe' is not a string");
        assert_eq!(
            bad("{\"type\":\"report\",\"version\":18446744073709551616}"),
            "line 3: a number larger than 2^64 - 1"
        );
        assert_eq!(
            bad("{\"type\":\"report\",\"version\":-1}"),
            "line 3: an unsigned number expected"
        );
        assert_eq!(bad("{\"type\":\"report\",\"type\":\"report\"}"), "line 3: a key given twice");
        assert_eq!(bad("{\"type\":\"report\",\"version\":1} x"), "line 3: text after the object");
        assert_eq!(bad("{\"type\":\"a\\ud800\"}"), "line 3: a surrogate pair cut in half");
    }

    #[test]
    fn standard_json_escapes_and_spaces_are_read() {
        let l = ReportLine::decode(
            " { \"type\" : \"unknown\" , \"probe\" : \"\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\" , \"hint\":\"\" } ",
        )
        .unwrap();
        assert_eq!(
            l,
            ReportLine::Unknown {
                probe: "/\u{8}\u{c}\n\r\té\u{1F600}".into(),
                hint: String::new()
            }
        );
    }

    #[test]
    fn trace_lines_round_trip_in_a_fixed_buffer() {
        for (kind, args) in [
            (TraceKind::Fire, &[1u64, u64::MAX][..]),
            (TraceKind::Entry, &[][..]),
            (TraceKind::Exit { dur_ns: 1234 }, &[][..]),
        ] {
            let t = TraceLine { probe: "c_\"scope\"", tid: 77, ns: 1_000_000_007, kind, args };
            let mut buf = LineBuf::<512>::new();
            t.encode(&mut buf);
            assert!(!buf.is_cut());
            let text = std::str::from_utf8(buf.as_bytes()).unwrap();
            assert!(text.ends_with('\n'));
            let r = TraceRecord::decode(text.trim_end()).unwrap();
            assert_eq!(
                r,
                TraceRecord {
                    probe: t.probe.into(),
                    tid: 77,
                    ns: 1_000_000_007,
                    kind,
                    args: args.to_vec()
                }
            );
            let mut s = String::new();
            t.encode(&mut s);
            assert_eq!(s.as_bytes(), buf.as_bytes(), "the same text either way");
        }
        let mut out = String::new();
        TraceLine { probe: "c_zero", tid: 5, ns: 9, kind: TraceKind::Fire, args: &[] }
            .encode(&mut out);
        assert_eq!(out, "{\"type\":\"hit\",\"probe\":\"c_zero\",\"tid\":5,\"ns\":9,\"kind\":\"fire\",\"args\":[]}\n");
        let mut small = LineBuf::<16>::new();
        TraceLine { probe: "long_name", tid: 5, ns: 9, kind: TraceKind::Fire, args: &[] }
            .encode(&mut small);
        assert!(small.is_cut() && small.as_bytes().len() == 16);
        assert!(TraceRecord::decode(std::str::from_utf8(small.as_bytes()).unwrap()).is_err());
    }

    #[test]
    fn a_request_round_trips_through_the_environment() {
        let r = ProbeRequest {
            count: vec!["a".into(), "*".into()],
            list: true,
            out: Some("/tmp/r\u{e9}.jsonl".into()),
            trace: vec!["b".into()],
            trace_out: Some("/tmp/t".into()),
        };
        let vars = r.to_env().unwrap();
        assert_eq!(vars.len(), 5);
        let get = |vars: &[(&str, OsString)], k: &str| {
            vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
        };
        assert_eq!(ProbeRequest::from_env(|k| get(&vars, k)), r);
        assert_eq!(get(&vars, "STROBE_PROBE_COUNT").unwrap(), "a,*");
        assert_eq!(get(&vars, "STROBE_PROBE_LIST").unwrap(), "1");
        let none = ProbeRequest::default();
        assert!(none.to_env().unwrap().is_empty() && !none.is_active());
        assert_eq!(ProbeRequest::from_env(|_| None), none);
        let list_only = ProbeRequest { list: true, ..ProbeRequest::default() };
        assert!(list_only.is_active());
        assert_eq!(ProbeRequest::from_env(|k| get(&list_only.to_env().unwrap(), k)), list_only);
    }

    #[test]
    fn hand_written_variables_read_as_before() {
        let vars = |count: &str, list: &str| {
            let (c, l) = (count.to_string(), list.to_string());
            ProbeRequest::from_env(move |k| match k {
                "STROBE_PROBE_COUNT" => Some(c.clone().into()),
                "STROBE_PROBE_LIST" => Some(l.clone().into()),
                _ => None,
            })
        };
        let r = vars(" a, ,b ,", "0");
        assert_eq!((r.count, r.list), (vec!["a".to_string(), "b".to_string()], false));
        assert!(!vars("", "").is_active());
        assert!(vars("", "yes").list);
        let bad: OsString = std::os::unix::ffi::OsStringExt::from_vec(b"a\xff".to_vec());
        let r = ProbeRequest::from_env(|k| (k == "STROBE_PROBE_COUNT").then(|| bad.clone()));
        assert!(r.count.is_empty(), "a list that is not UTF-8 reads as empty");
    }

    #[test]
    fn names_the_list_cannot_carry_are_refused() {
        for bad in ["a,b", "", " a"] {
            let r = ProbeRequest { count: vec![bad.into()], ..ProbeRequest::default() };
            assert_eq!(r.to_env(), Err(RequestError::BadName(bad.into())));
        }
    }
}
