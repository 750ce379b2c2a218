//! Kernel mode: `strobe record` without injecting anything. The recorder opens the event
//! group on every CPU for the target (a launched command held before its exec, running
//! processes with `-p`, or every task with `-a`), with `inherit` so that every thread and
//! child the target makes is followed, and reads the kernel's per-CPU ring buffers itself
//! (crate strobe-perf's [`CpuRings`]). The kernel writes many records per wakeup: the
//! reader is woken past a watermark (`--wakeup`), never blocks the target (a full ring
//! drops records and says how many, which the file keeps), and drains every ring at least
//! every 100 ms.
//!
//! - [`decode`]: ring records into owned events (crate strobe-perfdata's decoder).
//! - [`order`]: the records of all rings back in time order (`perf record`'s rounds).
//! - [`writer`]: processes, threads, mappings, stacks, samples, off-CPU intervals and
//!   losses into the record file's chunks, one stream per process image.
//! - [`ksyms`]: the kernel functions hit, from `/proc/kallsyms`, where it is readable.
//!
//! The file is the same format an agent writes (header mode [`RecordMode::Kernel`], with
//! the reason), so one `strobe report` reads both.
//!
//! Owns: the kernel-mode session (its options, its end: the command's exit, the attached
//! processes' end, `--duration`, or a signal; the file complete in every case). Must
//! never run code in the target, block it, or print (it returns a [`Recorded`]).

pub(crate) mod decode;
pub(crate) mod ksyms;
pub(crate) mod order;
pub(crate) mod unwind;
pub(crate) mod writer;

use std::io::Write;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use strobe_format::{CallGraph as FileCallGraph, Header, PeriodSource, RecordMode};
use strobe_perf::percpu::{CpuRings, RingSampling, RingSetError, Scope};
use strobe_perf::ring::{poll_readable, Wakeup};
use strobe_perf::spec::{self, GroupSpec};
use strobe_perf::OpenError;
use strobe_protocol::CallGraph;
use strobe_target::launch::{Command, HeldChild};
use strobe_target::Exit;

use crate::{signals, Attach, RecordError, RecordOptions, Recorded, Sampling};
use decode::Decoder;
use order::Order;
use writer::{Known, Writer};

/// The period a time leader samples at when none is given: 1 ms of CPU time per sample
/// and thread (1000 samples per CPU-second). The overhead budget applies to agent mode.
pub const DEFAULT_PERIOD_NS: u64 = 1_000_000;
/// The period a hardware leader samples at when none is given (about 1 ms at 2 GHz).
pub const DEFAULT_HW_PERIOD: u64 = 2_000_000;
/// Bytes of ring buffer per CPU when `--buffer` is not given: `perf record`'s default
/// (what `kernel.perf_event_mlock_kb` lets an unprivileged user lock on every CPU).
pub const DEFAULT_RING_BYTES: u64 = 512 << 10;
/// Bytes of user stack each sample copies with `--call-graph dwarf` (perf's default).
const USER_STACK_BYTES: u32 = 8192;
/// The ring per CPU with `--call-graph dwarf` when `--buffer` is not given: each sample
/// is then over 8 KiB.
const DWARF_RING_BYTES: u64 = 4 << 20;
/// A sample's size in the ring, for turning `--wakeup N` samples into bytes: header,
/// six fixed fields, a group of three and a call chain of about 16 frames.
const EST_SAMPLE_BYTES: u64 = 240;
/// How long a pass waits for a ring's wakeup before draining anyway.
const IDLE_PASS: Duration = Duration::from_millis(100);
/// How long a pass waits when a ring is hung up (its task exited) and holds nothing.
const HUNG_UP_PASS: Duration = Duration::from_millis(20);

/// The group kernel mode samples: the user's, or the default one (`cpu-clock` leading
/// for the whole system, where no task owns the time).
fn group(opts: &RecordOptions, hardware: bool) -> Result<GroupSpec, RecordError> {
    let spec = match &opts.events {
        Some(e) => spec::parse(e, hardware)?,
        None if matches!(opts.attach, Attach::System) => {
            spec::parse("{cpu-clock,page-faults,context-switches}", hardware)?
        }
        None => spec::default_group(hardware),
    };
    spec.check_pmu(hardware)?;
    Ok(spec)
}

fn max_stack(max_depth: u32) -> u16 {
    let sysctl = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_stack")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(127);
    max_depth.min(sysctl).min(u32::from(u16::MAX)) as u16
}

/// Lets this process hold as many descriptors as its hard limit allows: every CPU of
/// every attached thread holds a descriptor per event.
fn raise_fd_limit() {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on our own limits with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// The real uid owning process `pid`.
fn owner_of(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
}

/// What `/proc` shows of process `pid` before the recording.
fn known_of(pid: u32) -> Option<Known> {
    let tids = strobe_target::tasks::threads_of(pid).ok()?;
    let maps = strobe_target::maps::read(Some(pid))
        .map(|text| {
            strobe_target::maps::parse(&text)
                .filter(|m| m.perms.exec)
                .map(|m| strobe_format::Mapping {
                    start: m.start,
                    end: m.end,
                    file_offset: m.offset,
                    path: m.path.into(),
                })
                .collect()
        })
        .unwrap_or_default();
    Some(Known {
        ppid: strobe_target::tasks::parent_of(pid).unwrap_or(0),
        exe: strobe_target::tasks::executable(pid).unwrap_or_default(),
        maps,
        names: tids
            .iter()
            .filter_map(|&t| Some((t, strobe_target::tasks::thread_name(pid, t)?)))
            .collect(),
    })
}

/// Why opening failed, said for an attach: another user's process is named as such.
fn attach_error(e: RingSetError, pids: &[u32]) -> RecordError {
    if let RingSetError::Open(
        OpenError::NeedsCapability { .. } | OpenError::Paranoid { .. } | OpenError::Rejected { .. },
    ) = &e
    {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if let Some(&pid) = pids.iter().find(|&&p| owner_of(p).is_some_and(|u| u != me)) {
            if !strobe_perf::pmu::perfmon_capable() {
                return RecordError::OtherUser { pid };
            }
        }
    }
    e.into()
}

/// Drains every ring into `order`; returns the records read.
fn drain(rings: &mut CpuRings, decoder: &mut Decoder, order: &mut Order) -> usize {
    let mut n = 0;
    for ring in rings.rings_mut() {
        n += ring.read(|rec| {
            if let Some(t) = decoder.decode(rec) {
                order.push(t);
            }
        });
    }
    n
}

/// A launched command the agent's session gives up on (no agent runs in it any more):
/// kernel mode follows it from then on, into the same file.
pub(crate) struct Adopted {
    /// The command, released and running.
    pub child: HeldChild,
    /// The signal forwarder that session started for it.
    pub forward: signals::Forwarder,
}

/// Records in kernel mode; `reason` says why (it goes in the header).
pub(crate) fn record(opts: &RecordOptions, reason: String) -> Result<Recorded, RecordError> {
    session(opts, reason, None)
}

/// Follows a running launched command from the kernel's side, appending to the agent
/// session's file, whose header then says kernel mode and `reason`.
pub(crate) fn adopt(
    opts: &RecordOptions,
    reason: String,
    adopted: Adopted,
) -> Result<Recorded, RecordError> {
    session(opts, reason, Some(adopted))
}

/// Threads of `pids` that have no events yet get them (threads a thread made before its
/// own events were open are not inherited): a few rounds, until no new one appears.
fn add_new_threads(
    rings: &mut CpuRings,
    pids: &[u32],
    tids: &mut Vec<libc::pid_t>,
) -> Result<(), RecordError> {
    for _ in 0..3 {
        let mut new = Vec::new();
        for &pid in pids {
            for t in strobe_target::tasks::threads_of(pid).unwrap_or_default() {
                if !tids.contains(&(t as libc::pid_t)) {
                    new.push(t as libc::pid_t);
                }
            }
        }
        if new.is_empty() {
            break;
        }
        for t in new {
            tids.push(t);
            match rings.add_thread(t) {
                Ok(()) | Err(RingSetError::Open(OpenError::NoSuchTask { .. })) => {}
                Err(e) => return Err(attach_error(e, pids)),
            }
        }
    }
    Ok(())
}

/// Opens `spec` on every thread of running processes `pids`, enabled.
fn attach_threads(
    spec: &GroupSpec,
    sampling: &RingSampling,
    pids: &[u32],
    pages: usize,
    known: &mut FxHashMap<u32, Known>,
) -> Result<CpuRings, RecordError> {
    let mut tids = Vec::new();
    for &pid in pids {
        let k = known_of(pid).ok_or(RecordError::NoProcess { pid })?;
        if strobe_target::tasks::process_of(pid) != Some(pid) {
            return Err(RecordError::Options(format!(
                "{pid} is a thread of process {}, not a process: give its process id",
                strobe_target::tasks::process_of(pid).unwrap_or(0)
            )));
        }
        tids.extend(k.names.iter().map(|(t, _)| *t as libc::pid_t));
        known.insert(pid, k);
    }
    let mut rings = CpuRings::open(spec, sampling, Scope::Threads(tids.clone()), pages)
        .map_err(|e| attach_error(e, pids))?;
    rings
        .enable()
        .map_err(|source| RecordError::Io { what: "enabling the perf events".into(), source })?;
    add_new_threads(&mut rings, pids, &mut tids)?;
    Ok(rings)
}

fn session(
    opts: &RecordOptions,
    reason: String,
    adopted: Option<Adopted>,
) -> Result<Recorded, RecordError> {
    let hardware = strobe_perf::pmu::hardware_pmu_available();
    let spec = group(opts, hardware)?;
    let leader = spec.leader().clone();
    let period = match spec.period {
        Some(p) => p,
        None if leader.is_time => DEFAULT_PERIOD_NS,
        None if leader.kind == strobe_perf::names::EventKind::Hardware => DEFAULT_HW_PERIOD,
        None => {
            return Err(RecordError::Options(format!(
                "kernel mode samples {} at a fixed period: give one, e.g. -e '{{{}/period=1000/}}'",
                leader.name, leader.name
            )))
        }
    };
    let window = spec.window.unwrap_or_else(|| spec.window_or_default());
    let kernel_allowed = strobe_perf::pmu::kernel_counting_allowed();
    let mut warnings = Vec::new();
    let callchain = opts.call_graph != CallGraph::None;
    // Frame pointers unless dwarf is asked for: a stack copy makes each sample 8 KiB
    // larger in the ring.
    let dwarf = opts.call_graph == CallGraph::Dwarf
        && opts.explicit_call_graph
        && strobe_perf::percpu::USER_STACK_REGS != 0;
    let ring_bytes =
        opts.ring_bytes.unwrap_or(if dwarf { DWARF_RING_BYTES } else { DEFAULT_RING_BYTES });
    let sample_bytes = EST_SAMPLE_BYTES + if dwarf { u64::from(USER_STACK_BYTES) } else { 0 };
    let page = strobe_perf::ring::page_size() as u64;
    let pages = {
        let p = (ring_bytes / page).max(1);
        1usize << (63 - p.leading_zeros())
    };
    let data_bytes = pages as u64 * page;
    let wakeup = if opts.wakeup <= 1 {
        Wakeup::Events(1)
    } else if opts.wakeup.saturating_mul(sample_bytes) < data_bytes / 2 {
        Wakeup::Events(u32::try_from(opts.wakeup).unwrap_or(u32::MAX))
    } else {
        Wakeup::Bytes(u32::try_from(data_bytes / 2).unwrap_or(u32::MAX))
    };
    let sampling = RingSampling {
        period,
        window,
        callchain,
        user_stack: if dwarf { USER_STACK_BYTES } else { 0 },
        max_stack: max_stack(opts.max_depth),
        kernel_allowed,
        wakeup,
        off_cpu: opts.off_cpu,
    };
    raise_fd_limit();

    // The target and its events.
    let mut known: FxHashMap<u32, Known> = FxHashMap::default();
    let mut child: Option<HeldChild> = None;
    let mut attached: Vec<u32> = Vec::new();
    let mut forward = None;
    let mut rings = match (&opts.attach, adopted) {
        (_, Some(a)) => {
            let pid = a.child.pid() as u32;
            forward = Some(a.forward);
            child = Some(a.child);
            attached = vec![pid];
            attach_threads(&spec, &sampling, &[pid], pages, &mut known)?
        }
        (Attach::Launch, None) => {
            let (program, args) = opts
                .command
                .split_first()
                .ok_or_else(|| RecordError::Options("no command to record".into()))?;
            let cmd = Command::new(program.clone(), args.iter().cloned());
            let held = HeldChild::spawn(&cmd)?;
            let rings = CpuRings::open(&spec, &sampling, Scope::Launched(held.pid()), pages)?;
            child = Some(held);
            rings
        }
        (Attach::Processes(pids), None) => {
            attached = pids.clone();
            attach_threads(&spec, &sampling, pids, pages, &mut known)?
        }
        (Attach::System, None) => {
            let mut rings = CpuRings::open(&spec, &sampling, Scope::System, pages)?;
            for pid in strobe_target::tasks::all_pids().unwrap_or_default() {
                if let Some(k) = known_of(pid) {
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
    // An adopted command was released long ago: it is followed like an attached
    // process, and reaped as a launched one.
    let adopting = forward.is_some();
    let group_read = rings.group_read();
    let hf_window = rings.hf_window();
    let mut events = crate::event_descs(&spec, kernel_allowed);
    if !group_read && spec.events.len() > 1 {
        events.truncate(1);
        warnings.push(format!(
            "this kernel does not read a group with each sample of an inherited event (Linux \
             6.12 does): only {} was recorded",
            leader.name
        ));
    }
    let reason_line = reason.clone();
    let mode_reason = match hf_window {
        Some(w) => format!("{reason}; the kernel alternates the period with a {w} window"),
        None if window > 0 => format!(
            "{reason}; no windows (this kernel has no hf_sample_period): per-function window \
             metrics need agent mode or a kernel with it, interval metrics span whole periods"
        ),
        None => reason,
    };

    // The file: preamble and header (an adopted command's file has them: its header is
    // rewritten at the end).
    let out_err = |source| RecordError::Output { path: opts.output.clone(), source };
    let mut file = if adopting {
        std::fs::OpenOptions::new().append(true).open(&opts.output).map_err(out_err)?
    } else {
        std::fs::File::create(&opts.output).map_err(out_err)?
    };
    let command: Vec<String> = match &opts.attach {
        Attach::Launch => opts.command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        Attach::Processes(pids) => {
            let list: Vec<String> = pids.iter().map(u32::to_string).collect();
            vec!["-p".into(), list.join(",")]
        }
        Attach::System => vec!["-a".into()],
    };
    let header = Header {
        minor_version: strobe_format::MINOR_VERSION,
        strobe_version: env!("CARGO_PKG_VERSION").to_string(),
        start_unix_ns: crate::clock_ns(libc::CLOCK_REALTIME),
        start_mono_ns: crate::clock_ns(libc::CLOCK_MONOTONIC),
        command,
        events,
        period: Some(period),
        window: Some(hf_window.unwrap_or(0)),
        jitter: Some(0),
        wakeup: opts.wakeup,
        buffer_bytes: data_bytes,
        overhead_ppm: opts.overhead_ppm,
        follow_fork: true,
        mode: RecordMode::Kernel,
        mode_reason: mode_reason.clone(),
        call_graph: match (callchain, dwarf) {
            (false, _) => FileCallGraph::None,
            (true, false) => FileCallGraph::Fp,
            (true, true) => FileCallGraph::Dwarf,
        },
        max_depth: u32::from(sampling.max_stack),
    };
    if !adopting {
        let mut enc = strobe_format::Encoder::new();
        enc.preamble();
        enc.header(&header);
        if let Some(image) = crate::own_vdso() {
            enc.image(strobe_format::RECORDER_STREAM, &image);
        }
        file.write_all(enc.as_bytes()).map_err(out_err)?;
    }

    let ncounters = if group_read { spec.events.len() } else { 1 };
    let mut writer = Writer::new(
        &mut file,
        writer::Sampling {
            period,
            period_source: if spec.period.is_some() {
                PeriodSource::Explicit
            } else {
                PeriodSource::Budget
            },
            hf_window,
            group_read,
            ncounters,
            user_walk_depth: if dwarf { opts.max_depth as usize } else { 0 },
        },
        known,
        child.as_ref().map(|c| c.pid() as u32),
        kernel_allowed,
        // Streams beside an agent's: high ids (agents pick theirs at random).
        if adopting { 0x8000_0000 } else { 1 },
    );
    writer.preload_kernel_symbols();
    let mut decoder = Decoder::new(&rings, rings.roles(), opts.max_depth as usize);
    let mut order = Order::default();

    let forward = match (forward, &child) {
        (Some(f), _) => f,
        (None, Some(c)) => signals::Forwarder::start(c.pid()),
        (None, None) => signals::Forwarder::watch(),
    };
    if let (Some(c), false) = (child.as_mut(), adopting) {
        if let Err(e) = c.release() {
            forward.stop();
            return Err(e.into());
        }
    }
    let deadline = opts.duration.map(|d| Instant::now() + d);
    let mut wakeups = 0u64;
    let mut exit = None;
    let mut cpu_ns = None;
    let mut write_failed = false;
    loop {
        let timeout = deadline
            .map_or(IDLE_PASS, |d| d.saturating_duration_since(Instant::now()))
            .min(IDLE_PASS);
        let ready = poll_readable(&rings.ring_fds(), Some(timeout)).unwrap_or_default();
        // A ring is readable past its watermark, or hung up (its task is gone and so is
        // every copy of its events): only the first is a wakeup; the second would make
        // poll return at once until the recording ends, so wait instead.
        let pending: Vec<bool> = rings.rings_mut().map(|r| r.pending_bytes() > 0).collect();
        let woken = ready.iter().zip(&pending).filter(|(&r, &p)| r && p).count();
        wakeups += woken as u64;
        if woken == 0 && ready.iter().any(|&r| r) {
            std::thread::sleep(timeout.min(HUNG_UP_PASS));
        }
        drain(&mut rings, &mut decoder, &mut order);
        writer.apply(order.end_round());
        if let Err(e) = writer.flush() {
            warnings.push(format!(
                "writing {} failed: {e}; the recording is incomplete",
                opts.output.display()
            ));
            write_failed = true;
            break;
        }
        if let Some(c) = child.as_mut() {
            if signals::exited(c) {
                // A zombie still shows its threads' CPU time: read it before reaping.
                cpu_ns = crate::procs::process_cpu_ns(c.pid() as u32);
                exit = Some(c.wait()?);
                break;
            }
            continue;
        }
        if forward.interrupted() || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        if !attached.is_empty() && attached.iter().all(|&p| crate::procs::pid_dead(p)) {
            break;
        }
    }
    rings.disable();
    drain(&mut rings, &mut decoder, &mut order);
    writer.apply(order.finish());
    forward.stop();
    let launched_pid = child.as_ref().map(|c| c.pid() as u32);
    let exit = exit.unwrap_or(Exit::Code(0));
    let processes = writer.processes();
    let off_cpu_intervals = writer.off_cpu_intervals;
    let ksyms_readable = writer.kernel_symbols_readable();
    let writer_saw_kernel = writer.kernel_addresses_seen();
    let totals = if write_failed {
        crate::drain::Totals::default()
    } else {
        writer.finish(launched_pid.map(|p| (p, exit, cpu_ns)), wakeups).map_err(out_err)?
    };
    if totals.lost > 0 {
        warnings.push(format!(
            "the kernel dropped {} samples: its ring buffers filled faster than strobe read \
             them (a larger --buffer, a smaller --wakeup or a longer period keeps them)",
            totals.lost
        ));
    }
    if decoder.malformed > 0 || decoder.unknown_id > 0 {
        warnings.push(format!(
            "{} records from the kernel did not decode and {} samples named no event of \
             this recording; they were skipped",
            decoder.malformed, decoder.unknown_id
        ));
    }
    if !kernel_allowed {
        warnings.push(format!(
            "user space only: kernel.perf_event_paranoid is {}, and kernel functions and \
             frames need 1 or lower (or CAP_PERFMON)",
            strobe_perf::pmu::paranoid_level().unwrap_or(-1)
        ));
    } else if !ksyms_readable && writer_saw_kernel {
        warnings.push(
            "/proc/kallsyms hides the kernel's addresses (kernel.kptr_restrict): kernel \
             samples are reported unnamed"
                .into(),
        );
    }
    if opts.off_cpu && off_cpu_intervals == 0 {
        warnings.push("no off-CPU interval was recorded (no thread blocked)".into());
    }
    if adopting && !write_failed {
        // The header the agent's session wrote said agent mode: say what happened.
        let mut h = header;
        if let Ok(r) = strobe_format::Reader::open(&opts.output) {
            let old = r.header();
            h.start_unix_ns = old.start_unix_ns;
            h.start_mono_ns = old.start_mono_ns;
        }
        strobe_format::rewrite_header(&opts.output, &h).map_err(|e| RecordError::Output {
            path: opts.output.clone(),
            source: std::io::Error::other(e.to_string()),
        })?;
        warnings.insert(0, format!("kernel mode from here on: {reason_line}"));
    }
    let bytes = std::fs::metadata(&opts.output).map(|m| m.len()).unwrap_or(0);
    Ok(Recorded {
        exit,
        totals,
        processes,
        bytes,
        calibration: Err("kernel mode runs nothing in the target".into()),
        sampling: Some(Sampling { period, window: hf_window.unwrap_or(0), jitter: 0 }),
        notes: Vec::new(),
        warnings,
        leader_is_time: leader.is_time,
        mode: RecordMode::Kernel,
        mode_reason,
        off_cpu_intervals,
    })
}
