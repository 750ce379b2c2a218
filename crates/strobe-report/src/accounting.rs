//! Where the CPU time no sample stands for went, per process and thread.
//!
//! A recording with per-thread CPU times (THREADCPU chunks: each thread's exact count
//! from the kernel, the part the agent served, the agent's own set-up) says, for every
//! thread of the tree, how much time its samples stand for (its time samples times its
//! stream's sampling cycle, agent and floor alike) and how much it really ran. The
//! difference is what the samples miss: a thread's life shorter than the floor's period
//! (the kernel starts every inherited counter at a full period), the stretch from its
//! start to its first sample, time in the kernel where only user samples are allowed.
//! It is named: strobe's agent's own set-up as `[strobe agent]`, the rest as
//! `[not sampled]` of that process (its command) and thread (its name), never one global
//! bucket. Differences are summed per (command, thread name) before they are named: the
//! agent's samples are unbiased (a random first phase) but noisy per thread, and their
//! noise cancels over a group where a per-thread clamp would not.
//!
//! The kernel's per-task counts start a little after a process's fork and stop a little
//! before its exit ends, and on this VM they also leave out about 15 us of each sleep
//! that rusage charges to the thread (one thread of 100 us sleeps: 1.78 s of task-clock,
//! 2.99 s of `CLOCK_THREAD_CPUTIME_ID`; computing code agrees within 1%); the launched
//! command's `wait4` rusage counts its whole tree. Their difference is one more
//! `[not sampled]` row, "starts, exits and switches". What the
//! counts hold is summed per command (its threads' counts, or their samples' worth when
//! that is more), never as a per-thread maximum: threads shorter than a cycle are each
//! sampled once or not at all, a sampled one stands for ten times what it ran, and over
//! 12000 threads of 1 ms those maxima outgrew the tree and hid its 1-2% beyond the counts
//! (every share of `short_threads` read that much high: short_worker +1.2 points on
//! average over five recordings, +0.15 once named).
//!
//! Samples lost in a ring are the process's, not the thread's they are counted on: a
//! per-CPU ring's LOST record carries the task that wrote it, the first to find room
//! after the ring filled, whichever thread's samples were lost. A thread whose count
//! never arrived (its exit's record was lost with the samples) and that holds lost
//! samples is not compared with a count; its lost samples' worth is a surplus of its
//! command, which cancels the other threads' shortfall. Before this, one recording of two
//! spinning threads at a 20 us period (a 4 KB ring: every sample lost, 20,203 of 20,778
//! counted on the thread whose count was lost) named 205 ms of its 419 ms `[not
//! sampled]`: the other spinning thread's whole time.
//!
//! When the recording is of one process, the launched command's rusage bounds the whole:
//! what is named `[not sampled]` is at most what it ran beyond its samples' worth (kept
//! and lost). With more processes the rusage can miss some (a child its parent never
//! waited for, a daemon that left the tree), so it bounds nothing. The kernel's per-task
//! counts can exceed it: with a 4 KB ring that overflows all the time (two threads
//! spinning 200 ms at a 20 us period), each worker's task-clock at its exit read 209-219
//! ms in six recordings, 201-203 ms with the default ring, and in one recording whose
//! three counts all arrived they summed to 425.3 ms against the tree's 411.1. Unbounded,
//! that excess was named: 79 ms of 402 once in CI, where the tree ran 12 ms beyond the
//! spinning.
//!
//! Where the sampling leader excluded the kernel (user space only: an unprivileged user
//! at `perf_event_paranoid` 2), a timer that fires while a thread is in the kernel takes
//! no sample, while the thread's task-clock count holds that time: its shortfall is
//! mostly its time in the kernel, and its rows say so. (`dd bs=64` recorded so: 78% of
//! its CPU time was named, as the kernel's.) An agent's samples then stand for the
//! configured cycle: the leader's count between two samples holds every period whose
//! timer fired in the kernel, and taken as the cycle it spread the kernel time over the
//! user functions sampled (`dd`: 1 sample's worth named of 28).
//!
//! Older files (no THREADCPU) keep the one `[not sampled]` row of the END chunks.
//!
//! Owns: that arithmetic. Must never read the file (the adapter feeds it) or touch
//! samples' attribution.

use rustc_hash::FxHashMap;
use strobe_format::{ProcessInfo, ThreadCpu};

use crate::report::{AGENT, UNSAMPLED};
use crate::Aggregator;

/// The name of the tree's rusage beyond the per-task counts (see the module note).
const STARTS_EXITS_SWITCHES: &str = "starts, exits and switches";
/// What a thread's shortfall is named when the leader excluded the kernel.
const KERNEL_EXCLUDED: &str = " (its time in the kernel: the events sample user space only)";

/// The agent samples a thread needs before its served CPU time measures the sampler's
/// own time in it: its count over its served time is that time over the cycle give or
/// take one (a random first phase), 1% of its samples' worth at 100.
const MIN_SAMPLES_FOR_UNCOUNTED: u64 = 100;

/// One stream as the accounting needs it.
#[derive(Debug, Clone, Default)]
struct Stream {
    pid: u32,
    /// The sampling cycle one time sample stands for (leader units: ns for time).
    cycle: f64,
    /// Sampled by strobe's agent (its cycle measured from the leader's counts), not by
    /// the kernel.
    agent: bool,
    /// The agent's measured cost of one sample, ns (0: unknown).
    cost: f64,
}

/// Per (pid, tid): what its samples and the kernel say.
#[derive(Debug, Clone, Default)]
struct Thread {
    /// Time the samples stand for, ns (samples times their stream's cycle; streams whose
    /// cycle is not known yet are added at the end).
    sampled_ns: f64,
    /// The sampler's own time in the thread with its group stopped, when measured
    /// (`Accounting::measure_sampler`): part of its samples, not a remainder.
    sampler_ns: f64,
    /// The part of `sampled_ns` that samples lost in a ring stand for (counted on this
    /// thread, perhaps taken on another of its process).
    lost_ns: f64,
    cpu: ThreadCpu,
    name: String,
    command: String,
}

/// The accounting of one recording, fed as the file is read.
#[derive(Debug, Default)]
pub(crate) struct Accounting {
    streams: FxHashMap<u32, Stream>,
    /// Time samples per (stream, tid), until the stream's cycle is known.
    samples: FxHashMap<(u32, u32), u64>,
    /// Of those, the samples lost in a ring.
    lost: FxHashMap<(u32, u32), u64>,
    threads: FxHashMap<(u32, u32), Thread>,
    /// Thread names per (stream, tid).
    names: FxHashMap<(u32, u32), String>,
    any_thread_cpu: bool,
    /// The launched command's tree's CPU time (its `wait4` rusage), when known.
    tree_cpu_ns: Option<u64>,
    /// The END chunks' unsampled time, samples' worth (files without THREADCPU).
    pub old_unsampled: f64,
    /// Per pid, the command of its last image.
    last_command: FxHashMap<u32, String>,
    /// The sampling leader excluded the kernel: the threads' time there has no sample
    /// (see the module note).
    kernel_excluded: bool,
}

/// One command's part of the recording: its processes, and the CPU time its samples and
/// the named remainders stand for, in samples' worth.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessShare {
    /// The command (the executable's file name).
    pub command: String,
    /// Processes that ran it (their last image).
    pub processes: u64,
    /// Threads of those processes.
    pub threads: u64,
    /// Samples' worth of CPU time: its samples and its `[not sampled]` and
    /// `[strobe agent]` rows.
    pub samples: f64,
    /// The CPU time (ns) those samples' worth stand for.
    pub cpu_ns: f64,
}

pub(crate) fn file_name(p: &std::path::Path) -> String {
    p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned())
}

impl Accounting {
    /// Accounting for a recording whose sampling leader excluded the kernel, or not.
    pub(crate) fn new(kernel_excluded: bool) -> Accounting {
        Accounting { kernel_excluded, ..Accounting::default() }
    }

    /// Whether the sampling leader excluded the kernel (see the module note).
    pub(crate) fn kernel_excluded(&self) -> bool {
        self.kernel_excluded
    }

    /// A stream began.
    pub(crate) fn process(&mut self, stream: u32, info: &ProcessInfo) {
        let cycle = info.period as f64 + info.jitter as f64 / 2.0 + info.window as f64;
        let command = file_name(&info.exe);
        // A process's command is its last image's (that names one).
        if !command.is_empty() {
            self.last_command.insert(info.pid, command.clone());
        }
        let cost = info.sample_cost_ns as f64;
        self.streams.insert(stream, Stream { pid: info.pid, cycle, agent: false, cost });
    }

    /// The stream's measured cycle (its END).
    pub(crate) fn cycle(&mut self, stream: u32, cycle: f64) {
        if let Some(s) = self.streams.get_mut(&stream) {
            if cycle.is_finite() && cycle > 0.0 {
                s.cycle = cycle;
                s.agent = true;
            }
        }
    }

    /// `n` time samples (or samples taken and lost) of thread `tid` in `stream`.
    pub(crate) fn samples(&mut self, stream: u32, tid: u32, n: u64) {
        *self.samples.entry((stream, tid)).or_insert(0) += n;
    }

    /// `n` samples taken and lost in a ring, counted on thread `tid` in `stream` (see
    /// the module note: perhaps another thread's of the process).
    pub(crate) fn lost(&mut self, stream: u32, tid: u32, n: u64) {
        self.samples(stream, tid, n);
        *self.lost.entry((stream, tid)).or_insert(0) += n;
    }

    /// A thread's name in `stream`.
    pub(crate) fn thread_name(&mut self, stream: u32, tid: u32, name: &str) {
        self.names.insert((stream, tid), name.to_string());
    }

    /// The launched command's tree's CPU time (an END's).
    pub(crate) fn tree_cpu(&mut self, ns: u64) {
        self.tree_cpu_ns = Some(self.tree_cpu_ns.map_or(ns, |t| t.max(ns)));
    }

    /// Threads' CPU times, written in `stream`.
    pub(crate) fn thread_cpu(&mut self, stream: u32, threads: &[ThreadCpu]) {
        let pid = self.streams.get(&stream).map_or(0, |s| s.pid);
        for t in threads {
            self.any_thread_cpu = true;
            let e = self.threads.entry((pid, t.tid)).or_default();
            e.cpu.tid = t.tid;
            e.cpu.cpu_ns = e.cpu.cpu_ns.saturating_add(t.cpu_ns);
            e.cpu.served_ns = e.cpu.served_ns.saturating_add(t.served_ns);
            e.cpu.agent_ns = e.cpu.agent_ns.saturating_add(t.agent_ns);
        }
    }

    /// What a thread's agent samples stand for beyond the leader's counts: the sampler's
    /// own time with the group stopped (the handlers, the stack walk), which the thread's
    /// CPU time holds and its leader does not. Measured per thread, exactly: its served
    /// CPU time (the kernel's count over the stretches its leader was enabled) less the
    /// leader's counts (samples times the measured cycle). A calibration cannot give it:
    /// it depends on the thread's stacks (1-4 us a sample without a walk, 20-27 us with
    /// DWARF walks of deep stacks).
    ///
    /// Only threads with enough samples measure it: a thread's count is its served time
    /// over the cycle give or take one, so a 1 ms worker or a 3 ms child has a cycle of
    /// counting noise against a few microseconds. And only within the samples' measured
    /// cost: a thread whose leader missed more had stretches with its group stopped that
    /// were not the sampler's (a one-shot window's group left disabled while it blocked
    /// every signal, as pthread_create and posix_spawn do around clone: 54 and 81 us a
    /// sample against a 35 us cost), the program's time no sample stands for, which stays
    /// `[not sampled]`.
    ///
    /// The served time is the thread's own CPU clock (`CLOCK_THREAD_CPUTIME_ID`); the
    /// kernel's count and the leader's counts are perf's task-clock, which runs on another
    /// clock. Mostly the two agree (a served worker's count 2-6 ms above its served time
    /// over 1.2 s), but in 4 of 18 recordings in one quarter hour the task-clock count
    /// ran 17-23% ahead (1.41-1.49 s against 1.20 s served, the program's own process
    /// CPU time 1.21 s), and the leader's counts with it: the leader counted more than the
    /// thread was served, which no sampler time can make. The scheduler's clock leaves out
    /// the time the VM's CPU was taken away (steal), perf's does not: that is the likely
    /// cause, not proven. The sampler's time was then named `[not sampled]`, 6-8% of a
    /// recording at a 250 us period. When the leader counted more than one cycle beyond
    /// the served time, the served stretch is measured in the kernel's units instead: the
    /// thread's count less its floor samples' worth (what the kernel sampled while the
    /// agent did not serve it), its cost scaled by the same ratio.
    fn measure_sampler(&mut self) {
        /// One thread's agent samples: what they count, how many, what they cost, the
        /// longest cycle of their streams.
        #[derive(Default)]
        struct Agent {
            counted: f64,
            k: u64,
            cost: f64,
            cycle: f64,
        }
        let mut per_thread: FxHashMap<(u32, u32), Agent> = FxHashMap::default();
        // Per thread, the floor's samples' worth (what the kernel sampled unserved).
        let mut floor: FxHashMap<(u32, u32), f64> = FxHashMap::default();
        for (&(stream, tid), &k) in &self.samples {
            let Some(s) = self.streams.get(&stream) else { continue };
            if s.agent {
                let e = per_thread.entry((s.pid, tid)).or_default();
                e.counted += k as f64 * s.cycle;
                e.k += k;
                e.cost += k as f64 * s.cost;
                e.cycle = e.cycle.max(s.cycle);
            } else {
                *floor.entry((s.pid, tid)).or_default() += k as f64 * s.cycle;
            }
        }
        for (key, Agent { counted, k, cost, cycle }) in per_thread {
            let Some(t) = self.threads.get_mut(&key) else { continue };
            if k < MIN_SAMPLES_FOR_UNCOUNTED {
                continue;
            }
            let served = t.cpu.served_ns as f64;
            let within = |excess: f64, cost: f64| excess > 0.0 && (cost == 0.0 || excess <= cost);
            let excess = served - counted;
            if within(excess, cost) {
                t.sampler_ns = excess;
            } else if served > 0.0 && counted - served > cycle {
                // The clocks disagree (see above): the served stretch in the kernel's units.
                let kernel = t.cpu.cpu_ns as f64;
                let excess = kernel - floor.get(&key).copied().unwrap_or(0.0) - counted;
                if within(excess, cost * kernel / served) {
                    t.sampler_ns = excess;
                }
            }
        }
    }

    /// Per thread: what its samples (kept and lost) and the sampler's measured time stand
    /// for, its name and its process's command.
    fn fill_threads(&mut self) {
        for (&(stream, tid), &n) in &self.samples {
            let Some(s) = self.streams.get(&stream) else { continue };
            let t = self.threads.entry((s.pid, tid)).or_default();
            t.sampled_ns += n as f64 * s.cycle;
            if let Some(name) = self.names.get(&(stream, tid)) {
                t.name = name.clone();
            }
        }
        for (&(stream, tid), &n) in &self.lost {
            let Some(s) = self.streams.get(&stream) else { continue };
            self.threads.entry((s.pid, tid)).or_default().lost_ns += n as f64 * s.cycle;
        }
        for t in self.threads.values_mut() {
            t.sampled_ns += t.sampler_ns;
        }
        for (&(stream, tid), name) in &self.names {
            if let Some(s) = self.streams.get(&stream) {
                let t = self.threads.entry((s.pid, tid)).or_default();
                if t.name.is_empty() {
                    t.name = name.clone();
                }
            }
        }
        // A process no image of which named its executable (a fork child that ended or
        // exec'd before the floor learnt one) goes by its main thread's name (a fork child
        // runs its parent's program), else its lowest-numbered named thread's (the same
        // whatever order the map gives), else its pid: never by nothing.
        let mut fallback: FxHashMap<u32, (bool, u32, String)> = FxHashMap::default();
        for (&(pid, tid), t) in &self.threads {
            if t.name.is_empty() {
                continue;
            }
            // Ordered: the main thread first, then by tid.
            let key = (tid != pid, tid, t.name.clone());
            match fallback.get(&pid) {
                Some(have) if *have <= key => {}
                _ => {
                    fallback.insert(pid, key);
                }
            }
        }
        for (&(pid, _), t) in self.threads.iter_mut() {
            t.command = match (self.last_command.get(&pid), fallback.get(&pid)) {
                (Some(c), _) | (None, Some((_, _, c))) => c.clone(),
                (None, None) => format!("[pid {pid}]"),
            };
        }
    }

    /// Adds the unaccounted rows to `agg`.
    pub(crate) fn finish(mut self, agg: &mut Aggregator) {
        if !self.any_thread_cpu {
            agg.add_unsampled(self.old_unsampled);
            return;
        }
        self.measure_sampler();
        // The unit a row's samples are in: an agent stream's cycle, else the first
        // stream's (the floor's period equals the agents' mean cycle, so every stream's is
        // about the same).
        let unit = (self.streams.values().filter(|s| s.agent).chain(self.streams.values()))
            .map(|s| s.cycle)
            .find(|c| *c > 0.0)
            .unwrap_or(1.0);
        self.fill_threads();
        // Per (command, thread name): CPU time the samples miss, and the agent's share.
        let mut groups: FxHashMap<(String, String), (f64, f64)> = FxHashMap::default();
        for t in self.threads.values().filter(|t| t.cpu.cpu_ns > 0) {
            let g = groups.entry((t.command.clone(), t.name.clone())).or_default();
            g.0 += t.cpu.cpu_ns as f64 - t.sampled_ns;
            g.1 += t.cpu.agent_ns as f64;
        }
        // The tree's CPU time the per-task counts miss (each process's first and last
        // instants, inside fork and exit, where the kernel does not count a task's
        // events): known only in total, from the launched command's rusage.
        // Per command: its processes, threads and sampled time.
        let mut shares: FxHashMap<String, ProcessShare> = FxHashMap::default();
        let mut pids: FxHashMap<String, rustc_hash::FxHashSet<u32>> = FxHashMap::default();
        for (&(pid, _), t) in &self.threads {
            let e = shares.entry(t.command.clone()).or_insert_with(|| ProcessShare {
                command: t.command.clone(),
                processes: 0,
                threads: 0,
                samples: 0.0,
                cpu_ns: 0.0,
            });
            e.threads += 1;
            e.samples += t.sampled_ns / unit;
            pids.entry(t.command.clone()).or_default().insert(pid);
        }
        for (c, set) in &pids {
            if let Some(e) = shares.get_mut(c) {
                e.processes = set.len() as u64;
            }
        }
        // The tree's CPU time the per-task counts miss: spread over the commands by their
        // number of processes (each start and exit costs about the same). What the counts
        // hold is each command's as the rows below make it: its threads' counts, or their
        // samples' worth where that is more in total (a command's surplus is not named
        // away). Per command, not per thread: a thread shorter than a cycle that got a
        // sample stands for a whole cycle, ten times its 1 ms, and the sum of per-thread
        // maxima of 12000 such threads outgrew the tree (its 0.2-0.4 s beyond the counts,
        // 1-2% of it, went unnamed and every share read that much high).
        // A thread whose count never arrived (kernel mode: the count at its exit is a
        // record in the ring, lost with the samples when the ring overflowed) ran at
        // least what its kept samples stand for.
        let mut per_command: FxHashMap<&str, (f64, f64)> = FxHashMap::default();
        for t in self.threads.values() {
            let e = per_command.entry(t.command.as_str()).or_default();
            if t.cpu.cpu_ns > 0 {
                e.0 += t.cpu.cpu_ns as f64;
                e.1 += t.sampled_ns;
            } else {
                // Its kept samples' worth: its lost ones may be another thread's, whose
                // shortfall they cancel below.
                e.0 += t.sampled_ns - t.lost_ns;
                e.1 += t.sampled_ns;
            }
        }
        let counted = per_command.values().map(|&(cpu, sampled)| cpu.max(sampled)).sum::<f64>();
        let counted = counted.round() as u64;
        let nproc: u64 = shares.values().map(|e| e.processes).sum();
        let gap = self.tree_cpu_ns.and_then(|t| t.checked_sub(counted)).filter(|_| nproc > 0);
        if let Some(gap) = gap {
            let mut list: Vec<&mut ProcessShare> = shares.values_mut().collect();
            list.sort_by(|a, b| a.command.cmp(&b.command));
            for e in list {
                let part = gap as f64 * e.processes as f64 / nproc as f64 / unit;
                e.samples += part;
                agg.add_unaccounted(
                    UNSAMPLED,
                    &format!("{}: {STARTS_EXITS_SWITCHES}", e.command),
                    part,
                );
            }
        }
        // Within a command, one group's surplus (threads whose samples stand for more than
        // they ran: sampling noise, or threads of no name that form a group of their own)
        // cancels another's shortfall: the command's net remainder is what is named,
        // spread over its groups that fall short.
        let mut net: FxHashMap<String, (f64, f64)> = FxHashMap::default();
        for ((command, _), (missed, _)) in &groups {
            let e = net.entry(command.clone()).or_default();
            e.0 += missed;
            e.1 += missed.max(0.0);
        }
        // A thread with no count holding lost samples: they are its command's surplus
        // (see the module note).
        for t in self.threads.values().filter(|t| t.cpu.cpu_ns == 0 && t.lost_ns > 0.0) {
            net.entry(t.command.clone()).or_default().0 -= t.lost_ns;
        }
        // The rusage of a tree recorded as one process bounds what is named: counts above
        // it (see the module note) name only what it ran beyond its samples' worth. With
        // more processes the rusage can miss some of them (a child its parent never
        // waited for, a daemon that left the tree), so it bounds nothing.
        if let Some(tree) = self.tree_cpu_ns.filter(|_| nproc == 1) {
            let sampled: f64 = self.threads.values().map(|t| t.sampled_ns).sum();
            let room = (tree as f64 - sampled - gap.unwrap_or(0) as f64).max(0.0);
            let named: f64 = net.values().map(|e| e.0.max(0.0)).sum();
            if named > room {
                let k = room / named;
                for e in net.values_mut().filter(|e| e.0 > 0.0) {
                    e.0 *= k;
                }
            }
        }
        let mut rows: Vec<((String, String), (f64, f64))> = groups.into_iter().collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        for ((command, thread), (missed, agent)) in rows {
            let (total, short) = net.get(&command).copied().unwrap_or((0.0, 0.0));
            if missed <= 0.0 || total <= 0.0 || short <= 0.0 {
                continue;
            }
            let missed = missed * (total / short).min(1.0);
            let by_agent = missed.min(agent);
            agg.add_unaccounted(AGENT, "set-up", by_agent / unit);
            if let Some(e) = shares.get_mut(&command) {
                e.samples += missed / unit;
            }
            let mut module = if thread.is_empty() || thread == command {
                command
            } else {
                format!("{command}: {thread}")
            };
            if self.kernel_excluded {
                module.push_str(KERNEL_EXCLUDED);
            }
            agg.add_unaccounted(UNSAMPLED, &module, (missed - by_agent) / unit);
        }
        let mut list: Vec<ProcessShare> = shares.into_values().collect();
        for e in &mut list {
            e.cpu_ns = e.samples * unit;
        }
        list.sort_by(|a, b| {
            b.samples.total_cmp(&a.samples).then_with(|| a.command.cmp(&b.command))
        });
        agg.set_processes(list);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::RecordInfo;

    fn info(pid: u32, period: u64) -> ProcessInfo {
        ProcessInfo {
            pid,
            ppid: 1,
            origin: strobe_format::ProcessOrigin::Start,
            exe: "/bin/prog".into(),
            start_mono_ns: 0,
            period,
            window: 0,
            jitter: 0,
            period_source: strobe_format::PeriodSource::Budget,
            sample_cost_ns: 0,
            floor_cost_ns: 0,
            predicted_overhead_ppm: 0,
            floor: false,
        }
    }

    fn cpu(tid: u32, cpu_ns: u64, served_ns: u64) -> ThreadCpu {
        ThreadCpu { tid, cpu_ns, served_ns, agent_ns: 0 }
    }

    fn finish(acct: Accounting) -> (Vec<(String, String, f64)>, Vec<ProcessShare>) {
        let info = RecordInfo {
            events: vec!["task-clock".into()],
            period: 1_000_000,
            window: 0,
            jitter: 0,
            command: vec!["prog".into()],
            source: None,
        };
        let mut agg = Aggregator::new(info).unwrap();
        acct.finish(&mut agg);
        (agg.tally().unaccounted.clone(), agg.tally().processes.clone())
    }

    /// An agent stream whose threads ran 10% more than the leader counted (the sampler's
    /// own time with the group stopped): that time is part of each sample, not a
    /// remainder.
    #[test]
    fn the_samplers_own_time_is_part_of_each_agent_sample() {
        let mut a = Accounting::default();
        a.process(7, &info(100, 1_000_000));
        a.thread_cpu(7, &[cpu(100, 110_000_000, 110_000_000)]);
        a.samples(7, 100, 100);
        a.cycle(7, 1_000_000.0);
        let (rows, shares) = finish(a);
        assert!(rows.is_empty(), "{rows:?}");
        assert!((shares[0].cpu_ns - 110e6).abs() < 1.0, "{shares:?}");
    }

    /// A thread whose leader counted more than its served CPU time (the task-clock ran
    /// ahead of the thread's CPU clock: 1.47 s counted, 1.20 s served, its samples 1.35 s):
    /// the sampler's time is measured in the kernel's units, not named `[not sampled]`.
    /// Its floor samples' worth stays its own.
    #[test]
    fn a_task_clock_ahead_of_the_thread_clock_still_measures_the_sampler() {
        let mut a = Accounting::default();
        let mut i = info(100, 500_000);
        i.sample_cost_ns = 40_000;
        a.process(7, &i);
        a.process(8, &info(100, 500_000));
        a.thread_cpu(7, &[cpu(101, 1_470_000_000, 1_200_000_000)]);
        a.samples(7, 101, 2700);
        a.cycle(7, 500_000.0);
        // 20 ms the floor sampled while the thread was not served.
        a.samples(8, 101, 40);
        let (rows, shares) = finish(a);
        assert!(rows.is_empty(), "{rows:?}");
        assert!((shares[0].cpu_ns - 1_470e6).abs() < 1.0, "{shares:?}");
        // Without the clocks' disagreement, an excess over the cost (119 ms against 108)
        // stays named.
        let mut a = Accounting::default();
        a.process(7, &i);
        a.thread_cpu(7, &[cpu(101, 1_470_000_000, 1_469_000_000)]);
        a.samples(7, 101, 2700);
        a.cycle(7, 500_000.0);
        let (rows, _) = finish(a);
        let named: f64 = rows.iter().filter(|r| r.0 == UNSAMPLED).map(|r| r.2).sum();
        assert!(named > 200.0, "{rows:?}");
    }

    /// A process whose executable no stream named (a fork child that exec'd or ended
    /// before the floor learnt it) goes by its main thread's name, else by its pid: never
    /// by an empty command.
    #[test]
    fn a_process_without_an_executable_still_has_a_command() {
        let mut a = Accounting::default();
        let mut named = info(100, 1_000_000);
        named.exe = std::path::PathBuf::new();
        let mut unknown = info(200, 1_000_000);
        unknown.exe = std::path::PathBuf::new();
        a.process(7, &named);
        a.process(8, &unknown);
        a.thread_name(7, 101, "worker");
        a.thread_name(7, 100, "server");
        a.thread_cpu(7, &[cpu(100, 1_000_000, 0), cpu(101, 1_000_000, 0)]);
        a.thread_cpu(8, &[cpu(200, 1_000_000, 0)]);
        // Its main thread unnamed: the lowest named tid's name, whatever the map's order.
        let mut third = info(300, 1_000_000);
        third.exe = std::path::PathBuf::new();
        a.process(9, &third);
        for (tid, name) in [(305, "e"), (302, "b"), (304, "d"), (301, "a"), (303, "c")] {
            a.thread_name(9, tid, name);
        }
        let tids = [300, 301, 302, 303, 304, 305];
        a.thread_cpu(9, &tids.map(|t| cpu(t, 1_000_000, 0)));
        let (_, shares) = finish(a);
        let mut commands: Vec<&str> = shares.iter().map(|s| s.command.as_str()).collect();
        commands.sort_unstable();
        assert_eq!(commands, ["[pid 200]", "a", "server"], "{shares:?}");
    }

    /// Within a command, a group of threads whose samples stand for more than they ran
    /// (here: threads with no name) cancels another group's shortfall: only the net is
    /// named.
    #[test]
    fn a_commands_surplus_cancels_its_shortfall() {
        let mut a = Accounting::default();
        a.process(7, &info(100, 1_000_000));
        a.cycle(7, 1_000_000.0);
        a.thread_name(7, 101, "worker");
        // worker: 30 ms run, 20 samples (10 ms short); the unnamed thread: 30 ms run, 36
        // samples (6 ms over). Served nothing: the floor's period is the cycle.
        a.thread_cpu(7, &[cpu(101, 30_000_000, 0), cpu(102, 30_000_000, 0)]);
        a.samples(7, 101, 20);
        a.samples(7, 102, 36);
        let (rows, _) = finish(a);
        let named: f64 = rows.iter().filter(|r| r.0 == UNSAMPLED).map(|r| r.2).sum();
        assert!((named - 4.0).abs() < 1e-9, "{rows:?}");
    }

    /// Samples lost in a per-CPU ring, all counted on the one thread whose own count was
    /// lost too (the recording that named 205 ms of 419 `[not sampled]`, see the module
    /// note): the other threads' shortfall is those lost samples, and nothing is named.
    #[test]
    fn lost_samples_on_a_thread_with_no_count_cancel_the_others_shortfall() {
        // Thread 101 ran `ran` ns; thread 102's count never arrived.
        let with_tree = |ran: u64, tree: Option<u64>| {
            let mut a = Accounting::default();
            a.process(7, &info(100, 20_000));
            a.thread_cpu(7, &[cpu(100, 11_008_805, 0), cpu(101, ran, 0)]);
            a.lost(7, 100, 515);
            a.lost(7, 101, 60);
            a.lost(7, 102, 20_203);
            if let Some(t) = tree {
                a.tree_cpu(t);
            }
            finish(a)
        };
        let recording = |ran: u64| with_tree(ran, None);
        // With the tree's rusage: what it ran beyond every sample's worth is named, once
        // (the lost samples of the thread without a count are not taken off twice).
        let (rows, _) = with_tree(205_744_330, Some(430_000_000));
        let named: f64 = rows.iter().filter(|r| r.0 == UNSAMPLED).map(|r| r.2).sum();
        let want = (430_000_000.0 - 20_778.0 * 20_000.0) / 20_000.0;
        assert!((named - want).abs() < 1e-6, "{named} vs {want}: {rows:?}");
        let (rows, shares) = recording(205_744_330);
        assert!(rows.is_empty(), "{rows:?}");
        assert!((shares[0].cpu_ns - 20_778.0 * 20_000.0).abs() < 1.0, "{shares:?}");
        // A thread's own shortfall beyond what the lost samples stand for stays named.
        let (rows, _) = recording(505_744_330);
        let named: f64 = rows.iter().filter(|r| r.0 == UNSAMPLED).map(|r| r.2).sum();
        let want = (11_008_805.0 + 505_744_330.0 - 20_778.0 * 20_000.0) / 20_000.0;
        assert!((named - want).abs() < 1e-6, "{named} vs {want}: {rows:?}");
    }

    /// Counts that sum above the tree's rusage (the recording of the module note: 425.3 ms
    /// of counts, a tree of 411.1): only the tree's time beyond the samples' worth is
    /// named, and a tree the counts fit in changes nothing.
    #[test]
    fn the_trees_rusage_bounds_what_is_named() {
        let named = |rows: &[(String, String, f64)]| -> f64 {
            rows.iter().filter(|r| r.0 == UNSAMPLED).map(|r| r.2).sum()
        };
        let worth = (158.0 + 9_916.0 + 9_073.0 + 1_190.0) * 20_000.0;
        let recording = |tree: u64| recorded(tree, false);
        // A second process: the rusage may not hold it, and bounds nothing.
        let (rows, _) = recorded(411_093_000, true);
        let counts = 4_174_058.0 + 217_271_093.0 + 203_833_506.0;
        let second = 10_000_000.0 - 400.0 * 20_000.0;
        assert!((named(&rows) - (counts - worth + second) / 20_000.0).abs() < 1e-6, "{rows:?}");
        fn recorded(tree: u64, second: bool) -> (Vec<(String, String, f64)>, Vec<ProcessShare>) {
            let mut a = Accounting::default();
            a.process(7, &info(100, 20_000));
            if second {
                a.process(8, &info(200, 20_000));
                a.thread_cpu(8, &[cpu(200, 10_000_000, 0)]);
                a.samples(8, 200, 400);
            }
            a.thread_cpu(
                7,
                &[cpu(100, 4_174_058, 0), cpu(101, 217_271_093, 0), cpu(102, 203_833_506, 0)],
            );
            a.samples(7, 100, 158);
            a.samples(7, 101, 9_916);
            a.samples(7, 102, 9_073);
            a.lost(7, 101, 1_190);
            a.tree_cpu(tree);
            finish(a)
        }
        let (rows, shares) = recording(411_093_000);
        let want = (411_093_000.0 - worth) / 20_000.0;
        assert!((named(&rows) - want).abs() < 1e-6, "{} vs {want}: {rows:?}", named(&rows));
        assert!((shares[0].cpu_ns - 411_093_000.0).abs() < 1.0, "{shares:?}");
        // The counts fit in a larger tree: each is named as it is, the rest as starts and
        // exits.
        let (rows, shares) = recording(430_000_000);
        assert!((named(&rows) - (430_000_000.0 - worth) / 20_000.0).abs() < 1e-6, "{rows:?}");
        let threads: f64 = rows
            .iter()
            .filter(|r| r.0 == UNSAMPLED && !r.1.contains(STARTS_EXITS_SWITCHES))
            .map(|r| r.2)
            .sum();
        assert!((threads - (counts - worth) / 20_000.0).abs() < 1e-6, "{rows:?}");
        assert!((shares[0].cpu_ns - 430_000_000.0).abs() < 1.0, "{shares:?}");
    }

    /// Threads shorter than a cycle, one in ten with a sample: each sampled one stands
    /// for ten times what it ran, the others for nothing, and together for what they ran.
    /// The tree's time beyond the threads' counts is still named (it is not hidden
    /// behind the sampled threads' surplus).
    #[test]
    fn short_threads_surplus_hides_no_start_and_exit_time() {
        let mut a = Accounting::default();
        a.process(7, &info(100, 10_000_000));
        a.cycle(7, 10_000_000.0);
        a.thread_cpu(7, &[cpu(100, 100_000_000, 100_000_000)]);
        a.samples(7, 100, 10);
        for tid in 101..201 {
            a.thread_cpu(7, &[cpu(tid, 1_000_000, 1_000_000)]);
            if tid % 10 == 0 {
                a.samples(7, tid, 1);
            }
        }
        // 200 ms counted by the threads, 204 ms by the tree's rusage.
        a.tree_cpu(204_000_000);
        let (rows, shares) = finish(a);
        let starts: f64 =
            rows.iter().filter(|r| r.1.ends_with(STARTS_EXITS_SWITCHES)).map(|r| r.2).sum();
        assert!((starts - 0.4).abs() < 1e-9, "{rows:?}");
        assert!((shares[0].cpu_ns - 204e6).abs() < 1.0, "{shares:?}");
    }
}
