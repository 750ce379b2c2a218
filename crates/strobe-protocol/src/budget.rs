//! The sampling period an overhead budget buys: one function both the recorder and the
//! agent call with the same inputs (the group's `period=`/`jitter=`, the window, the
//! costs the calibration measured, the budget), so both know the same cycle. The
//! recorder needs it before the target starts: the kernel floor that samples every task
//! the agent does not serve samples at the agent's mean cycle, so that a sample of either
//! stands for the same CPU time.
//!
//! Owns: that arithmetic. Must never measure anything or read the environment.

use crate::Costs;

/// What the start-up calibration cannot see, as a factor on the cost per sample it
/// measures. Where it comes from: on a quiet 2-vCPU VM, `strobe bench sampling` measured
/// the bundled workload's steady-state slowdown at 3.02% and 3.80% with ~980 samples per
/// CPU-second, i.e. 31-39 us per sample, against 19.6 us calibrated: 1.6-2.0x. The
/// budget charges the upper end. The likely sources, not separated by measurement: the
/// cache and TLB lines each signal evicts (the calibration spins a register-only loop),
/// the perf group scheduled out and in at every context switch and the software counters
/// bumped at every page fault (the spin makes neither). `strobe record --help` (under
/// `--overhead`) says the same to users.
pub const INDIRECT_COST_FACTOR: f64 = 2.0;

/// The periods a recording samples at.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeriodChoice {
    /// The long period, leader units.
    pub period: u64,
    /// Each long period is `period + uniform(0..=jitter)`.
    pub jitter: u64,
    /// The user gave the period (`period=`); otherwise the budget chose it.
    pub explicit: bool,
    /// What one sample is charged, ns (the calibrated cost times
    /// [`INDIRECT_COST_FACTOR`]).
    pub charged_ns: f64,
    /// The predicted slowdown, parts per million.
    pub predicted_ppm: u64,
}

/// The inputs of [`choose`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// `period=` of the group, leader units.
    pub period: Option<u64>,
    /// `jitter=` of the group, leader units.
    pub jitter: Option<u64>,
    /// The window, leader units (0: fixed-period sampling).
    pub window: u64,
    /// The leader counts time (ns).
    pub leader_is_time: bool,
    /// The measured costs, if measured.
    pub costs: Option<Costs>,
    /// The overhead budget, parts per million.
    pub overhead_ppm: u64,
}

/// The periods the budget buys: a mean cycle (long period + jitter/2 + window) of
/// samples x charged cost / budget, a long period at least four windows and 200 us, and
/// by default a jitter of a tenth of the period.
pub fn choose(b: &Budget) -> PeriodChoice {
    let (sample_ns, per_ns) = b.costs.map_or((0, 1.0), |c| (c.sample_ns, c.leader_per_ns));
    let per_ns = if b.leader_is_time { 1.0 } else { per_ns.max(1e-3) };
    let samples_per_cycle = if b.window > 0 { 2.0 } else { 1.0 };
    let budget = b.overhead_ppm.max(1) as f64 / 1e6;
    let window_ns = b.window as f64 / per_ns;
    let charged_ns = sample_ns as f64 * INDIRECT_COST_FACTOR;
    let (period, jitter, explicit) = match b.period {
        Some(p) => (p, b.jitter.unwrap_or(0), true),
        None => {
            let cycle_ns = samples_per_cycle * charged_ns.max(1.0) / budget;
            let long_ns = (cycle_ns - window_ns).max(4.0 * window_ns).max(200_000.0);
            let jitter_frac = if b.jitter.is_some() { 0.0 } else { 0.1 };
            let base_ns = long_ns / (1.0 + jitter_frac / 2.0);
            let base = (base_ns * per_ns).round().max(1.0) as u64;
            (base, b.jitter.unwrap_or((base as f64 * jitter_frac) as u64), false)
        }
    };
    let cycle_ns = (period as f64 + jitter as f64 / 2.0) / per_ns + window_ns;
    let predicted_ppm = (samples_per_cycle * charged_ns / cycle_ns.max(1.0) * 1e6) as u64;
    PeriodChoice { period, jitter, explicit, charged_ns, predicted_ppm }
}

/// The mean sampling cycle in leader units: what the leader counts from one time sample
/// to the next (the long period, half the jitter, the window, and the sampler's own
/// counted time beyond them, `cycle_extra`).
pub fn mean_cycle(period: u64, jitter: u64, window: u64, cycle_extra: u64) -> f64 {
    period as f64 + jitter as f64 / 2.0 + window as f64 + cycle_extra as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_buys_a_cycle_of_samples_times_cost() {
        let costs = Costs { sample_ns: 20_000, floor_ns: 10_000, leader_per_ns: 1.0 };
        let b = Budget {
            period: None,
            jitter: None,
            window: 50_000,
            leader_is_time: true,
            costs: Some(costs),
            overhead_ppm: 20_000,
        };
        let c = choose(&b);
        // 2 samples x 40 us charged / 2% = 4 ms of cycle; less the window, less half the
        // jitter.
        let cycle = mean_cycle(c.period, c.jitter, 50_000, 0);
        assert!((cycle - 4_000_000.0).abs() < 2.0, "{cycle}");
        assert_eq!(c.jitter, c.period / 10);
        assert!(!c.explicit);
        assert_eq!(c.predicted_ppm, 20_000);
        // An explicit period is taken as is.
        let e = choose(&Budget { period: Some(1_000_000), jitter: Some(0), ..b });
        assert_eq!((e.period, e.jitter, e.explicit), (1_000_000, 0, true));
        // No costs: the floor of 200 us (give or take the integer division's rounding).
        let n = choose(&Budget { costs: None, window: 0, ..b });
        assert!((n.period + n.jitter / 2).abs_diff(200_000) <= 1, "{n:?}");
    }
}
