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
//! Older files (no THREADCPU) keep the one `[not sampled]` row of the END chunks.
//!
//! Owns: that arithmetic. Must never read the file (the adapter feeds it) or touch
//! samples' attribution.

use rustc_hash::FxHashMap;
use strobe_format::{ProcessInfo, ThreadCpu};

use crate::report::{AGENT, UNSAMPLED};
use crate::Aggregator;

/// One stream as the accounting needs it.
#[derive(Debug, Clone, Default)]
struct Stream {
    pid: u32,
    /// The sampling cycle one time sample stands for (leader units: ns for time).
    cycle: f64,
    /// The command (the executable's file name).
    command: String,
}

/// Per (pid, tid): what its samples and the kernel say.
#[derive(Debug, Clone, Default)]
struct Thread {
    /// Time the samples stand for, ns (samples times their stream's cycle; streams whose
    /// cycle is not known yet are added at the end).
    sampled_ns: f64,
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
    threads: FxHashMap<(u32, u32), Thread>,
    /// Thread names per (stream, tid).
    names: FxHashMap<(u32, u32), String>,
    any_thread_cpu: bool,
    /// The END chunks' unsampled time, samples' worth (files without THREADCPU).
    pub old_unsampled: f64,
}

fn file_name(p: &std::path::Path) -> String {
    p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned())
}

impl Accounting {
    /// A stream began.
    pub fn process(&mut self, stream: u32, info: &ProcessInfo) {
        let cycle = info.period as f64 + info.jitter as f64 / 2.0 + info.window as f64;
        self.streams.insert(stream, Stream { pid: info.pid, cycle, command: file_name(&info.exe) });
    }

    /// The stream's measured cycle (its END).
    pub fn cycle(&mut self, stream: u32, cycle: f64) {
        if let Some(s) = self.streams.get_mut(&stream) {
            if cycle.is_finite() && cycle > 0.0 {
                s.cycle = cycle;
            }
        }
    }

    /// `n` time samples (or samples taken and lost) of thread `tid` in `stream`.
    pub fn samples(&mut self, stream: u32, tid: u32, n: u64) {
        *self.samples.entry((stream, tid)).or_insert(0) += n;
    }

    /// A thread's name in `stream`.
    pub fn thread_name(&mut self, stream: u32, tid: u32, name: &str) {
        self.names.insert((stream, tid), name.to_string());
    }

    /// Threads' CPU times, written in `stream`.
    pub fn thread_cpu(&mut self, stream: u32, threads: &[ThreadCpu]) {
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

    /// Adds the unaccounted rows to `agg`.
    pub fn finish(mut self, agg: &mut Aggregator) {
        if !self.any_thread_cpu {
            agg.add_unsampled(self.old_unsampled);
            return;
        }
        // The unit a row's samples are in: the first stream's cycle (the floor's period
        // equals the agents' mean cycle, so every stream's is about the same).
        let unit = self
            .streams
            .values()
            .map(|s| s.cycle)
            .find(|c| *c > 0.0)
            .unwrap_or(1.0);
        for (&(stream, tid), &n) in &self.samples {
            let Some(s) = self.streams.get(&stream) else { continue };
            let t = self.threads.entry((s.pid, tid)).or_default();
            t.sampled_ns += n as f64 * s.cycle;
            if t.command.is_empty() {
                t.command = s.command.clone();
            }
            if let Some(name) = self.names.get(&(stream, tid)) {
                t.name = name.clone();
            }
        }
        for (&(stream, tid), name) in &self.names {
            if let Some(s) = self.streams.get(&stream) {
                let t = self.threads.entry((s.pid, tid)).or_default();
                if t.name.is_empty() {
                    t.name = name.clone();
                }
                if t.command.is_empty() {
                    t.command = s.command.clone();
                }
            }
        }
        // Per (command, thread name): CPU time the samples miss, and the agent's share.
        let mut groups: FxHashMap<(String, String), (f64, f64)> = FxHashMap::default();
        for t in self.threads.values().filter(|t| t.cpu.cpu_ns > 0) {
            let g = groups.entry((t.command.clone(), t.name.clone())).or_default();
            g.0 += t.cpu.cpu_ns as f64 - t.sampled_ns;
            g.1 += t.cpu.agent_ns as f64;
        }
        let mut rows: Vec<((String, String), (f64, f64))> = groups.into_iter().collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        for ((command, thread), (missed, agent)) in rows {
            if missed <= 0.0 {
                continue;
            }
            let by_agent = missed.min(agent);
            agg.add_unaccounted(AGENT, "set-up", by_agent / unit);
            let module = if thread.is_empty() || thread == command {
                command
            } else {
                format!("{command}: {thread}")
            };
            agg.add_unaccounted(UNSAMPLED, &module, (missed - by_agent) / unit);
        }
    }
}
