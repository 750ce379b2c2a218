//! The recording session, in named phases: the agent's preparation (calibration, the
//! configuration the agents read, the floor's period), the target's start (the arena,
//! the held child, the floor's events, the file's header, the release), the loop that
//! drains the agents' arena and the floor's rings into the file until the target ends
//! (or `--duration` passes, or a signal comes), retiring each process that ended as
//! soon as both samplers are done with it, and the end (the END and threads' CPU times
//! of every stream still followed, the warnings).
//!
//! Agent mode runs both samplers: the agent where it serves a thread, the kernel floor
//! for every other task of the tree and every moment the agent did not serve (see
//! `served`). Kernel mode runs the floor alone.
//!
//! Owns: the order of those phases and what each hands the next. Must never print, or
//! leave the target held, unreaped or without its signals passed on.

use std::fs::File;
use std::io::Write;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;
use strobe_format::{Baseline, BaselineCounter, CallGraph as FileCallGraph, Header};
use strobe_protocol::budget::{self, Budget};
use strobe_protocol::{env, Arena, ArenaSizes, Calibration, CallGraph, RecordConfig};
use strobe_target::launch::HeldChild;
use strobe_target::Exit;

use crate::drain::{Drainer, Launched, Totals};
use crate::floor::{Floor, FloorConfig, Target};
use crate::plan::Plan;
use crate::served::Served;
use crate::{signals, Attach, RecordError, RecordOptions, Recorded, Sampling};

/// How long a pass waits for a wakeup when the agent runs (its blocks are drained at
/// least this often) and when only the floor does.
const AGENT_PASS: Duration = Duration::from_millis(20);
const FLOOR_PASS: Duration = Duration::from_millis(100);

/// Beside the agent, the kernel floor samples this many times per agent cycle and keeps
/// one sample in this many of each thread (from a random first): a thread only the floor
/// samples then gets its fair share of samples give or take a quarter cycle, where a
/// counter starting at a full cycle would leave up to a whole cycle of every thread
/// unsampled (the kernel starts each inherited counter at a full period). The kernel's
/// samples cost about a microsecond each beside the agent's tens.
const FLOOR_THIN: u32 = 4;

/// What the agent's preparation gives the rest of the session.
struct AgentPrep {
    config: RecordConfig,
    calibration: Result<Calibration, String>,
    /// The periods the agents will choose (the same inputs give the same choice).
    period: u64,
    jitter: u64,
    window: u64,
    explicit: bool,
    /// The agents' mean cycle in ns: the floor samples at it.
    cycle_ns: u64,
}

/// The delay between an overflow in user code and the handler's read, which a window's
/// tail is measured against: the calibration's mean. 0 (tails off) when not measured.
fn tail_dead(b: &strobe_protocol::Baseline) -> u64 {
    measured_mean(b, b.tail.first().map(|t| t.mean))
}

/// What the leader counts in every window that is not the target's, from the calibration
/// (the baseline the report subtracts): 0 when there is none or it is no measurement.
fn window_dead(b: &strobe_protocol::Baseline) -> u64 {
    measured_mean(b, b.counters.first().map(|c| c.mean))
}

/// A calibrated leader mean in ns when it is a measurement (windows, finite, positive,
/// within the window asked for); 0 otherwise.
fn measured_mean(b: &strobe_protocol::Baseline, mean: Option<f64>) -> u64 {
    match mean {
        Some(m) if b.windows && m.is_finite() && m > 0.0 && m <= b.requested as f64 => {
            m.round() as u64
        }
        _ => 0,
    }
}

/// What the leader counts per sampling cycle beyond the long period and the window, from
/// the calibration: each measured interval's excess over the one asked for (the window's
/// overshoot and the handler's counted time), and with windows the delays from each
/// overflow to its handler's read (during which the leader runs on).
fn cycle_extra(b: &strobe_protocol::Baseline) -> u64 {
    let Some(lead) = b.counters.first() else { return 0 };
    let measured = b.work_ns + lead.mean;
    let excess = (measured - b.requested as f64).max(0.0);
    let delay = if b.windows {
        b.tail.first().map_or(0.0, |t| t.mean) + b.end.first().map_or(0.0, |t| t.mean)
    } else {
        0.0
    };
    let extra = excess + delay;
    // More than the calibration's own period is no measurement (a wrapped counter
    // difference once made it 9e16 ns, and the floor's period with it).
    if extra.is_finite() && extra <= b.requested as f64 {
        extra.round() as u64
    } else {
        0
    }
}

/// Phase 1 (agent mode): the calibration in a process of its own, and the configuration
/// every agent of the recording reads.
fn prepare_agent(opts: &RecordOptions, plan: &Plan) -> AgentPrep {
    let spec = &plan.spec;
    let config = RecordConfig {
        output: std::path::absolute(&opts.output).unwrap_or(opts.output.clone()).into_os_string(),
        events: spec.to_spec_string(),
        hardware: plan.hardware,
        kernel: plan.kernel_allowed,
        overhead_ppm: opts.overhead_ppm,
        follow_fork: true,
        call_graph: opts.call_graph,
        max_depth: opts.max_depth,
        costs: None,
        calibrate: false,
        tail_dead: 0,
        cycle_extra: 0,
        lateness: 0,
        window_dead: 0,
        seccomp_filters: strobe_protocol::status::Status::of_this_thread().seccomp.filters,
        pid_ns: strobe_protocol::status::pid_namespace(),
    };
    let calibration = crate::calibrate::run(&opts.calibration_command, &opts.agent, &config);
    let baseline = calibration.as_ref().ok().and_then(|c| c.baseline.as_ref());
    let costs = calibration.as_ref().ok().and_then(|c| c.costs);
    let config = RecordConfig {
        costs,
        tail_dead: baseline.map_or(0, tail_dead),
        cycle_extra: baseline.map_or(0, cycle_extra),
        lateness: calibration.as_ref().map_or(0, |c| c.lateness.max(0.0).round() as u64),
        window_dead: baseline.map_or(0, window_dead),
        ..config
    };
    let window = spec.window_or_default();
    let leader_is_time = spec.leader().is_time;
    let choice = budget::choose(&Budget {
        period: spec.period,
        jitter: spec.jitter,
        window,
        leader_is_time,
        costs,
        overhead_ppm: opts.overhead_ppm,
    });
    let per_ns =
        if leader_is_time { 1.0 } else { costs.map_or(1.0, |c| c.leader_per_ns).max(1e-3) };
    let cycle = budget::mean_cycle(choice.period, choice.jitter, window, config.cycle_extra);
    AgentPrep {
        config,
        calibration,
        period: choice.period,
        jitter: choice.jitter,
        window,
        explicit: choice.explicit,
        cycle_ns: (cycle / per_ns).round().max(1.0) as u64,
    }
}

/// The shortest interval between two of the floor's kernel samples of a thread beside
/// the agent.
const MIN_FLOOR_SAMPLE_NS: u64 = 100_000;

/// The floor's configuration: beside an agent, the leader alone (time samples) at the
/// agents' mean cycle; alone, the whole group at kernel mode's period.
fn floor_config(opts: &RecordOptions, plan: &Plan, agent: Option<&AgentPrep>) -> FloorConfig {
    let (spec, period, explicit, window) = match agent {
        Some(a) => {
            // CPU time, whatever the agent's leader, counted by cpu-clock, not task-clock:
            // a second task-clock event sampling the same task moved the agent's window
            // metrics (the workload's faults per ms read 1.31-1.35x its truth with a
            // task-clock floor, 1.06-1.09x with a cpu-clock one or none, same binary).
            let spec = strobe_perf::spec::parse("{cpu-clock}", plan.hardware)
                .unwrap_or_else(|_| plan.spec.clone());
            (spec, a.cycle_ns.max(MIN_FLOOR_SAMPLE_NS), a.explicit, 0)
        }
        None => (
            plan.spec.clone(),
            plan.kernel_period.unwrap_or(crate::plan::KERNEL_PERIOD_NS),
            plan.spec.period.is_some(),
            plan.spec.window.unwrap_or_else(|| plan.spec.window_or_default()),
        ),
    };
    FloorConfig {
        spec,
        period,
        explicit,
        window,
        callchain: plan.floor_callchain,
        dwarf: plan.floor_dwarf,
        max_depth: opts.max_depth,
        kernel_allowed: plan.kernel_allowed,
        ring_bytes: plan.ring_bytes,
        wakeup: opts.wakeup,
        off_cpu: opts.off_cpu,
        beside_agent: agent.is_some(),
        // Never a kernel sample more often than every MIN_FLOOR_SAMPLE_NS: beside an agent
        // sampling every 100 us (short-only mode), a floor four times denser was a timer
        // every 25 us in every thread.
        thin: match agent {
            Some(a) => (a.cycle_ns / MIN_FLOOR_SAMPLE_NS).clamp(1, u64::from(FLOOR_THIN)) as u32,
            None => 1,
        },
    }
}

/// The header: the mode and why, the group, the sampling parameters.
fn header(opts: &RecordOptions, plan: &Plan, floor: &Floor, agent: Option<&AgentPrep>) -> Header {
    let spec = &plan.spec;
    let mut events = crate::event_descs(spec, plan.kernel_allowed);
    let mut reason = plan.reason.clone();
    let (period, window, jitter) = match agent {
        Some(_) => (spec.period, spec.window, spec.jitter),
        None => {
            if !floor.group_read && spec.events.len() > 1 {
                events.truncate(1);
            }
            match floor.hf_window {
                Some(w) => reason
                    .push_str(&format!("; the kernel alternates the period with a {w} window")),
                None if spec.window_or_default() > 0 && spec.window != Some(0) => reason.push_str(
                    "; no windows (this kernel has no hf_sample_period): per-function window \
                     metrics need agent mode or a kernel with it, interval metrics span whole \
                     periods",
                ),
                None => {}
            }
            (plan.kernel_period, Some(floor.hf_window.unwrap_or(0)), Some(0))
        }
    };
    let dwarf = plan.floor_dwarf || (agent.is_some() && opts.call_graph == CallGraph::Dwarf);
    Header {
        minor_version: strobe_format::MINOR_VERSION,
        strobe_version: env!("CARGO_PKG_VERSION").to_string(),
        start_unix_ns: crate::clock_ns(libc::CLOCK_REALTIME),
        start_mono_ns: crate::clock_ns(libc::CLOCK_MONOTONIC),
        command: crate::plan::header_command(opts),
        events,
        period,
        window,
        jitter,
        wakeup: opts.wakeup,
        buffer_bytes: if agent.is_some() { opts.buffer_bytes } else { floor.ring_bytes },
        overhead_ppm: opts.overhead_ppm,
        follow_fork: true,
        mode: plan.mode,
        mode_reason: reason,
        call_graph: match (opts.call_graph, dwarf) {
            (CallGraph::None, _) => FileCallGraph::None,
            (_, true) => FileCallGraph::Dwarf,
            (_, false) => FileCallGraph::Fp,
        },
        max_depth: opts.max_depth,
    }
}

/// Writes the preamble, the header, the baseline and the vDSO's bytes.
fn write_start(file: &mut File, header: &Header, agent: Option<&AgentPrep>) -> std::io::Result<()> {
    let mut enc = strobe_format::Encoder::new();
    enc.preamble();
    enc.header(header);
    if let Some(b) =
        agent.and_then(|a| a.calibration.as_ref().ok()).and_then(|c| c.baseline.as_ref())
    {
        let list = |v: &[strobe_protocol::calibration::CounterBaseline]| -> Vec<BaselineCounter> {
            v.iter().map(|c| BaselineCounter { mean: c.mean, sd: c.sd }).collect()
        };
        enc.baseline(&Baseline {
            windows: b.windows,
            requested: b.requested,
            intervals: b.intervals,
            work_ns: b.work_ns,
            counters: list(&b.counters),
            tail: list(&b.tail),
            end: list(&b.end),
            uncounted: b.uncounted,
        });
    }
    // The vDSO has no file: save its bytes so report can name the functions in it
    // (clock_gettime, gettimeofday). The target maps the same image as we do.
    if let Some(image) = crate::own_vdso() {
        enc.image(strobe_format::RECORDER_STREAM, &image);
    }
    file.write_all(enc.as_bytes())
}

/// Everything the loop and the end work on.
struct Live<'a> {
    opts: &'a RecordOptions,
    plan: &'a Plan,
    floor: Floor,
    drainer: Option<Drainer<'a>>,
    arena: Option<&'a Arena>,
    agent: Option<AgentPrep>,
    child: Option<HeldChild>,
    forward: signals::Forwarder,
    /// Attached processes (`-p`).
    attached: Vec<u32>,
    warnings: Vec<String>,
    write_failed: bool,
    exit: Option<Exit>,
    /// Exact CPU time of threads still alive when the target ended (from /proc, read
    /// before the launched command was reaped), per (pid, tid).
    alive_cpu: FxHashMap<(u32, u32), u64>,
    /// The launched command's own CPU time, all its threads (its process clock, read
    /// before it was reaped).
    launched_cpu: Option<u64>,
    /// The launched command's tree's CPU time, from its `wait4` rusage.
    tree_cpu_ns: Option<u64>,
}

/// Records in the session the plan describes.
pub(crate) fn run(opts: &RecordOptions, plan: &Plan) -> Result<Recorded, RecordError> {
    // Signals are taken from here on: one that comes while the session starts up (a
    // Ctrl-C during the calibration, or before an attach is complete) ends the recording
    // with a complete file instead of killing strobe.
    let forward = signals::Forwarder::watch();
    let agent = plan.agent().then(|| prepare_agent(opts, plan));
    let fcfg = floor_config(opts, plan, agent.as_ref());
    let out_err = |source| RecordError::Output { path: opts.output.clone(), source };
    let mut file = std::fs::File::create(&opts.output).map_err(out_err)?;
    // Appending: the agents append their own chunks to the same file (O_APPEND keeps every
    // writer's chunks whole and in place), and so does the floor's writer.
    let append = || std::fs::OpenOptions::new().append(true).open(&opts.output).map_err(out_err);
    let arena = match &agent {
        Some(a) => {
            let block_bytes = if opts.call_graph == CallGraph::None { 4096 } else { 8192 };
            let sizes = ArenaSizes::for_pool(opts.buffer_bytes, block_bytes, opts.wakeup);
            Some(Arena::create(sizes, &a.config)?)
        }
        None => None,
    };
    let (floor, child, attached) = match &opts.attach {
        Attach::Launch => {
            let mut cmd = crate::plan::command_of(opts)?;
            if let Some(ar) = &arena {
                let path = ar.child_path().ok_or(RecordError::ArenaPath)?;
                cmd.env.push((
                    env::LD_PRELOAD.into(),
                    env::preload_with(
                        opts.agent.as_os_str(),
                        std::env::var_os(env::LD_PRELOAD).as_deref(),
                    ),
                ));
                cmd.env.push((env::ARENA.into(), path.into_os_string()));
                cmd.env.push((env::AGENT_PID.into(), std::ffi::OsString::new()));
            }
            let held = HeldChild::spawn(&cmd)?;
            let pid = held.pid();
            forward.set_child(pid);
            let floor = Floor::open(&fcfg, Target::Launched(pid), append()?, Some(pid as u32))?;
            (floor, Some(held), Vec::new())
        }
        Attach::Processes(pids) => {
            (Floor::open(&fcfg, Target::Processes(pids), append()?, None)?, None, pids.clone())
        }
        Attach::System => (Floor::open(&fcfg, Target::System, append()?, None)?, None, Vec::new()),
    };
    // The recorder drains what the target's threads fill: a target that keeps every CPU
    // busy with many threads would otherwise leave it a thread's share of the machine and
    // overflow the rings. Where allowed (root, CAP_SYS_NICE) its thread runs a little
    // ahead of the target's; the target, forked already, keeps its own priority.
    // SAFETY: setpriority on the calling thread; a refusal changes nothing.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -5) };
    let h = header(opts, plan, &floor, agent.as_ref());
    write_start(&mut file, &h, agent.as_ref()).map_err(out_err)?;
    drop(file);
    let mut floor = floor;
    floor.preload_kernel_symbols();
    if let Some(exe) = &plan.program {
        floor.writer().set_launched_exe(exe.clone());
    }
    let mut agent_file = append()?;
    run_with(opts, plan, floor, agent, arena.as_ref(), child, attached, forward, &mut agent_file)
}

#[allow(clippy::too_many_arguments)]
fn run_with(
    opts: &RecordOptions,
    plan: &Plan,
    floor: Floor,
    agent: Option<AgentPrep>,
    arena: Option<&Arena>,
    mut child: Option<HeldChild>,
    attached: Vec<u32>,
    forward: signals::Forwarder,
    agent_file: &mut File,
) -> Result<Recorded, RecordError> {
    let ncounters = plan.spec.events.len();
    let mut drainer = arena.map(|ar| Drainer::new(ar, agent_file, ncounters));
    if let (Some(d), Some(c)) = (drainer.as_mut(), child.as_ref()) {
        d.set_launched(c.pid() as u32);
    }
    if let Some(c) = child.as_mut() {
        c.release()?;
    }
    let mut live = Live {
        opts,
        plan,
        floor,
        drainer,
        arena,
        agent,
        child,
        forward,
        attached,
        warnings: Vec::new(),
        write_failed: false,
        exit: None,
        alive_cpu: FxHashMap::default(),
        launched_cpu: None,
        tree_cpu_ns: None,
    };
    live.run_loop()?;
    live.finish()
}

impl Live<'_> {
    /// Phase 3: drains until the target ends, `--duration` passes or a signal comes.
    fn run_loop(&mut self) -> Result<(), RecordError> {
        let deadline = self.opts.duration.map(|d| Instant::now() + d);
        let pass = if self.drainer.is_some() { AGENT_PASS } else { FLOOR_PASS };
        loop {
            let timeout =
                deadline.map_or(pass, |d| d.saturating_duration_since(Instant::now())).min(pass);
            // Woken by an agent (its blocks filled) or by a ring past its watermark: the
            // agents' wakeup is waited on, the rings' polled (they are read every pass).
            match self.drainer.as_mut() {
                Some(d) => {
                    d.wait(timeout);
                    self.floor.wait(Duration::ZERO);
                }
                None => self.floor.wait(timeout),
            }
            if !self.pass() {
                break;
            }
            if let Some(pid) = self.child.as_ref().filter(|c| signals::exited(c)).map(|c| c.pid()) {
                // A zombie still shows its threads' CPU time, and its process clock its
                // whole life's (threads that ended included): read them before reaping.
                let pid = pid as u32;
                self.alive_cpu = alive_threads_cpu(&self.floor_pids(pid));
                self.launched_cpu = strobe_target::tasks::process_cpu_ns(pid);
                if let Some(c) = self.child.as_mut() {
                    let (status, tree) = c.wait_with_cpu()?;
                    self.exit = Some(Exit::from_status(status));
                    self.tree_cpu_ns = Some(tree);
                }
                if let Some(d) = self.drainer.as_mut() {
                    d.reaped(pid);
                }
                break;
            }
            if self.child.is_some() {
                continue;
            }
            if self.forward.interrupted() || deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            if !self.attached.is_empty() && self.attached.iter().all(|&p| crate::procs::pid_dead(p))
            {
                break;
            }
        }
        Ok(())
    }

    /// The pids of the recording (the floor's, and `pid`).
    fn floor_pids(&mut self, pid: u32) -> Vec<u32> {
        let mut pids = self.floor.writer().pids();
        if !pids.contains(&pid) {
            pids.push(pid);
        }
        pids
    }

    /// One pass: the floor's rings read, the agents' arena drained (which updates what
    /// the agent served), then the floor's records released against that. `false` when
    /// writing the file failed (the recording stops, incomplete, with a warning).
    fn pass(&mut self) -> bool {
        self.floor.drain();
        let empty = Served::default();
        let ok = match self.drainer.as_mut() {
            Some(d) => d.pass().map(|_| ()),
            None => Ok(()),
        };
        let served = self.drainer.as_ref().map_or(&empty, |d| d.served());
        let ok = ok.and_then(|_| self.floor.release(served));
        if let Some(d) = self.drainer.as_mut().filter(|_| self.floor.writer().awaiting() > 0) {
            // Processes the floor let go of whose agent instances all ended: their images
            // and threads retire now, not at the end, so a program that starts processes
            // without end does not grow the recorder.
            let (wakeups, before) = (self.floor.wakeups, self.floor.writer().applied_to());
            let held = d.held_pids();
            self.floor.writer().retire_beside_agent(
                &held,
                |pid| d.take_served_of(pid, before),
                wakeups,
            );
        }
        if let Err(e) = ok {
            self.warnings.push(format!(
                "writing {} failed: {e}; the recording is incomplete",
                self.opts.output.display()
            ));
            self.write_failed = true;
            return false;
        }
        true
    }

    /// Phase 4: the last reads, every stream's END, every thread's CPU time.
    fn finish(mut self) -> Result<Recorded, RecordError> {
        let launched = self.child.as_ref().map(|c| c.pid() as u32);
        let exit = self.exit.unwrap_or(Exit::Code(0));
        let out_err = |source| RecordError::Output { path: self.opts.output.clone(), source };
        let end_of = launched.map(|pid| Launched {
            pid,
            exit,
            cpu_ns: self.launched_cpu,
            tree_cpu_ns: self.tree_cpu_ns,
        });
        let mut agent_totals = Totals::default();
        if let Some(d) = self.drainer.as_mut() {
            agent_totals = d.finish(end_of).map_err(out_err)?;
        }
        let empty = Served::default();
        let served = self.drainer.as_ref().map_or(&empty, |d| d.served());
        if let Err(e) = self.floor.stop(served) {
            self.warnings.push(format!("writing {} failed: {e}", self.opts.output.display()));
            self.write_failed = true;
        }
        let pids = self.floor.writer().pids();
        let survivors: Vec<u32> = match launched {
            Some(l) => {
                pids.iter().copied().filter(|&p| p != l && !crate::procs::pid_dead(p)).collect()
            }
            None => Vec::new(),
        };
        if self.exit.is_none() {
            // -p, -a: threads still running at the end.
            self.alive_cpu = alive_threads_cpu(&pids);
        } else {
            // Processes of the tree that outlived the command (daemons).
            for (k, v) in alive_threads_cpu(&survivors) {
                self.alive_cpu.entry(k).or_insert(v);
            }
        }
        self.write_thread_cpu();
        let sampling = self.sampling();
        let Live {
            floor,
            drainer,
            arena,
            agent,
            forward,
            mut warnings,
            write_failed,
            opts,
            plan,
            ..
        } = self;
        forward.stop();
        let (malformed, unknown) = floor.decode_errors();
        let wakeups = floor.wakeups;
        let ksyms = (floor.kernel_symbols_readable(), floor.kernel_addresses_seen());
        let off_cpu_intervals = floor.off_cpu_intervals();
        let served_dropped = floor.served_dropped();
        warnings.extend(floor.exit_counts_warning());
        let processes_floor = floor.processes();
        let floor_totals = if write_failed {
            Totals::default()
        } else {
            floor.into_writer().finish(end_of, wakeups).map_err(out_err)?
        };
        if !survivors.is_empty() {
            warnings.push(format!(
                "{} process{} of the tree outlived the command and kept running (pid{} {}):                  recorded until the command ended",
                survivors.len(),
                if survivors.len() == 1 { "" } else { "es" },
                if survivors.len() == 1 { "" } else { "s" },
                survivors.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
            ));
        }
        let facts = crate::outcome::Facts {
            exit,
            agent_totals,
            floor_totals,
            floor_wakeups: wakeups,
            decode_errors: (malformed, unknown),
            kernel_symbols: ksyms,
            off_cpu_intervals,
            served_dropped,
            processes: processes_floor,
            agent_processes: drainer.as_ref().map_or(0, |d| d.procs().len()),
            calibration: agent.map(|a| a.calibration),
            sampling,
            warnings,
        };
        Ok(crate::outcome::recorded(opts, plan, arena, facts))
    }

    /// Each thread's CPU time as the kernel counted it, what the agent served of it and
    /// what its set-up cost, into THREADCPU chunks of the floor's streams (in kernel mode
    /// a process that ended had its threads' written with its END already).
    fn write_thread_cpu(&mut self) {
        // Per pid, tid -> ns. A thread that ended has its kernel count; one read from
        // /proc before it ended is replaced by it.
        let mut counts: FxHashMap<u32, FxHashMap<u32, u64>> = FxHashMap::default();
        let ended = self.floor.writer().task_counts();
        for (&(pid, tid), &ns) in self.alive_cpu.iter().chain(ended) {
            counts.entry(pid).or_default().insert(tid, ns);
        }
        let mut served = self.drainer.as_ref().map(|d| d.served_cpu().clone()).unwrap_or_default();
        let mut pids: Vec<u32> = counts.keys().chain(served.keys()).copied().collect();
        pids.sort_unstable();
        pids.dedup();
        for pid in pids {
            let rows = crate::drain::thread_cpu_rows(
                counts.remove(&pid).unwrap_or_default(),
                served.remove(&pid).unwrap_or_default(),
            );
            self.floor.writer().thread_cpu(pid, &rows);
        }
    }
}

/// The CPU time of every live thread of `pids`, from /proc (exact, ns).
fn alive_threads_cpu(pids: &[u32]) -> FxHashMap<(u32, u32), u64> {
    let mut out = FxHashMap::default();
    for &pid in pids {
        for tid in strobe_target::tasks::threads_of(pid).unwrap_or_default() {
            if let Some(ns) = strobe_target::tasks::thread_runtime_ns(pid, tid) {
                out.insert((pid, tid), ns);
            }
        }
    }
    out
}

impl Live<'_> {
    /// The parameters the samples were taken at: the agents' choice, or the floor's.
    fn sampling(&self) -> Sampling {
        match &self.agent {
            Some(a) => Sampling { period: a.period, window: a.window, jitter: a.jitter },
            None => Sampling {
                period: self.plan.kernel_period.unwrap_or(0),
                window: self.floor.hf_window.unwrap_or(0),
                jitter: 0,
            },
        }
    }
}
