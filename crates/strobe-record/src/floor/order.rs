//! Putting the records of all CPUs' rings back in time order.
//!
//! Each ring holds one CPU's records in the order the kernel wrote them, which is time
//! order for that CPU; a thread that migrates has records in two rings, so a reader that
//! took each ring in turn would see a thread's samples out of order (and a child's
//! samples before its FORK). The rule is `perf record`'s rounds: every pass reads every
//! ring once (a round); at the end of round N, the records read so far are released, in
//! time order, up to the latest time seen by the end of round N-1. A record still on its
//! way into a ring when round N-1 ended was stamped before it was written, and is read in
//! round N at the latest: by then every earlier record has been read too.
//!
//! Owns: the held records and the release rule. Must never release a record before one
//! with an earlier time that it has already seen, nor hold one past [`Order::finish`].

use super::decode::Timed;

/// Records held until they can be released in order.
#[derive(Debug, Default)]
pub(crate) struct Order {
    held: Vec<(u64, u64, Timed)>,
    seq: u64,
    /// The latest time seen in the current round.
    round_max: u64,
    /// The latest time seen by the end of the previous round.
    released_to: u64,
}

impl Order {
    /// Holds a record read in the current round.
    pub(crate) fn push(&mut self, t: Timed) {
        self.round_max = self.round_max.max(t.time);
        self.held.push((t.time, self.seq, t));
        self.seq += 1;
    }

    /// Ends a round: returns, in time order, the records up to the latest time of the
    /// previous round.
    pub(crate) fn end_round(&mut self) -> Vec<Timed> {
        let limit = self.released_to;
        self.released_to = self.round_max;
        self.release(|time| time <= limit)
    }

    /// Releases everything held, in time order (the rings are drained for good).
    pub(crate) fn finish(&mut self) -> Vec<Timed> {
        self.release(|_| true)
    }

    fn release(&mut self, take: impl Fn(u64) -> bool) -> Vec<Timed> {
        self.held.sort_unstable_by_key(|&(time, seq, _)| (time, seq));
        let n = self.held.partition_point(|&(time, _, _)| take(time));
        self.held.drain(..n).map(|(_, _, t)| t).collect()
    }

    /// Records held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::decode::{Ev, Timed};
    use super::*;

    fn t(time: u64, tid: u32) -> Timed {
        Timed { time, ev: Ev::Exit { pid: 1, tid } }
    }

    fn times(v: &[Timed]) -> Vec<u64> {
        v.iter().map(|t| t.time).collect()
    }

    #[test]
    fn records_come_out_in_time_order_a_round_late() {
        let mut o = Order::default();
        // Round 1: CPU 0 read up to 30, CPU 1 up to 25.
        for x in [10, 20, 30] {
            o.push(t(x, 0));
        }
        for x in [15, 25] {
            o.push(t(x, 1));
        }
        assert!(o.end_round().is_empty(), "nothing before the first round's end");
        // Round 2: a record stamped 28 that was being written when round 1 read CPU 1.
        o.push(t(28, 1));
        o.push(t(40, 0));
        assert_eq!(times(&o.end_round()), [10, 15, 20, 25, 28, 30]);
        o.push(t(35, 1));
        assert_eq!(times(&o.end_round()), [35, 40]);
        o.push(t(50, 0));
        assert_eq!(o.len(), 1);
        assert_eq!(times(&o.finish()), [50]);
        assert_eq!(o.len(), 0);
    }

    #[test]
    fn equal_times_keep_the_order_they_were_read_in() {
        let mut o = Order::default();
        for tid in 0..5 {
            o.push(t(7, tid));
        }
        let out = o.finish();
        let tids: Vec<u32> = out
            .iter()
            .map(|t| match t.ev {
                Ev::Exit { tid, .. } => tid,
                _ => 99,
            })
            .collect();
        assert_eq!(tids, [0, 1, 2, 3, 4]);
    }
}
