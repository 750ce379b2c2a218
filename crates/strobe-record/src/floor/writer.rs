//! Kernel-mode recordings into the record file: the same chunks an agent writes (one
//! stream per process image, PROCESS, MAPS, THREADS, STACKS, SAMPLES, LOST, END), built
//! from the kernel's records, plus KSYMS (the kernel functions hit) and OFFCPU (the
//! intervals threads spent switched out).
//!
//! The writer follows the processes as the kernel reports them: a process gets a stream
//! when it is first seen (its first record, or a FORK naming it as a new process); an
//! exec (COMM with the exec flag) ends the stream and starts another for the new image,
//! as an agent's exec does; MMAP2 records keep each process's executable mappings, a
//! forked child starts with a copy of its parent's, and a process that ran before the
//! recording starts with what `/proc` showed ([`Known`]). A thread's off-CPU interval
//! runs from its switch-out sample (which carries its stack) to its next switch-in.
//!
//! In kernel mode (no agent beside it) a process image that can have no more records is
//! retired as soon as that is known ([`Writer::forget_gone`]): its threads' CPU times
//! (THREADCPU) and its END are written then, and nothing of it is held any longer, so a
//! system-wide recording holds the processes alive, not every one that ever ran. Beside
//! an agent an image's state is dropped then too, and it retires once the agent is done
//! with its process as well ([`Writer::retire_beside_agent`]), so that what the agent
//! served of each thread joins the thread's CPU time.
//!
//! Owns: that bookkeeping and the chunks it writes. Must never write a sample before its
//! stream's PROCESS chunk, a stack id before its nodes, or drop a sample or a loss it was
//! given (every one is written or counted in [`Totals`]).

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use rustc_hash::{FxHashMap, FxHashSet};
use strobe_format::{
    Encoder, EndReason, LostCount, Mapping, MapsSnapshot, OffCpuInterval, PeriodSource, ProcessEnd,
    ProcessInfo, ProcessOrigin, SampleKind, ThreadInfo, MAX_COUNTERS,
};

use super::decode::{Ev, SampleEv, Timed};
use super::ksyms::KernelNames;
use super::unwind::{ProcModules, Unwinder};
use crate::drain::{encode_samples, Pending, Totals};
use crate::served::Served;
use crate::stacks::StackTable;

/// How many of [`Writer::forget_gone`]'s looks at `/proc` pass between two that look at
/// every process, not only those whose EXIT was seen.
const FORGET_ALL_EVERY: u64 = 30;

/// How long (ns of event time) a thread's entry is kept after its EXIT, for its last
/// switch-out.
const EXITED_KEPT_NS: u64 = 1_000_000_000;

/// What `/proc` showed of a process that ran before the recording started.
#[derive(Debug, Clone, Default)]
pub(crate) struct Known {
    pub ppid: u32,
    pub exe: PathBuf,
    pub maps: Vec<Mapping>,
    /// Thread names by tid.
    pub names: Vec<(u32, String)>,
}

/// How samples are taken (for the PROCESS chunks and sample kinds).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sampling {
    pub period: u64,
    pub period_source: PeriodSource,
    /// The window the kernel alternates with, when it does.
    pub hf_window: Option<u64>,
    /// Samples carry the group's values; otherwise the leader's running period sum.
    pub group_read: bool,
    pub ncounters: usize,
    /// Samples carry user stack copies to walk, into at most this many frames in all
    /// (0: they do not).
    pub user_walk_depth: usize,
    /// The leader counts time (ns): its per-task counts are CPU times.
    pub leader_is_time: bool,
    /// Keep one sample in `thin` of each thread, every `thin`-th from a random first
    /// (1: all). The kernel samples at `period`, and each sample kept stands for
    /// `period * thin`: a thread's first kept sample comes after a random part of that,
    /// so a thread's expected samples are its CPU time over `period * thin` give or
    /// take `period`, where one counter starting at a full period would miss up to a
    /// whole `period * thin` of every thread.
    pub thin: u32,
    /// The streams are the floor beside an agent (their PROCESS chunks say so).
    pub floor: bool,
}

/// One process image: what its END needs, and while it may still have records, the
/// state its records are built with.
#[derive(Debug)]
struct Proc {
    pid: u32,
    stream: u32,
    /// `None` once the image is forgotten (see [`Writer::forget_gone`]).
    live: Option<Box<ProcState>>,
    samples: u64,
    window_ends: u64,
    lost: u64,
    exited: bool,
    replaced: bool,
    /// When `/proc` first showed the process gone (monotonic ns).
    gone_at: Option<u64>,
}

/// What the records of a process image are built with.
#[derive(Debug, Default)]
struct ProcState {
    maps: Vec<Mapping>,
    maps_dirty: bool,
    /// The unwind tables of `maps`, for walks of stack copies.
    modules: ProcModules,
    stacks: StackTable,
}

impl Proc {
    fn state(&mut self) -> &mut ProcState {
        self.live.get_or_insert_with(Box::default)
    }
}

/// The process images followed, by a stable index: a retired image's index is given to a
/// later image, so what is held follows the images not retired.
#[derive(Debug, Default)]
struct Images {
    slots: Vec<Option<Proc>>,
    free: Vec<usize>,
}

impl Images {
    fn insert(&mut self, p: Proc) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(p);
                i
            }
            None => {
                self.slots.push(Some(p));
                self.slots.len() - 1
            }
        }
    }

    fn remove(&mut self, i: usize) -> Option<Proc> {
        let p = self.slots.get_mut(i)?.take()?;
        self.free.push(i);
        Some(p)
    }

    /// The images held, in stream order.
    fn in_stream_order(&self) -> Vec<&Proc> {
        let mut v: Vec<&Proc> = self.slots.iter().flatten().collect();
        v.sort_by_key(|p| p.stream);
        v
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

impl std::ops::Index<usize> for Images {
    type Output = Proc;
    fn index(&self, i: usize) -> &Proc {
        self.slots[i].as_ref().expect("an index of an image held")
    }
}

impl std::ops::IndexMut<usize> for Images {
    fn index_mut(&mut self, i: usize) -> &mut Proc {
        self.slots[i].as_mut().expect("an index of an image held")
    }
}

/// A thread switched out, waiting for its switch-in.
#[derive(Debug, Clone, Copy)]
struct Out {
    stream: u32,
    start: u64,
    ip: u64,
    stack: u32,
    preempted: bool,
}

#[derive(Debug, Default)]
struct Thread {
    /// Its process, where an event said (0: not yet).
    pid: u32,
    name: String,
    /// The stream its name was last written to.
    named_in: Option<u32>,
    /// The leader's running period sum (without group reads).
    period_sum: u64,
    out: Option<Out>,
    /// With group reads: each CPU's copy of the thread's events counts only there (an
    /// inherited per-CPU event), so its values are per copy: the last values seen of
    /// each copy, and the thread's running totals (the sum of every copy's increments),
    /// which are what samples carry, monotonic as an agent's are.
    copies: Vec<(u32, [u64; MAX_COUNTERS])>,
    totals: [u64; MAX_COUNTERS],
    /// Thinning: samples of the thread the kernel took, and which of each `thin` is kept.
    thin_seen: u32,
    thin_offset: u32,
    /// Counted in [`Totals::threads`] (it forked, took a name, sampled or switched out).
    counted: bool,
    /// When its EXIT came.
    exited_at: Option<u64>,
}

impl Thread {
    /// Marks it counted in [`Totals::threads`]; true the first time.
    fn count(&mut self) -> bool {
        !std::mem::replace(&mut self.counted, true)
    }
}

/// Builds the record file of a kernel-mode recording.
pub(crate) struct Writer {
    file: File,
    enc: Encoder,
    sampling: Sampling,
    procs: Images,
    /// Indices into `procs` of the images not forgotten.
    active: Vec<usize>,
    /// pid -> index of its current image in `procs` (until it is retired).
    by_pid: FxHashMap<u32, usize>,
    /// Retire images once gone (write their THREADCPU and END, drop them): no agent's
    /// served times are to join their threads' CPU times at the end.
    retire: bool,
    /// Process images seen.
    images_seen: usize,
    /// Images retired.
    pub retired: u64,
    /// Beside an agent: indices into `procs` of images forgotten and not yet retired (their
    /// threads' CPU times wait for what the agent served of them to be final).
    awaiting: Vec<usize>,
    threads: FxHashMap<u32, Thread>,
    known: FxHashMap<u32, Known>,
    /// The launched command's pid (its first image is the Start stream).
    launched: Option<u32>,
    /// The launched program's path.
    launched_exe: Option<PathBuf>,
    next_stream: u32,
    samples: Vec<Pending>,
    off_cpu: Vec<(u32, u32, OffCpuInterval)>,
    lost: Vec<(u32, u32, u64)>,
    names: Vec<(u32, ThreadInfo)>,
    ksyms: KernelNames,
    /// Walks the user stack copies of `--call-graph dwarf` samples.
    unwinder: Option<Unwinder>,
    /// Threads followed: made while the floor followed their process (FORK), named (the
    /// launched program's first thread, at its exec's COMM), or that sampled or switched
    /// out (a tid used again by a new thread counts again).
    threads_seen: usize,
    /// Per (pid, tid): the exit counter's final count of each of the thread's copies (one
    /// per CPU), summed: its exact CPU time, kept for a time leader (a retired process's
    /// are written with its END and leave).
    task_counts: FxHashMap<(u32, u32), u64>,
    /// Floor samples dropped because the agent served their thread at that moment.
    pub served_dropped: u64,
    totals: Totals,
    /// Off-CPU intervals written.
    pub off_cpu_intervals: u64,
    /// The latest time of an event applied (events are applied in time order).
    applied_to: u64,
    /// When [`Writer::forget_gone`] last looked at `/proc`.
    last_forget: u64,
    /// Process images forgotten.
    pub forgotten: u64,
    forget_checks: u64,
}

impl Writer {
    /// A writer appending to `file` (its header already written).
    pub(crate) fn new(
        file: File,
        sampling: Sampling,
        known: FxHashMap<u32, Known>,
        launched: Option<u32>,
        kernel_names: bool,
        first_stream: u32,
    ) -> Writer {
        Writer {
            file,
            enc: Encoder::with_capacity(1 << 20),
            sampling,
            procs: Images::default(),
            active: Vec::new(),
            by_pid: FxHashMap::default(),
            retire: !sampling.floor,
            images_seen: 0,
            retired: 0,
            awaiting: Vec::new(),
            threads: FxHashMap::default(),
            known,
            launched,
            launched_exe: None,
            next_stream: first_stream,
            samples: Vec::new(),
            off_cpu: Vec::new(),
            lost: Vec::new(),
            names: Vec::new(),
            ksyms: KernelNames::new(kernel_names),
            unwinder: (sampling.user_walk_depth > 0)
                .then(|| Unwinder::new(sampling.user_walk_depth)),
            threads_seen: 0,
            task_counts: FxHashMap::default(),
            served_dropped: 0,
            totals: Totals::default(),
            off_cpu_intervals: 0,
            applied_to: 0,
            last_forget: 0,
            forgotten: 0,
            forget_checks: 0,
        }
    }

    /// The launched program's path, for when /proc no longer shows it.
    pub(crate) fn set_launched_exe(&mut self, exe: PathBuf) {
        self.launched_exe = Some(exe);
    }

    /// Processes (images) seen.
    pub(crate) fn processes(&self) -> usize {
        self.images_seen
    }

    /// The pids whose images the writer follows now (not replaced), each once.
    pub(crate) fn pids(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self.by_pid.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// The exact counts (CPU time for a time leader) the kernel gave of threads that
    /// ended, per (pid, tid).
    pub(crate) fn task_counts(&self) -> &FxHashMap<(u32, u32), u64> {
        &self.task_counts
    }

    /// Appends a THREADCPU chunk to `pid`'s current stream (creating the stream if the
    /// writer has not seen the process: one that never sampled).
    pub(crate) fn thread_cpu(&mut self, pid: u32, threads: &[strobe_format::ThreadCpu]) {
        if threads.is_empty() {
            return;
        }
        // A forgotten image's stream is still its stream.
        let i = match self.by_pid.get(&pid) {
            Some(&i) => i,
            None => self.proc_of(pid, crate::drain::mono_ns(), None),
        };
        let stream = self.procs[i].stream;
        self.enc.thread_cpu(stream, threads);
    }

    /// Reads the kernel's symbols now, before the target runs.
    pub(crate) fn preload_kernel_symbols(&mut self) {
        self.ksyms.preload();
    }

    /// Whether any kernel address was recorded.
    pub(crate) fn kernel_addresses_seen(&self) -> bool {
        self.ksyms.any_seen()
    }

    /// Whether kernel symbols could be read (after the first kernel address).
    pub(crate) fn kernel_symbols_readable(&self) -> bool {
        self.ksyms.readable()
    }

    /// The stream of `pid`'s current image, creating it (PROCESS chunk, and the
    /// mappings `/proc` showed for a process older than the recording) on first sight.
    /// A forgotten image (its pid reused by a new process) is not reused: the new
    /// process gets a stream of its own.
    fn proc_of(&mut self, pid: u32, time: u64, origin: Option<(ProcessOrigin, u32)>) -> usize {
        if let Some(&i) = self.by_pid.get(&pid) {
            if self.procs[i].live.is_some() {
                return i;
            }
            self.by_pid.remove(&pid);
        }
        let known = self.known.remove(&pid);
        let (origin, ppid) = match (origin, &known) {
            (Some(o), _) => o,
            (None, Some(k)) => (ProcessOrigin::Start, k.ppid),
            (None, None) if self.launched == Some(pid) => {
                (ProcessOrigin::Start, std::process::id())
            }
            // First seen without a FORK: it ran before the recording, or its FORK was
            // lost.
            (None, None) => {
                (ProcessOrigin::Start, strobe_target::tasks::parent_of(pid).unwrap_or(0))
            }
        };
        let exe = match &known {
            Some(k) => k.exe.clone(),
            // A zombie leader (main called pthread_exit) hides its executable: the
            // launched one's path is known.
            None => strobe_target::tasks::executable(pid)
                .or_else(|| self.launched_exe.clone().filter(|_| self.launched == Some(pid)))
                .unwrap_or_default(),
        };
        let stream = self.next_stream;
        self.next_stream += 1;
        let s = &self.sampling;
        self.enc.process(
            stream,
            &ProcessInfo {
                pid,
                ppid,
                origin,
                exe,
                start_mono_ns: time,
                period: s.period * u64::from(s.thin.max(1)),
                window: s.hf_window.unwrap_or(0),
                jitter: 0,
                period_source: s.period_source,
                sample_cost_ns: 0,
                floor_cost_ns: 0,
                predicted_overhead_ppm: 0,
                floor: s.floor,
            },
        );
        let mut maps = Vec::new();
        if let Some(k) = known {
            maps = k.maps;
            for (tid, name) in k.names {
                let t = self.threads.entry(tid).or_default();
                (t.pid, t.name) = (pid, name);
            }
        }
        let maps_dirty = !maps.is_empty();
        self.images_seen += 1;
        let i = self.procs.insert(Proc {
            pid,
            stream,
            live: Some(Box::new(ProcState {
                maps,
                maps_dirty,
                modules: ProcModules::default(),
                stacks: StackTable::default(),
            })),
            samples: 0,
            window_ends: 0,
            lost: 0,
            exited: false,
            replaced: false,
            gone_at: None,
        });
        self.by_pid.insert(pid, i);
        self.active.push(i);
        i
    }

    /// Forgets the state (mappings, unwind tables, stack table) of process images that
    /// can have no more records, keeping what their END and THREADCPU chunks need: an
    /// image an exec replaced, and a process `/proc` shows dead once an event later than
    /// that moment was applied (events are applied in time order, and a dead process's
    /// threads made theirs before it died). Called after [`Writer::flush`], so what an
    /// image's records need is in the file before it is forgotten. It looks at most once
    /// a second: `/proc` for processes whose leader's EXIT was seen, and every
    /// [`FORGET_ALL_EVERY`] of those times for all; in between, whether each other
    /// process was reaped (a cheap check, so a process whose EXIT the kernel lost in a
    /// full ring is forgotten within seconds, not held for half a minute). The
    /// launched command is never forgotten. When retiring (kernel mode), a forgotten
    /// image is retired at once: its threads' CPU times (the image that is its pid's
    /// last) and its END are encoded, to go with the next flush, and it is dropped with
    /// its pid's entry, so a process that takes the pid later is a new one. `wakeups`:
    /// the ring wakeups so far (for the ENDs).
    pub(crate) fn forget_gone(&mut self, wakeups: u64) {
        let now = crate::drain::mono_ns();
        if now < self.last_forget + 1_000_000_000 {
            return;
        }
        self.last_forget = now;
        self.forget_checks += 1;
        let all = self.forget_checks % FORGET_ALL_EVERY == 0;
        let (applied, launched) = (self.applied_to, self.launched);
        let procs = &mut self.procs;
        let mut gone_now = Vec::new();
        self.active.retain(|&i| {
            let p = &mut procs[i];
            if launched == Some(p.pid) && !p.replaced {
                return true;
            }
            let gone = match p.gone_at {
                _ if p.replaced => true,
                Some(t) => applied > t,
                None => {
                    let dead = if p.exited || all {
                        crate::procs::pid_dead(p.pid)
                    } else {
                        crate::procs::pid_reaped(p.pid)
                    };
                    if dead {
                        p.gone_at = Some(now);
                    }
                    false
                }
            };
            if gone {
                p.live = None;
                gone_now.push(i);
            }
            !gone
        });
        self.forgotten += gone_now.len() as u64;
        let exited_before = applied.saturating_sub(EXITED_KEPT_NS);
        self.threads.retain(|_, t| t.exited_at.is_none_or(|e| e >= exited_before));
        if self.retire && !gone_now.is_empty() {
            self.retire_images(&gone_now, now, wakeups, FxHashMap::default());
        } else {
            self.awaiting.extend(gone_now);
        }
    }

    /// Images forgotten beside an agent and not yet retired.
    pub(crate) fn awaiting(&self) -> usize {
        self.awaiting.len()
    }

    /// The latest time of an event applied (events are applied in time order).
    pub(crate) fn applied_to(&self) -> u64 {
        self.applied_to
    }

    /// Beside an agent: retires the images forgotten whose process the agent is done
    /// with (not in `held`: every agent instance of it ended, so what it served is final),
    /// as [`Writer::forget_gone`] does in kernel mode, with what the agent served of each
    /// thread joined to its CPU time: `take(pid)` gives that, tid -> served, for each
    /// process whose last image is retired. The others wait for a later call (or the
    /// end).
    pub(crate) fn retire_beside_agent(
        &mut self,
        held: &FxHashSet<u32>,
        mut take: impl FnMut(u32) -> FxHashMap<u32, crate::drain::ServedCpu>,
        wakeups: u64,
    ) {
        if self.awaiting.is_empty() {
            return;
        }
        let (procs, by_pid) = (&self.procs, &self.by_pid);
        let mut served = FxHashMap::default();
        let mut now = Vec::new();
        self.awaiting.retain(|&i| {
            let pid = procs[i].pid;
            if held.contains(&pid) {
                return true;
            }
            if by_pid.get(&pid) == Some(&i) {
                served.insert(pid, take(pid));
            }
            now.push(i);
            false
        });
        if !now.is_empty() {
            self.retire_images(&now, crate::drain::mono_ns(), wakeups, served);
        }
    }

    /// Retires the forgotten images `gone` (indices into `procs`): see
    /// [`Writer::forget_gone`]. `served`: what an agent served of the threads of the
    /// processes whose last image is retired (pid -> tid -> served).
    fn retire_images(
        &mut self,
        gone: &[usize],
        now: u64,
        wakeups: u64,
        mut served: FxHashMap<u32, FxHashMap<u32, crate::drain::ServedCpu>>,
    ) {
        // pid -> the index of its last image, for the pids whose last image retires.
        let mut last_of: FxHashMap<u32, usize> = FxHashMap::default();
        for &i in gone {
            let pid = self.procs[i].pid;
            if self.by_pid.get(&pid) == Some(&i) {
                self.by_pid.remove(&pid);
                last_of.insert(pid, i);
            }
        }
        // Its threads are gone with it (an EXIT may come before the thread's last
        // switch-out, or be lost).
        if !last_of.is_empty() {
            self.threads.retain(|_, t| !last_of.contains_key(&t.pid));
        }
        // The threads' CPU times go to the pid's last image, as at the end.
        let mut counts: FxHashMap<u32, FxHashMap<u32, u64>> = FxHashMap::default();
        if !last_of.is_empty() && !self.task_counts.is_empty() {
            self.task_counts.retain(|&(pid, tid), &mut ns| {
                let last = last_of.contains_key(&pid);
                if last {
                    counts.entry(pid).or_default().insert(tid, ns);
                }
                !last
            });
        }
        let mut gone: Vec<(usize, Proc)> =
            gone.iter().filter_map(|&i| Some((i, self.procs.remove(i)?))).collect();
        gone.sort_by_key(|(_, p)| p.stream);
        for (i, p) in gone {
            if last_of.get(&p.pid) == Some(&i) {
                let rows = crate::drain::thread_cpu_rows(
                    counts.remove(&p.pid).unwrap_or_default(),
                    served.remove(&p.pid).unwrap_or_default(),
                );
                if !rows.is_empty() {
                    self.enc.thread_cpu(p.stream, &rows);
                }
            }
            self.enc.end_process(p.stream, &ended(&p, None, now, wakeups));
            self.retired += 1;
        }
    }

    /// Names thread `tid` in `stream` if it was not named there yet.
    fn name_thread(&mut self, stream: u32, pid: u32, tid: u32) {
        let t = self.threads.entry(tid).or_default();
        t.pid = pid;
        if t.count() {
            self.threads_seen += 1;
        }
        if t.named_in == Some(stream) {
            return;
        }
        if t.name.is_empty() {
            t.name = strobe_target::tasks::thread_name(pid, tid).unwrap_or_default();
        }
        t.named_in = Some(stream);
        self.names.push((stream, ThreadInfo { tid, name: t.name.clone() }));
    }

    /// Applies events released in time order. A sample of a thread `served` says the
    /// agent served at its time is dropped (the agent's samples stand for that time).
    pub(crate) fn apply(&mut self, events: Vec<Timed>, served: &Served) {
        for Timed { time, ev } in events {
            self.applied_to = self.applied_to.max(time);
            match ev {
                Ev::Sample(s) => {
                    // Thinning counts every sample the kernel took, served or not: the
                    // phase runs on the thread's CPU time.
                    if !self.keep(s.tid, time) {
                        continue;
                    }
                    if served.covers(s.tid, time) {
                        self.served_dropped += 1;
                    } else {
                        self.sample(time, s);
                    }
                }
                Ev::TaskCount { pid, tid, ns } => {
                    if self.sampling.leader_is_time {
                        let c = self.task_counts.entry((pid, tid)).or_default();
                        *c = c.saturating_add(ns);
                    }
                }
                Ev::SwitchOut { pid, tid, leaf, callers } => {
                    let i = self.proc_of(pid, time, None);
                    let p = &mut self.procs[i];
                    let stream = p.stream;
                    let stack = p.state().stacks.intern(&callers);
                    self.threads.entry(tid).or_default().out =
                        Some(Out { stream, start: time, ip: leaf, stack, preempted: false });
                    self.name_thread(stream, pid, tid);
                }
                Ev::Switch { tid, out, preempt, .. } => {
                    // A thread with no entry has no switch-out waiting (a switch of a
                    // thread that exited makes none).
                    let Some(t) = self.threads.get_mut(&tid) else { continue };
                    if out {
                        if let Some(o) = t.out.as_mut() {
                            o.preempted |= preempt;
                        }
                    } else if let Some(o) = t.out.take() {
                        self.off_cpu.push((
                            o.stream,
                            tid,
                            OffCpuInterval {
                                start: o.start,
                                duration: time.saturating_sub(o.start),
                                ip: o.ip,
                                stack: o.stack,
                                preempted: o.preempted,
                            },
                        ));
                    }
                }
                Ev::Mmap { pid, start, len, pgoff, path } => {
                    let i = self.proc_of(pid, time, None);
                    let p = self.procs[i].state();
                    let end = start.saturating_add(len);
                    p.maps.retain(|m| m.end <= start || m.start >= end);
                    p.maps.push(Mapping { start, end, file_offset: pgoff, path });
                    p.maps_dirty = true;
                    p.modules.stale = true;
                }
                Ev::Comm { pid, tid, name, exec } => {
                    if exec {
                        // A new image: the old stream ends, a new one begins.
                        let origin = match self.by_pid.remove(&pid) {
                            Some(old) => {
                                self.procs[old].replaced = true;
                                let ppid = strobe_target::tasks::parent_of(pid).unwrap_or(0);
                                Some((ProcessOrigin::Exec, ppid))
                            }
                            None => None,
                        };
                        self.known.remove(&pid);
                        // The new image's executable, read once here. Hidden already (a
                        // leader that called pthread_exit, a process gone), the launched
                        // program's path, or the name the exec gave it, stands in, not
                        // its parent's program.
                        let launched = self.launched == Some(pid);
                        let exe = strobe_target::tasks::executable(pid)
                            .or_else(|| self.launched_exe.clone().filter(|_| launched))
                            .unwrap_or_else(|| PathBuf::from(&name));
                        let ppid = match origin {
                            Some((_, ppid)) => ppid,
                            None if launched => std::process::id(),
                            None => strobe_target::tasks::parent_of(pid).unwrap_or(0),
                        };
                        let known = Known { ppid, exe, maps: Vec::new(), names: Vec::new() };
                        self.known.insert(pid, known);
                        self.proc_of(pid, time, origin);
                    }
                    let t = self.threads.entry(tid).or_default();
                    (t.pid, t.name, t.named_in) = (pid, name, None);
                    // The launched program's first thread makes no FORK here and may never
                    // sample or switch out (a main thread that only waits): its COMM counts it.
                    if t.count() {
                        self.threads_seen += 1;
                    }
                }
                Ev::Fork { pid, ppid, tid, ptid } => {
                    let parent_name =
                        self.threads.get(&ptid).map(|t| t.name.clone()).unwrap_or_default();
                    self.threads.insert(
                        tid,
                        Thread { pid, name: parent_name, counted: true, ..Thread::default() },
                    );
                    self.threads_seen += 1;
                    // A forgotten image's pid, reused: a new process too.
                    let followed =
                        self.by_pid.get(&pid).is_some_and(|&i| self.procs[i].live.is_some());
                    if pid != ppid && !followed {
                        // A new process: its parent's address space, copied.
                        let maps = self
                            .by_pid
                            .get(&ppid)
                            .and_then(|&i| self.procs[i].live.as_ref())
                            .map(|l| l.maps.clone())
                            .unwrap_or_default();
                        let i = self.proc_of(pid, time, Some((ProcessOrigin::Fork, ppid)));
                        let p = self.procs[i].state();
                        p.maps_dirty = !maps.is_empty();
                        p.maps = maps;
                        p.modules.stale = true;
                    }
                }
                Ev::Exit { pid, tid } => {
                    // A thread that exited has no more records but its last switch-out,
                    // which may come after its EXIT: its entry stays a second (not
                    // counted again, not made again), then goes (a new thread with its tid
                    // starts at its FORK).
                    if let Some(t) = self.threads.get_mut(&tid) {
                        t.exited_at = Some(time);
                    }
                    if pid == tid {
                        if let Some(&i) = self.by_pid.get(&pid) {
                            self.procs[i].exited = true;
                        }
                    }
                }
                Ev::Lost { pid, tid, lost } => self.count_lost(pid, tid, lost),
            }
        }
    }

    /// `lost` records lost in a ring, of process `pid` (where known) and thread `tid`.
    fn count_lost(&mut self, pid: Option<u32>, tid: Option<u32>, lost: u64) {
        let i = pid.and_then(|p| self.by_pid.get(&p).copied());
        let stream = i.map_or(strobe_format::RECORDER_STREAM, |i| {
            self.procs[i].lost += lost;
            self.procs[i].stream
        });
        let tid = if i.is_some() { tid.unwrap_or(0) } else { 0 };
        self.lost.push((stream, tid, lost));
    }

    /// `lost` records lost in a ring after its last record, which no LOST record told:
    /// counted against the process of `task` (the task the event that lost them was
    /// opened on: a launched command's first process, an attached thread, or none), on
    /// no thread, since the kernel does not say whose they were.
    pub(crate) fn lost_untold(&mut self, task: Option<u32>, lost: u64) {
        let pid = task.map(|t| match self.threads.get(&t) {
            Some(th) if th.pid != 0 => th.pid,
            _ => t,
        });
        self.count_lost(pid, None, lost);
    }

    /// Whether thinning keeps this sample of `tid` (see [`Sampling::thin`]).
    fn keep(&mut self, tid: u32, time: u64) -> bool {
        let thin = self.sampling.thin.max(1);
        if thin == 1 {
            return true;
        }
        let t = self.threads.entry(tid).or_default();
        if t.thin_seen == 0 {
            // A first sample's phase: from the thread and the time, mixed.
            let h = (u64::from(tid) ^ time.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            t.thin_offset = ((h >> 32) % u64::from(thin)) as u32;
        }
        let k = t.thin_seen;
        t.thin_seen = t.thin_seen.wrapping_add(1);
        k % thin == t.thin_offset
    }

    fn sample(&mut self, time: u64, mut s: SampleEv) {
        let i = self.proc_of(s.pid, time, None);
        if let (Some(u), Some(w)) = (s.user.take(), self.unwinder.as_mut()) {
            let p = self.procs[i].state();
            let max = self.sampling.user_walk_depth;
            // The kernel's frame-pointer chain of the user frames, kept aside.
            let fp_user = s.user_at.map(|at| s.callers.split_off(at)).unwrap_or_default();
            let kernel_len = s.callers.len();
            w.walk(&p.maps, &mut p.modules, &u, s.kernel, &mut s.callers, max);
            // Code with no unwind tables in its files (Go) ends the DWARF walk at once:
            // its frame-pointer chain is what there is.
            let leaf_only = usize::from(s.kernel);
            if s.callers.len() - kernel_len <= leaf_only && fp_user.len() > leaf_only {
                s.callers.truncate(kernel_len);
                let mut fp = fp_user;
                if let (true, Some(first)) = (s.kernel, fp.first_mut()) {
                    // The interrupted user address, stored one past as callers are.
                    *first = first.wrapping_add(1);
                }
                s.callers.extend(fp);
                s.callers.truncate(max);
            }
        }
        self.ksyms.note(s.ip);
        for &a in &s.callers {
            self.ksyms.note(a);
        }
        let p = &mut self.procs[i];
        let stream = p.stream;
        let stack = p.state().stacks.intern(&s.callers);
        let kind = match self.sampling.hf_window {
            Some(w) if s.period == w => SampleKind::WindowEnd,
            Some(_) => SampleKind::WindowStart,
            None => SampleKind::Plain,
        };
        if kind == SampleKind::WindowEnd {
            p.window_ends += 1;
        } else {
            p.samples += 1;
        }
        self.name_thread(stream, s.pid, s.tid);
        let mut counters = [0u64; MAX_COUNTERS];
        let n = if self.sampling.group_read {
            let n = usize::from(s.n).min(self.sampling.ncounters).min(MAX_COUNTERS);
            let t = self.threads.entry(s.tid).or_default();
            let last = match t.copies.iter_mut().find(|(cpu, _)| *cpu == s.cpu) {
                Some((_, v)) => v,
                None => {
                    t.copies.push((s.cpu, [0; MAX_COUNTERS]));
                    &mut t.copies.last_mut().expect("just pushed").1
                }
            };
            for ((total, prev), &now) in
                t.totals.iter_mut().zip(last.iter_mut()).zip(&s.values).take(n)
            {
                *total = total.wrapping_add(now.saturating_sub(*prev));
                *prev = now;
            }
            counters[..n].copy_from_slice(&t.totals[..n]);
            n
        } else {
            let t = self.threads.entry(s.tid).or_default();
            t.period_sum = t.period_sum.wrapping_add(s.period);
            counters[0] = t.period_sum;
            1
        };
        self.samples.push(Pending {
            stream,
            tid: s.tid,
            kind,
            time,
            ip: s.ip,
            stack,
            n: n as u8,
            counters,
        });
    }

    /// Encodes what the applied events produced and appends it to the file.
    pub(crate) fn flush(&mut self) -> std::io::Result<()> {
        for &i in &self.active {
            let p = &mut self.procs[i];
            let stream = p.stream;
            let Some(l) = p.live.as_deref_mut() else { continue };
            if l.maps_dirty {
                l.maps_dirty = false;
                let mut maps = l.maps.clone();
                maps.sort_by_key(|m| m.start);
                self.enc
                    .maps(stream, &MapsSnapshot { time_mono_ns: crate::drain::mono_ns(), maps });
            }
            if let Some((first, nodes)) = l.stacks.take_new() {
                self.enc.stacks(stream, first, &nodes);
            }
        }
        let mut names = std::mem::take(&mut self.names);
        names.sort_by_key(|(s, _)| *s);
        for chunk in names.chunk_by(|a, b| a.0 == b.0) {
            let ts: Vec<ThreadInfo> = chunk.iter().map(|(_, t)| t.clone()).collect();
            self.enc.threads(chunk[0].0, &ts);
        }
        // Samples: per (stream, thread), in time order.
        self.samples.sort_by_key(|p| (p.stream, p.tid));
        encode_samples(&mut self.enc, self.sampling.ncounters, &self.samples, &mut self.totals);
        self.samples.clear();
        self.off_cpu.sort_by_key(|(s, t, i)| (*s, *t, i.start));
        for chunk in self.off_cpu.chunk_by(|a, b| a.0 == b.0 && a.1 == b.1) {
            let iv: Vec<OffCpuInterval> = chunk.iter().map(|c| c.2).collect();
            self.enc.off_cpu(chunk[0].0, chunk[0].1, &iv);
            self.off_cpu_intervals += iv.len() as u64;
        }
        self.off_cpu.clear();
        self.lost.sort_by_key(|(s, _, _)| *s);
        for chunk in self.lost.chunk_by(|a, b| a.0 == b.0) {
            let l: Vec<LostCount> =
                chunk.iter().map(|&(_, tid, lost)| LostCount { tid, lost }).collect();
            self.totals.lost += l.iter().map(|l| l.lost).sum::<u64>();
            self.enc.lost(chunk[0].0, &l);
        }
        self.lost.clear();
        let ks = self.ksyms.take_new();
        if !ks.is_empty() {
            self.enc.kernel_symbols(&ks);
        }
        self.totals.passes += 1;
        if self.enc.is_empty() {
            return Ok(());
        }
        let r = self.file.write_all(self.enc.as_bytes());
        self.enc.clear();
        r
    }

    /// Writes every stream's END and returns the totals. `launched`: the launched
    /// command's pid, how it ended and its CPU time; `wakeups`: the ring wakeups.
    pub(crate) fn finish(
        mut self,
        launched: Option<crate::drain::Launched>,
        wakeups: u64,
    ) -> std::io::Result<Totals> {
        self.flush()?;
        let now = crate::drain::mono_ns();
        let last_stream: FxHashMap<u32, u32> =
            self.by_pid.iter().map(|(&pid, &i)| (pid, self.procs[i].stream)).collect();
        for p in self.procs.in_stream_order() {
            let is_last = last_stream.get(&p.pid) == Some(&p.stream);
            let this = launched.filter(|l| l.pid == p.pid && is_last);
            self.enc.end_process(p.stream, &ended(p, this, now, wakeups));
        }
        if !self.enc.is_empty() {
            self.file.write_all(self.enc.as_bytes())?;
            self.enc.clear();
        }
        self.totals.threads = self.threads_seen;
        self.totals.wakeups = wakeups;
        Ok(self.totals)
    }
}

/// The END of image `p` at `now`: `launched`, when it is the launched command's last
/// image, says how it ended and its CPU times.
fn ended(p: &Proc, launched: Option<crate::drain::Launched>, now: u64, wakeups: u64) -> ProcessEnd {
    let (cpu_ns, tree_cpu_ns) =
        (launched.and_then(|l| l.cpu_ns), launched.and_then(|l| l.tree_cpu_ns));
    let (reason, status) = match launched {
        Some(l) => match l.exit {
            strobe_target::Exit::Code(c) => (EndReason::Exit, Some(c as u64)),
            strobe_target::Exit::Signal { signal, .. } => (EndReason::Killed, Some(signal as u64)),
        },
        _ if p.replaced => (EndReason::Exec, None),
        _ if p.exited => (EndReason::Exit, None),
        _ => (EndReason::Stopped, None),
    };
    ProcessEnd {
        reason,
        time_mono_ns: now,
        samples: p.samples + p.window_ends,
        lost: p.lost,
        wakeups,
        windows: p.window_ends,
        window_sum: 0,
        status,
        unsampled_ns: 0,
        cpu_ns,
        tree_cpu_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::floor::decode::SampleEv;
    use strobe_format::{CallGraph, Header, Reader, RecordMode};

    fn sampling() -> Sampling {
        Sampling {
            period: 1_000_000,
            period_source: PeriodSource::Budget,
            hf_window: None,
            group_read: false,
            ncounters: 1,
            user_walk_depth: 0,
            leader_is_time: true,
            thin: 1,
            floor: false,
        }
    }

    fn header() -> Header {
        Header {
            strobe_version: "test".into(),
            command: vec!["-a".into()],
            period: Some(1_000_000),
            window: Some(0),
            jitter: Some(0),
            wakeup: 1,
            buffer_bytes: 1 << 20,
            overhead_ppm: 20_000,
            follow_fork: true,
            mode: RecordMode::Kernel,
            call_graph: CallGraph::Fp,
            max_depth: 127,
            ..Header::task_clock()
        }
    }

    fn sample(pid: u32, tid: u32, ip: u64, callers: Vec<u64>) -> Ev {
        Ev::Sample(SampleEv {
            pid,
            tid,
            ip,
            kernel: false,
            cpu: 0,
            period: 1_000_000,
            n: 1,
            values: [0; MAX_COUNTERS],
            callers,
            user_at: Some(0),
            user: None,
        })
    }

    /// The records of the file at `path`, printed, with the times the writer takes from
    /// the clock (a MAPS snapshot's, an END's), the file's path and the offsets of
    /// sample data in it left out.
    fn records(path: &std::path::Path) -> Vec<String> {
        let mut out = Vec::new();
        for r in Reader::open(path).unwrap() {
            let mut t = format!("{:?}", r.unwrap()).replace(&*path.to_string_lossy(), "_");
            for field in ["time_mono_ns: ", "data_offset: "] {
                let mut u = String::new();
                for (k, part) in t.split(field).enumerate() {
                    if k > 0 {
                        u.push_str(field);
                        u.push('_');
                        u.push_str(part.trim_start_matches(|c: char| c.is_ascii_digit()));
                    } else {
                        u.push_str(part);
                    }
                }
                t = u;
            }
            out.push(t);
        }
        out
    }

    /// The pid of a child that ran `true` and was waited for: a real pid, now dead.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        child.id()
    }

    /// A writer on a new file at `path` that holds the preamble and the header.
    fn writer_at(path: &std::path::Path) -> Writer {
        let mut f = File::create(path).unwrap();
        let mut e = Encoder::new();
        e.preamble();
        e.header(&header());
        f.write_all(e.as_bytes()).unwrap();
        Writer::new(f, sampling(), FxHashMap::default(), None, false, 1)
    }

    /// `events` timed 1 µs apart, the first 1 µs after `*time`, which moves to the last.
    fn timed(time: &mut u64, events: Vec<Ev>) -> Vec<Timed> {
        events
            .into_iter()
            .map(|ev| {
                *time += 1_000;
                Timed { time: *time, ev }
            })
            .collect()
    }

    /// Applies `events` and flushes; with `forget`, then looks at `/proc` at once (not a
    /// second after the last look) and forgets what has ended.
    fn apply_round(w: &mut Writer, events: Vec<Timed>, forget: bool) {
        w.apply(events, &Served::default());
        w.flush().unwrap();
        if forget {
            w.last_forget = 0;
            w.forget_gone(0);
        }
    }

    /// `records`, each stream's together (in the order of their first record), each
    /// stream's in the order written.
    fn by_stream(records: Vec<String>) -> Vec<String> {
        let stream = |r: &String| {
            r.split("stream: ")
                .nth(1)
                .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse::<u64>().ok())
        };
        let mut order: Vec<Option<u64>> = Vec::new();
        for r in &records {
            if !order.contains(&stream(r)) {
                order.push(stream(r));
            }
        }
        let mut out = records;
        out.sort_by_key(|r| order.iter().position(|s| *s == stream(r)));
        out
    }

    /// The end of a recording as the session makes it: every thread's CPU time the
    /// writer holds into THREADCPU chunks, then the ENDs.
    fn end_as_the_session_does(mut w: Writer) {
        let mut by_pid: FxHashMap<u32, Vec<strobe_format::ThreadCpu>> = FxHashMap::default();
        for (&(pid, tid), &cpu_ns) in w.task_counts() {
            by_pid.entry(pid).or_default().push(strobe_format::ThreadCpu {
                tid,
                cpu_ns,
                served_ns: 0,
                agent_ns: 0,
            });
        }
        for (pid, t) in by_pid {
            w.thread_cpu(pid, &t);
        }
        w.finish(None, 0).unwrap();
    }

    /// A writer that forgets the processes that ended writes the same file as one that
    /// keeps them all, and holds no state of the dead ones; one that retires them (kernel
    /// mode) writes the same records of each stream, its THREADCPU and END earlier, and
    /// holds nothing of them at all: a child that forked, mapped, sampled, exec'd (the
    /// image it replaced is forgotten at once), sampled again and exited (forgotten once
    /// an event later than its death is applied), with its pid a real one that is dead.
    #[test]
    fn forgetting_ended_processes_leaves_the_file_as_it_was() {
        let (me, dead) = (std::process::id(), dead_pid());
        let dir = std::env::temp_dir().join(format!("strobe-writer-test-{me}"));
        std::fs::create_dir_all(&dir).unwrap();
        let paths = [dir.join("keeps"), dir.join("forgets"), dir.join("retires")];
        let mut writers: Vec<Writer> = paths.iter().map(|p| writer_at(p)).collect();
        writers[0].retire = false;
        writers[1].retire = false;
        let t0 = crate::drain::mono_ns() - 10_000_000_000;
        let mmap = |path: &str| Ev::Mmap {
            pid: dead,
            start: 0x40_0000,
            len: 0x1000,
            pgoff: 0,
            path: PathBuf::from(path),
        };
        let rounds: Vec<Vec<Ev>> = vec![
            vec![
                Ev::Fork { pid: dead, ppid: me, tid: dead, ptid: me },
                mmap("/bin/sh"),
                sample(dead, dead, 0x40_0010, vec![0x40_0100, 0x40_0200]),
                sample(me, me, 0x50_0010, vec![0x50_0100]),
            ],
            vec![
                Ev::Comm { pid: dead, tid: dead, name: "true".into(), exec: true },
                mmap("/bin/true"),
                sample(dead, dead, 0x40_0020, vec![0x40_0300]),
                Ev::Lost { pid: Some(dead), tid: Some(dead), lost: 3 },
                Ev::TaskCount { pid: dead, tid: dead, ns: 7_000 },
                Ev::Exit { pid: dead, tid: dead },
            ],
            // After the forgetting writers saw the pid dead: an event later than that.
            vec![sample(me, me, 0x50_0020, vec![0x50_0100])],
        ];
        let mut time = t0;
        for (k, round) in rounds.into_iter().enumerate() {
            if k == 2 {
                // Events of this round come after the forgetting writers' look at /proc.
                time = crate::drain::mono_ns() + 1;
            }
            let events = timed(&mut time, round);
            for (i, w) in writers.iter_mut().enumerate() {
                apply_round(w, events.clone(), i > 0);
            }
            if k == 1 {
                // The replaced image is forgotten at once; the exited one not yet.
                assert_eq!(writers[1].forgotten, 1);
                assert_eq!(writers[2].retired, 1);
            }
        }
        assert_eq!(writers[1].forgotten, 2, "both images of the dead pid are forgotten");
        assert_eq!(writers[1].active.len(), 1, "only this process's state is held");
        assert_eq!(writers[2].retired, 2, "both images of the dead pid are retired");
        assert_eq!(writers[2].procs.len(), 1, "only this process is held");
        assert!(writers[2].task_counts().is_empty(), "the dead one's CPU time is written");
        assert!(writers[0].procs.in_stream_order().iter().all(|p| p.live.is_some()));
        for w in writers {
            end_as_the_session_does(w);
        }
        let [a, b, c] = paths.clone().map(|p| records(&p));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(a.len() > 8, "{a:#?}");
        assert!(a.iter().any(|r| r.contains("ThreadCpu")), "{a:#?}");
        assert_eq!(a, b);
        assert_ne!(a, c, "the retired image's chunks come earlier");
        assert_eq!(by_stream(a), by_stream(c));
    }

    /// Many short processes that come and go (each a fork, an exec, samples, its
    /// thread's CPU time and its exit, with real dead pids) leave nothing held: the
    /// images, the pids followed, the threads and their CPU times stay at what the one
    /// live process needs; and the file has each process's streams whole: its thread's
    /// name before its samples, its CPU time, its ENDs.
    #[test]
    fn processes_that_came_and_went_are_not_held() {
        const N: usize = 200;
        let me = std::process::id();
        let dir = std::env::temp_dir().join(format!("strobe-writer-many-{me}"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let mut w = writer_at(&path);
        let mut time = crate::drain::mono_ns() - 10_000_000_000;
        let mut pids = Vec::new();
        let worker = |k: usize| 4_000_000 + k as u32;
        for k in 0..N {
            let dead = dead_pid();
            pids.push(dead);
            let round = vec![
                Ev::Fork { pid: dead, ppid: me, tid: dead, ptid: me },
                Ev::Comm { pid: dead, tid: dead, name: format!("short{k}"), exec: true },
                Ev::Mmap {
                    pid: dead,
                    start: 0x40_0000,
                    len: 0x1000,
                    pgoff: 0,
                    path: PathBuf::from("/bin/true"),
                },
                sample(dead, dead, 0x40_0010, vec![0x40_0100]),
                Ev::Switch { pid: dead, tid: dead, out: true, preempt: false },
                Ev::TaskCount { pid: dead, tid: dead, ns: 1_000 + k as u64 },
                Ev::Exit { pid: dead, tid: dead },
                // The dying thread's last switch-out comes after its EXIT.
                Ev::Switch { pid: dead, tid: dead, out: true, preempt: false },
                Ev::SwitchOut { pid: dead, tid: dead, leaf: 0x40_0010, callers: vec![] },
                // And a thread of this process that comes and goes.
                Ev::Fork { pid: me, ppid: me, tid: worker(k), ptid: me },
                sample(me, worker(k), 0x50_0020, vec![]),
                Ev::Exit { pid: me, tid: worker(k) },
            ];
            apply_round(&mut w, timed(&mut time, round), true);
            // An event after the look at /proc that saw it dead.
            time = time.max(crate::drain::mono_ns() + 1);
            apply_round(&mut w, timed(&mut time, vec![sample(me, me, 0x50_0010, vec![])]), true);
            assert!(w.procs.len() <= 2 && w.by_pid.len() <= 2, "{k}: {}", w.procs.len());
        }
        // The live process's threads that exited go a second (of event time) after.
        time += EXITED_KEPT_NS;
        apply_round(&mut w, timed(&mut time, vec![sample(me, me, 0x50_0010, vec![])]), true);
        assert_eq!(w.retired, 2 * N as u64);
        assert_eq!(w.processes(), 2 * N + 1, "images seen");
        assert_eq!(w.procs.len(), 1);
        assert_eq!(w.procs.slots.len(), 3, "retired images' places are used again");
        assert_eq!(w.by_pid.len(), 1);
        assert_eq!(w.threads.len(), 1, "threads held");
        assert!(w.task_counts().is_empty());
        let totals = w.finish(None, 0).unwrap();
        assert_eq!(totals.threads, 2 * N + 1);
        // Per stream: its records in order.
        let mut streams: FxHashMap<u32, Vec<String>> = FxHashMap::default();
        for r in Reader::open(&path).unwrap() {
            let r = r.unwrap();
            let (s, what) = match &r {
                strobe_format::Record::Process { stream, info } => {
                    (*stream, format!("process {}", info.pid))
                }
                strobe_format::Record::Threads { stream, threads } => (
                    *stream,
                    format!("threads {:?}", threads.iter().map(|t| &t.name).collect::<Vec<_>>()),
                ),
                strobe_format::Record::Samples(b) => (b.stream, "samples".into()),
                strobe_format::Record::ThreadCpu { stream, threads } => (
                    *stream,
                    format!("cpu {:?}", threads.iter().map(|t| t.cpu_ns).collect::<Vec<_>>()),
                ),
                strobe_format::Record::End { stream, end } => {
                    (*stream, format!("end {:?} {}", end.reason, end.samples))
                }
                _ => continue,
            };
            streams.entry(s).or_default().push(what);
        }
        let _ = std::fs::remove_dir_all(&dir);
        for (k, pid) in pids.iter().enumerate() {
            // Streams: the first child's fork image 1 and exec image 2, this process 3,
            // then each child's two.
            let k32 = k as u32;
            let (fork, exec) = if k == 0 { (1, 2) } else { (2 + 2 * k32, 3 + 2 * k32) };
            assert_eq!(streams[&fork], [format!("process {pid}"), "end Exec 0".into()]);
            assert_eq!(
                streams[&exec],
                [
                    format!("process {pid}"),
                    format!("threads [\"short{k}\"]"),
                    "samples".into(),
                    format!("cpu [{}]", 1_000 + k),
                    "end Exit 1".into()
                ],
                "{k}"
            );
        }
    }

    /// Beside an agent, a process's images that can have no more records wait while the
    /// agent still follows the process, then retire as in kernel mode, with what the
    /// agent served of each thread joined to its CPU time (a thread only the agent saw
    /// too), and nothing of the process is held after.
    #[test]
    fn beside_an_agent_a_process_retires_once_the_agent_is_done_with_it() {
        let (me, dead) = (std::process::id(), dead_pid());
        let dir = std::env::temp_dir().join(format!("strobe-writer-agent-{me}"));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        let mut w = writer_at(&path);
        w.retire = false;
        let mut time = crate::drain::mono_ns() - 10_000_000_000;
        let round = vec![
            Ev::Fork { pid: dead, ppid: me, tid: dead, ptid: me },
            Ev::Comm { pid: dead, tid: dead, name: "true".into(), exec: true },
            sample(dead, dead, 0x40_0020, vec![]),
            Ev::TaskCount { pid: dead, tid: dead, ns: 7_000 },
            Ev::Exit { pid: dead, tid: dead },
        ];
        apply_round(&mut w, timed(&mut time, round), true);
        time = time.max(crate::drain::mono_ns() + 1);
        apply_round(&mut w, timed(&mut time, vec![sample(me, me, 0x50_0010, vec![])]), true);
        assert_eq!((w.forgotten, w.retired, w.awaiting.len()), (2, 0, 2));
        // The agent still follows it: nothing is asked, nothing retires.
        let held: FxHashSet<u32> = [dead].into_iter().collect();
        w.retire_beside_agent(&held, |_| unreachable!("not done"), 0);
        assert_eq!((w.retired, w.awaiting.len()), (0, 2));
        let only_agent_saw = 4_194_305; // above any pid: its row sorts last
        let served = |pid: u32| -> FxHashMap<u32, crate::drain::ServedCpu> {
            assert_eq!(pid, dead);
            let s = |closed_ns, setup_ns| crate::drain::ServedCpu {
                closed_ns,
                open_from_ns: 0,
                setup_ns,
            };
            [(dead, s(4_000, 300)), (only_agent_saw, s(100, 0))].into_iter().collect()
        };
        let mut asked = 0;
        w.retire_beside_agent(
            &FxHashSet::default(),
            |pid| {
                asked += 1;
                served(pid)
            },
            0,
        );
        assert_eq!(asked, 1, "asked once, for the pid's last image");
        assert_eq!((w.retired, w.awaiting.len()), (2, 0));
        assert_eq!((w.procs.len(), w.by_pid.len()), (1, 1), "only this process is held");
        assert!(w.task_counts().is_empty());
        w.finish(None, 0).unwrap();
        let mut cpu = Vec::new();
        for r in Reader::open(&path).unwrap() {
            if let strobe_format::Record::ThreadCpu { threads, .. } = r.unwrap() {
                cpu.extend(threads.into_iter().map(|t| (t.tid, t.cpu_ns, t.served_ns, t.agent_ns)));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(cpu, [(dead, 7_000, 4_000, 300), (only_agent_saw, 0, 100, 0)]);
    }

    /// A process that reuses a forgotten process's pid is a new process: it gets a
    /// stream of its own, with its parent's mappings, not the forgotten one's.
    #[test]
    fn a_reused_pid_of_a_forgotten_process_is_a_new_stream() {
        let (me, dead) = (std::process::id(), dead_pid());
        let dir = std::env::temp_dir().join(format!("strobe-writer-reuse-{me}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut w = writer_at(&dir.join("f"));
        let mut time = crate::drain::mono_ns() - 10_000_000_000;
        let mut round = |w: &mut Writer, evs: Vec<Ev>, after_now: bool| {
            if after_now {
                time = crate::drain::mono_ns() + 1;
            }
            apply_round(w, timed(&mut time, evs), true);
        };
        round(
            &mut w,
            vec![
                Ev::Fork { pid: dead, ppid: me, tid: dead, ptid: me },
                sample(dead, dead, 0x40_0010, vec![0x40_0100]),
                Ev::Exit { pid: dead, tid: dead },
            ],
            false,
        );
        round(&mut w, vec![sample(me, me, 0x50_0010, vec![])], true);
        assert_eq!(w.forgotten, 1);
        // The pid comes back, forked by this process, which maps a file.
        round(
            &mut w,
            vec![
                Ev::Mmap {
                    pid: me,
                    start: 0x60_0000,
                    len: 0x1000,
                    pgoff: 0,
                    path: PathBuf::from("/bin/sh"),
                },
                Ev::Fork { pid: dead, ppid: me, tid: dead, ptid: me },
                sample(dead, dead, 0x60_0010, vec![]),
            ],
            false,
        );
        let _ = std::fs::remove_dir_all(&dir);
        let i = w.by_pid[&dead];
        let p = &w.procs[i];
        assert_eq!(p.stream, 3, "streams: the first image 1, this process 2, the new one 3");
        assert_eq!(p.samples, 1);
        let maps = &p.live.as_ref().expect("followed").maps;
        assert_eq!(maps.len(), 1, "its parent's mappings: {maps:?}");
    }
}
