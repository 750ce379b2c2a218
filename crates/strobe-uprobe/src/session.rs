//! One run of `strobe probe -- cmd`: attach, run the target, collect hits, report.
//!
//! # Launch model
//!
//! The target is forked and held before `execve` (strobe-target's launch). Every probe's events
//! are opened on the held child's pid, disabled, with `enable_on_exec` and `inherit`: they
//! switch on at the exec and follow every thread and child process the target creates.
//! Then the child is released and strobe waits for it (a pidfd in the same `poll` as the
//! ring buffers), ignoring SIGINT/SIGQUIT meanwhile so that Ctrl-C stops the target and
//! still yields a report, as `time` does.
//!
//! Events are tracepoint events on uprobes defined in tracefs ([`crate::attach`] says why
//! the uprobe PMU cannot be inherited). When tracefs is not mounted the session mounts it
//! before the target is forked, and says so through a [`Notice`].
//!
//! # Counting, and sampling
//!
//! Counting alone (the default) uses one event per probe site on the task (`cpu = -1`):
//! the kernel folds exited threads' counts into it, so one `read` at the end is exact.
//!
//! `--latency` and `--trace` need each hit's thread and time: sampling events with
//! `sample_period = 1` writing `{id, pid/tid, time}` records into mmap ring buffers. The
//! kernel refuses to map an inherited event that follows a task on every CPU, so these
//! events are opened per CPU (with the pid and `inherit`); on each CPU the first event
//! owns the ring and the others are redirected into it (`SET_OUTPUT`). Rings wake the
//! reader on a byte watermark (a quarter of the ring), not per record; the poll timeout
//! bounds how stale a `--trace` line can be. Hit counts still come from `read` on the
//! events, so they stay exact even if the kernel drops records from a full ring (the
//! report says how many it dropped).
//!
//! # Ordering across rings: the horizon
//!
//! A call's entry and return records may sit in two CPUs' rings (the thread migrated).
//! Each round notes the time `h` *before* reading any ring's head, reads all rings, and
//! handles only records older than `h` (sorted by time), keeping the rest for the next
//! round. This is enough for per-thread order: a uprobe's record is written by the probed
//! thread itself before it resumes, so a return stamped before `h` comes after its entry
//! was written, which was also before `h`, hence before every head read of this round:
//! the entry is in this round or an earlier one. After the target exits, everything left
//! is handled.
//!
//! This module must never run inside the target, and never closes events per hit: closing
//! a uprobe costs a kernel grace period (about 60-90 ms), so events are closed once, when
//! the session is dropped, after the report has been printed.

use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::time::Duration;

use strobe_perf::ring::{self, poll_readable, Record, RingBuffer, SampleLayout, Wakeup};
use strobe_perf::{PerfEvent, Target};

use strobe_target::launch::{Command, HeldChild, InterruptGuard};
use strobe_target::Exit;

use crate::attach::{self, EventSettings, TraceUprobe, Tracefs};
use crate::latency::{Matcher, Summary};
use crate::resolve::{ProbeKind, ResolvedProbe};
use crate::Error;

/// How a session collects hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Measure function durations with return probes (uretprobes).
    pub latency: bool,
    /// Report every hit as it arrives.
    pub trace: bool,
    /// Data pages of each CPU's ring buffer (a power of two).
    pub ring_pages: usize,
    /// The longest a hit waits in a ring before it is handled (the poll timeout).
    pub flush: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options { latency: false, trace: false, ring_pages: 128, flush: Duration::from_millis(100) }
    }
}

impl Options {
    fn sampling(&self) -> bool {
        self.latency || self.trace
    }
}

/// Entry or return.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitKind {
    /// The probed instruction ran (function entry or USDT site).
    Entry,
    /// The function returned; the duration when its entry was seen.
    Return {
        /// Nanoseconds since the matching entry.
        duration_ns: Option<u64>,
    },
}

/// One hit, as `--trace` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit<'a> {
    /// Index of the probe in the session's probe list.
    pub probe: usize,
    /// The probe's name as typed.
    pub name: &'a str,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Nanoseconds since the target was released.
    pub time_ns: u64,
    /// Entry or return.
    pub kind: HitKind,
}

/// One probe's figures at the end of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeReport {
    /// The probe as typed.
    pub name: String,
    /// Function or USDT.
    pub kind: ProbeKind,
    /// What it resolved to.
    pub symbol: String,
    /// How many uprobe sites it covers.
    pub sites: usize,
    /// Exact number of hits (entries).
    pub hits: u64,
    /// Durations, with `--latency` on a function.
    pub latency: Option<Summary>,
}

/// The end of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// One row per probe, in the order given.
    pub probes: Vec<ProbeReport>,
    /// From the target's release to its exit.
    pub elapsed: Duration,
    /// How the target ended.
    pub exit: Exit,
    /// Hit records the kernel dropped because a ring was full (counts stay exact).
    pub lost: u64,
    /// Returns whose entry was not seen.
    pub unmatched_returns: u64,
    /// Entries whose return was not seen (calls still running at exit, `longjmp`).
    pub unmatched_entries: u64,
}

#[derive(Debug)]
struct Attached {
    probe: usize,
    ret: bool,
    event: PerfEvent,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    time: u64,
    pid: u32,
    tid: u32,
    probe: usize,
    ret: bool,
}

/// Something a session did on the user's behalf, to be told as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// tracefs was not mounted, so strobe mounted it here (it stays mounted, as perf
    /// leaves it).
    MountedTracefs(PathBuf),
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Notice::MountedTracefs(p) => write!(
                f,
                "mounted tracefs at {} (it was not mounted; kernel uprobes are defined there)",
                p.display()
            ),
        }
    }
}

/// A target started under probes.
#[derive(Debug)]
pub struct Session {
    probes: Vec<ResolvedProbe>,
    opts: Options,
    // Drop order is field order: the mappings go first, then the events (slow to close),
    // then the tracefs definitions the events use (removable only once unused).
    rings: Vec<RingBuffer>,
    events: Vec<Attached>,
    defs: Vec<TraceUprobe>,
    ids: HashMap<u64, (usize, bool)>,
    child: HeldChild,
    start_ns: u64,
}

impl Session {
    /// Forks `cmd` held before exec, attaches every probe, then releases it. What the
    /// session does on the user's behalf (mounting tracefs) goes to `on_notice` first.
    pub fn launch(
        cmd: &Command,
        probes: Vec<ResolvedProbe>,
        opts: Options,
        mut on_notice: impl FnMut(&Notice),
    ) -> Result<Session, Error> {
        // Without kernel probes (a run that only reads in-program probe points) nothing is
        // attached, and nothing needs tracefs or privileges.
        let tracefs = if probes.is_empty() {
            None
        } else {
            if let Some(at) = attach::mount_tracefs_if_absent()? {
                on_notice(&Notice::MountedTracefs(at));
            }
            Some(Tracefs::detect()?)
        };
        let child = HeldChild::spawn(cmd)?;
        let mut s = Session {
            probes,
            opts,
            rings: Vec::new(),
            events: Vec::new(),
            defs: Vec::new(),
            ids: HashMap::new(),
            child,
            start_ns: 0,
        };
        // On error `s` is dropped: its events close, and the held child, never
        // released, exits without running the target.
        if let Some(tracefs) = &tracefs {
            s.attach(tracefs)?;
        }
        s.start_ns = ring::monotonic_ns();
        s.child.release()?;
        Ok(s)
    }

    fn attach(&mut self, tracefs: &Tracefs) -> Result<(), Error> {
        let pid = self.child.pid();
        // One definition per (site, entry or return), shared by every CPU's event.
        let mut defs: Vec<(usize, bool, usize)> = Vec::new();
        for (i, p) in self.probes.iter().enumerate() {
            let with_return = self.opts.latency && p.kind == ProbeKind::Function;
            for site in &p.sites {
                for ret in [false, true] {
                    if ret && !with_return {
                        continue;
                    }
                    defs.push((i, ret, self.defs.len()));
                    self.defs.push(tracefs.define(site, ret, &p.name)?);
                }
            }
        }
        if !self.opts.sampling() {
            let settings = EventSettings { inherit: true, enable_on_exec: true, sampling: None };
            for &(i, ret, d) in &defs {
                let ev = attach::open_trace_uprobe(
                    &self.defs[d],
                    Target::thread(pid),
                    settings,
                    &self.probes[i].name,
                )?;
                self.events.push(Attached { probe: i, ret, event: ev });
            }
            return Ok(());
        }
        let ring_bytes = self.opts.ring_pages * strobe_perf::ring::page_size();
        let settings = EventSettings {
            inherit: true,
            enable_on_exec: true,
            sampling: Some(Wakeup::Bytes((ring_bytes / 4) as u32)),
        };
        for cpu in attach::online_cpus()? {
            let first = self.events.len();
            for &(i, ret, d) in &defs {
                let target = Target { pid, cpu };
                let ev = attach::open_trace_uprobe(
                    &self.defs[d],
                    target,
                    settings,
                    &self.probes[i].name,
                )?;
                let id = ev
                    .id()
                    .map_err(|e| Error::Sys { what: "PERF_EVENT_IOC_ID".into(), source: e })?;
                self.ids.insert(id, (i, ret));
                if self.events.len() == first {
                    self.rings.push(RingBuffer::map(&ev, self.opts.ring_pages)?);
                } else {
                    ev.set_output(&self.events[first].event).map_err(|e| Error::Sys {
                        what: "PERF_EVENT_IOC_SET_OUTPUT".into(),
                        source: e,
                    })?;
                }
                self.events.push(Attached { probe: i, ret, event: ev });
            }
        }
        Ok(())
    }

    /// The target's pid.
    pub fn pid(&self) -> u32 {
        self.child.pid() as u32
    }

    /// The probes, in report order.
    pub fn probes(&self) -> &[ResolvedProbe] {
        &self.probes
    }

    /// Waits for the target to exit, then reports. With `trace`, hits are handed to
    /// `on_hits` as they are read, a batch per wakeup, in time order within the batch (and
    /// always in order per thread; see the module doc).
    pub fn run(&mut self, mut on_hits: impl FnMut(&[Hit<'_>])) -> Result<Report, Error> {
        let _guard = InterruptGuard::ignore();
        let layout = SampleLayout::new(attach::SAMPLE_TYPE);
        let mut matcher = Matcher::new(self.probes.len());
        let mut pending: Vec<Pending> = Vec::new();
        let mut status = None;
        let mut end_ns = self.start_ns;
        loop {
            let horizon = if status.is_some() { u64::MAX } else { ring::monotonic_ns() };
            for r in &mut self.rings {
                let ids = &self.ids;
                r.read(|rec| {
                    if let Record::Sample { body, .. } = rec {
                        let Some(s) = layout.parse(body) else { return };
                        let Some(&(probe, ret)) = s.event_id().and_then(|id| ids.get(&id)) else {
                            return;
                        };
                        pending.push(Pending {
                            time: s.time.unwrap_or(0),
                            pid: s.pid.unwrap_or(0),
                            tid: s.tid.unwrap_or(0),
                            probe,
                            ret,
                        });
                    }
                });
            }
            if !pending.is_empty() {
                pending.sort_by_key(|p| p.time);
                let ready = pending.partition_point(|p| p.time < horizon);
                let mut batch = Vec::new();
                for p in pending.drain(..ready) {
                    let kind = if p.ret {
                        HitKind::Return { duration_ns: matcher.ret(p.tid, p.probe, p.time) }
                    } else {
                        if self.opts.latency {
                            matcher.entry(p.tid, p.probe, p.time);
                        }
                        HitKind::Entry
                    };
                    if self.opts.trace {
                        batch.push(Hit {
                            probe: p.probe,
                            name: &self.probes[p.probe].name,
                            pid: p.pid,
                            tid: p.tid,
                            time_ns: p.time.saturating_sub(self.start_ns),
                            kind,
                        });
                    }
                }
                if !batch.is_empty() {
                    on_hits(&batch);
                }
            }
            if status.is_some() {
                break;
            }
            let mut fds: Vec<BorrowedFd<'_>> = vec![self.child.pidfd()];
            fds.extend(self.rings.iter().map(RingBuffer::fd));
            let timeout = self.opts.sampling().then_some(self.opts.flush);
            let ready = poll_readable(&fds, timeout)
                .map_err(|e| Error::Sys { what: "poll".into(), source: e })?;
            if ready[0] {
                end_ns = ring::monotonic_ns();
                status = Some(self.child.wait()?);
            }
        }
        let mut probes: Vec<ProbeReport> = self
            .probes
            .iter()
            .map(|p| ProbeReport {
                name: p.name.clone(),
                kind: p.kind,
                symbol: p.symbol.clone(),
                sites: p.sites.len(),
                hits: 0,
                latency: None,
            })
            .collect();
        for a in self.events.iter().filter(|a| !a.ret) {
            let n = a
                .event
                .read_count()
                .map_err(|e| Error::Sys { what: "reading a uprobe count".into(), source: e })?;
            probes[a.probe].hits += n;
        }
        if self.opts.latency {
            for (i, p) in probes.iter_mut().enumerate() {
                if p.kind == ProbeKind::Function {
                    p.latency = matcher.durations(i).and_then(|d| d.summary());
                }
            }
        }
        Ok(Report {
            probes,
            elapsed: Duration::from_nanos(end_ns.saturating_sub(self.start_ns)),
            exit: status.expect("the loop ends only after the target exits"),
            lost: self.rings.iter().map(RingBuffer::lost).sum(),
            unmatched_returns: matcher.unmatched_returns(),
            unmatched_entries: if self.opts.latency { matcher.unmatched_entries() } else { 0 },
        })
    }
}
