//! The channel to `strobe watch`: a pipe carrying strobe-protocol's watch messages (one
//! frame each, the first a hello with the version), and the messages the writer thread
//! puts on it.
//!
//! Owns the pipe's write end once watching starts: buffering whole frames, writing what the
//! pipe takes without blocking, noticing when `strobe watch` went away (or the target
//! reused the fd number for another file) and going quiet then, and naming the modules
//! hit addresses fall in. It must never block the writer thread on a slow reader (past a
//! budget the rest is dropped), never write to a file that is not the pipe it was given,
//! and never run on the target's threads (it allocates).

use std::collections::HashMap;
use std::ffi::CStr;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStringExt;
use std::time::Duration;

use strobe_protocol::watch::{CodeAddr, HitRecord, Message, VERSION};
use strobe_watch::mux::monotonic_ns;

use super::ring::{Hit, HIT_IMPRECISE, HIT_OLD_UNKNOWN};

/// Writes whole frames to the channel; stops quietly once `strobe watch` went away.
pub struct Channel {
    fd: RawFd,
    /// The pipe's identity (device, inode): a target that closes the fd and opens a file
    /// that gets the same number must never receive our lines.
    id: (u64, u64),
    /// Lines not yet written.
    pub buf: Vec<u8>,
    broken: bool,
}

/// `(st_dev, st_ino)` of an open fd.
pub fn fd_identity(fd: RawFd) -> Option<(u64, u64)> {
    // SAFETY: a zeroed stat is a valid out-parameter; fstat fails cleanly on a bad fd.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

impl Channel {
    /// A channel writing to `fd`, which must stay the file whose identity is `id`. Its
    /// first message, the protocol's version, is buffered already.
    pub fn new(fd: RawFd, id: (u64, u64)) -> Channel {
        let mut ch = Channel { fd, id, buf: Vec::with_capacity(64 * 1024), broken: false };
        ch.send(&Message::Hello { version: VERSION });
        ch
    }

    /// Buffers one message (written by the next flush).
    pub fn send(&mut self, m: &Message<'_>) {
        m.encode(&mut self.buf);
    }

    /// Bytes buffered and not yet written.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    /// Writes what the pipe takes now (the fd is non-blocking, so a slow reader never
    /// stalls rotation); the rest stays buffered for the next call.
    pub fn flush(&mut self) {
        if !self.buf.is_empty() && fd_identity(self.fd) != Some(self.id) {
            self.broken = true;
        }
        let mut off = 0;
        while off < self.buf.len() && !self.broken {
            let rest = self.buf.get(off..).unwrap_or_default();
            // SAFETY: writes from a valid buffer to our channel fd.
            let n = unsafe { libc::write(self.fd, rest.as_ptr().cast(), rest.len()) };
            if n < 0 {
                match std::io::Error::last_os_error().kind() {
                    std::io::ErrorKind::Interrupted => {}
                    std::io::ErrorKind::WouldBlock => break,
                    // EPIPE (SIGPIPE is blocked in this thread) or anything else.
                    _ => self.broken = true,
                }
            } else {
                off += n as usize;
            }
        }
        if self.broken {
            self.buf.clear();
        } else {
            self.buf.drain(..off);
        }
    }

    /// Writes everything, waiting for the reader at most `budget`.
    pub fn flush_all(&mut self, budget: Duration) {
        let until = monotonic_ns() + budget.as_nanos() as u64;
        loop {
            self.flush();
            if self.buf.is_empty() || self.broken || monotonic_ns() >= until {
                return;
            }
            let mut pfd = libc::pollfd { fd: self.fd, events: libc::POLLOUT, revents: 0 };
            // SAFETY: one valid pollfd, for at most 10 ms.
            unsafe { libc::poll(&mut pfd, 1, 10) };
        }
    }
}

/// Ends the channel with why the agent could not watch (on one line) and the end, written
/// within a second.
pub fn fail(ch: &mut Channel, msg: &str) {
    ch.send(&Message::Error(&msg.replace('\n', " ")));
    ch.send(&Message::End);
    ch.flush_all(Duration::from_secs(1));
}

/// `dladdr1` flag: return the `link_map` (glibc `<dlfcn.h>`; not in the libc crate).
const RTLD_DL_LINKMAP: libc::c_int = 2;

/// Modules seen in hit addresses, numbered from 1.
#[derive(Default)]
pub struct Modules {
    by_base: HashMap<u64, u32>,
    by_ip: HashMap<u64, (u32, u64)>,
}

impl Modules {
    /// The module of `ip` and its address relative to the module's bias, announcing new
    /// modules on the channel.
    pub fn locate(&mut self, ip: u64, ch: &mut Channel) -> CodeAddr {
        if let Some(&(module, bias)) = self.by_ip.get(&ip) {
            return CodeAddr { module, vaddr: ip.wrapping_sub(bias) };
        }
        // SAFETY: dladdr1 fills `info` and the link_map pointer for an address; both are
        // valid out-parameters. (Not in a signal handler: this is the writer thread.)
        let (bias, name) = unsafe {
            let mut info: libc::Dl_info = std::mem::zeroed();
            let mut lm: *mut libc::c_void = std::ptr::null_mut();
            if libc::dladdr1(ip as *const libc::c_void, &mut info, &mut lm, RTLD_DL_LINKMAP) == 0
                || lm.is_null()
            {
                return CodeAddr::default();
            }
            // struct link_map { ElfW(Addr) l_addr; char *l_name; ... }
            let l_addr = *(lm as *const u64);
            let l_name = *(lm as *const *const libc::c_char).add(1);
            let name = if l_name.is_null() || *l_name == 0 {
                std::fs::read_link("/proc/self/exe")
                    .map(|p| p.into_os_string().into_vec())
                    .unwrap_or_default()
            } else {
                CStr::from_ptr(l_name).to_bytes().to_vec()
            };
            (l_addr, name)
        };
        let next = self.by_base.len() as u32 + 1;
        let module = *self.by_base.entry(bias).or_insert_with(|| {
            ch.send(&Message::Module { id: next, bias, path: &name });
            next
        });
        self.by_ip.insert(ip, (module, bias));
        CodeAddr { module, vaddr: ip.wrapping_sub(bias) }
    }
}

/// Sends the hit `h`, announcing the modules its addresses fall in first. Allocates
/// nothing once its modules are known and the buffer has room.
pub fn write_hit(h: &Hit, mods: &mut Modules, ch: &mut Channel) {
    let old = (h.flags & HIT_OLD_UNKNOWN == 0).then_some(h.old);
    let mut rec = HitRecord::new(h.wp, h.tid, h.flags & HIT_IMPRECISE != 0, old, h.new);
    rec.push(mods.locate(h.ip, ch));
    for &f in h.frames.iter().take(h.nframes as usize) {
        rec.push(mods.locate(f, ch));
    }
    ch.send(&Message::Hit(rec));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use strobe_protocol::watch::{HitStream, StreamError};

    /// A pipe: (read end, write end non-blocking).
    fn pipe() -> (RawFd, RawFd) {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two fds into the array.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: fcntl on the fd just made.
        unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) };
        (fds[0], fds[1])
    }

    fn read_all(fd: RawFd) -> Vec<u8> {
        let mut out = Vec::new();
        let mut b = [0u8; 4096];
        // SAFETY: fcntl and read on our own fd into a valid buffer.
        unsafe { libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK) };
        loop {
            // SAFETY: as above.
            let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), b.len()) };
            if n <= 0 {
                break;
            }
            out.extend_from_slice(&b[..n as usize]);
        }
        out
    }

    /// The messages of a stream, as their debug text.
    fn decode(bytes: &[u8]) -> Result<Vec<String>, StreamError> {
        let mut s = HitStream::new(bytes);
        let mut out = Vec::new();
        while let Some(m) = s.read()? {
            out.push(format!("{m:?}"));
        }
        Ok(out)
    }

    #[test]
    fn messages_reach_the_pipe_and_wait_while_it_is_full() {
        let (r, w) = pipe();
        let mut ch = Channel::new(w, fd_identity(w).unwrap());
        let start = Message::Start { pid: 1, watchpoints: 2, slots: 3, multiplexed: false };
        ch.send(&start);
        ch.flush();
        assert_eq!(ch.pending(), 0);
        assert_eq!(decode(&read_all(r)).unwrap(), [format!("{start:?}")], "after the hello");
        // More than the pipe holds (64 KiB): what does not fit stays buffered.
        let text = "x".repeat(1017);
        let mut one = Vec::new();
        Message::Error(&text).encode(&mut one);
        assert_eq!(one.len(), 1024);
        for _ in 0..100 {
            ch.send(&Message::Error(&text));
        }
        ch.flush();
        let left = ch.pending();
        assert!(left > 0 && left < 100 * 1024, "{left}");
        let mut got = read_all(r);
        ch.flush();
        got.extend(read_all(r));
        assert_eq!(got.len() + ch.pending(), 100 * 1024);
        // SAFETY: closing our own fds.
        unsafe { (libc::close(r), libc::close(w)) };
    }

    #[test]
    fn a_reader_that_went_away_silences_the_channel() {
        let (r, w) = pipe();
        let mut ch = Channel::new(w, fd_identity(w).unwrap());
        // SAFETY: closing our own read end; Rust ignores SIGPIPE, so the write gets EPIPE.
        unsafe { libc::close(r) };
        ch.send(&Message::Lost(1));
        ch.flush_all(Duration::from_millis(100));
        assert_eq!(ch.pending(), 0, "dropped, not kept");
        ch.send(&Message::End);
        ch.flush();
        assert_eq!(ch.pending(), 0);
        // SAFETY: closing our own fd.
        unsafe { libc::close(w) };
    }

    #[test]
    fn a_reused_fd_number_never_gets_our_messages() {
        let (r, w) = pipe();
        let mut ch = Channel::new(w, fd_identity(w).unwrap());
        // The target closes the fd and opens a file that gets the same number.
        let path = std::env::temp_dir().join(format!("strobe-channel-{}", std::process::id()));
        let f = std::fs::File::create(&path).unwrap();
        // SAFETY: dup2 onto our own fd number; the file stays open through `f` too.
        assert_eq!(unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&f), w) }, w);
        ch.send(&Message::Lost(1));
        ch.flush();
        assert_eq!(std::fs::read(&path).unwrap().len(), 0, "nothing written to the file");
        assert!(read_all(r).is_empty());
        std::fs::remove_file(&path).unwrap();
        // SAFETY: closing our own fds.
        unsafe { (libc::close(r), libc::close(w)) };
    }

    #[test]
    fn fail_writes_the_error_on_one_line_then_end() {
        let (r, w) = pipe();
        let mut ch = Channel::new(w, fd_identity(w).unwrap());
        fail(&mut ch, "cannot watch:\nno debug registers");
        let want = [Message::Error("cannot watch: no debug registers"), Message::End];
        assert_eq!(decode(&read_all(r)).unwrap(), want.map(|m| format!("{m:?}")));
        // SAFETY: closing our own fds.
        unsafe { (libc::close(r), libc::close(w)) };
    }

    #[test]
    fn hits_name_their_modules_once_each() {
        let (r, w) = pipe();
        let mut ch = Channel::new(w, fd_identity(w).unwrap());
        let mut mods = Modules::default();
        // An address in this test binary and two in the C library.
        let exe = hits_name_their_modules_once_each as *const () as u64;
        let (write, read) = (libc::write as *const () as u64, libc::read as *const () as u64);
        // SAFETY: a zeroed Dl_info (pointers and nulls) is a valid out-parameter.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr writes through a valid out-pointer.
        assert_ne!(unsafe { libc::dladdr(write as *const libc::c_void, &mut info) }, 0);
        let libc_base = info.dli_fbase as u64;
        // SAFETY: dli_fname is the loader's NUL-terminated path of the C library.
        let libc_path = unsafe { CStr::from_ptr(info.dli_fname) }.to_bytes().to_vec();
        let mut h = Hit { wp: 2, tid: 77, flags: 1, ip: exe, old: 0xa, new: 0xb, ..Hit::default() };
        h.frames[0] = write;
        h.frames[1] = read;
        h.frames[2] = 0;
        h.nframes = 3;
        write_hit(&h, &mut mods, &mut ch);
        h.frames[0] = read;
        h.nframes = 1;
        h.flags = HIT_OLD_UNKNOWN;
        write_hit(&h, &mut mods, &mut ch);
        ch.flush();
        let bytes = read_all(r);
        let mut s = HitStream::new(&bytes[..]);
        let Some(Message::Module { id: 1, bias: exe_bias, path }) = s.read().unwrap() else {
            panic!("the executable first")
        };
        assert_eq!(path, std::fs::read_link("/proc/self/exe").unwrap().as_os_str().as_bytes());
        let m = s.read().unwrap();
        assert_eq!(m, Some(Message::Module { id: 2, bias: libc_base, path: &libc_path }));
        let at = |module, addr: u64, bias: u64| CodeAddr { module, vaddr: addr - bias };
        let Some(Message::Hit(first)) = s.read().unwrap() else { panic!("a hit") };
        assert_eq!((first.wp, first.tid, first.imprecise), (2, 77, true));
        assert_eq!((first.old, first.new), (Some(0xa), 0xb));
        assert_eq!(
            first.addrs(),
            [
                at(1, exe, exe_bias),
                at(2, write, libc_base),
                at(2, read, libc_base),
                CodeAddr { module: 0, vaddr: 0 }
            ]
        );
        let Some(Message::Hit(second)) = s.read().unwrap() else { panic!("a hit") };
        assert_eq!((second.imprecise, second.old), (false, None), "the old value unknown");
        assert_eq!(second.addrs(), [at(1, exe, exe_bias), at(2, read, libc_base)]);
        assert_eq!(s.read().unwrap(), None, "each module announced once");
        // SAFETY: closing our own fds.
        unsafe { (libc::close(r), libc::close(w)) };
    }
}
