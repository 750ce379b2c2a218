//! What the SIGTRAP handler reads: the watchpoints armed at start and where hits go.
//!
//! Owns [`State`] (built once, before any event is enabled, then only read), the
//! watchpoints' shadow copies (the value each last hit left, for the next hit's old
//! value), and the `sig_data` tag that tells strobe's traps from the target's. It must
//! never change after it is published, allocate, lock or panic when read: the handler
//! reads it through [`state`] with one `Acquire` load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use strobe_watch::bp::Breakpoint;
use strobe_watch::{Access, HitCounters, Len};

use super::config::Point;
use super::mem::safe_read;
use super::ring::Ring;

/// The high half of every `sig_data` strobe puts in its watchpoint events ("STRB").
pub const SIG_TAG: u64 = 0x5354_5242;

/// The `sig_data` of watchpoint `wp`'s events: [`SIG_TAG`] in the high half, the index in
/// the low half.
pub fn sig_data(wp: usize) -> u64 {
    SIG_TAG << 32 | wp as u64
}

/// One logical watchpoint at run time.
pub struct Wp {
    pub addr: u64,
    pub len: u64,
    /// Write-only: the handler may read the word directly.
    pub write_only: bool,
    pub access: Access,
    /// The value the last hit left (for the next hit's old value).
    pub shadow: AtomicU64,
    /// Whether `shadow` holds a value read since the watchpoint was last armed.
    pub shadow_valid: AtomicU64,
}

impl Wp {
    /// A watchpoint at a parsed point, its shadow not read yet.
    pub fn new(p: Point) -> Wp {
        Wp {
            addr: p.addr,
            len: p.len,
            write_only: p.access == Access::Write,
            access: p.access,
            shadow: AtomicU64::new(0),
            shadow_valid: AtomicU64::new(0),
        }
    }

    pub fn breakpoint(&self) -> Option<Breakpoint> {
        Some(Breakpoint { addr: self.addr, len: Len::new(self.len)?, access: self.access })
    }

    /// Refreshes the shadow copy from memory (when the watchpoint is armed).
    pub fn refresh_shadow(&self) {
        let mut b = [0u8; 8];
        let n = (self.len as usize).min(8);
        let ok = safe_read(self.addr, &mut b[..n]);
        // Release: a handler's AcqRel swap on this word sees the value with the flag.
        self.shadow.store(u64::from_le_bytes(b), Ordering::Release);
        self.shadow_valid.store(u64::from(ok), Ordering::Release);
    }
}

/// What the handler needs, built once before any event is enabled.
pub struct State {
    pub wps: Box<[Wp]>,
    pub hits: HitCounters,
    pub ring: Ring,
    pub stack: bool,
}

static STATE: OnceLock<State> = OnceLock::new();

/// Publishes the state, once; false if it was already set.
pub fn publish(st: State) -> bool {
    STATE.set(st).is_ok()
}

/// The handler's view of the state. Async-signal-safe (one Acquire load).
pub fn state() -> Option<&'static State> {
    STATE.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sig_data_carries_the_tag_and_the_index() {
        assert_eq!(sig_data(5) >> 32, SIG_TAG);
        assert_eq!(sig_data(5) & 0xffff_ffff, 5);
        assert_eq!(&(SIG_TAG as u32).to_be_bytes(), b"STRB");
    }

    #[test]
    fn the_shadow_follows_the_watched_word() {
        static WORD: AtomicU64 = AtomicU64::new(0x1234);
        let w = Wp::new(Point {
            addr: &WORD as *const AtomicU64 as u64,
            len: 4,
            access: Access::ReadWrite,
        });
        assert!(!w.write_only);
        assert_eq!(w.shadow_valid.load(Ordering::Relaxed), 0);
        w.refresh_shadow();
        assert_eq!(w.shadow.load(Ordering::Relaxed), 0x1234);
        assert_eq!(w.shadow_valid.load(Ordering::Relaxed), 1);
        WORD.store(0xaabb_ccdd_eeff, Ordering::Relaxed);
        w.refresh_shadow();
        assert_eq!(w.shadow.load(Ordering::Relaxed), 0xccdd_eeff, "four bytes, little-endian");
        let b = w.breakpoint().unwrap();
        assert_eq!((b.addr, b.len.bytes(), b.access), (w.addr, 4, Access::ReadWrite));
        // An unmapped word leaves the shadow marked unknown.
        let gone = Wp::new(Point { addr: 16, len: 8, access: Access::Write });
        gone.refresh_shadow();
        assert_eq!(gone.shadow_valid.load(Ordering::Relaxed), 0);
    }
}
