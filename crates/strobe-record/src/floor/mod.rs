//! The kernel floor: sampling from the kernel's side, without injecting anything. The
//! recorder opens the event group on every CPU for the target (a launched command held
//! before its exec, running processes with `-p`, or every task with `-a`), with
//! `inherit` so that every thread and child the target makes is followed whatever it
//! does (fork, vfork, exec of any image, raw clone, signals blocked), and reads the
//! kernel's per-CPU ring buffers itself (crate strobe-perf's [`CpuRings`]). The kernel
//! writes many records per wakeup: the reader is woken past a watermark, never blocks the
//! target (a full ring drops records and says how many, which the file keeps).
//!
//! In kernel mode the floor is the whole recording. In agent mode it runs beside the
//! agent, sampling the leader alone at the agent's mean cycle: a sample of a thread the
//! agent served at that moment is dropped ([`Served`]), every other one is kept, so each
//! task of the tree is sampled once, at one rate, by whichever sampler could. Each CPU's
//! exit counter (`inherit_stat`) writes a task's exact CPU time when it exits, into an exit
//! ring of its own, never into the samples' ring (strobe-perf's `percpu` says why); the
//! recorder reads the rest from `/proc` at the end, so the report can say, per process
//! and thread, what the samples do not account for. Losses of exit records are counted
//! apart from samples' and said in a warning.
//!
//! - [`decode`]: ring records into owned events (crate strobe-perfdata's decoder).
//! - [`order`]: the records of all rings back in time order (`perf record`'s rounds).
//! - [`writer`]: processes, threads, mappings, stacks, samples, off-CPU intervals, task
//!   counts and losses into the record file's chunks, one stream per process image.
//! - [`ksyms`]: the kernel functions hit, from `/proc/kallsyms`, where it is readable.
//! - [`unwind`]: walks of the user stack copies samples carry (`--call-graph dwarf`).
//! - [`attach`]: opening the floor on running processes (`-p`).
//!
//! Owns: the floor's events, rings and writer for one recording. Must never run code in
//! the target, block it, or print.

pub(crate) mod attach;
pub(crate) mod decode;
pub(crate) mod ksyms;
pub(crate) mod order;
pub(crate) mod unwind;
pub(crate) mod writer;

use std::fs::File;
use std::time::Duration;

use rustc_hash::FxHashMap;
use strobe_format::PeriodSource;
use strobe_perf::percpu::{CpuRings, RingSampling, RingSetError, Scope};
use strobe_perf::ring::{poll_readable, Record, RingError, Wakeup};
use strobe_perf::spec::GroupSpec;

use crate::served::Served;
use crate::RecordError;
use decode::Decoder;
use order::Order;
use writer::{Known, Writer};

/// A sample's size in the ring, for turning `--wakeup N` samples into bytes: header,
/// six fixed fields, a group of three and a call chain of about 16 frames.
const EST_SAMPLE_BYTES: u64 = 240;
/// How long a pass waits when a ring is hung up (its task exited) and holds nothing.
const HUNG_UP_PASS: Duration = Duration::from_millis(20);

/// How the floor samples, as the session decided.
#[derive(Debug, Clone)]
pub(crate) struct FloorConfig {
    /// The group the floor opens (the leader alone beside an agent).
    pub spec: GroupSpec,
    /// The leader's period.
    pub period: u64,
    /// The period came from `period=` (not the budget or the default).
    pub explicit: bool,
    /// The window to alternate with where the kernel can (kernel mode only; 0: none).
    pub window: u64,
    /// Call chains at all; user stack copies for a DWARF walk.
    pub callchain: bool,
    pub dwarf: bool,
    /// The most frames a sample keeps.
    pub max_depth: u32,
    /// Kernel events allowed.
    pub kernel_allowed: bool,
    /// Bytes of ring per CPU.
    pub ring_bytes: u64,
    /// Samples before a wakeup (`--wakeup`).
    pub wakeup: u64,
    /// Sample switch-outs with their stacks.
    pub off_cpu: bool,
    /// Beside an agent: PROCESS chunks say `floor`, and streams take high ids.
    pub beside_agent: bool,
    /// The kernel samples `thin` times as often as `period` and the writer keeps one in
    /// `thin` of each thread, from a random first (see the writer's `Sampling::thin`).
    pub thin: u32,
}

/// The perf_event_max_stack sysctl, capped by `max_depth`.
fn max_stack(max_depth: u32) -> u16 {
    let sysctl = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(127);
    max_depth.min(sysctl).min(u32::from(u16::MAX)) as u16
}

impl FloorConfig {
    /// The ring geometry and the kernel's sampling attrs.
    fn ring_sampling(&self) -> (RingSampling, usize) {
        let sample_bytes = EST_SAMPLE_BYTES
            + if self.dwarf { u64::from(crate::plan::USER_STACK_BYTES) } else { 0 };
        let page = strobe_perf::ring::page_size() as u64;
        let data_bytes = crate::plan::ring_data_bytes(self.ring_bytes);
        let pages = (data_bytes / page) as usize;
        let wakeup = if self.wakeup <= 1 {
            Wakeup::Events(1)
        } else if self.wakeup.saturating_mul(sample_bytes) < data_bytes / 2 {
            Wakeup::Events(u32::try_from(self.wakeup).unwrap_or(u32::MAX))
        } else {
            Wakeup::Bytes(u32::try_from(data_bytes / 2).unwrap_or(u32::MAX))
        };
        let s = RingSampling {
            period: (self.period / u64::from(self.thin.max(1))).max(1),
            window: self.window,
            callchain: self.callchain,
            user_stack: if self.dwarf { crate::plan::USER_STACK_BYTES } else { 0 },
            max_stack: max_stack(self.max_depth),
            kernel_allowed: self.kernel_allowed,
            wakeup,
            off_cpu: self.off_cpu,
        };
        (s, pages)
    }
}

/// The floor of one recording: its events and rings, and the writer of its streams.
pub(crate) struct Floor {
    rings: CpuRings,
    decoder: Decoder,
    order: Order,
    writer: Writer,
    /// Ring wakeups seen.
    pub wakeups: u64,
    /// The group's values come with each sample.
    pub group_read: bool,
    /// The window the kernel alternates with, when it does.
    pub hf_window: Option<u64>,
    /// The data bytes of each CPU's ring.
    pub ring_bytes: u64,
    /// Exit records (a task's CPU time on one CPU) the exit rings had no room for.
    exit_counts_lost: u64,
}

/// Where the floor's events go.
pub(crate) enum Target<'a> {
    /// A process held before its exec.
    Launched(libc::pid_t),
    /// Running processes, with what /proc showed of them.
    Processes(&'a [u32]),
    /// Every task.
    System,
}

impl Floor {
    /// Opens the floor for `target` and its writer appending to `file` (the header is
    /// written). A launched process's events start at its exec; the others are enabled
    /// here.
    pub(crate) fn open(
        cfg: &FloorConfig,
        target: Target<'_>,
        file: File,
        launched: Option<u32>,
    ) -> Result<Floor, RecordError> {
        attach::raise_fd_limit();
        let (sampling, mut pages) = cfg.ring_sampling();
        let mut known: FxHashMap<u32, Known> = FxHashMap::default();
        let rings = match target {
            Target::Launched(pid) => loop {
                // The default ring may exceed a user's locked-memory allowance (an
                // unprivileged user's is kernel.perf_event_mlock_kb per CPU): smaller
                // rings then, read as often.
                match CpuRings::open(&cfg.spec, &sampling, Scope::Launched(pid), pages) {
                    Err(RingSetError::Ring(RingError::LockedMemory { .. })) if pages > 8 => {
                        pages /= 2;
                    }
                    r => break r?,
                }
            },
            Target::Processes(pids) => {
                attach::attach_threads(&cfg.spec, &sampling, pids, pages, &mut known)?
            }
            Target::System => {
                let mut rings = CpuRings::open(&cfg.spec, &sampling, Scope::System, pages)?;
                for pid in strobe_target::tasks::all_pids().unwrap_or_default() {
                    if let Some(k) = attach::known_of(pid) {
                        known.insert(pid, k);
                    }
                }
                rings.enable().map_err(|source| RecordError::Io {
                    what: "enabling the perf events".into(),
                    source,
                })?;
                rings
            }
        };
        let group_read = rings.group_read();
        let ncounters = if group_read { cfg.spec.events.len() } else { 1 };
        let writer = Writer::new(
            file,
            writer::Sampling {
                period: (cfg.period / u64::from(cfg.thin.max(1))).max(1),
                period_source: if cfg.explicit {
                    PeriodSource::Explicit
                } else {
                    PeriodSource::Budget
                },
                hf_window: rings.hf_window(),
                group_read,
                ncounters,
                user_walk_depth: if cfg.dwarf { cfg.max_depth as usize } else { 0 },
                leader_is_time: cfg.spec.leader().is_time,
                floor: cfg.beside_agent,
                thin: cfg.thin.max(1),
            },
            known,
            launched,
            cfg.kernel_allowed,
            // Streams beside an agent's: high ids (agents pick theirs at random).
            if cfg.beside_agent { 0x8000_0000 } else { 1 },
        );
        let decoder = Decoder::new(&rings, rings.roles(), cfg.max_depth as usize);
        Ok(Floor {
            exit_counts_lost: 0,
            hf_window: rings.hf_window(),
            rings,
            decoder,
            order: Order::default(),
            writer,
            wakeups: 0,
            group_read,
            ring_bytes: pages as u64 * strobe_perf::ring::page_size() as u64,
        })
    }

    /// Reads the kernel's symbols now (after the file's header, before the target runs).
    pub(crate) fn preload_kernel_symbols(&mut self) {
        self.writer.preload_kernel_symbols();
    }

    /// Waits up to `timeout` for a ring's wakeup.
    pub(crate) fn wait(&mut self, timeout: Duration) {
        let ready = poll_readable(&self.rings.ring_fds(), Some(timeout)).unwrap_or_default();
        // A ring is readable past its watermark, or hung up (its task is gone and so is
        // every copy of its events): only the first is a wakeup; the second would make
        // poll return at once until the recording ends, so wait instead.
        let pending = self.rings.rings_pending();
        let woken = ready.iter().zip(&pending).filter(|(&r, &p)| r && p).count();
        self.wakeups += woken as u64;
        if woken == 0 && ready.iter().any(|&r| r) {
            std::thread::sleep(timeout.min(HUNG_UP_PASS));
        }
    }

    /// Reads every ring into the time order; returns the records read.
    pub(crate) fn drain(&mut self) -> usize {
        let mut n = 0;
        for ring in self.rings.rings_mut() {
            n += ring.read(|rec| {
                if let Some(t) = self.decoder.decode(rec) {
                    self.order.push(t);
                }
            });
        }
        // The exit rings: tasks' CPU times, whose losses are not samples'.
        let mut exit_lost = 0;
        for ring in self.rings.exit_rings_mut() {
            n += ring.read(|rec| match rec {
                Record::Lost { lost, .. } => exit_lost += lost,
                rec => {
                    if let Some(t) = self.decoder.decode(rec) {
                        self.order.push(t);
                    }
                }
            });
        }
        self.exit_counts_lost += exit_lost;
        n
    }

    /// What the recording says of tasks' CPU times at their exit when some could not be
    /// had: the kernel dropped exit records, or the exit rings could not be mapped.
    pub(crate) fn exit_counts_warning(&self) -> Option<String> {
        if let Some(why) = self.rings.exit_counts_off() {
            return Some(format!(
                "threads' CPU time at their exit is not recorded ({why}): the CPU time threads \
                 that ended ran outside their samples is not named"
            ));
        }
        (self.exit_counts_lost > 0).then(|| {
            format!(
                "the kernel dropped {} records of threads' CPU time at their exit (their ring \
                 filled): the CPU time those threads ran outside their samples is not named",
                self.exit_counts_lost
            )
        })
    }

    /// Ends a round: writes what can be released in time order (dropping samples of
    /// moments `served` says the agent served) and flushes it to the file.
    pub(crate) fn release(&mut self, served: &Served) -> std::io::Result<()> {
        self.writer.apply(self.order.end_round(), served);
        self.writer.flush()?;
        self.writer.forget_gone(self.wakeups);
        Ok(())
    }

    /// Stops the events and writes everything still in the rings.
    pub(crate) fn stop(&mut self, served: &Served) -> std::io::Result<()> {
        self.rings.disable();
        self.drain();
        self.writer.apply(self.order.finish(), served);
        // What the rings lost after their last record (see `unreported_lost`).
        for (task, lost) in self.rings.unreported_lost() {
            self.writer.lost_untold(u32::try_from(task).ok(), lost);
        }
        self.exit_counts_lost += self.rings.exit_counts_untold();
        self.writer.flush()
    }

    /// The writer (after [`Floor::stop`]: the task counts, the END chunks).
    pub(crate) fn writer(&mut self) -> &mut Writer {
        &mut self.writer
    }

    /// Whether kernel symbols could be read, and whether any kernel address came.
    pub(crate) fn kernel_symbols_readable(&self) -> bool {
        self.writer.kernel_symbols_readable()
    }

    /// Whether any kernel address was recorded.
    pub(crate) fn kernel_addresses_seen(&self) -> bool {
        self.writer.kernel_addresses_seen()
    }

    /// Off-CPU intervals written.
    pub(crate) fn off_cpu_intervals(&self) -> u64 {
        self.writer.off_cpu_intervals
    }

    /// Samples dropped because the agent served their thread at that moment.
    pub(crate) fn served_dropped(&self) -> u64 {
        self.writer.served_dropped
    }

    /// Process images seen.
    pub(crate) fn processes(&self) -> usize {
        self.writer.processes()
    }

    /// Records that did not decode, and samples of an unknown event.
    pub(crate) fn decode_errors(&self) -> (u64, u64) {
        (self.decoder.malformed, self.decoder.unknown_id)
    }

    /// Consumes the floor, returning its writer to finish the file with.
    pub(crate) fn into_writer(self) -> Writer {
        self.writer
    }
}
