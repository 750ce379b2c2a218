//! Sampling from the kernel's side: a parsed event group opened on every CPU for a
//! process tree (with `inherit`) or for the whole system, each CPU's events writing into
//! one mmap'd ring buffer, as `perf record` and samply open theirs.
//!
//! Per CPU `c` and per task `t` the set holds: the group (a sampling leader with its
//! counted members, read with every sample: `PERF_SAMPLE_READ` with `PERF_FORMAT_GROUP`)
//! and, with off-CPU recording, a `context-switches` event sampled at every switch-out
//! with its call chain. The first leader opened on a CPU owns that CPU's ring; every other
//! event of that CPU sends its records there ([`PerfEvent::set_output`]). With `inherit`
//! the kernel gives every thread and child process the task makes its own copies of the
//! events, writing into the same rings, and each sample's read values are that thread's
//! own counts.
//!
//! With `inherit`, each CPU also counts `task-clock` in an exit counter with
//! `inherit_stat`: when a thread or child process the kernel gave copies of the events to
//! exits, each copy of the counter writes a READ record with its count, so every task's
//! exact CPU time is known per CPU, however few samples it got. Those records go to a
//! ring of their own per CPU, never to the samples' ring: the exiting task writes the
//! copy of *every* CPU's counter from the CPU it exits on, and the kernel's ring buffer
//! takes writers of one CPU only (its nesting count and head are CPU-local). A READ
//! record written from CPU 1 into CPU 0's ring while CPU 0's timer wrote a sample there
//! left the ring's nesting count stuck: the kernel never published its head again and
//! dropped every later sample of that CPU (seen on Linux 6.18 in 4 to 6 of 10 recordings
//! of 3000 short threads at a 125 us period; `perf record -s` loses the same way). In a
//! ring of their own, such a race can cost exit counts, which are counted, never samples.
//! (A task that exits holding the events the set opened writes none: at a switch between
//! a task and a copy of its events the kernel swaps the two contexts, and their counts.)
//!
//! Samples carry `IDENTIFIER | IP | TID | TIME | CPU | PERIOD`, `READ` (the group) and
//! `CALLCHAIN` (frame pointers, in the kernel) when asked; the side-band records a reader
//! needs to name and account for them (MMAP2, COMM with exec, FORK, EXIT, and SWITCH with
//! off-CPU recording) come from the leader. Leader and off-CPU event have the same
//! sample-id trailer, and the event id first in every sample, so one decoder reads every
//! record of a ring ([`CpuRings::attr_of`]). Times are CLOCK_MONOTONIC.
//!
//! Windows: when asked for a window, the leader is first opened with the
//! high-frequency sampling word of the alternating-period series
//! ([`sys::with_hf_sampling`]) on the calling thread, which then spins briefly: the kernel
//! has the series only if it accepts the attr *and* the samples' periods alternate (a
//! kernel that gives that slot to `config4` may accept the word and ignore it). A kernel
//! without it refuses with `E2BIG`, and the set samples at the plain period
//! ([`CpuRings::hf_window`] says which).
//!
//! Owns the attrs of kernel-ring sampling and the life of these events and rings. It
//! must never read the rings' records (the recorder does, through [`RingBuffer`]) or
//! know what a record means beyond which event wrote it.

use std::os::fd::AsRawFd;

use crate::error::OpenError;
use crate::event::{PerfEvent, Target};
use crate::ring::{use_monotonic_clock, RingBuffer, RingError, Wakeup};
use crate::spec::GroupSpec;
use crate::sys::{self, perf_event_attr};

/// How to sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingSampling {
    /// The leader's sample period (leader units: ns for time events).
    pub period: u64,
    /// The short window to alternate with, leader units (0: none). Used only where the
    /// kernel accepts the high-frequency attr.
    pub window: u64,
    /// Samples carry the call chain the kernel walks (frame pointers).
    pub callchain: bool,
    /// Bytes of each sampled thread's user stack (from its stack pointer up) that
    /// samples carry with the user registers a walk starts from, for a DWARF walk in
    /// the reader (0: none). The kernel's call chain then keeps only kernel frames.
    pub user_stack: u32,
    /// The most frames a call chain keeps (`sample_max_stack`).
    pub max_stack: u16,
    /// Events without a modifier may count the kernel (and samples may carry kernel
    /// frames): `perf_event_paranoid` <= 1 or CAP_PERFMON.
    pub kernel_allowed: bool,
    /// When the kernel wakes the reader.
    pub wakeup: Wakeup,
    /// Also sample every switch-out with its user call chain (needs `kernel_allowed`:
    /// the kernel takes those samples in its scheduler).
    pub off_cpu: bool,
}

/// What the events are opened on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// A process held before its exec: events start at the exec (`enable_on_exec`) and
    /// follow every thread and child it makes.
    Launched(libc::pid_t),
    /// Running threads (every thread of the processes to attach to): each followed with
    /// the threads and children it makes from now on.
    Threads(Vec<libc::pid_t>),
    /// Every task on every CPU.
    System,
}

/// Which event wrote a record (by the id first in every sample and last in every
/// trailer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The sampling leader.
    Leader,
    /// The switch-out sampler of off-CPU recording.
    OffCpu,
    /// The exit counter: READ records with a task's CPU time when it exits, in the exit
    /// rings.
    Exits,
}

/// Why the set could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum RingSetError {
    /// An event could not be opened.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// A ring buffer could not be mapped.
    #[error(transparent)]
    Ring(#[from] RingError),
    /// Off-CPU recording was asked for where the kernel's scheduler samples are not
    /// allowed.
    #[error(
        "off-CPU recording samples each thread's stack as the kernel switches it out, which needs \
         kernel events: kernel.perf_event_paranoid is {level}, needs 1 or lower (as root: \
         sysctl -w kernel.perf_event_paranoid=1), or run strobe with CAP_PERFMON"
    )]
    OffCpuNotAllowed {
        /// The current `perf_event_paranoid` (-1 when unreadable).
        level: i32,
    },
    /// No CPU is online (unreadable sysfs).
    #[error("cannot tell which CPUs are online ({0}); is /sys mounted?")]
    Cpus(std::io::Error),
}

/// The user registers a copied-stack walk starts from (x86-64 `perf_regs` numbers:
/// BP 6, SP 7, IP 8), lowest first as samples carry them.
#[cfg(target_arch = "x86_64")]
pub const USER_STACK_REGS: u64 = (1 << 6) | (1 << 7) | (1 << 8);
/// No copied-stack walk on other architectures.
#[cfg(not(target_arch = "x86_64"))]
pub const USER_STACK_REGS: u64 = 0;

/// `sample_type` of the leader.
pub fn leader_sample_type(callchain: bool, group_read: bool, user_stack: bool) -> u64 {
    let mut t = u64::from(
        sys::PERF_SAMPLE_IDENTIFIER
            | sys::PERF_SAMPLE_IP
            | sys::PERF_SAMPLE_TID
            | sys::PERF_SAMPLE_TIME
            | sys::PERF_SAMPLE_CPU
            | sys::PERF_SAMPLE_PERIOD,
    );
    if group_read {
        t |= u64::from(sys::PERF_SAMPLE_READ);
    }
    if callchain {
        t |= u64::from(sys::PERF_SAMPLE_CALLCHAIN);
    }
    if user_stack {
        t |= u64::from(sys::PERF_SAMPLE_REGS_USER | sys::PERF_SAMPLE_STACK_USER);
    }
    t
}

/// `sample_type` of the switch-out sampler: the leader's trailer fields (so one decoder
/// reads both) and the call chain.
pub const OFF_CPU_SAMPLE_TYPE: u64 = (sys::PERF_SAMPLE_IDENTIFIER
    | sys::PERF_SAMPLE_IP
    | sys::PERF_SAMPLE_TID
    | sys::PERF_SAMPLE_TIME
    | sys::PERF_SAMPLE_CPU
    | sys::PERF_SAMPLE_CALLCHAIN) as u64;

/// Follows the scope's tasks. Never `inherit_stat`: only the exit counter writes READ
/// records at a task's exit, into its own ring (module doc).
fn inherit_flags(attr: &mut perf_event_attr, scope: &Scope) {
    attr.set_inherit_stat(0);
    match scope {
        Scope::System => attr.set_inherit(0),
        Scope::Launched(_) => {
            attr.set_inherit(1);
            attr.set_enable_on_exec(1);
        }
        Scope::Threads(_) => attr.set_inherit(1),
    }
}

/// `sample_type` of the exit counter: it never samples; these bits give its records the
/// leader's sample-id trailer (`TID | TIME | CPU | IDENTIFIER`), so one decoder reads both.
pub const EXIT_COUNTER_SAMPLE_TYPE: u64 = (sys::PERF_SAMPLE_IDENTIFIER
    | sys::PERF_SAMPLE_TID
    | sys::PERF_SAMPLE_TIME
    | sys::PERF_SAMPLE_CPU) as u64;

/// Data pages of each CPU's exit ring: one 64-byte READ record per task that exits, 512
/// of them between two reads of the ring before any is lost (its watermark wakes the
/// reader every 32). Halved, down to one, where the locked-memory allowance is short.
pub const EXIT_RING_PAGES: usize = 8;

/// The exit counter's attr: `task-clock` counted (never sampled) with `inherit_stat`, so
/// each copy writes the task's CPU time on that CPU in a READ record when the task exits.
/// `None` for [`Scope::System`], which follows no task. `lost`: read its lost count
/// (`PERF_FORMAT_LOST`).
pub fn exit_counter_attr(s: &RingSampling, scope: &Scope, lost: bool) -> Option<perf_event_attr> {
    if *scope == Scope::System {
        return None;
    }
    let mut a = sys::new_attr(sys::PERF_TYPE_SOFTWARE, u64::from(sys::PERF_COUNT_SW_TASK_CLOCK));
    // task-clock counts a task's whole running time whatever these say; they only keep
    // the attr within what an unprivileged user may open.
    a.set_exclude_kernel(u64::from(!s.kernel_allowed));
    a.sample_type = EXIT_COUNTER_SAMPLE_TYPE;
    a.read_format = if lost { u64::from(sys::PERF_FORMAT_LOST) } else { 0 };
    a.set_sample_id_all(1);
    use_monotonic_clock(&mut a);
    // Woken at half a page, whatever size the ring gets (the kernel would clamp a larger
    // watermark to a smaller ring's size, and wake only when it is full).
    let half_page = crate::ring::page_size() / 2;
    Wakeup::Bytes(u32::try_from(half_page).unwrap_or(u32::MAX)).apply(&mut a);
    inherit_flags(&mut a, scope);
    a.set_inherit_stat(1);
    Some(a)
}

/// The leader's attr: `spec`'s leader sampling every `s.period`, reading the group with
/// each sample when `group_read`, carrying the side-band records.
pub fn leader_attr(
    spec: &GroupSpec,
    s: &RingSampling,
    scope: &Scope,
    group_read: bool,
) -> perf_event_attr {
    let mut a = spec.counting_attr(0, s.kernel_allowed);
    a.__bindgen_anon_1.sample_period = s.period.max(1);
    let user_stack = s.user_stack > 0 && USER_STACK_REGS != 0;
    a.sample_type = leader_sample_type(s.callchain, group_read, user_stack);
    a.read_format = if group_read { u64::from(sys::PERF_FORMAT_GROUP) } else { 0 };
    // Each event's own count of the records its ring had no room for, read at the end
    // ([`CpuRings::unreported_lost`]).
    a.read_format |= u64::from(sys::PERF_FORMAT_LOST);
    a.sample_max_stack = s.max_stack;
    // Kernel frames only where kernel events are allowed (and wanted).
    a.set_exclude_callchain_kernel(a.exclude_kernel());
    if user_stack {
        a.sample_regs_user = USER_STACK_REGS;
        // The kernel wants a multiple of 8.
        a.sample_stack_user = s.user_stack & !7;
        // The user frames come from the copy; the kernel's frame-pointer chain of them
        // stays, for code whose files have no unwind tables (Go).
    }
    a.set_mmap(1);
    a.set_mmap2(1);
    a.set_comm(1);
    a.set_comm_exec(1);
    a.set_task(1);
    a.set_sample_id_all(1);
    a.set_context_switch(u64::from(s.off_cpu));
    use_monotonic_clock(&mut a);
    s.wakeup.apply(&mut a);
    inherit_flags(&mut a, scope);
    a
}

/// Member `i`'s attr: counted, read with its leader.
pub fn member_attr(spec: &GroupSpec, i: usize, s: &RingSampling, scope: &Scope) -> perf_event_attr {
    let mut a = spec.counting_attr(i, s.kernel_allowed);
    a.set_disabled(0);
    use_monotonic_clock(&mut a);
    inherit_flags(&mut a, scope);
    // The leader's READ record at a task's exit carries the whole group's counts; a
    // member's own would come without the sample-id trailer the reader splits by.
    a.set_inherit_stat(0);
    // Members follow their leader's enable state, which enable_on_exec sets.
    a.set_enable_on_exec(0);
    a
}

/// The switch-out sampler's attr: `context-switches` at period 1, with the user call
/// chain (the kernel part is the scheduler, the same in every sample).
pub fn off_cpu_attr(s: &RingSampling, scope: &Scope) -> perf_event_attr {
    let mut a =
        sys::new_attr(sys::PERF_TYPE_SOFTWARE, u64::from(sys::PERF_COUNT_SW_CONTEXT_SWITCHES));
    a.__bindgen_anon_1.sample_period = 1;
    a.sample_type = OFF_CPU_SAMPLE_TYPE;
    a.read_format = u64::from(sys::PERF_FORMAT_LOST);
    a.sample_max_stack = s.max_stack;
    // The sample is taken in the scheduler: excluding the kernel would drop every one.
    a.set_exclude_kernel(0);
    a.set_exclude_callchain_kernel(1);
    a.set_sample_id_all(1);
    use_monotonic_clock(&mut a);
    s.wakeup.apply(&mut a);
    inherit_flags(&mut a, scope);
    // Only the leader reports a task's counts at its exit.
    a.set_inherit_stat(0);
    a
}

/// The CPUs online now, from `/sys/devices/system/cpu/online` (`0-3,6`).
pub fn online_cpus() -> std::io::Result<Vec<i32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    parse_cpu_list(text.trim()).ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("bad CPU list '{text}'"))
    })
}

/// Parses a kernel CPU list (`0-3,6`).
pub fn parse_cpu_list(s: &str) -> Option<Vec<i32>> {
    let mut out = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (i32, i32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 65536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The events and rings of one recording.
#[derive(Debug)]
pub struct CpuRings {
    cpus: Vec<i32>,
    pages: usize,
    rings: Vec<Option<RingBuffer>>,
    /// Per CPU, the index in `events` of the leader that owns its ring.
    owners: Vec<Option<usize>>,
    /// Every open event (leaders, members, switch-out samplers), kept open.
    events: Vec<PerfEvent>,
    /// Leaders and samplers to enable (indices into `events`).
    to_enable: Vec<usize>,
    /// The events that write records (leaders and samplers): index into `events`, index
    /// of the CPU whose ring they write into, the task they were opened on, and which.
    writers: Vec<(usize, usize, libc::pid_t, Role)>,
    roles: Vec<(u64, Role)>,
    leader: perf_event_attr,
    member_attrs: Vec<perf_event_attr>,
    off_cpu: Option<perf_event_attr>,
    /// The exit counter's attr (`None`: no task is followed, or its rings could not all be
    /// mapped).
    exit_attr: Option<perf_event_attr>,
    /// Per CPU, the ring of the exit counters' READ records, and the index in `events` of
    /// the counter that owns it.
    exit_rings: Vec<Option<RingBuffer>>,
    exit_owners: Vec<Option<usize>>,
    /// The exit counters: index into `events`.
    exit_counters: Vec<usize>,
    /// Why the set went without exit counts, when it had to.
    exits_off: Option<String>,
    hf: Option<u64>,
    group_read: bool,
    names: Vec<String>,
    enabled: bool,
}

impl CpuRings {
    /// Opens `spec` on every online CPU for `scope`, each CPU with a ring of `pages`
    /// data pages (a power of two). Everything starts disabled except a launched
    /// process's events, which its exec enables; call [`CpuRings::enable`] for the
    /// others once every thread is opened.
    pub fn open(
        spec: &GroupSpec,
        s: &RingSampling,
        scope: Scope,
        pages: usize,
    ) -> Result<CpuRings, RingSetError> {
        if s.off_cpu && !s.kernel_allowed {
            return Err(RingSetError::OffCpuNotAllowed {
                level: crate::pmu::paranoid_level().unwrap_or(-1),
            });
        }
        let cpus = online_cpus().map_err(RingSetError::Cpus)?;
        let mut set = CpuRings {
            rings: cpus.iter().map(|_| None).collect(),
            owners: cpus.iter().map(|_| None).collect(),
            exit_rings: cpus.iter().map(|_| None).collect(),
            exit_owners: cpus.iter().map(|_| None).collect(),
            cpus,
            pages,
            events: Vec::new(),
            to_enable: Vec::new(),
            writers: Vec::new(),
            roles: Vec::new(),
            leader: leader_attr(spec, s, &scope, spec.events.len() > 1),
            member_attrs: (1..spec.events.len()).map(|i| member_attr(spec, i, s, &scope)).collect(),
            off_cpu: s.off_cpu.then(|| off_cpu_attr(s, &scope)),
            exit_attr: exit_counter_attr(s, &scope, true),
            exit_counters: Vec::new(),
            exits_off: None,
            hf: None,
            group_read: spec.events.len() > 1,
            names: spec.events.iter().map(|e| e.name.clone()).collect(),
            enabled: false,
        };
        if s.window > 0 && alternates_here(&set.leader, s.window) {
            set.hf = Some(s.window);
            set.leader = sys::with_hf_sampling(&set.leader, clamp_u32(s.window), 0);
        }
        let tasks: Vec<libc::pid_t> = match &scope {
            Scope::Launched(pid) => vec![*pid],
            Scope::Threads(tids) => tids.clone(),
            Scope::System => vec![-1],
        };
        // A thread of an attached process may exit between the scan and its open: skip
        // it, unless none is left.
        let mut first_err = None;
        let mut opened = 0;
        for &t in &tasks {
            match set.open_task(t) {
                Ok(()) => opened += 1,
                Err(RingSetError::Open(e @ OpenError::NoSuchTask { .. })) => {
                    first_err.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        match first_err {
            Some(e) if opened == 0 => Err(e.into()),
            _ => Ok(set),
        }
    }

    fn target_of(&self, task: libc::pid_t, cpu: i32) -> Target {
        Target { pid: task, cpu }
    }

    /// Opens the events of one more task (a thread of an attached process that appeared
    /// after the first scan) on every CPU, enabled at once if the set is.
    pub fn add_thread(&mut self, tid: libc::pid_t) -> Result<(), RingSetError> {
        self.open_task(tid)
    }

    fn open_task(&mut self, task: libc::pid_t) -> Result<(), RingSetError> {
        for ci in 0..self.cpus.len() {
            let cpu = self.cpus[ci];
            let target = self.target_of(task, cpu);
            let leader = loop {
                match self.open_leader(target) {
                    Ok(l) => break l,
                    Err(OpenError::Rejected { source, .. })
                        if self.events.is_empty()
                            && source.raw_os_error() == Some(libc::EINVAL)
                            && self.fall_back() => {}
                    Err(e) => return Err(e.into()),
                }
            };
            let mut members = Vec::with_capacity(self.member_attrs.len());
            for (i, attr) in self.member_attrs.iter().enumerate() {
                members.push(PerfEvent::open(attr, target, Some(&leader), &self.names[i + 1])?);
            }
            let off = match &self.off_cpu {
                Some(a) => Some(PerfEvent::open(a, target, None, "context-switches (off-CPU)")?),
                None => None,
            };
            // The CPU's ring: mapped on its first leader, the others write into it.
            let owns_ring = self.owners[ci].is_none();
            if owns_ring {
                self.rings[ci] = Some(RingBuffer::map(&leader, self.pages)?);
            } else if let Some(owner) = self.owners[ci].and_then(|i| self.events.get(i)) {
                leader.set_output(owner).map_err(|e| set_output_error(&self.names[0], e))?;
            }
            if let Some(off) = &off {
                let owner = self.owners[ci].and_then(|i| self.events.get(i)).unwrap_or(&leader);
                off.set_output(owner).map_err(|e| set_output_error("context-switches", e))?;
            }
            self.roles.push((leader.id().unwrap_or(0), Role::Leader));
            if owns_ring {
                self.owners[ci] = Some(self.events.len());
            }
            self.writers.push((self.events.len(), ci, task, Role::Leader));
            self.push(leader, true)?;
            for m in members {
                self.push(m, false)?;
            }
            if let Some(off) = off {
                self.roles.push((off.id().unwrap_or(0), Role::OffCpu));
                self.writers.push((self.events.len(), ci, task, Role::OffCpu));
                self.push(off, true)?;
            }
            self.open_exit_counter(ci, target)?;
        }
        Ok(())
    }

    /// Opens the exit counter of `target` (CPU `ci`), into the CPU's exit ring, mapped on
    /// its first counter. Exit counts never cost the samples: where a counter cannot be
    /// opened or redirected, or the locked-memory allowance leaves no room for an exit
    /// ring, the set goes without them (a CPU's alone would give part of a task's time),
    /// and [`CpuRings::exit_counts_off`] says why.
    fn open_exit_counter(&mut self, ci: usize, target: Target) -> Result<(), RingSetError> {
        const WHAT: &str = "task-clock (exit counts)";
        let Some(attr) = self.exit_attr else { return Ok(()) };
        let counter = match PerfEvent::open(&attr, target, None, WHAT) {
            Ok(c) => c,
            // A thread of an attached process that ended since its leader opened: it has
            // no exit to come.
            Err(OpenError::NoSuchTask { .. }) => return Ok(()),
            Err(e) => {
                self.drop_exit_counters(e.to_string());
                return Ok(());
            }
        };
        match self.exit_owners[ci].and_then(|i| self.events.get(i)) {
            Some(owner) => {
                if let Err(e) = counter.set_output(owner) {
                    self.drop_exit_counters(format!("redirecting an exit counter failed: {e}"));
                    return Ok(());
                }
            }
            None => {
                let mut pages = EXIT_RING_PAGES;
                let ring = loop {
                    match RingBuffer::map(&counter, pages) {
                        Err(RingError::LockedMemory { .. }) if pages > 1 => pages /= 2,
                        r => break r,
                    }
                };
                match ring {
                    Ok(ring) => {
                        self.exit_rings[ci] = Some(ring);
                        self.exit_owners[ci] = Some(self.events.len());
                    }
                    Err(e) => {
                        self.drop_exit_counters(e.to_string());
                        return Ok(());
                    }
                }
            }
        }
        self.roles.push((counter.id().unwrap_or(0), Role::Exits));
        self.exit_counters.push(self.events.len());
        self.push(counter, true)
    }

    /// Goes without exit counts: the counters opened so far are disabled and their rings
    /// unmapped; they stay open, as every event of the set does, so indices hold (a
    /// launched process's exec enables them again, and the few records they then write go
    /// unread: nothing reads a count of theirs).
    fn drop_exit_counters(&mut self, why: String) {
        self.exits_off = Some(why);
        for &i in &self.exit_counters {
            let _ = self.events[i].disable();
        }
        self.to_enable.retain(|i| !self.exit_counters.contains(i));
        self.exit_counters.clear();
        self.exit_rings.iter_mut().for_each(|r| *r = None);
        self.exit_owners.iter_mut().for_each(|o| *o = None);
        self.exit_attr = None;
    }

    /// An older kernel refused the leader's attr (`EINVAL`): drops what it may lack, one
    /// thing at a time; false when nothing is left to drop. READ with `inherit` needs
    /// Linux 6.12 (the leader is then sampled alone, with its periods);
    /// `PERF_FORMAT_LOST` needs 6.0 (the records lost after a ring's last record are then
    /// not counted).
    fn fall_back(&mut self) -> bool {
        let lost = u64::from(sys::PERF_FORMAT_LOST);
        if self.group_read {
            self.group_read = false;
            self.leader.sample_type &= !u64::from(sys::PERF_SAMPLE_READ);
            self.leader.read_format &= !u64::from(sys::PERF_FORMAT_GROUP);
            self.member_attrs.clear();
            self.names.truncate(1);
            true
        } else if self.leader.read_format & lost != 0 {
            self.leader.read_format &= !lost;
            if let Some(o) = &mut self.off_cpu {
                o.read_format &= !lost;
            }
            if let Some(x) = &mut self.exit_attr {
                x.read_format &= !lost;
            }
            true
        } else {
            false
        }
    }

    fn open_leader(&self, target: Target) -> Result<PerfEvent, OpenError> {
        PerfEvent::open(&self.leader, target, None, &self.names[0])
    }

    fn push(&mut self, e: PerfEvent, enable: bool) -> Result<(), RingSetError> {
        if enable {
            if self.enabled {
                e.enable().map_err(|source| {
                    RingSetError::Open(OpenError::Rejected {
                        what: self.names[0].clone(),
                        hint: "; enabling the event failed",
                        source,
                    })
                })?;
            }
            self.to_enable.push(self.events.len());
        }
        self.events.push(e);
        Ok(())
    }

    /// Starts every event (a launched process's start with its exec on their own).
    pub fn enable(&mut self) -> std::io::Result<()> {
        for &i in &self.to_enable {
            self.events[i].enable()?;
        }
        self.enabled = true;
        Ok(())
    }

    /// Stops every event: nothing more is written, what was is still read.
    pub fn disable(&mut self) {
        for &i in &self.to_enable {
            let _ = self.events[i].disable();
        }
        self.enabled = false;
    }

    /// The records each ring's events had no room for that no `PERF_RECORD_LOST` has
    /// told (call after the events are disabled and the rings read to the end): per
    /// ring, with the task of the event that lost the most, as (task, count); the task
    /// is -1 for a system-wide set. Empty where the kernel does not count (before 6.0).
    ///
    /// The kernel counts a ring's losses and writes the count as a LOST record into the
    /// ring only with the next record it has room for, so what is lost after the last
    /// record a ring takes is never written; each event counts its own losses as well
    /// (with `inherit`, a copy's on the event it was copied from), which `read(2)` gives
    /// with `PERF_FORMAT_LOST`. Their sum less what the ring's LOST records told is the
    /// rest. A group read while copies of a leader are alive gives the last copy's count
    /// in place of the leader's (0: a copy's losses go to the leader), so the rest is
    /// never more than the truth, and is exact once the tasks have exited.
    pub fn unreported_lost(&mut self) -> Vec<(libc::pid_t, u64)> {
        let lost_bit = u64::from(sys::PERF_FORMAT_LOST);
        if self.leader.read_format & lost_bit == 0 {
            return Vec::new();
        }
        // (told by events, the event with the most: (count, task)) per ring.
        let mut per_ring: Vec<(u64, (u64, libc::pid_t))> = vec![(0, (0, 0)); self.cpus.len()];
        let mut buf = [0u64; 2 + 2 * crate::spec::MAX_GROUP];
        for &(ei, ci, task, role) in &self.writers {
            let group = self.group_read && role == Role::Leader;
            let Ok(n) = self.events[ei].read_into(&mut buf) else { continue };
            // GROUP: nr, then (value, lost) per event, the leader's first; else value, lost.
            let at = if group { 2 } else { 1 };
            if n <= at {
                continue;
            }
            let lost = buf[at];
            let r = &mut per_ring[ci];
            r.0 += lost;
            if lost > r.1 .0 {
                r.1 = (lost, task);
            }
        }
        let mut out = Vec::new();
        for (ci, (told_by_events, (_, task))) in per_ring.into_iter().enumerate() {
            let Some(ring) = &self.rings[ci] else { continue };
            let rest = told_by_events.saturating_sub(ring.lost());
            if rest > 0 {
                out.push((task, rest));
            }
        }
        out
    }

    /// The samples' rings, one per online CPU.
    pub fn rings_mut(&mut self) -> impl Iterator<Item = &mut RingBuffer> {
        self.rings.iter_mut().flatten()
    }

    /// The exit counters' rings, one per online CPU (none without exit counts).
    pub fn exit_rings_mut(&mut self) -> impl Iterator<Item = &mut RingBuffer> {
        self.exit_rings.iter_mut().flatten()
    }

    /// Every ring's fd, for `poll`: the samples' rings, then the exit rings.
    pub fn ring_fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        self.rings.iter().chain(&self.exit_rings).flatten().map(|r| r.fd()).collect()
    }

    /// Whether each ring holds records, in [`CpuRings::ring_fds`]' order.
    pub fn rings_pending(&self) -> Vec<bool> {
        self.rings.iter().chain(&self.exit_rings).flatten().map(|r| r.pending_bytes() > 0).collect()
    }

    /// Whether every task's exit writes its CPU time (false: no task is followed, or the
    /// set had to go without: [`CpuRings::exit_counts_off`]).
    pub fn exit_counts(&self) -> bool {
        self.exit_attr.is_some()
    }

    /// Why the set goes without exit counts though it follows tasks (an exit counter could
    /// not be opened or its ring mapped), if it does.
    pub fn exit_counts_off(&self) -> Option<&str> {
        self.exits_off.as_deref()
    }

    /// Exit records the exit rings had no room for that no `PERF_RECORD_LOST` told (as
    /// [`CpuRings::unreported_lost`], for the exit counters; call at the same point).
    pub fn exit_counts_untold(&mut self) -> u64 {
        let Some(attr) = self.exit_attr else { return 0 };
        if attr.read_format & u64::from(sys::PERF_FORMAT_LOST) == 0 {
            return 0;
        }
        let mut buf = [0u64; 2];
        let told_by_events: u64 = self
            .exit_counters
            .iter()
            .filter_map(|&i| match self.events[i].read_into(&mut buf) {
                Ok(n) if n >= 2 => Some(buf[1]),
                _ => None,
            })
            .sum();
        let told_by_rings: u64 = self.exit_rings.iter().flatten().map(|r| r.lost()).sum();
        told_by_events.saturating_sub(told_by_rings)
    }

    /// The CPUs the rings belong to, in ring order.
    pub fn cpus(&self) -> &[i32] {
        &self.cpus
    }

    /// Every event id and what it is (for a decoder that keeps its own copy).
    pub fn roles(&self) -> Vec<(u64, Role)> {
        self.roles.clone()
    }

    /// Which event wrote records with this id.
    pub fn role_of(&self, id: u64) -> Option<Role> {
        self.roles.iter().find(|(i, _)| *i == id).map(|(_, r)| *r)
    }

    /// The attr of the event with role `role`, as opened (the decoder of its records).
    pub fn attr_of(&self, role: Role) -> Option<&perf_event_attr> {
        match role {
            Role::Leader => Some(&self.leader),
            Role::OffCpu => self.off_cpu.as_ref(),
            Role::Exits => self.exit_attr.as_ref(),
        }
    }

    /// The window the kernel alternates with (the high-frequency attr was accepted), if
    /// any.
    pub fn hf_window(&self) -> Option<u64> {
        self.hf
    }

    /// Whether samples carry the group's values (false only on kernels that refuse
    /// `PERF_SAMPLE_READ` with `inherit`, where only the leader is recorded).
    pub fn group_read(&self) -> bool {
        self.group_read
    }

    /// Events open (file descriptors held).
    pub fn event_count(&self) -> usize {
        self.events.len()
    }

    /// The raw fds of every event (diagnostics).
    pub fn fds(&self) -> impl Iterator<Item = std::os::fd::RawFd> + '_ {
        self.events.iter().map(|e| e.as_raw_fd())
    }
}

fn clamp_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Whether this kernel alternates `attr`'s period with a `window` of the high-frequency
/// word: the attr must open on the calling thread and, over a few milliseconds of
/// spinning at a short period, give samples whose periods are the window's.
pub fn alternates_here(attr: &perf_event_attr, window: u64) -> bool {
    let mut a = sys::with_hf_sampling(attr, clamp_u32(window), 0);
    a.set_inherit(0);
    a.set_enable_on_exec(0);
    a.set_disabled(1);
    a.set_exclude_kernel(1);
    a.set_exclude_callchain_kernel(1);
    a.sample_type = u64::from(sys::PERF_SAMPLE_PERIOD);
    a.read_format = 0;
    a.set_mmap(0);
    a.set_mmap2(0);
    a.set_comm(0);
    a.set_task(0);
    a.set_context_switch(0);
    // A long period short enough to sample a few times in the spin.
    a.__bindgen_anon_1.sample_period = 1_000_000;
    let ev = match PerfEvent::open(&a, Target::CALLING_THREAD, None, "hf probe") {
        Ok(ev) => ev,
        Err(e) if refused_as_unknown(&e) => return false,
        Err(_) => return false,
    };
    let Ok(mut ring) = RingBuffer::map(&ev, 4) else { return false };
    if ev.enable().is_err() {
        return false;
    }
    let end = std::time::Instant::now() + std::time::Duration::from_millis(12);
    let mut v = 0u64;
    while std::time::Instant::now() < end {
        v = std::hint::black_box(v.wrapping_mul(31).wrapping_add(7));
    }
    let _ = ev.disable();
    let layout = crate::ring::SampleLayout::new(a.sample_type);
    let mut short = 0;
    ring.read(|r| {
        if let crate::ring::Record::Sample { body, .. } = r {
            if layout.parse(body).and_then(|s| s.period) == Some(window) {
                short += 1;
            }
        }
    });
    short > 0
}

/// True when a refusal means "this kernel does not know the attr" (the high-frequency
/// word): `E2BIG` (non-zero bytes past the attr it knows) or `EINVAL`.
fn refused_as_unknown(e: &OpenError) -> bool {
    matches!(e, OpenError::Rejected { source, .. }
        if matches!(source.raw_os_error(), Some(libc::E2BIG | libc::EINVAL)))
}

fn set_output_error(what: &str, source: std::io::Error) -> RingSetError {
    RingSetError::Open(OpenError::Rejected {
        what: what.to_string(),
        hint: "; redirecting its records into the CPU's ring buffer failed",
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::Record;
    use crate::spec;
    use std::sync::atomic::Ordering;

    fn sampling() -> RingSampling {
        RingSampling {
            user_stack: 0,
            period: 100_000,
            window: 0,
            callchain: true,
            max_stack: 64,
            kernel_allowed: false,
            wakeup: Wakeup::Bytes(4096),
            off_cpu: false,
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn a_user_stack_brings_its_registers_and_keeps_the_user_call_chain() {
        let g = spec::parse("task-clock", false).unwrap();
        let s = RingSampling { user_stack: 8196, ..sampling() };
        let a = leader_attr(&g, &s, &Scope::Launched(1), false);
        let both = u64::from(sys::PERF_SAMPLE_REGS_USER | sys::PERF_SAMPLE_STACK_USER);
        assert_eq!(a.sample_type & both, both);
        assert_ne!(a.sample_type & u64::from(sys::PERF_SAMPLE_CALLCHAIN), 0);
        assert_eq!((a.sample_regs_user, a.sample_stack_user), (0x1c0, 8192));
        assert_eq!(a.exclude_callchain_user(), 0);
        let plain = leader_attr(&g, &sampling(), &Scope::Launched(1), false);
        assert_eq!(plain.sample_type & both, 0);
        assert_eq!((plain.sample_regs_user, plain.exclude_callchain_user()), (0, 0));
    }

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-3,6"), Some(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list(""), None);
        assert!(!online_cpus().unwrap().is_empty());
    }

    #[test]
    fn the_leader_reads_its_group_and_carries_side_band_records() {
        let g = spec::parse("{task-clock,page-faults}", false).unwrap();
        let s = sampling();
        let a = leader_attr(&g, &s, &Scope::Launched(1), true);
        let want = u64::from(
            sys::PERF_SAMPLE_IDENTIFIER
                | sys::PERF_SAMPLE_IP
                | sys::PERF_SAMPLE_TID
                | sys::PERF_SAMPLE_TIME
                | sys::PERF_SAMPLE_CPU
                | sys::PERF_SAMPLE_PERIOD
                | sys::PERF_SAMPLE_READ
                | sys::PERF_SAMPLE_CALLCHAIN,
        );
        assert_eq!(a.sample_type, want);
        assert_eq!(a.read_format, u64::from(sys::PERF_FORMAT_GROUP | sys::PERF_FORMAT_LOST));
        // SAFETY: both union fields are u64; freq is not set, so this is the period.
        let period = unsafe { a.__bindgen_anon_1.sample_period };
        assert_eq!(period, 100_000);
        assert_eq!(
            (a.inherit(), a.enable_on_exec(), a.mmap2(), a.comm_exec(), a.task()),
            (1, 1, 1, 1, 1)
        );
        assert_eq!((a.exclude_kernel(), a.exclude_callchain_kernel()), (1, 1));
        assert_eq!((a.sample_id_all(), a.use_clockid(), a.clockid), (1, 1, libc::CLOCK_MONOTONIC));
        assert_eq!(a.context_switch(), 0);
        let a = leader_attr(&g, &RingSampling { kernel_allowed: true, ..s }, &Scope::System, true);
        assert_eq!((a.inherit(), a.exclude_kernel(), a.exclude_callchain_kernel()), (0, 0, 0));
        // The switch-out sampler: the leader's trailer fields, kernel allowed, user chain.
        let o = off_cpu_attr(&RingSampling { off_cpu: true, ..s }, &Scope::Threads(vec![1]));
        let trailer = u64::from(
            sys::PERF_SAMPLE_TID
                | sys::PERF_SAMPLE_TIME
                | sys::PERF_SAMPLE_CPU
                | sys::PERF_SAMPLE_IDENTIFIER,
        );
        assert_eq!(o.sample_type & trailer, a.sample_type & trailer);
        assert_eq!((o.exclude_kernel(), o.exclude_callchain_kernel(), o.inherit()), (0, 1, 1));
        assert_eq!(o.config, u64::from(sys::PERF_COUNT_SW_CONTEXT_SWITCHES));
    }

    /// The high-frequency attr of the alternating-period series: the word after config3
    /// (offset 136), period in bits 0..32, random bits in 32..36, size 144; and the plain
    /// attr beside it. This kernel says which it takes.
    #[test]
    fn both_window_attrs_build_and_this_kernel_says_which_it_takes() {
        let g = spec::parse("{task-clock/window=20us/,page-faults}", false).unwrap();
        let plain = leader_attr(&g, &sampling(), &Scope::Threads(vec![0]), true);
        assert_eq!(sys::hf_fields(&plain), (0, 0), "plain: no word");
        assert_eq!(plain.config4, 0);
        let hf = sys::with_hf_sampling(&plain, 20_000, 3);
        assert_eq!(hf.size, 144);
        assert_eq!(sys::hf_fields(&hf), (20_000, 3));
        assert_eq!(sys::hf_fields(&sys::with_hf_sampling(&plain, 1, 200)).1, 15, "4 bits");
        let bytes = sys::attr_bytes(&hf);
        let at = sys::HF_WORD_OFFSET;
        assert_eq!(u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap()), 20_000 | (3 << 32));
        assert_eq!(&sys::attr_bytes(&plain)[..at], &bytes[..at], "the rest is the plain attr");
        // Opening the word: a kernel without the series refuses it outright.
        let refused = PerfEvent::open(&hf, Target::CALLING_THREAD, None, "task-clock");
        let me = sys::gettid();
        let s = RingSampling { window: 20_000, ..sampling() };
        let set = CpuRings::open(&g, &s, Scope::Threads(vec![me]), 1).unwrap();
        match refused {
            Err(e) => {
                assert!(refused_as_unknown(&e), "{e}");
                assert_eq!(set.hf_window(), None, "plain samples where the kernel refuses");
                assert_eq!(set.attr_of(Role::Leader).unwrap().config4, 0);
                eprintln!("this kernel has no hf_sample_period: {e}");
            }
            Ok(_) => {
                assert_eq!(set.hf_window().is_some(), alternates_here(&plain, 20_000));
            }
        }
    }

    /// A thread that runs `work` with `g` opened on it into rings of `pages`, enabled
    /// for just that: the set, disabled, and the thread's id.
    fn sampled(
        g: &GroupSpec,
        s: &RingSampling,
        pages: usize,
        work: impl FnOnce() + Send + 'static,
    ) -> (CpuRings, i32) {
        let (tx, rx) = std::sync::mpsc::channel();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            tx.send(sys::gettid()).unwrap();
            go_rx.recv().unwrap();
            work();
        });
        let tid = rx.recv().unwrap();
        let mut set = CpuRings::open(g, s, Scope::Threads(vec![tid]), pages).unwrap();
        set.enable().unwrap();
        go_tx.send(()).unwrap();
        worker.join().unwrap();
        set.disable();
        (set, tid)
    }

    /// Spins in user code until the thread has run `ms` of CPU time (its own clock read
    /// once every 10,000 turns, so a loaded host stretches the spin, not the samples).
    fn spin(ms: u64) {
        let cpu_ns = || {
            let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: `t` is a valid timespec for the call to fill.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
            t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
        };
        let end = cpu_ns() + ms * 1_000_000;
        let mut v = 0u64;
        while cpu_ns() < end {
            for _ in 0..10_000 {
                v = std::hint::black_box(v.wrapping_mul(31).wrapping_add(7));
            }
        }
    }

    /// A thread of this test sampled on every CPU: samples arrive in the rings with
    /// this thread's id, the leader's id and the group's values.
    #[test]
    fn a_thread_is_sampled_into_per_cpu_rings_with_its_group() {
        let g = spec::parse("{task-clock,page-faults}", false).unwrap();
        let s = RingSampling { period: 200_000, ..sampling() };
        let (mut set, tid) = sampled(&g, &s, 32, || spin(60));
        // The leader, its member and the exit counter, on each CPU.
        assert_eq!(set.event_count(), 3 * set.cpus().len());
        let attr = *set.attr_of(Role::Leader).unwrap();
        let layout = crate::ring::SampleLayout::new(attr.sample_type);
        let (mut samples, mut ours, mut leader_ids) = (0, 0, 0);
        let ids: Vec<u64> = set.roles.iter().map(|r| r.0).collect();
        for ring in set.rings_mut() {
            ring.read(|r| {
                if let Record::Sample { body, .. } = r {
                    let smp = layout.parse(body).unwrap();
                    samples += 1;
                    ours += usize::from(smp.tid == Some(tid as u32));
                    leader_ids += usize::from(ids.contains(&smp.event_id().unwrap()));
                }
            });
        }
        // 60 ms of CPU at 200 us: about 300 samples; the VM may steal some time.
        assert!(samples >= 100, "{samples} samples");
        assert_eq!((ours, leader_ids), (samples, samples));
        assert_eq!(set.role_of(ids[0]), Some(Role::Leader));
    }

    /// A followed thread that makes a thread and both end: their exits write READ records
    /// into the exit rings, never into the samples' rings, each naming one of the two with
    /// a count no more than the CPU time the two ran. (Which of the two writes them is
    /// the kernel's: at a context switch between a task and a copy of its events it swaps
    /// the two contexts, and the counts with them, so the task that ends holding the
    /// original events writes none.)
    #[test]
    fn thread_exits_write_their_cpu_time_into_the_exit_rings() {
        let g = spec::parse("{task-clock}", false).unwrap();
        let s = RingSampling { period: 1_000_000, ..sampling() };
        let child_tid = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0));
        let (c, c2) = (child_tid.clone(), child_tid.clone());
        let started = std::time::Instant::now();
        let (mut set, tid) = sampled(&g, &s, 8, move || {
            std::thread::spawn(move || {
                c.store(sys::gettid(), Ordering::Relaxed);
                spin(40);
            })
            .join()
            .unwrap();
            // A join returns when the thread clears its tid, before the kernel ends its
            // events; it has written their records once it is reaped.
            let task = format!("/proc/self/task/{}", c2.load(Ordering::Relaxed));
            let give_up = std::time::Instant::now() + std::time::Duration::from_secs(5);
            while std::path::Path::new(&task).exists() && std::time::Instant::now() < give_up {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        });
        let wall_ns = started.elapsed().as_nanos() as u64;
        assert!(set.exit_counts());
        let mut in_sample_rings = 0;
        for ring in set.rings_mut() {
            ring.read(|r| {
                in_sample_rings +=
                    usize::from(matches!(r, Record::Other { kind: sys::PERF_RECORD_READ, .. }));
            });
        }
        assert_eq!(in_sample_rings, 0);
        let ours = [tid, child_tid.load(Ordering::Relaxed)];
        let (mut records, mut ns) = (0, 0u64);
        for ring in set.exit_rings_mut() {
            ring.read(|r| {
                if let Record::Other { kind: sys::PERF_RECORD_READ, body, .. } = r {
                    let word =
                        |i: usize| u64::from_ne_bytes(body[i * 8..i * 8 + 8].try_into().unwrap());
                    assert!(ours.contains(&((word(0) >> 32) as i32)), "{:#x}", word(0));
                    records += 1;
                    ns += word(1);
                }
            });
        }
        assert!(records >= 1 && records <= 2 * set.cpus().len(), "{records} records");
        // Two threads on at most as many CPUs as the host has, over the test's time.
        assert!(ns <= wall_ns * set.cpus().len() as u64, "{ns} ns in {wall_ns} ns");
        assert_eq!(set.exit_counts_untold(), 0);
    }

    /// A one-page ring nobody reads while a thread faults 4000 fresh pages, sampled at
    /// every fault: it fills and every later sample is lost, with no record after them
    /// to carry a LOST count. The events' own counts tell the rest: samples kept, told
    /// lost and untold lost together are the thread's faults, exactly. (A software event
    /// at period 1 takes one sample per fault and is never throttled; a time event would
    /// skip periods its timer fires late for, which a VM's stolen time makes uneven.)
    #[test]
    fn what_a_full_ring_loses_after_its_last_record_is_counted() {
        let g = spec::parse("{page-faults/period=1/,task-clock}", false).unwrap();
        let s = RingSampling { period: 1, callchain: false, ..sampling() };
        let (mut set, tid) = sampled(&g, &s, 1, || {
            for _ in 0..4000 {
                // SAFETY: a fresh private anonymous page, touched once and unmapped.
                unsafe {
                    let p = libc::mmap(
                        std::ptr::null_mut(),
                        4096,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    );
                    assert_ne!(p, libc::MAP_FAILED);
                    std::ptr::write_volatile(p.cast::<u8>(), 1);
                    libc::munmap(p, 4096);
                }
            }
        });
        let (mut kept, mut told) = (0u64, 0u64);
        for ring in set.rings_mut() {
            ring.read(|r| kept += u64::from(matches!(r, Record::Sample { .. })));
            told += ring.lost();
        }
        let untold: u64 = set
            .unreported_lost()
            .iter()
            .map(|&(task, n)| {
                assert_eq!(task, tid);
                n
            })
            .sum();
        // The leader's count: every fault the thread took while enabled, each a sample
        // (4000 and the few the thread's start and exit take).
        let mut faults = 0;
        let mut buf = [0u64; 8];
        for &(ei, ..) in &set.writers {
            set.events[ei].read_into(&mut buf).unwrap();
            faults += buf[1];
        }
        assert!(faults >= 4000, "{faults} faults");
        assert!(untold > 0, "kept {kept}, told {told}: the ring filled, so some went untold");
        // A record lost is counted whatever its kind: the thread's exit record (the leader
        // has `task` set) comes after the ring filled and is one more than the samples.
        let all = kept + told + untold;
        assert!(
            (faults..=faults + 1).contains(&all),
            "kept {kept} + told {told} + untold {untold} = {all}, against {faults} faults"
        );
    }
}
