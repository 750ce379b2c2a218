//! What the sampling handler's system calls cost on this machine, for `strobe bench
//! sampling`: the part of a window sample's cost beyond the floor (signal delivery and one
//! group read) that is system calls, measured one call at a time in the same run.
//!
//! A window cycle is two handler runs. The window's start stops the group, reads it, sets
//! the window's period, starts it one-shot and reads it again; the window's end (its
//! values come from the overflow ring) sets the long period and starts the group. Each
//! start or stop of a task-clock leader starts or cancels its hrtimer, and when that
//! timer is the CPU's next one the clock event device is reprogrammed: on a VM a trap to
//! the host. The window's timer (150 us) always is; the long period's is only when it is
//! shorter than the scheduler tick, as in the agent's cost calibration (50 us periods),
//! never at the default period (milliseconds). So the cycle is costed twice: with every
//! timer the CPU's next (the calibration's conditions, which the reported per-sample cost
//! comes from) and with the long timer beyond the tick (the target's).
//!
//! Measured on the calling thread with the default group (task-clock leading page-faults
//! and context-switches), opened without a signal so a timer that expires does nothing;
//! each call timed alone, the median of several batches.
//!
//! Owns the measurement and its arithmetic. Must never be linked into the agent: it opens
//! perf events on the bench's own thread.

use std::time::Instant;

use serde_json::{json, Value};
use strobe_perf::spec::{default_group, DEFAULT_TIME_WINDOW_NS};
use strobe_perf::{EventGroup, PerfEvent, Target};

use crate::drive::r3;
use crate::stats::median;

/// A long period whose timer is never the CPU's next one (the tick comes first).
const FAR_NS: u64 = 1_000_000_000;
/// Calls per batch, and batches (the median batch mean is kept).
const CALLS: usize = 400;
const BATCHES: usize = 9;

/// Each call's cost, microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HandlerCalls {
    /// `read(2)` of the group (the floor's one call).
    pub(crate) read_us: f64,
    /// `PERF_EVENT_IOC_PERIOD` on a stopped leader.
    pub(crate) period_stopped_us: f64,
    /// `PERF_EVENT_IOC_PERIOD` on a running leader (its timer restarted), the timer not
    /// the CPU's next / the CPU's next: the older window start's one call.
    pub(crate) period_running_far_us: f64,
    pub(crate) period_running_next_us: f64,
    /// `PERF_EVENT_IOC_DISABLE`, the leader's timer not the CPU's next / the CPU's next.
    pub(crate) disable_far_us: f64,
    pub(crate) disable_next_us: f64,
    /// `PERF_EVENT_IOC_ENABLE` starting a timer that is not / is the CPU's next.
    pub(crate) enable_far_us: f64,
    pub(crate) enable_next_us: f64,
    /// `PERF_EVENT_IOC_REFRESH 1` starting the window's timer (the CPU's next).
    pub(crate) refresh_next_us: f64,
    /// A system call that does nothing (`getppid`).
    pub(crate) bare_us: f64,
}

impl HandlerCalls {
    /// A window cycle's calls when every timer is the CPU's next one (the calibration).
    pub(crate) fn cycle_next_us(&self) -> f64 {
        self.disable_next_us
            + 2.0 * self.read_us
            + 2.0 * self.period_stopped_us
            + self.refresh_next_us
            + self.enable_next_us
    }

    /// A window cycle's calls when the long period's timer is beyond the tick (the
    /// target at the default period).
    pub(crate) fn cycle_far_us(&self) -> f64 {
        self.disable_far_us
            + 2.0 * self.read_us
            + 2.0 * self.period_stopped_us
            + self.refresh_next_us
            + self.enable_far_us
    }

    /// What a sample's calls cost beyond the floor's one read, per sample (two a cycle).
    pub(crate) fn per_sample_beyond_floor_us(cycle_us: f64, read_us: f64) -> f64 {
        (cycle_us - 2.0 * read_us) / 2.0
    }

    pub(crate) fn json(&self) -> Value {
        let beyond_next = Self::per_sample_beyond_floor_us(self.cycle_next_us(), self.read_us);
        let beyond_far = Self::per_sample_beyond_floor_us(self.cycle_far_us(), self.read_us);
        json!({
            "read_us": r3(self.read_us),
            "period_stopped_us": r3(self.period_stopped_us),
            "period_running_far_us": r3(self.period_running_far_us),
            "period_running_next_us": r3(self.period_running_next_us),
            "disable_far_us": r3(self.disable_far_us),
            "disable_next_us": r3(self.disable_next_us),
            "enable_far_us": r3(self.enable_far_us),
            "enable_next_us": r3(self.enable_next_us),
            "refresh_next_us": r3(self.refresh_next_us),
            "bare_syscall_us": r3(self.bare_us),
            "cycle_every_timer_next_us": r3(self.cycle_next_us()),
            "cycle_long_timer_far_us": r3(self.cycle_far_us()),
            "per_sample_beyond_floor_every_timer_next_us": r3(beyond_next),
            "per_sample_beyond_floor_long_timer_far_us": r3(beyond_far),
        })
    }
}

/// Times `op` alone `CALLS` times per batch, `setup` (untimed) before each; the median
/// batch mean, microseconds.
fn time_op(mut setup: impl FnMut(), mut op: impl FnMut(), mut after: impl FnMut()) -> f64 {
    let mut means = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        let mut ns = 0u128;
        for _ in 0..CALLS {
            setup();
            let t = Instant::now();
            op();
            ns += t.elapsed().as_nanos();
            after();
        }
        means.push(ns as f64 / CALLS as f64 / 1e3);
    }
    median(&means)
}

/// Measures every call on the calling thread. `Err`: the group could not be opened.
pub(crate) fn measure() -> Result<HandlerCalls, String> {
    let spec = default_group(false);
    let mut attrs = EventGroup::sampling_attrs(&spec, FAR_NS, 0, false, false);
    // No signal: a timer that expires while it is measured only counts an overflow.
    if let Some(l) = attrs.first_mut() {
        l.set_sigtrap(0);
        l.set_remove_on_exec(0);
    }
    let Some((lattr, rest)) = attrs.split_first() else {
        return Err("the default group has no leader".into());
    };
    let leader = PerfEvent::open(lattr, Target::CALLING_THREAD, None, "task-clock")
        .map_err(|e| e.to_string())?;
    let mut members = Vec::new();
    for (a, e) in rest.iter().zip(spec.events.iter().skip(1)) {
        members.push(
            PerfEvent::open(a, Target::CALLING_THREAD, Some(&leader), &e.name)
                .map_err(|e| e.to_string())?,
        );
    }
    let fd = leader.handle();
    let mut words = [0u64; 16];
    // Every call once, checked: the timings below ignore results, so a call this kernel
    // refuses must fail here, not time an error path.
    let check = |what: &str, r: std::io::Result<()>| r.map_err(|e| format!("{what}: {e}"));
    check("PERF_EVENT_IOC_PERIOD", fd.set_period(DEFAULT_TIME_WINDOW_NS))?;
    check("PERF_EVENT_IOC_REFRESH", fd.refresh(1))?;
    check("read", fd.read_into(&mut words).map(drop))?;
    check("PERF_EVENT_IOC_PERIOD (running)", fd.set_period(FAR_NS))?;
    check("PERF_EVENT_IOC_DISABLE", fd.disable())?;
    check("PERF_EVENT_IOC_ENABLE", fd.enable())?;
    check("PERF_EVENT_IOC_DISABLE", fd.disable())?;
    // Warm the paths.
    for _ in 0..CALLS {
        let _ = fd.enable();
        let _ = fd.read_into(&mut words);
        let _ = fd.disable();
    }
    let _ = fd.set_period(FAR_NS);
    let _ = fd.enable();
    let read_us = time_op(
        || {},
        || {
            let _ = fd.read_into(&mut words);
        },
        || {},
    );
    let _ = fd.disable();
    // Two periods in turn, so no call is a no-op.
    let p = std::cell::Cell::new(0u64);
    let period_stopped_us = time_op(
        || p.set(p.get() ^ 1),
        || {
            let _ = fd.set_period(DEFAULT_TIME_WINDOW_NS + p.get());
        },
        || {},
    );
    let period_running = |base: u64| {
        let _ = fd.set_period(base);
        let _ = fd.enable();
        let us = time_op(
            || p.set(p.get() ^ 1),
            || {
                let _ = fd.set_period(base + p.get());
            },
            || {},
        );
        let _ = fd.disable();
        us
    };
    let period_running_far_us = period_running(FAR_NS);
    let period_running_next_us = period_running(DEFAULT_TIME_WINDOW_NS);
    // Disable, then enable, the leader stopped with period `base` set: (disable, enable).
    let stop_start = |base: u64| {
        let _ = fd.disable();
        let _ = fd.set_period(base);
        let enable = || {
            let _ = fd.enable();
        };
        let disable = || {
            let _ = fd.disable();
        };
        (time_op(enable, disable, || {}), time_op(|| {}, enable, disable))
    };
    let (disable_far_us, enable_far_us) = stop_start(FAR_NS);
    let (disable_next_us, enable_next_us) = stop_start(DEFAULT_TIME_WINDOW_NS);
    let refresh_next_us = time_op(
        || {},
        || {
            let _ = fd.refresh(1);
        },
        || {
            let _ = fd.disable();
        },
    );
    let bare_us = time_op(
        || {},
        || {
            // SAFETY: getppid has no preconditions.
            std::hint::black_box(unsafe { libc::getppid() });
        },
        || {},
    );
    drop(members);
    drop(leader);
    Ok(HandlerCalls {
        read_us,
        period_stopped_us,
        period_running_far_us,
        period_running_next_us,
        disable_far_us,
        disable_next_us,
        enable_far_us,
        enable_next_us,
        refresh_next_us,
        bare_us,
    })
}

/// Figures for tests of the arithmetic and of the bench's summary.
#[cfg(test)]
pub(crate) const EXAMPLE: HandlerCalls = HandlerCalls {
    read_us: 1.0,
    period_stopped_us: 0.5,
    period_running_far_us: 0.9,
    period_running_next_us: 7.5,
    disable_far_us: 0.4,
    disable_next_us: 6.0,
    enable_far_us: 0.6,
    enable_next_us: 6.5,
    refresh_next_us: 7.0,
    bare_us: 0.2,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cycle_adds_its_calls_and_a_sample_is_half_of_it_beyond_the_floors_read() {
        let c = EXAMPLE;
        assert!((c.cycle_next_us() - (6.0 + 2.0 + 1.0 + 7.0 + 6.5)).abs() < 1e-9);
        assert!((c.cycle_far_us() - (0.4 + 2.0 + 1.0 + 7.0 + 0.6)).abs() < 1e-9);
        let beyond = HandlerCalls::per_sample_beyond_floor_us(c.cycle_far_us(), c.read_us);
        assert!((beyond - 4.5).abs() < 1e-9, "{beyond}");
    }

    /// The real calls on this machine: each costs something, and a timer that is the
    /// CPU's next costs more to start than one beyond the tick (a reprogramming).
    #[test]
    fn the_calls_are_measured_on_the_calling_thread() {
        let c = match measure() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("skipped: cannot open the default group here: {e}");
                return;
            }
        };
        for v in [
            c.read_us,
            c.period_stopped_us,
            c.period_running_far_us,
            c.disable_far_us,
            c.enable_far_us,
            c.bare_us,
        ] {
            assert!(v > 0.0 && v < 1_000.0, "{c:?}");
        }
        assert!(c.cycle_next_us() > c.cycle_far_us() * 0.9, "{c:?}");
    }
}
