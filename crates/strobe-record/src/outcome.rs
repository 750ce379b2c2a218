//! What a recording did, for the binary to render: the totals of both samplers, and one
//! line for everything the user should know, each naming its real cause and what strobe
//! did about it (the floor took the threads the agent could not serve, the kernel dropped
//! samples, ...).
//!
//! Owns: those lines. Must never print or touch the file.

use strobe_format::RecordMode;
use strobe_protocol::{Arena, Calibration};
use strobe_target::Exit;

use crate::drain::Totals;
use crate::plan::Plan;
use crate::{RecordOptions, Recorded, Sampling};

/// What the session hands over at its end.
pub(crate) struct Facts {
    pub exit: Exit,
    pub agent_totals: Totals,
    pub floor_totals: Totals,
    pub floor_wakeups: u64,
    pub decode_errors: (u64, u64),
    /// Kernel symbols readable, kernel addresses seen.
    pub kernel_symbols: (bool, bool),
    pub off_cpu_intervals: u64,
    pub served_dropped: u64,
    pub processes: usize,
    pub agent_processes: usize,
    pub calibration: Option<Result<Calibration, String>>,
    pub sampling: Sampling,
    pub warnings: Vec<String>,
}

/// The agent's side of the story: threads it left to the floor, and why.
fn agent_warnings(arena: &Arena, w: &mut Vec<String>) {
    let blocked = arena.threads_signal_blocked();
    if blocked > 0 {
        w.push(format!(
            "{blocked} thread{} blocked the sampler's signal (SIGTRAP), as libraries that start \
             workers with every signal blocked do: the kernel floor sampled {}, without window \
             metrics",
            if blocked == 1 { "" } else { "s" },
            if blocked == 1 { "it" } else { "them" }
        ));
    }
    let budget = arena.threads_over_budget();
    if budget > 0 {
        w.push(format!(
            "{budget} thread{} found the agent's descriptor budget spent (it keeps to an eighth \
             of the open-file limit, `ulimit -n`, so the program's own files never run short): \
             the kernel floor sampled {}, without window metrics",
            if budget == 1 { "" } else { "s" },
            if budget == 1 { "it" } else { "them" }
        ));
    }
    let no_slot = arena.threads_without_slot();
    if no_slot > 0 {
        w.push(format!(
            "{no_slot} threads found every agent slot taken (more than {} alive at once): the \
             kernel floor sampled them, without window metrics",
            arena.slots().len()
        ));
    }
    let no_proc = arena.processes_without_entry();
    if no_proc > 0 {
        w.push(format!(
            "{no_proc} processes found every agent process entry taken (more than {} alive              at once): the kernel floor sampled them, without window metrics",
            arena.procs().len()
        ));
    }
    let no_events = arena.threads_without_events();
    if no_events > 0 {
        w.push(format!(
            "{no_events} threads could not open the agent's events (see the agent's note): the \
             kernel floor sampled them, without window metrics"
        ));
    }
    let no_ring = arena.threads_without_ring();
    if no_ring > 0 {
        w.push(format!(
            "{no_ring} threads could not map their {} KiB overflow buffer (the locked-memory \
             allowance: `ulimit -l`, or sysctl kernel.perf_event_mlock_kb): their windows \
             never begin inside a system call, so functions that spend time in long calls \
             may read high rates",
            strobe_perf::overflow::OverflowRing::bytes() / 1024
        ));
    }
}

/// The floor's side: drops, decoding, kernel symbols, off-CPU.
fn floor_warnings(opts: &RecordOptions, plan: &Plan, f: &Facts, w: &mut Vec<String>) {
    if f.floor_totals.lost > 0 {
        w.push(format!(
            "the kernel dropped {} samples: its ring buffers filled faster than strobe read \
             them (a larger ring buffer, a smaller wakeup threshold or a longer period keeps them)",
            f.floor_totals.lost
        ));
    }
    let (malformed, unknown) = f.decode_errors;
    if malformed > 0 || unknown > 0 {
        w.push(format!(
            "{malformed} records from the kernel did not decode and {unknown} samples named no \
             event of this recording; they were skipped"
        ));
    }
    let (readable, seen) = f.kernel_symbols;
    if plan.mode == RecordMode::Kernel && !plan.kernel_allowed {
        w.push(format!(
            "user space only: kernel.perf_event_paranoid is {}, and kernel functions and \
             frames need 1 or lower (or CAP_PERFMON)",
            strobe_perf::pmu::paranoid_level().unwrap_or(-1)
        ));
    } else if !readable && seen {
        w.push(
            "/proc/kallsyms hides the kernel's addresses (kernel.kptr_restrict): kernel \
             samples are reported unnamed"
                .into(),
        );
    }
    if opts.off_cpu && f.off_cpu_intervals == 0 {
        w.push("no off-CPU interval was recorded (no thread blocked)".into());
    }
}

/// The [`Recorded`] of a session.
pub(crate) fn recorded(
    opts: &RecordOptions,
    plan: &Plan,
    arena: Option<&Arena>,
    mut f: Facts,
) -> Recorded {
    let mut warnings = std::mem::take(&mut f.warnings);
    if let Some(ar) = arena {
        if ar.attached() == 0 {
            warnings.push(
                "the agent did not start in the program (a setuid program, one that clears \
                 LD_PRELOAD or its environment, or a Go program): the kernel floor sampled \
                 it, without window metrics"
                    .into(),
            );
        }
        agent_warnings(ar, &mut warnings);
    }
    floor_warnings(opts, plan, &f, &mut warnings);
    let a = &f.agent_totals;
    let k = &f.floor_totals;
    let totals = Totals {
        samples: a.samples + k.samples,
        window_ends: a.window_ends + k.window_ends,
        tails: a.tails,
        lost: a.lost + k.lost,
        threads: a.threads.max(k.threads),
        wakeups: a.wakeups + f.floor_wakeups,
        passes: a.passes.max(k.passes),
        malformed: a.malformed + k.malformed,
    };
    let bytes = std::fs::metadata(&opts.output).map(|m| m.len()).unwrap_or(0);
    Recorded {
        exit: f.exit,
        totals,
        floor_samples: k.samples,
        served_dropped: f.served_dropped,
        processes: f.processes.max(f.agent_processes),
        bytes,
        calibration: f
            .calibration
            .unwrap_or_else(|| Err("kernel mode runs nothing in the target".into())),
        sampling: Some(f.sampling),
        notes: arena.map(Arena::notes).unwrap_or_default(),
        warnings,
        leader_is_time: plan.spec.leader().is_time,
        mode: plan.mode,
        mode_reason: plan.reason.clone(),
        off_cpu_intervals: f.off_cpu_intervals,
    }
}
