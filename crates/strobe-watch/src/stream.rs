//! The host's reading of what the agent says over `strobe watch`'s pipe: strobe-protocol's
//! watch messages (decoded there, by `HitStream`), folded into the run's log.
//!
//! [`AgentLog::take`] folds one message into the log and hands back a hit, still as raw
//! `(module id, link-time address)` pairs ([`CodeAddr`]); naming the code is the session's
//! job.
//!
//! This module must never do I/O or decode bytes: it folds messages it is given.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

pub use strobe_protocol::watch::{CodeAddr, HitRecord, Message};

/// How long one watchpoint was armed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Armed {
    /// Hits while armed.
    pub hits: u64,
    /// Nanoseconds armed.
    pub armed_ns: u64,
    /// Nanoseconds the watch was on at all.
    pub enabled_ns: u64,
    /// Turns it was armed.
    pub times: u64,
}

impl Armed {
    /// The fraction of the time it was armed (1 when it was never rotated).
    pub fn fraction(&self) -> f64 {
        if self.enabled_ns > 0 {
            self.armed_ns as f64 / self.enabled_ns as f64
        } else {
            1.0
        }
    }
}

/// Everything the agent said, but the hits themselves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentLog {
    /// The agent started in the program.
    pub started: bool,
    /// More watchpoints than slots: they took turns.
    pub multiplexed: bool,
    /// Debug registers per thread.
    pub slots: u32,
    /// Module id -> the file the agent found it mapped from.
    pub modules: HashMap<u32, PathBuf>,
    /// Watchpoint -> its length in bytes.
    pub wp_len: HashMap<usize, u64>,
    /// Hits reported.
    pub hits: u64,
    /// Watchpoint -> its armed time (reported at exit).
    pub armed: BTreeMap<usize, Armed>,
    /// Hits the agent's buffer had no room for.
    pub lost: u64,
    /// SIGTRAPs passed on to the program's own handler.
    pub chained: u64,
    /// Per-thread mode: threads that got their own events.
    pub threads: Option<u64>,
    /// What the agent could not do.
    pub errors: Vec<String>,
    /// The agent reported the program's exit.
    pub ended: bool,
}

impl AgentLog {
    /// Takes one message; returns the hit if it is one.
    pub fn take(&mut self, m: &Message<'_>) -> Option<HitRecord> {
        match *m {
            Message::Hello { .. } => {}
            Message::Start { slots, multiplexed, .. } => {
                self.started = true;
                self.slots = slots;
                self.multiplexed = multiplexed;
            }
            Message::Watchpoint { index, len, .. } => {
                self.wp_len.insert(index as usize, u64::from(len));
            }
            Message::Module { id, path, .. } => {
                self.modules.insert(id, PathBuf::from(OsStr::from_bytes(path)));
            }
            Message::Hit(h) => {
                self.hits += 1;
                return Some(h);
            }
            Message::Armed { wp, hits, armed_ns, enabled_ns, times } => {
                self.armed.insert(wp as usize, Armed { hits, armed_ns, enabled_ns, times });
            }
            Message::Lost(n) => self.lost = n,
            Message::Chained(n) => self.chained = n,
            Message::Threads(n) => self.threads = Some(n),
            Message::Error(e) => self.errors.push(e.to_string()),
            Message::End => self.ended = true,
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strobe_protocol::watch::Access;

    #[test]
    fn the_agents_messages_are_folded_into_the_log() {
        let mut log = AgentLog::default();
        for m in [
            Message::Start { pid: 42, watchpoints: 2, slots: 2, multiplexed: false },
            Message::Watchpoint { index: 0, addr: 0x5000, len: 4, access: Access::Write },
            Message::Module { id: 1, bias: 0x1000, path: b"/bin/my prog" },
        ] {
            assert!(log.take(&m).is_none());
        }
        let mut hit = HitRecord::new(0, 77, true, Some(0xffff_ffff), 5);
        hit.push(CodeAddr { module: 1, vaddr: 0x1a2b });
        hit.push(CodeAddr { module: 1, vaddr: 0x30 });
        let h = log.take(&Message::Hit(hit)).unwrap();
        assert_eq!(h, hit);
        for m in [
            Message::Armed { wp: 0, hits: 1, armed_ns: 500, enabled_ns: 1000, times: 3 },
            Message::Lost(2),
            Message::Chained(4),
            Message::Error("no slots"),
            Message::End,
        ] {
            assert!(log.take(&m).is_none());
        }
        assert!(log.started && log.ended && !log.multiplexed);
        assert_eq!((log.slots, log.hits, log.lost, log.chained), (2, 1, 2, 4));
        assert_eq!(log.wp_len[&0], 4);
        assert_eq!(log.modules[&1], PathBuf::from("/bin/my prog"), "paths keep their spaces");
        assert_eq!((log.armed[&0].armed_ns, log.armed[&0].times), (500, 3));
        assert_eq!(log.armed[&0].fraction(), 0.5);
        assert_eq!(log.errors, ["no slots"]);
        assert_eq!(log.threads, None);
        log.take(&Message::Threads(5));
        assert_eq!(log.threads, Some(5));
        assert_eq!(Armed::default().fraction(), 1.0, "never rotated: always armed");
    }
}
