//! The host's reading of the lines the agent writes to `strobe watch`'s pipe (the protocol
//! is documented in `agent/src/watch/mod.rs`): `start`, `wp`, `mod`, `hit`, `armed`,
//! `lost`, `chained`, `threads`, `err` and `end`.
//!
//! [`AgentLog::take`] folds one line into the run's log and hands back a hit, still as raw
//! `(module id, link-time address)` pairs; naming the code is the session's job. Unknown
//! line types are skipped (a newer agent), and a malformed field reads as 0 rather than
//! stopping the run.
//!
//! This module must never do I/O: it reads strings it is given.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// Hit flag: the SIGTRAP was blocked, so the hit was found late (no precise IP).
pub const FLAG_IMPRECISE: u32 = 1;
/// Hit flag: a read, with no old value.
pub const FLAG_READ: u32 = 2;

/// One hit as the agent reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawHit {
    /// The watchpoint's index.
    pub wp: usize,
    /// The accessing thread.
    pub tid: i32,
    /// [`FLAG_IMPRECISE`], [`FLAG_READ`].
    pub flags: u32,
    /// The value before a write.
    pub old: u64,
    /// The value after the access.
    pub new: u64,
    /// `(module id, link-time address)`: the IP first, then return addresses. Module 0 is
    /// none (an address in no module the agent knows).
    pub addrs: Vec<(u32, u64)>,
}

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
    /// Takes one line; returns it if it is a hit.
    pub fn take(&mut self, line: &str) -> Option<RawHit> {
        let mut f = line.split(' ');
        let hex = |s: Option<&str>| s.and_then(|s| u64::from_str_radix(s, 16).ok()).unwrap_or(0);
        let dec = |s: Option<&str>| s.and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
        match f.next() {
            Some("start") => {
                self.started = true;
                let _pid = f.next();
                let _n = f.next();
                self.slots = dec(f.next()) as u32;
                self.multiplexed = f.next() == Some("1");
            }
            Some("wp") => {
                let i = dec(f.next()) as usize;
                let _addr = f.next();
                self.wp_len.insert(i, dec(f.next()));
            }
            Some("mod") => {
                let id = dec(f.next()) as u32;
                let _bias = f.next();
                let path: Vec<&str> = f.collect();
                self.modules.insert(id, PathBuf::from(path.join(" ")));
            }
            Some("hit") => {
                let wp = dec(f.next()) as usize;
                let tid = dec(f.next()) as i32;
                let flags = dec(f.next()) as u32;
                let old = hex(f.next());
                let new = hex(f.next());
                let addrs = f
                    .filter_map(|a| {
                        let (m, v) = a.split_once(':')?;
                        Some((m.parse().ok()?, u64::from_str_radix(v, 16).ok()?))
                    })
                    .collect();
                self.hits += 1;
                return Some(RawHit { wp, tid, flags, old, new, addrs });
            }
            Some("armed") => {
                let i = dec(f.next()) as usize;
                let a = Armed {
                    hits: dec(f.next()),
                    armed_ns: dec(f.next()),
                    enabled_ns: dec(f.next()),
                    times: dec(f.next()),
                };
                self.armed.insert(i, a);
            }
            Some("lost") => self.lost = dec(f.next()),
            Some("chained") => self.chained = dec(f.next()),
            Some("threads") => self.threads = Some(dec(f.next())),
            Some("err") => self.errors.push(line.trim_start_matches("err ").to_string()),
            Some("end") => self.ended = true,
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_lines_are_read_back() {
        let mut log = AgentLog::default();
        for l in ["start 42 2 2 0", "wp 0 5000 4 w", "mod 1 1000 /bin/my prog", "future 1 2"] {
            assert!(log.take(l).is_none());
        }
        let h = log.take("hit 0 77 1 ffffffff 5 1:1a2b 1:30").unwrap();
        assert_eq!((h.wp, h.tid, h.flags, h.old, h.new), (0, 77, FLAG_IMPRECISE, 0xffff_ffff, 5));
        assert_eq!(h.addrs, [(1, 0x1a2b), (1, 0x30)]);
        for l in ["armed 0 1 500 1000 3", "lost 2", "chained 4", "err no slots", "end"] {
            assert!(log.take(l).is_none());
        }
        assert!(log.started && log.ended && !log.multiplexed);
        assert_eq!((log.slots, log.hits, log.lost, log.chained), (2, 1, 2, 4));
        assert_eq!(log.wp_len[&0], 4);
        assert_eq!(log.modules[&1], PathBuf::from("/bin/my prog"), "paths keep their spaces");
        assert_eq!((log.armed[&0].armed_ns, log.armed[&0].times), (500, 3));
        assert_eq!(log.armed[&0].fraction(), 0.5);
        assert_eq!(log.errors, ["no slots"]);
        assert_eq!(Armed::default().fraction(), 1.0, "never rotated: always armed");
    }
}
