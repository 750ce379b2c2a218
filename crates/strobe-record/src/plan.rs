//! The recording's plan: every option resolved once, before anything runs, into what
//! the session does and why. The binary renders it (the mode line it prints before
//! recording) and hands it back to [`crate::record`].
//!
//! What is decided here:
//! - the mode and its reason: agent mode (the agent where it can serve a thread, the
//!   kernel floor for every other task of the tree) or kernel mode (the floor alone:
//!   `--mode kernel`, `-p`, `-a`, a static or Go program);
//! - the event group the agent samples and the group the floor samples (the leader
//!   alone beside an agent: window metrics are the agent's);
//! - the buffers (the agent's shared pool, the floor's per-CPU rings) and the wakeup;
//! - how the floor walks stacks (copies of the user stack walked with the unwind tables
//!   for the launched tree, as the agent walks; the kernel's frame-pointer chains for
//!   running processes and the whole system unless dwarf is asked for).
//!
//! Owns: those decisions and every check of the options. Must never start a process,
//! open an event the recording keeps, or print.

use std::path::PathBuf;

use strobe_format::RecordMode;
use strobe_perf::names::EventKind;
use strobe_perf::spec::{self, GroupSpec};
use strobe_protocol::CallGraph;
use strobe_target::launch::Command;

use crate::{Attach, Mode, RecordError, RecordOptions};

/// The period a time leader samples at in kernel mode when none is given: 1 ms of CPU
/// time per sample and thread.
pub(crate) const KERNEL_PERIOD_NS: u64 = 1_000_000;
/// The period a hardware leader samples at in kernel mode when none is given (about 1 ms
/// at 2 GHz).
pub(crate) const KERNEL_HW_PERIOD: u64 = 2_000_000;
/// Bytes of ring buffer per CPU when `--buffer` is not given: `perf record`'s default
/// (what `kernel.perf_event_mlock_kb` lets an unprivileged user lock on every CPU).
pub(crate) const DEFAULT_RING_BYTES: u64 = 512 << 10;
/// The ring per CPU when samples carry user stack copies and `--buffer` is not given.
pub(crate) const DWARF_RING_BYTES: u64 = 4 << 20;
/// Bytes of user stack each floor sample copies for a DWARF walk (perf's default).
pub(crate) const USER_STACK_BYTES: u32 = 8192;
/// The smallest shared buffer the agent works with.
pub(crate) const MIN_AGENT_BUFFER: u64 = 64 << 10;

/// What the session does.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Agent mode (the agent and the kernel floor) or kernel mode (the floor alone).
    pub mode: RecordMode,
    /// Why: the header's `mode_reason` and the line the binary prints.
    pub reason: String,
    /// The group the agent samples (and, in kernel mode, the floor).
    pub spec: GroupSpec,
    /// A hardware PMU exists.
    pub hardware: bool,
    /// Events may count the kernel (`perf_event_paranoid` <= 1 or CAP_PERFMON).
    pub kernel_allowed: bool,
    /// The launched program, resolved (launch only).
    pub program: Option<PathBuf>,
    /// The floor's samples carry user stack copies that strobe record walks.
    pub floor_dwarf: bool,
    /// The floor samples with call chains at all.
    pub floor_callchain: bool,
    /// Kernel mode's period (leader units); agent mode's floor period follows the
    /// agent's cycle, known after calibration.
    pub kernel_period: Option<u64>,
    /// Bytes of ring per CPU for the floor.
    pub ring_bytes: u64,
    /// Lines the user should read before the recording starts.
    pub notices: Vec<String>,
}

impl Plan {
    /// Whether the agent is injected.
    pub fn agent(&self) -> bool {
        self.mode == RecordMode::Agent
    }

    /// The line the binary prints before recording.
    pub fn mode_line(&self) -> String {
        match self.mode {
            RecordMode::Kernel => format!("kernel mode (nothing injected): {}", self.reason),
            RecordMode::Agent => format!("agent mode: {}", self.reason),
        }
    }
}

/// The reason a launched program is recorded in kernel mode under `--mode auto`, or
/// `None` when the agent can serve it.
fn auto_kernel_reason(exe: &std::path::Path) -> Result<Option<String>, RecordError> {
    let name = exe.display();
    if let Some(why) = strobe_target::inject::check_injectable(exe)? {
        return Ok(Some(format!("{name}: {why}, so the agent cannot be injected with LD_PRELOAD")));
    }
    if strobe_target::elf::is_go_program(exe)? {
        return Ok(Some(format!(
            "{name} is a Go program, whose runtime takes every signal for itself (the agent \
             stays out of Go images)"
        )));
    }
    Ok(None)
}

/// The mode, its reason, and the resolved program.
fn mode_of(opts: &RecordOptions) -> Result<(RecordMode, String, Option<PathBuf>), RecordError> {
    match &opts.attach {
        Attach::Processes(pids) => {
            let list: Vec<String> = pids.iter().map(u32::to_string).collect();
            let s = if pids.len() == 1 { "" } else { "es" };
            return Ok((
                RecordMode::Kernel,
                format!("attached to running process{s} {} (-p)", list.join(",")),
                None,
            ));
        }
        Attach::System => {
            return Ok((RecordMode::Kernel, "the whole system (-a)".into(), None));
        }
        Attach::Launch => {}
    }
    let (program, args) = opts.command.split_first().ok_or(RecordError::NoCommand)?;
    let exe = Command::new(program.clone(), args.iter().cloned()).resolve_program()?;
    let floor = "the kernel floor samples every task the agent does not serve";
    match opts.mode {
        Mode::Kernel => Ok((RecordMode::Kernel, "asked for".into(), Some(exe))),
        Mode::Agent => {
            if let Some(why) = strobe_target::inject::check_injectable(&exe)? {
                return Err(RecordError::NotInjectable { program: exe, why });
            }
            Ok((RecordMode::Agent, format!("the agent preloaded (LD_PRELOAD); {floor}"), Some(exe)))
        }
        Mode::Auto => match auto_kernel_reason(&exe)? {
            Some(reason) => Ok((RecordMode::Kernel, reason, Some(exe))),
            None => Ok((
                RecordMode::Agent,
                format!("the agent preloaded (LD_PRELOAD); {floor}"),
                Some(exe),
            )),
        },
    }
}

/// The group: the user's, or the default one (`cpu-clock` leading for the whole
/// system, where no task owns the time).
fn group_of(opts: &RecordOptions, hardware: bool) -> Result<GroupSpec, RecordError> {
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

/// Kernel mode's fixed period.
fn kernel_period(spec: &GroupSpec) -> Result<u64, RecordError> {
    let leader = spec.leader();
    match spec.period {
        Some(p) => Ok(p),
        None if leader.is_time => Ok(KERNEL_PERIOD_NS),
        None if leader.kind == EventKind::Hardware => Ok(KERNEL_HW_PERIOD),
        None => Err(RecordError::PeriodNeeded { leader: leader.name.clone() }),
    }
}

/// Resolves `opts` into a plan, checking everything a user can get wrong.
pub(crate) fn resolve(opts: &RecordOptions) -> Result<Plan, RecordError> {
    if opts.wakeup == 0 {
        return Err(RecordError::WakeupZero);
    }
    let launch = opts.attach == Attach::Launch;
    if !launch && opts.mode == Mode::Agent {
        return Err(RecordError::AgentCannotAttach);
    }
    if launch && opts.duration.is_some() {
        return Err(RecordError::DurationNeedsAttach);
    }
    if !launch && !opts.command.is_empty() {
        return Err(RecordError::CommandWithAttach {
            program: opts.command[0].to_string_lossy().into_owned(),
        });
    }
    let hardware = strobe_perf::pmu::hardware_pmu_available();
    let spec = group_of(opts, hardware)?;
    let kernel_allowed = strobe_perf::pmu::kernel_counting_allowed();
    let (mode, reason, program) = mode_of(opts)?;
    if mode == RecordMode::Agent {
        if opts.buffer_bytes < MIN_AGENT_BUFFER {
            return Err(RecordError::BufferTooSmall {
                bytes: opts.buffer_bytes,
                min: MIN_AGENT_BUFFER,
            });
        }
        // Open the group once on ourselves: a too strict perf_event_paranoid (or a
        // seccomp policy) shows here, with the sysctl to change, before anything runs.
        strobe_perf::EventGroup::open(
            &spec,
            strobe_perf::Target::CALLING_THREAD,
            spec.period.unwrap_or(1_000_000_000),
            0,
            kernel_allowed,
        )?;
    }
    let kernel_period = match mode {
        RecordMode::Kernel => Some(kernel_period(&spec)?),
        RecordMode::Agent => None,
    };
    let floor_callchain = opts.call_graph != CallGraph::None;
    // The launched tree's floor walks copied stacks as the agent walks them in place;
    // running processes and the whole system take the kernel's frame-pointer chains
    // unless dwarf is asked for (a copy per sample of every task is heavy there).
    let floor_dwarf = opts.call_graph == CallGraph::Dwarf
        && (launch || opts.explicit_call_graph)
        && strobe_perf::percpu::USER_STACK_REGS != 0;
    // `--buffer` sizes kernel mode's rings; beside the agent it is the agent's buffer, and
    // the floor keeps its default (a 1G agent buffer was 1G of locked ring per CPU).
    let default_ring = if floor_dwarf { DWARF_RING_BYTES } else { DEFAULT_RING_BYTES };
    let ring_bytes = match mode {
        RecordMode::Kernel => opts.ring_bytes.unwrap_or(default_ring),
        RecordMode::Agent => default_ring,
    };
    let (data, least) = (ring_data_bytes(ring_bytes), least_sample_bytes(floor_dwarf));
    if data < least {
        return Err(RecordError::RingTooSmall {
            bytes: data,
            sample: least,
            stack_copy: floor_dwarf,
        });
    }
    let notices = spec.warnings();
    Ok(Plan {
        mode,
        reason,
        spec,
        hardware,
        kernel_allowed,
        program,
        floor_dwarf,
        floor_callchain,
        kernel_period,
        ring_bytes,
        notices,
    })
}

/// What a ring of `ring_bytes` per CPU holds: a power of two pages, rounded down, at least
/// one.
pub(crate) fn ring_data_bytes(ring_bytes: u64) -> u64 {
    let page = strobe_perf::ring::page_size() as u64;
    let pages = (ring_bytes / page).max(1);
    (1u64 << (63 - pages.leading_zeros())) * page
}

/// The fewest bytes one floor sample takes in the ring: its header, six fixed fields, and
/// with `stack_copy` the user registers and the 8 KiB stack copy (the kernel writes the
/// copy's full size whatever the stack holds). A ring smaller than this loses every sample
/// (the kernel cannot place one), so it is refused before anything runs.
pub(crate) fn least_sample_bytes(stack_copy: bool) -> u64 {
    let fixed = 8 + 6 * 8;
    if !stack_copy {
        return fixed;
    }
    let regs = 8 + 8 * u64::from(strobe_perf::percpu::USER_STACK_REGS.count_ones());
    fixed + regs + 8 + u64::from(USER_STACK_BYTES) + 8
}

/// The command line a header records.
pub(crate) fn header_command(opts: &RecordOptions) -> Vec<String> {
    match &opts.attach {
        Attach::Launch => opts.command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        Attach::Processes(pids) => {
            let list: Vec<String> = pids.iter().map(u32::to_string).collect();
            vec!["-p".into(), list.join(",")]
        }
        Attach::System => vec!["-a".into()],
    }
}

/// The program and its arguments as a launch command.
pub(crate) fn command_of(opts: &RecordOptions) -> Result<Command, RecordError> {
    let (program, args) = opts.command.split_first().ok_or(RecordError::NoCommand)?;
    Ok(Command::new(program.clone(), args.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CallGraph;

    fn opts(mode: Mode, buffer: u64, call_graph: CallGraph) -> RecordOptions {
        RecordOptions {
            output: "/dev/null".into(),
            events: None,
            overhead_ppm: 20_000,
            wakeup: 1000,
            buffer_bytes: buffer,
            call_graph,
            max_depth: 128,
            command: vec!["true".into()],
            agent: "/nonexistent/agent.so".into(),
            calibration_command: vec![],
            mode,
            attach: Attach::Launch,
            duration: None,
            off_cpu: false,
            ring_bytes: Some(buffer),
            explicit_call_graph: false,
        }
    }

    /// `--buffer` sizes kernel mode's rings only: beside the agent it is the agent's
    /// buffer, and the floor's rings keep their default.
    #[test]
    fn the_buffer_sizes_kernel_rings_but_not_the_floor_beside_the_agent() {
        let stack = strobe_perf::percpu::USER_STACK_REGS != 0;
        let agent = resolve(&opts(Mode::Agent, 1 << 30, CallGraph::Dwarf)).unwrap();
        let default = if stack { DWARF_RING_BYTES } else { DEFAULT_RING_BYTES };
        assert_eq!(agent.ring_bytes, default);
        let kernel = resolve(&opts(Mode::Kernel, 1 << 20, CallGraph::Dwarf)).unwrap();
        assert_eq!(kernel.ring_bytes, 1 << 20);
    }

    /// A kernel ring that cannot hold one sample with its stack copy is refused; with the
    /// kernel's call chains the same ring is accepted.
    #[test]
    fn a_ring_smaller_than_one_sample_is_refused() {
        if strobe_perf::percpu::USER_STACK_REGS == 0 {
            return;
        }
        match resolve(&opts(Mode::Kernel, 8 << 10, CallGraph::Dwarf)) {
            Err(RecordError::RingTooSmall { bytes, sample, stack_copy: true }) => {
                assert_eq!(bytes, ring_data_bytes(8 << 10));
                assert!(sample > u64::from(USER_STACK_BYTES), "{sample}");
            }
            other => panic!("{other:?}"),
        }
        assert!(resolve(&opts(Mode::Kernel, 8 << 10, CallGraph::Fp)).is_ok());
        assert_eq!(ring_data_bytes(12 << 10), 8 << 10);
        assert_eq!(ring_data_bytes(1), strobe_perf::ring::page_size() as u64);
    }
}
