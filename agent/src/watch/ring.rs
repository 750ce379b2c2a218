//! The hit buffer: a bounded multi-producer, single-consumer ring of [`Hit`] records,
//! filled by the SIGTRAP handler on any target thread and drained by the agent's watch
//! writer thread.
//!
//! It owns the record type. The ring itself is `strobe_sampler::MpscRing` (its protocol,
//! memory orderings and loom models live there): a full ring drops the hit and counts it
//! as lost instead of waiting, and its producer side never blocks, allocates or panics.
//! A handler cannot be re-entered by SIGTRAP on its own thread (the signal is blocked
//! while it runs), and the ring's CAS makes concurrent producers on other threads safe.

/// Return addresses kept per hit with `--stack`: as many as a hit message carries.
pub const MAX_FRAMES: usize = strobe_protocol::watch::MAX_FRAMES;

/// One watch hit, as the handler saw it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Hit {
    /// The logical watchpoint.
    pub wp: u32,
    /// The accessing thread.
    pub tid: i32,
    /// `HIT_*` flags.
    pub flags: u32,
    /// Frames in `frames`.
    pub nframes: u32,
    /// The interrupted instruction pointer (just after the access).
    pub ip: u64,
    /// The value before the access (the watchpoint's shadow copy).
    pub old: u64,
    /// The value after the access.
    pub new: u64,
    /// Return addresses, innermost first.
    pub frames: [u64; MAX_FRAMES],
}

/// The hit was delivered asynchronously (SIGTRAP blocked): `ip` is not the access.
pub const HIT_IMPRECISE: u32 = 1;
/// `old` is not known (the watchpoint was just re-armed by the multiplexer).
pub const HIT_OLD_UNKNOWN: u32 = 2;

/// The ring of hits.
pub type Ring = strobe_sampler::MpscRing<Hit>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn every_record_arrives_once_in_claim_order_or_is_counted_lost() {
        let ring = Arc::new(Ring::new(64));
        let producers: Vec<_> = (0..4)
            .map(|p| {
                let ring = ring.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        ring.push(&Hit { wp: p, new: i, ..Hit::default() });
                    }
                })
            })
            .collect();
        let mut seen = [0u64; 4];
        let mut last = [None::<u64>; 4];
        let mut done = false;
        while !done {
            done = producers.iter().all(|p| p.is_finished());
            // SAFETY: the only consumer.
            while let Some(h) = unsafe { ring.pop() } {
                let p = h.wp as usize;
                assert!(last[p].is_none_or(|l| l < h.new), "per producer order kept");
                last[p] = Some(h.new);
                seen[p] += 1;
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        // SAFETY: the only consumer.
        while let Some(h) = unsafe { ring.pop() } {
            seen[h.wp as usize] += 1;
        }
        assert_eq!(seen.iter().sum::<u64>() + ring.lost(), 40_000);
    }
}
