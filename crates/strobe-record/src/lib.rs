//! strobe-record: the session behind `strobe record`. It resolves the options into a
//! [`Plan`] (checking everything a user can get wrong before anything runs), runs the
//! agent's calibration in a process of its own, launches the target with the agent
//! preloaded and the kernel floor's inherited events on it (or attaches the floor to
//! running processes, or to the whole system), drains both into the file while the
//! target runs and once more after it ends (however it ends), and passes the target's
//! exit status on.
//!
//! - `plan`: the options resolved once (mode and reason, groups, buffers, stacks).
//! - `session`: the phases of a recording.
//! - `calibrate`: the calibration process (cost per sample, empty-window baseline).
//! - `drain`: the arena to the file: samples, stacks, threads, losses, mappings, END.
//! - `floor`: the kernel floor (perf's per-CPU rings, inherited by the whole tree).
//! - `served`: when the agent served which thread, so no moment is sampled twice.
//! - `procs`: which processes of the recording live, and which streams are done.
//! - `stacks`: each stream's stack table.
//! - `signals`: Ctrl-C and termination while recording.
//! - `outcome`: what the recording did, and the lines the user should read.
//!
//! Owns: the recording's life cycle. Must never take samples itself (the agent and the
//! kernel do), touch clap types (the binary converts its arguments into
//! [`RecordOptions`]) or print (it returns a [`Plan`] and a [`Recorded`] for the binary
//! to render).

mod calibrate;
mod drain;
mod floor;
mod outcome;
mod plan;
mod procs;
mod served;
mod session;
mod signals;
mod stacks;

pub use drain::Totals;
pub use plan::Plan;

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use strobe_format::{EventDesc, RecordMode};
use strobe_perf::names::EventKind;
use strobe_perf::spec::GroupSpec;
use strobe_protocol::{Calibration, CallGraph};
use strobe_target::Exit;

/// How samples are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// By the agent injected with `LD_PRELOAD` (windows, the overhead budget).
    Agent,
    /// From the kernel's ring buffers, without injection (`strobe record --mode kernel`).
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
    #[error("cannot profile {} in agent mode: {why}; strobe injects its agent with LD_PRELOAD, which needs a dynamically linked executable (record it in kernel mode, or rebuild without -static)", program.display())]
    NotInjectable {
        /// The program.
        program: PathBuf,
        /// Why.
        why: strobe_target::inject::NotInjectable,
    },
    /// The record file cannot be written.
    #[error("cannot write the output file {}: {source} (choose another path for it)", path.display())]
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
    #[error("no process {pid} is running (only running processes can be attached to)")]
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
    /// No command to launch.
    #[error("no command to record")]
    NoCommand,
    /// A wakeup of zero samples.
    #[error("the wakeup must be at least 1 sample")]
    WakeupZero,
    /// The agent's shared buffer is too small.
    #[error("the agent's buffer of {bytes} bytes is too small: it needs at least {min}")]
    BufferTooSmall {
        /// Asked for.
        bytes: u64,
        /// The least it takes.
        min: u64,
    },
    /// The kernel's ring of each CPU cannot hold one sample: every sample would be lost.
    #[error(
        "a ring buffer of {bytes} bytes per CPU cannot hold one sample ({sample} bytes or more{}): \
         every sample would be lost; give a ring of at least {} bytes",
        if *stack_copy { " with its copy of the user stack" } else { "" },
        sample.next_power_of_two().max(4096) * 2
    )]
    RingTooSmall {
        /// The ring's data bytes (a power of two pages).
        bytes: u64,
        /// The fewest bytes a sample takes.
        sample: u64,
        /// Samples carry a copy of the user stack (DWARF walks).
        stack_copy: bool,
    },
    /// A command and running processes (or the whole system) at once.
    #[error("running processes and the whole system are recorded without a command ({program} was given)")]
    CommandWithAttach {
        /// The command given.
        program: String,
    },
    /// The agent was asked for with running processes or the whole system.
    #[error("running processes and the whole system are recorded in kernel mode, not agent mode")]
    AgentCannotAttach,
    /// A duration for a launched command.
    #[error("a duration applies to running processes and the whole system; a launched command is recorded until it ends")]
    DurationNeedsAttach,
    /// Kernel mode samples a leader at a fixed period, and none was given.
    #[error("kernel mode samples {leader} at a fixed period: give one in the group's spec, e.g. {{{leader}/period=1000/}}")]
    PeriodNeeded {
        /// The leader.
        leader: String,
    },
    /// A thread id was given where a process id is expected.
    #[error("{tid} is a thread of process {pid}, not a process: give its process id")]
    ThreadNotProcess {
        /// The id given.
        tid: u32,
        /// Its process.
        pid: u32,
    },
    /// The arena has no path the target can open.
    #[error("the shared buffer has no path the program can open")]
    ArenaPath,
}

impl RecordError {
    /// Off-CPU recording was asked for where the kernel refuses its scheduler samples.
    pub fn is_off_cpu_refused(&self) -> bool {
        matches!(
            self,
            RecordError::Rings(strobe_perf::percpu::RingSetError::OffCpuNotAllowed { .. })
        )
    }
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
    pub totals: Totals,
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
    /// Samples the kernel floor kept (tasks and moments the agent did not serve).
    pub floor_samples: u64,
    /// Floor samples dropped because the agent served their thread at that moment.
    pub served_dropped: u64,
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

/// Resolves `opts` into the plan the binary renders and [`record`] follows.
pub fn plan(opts: &RecordOptions) -> Result<Plan, RecordError> {
    plan::resolve(opts)
}

/// Records as `plan` (from [`plan()`] on the same options) says. Returns once the command
/// has ended (or, for running processes and the whole system, once they ended,
/// `--duration` passed or a signal came).
pub fn record(opts: &RecordOptions, plan: &Plan) -> Result<Recorded, RecordError> {
    session::run(opts, plan)
}
