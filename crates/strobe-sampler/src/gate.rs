//! A one-way gate between agent code that may make system calls in a target's threads
//! (signal handlers, thread set-up) and a thread that is about to forbid them (a program
//! installing a seccomp filter, `agent/src/sandbox.rs`): once [`Gate::close`] has returned
//! and [`Gate::in_flight`] has read 0, no code that passed [`Gate::enter`] is still
//! running, and none will pass again.
//!
//! The flag and the count share one word (the flag is its top bit), so every step is a
//! read-modify-write of one location, and those are totally ordered (its modification
//! order) without SeqCst: `enter` adds one and looks at the flag in the value it
//! replaced; `close` sets the flag. If the add came first, every later read of the word
//! (the closer's wait) counts that pass until it drops (Release, read with Acquire: what
//! the pass covered happens before the closer goes on); if the close came first, the add
//! saw the flag and the caller gets no pass.
//!
//! Owns: the flag and the count. Must never block, allocate or panic: `enter` and the
//! pass's drop run in signal handlers; waiting is the closer's business.

use crate::sync::{AtomicUsize, Ordering};

/// The word's flag: the gate is closed.
const CLOSED: usize = 1 << (usize::BITS - 1);

/// See the module note.
#[derive(Debug)]
pub struct Gate {
    /// [`CLOSED`], and below it the passes not yet dropped.
    word: AtomicUsize,
}

/// Code that passed an open gate runs while this lives.
#[derive(Debug)]
pub struct Pass<'a>(&'a Gate);

impl Drop for Pass<'_> {
    #[inline]
    fn drop(&mut self) {
        self.0.word.fetch_sub(1, Ordering::Release);
    }
}

impl Gate {
    crate::sync::const_fn! {
        /// An open gate.
        pub fn new() -> Gate {
            Gate { word: AtomicUsize::new(0) }
        }
    }

    /// A pass, unless the gate is closed. Async-signal-safe, wait-free.
    #[inline]
    pub fn enter(&self) -> Option<Pass<'_>> {
        // Relaxed: whether this add came before or after the close is decided by the
        // word's modification order alone; what the pass covers is ordered for the closer
        // by the drop's Release.
        let before = self.word.fetch_add(1, Ordering::Relaxed);
        let pass = Pass(self);
        if before & CLOSED != 0 {
            return None; // the pass drops here
        }
        Some(pass)
    }

    /// Closes the gate; `true` for the call that closed it.
    #[inline]
    pub fn close(&self) -> bool {
        self.word.fetch_or(CLOSED, Ordering::AcqRel) & CLOSED == 0
    }

    /// Whether the gate is closed (Relaxed: a hint; `enter` is the check that counts).
    #[inline]
    pub fn is_closed(&self) -> bool {
        self.word.load(Ordering::Relaxed) & CLOSED != 0
    }

    /// Passes not yet dropped. After [`close`](Self::close), 0 means none is left and
    /// none will come.
    #[inline]
    pub fn in_flight(&self) -> usize {
        // Acquire: a count that a pass's drop lowered carries what the pass covered.
        self.word.load(Ordering::Acquire) & !CLOSED
    }
}

impl Default for Gate {
    fn default() -> Gate {
        Gate::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    #[test]
    fn a_closed_gate_gives_no_pass_and_counts_back_down() {
        let g = Gate::new();
        {
            let _p = g.enter().unwrap();
            assert_eq!(g.in_flight(), 1);
        }
        assert!(g.close() && !g.close(), "only the first close closes");
        assert!(g.enter().is_none());
        assert_eq!(g.in_flight(), 0);
    }

    /// Stress: four threads enter and, inside a pass, bump a counter; a closer closes the
    /// gate mid-way, waits for the count to reach 0 and reads the counter twice across a
    /// pause: nothing moved it after the wait (no pass outlived it, none came after).
    #[test]
    fn nothing_runs_inside_after_the_closer_waited() {
        for _ in 0..200 {
            let g = Arc::new(Gate::new());
            let work = Arc::new(AtomicU64::new(0));
            let threads: Vec<_> = (0..4)
                .map(|_| {
                    let (g, work) = (g.clone(), work.clone());
                    std::thread::spawn(move || {
                        while let Some(_p) = g.enter() {
                            work.fetch_add(1, Ordering::Relaxed);
                            std::hint::spin_loop();
                            work.fetch_add(1, Ordering::Relaxed);
                        }
                    })
                })
                .collect();
            while work.load(Ordering::Relaxed) < 100 {
                std::thread::yield_now();
            }
            assert!(g.close());
            while g.in_flight() != 0 {
                std::thread::yield_now();
            }
            let seen = work.load(Ordering::Relaxed);
            assert_eq!(seen % 2, 0, "a pass was cut in half");
            std::thread::sleep(std::time::Duration::from_micros(200));
            assert_eq!(work.load(Ordering::Relaxed), seen, "work after the wait");
            threads.into_iter().for_each(|t| t.join().unwrap());
        }
    }
}
