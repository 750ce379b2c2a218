//! strobe-record: the session behind `strobe record`. It checks everything a user can
//! get wrong before anything runs, writes the record file's header, runs the agent's
//! calibration in a process of its own, launches the target with the agent preloaded and
//! the recording's arena mapped, drains the samples into the file while the target runs
//! and once more after it ends (however it ends), and passes the target's exit status on.
//!
//! - [`calibrate`]: the calibration process (cost per sample, empty-window baseline).
//! - [`drain`]: the arena to the file: samples, stacks, threads, losses, mappings, END.
//! - [`procs`]: which processes of the recording live, and which streams are done.
//! - [`stacks`]: each stream's stack table.
//! - [`signals`]: Ctrl-C and termination while recording.
//! - [`kernel`]: kernel mode, without injection: the kernel's per-CPU ring buffers for a
//!   launched command, running processes (`-p`) or the whole system (`-a`); chosen
//!   automatically for a program the agent cannot serve (static, Go).
//!
//! Owns: the recording's life cycle. Must never take samples itself (the agent does, in
//! the target), touch clap types (the binary converts its arguments into
//! [`RecordOptions`]) or print (it returns a [`Recorded`] for the binary to render).

pub mod calibrate;
pub mod drain;
pub mod kernel;
pub mod procs;
pub mod signals;
pub mod stacks;

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use strobe_format::{
    Baseline, BaselineCounter, CallGraph as FileCallGraph, EventDesc, Header, RecordMode,
};
use strobe_perf::names::EventKind;
use strobe_perf::spec::{self, GroupSpec};
use strobe_protocol::{env, Arena, ArenaSizes, Calibration, CallGraph, RecordConfig};
use strobe_target::launch::{Command, HeldChild};
use strobe_target::Exit;

/// How samples are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// By the agent injected with `LD_PRELOAD` (windows, the overhead budget).
    Agent,
    /// From the kernel's ring buffers, without injection ([`kernel`]).
    Kernel,
    /// The agent, unless the program is one it cannot serve (static, Go): then kernel
    /// mode, saying why.
    #[default]
    Auto,
}

/// What is recorded.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Attach {
    /// The command of [`RecordOptions::command`], launched by strobe.
    #[default]
    Launch,
    /// Running processes (kernel mode): their threads and those they make, until they
    /// exit, `--duration` passes, or strobe is interrupted.
    Processes(Vec<u32>),
    /// Every task on every CPU (kernel mode), until `--duration` passes or strobe is
    /// interrupted.
    System,
}

/// What to record (the plain options the binary builds from its arguments).
#[derive(Debug, Clone)]
pub struct RecordOptions {
    /// The record file (replaced).
    pub output: PathBuf,
    /// The event group in perf syntax; `None` for the default group.
    pub events: Option<String>,
    /// The overhead budget, parts per million.
    pub overhead_ppm: u64,
    /// Samples published before the recorder is woken.
    pub wakeup: u64,
    /// Bytes of the shared sample buffer.
    pub buffer_bytes: u64,
    /// Profile forked children too.
    pub follow_fork: bool,
    /// How stacks are walked.
    pub call_graph: CallGraph,
    /// The most caller frames a sample keeps.
    pub max_depth: u32,
    /// The program and its arguments.
    pub command: Vec<OsString>,
    /// The agent library to preload.
    pub agent: PathBuf,
    /// A command that does nothing, run with the agent preloaded to calibrate.
    pub calibration_command: Vec<OsString>,
    /// Agent, kernel, or the agent where it can serve the program.
    pub mode: Mode,
    /// The launched command, running processes, or the whole system.
    pub attach: Attach,
    /// Stop after this long (running processes, the whole system).
    pub duration: Option<Duration>,
    /// Record off-CPU intervals with their stacks (kernel mode).
    pub off_cpu: bool,
    /// Kernel mode: bytes of ring buffer per CPU (`None`: the default).
    pub ring_bytes: Option<u64>,
    /// The user chose `call_graph` (rather than taking the default).
    pub explicit_call_graph: bool,
}

/// Everything the user can get wrong, and the machine's refusals.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The event group does not parse or needs a PMU this machine lacks.
    #[error(transparent)]
    Events(#[from] strobe_perf::spec::SpecError),
    /// The events cannot be opened here (paranoid level, seccomp, ...).
    #[error(transparent)]
    Open(#[from] strobe_perf::OpenError),
    /// The command cannot be found or read.
    #[error(transparent)]
    Target(#[from] strobe_target::Error),
    /// The agent cannot be injected into it.
    #[error("cannot profile {} in agent mode: {why}; strobe injects its agent with LD_PRELOAD, which needs a dynamically linked executable (record it with --mode kernel, or rebuild without -static)", program.display())]
    NotInjectable {
        /// The program.
        program: PathBuf,
        /// Why.
        why: strobe_target::inject::NotInjectable,
    },
    /// The record file cannot be written.
    #[error("cannot write the output file {}: {source} (choose another path with -o)", path.display())]
    Output {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The shared buffer cannot be created.
    #[error(transparent)]
    Arena(#[from] strobe_protocol::ArenaError),
    /// Kernel mode: the per-CPU events or rings cannot be set up.
    #[error(transparent)]
    Rings(#[from] strobe_perf::percpu::RingSetError),
    /// `-p` names no running process.
    #[error("no process {pid} is running (-p takes the ids of running processes)")]
    NoProcess {
        /// The pid given.
        pid: u32,
    },
    /// `-p` names another user's process.
    #[error(
        "process {pid} belongs to another user: record your own processes, or run strobe as \
         root or with CAP_PERFMON"
    )]
    OtherUser {
        /// The pid given.
        pid: u32,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// Bad options.
    #[error("{0}")]
    Options(String),
}

/// The parameters the first profiled process used.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// The long period (leader units).
    pub period: u64,
    /// The window (leader units; 0: fixed-period sampling).
    pub window: u64,
    /// The jitter.
    pub jitter: u64,
}

/// What a recording did, for the binary to render.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// How the launched command ended.
    pub exit: Exit,
    /// Samples (window starts and plain samples), window ends, losses, threads.
    pub totals: drain::Totals,
    /// Processes (agent instances) that recorded.
    pub processes: usize,
    /// Bytes in the record file.
    pub bytes: u64,
    /// The calibration's result (costs, baseline, notes).
    pub calibration: Result<Calibration, String>,
    /// The first process's sampling parameters.
    pub sampling: Option<Sampling>,
    /// Notes the agents left (one line each).
    pub notes: Vec<String>,
    /// What the user should know that the agents could not say (one line each).
    pub warnings: Vec<String>,
    /// The leader counts time (periods are ns).
    pub leader_is_time: bool,
    /// How the samples were taken.
    pub mode: RecordMode,
    /// Why that way (the header's line).
    pub mode_reason: String,
    /// Off-CPU intervals recorded (`--off-cpu`).
    pub off_cpu_intervals: u64,
}

pub(crate) fn event_descs(spec: &GroupSpec, kernel: bool) -> Vec<EventDesc> {
    spec.events
        .iter()
        .map(|e| {
            let (exclude_user, exclude_kernel) = e.privilege.excludes(kernel);
            EventDesc {
                name: e.name.clone(),
                type_: e.type_,
                config: e.config,
                is_time: e.is_time,
                is_hardware: e.kind == EventKind::Hardware,
                exclude_user,
                exclude_kernel,
            }
        })
        .collect()
}

pub(crate) fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer for the call.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// This process's vDSO, as `/proc/self/maps` and `/proc/self/mem` show it; `None` when
/// the kernel maps none (then its samples stay `[unknown in [vdso]]`).
pub(crate) fn own_vdso() -> Option<strobe_format::Image> {
    use std::os::unix::fs::FileExt;
    let maps = strobe_target::maps::mappings(None).ok()?;
    let vdso = maps.into_iter().find(|m| m.path.as_os_str() == "[vdso]")?;
    let mut bytes = vec![0u8; usize::try_from(vdso.end.checked_sub(vdso.start)?).ok()?];
    std::fs::File::open("/proc/self/mem").ok()?.read_exact_at(&mut bytes, vdso.start).ok()?;
    bytes.starts_with(b"\x7fELF").then(|| strobe_format::Image { name: "[vdso]".into(), bytes })
}

/// Why this recording is taken in kernel mode, or `None` for agent mode: the line the
/// binary prints before recording, and the header's `mode_reason`.
pub fn kernel_mode_reason(opts: &RecordOptions) -> Result<Option<String>, RecordError> {
    match &opts.attach {
        Attach::Processes(pids) => {
            let list: Vec<String> = pids.iter().map(u32::to_string).collect();
            return Ok(Some(format!(
                "attached to running process{} {} (-p)",
                if pids.len() == 1 { "" } else { "es" },
                list.join(",")
            )));
        }
        Attach::System => return Ok(Some("the whole system (-a)".into())),
        Attach::Launch => {}
    }
    if opts.mode == Mode::Agent {
        return Ok(None);
    }
    if opts.mode == Mode::Kernel {
        return Ok(Some("asked for with --mode kernel".into()));
    }
    let Some(program) = opts.command.first() else { return Ok(None) };
    let exe = Command::new(program.clone(), std::iter::empty::<OsString>()).resolve_program()?;
    let name = exe.display();
    if let Some(why) = strobe_target::inject::check_injectable(&exe)? {
        return Ok(Some(format!("{name}: {why}, so the agent cannot be injected with LD_PRELOAD")));
    }
    if strobe_target::elf::is_go_program(&exe)? {
        return Ok(Some(format!(
            "{name} is a Go program, whose threads the agent cannot follow (Go starts them \
             without pthread_create)"
        )));
    }
    Ok(None)
}

/// How long the drain sleeps between passes when no agent wakes it.
const IDLE_PASS: Duration = Duration::from_millis(100);
/// How long a launched program may run with no agent in it before `--mode auto` follows
/// it from the kernel's side (an agent registers within milliseconds of the exec).
const AGENT_GRACE: Duration = Duration::from_millis(500);

/// The delay between an overflow in user code and the handler's read, which a window's
/// tail is measured against: the calibration's mean. 0 (tails off) when it was not
/// measured.
fn tail_dead(b: &strobe_protocol::Baseline) -> u64 {
    match b.tail.first() {
        Some(t) if b.windows && t.mean.is_finite() && t.mean > 0.0 => t.mean.round() as u64,
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
    // With windows the leader runs on from the long period's overflow to the start
    // handler's read, and from the window's overflow to the end handler's read.
    let delay = if b.windows {
        b.tail.first().map_or(0.0, |t| t.mean) + b.end.first().map_or(0.0, |t| t.mean)
    } else {
        0.0
    };
    let extra = excess + delay;
    if extra.is_finite() {
        extra.round() as u64
    } else {
        0
    }
}

/// Records `opts.command`. Returns once the command (and, with `follow_fork`, every
/// followed process) has ended, or the recording was stopped.
pub fn record(opts: &RecordOptions) -> Result<Recorded, RecordError> {
    if opts.wakeup == 0 {
        return Err(RecordError::Options("--wakeup must be at least 1".into()));
    }
    if let Some(reason) = kernel_mode_reason(opts)? {
        return kernel::record(opts, reason);
    }
    if opts.off_cpu {
        return Err(RecordError::Options(
            "--off-cpu records from the kernel's ring buffers: use it with --mode kernel, -p \
             or -a"
                .into(),
        ));
    }
    let hardware = strobe_perf::pmu::hardware_pmu_available();
    let spec = match &opts.events {
        Some(e) => spec::parse(e, hardware)?,
        None => spec::default_group(hardware),
    };
    spec.check_pmu(hardware)?;
    let kernel = strobe_perf::pmu::kernel_counting_allowed();
    // Open the group once on ourselves: a too strict perf_event_paranoid (or a seccomp
    // policy) shows here, with the sysctl to change, before anything is launched.
    strobe_perf::EventGroup::open(
        &spec,
        strobe_perf::Target::CALLING_THREAD,
        spec.period.unwrap_or(1_000_000_000),
        0,
        kernel,
    )?;
    let (program, args) = opts
        .command
        .split_first()
        .ok_or_else(|| RecordError::Options("no command to record".into()))?;
    let mut cmd = Command::new(program.clone(), args.iter().cloned());
    let exe = cmd.resolve_program()?;
    if let Some(why) = strobe_target::inject::check_injectable(&exe)? {
        return Err(RecordError::NotInjectable { program: exe, why });
    }
    let config = RecordConfig {
        output: std::path::absolute(&opts.output).unwrap_or(opts.output.clone()).into_os_string(),
        events: spec.to_spec_string(),
        hardware,
        kernel,
        overhead_ppm: opts.overhead_ppm,
        follow_fork: opts.follow_fork,
        call_graph: opts.call_graph,
        max_depth: opts.max_depth,
        costs: None,
        calibrate: false,
        tail_dead: 0,
        cycle_extra: 0,
        lateness: 0,
    };

    // The file: preamble and header, written before anything runs.
    let out_err = |source| RecordError::Output { path: opts.output.clone(), source };
    std::fs::File::create(&opts.output).map_err(out_err)?;
    // Appending: the agents append their own chunks to the same file (O_APPEND keeps every
    // writer's chunks whole and in place).
    let mut file = std::fs::OpenOptions::new().append(true).open(&opts.output).map_err(out_err)?;
    let mut enc = strobe_format::Encoder::new();
    enc.preamble();
    enc.header(&Header {
        minor_version: strobe_format::MINOR_VERSION,
        strobe_version: env!("CARGO_PKG_VERSION").to_string(),
        start_unix_ns: clock_ns(libc::CLOCK_REALTIME),
        start_mono_ns: clock_ns(libc::CLOCK_MONOTONIC),
        command: opts.command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        events: event_descs(&spec, kernel),
        period: spec.period,
        window: spec.window,
        jitter: spec.jitter,
        wakeup: opts.wakeup,
        buffer_bytes: opts.buffer_bytes,
        overhead_ppm: opts.overhead_ppm,
        follow_fork: opts.follow_fork,
        mode: RecordMode::Agent,
        mode_reason: "launched with the agent preloaded (LD_PRELOAD)".into(),
        call_graph: match opts.call_graph {
            CallGraph::None => FileCallGraph::None,
            CallGraph::Fp => FileCallGraph::Fp,
            CallGraph::Dwarf => FileCallGraph::Dwarf,
        },
        max_depth: opts.max_depth,
    });
    // The vDSO has no file: save its bytes so report can name the functions in it
    // (clock_gettime, gettimeofday). The target maps the same image as we do.
    if let Some(image) = own_vdso() {
        enc.image(strobe_format::RECORDER_STREAM, &image);
    }
    file.write_all(enc.as_bytes()).map_err(out_err)?;
    enc.clear();

    // The calibration, in a process of its own.
    let calibration = calibrate::run(&opts.calibration_command, &opts.agent, &config);
    if let Ok(c) = &calibration {
        if let Some(b) = &c.baseline {
            enc.baseline(&Baseline {
                windows: b.windows,
                requested: b.requested,
                intervals: b.intervals,
                work_ns: b.work_ns,
                counters: b
                    .counters
                    .iter()
                    .map(|c| BaselineCounter { mean: c.mean, sd: c.sd })
                    .collect(),
                tail: b.tail.iter().map(|c| BaselineCounter { mean: c.mean, sd: c.sd }).collect(),
                end: b.end.iter().map(|c| BaselineCounter { mean: c.mean, sd: c.sd }).collect(),
                uncounted: b.uncounted,
            });
            file.write_all(enc.as_bytes()).map_err(out_err)?;
            enc.clear();
        }
    }
    let baseline = calibration.as_ref().ok().and_then(|c| c.baseline.as_ref());
    let config = RecordConfig {
        costs: calibration.as_ref().ok().and_then(|c| c.costs),
        tail_dead: baseline.map_or(0, tail_dead),
        cycle_extra: baseline.map_or(0, cycle_extra),
        lateness: calibration.as_ref().map_or(0, |c| c.lateness.max(0.0).round() as u64),
        ..config
    };

    // The arena and the target.
    let block_bytes = if opts.call_graph == CallGraph::None { 4096 } else { 8192 };
    let sizes = ArenaSizes::for_pool(opts.buffer_bytes, block_bytes, opts.wakeup);
    let arena = Arena::create(sizes, &config)?;
    let arena_path =
        arena.child_path().ok_or_else(|| RecordError::Options("the arena has no path".into()))?;
    cmd.env.push((
        env::LD_PRELOAD.into(),
        env::preload_with(opts.agent.as_os_str(), std::env::var_os(env::LD_PRELOAD).as_deref()),
    ));
    cmd.env.push((env::ARENA.into(), arena_path.into_os_string()));
    cmd.env.push((env::AGENT_PID.into(), OsString::new()));
    let mut child = HeldChild::spawn(&cmd)?;
    let pid = child.pid() as u32;
    let forward = signals::Forwarder::start(child.pid());
    child.release()?;

    let mut drainer = drain::Drainer::new(&arena, &mut file, spec.events.len());
    let mut exit = None;
    let mut cpu_ns = None;
    let mut waiting_note = false;
    let mut warnings = Vec::new();
    let mut no_agent_since = Instant::now();
    loop {
        drainer.wait(IDLE_PASS);
        if opts.mode == Mode::Auto && exit.is_none() {
            // No agent runs in the program (it never started, or the program replaced
            // its image without LD_PRELOAD): follow it from the kernel's side.
            let agents = drainer
                .procs()
                .all()
                .filter(|p| p.state == strobe_protocol::ProcState::Running && !p.dead)
                .count();
            if agents > 0 {
                no_agent_since = Instant::now();
            } else if no_agent_since.elapsed() >= AGENT_GRACE && !signals::exited(&child) {
                let seen = drainer.procs().len();
                drainer.finish(None).map_err(out_err)?;
                let program = exe.display();
                let reason = if seen == 0 {
                    format!(
                        "the agent did not start in {program} within {} ms (a setuid program, \
                         or one that clears LD_PRELOAD), so strobe followed it from the \
                         kernel's side",
                        AGENT_GRACE.as_millis()
                    )
                } else {
                    format!(
                        "{program} went on without the agent (it replaced its image without \
                         LD_PRELOAD), so strobe followed it from the kernel's side"
                    )
                };
                return kernel::adopt(opts, reason, kernel::Adopted { child, forward });
            }
        }
        if exit.is_none() && signals::exited(&child) {
            // A zombie still shows its threads' CPU time: read it before reaping.
            cpu_ns = procs::process_cpu_ns(pid);
            exit = Some(child.wait()?);
            drainer.reaped(pid);
        }
        if let Err(e) = drainer.pass() {
            warnings.push(format!(
                "writing {} failed: {e}; the recording is incomplete",
                opts.output.display()
            ));
            break;
        }
        if exit.is_some() {
            // With --follow-fork, wait for followed processes that outlive the command
            // (Ctrl-C stops waiting).
            let live = drainer.procs().running().count();
            if !opts.follow_fork || live == 0 || forward.interrupted() {
                break;
            }
            if !waiting_note {
                warnings.push(format!(
                    "the command ended; waited for {live} followed process(es) that outlived it"
                ));
                waiting_note = true;
            }
        }
    }
    forward.stop();
    let exit = exit.unwrap_or(Exit::Code(0));
    let processes = drainer.procs().len();
    let first = drainer.procs().all().next().map(|p| p.index);
    let totals = drainer.finish(Some((pid, exit, cpu_ns))).map_err(out_err)?;
    let sampling = first.and_then(|i| arena.procs().get(i)).map(|p| Sampling {
        period: p.period.load(std::sync::atomic::Ordering::Relaxed),
        window: p.window.load(std::sync::atomic::Ordering::Relaxed),
        jitter: p.jitter.load(std::sync::atomic::Ordering::Relaxed),
    });
    if arena.attached() == 0 {
        warnings.push(
            "the agent did not start in the target, so nothing was sampled (did the program \
             reset LD_PRELOAD or its environment, or is it setuid?)"
                .into(),
        );
    }
    // CPU time the samples do not account for: threads the agent could not follow (raw
    // clone, Go without cgo) show here, instead of an empty profile with no word.
    if let (Some(cpu), Some(s)) = (cpu_ns, sampling) {
        let cycle = s.period as f64 + s.jitter as f64 / 2.0 + s.window as f64;
        let sampled = totals.samples as f64 * cycle;
        if spec.leader().is_time && cpu as f64 > 2.0 * sampled + 50e6 {
            warnings.push(format!(
                "the samples account for {:.2} s of the {:.2} s of CPU time the program used: \
                 threads it made without pthread_create (raw clone, Go without cgo) are not \
                 profiled in this mode (the report shows the rest as [not sampled])",
                sampled / 1e9,
                cpu as f64 / 1e9
            ));
        }
    }
    let no_slot = arena.threads_without_slot();
    if no_slot > 0 {
        warnings.push(format!(
            "{no_slot} threads were not profiled: more than {} were alive at once",
            arena.slots().len()
        ));
    }
    let no_events = arena.threads_without_events();
    if no_events > 0 {
        warnings.push(format!(
            "{no_events} threads were not profiled: their events could not be opened (see the \
             agent's note; the open-file limit, `ulimit -n`, is the usual cause)"
        ));
    }
    let no_ring = arena.threads_without_ring();
    if no_ring > 0 {
        warnings.push(format!(
            "{no_ring} threads could not map their {} KiB overflow buffer (the locked-memory \
             allowance: `ulimit -l`, or sysctl kernel.perf_event_mlock_kb): their windows \
             never begin inside a system call, so functions that spend time in long calls \
             may read high rates",
            strobe_perf::overflow::OverflowRing::bytes() / 1024
        ));
    }
    let bytes = std::fs::metadata(&opts.output).map(|m| m.len()).unwrap_or(0);
    Ok(Recorded {
        exit,
        totals,
        processes,
        bytes,
        calibration,
        sampling,
        notes: arena.notes(),
        warnings,
        leader_is_time: spec.leader().is_time,
        mode: RecordMode::Agent,
        mode_reason: "launched with the agent preloaded (LD_PRELOAD)".into(),
        off_cpu_intervals: 0,
    })
}
