//! `strobe watch`'s two crossings, typed once for both ends:
//!
//! - the **request** strobe hands the agent through the environment ([`WatchRequest`]: the
//!   watched points with how each is relocated in the target, and the options), encoded
//!   with [`crate::wire`] and carried as hex in one variable ([`env::WATCH`](crate::env::WATCH)),
//!   next to the channel's fd ([`env::WATCH_FD`](crate::env::WATCH_FD), kept apart so that
//!   an agent that cannot read the request can still say so on the channel);
//! - the **stream** the agent's writer thread sends back over that pipe: length-prefixed
//!   frames, each one [`Message`], the first always [`Message::Hello`] with the version.
//!   The agent encodes with [`Message::encode`]; strobe reads with [`HitStream`].
//!
//! A frame is a 4-byte little-endian body length, then the body: the message's tag and its
//! fields in the wire encoding (varints, length-prefixed bytes). Both ends are the same
//! build (the agent is embedded in `strobe`), so the version is a check against a stale
//! `STROBE_AGENT`, not a negotiation: a foreign version is refused, never guessed at.
//!
//! Owns: these types and their encodings, with round-trip, truncation and version tests.
//! Must never: decide what to watch or how to report it; allocate when encoding a message
//! into a buffer with room (the agent's writer encodes every hit); panic or trust a length
//! on decoding (every cut and every bad field is a [`DecodeError`] or a [`StreamError`]).

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::RawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::time::Duration;

use crate::wire::{DecodeError, Reader, Writer};

/// The version of the request and of the stream.
pub const VERSION: u64 = 1;

/// Return addresses a hit carries at most (`--stack`), after the accessing instruction.
pub const MAX_FRAMES: usize = 8;

/// Code addresses a hit carries at most: the instruction, then [`MAX_FRAMES`] frames.
pub const MAX_ADDRS: usize = 1 + MAX_FRAMES;

/// The longest frame body a reader accepts.
pub const MAX_FRAME: usize = 1 << 20;

/// The longest text (an error, a module path) a message carries; the encoder cuts longer
/// text at a character boundary, so every frame it writes is one a reader accepts.
pub const MAX_TEXT: usize = 64 << 10;

// ---------------------------------------------------------------------------------------
// The request

/// Which accesses trap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// Writes only.
    Write,
    /// Reads and writes.
    ReadWrite,
}

impl Access {
    fn code(self) -> u64 {
        match self {
            Access::Write => 0,
            Access::ReadWrite => 1,
        }
    }

    fn read(r: &mut Reader<'_>, at: usize) -> Result<Access, DecodeError> {
        match r.u64("an access")? {
            0 => Ok(Access::Write),
            1 => Ok(Access::ReadWrite),
            _ => Err(DecodeError { what: "a known access", at }),
        }
    }
}

/// What a watched address is relative to, so the agent can relocate it in the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Base {
    /// A link-time address of the main executable: its load bias is added (0 when it is
    /// not position-independent).
    Executable,
    /// A link-time address of the shared library whose file has this device and inode
    /// number (an identity that survives symlinks and needs no escaping): its load bias is
    /// added.
    Library {
        /// `st_dev` of the library's file.
        dev: u64,
        /// `st_ino` of the library's file.
        ino: u64,
    },
    /// A run-time address, taken as it is.
    Absolute,
}

/// One watched location, as strobe resolved it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WatchPoint {
    /// What `addr` is relative to.
    pub base: Base,
    /// The address.
    pub addr: u64,
    /// Bytes watched: 1, 2, 4 or 8 (a decoder refuses others).
    pub len: u8,
    /// Which accesses trap.
    pub access: Access,
}

/// How the agent watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchOptions {
    /// Each thread gets its own events instead of inherited ones.
    pub per_thread: bool,
    /// More watchpoints than debug registers take turns (false: the agent never rotates).
    pub multiplex: bool,
    /// Walk frame pointers per hit.
    pub stack: bool,
    /// How long each turn lasts when they take turns.
    pub rotate: Duration,
}

/// What `strobe watch` asks the agent to watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchRequest {
    /// The locations, in spec order: a hit names its watchpoint by this index.
    pub points: Vec<WatchPoint>,
    /// How to watch them.
    pub options: WatchOptions,
}

fn is_watch_len(len: u64) -> bool {
    matches!(len, 1 | 2 | 4 | 8)
}

fn pos(r: &Reader<'_>, all: &[u8]) -> usize {
    all.len() - r.remaining()
}

impl WatchRequest {
    /// The encoded bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(VERSION).u64(self.points.len() as u64);
        for p in &self.points {
            match p.base {
                Base::Executable => w.u64(0),
                Base::Library { dev, ino } => w.u64(1).u64(dev).u64(ino),
                Base::Absolute => w.u64(2),
            };
            w.u64(p.addr).u64(u64::from(p.len)).u64(p.access.code());
        }
        let o = &self.options;
        let rotate_ns = u64::try_from(o.rotate.as_nanos()).unwrap_or(u64::MAX);
        w.bool(o.per_thread).bool(o.multiplex).bool(o.stack).u64(rotate_ns);
        w.bytes
    }

    /// Decodes what [`WatchRequest::encode`] wrote; anything else (a cut, a foreign
    /// version, a bad field, bytes after the end) is an error naming where.
    pub fn decode(bytes: &[u8]) -> Result<WatchRequest, DecodeError> {
        let mut r = Reader::new(bytes);
        if r.u64("the watch request's version")? != VERSION {
            return Err(DecodeError { what: "a watch request of this version", at: 0 });
        }
        let n = r.u64("the number of watchpoints")?;
        let mut points = Vec::new();
        for _ in 0..n {
            let at = pos(&r, bytes);
            let base = match r.u64("a watchpoint's base")? {
                0 => Base::Executable,
                1 => Base::Library {
                    dev: r.u64("a library's device")?,
                    ino: r.u64("a library's inode")?,
                },
                2 => Base::Absolute,
                _ => return Err(DecodeError { what: "a known watchpoint base", at }),
            };
            let addr = r.u64("a watchpoint's address")?;
            let at = pos(&r, bytes);
            let len = r.u64("a watchpoint's length")?;
            if !is_watch_len(len) {
                return Err(DecodeError { what: "a watch length of 1, 2, 4 or 8", at });
            }
            let at = pos(&r, bytes);
            let access = Access::read(&mut r, at)?;
            points.push(WatchPoint { base, addr, len: len as u8, access });
        }
        let options = WatchOptions {
            per_thread: r.bool("the per-thread flag")?,
            multiplex: r.bool("the multiplex flag")?,
            stack: r.bool("the stack flag")?,
            rotate: Duration::from_nanos(r.u64("the rotation interval")?),
        };
        if r.remaining() != 0 {
            return Err(DecodeError { what: "the end of the watch request", at: pos(&r, bytes) });
        }
        Ok(WatchRequest { points, options })
    }

    /// The value of [`env::WATCH`](crate::env::WATCH): the encoding in lowercase hex.
    pub fn to_env(&self) -> OsString {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let bytes = self.encode();
        let mut s = Vec::with_capacity(bytes.len() * 2);
        for b in bytes {
            s.push(HEX[usize::from(b >> 4)]);
            s.push(HEX[usize::from(b & 15)]);
        }
        OsString::from_vec(s)
    }

    /// Reads a value [`WatchRequest::to_env`] wrote. Error offsets count bytes of the
    /// decoded request (a bad hex digit: its pair's index).
    pub fn from_env(value: &OsStr) -> Result<WatchRequest, DecodeError> {
        let text = value.as_bytes();
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        let mut bytes = Vec::with_capacity(text.len() / 2);
        for (i, pair) in text.chunks(2).enumerate() {
            match pair {
                &[h, l] => match (digit(h), digit(l)) {
                    (Some(h), Some(l)) => bytes.push(h << 4 | l),
                    _ => return Err(DecodeError { what: "two hex digits", at: i }),
                },
                _ => return Err(DecodeError { what: "two hex digits", at: i }),
            }
        }
        WatchRequest::decode(&bytes)
    }
}

/// The value of [`env::WATCH_FD`](crate::env::WATCH_FD): the channel's write end.
pub fn fd_to_env(fd: RawFd) -> OsString {
    fd.to_string().into()
}

/// The channel's fd a value of [`env::WATCH_FD`](crate::env::WATCH_FD) names, if it names
/// one (a non-negative decimal number).
pub fn fd_from_env(value: &OsStr) -> Option<RawFd> {
    let fd: RawFd = value.to_str()?.parse().ok()?;
    (fd >= 0).then_some(fd)
}

// ---------------------------------------------------------------------------------------
// The stream

/// A code address as the agent reports it: a module it announced with
/// [`Message::Module`] and the address relative to that module's load bias (its link-time
/// address). Module 0 is none: an address in no module, reported as it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CodeAddr {
    /// The module's id (0: none).
    pub module: u32,
    /// The address in it.
    pub vaddr: u64,
}

/// One hit: which watchpoint, which thread, the values and where the code was. A fixed
/// size, so the agent builds and encodes it without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HitRecord {
    /// The watchpoint's index in the request.
    pub wp: u32,
    /// The accessing thread.
    pub tid: i32,
    /// The target had SIGTRAP blocked: the kernel delivered the hit late, so the
    /// instruction is where it was found, not the access.
    pub imprecise: bool,
    /// The value before the access, when the agent knew it (not on the first hit after the
    /// watchpoint was armed or re-armed).
    pub old: Option<u64>,
    /// The value after the access.
    pub new: u64,
    addrs: [CodeAddr; MAX_ADDRS],
    naddrs: u8,
}

impl HitRecord {
    /// A hit with no code address yet.
    pub fn new(wp: u32, tid: i32, imprecise: bool, old: Option<u64>, new: u64) -> HitRecord {
        HitRecord {
            wp,
            tid,
            imprecise,
            old,
            new,
            addrs: [CodeAddr::default(); MAX_ADDRS],
            naddrs: 0,
        }
    }

    /// Appends a code address (the instruction first, then return addresses, innermost
    /// first); false, and nothing kept, when [`MAX_ADDRS`] are there already.
    pub fn push(&mut self, a: CodeAddr) -> bool {
        match self.addrs.get_mut(usize::from(self.naddrs)) {
            Some(slot) => {
                *slot = a;
                self.naddrs += 1;
                true
            }
            None => false,
        }
    }

    /// The code addresses: the instruction, then the frames.
    pub fn addrs(&self) -> &[CodeAddr] {
        self.addrs.get(..usize::from(self.naddrs)).unwrap_or_default()
    }

    /// The instruction (module 0, address 0 when the hit carries none).
    pub fn at(&self) -> CodeAddr {
        self.addrs().first().copied().unwrap_or_default()
    }
}

/// One message of the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    /// The first frame of every stream: the agent's protocol version.
    Hello {
        /// [`VERSION`] of the agent that wrote the stream.
        version: u64,
    },
    /// The agent armed the watchpoints.
    Start {
        /// The target's pid.
        pid: u32,
        /// Watchpoints requested.
        watchpoints: u32,
        /// Debug registers in use per thread.
        slots: u32,
        /// More watchpoints than slots: they take turns.
        multiplexed: bool,
    },
    /// One watchpoint as armed, relocated.
    Watchpoint {
        /// Its index in the request.
        index: u32,
        /// Its run-time address.
        addr: u64,
        /// Bytes watched: 1, 2, 4 or 8.
        len: u8,
        /// Which accesses trap.
        access: Access,
    },
    /// A module hit addresses are relative to, announced before its first use.
    Module {
        /// Its id, from 1.
        id: u32,
        /// Its load bias.
        bias: u64,
        /// The file it is mapped from, as the loader names it.
        path: &'a [u8],
    },
    /// A hit.
    Hit(HitRecord),
    /// One watchpoint's armed time, at exit.
    Armed {
        /// The watchpoint's index.
        wp: u32,
        /// Hits while armed.
        hits: u64,
        /// Nanoseconds armed.
        armed_ns: u64,
        /// Nanoseconds the watch was on at all.
        enabled_ns: u64,
        /// Turns it was armed.
        times: u64,
    },
    /// Hits dropped because the agent's ring was full.
    Lost(u64),
    /// SIGTRAPs handed to the target's own handler.
    Chained(u64),
    /// Per-thread mode: threads that got their own events.
    Threads(u64),
    /// What the agent could not do; without a [`Message::Start`] before it, the target runs
    /// unwatched.
    Error(&'a str),
    /// The agent's last message: the target is exiting.
    End,
}

mod tag {
    pub(super) const HELLO: u64 = 0;
    pub(super) const START: u64 = 1;
    pub(super) const WATCHPOINT: u64 = 2;
    pub(super) const MODULE: u64 = 3;
    pub(super) const HIT: u64 = 4;
    pub(super) const ARMED: u64 = 5;
    pub(super) const LOST: u64 = 6;
    pub(super) const CHAINED: u64 = 7;
    pub(super) const THREADS: u64 = 8;
    pub(super) const ERROR: u64 = 9;
    pub(super) const END: u64 = 10;
}

/// `s` cut to at most [`MAX_TEXT`] bytes, at a character boundary.
fn clip(s: &str) -> &str {
    let mut end = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.get(..end).unwrap_or_default()
}

impl Message<'_> {
    /// Appends this message's frame to `out`. Allocates only when `out` has no room.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        let mut w = Writer { bytes: std::mem::take(out) };
        match *self {
            Message::Hello { version } => {
                w.u64(tag::HELLO).u64(version);
            }
            Message::Start { pid, watchpoints, slots, multiplexed } => {
                w.u64(tag::START)
                    .u64(u64::from(pid))
                    .u64(u64::from(watchpoints))
                    .u64(u64::from(slots))
                    .bool(multiplexed);
            }
            Message::Watchpoint { index, addr, len, access } => {
                w.u64(tag::WATCHPOINT)
                    .u64(u64::from(index))
                    .u64(addr)
                    .u64(u64::from(len))
                    .u64(access.code());
            }
            Message::Module { id, bias, path } => {
                let path = path.get(..path.len().min(MAX_TEXT)).unwrap_or_default();
                w.u64(tag::MODULE).u64(u64::from(id)).u64(bias).bytes(path);
            }
            Message::Hit(ref h) => {
                let flags = u64::from(h.imprecise) | u64::from(h.old.is_some()) << 1;
                w.u64(tag::HIT)
                    .u64(u64::from(h.wp))
                    .u64(u64::from(h.tid as u32))
                    .u64(flags)
                    .u64(h.old.unwrap_or(0))
                    .u64(h.new)
                    .u64(u64::from(h.naddrs));
                for a in h.addrs() {
                    w.u64(u64::from(a.module)).u64(a.vaddr);
                }
            }
            Message::Armed { wp, hits, armed_ns, enabled_ns, times } => {
                w.u64(tag::ARMED)
                    .u64(u64::from(wp))
                    .u64(hits)
                    .u64(armed_ns)
                    .u64(enabled_ns)
                    .u64(times);
            }
            Message::Lost(n) => {
                w.u64(tag::LOST).u64(n);
            }
            Message::Chained(n) => {
                w.u64(tag::CHAINED).u64(n);
            }
            Message::Threads(n) => {
                w.u64(tag::THREADS).u64(n);
            }
            Message::Error(text) => {
                w.u64(tag::ERROR).bytes(clip(text).as_bytes());
            }
            Message::End => {
                w.u64(tag::END);
            }
        }
        *out = w.bytes;
        let len = (out.len() - start - 4) as u32;
        if let Some(l) = out.get_mut(start..start + 4) {
            l.copy_from_slice(&len.to_le_bytes());
        }
    }

    /// Decodes one frame's body (without its length). Offsets in errors count from the
    /// body's start.
    pub fn decode(body: &[u8]) -> Result<Message<'_>, DecodeError> {
        let mut r = Reader::new(body);
        let at = |r: &Reader<'_>| pos(r, body);
        let m = match r.u64("a message's tag")? {
            tag::HELLO => Message::Hello { version: r.u64("the stream's version")? },
            tag::START => Message::Start {
                pid: r.u32("the pid")?,
                watchpoints: r.u32("the number of watchpoints")?,
                slots: r.u32("the number of slots")?,
                multiplexed: r.bool("the multiplexed flag")?,
            },
            tag::WATCHPOINT => {
                let index = r.u32("a watchpoint's index")?;
                let addr = r.u64("a watchpoint's address")?;
                let len_at = at(&r);
                let len = r.u64("a watchpoint's length")?;
                if !is_watch_len(len) {
                    return Err(DecodeError { what: "a watch length of 1, 2, 4 or 8", at: len_at });
                }
                let access_at = at(&r);
                let access = Access::read(&mut r, access_at)?;
                Message::Watchpoint { index, addr, len: len as u8, access }
            }
            tag::MODULE => Message::Module {
                id: r.u32("a module's id")?,
                bias: r.u64("a module's bias")?,
                path: r.bytes("a module's path")?,
            },
            tag::HIT => {
                let wp = r.u32("a hit's watchpoint")?;
                let tid = r.u32("a hit's thread")? as i32;
                let flags_at = at(&r);
                let flags = r.u64("a hit's flags")?;
                if flags > 3 {
                    return Err(DecodeError { what: "known hit flags", at: flags_at });
                }
                let old = r.u64("a hit's old value")?;
                let new = r.u64("a hit's new value")?;
                let old = (flags & 2 != 0).then_some(old);
                let mut h = HitRecord::new(wp, tid, flags & 1 != 0, old, new);
                let n_at = at(&r);
                let n = r.u64("a hit's number of addresses")?;
                if n > MAX_ADDRS as u64 {
                    return Err(DecodeError { what: "at most 9 code addresses", at: n_at });
                }
                for _ in 0..n {
                    let module = r.u32("a code address's module")?;
                    let vaddr = r.u64("a code address")?;
                    h.push(CodeAddr { module, vaddr });
                }
                Message::Hit(h)
            }
            tag::ARMED => Message::Armed {
                wp: r.u32("an armed time's watchpoint")?,
                hits: r.u64("the hits while armed")?,
                armed_ns: r.u64("the time armed")?,
                enabled_ns: r.u64("the time enabled")?,
                times: r.u64("the turns armed")?,
            },
            tag::LOST => Message::Lost(r.u64("the hits lost")?),
            tag::CHAINED => Message::Chained(r.u64("the SIGTRAPs chained")?),
            tag::THREADS => Message::Threads(r.u64("the threads armed")?),
            tag::ERROR => {
                let text_at = at(&r);
                let b = r.bytes("an error's text")?;
                Message::Error(
                    std::str::from_utf8(b)
                        .map_err(|_| DecodeError { what: "an error's text", at: text_at })?,
                )
            }
            tag::END => Message::End,
            _ => return Err(DecodeError { what: "a known message tag", at: 0 }),
        };
        if r.remaining() != 0 {
            return Err(DecodeError { what: "the end of the message", at: at(&r) });
        }
        Ok(m)
    }
}

/// Why the agent's stream could not be read on.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// Reading the pipe failed.
    #[error("reading the agent's stream: {0}")]
    Io(#[from] std::io::Error),
    /// A frame longer than any the agent writes.
    #[error("the agent's stream announces a message of {len} bytes (at most {MAX_FRAME}): it is corrupt")]
    TooLong {
        /// The length announced.
        len: usize,
    },
    /// A frame that does not decode.
    #[error("the agent's stream has a malformed message: {0}")]
    Malformed(DecodeError),
    /// The stream ended inside a frame.
    #[error(
        "the agent's stream ends inside a message ({have} of {want} bytes): the program was \
         killed while the agent wrote"
    )]
    Cut {
        /// Bytes of the frame that arrived.
        have: usize,
        /// Bytes the frame needed.
        want: usize,
    },
    /// The stream does not begin with this build's version.
    #[error(
        "the agent speaks watch protocol version {found}, this strobe reads version {VERSION}: \
         unset STROBE_AGENT, or build the agent from the same tree as strobe"
    )]
    Version {
        /// The version the agent announced (0: the stream did not begin with one).
        found: u64,
    },
}

/// Reads the agent's messages from the pipe: checks that the first is a
/// [`Message::Hello`] of this [`VERSION`], then hands out the others one at a time.
#[derive(Debug)]
pub struct HitStream<R> {
    src: R,
    buf: Vec<u8>,
    /// Where the next frame starts in `buf`.
    start: usize,
    hello: bool,
}

/// The length of the frame at the start of `b`: `None` while its length prefix is not
/// all there.
fn frame_len(b: &[u8]) -> Result<Option<usize>, StreamError> {
    let Some(prefix) = b.get(..4) else { return Ok(None) };
    let len = u32::from_le_bytes(prefix.try_into().unwrap_or_default()) as usize;
    if len > MAX_FRAME {
        return Err(StreamError::TooLong { len });
    }
    Ok(Some(4 + len))
}

impl<R: Read> HitStream<R> {
    /// A stream reading from `src`.
    pub fn new(src: R) -> HitStream<R> {
        HitStream { src, buf: Vec::with_capacity(64 << 10), start: 0, hello: false }
    }

    /// The source, to drain what is left after an error (whatever was buffered is
    /// dropped).
    pub fn into_inner(self) -> R {
        self.src
    }

    /// Whether a whole message is buffered already, so [`HitStream::read`] returns it
    /// without reading.
    pub fn ready(&self) -> bool {
        let rest = self.buf.get(self.start..).unwrap_or_default();
        match frame_len(rest) {
            Ok(Some(n)) => rest.len() >= n,
            Ok(None) => false,
            // An error is returned without reading, too.
            Err(_) => true,
        }
    }

    /// Reads until `buf[start..]` holds a whole frame; returns its length, or `None` at a
    /// clean end of the stream.
    fn fill(&mut self) -> Result<Option<usize>, StreamError> {
        loop {
            let rest = self.buf.get(self.start..).unwrap_or_default();
            let need = frame_len(rest)?;
            if let Some(n) = need.filter(|&n| rest.len() >= n) {
                return Ok(Some(n));
            }
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            let have = self.buf.len();
            self.buf.resize(have + (64 << 10), 0);
            let got = loop {
                match self.src.read(self.buf.get_mut(have..).unwrap_or_default()) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    other => break other,
                }
            };
            let got = match got {
                Ok(n) => n,
                Err(e) => {
                    self.buf.truncate(have);
                    return Err(e.into());
                }
            };
            self.buf.truncate(have + got);
            if got == 0 {
                return match (have, need) {
                    (0, _) => Ok(None),
                    (_, Some(want)) => Err(StreamError::Cut { have, want }),
                    (_, None) => Err(StreamError::Cut { have, want: 4 }),
                };
            }
        }
    }

    /// The next message, or `None` when the stream ended cleanly (after a whole frame, or
    /// before the first: an agent that never started). The first frame must be a
    /// [`Message::Hello`] of this [`VERSION`]; it is checked and never handed out.
    pub fn read(&mut self) -> Result<Option<Message<'_>>, StreamError> {
        if !self.hello {
            let Some(n) = self.fill()? else { return Ok(None) };
            let body = self.buf.get(self.start + 4..self.start + n).unwrap_or_default();
            match Message::decode(body) {
                Ok(Message::Hello { version }) if version == VERSION => {}
                Ok(Message::Hello { version }) => {
                    return Err(StreamError::Version { found: version })
                }
                _ => return Err(StreamError::Version { found: 0 }),
            }
            self.start += n;
            self.hello = true;
        }
        let Some(n) = self.fill()? else { return Ok(None) };
        let at = self.start;
        self.start += n;
        let body = self.buf.get(at + 4..at + n).unwrap_or_default();
        match Message::decode(body).map_err(StreamError::Malformed)? {
            Message::Hello { .. } => Err(StreamError::Malformed(DecodeError {
                what: "one version message, at the start",
                at: 0,
            })),
            m => Ok(Some(m)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> WatchRequest {
        WatchRequest {
            points: vec![
                WatchPoint { base: Base::Executable, addr: 0x4010, len: 8, access: Access::Write },
                WatchPoint {
                    base: Base::Library { dev: 0x803, ino: u64::MAX },
                    addr: 0x20,
                    len: 4,
                    access: Access::ReadWrite,
                },
                WatchPoint { base: Base::Absolute, addr: u64::MAX, len: 1, access: Access::Write },
            ],
            options: WatchOptions {
                per_thread: true,
                multiplex: false,
                stack: true,
                rotate: Duration::from_micros(250),
            },
        }
    }

    #[test]
    fn a_request_round_trips_through_the_environment() {
        let r = request();
        assert_eq!(WatchRequest::decode(&r.encode()).unwrap(), r);
        assert_eq!(WatchRequest::from_env(&r.to_env()).unwrap(), r);
        let empty = WatchRequest {
            points: Vec::new(),
            options: WatchOptions {
                per_thread: false,
                multiplex: true,
                stack: false,
                rotate: Duration::ZERO,
            },
        };
        assert_eq!(WatchRequest::from_env(&empty.to_env()).unwrap(), empty);
        assert!(r.to_env().as_bytes().iter().all(u8::is_ascii_hexdigit), "safe in any environment");
    }

    #[test]
    fn every_cut_of_a_request_and_a_foreign_version_are_errors() {
        let bytes = request().encode();
        for cut in 0..bytes.len() {
            assert!(WatchRequest::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        let e = WatchRequest::decode(&longer).unwrap_err();
        assert_eq!(e.what, "the end of the watch request");
        let mut v2 = bytes.clone();
        v2[0] = 2;
        assert_eq!(
            WatchRequest::decode(&v2).unwrap_err().to_string(),
            "cannot read a watch request of this version at byte 0"
        );
        let hex = request().to_env();
        let odd = &hex.as_bytes()[..hex.len() - 1];
        assert!(WatchRequest::from_env(OsStr::from_bytes(odd)).is_err());
        assert_eq!(
            WatchRequest::from_env(OsStr::new("01zz")).unwrap_err(),
            DecodeError { what: "two hex digits", at: 1 }
        );
    }

    #[test]
    fn bad_fields_of_a_request_are_named() {
        // One point: absolute, address 0x10, length 3.
        let bad_len = [1, 1, 2, 0x10, 3, 0, 0, 0, 0, 0];
        assert_eq!(
            WatchRequest::decode(&bad_len).unwrap_err(),
            DecodeError { what: "a watch length of 1, 2, 4 or 8", at: 4 }
        );
        let bad_base = [1, 1, 7, 0x10, 8, 0, 0, 0, 0, 0];
        assert_eq!(WatchRequest::decode(&bad_base).unwrap_err().what, "a known watchpoint base");
        let bad_access = [1, 1, 2, 0x10, 8, 2, 0, 0, 0, 0];
        assert_eq!(WatchRequest::decode(&bad_access).unwrap_err().what, "a known access");
        let good = [1, 1, 2, 0x10, 8, 1, 0, 1, 0, 0];
        assert_eq!(WatchRequest::decode(&good).unwrap().points[0].access, Access::ReadWrite);
    }

    #[test]
    fn the_channel_fd_round_trips_and_junk_names_none() {
        assert_eq!(fd_from_env(&fd_to_env(7)), Some(7));
        assert_eq!(fd_from_env(&fd_to_env(0)), Some(0));
        for junk in ["", "-1", "x", "7 ", "99999999999"] {
            assert_eq!(fd_from_env(OsStr::new(junk)), None, "{junk:?}");
        }
    }

    fn hit() -> HitRecord {
        let mut h = HitRecord::new(3, 4_000_000, true, Some(u64::MAX), 5);
        assert!(h.push(CodeAddr { module: 1, vaddr: 0x1a2b }));
        assert!(h.push(CodeAddr { module: 0, vaddr: 0 }));
        assert!(h.push(CodeAddr { module: u32::MAX, vaddr: u64::MAX }));
        h
    }

    /// One of every message.
    fn messages() -> Vec<Message<'static>> {
        let mut full = HitRecord::new(0, 1, false, None, 0);
        for i in 0..MAX_ADDRS as u64 {
            assert!(full.push(CodeAddr { module: 2, vaddr: i }));
        }
        assert!(!full.push(CodeAddr { module: 2, vaddr: 99 }), "a tenth address is refused");
        vec![
            Message::Start { pid: 42, watchpoints: 8, slots: 4, multiplexed: true },
            Message::Watchpoint { index: 1, addr: 0x5000, len: 2, access: Access::ReadWrite },
            Message::Module { id: 1, bias: 0x5555_0000_0000, path: b"/bin/my prog\xff" },
            Message::Hit(hit()),
            Message::Hit(full),
            Message::Hit(HitRecord::new(1, 2, false, Some(0), 7)),
            Message::Armed { wp: 7, hits: 1, armed_ns: 500, enabled_ns: 1000, times: 3 },
            Message::Lost(2),
            Message::Chained(4),
            Message::Threads(2401),
            Message::Error("no slots: ünïcode"),
            Message::End,
        ]
    }

    fn stream_of(msgs: &[Message<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        Message::Hello { version: VERSION }.encode(&mut out);
        for m in msgs {
            m.encode(&mut out);
        }
        out
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<String>, StreamError> {
        let mut s = HitStream::new(bytes);
        let mut got = Vec::new();
        while let Some(m) = s.read()? {
            got.push(format!("{m:?}"));
        }
        Ok(got)
    }

    #[test]
    fn every_message_round_trips_through_a_stream() {
        let msgs = messages();
        let want: Vec<String> = msgs.iter().map(|m| format!("{m:?}")).collect();
        assert_eq!(read_all(&stream_of(&msgs)).unwrap(), want);
        let h = hit();
        assert_eq!(h.at(), CodeAddr { module: 1, vaddr: 0x1a2b });
        assert_eq!(h.addrs().len(), 3);
        assert_eq!(HitRecord::new(0, 0, false, None, 0).at(), CodeAddr::default());
        // Read a byte at a time, as a slow pipe might hand them over.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let Some((&b, rest)) = self.0.split_first() else { return Ok(0) };
                buf[0] = b;
                self.0 = rest;
                Ok(1)
            }
        }
        let bytes = stream_of(&msgs);
        let mut s = HitStream::new(Trickle(&bytes));
        let mut n = 0;
        while let Some(m) = s.read().unwrap() {
            assert_eq!(format!("{m:?}"), want[n]);
            n += 1;
        }
        assert_eq!(n, msgs.len());
    }

    #[test]
    fn a_stream_knows_when_a_message_is_waiting() {
        let bytes = stream_of(&[Message::Lost(1), Message::End]);
        let mut s = HitStream::new(&bytes[..]);
        assert!(!s.ready(), "nothing read yet");
        assert_eq!(s.read().unwrap(), Some(Message::Lost(1)));
        assert!(s.ready(), "the end came in the same read");
        assert_eq!(s.read().unwrap(), Some(Message::End));
        assert!(!s.ready());
        assert_eq!(s.read().unwrap(), None);
    }

    #[test]
    fn every_cut_of_a_message_is_an_error() {
        for m in messages() {
            let mut frame = Vec::new();
            m.encode(&mut frame);
            let body = &frame[4..];
            for cut in 0..body.len() {
                assert!(Message::decode(&body[..cut]).is_err(), "{m:?} cut at {cut}");
            }
            let mut longer = body.to_vec();
            longer.push(0);
            assert_eq!(Message::decode(&longer).unwrap_err().what, "the end of the message");
        }
    }

    #[test]
    fn a_stream_cut_inside_a_frame_says_so_and_a_cut_between_frames_is_the_end() {
        let msgs = messages();
        let bytes = stream_of(&msgs);
        // Frame boundaries.
        let mut ends = Vec::new();
        let mut at = 0;
        while at < bytes.len() {
            at += 4 + u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
            ends.push(at);
        }
        for cut in 1..bytes.len() {
            match read_all(&bytes[..cut]) {
                Ok(got) => {
                    assert!(ends.contains(&cut), "a cut at {cut} inside a frame read cleanly");
                    assert_eq!(got.len(), ends.iter().position(|&e| e == cut).unwrap());
                }
                Err(StreamError::Cut { have, want }) => {
                    assert!(!ends.contains(&cut) && have < want, "cut at {cut}: {have}/{want}");
                }
                Err(e) => panic!("cut at {cut}: {e}"),
            }
        }
        assert_eq!(read_all(&[]).unwrap(), Vec::<String>::new(), "an agent that never wrote");
    }

    #[test]
    fn a_foreign_version_or_a_missing_hello_is_refused() {
        let mut other = Vec::new();
        Message::Hello { version: VERSION + 1 }.encode(&mut other);
        Message::End.encode(&mut other);
        let e = read_all(&other).unwrap_err();
        assert!(matches!(e, StreamError::Version { found } if found == VERSION + 1), "{e}");
        assert!(e
            .to_string()
            .starts_with("the agent speaks watch protocol version 2, this strobe"));
        let mut bare = Vec::new();
        Message::End.encode(&mut bare);
        assert!(matches!(read_all(&bare), Err(StreamError::Version { found: 0 })));
        let mut twice = stream_of(&[]);
        Message::Hello { version: VERSION }.encode(&mut twice);
        assert!(matches!(read_all(&twice), Err(StreamError::Malformed(_))));
    }

    #[test]
    fn corrupt_frames_are_errors_not_allocations() {
        let mut huge = stream_of(&[]);
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(
            matches!(read_all(&huge), Err(StreamError::TooLong { len }) if len == u32::MAX as usize)
        );
        let mut unknown = stream_of(&[]);
        unknown.extend_from_slice(&[1, 0, 0, 0, 77]);
        let e = read_all(&unknown).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the agent's stream has a malformed message: cannot read a known message tag at byte 0"
        );
        // A hit claiming ten addresses, and one with unknown flags.
        for body in [[4u8, 0, 0, 0, 0, 0, 10], [4u8, 0, 0, 4, 0, 0, 0]] {
            assert!(Message::decode(&body).is_err(), "{body:?}");
        }
    }

    #[test]
    fn long_text_is_cut_to_what_a_reader_accepts() {
        let long = "é".repeat(MAX_TEXT);
        let mut out = Vec::new();
        Message::Error(&long).encode(&mut out);
        let Message::Error(text) = Message::decode(&out[4..]).unwrap() else { panic!() };
        assert!(text.len() <= MAX_TEXT && text.len() > MAX_TEXT - 2 && long.starts_with(text));
    }

    #[test]
    fn encoding_a_hit_into_a_buffer_with_room_does_not_reallocate() {
        let mut out = Vec::with_capacity(4096);
        let before = out.as_ptr();
        for _ in 0..10 {
            Message::Hit(hit()).encode(&mut out);
        }
        assert_eq!(out.as_ptr(), before);
        assert!(out.len() < 4096);
    }
}
