//! The agent's configuration, read from the environment `strobe record` sets.
//!
//! Owns: the names of the variables and their parsing. Must never be read from a signal
//! handler (it allocates).

use std::ffi::OsString;

use strobe_perf::spec::{self, GroupSpec};

/// Output file (appended to with O_APPEND).
pub const ENV_OUTPUT: &str = "STROBE_OUTPUT";
/// The event group in perf syntax (the recorder's canonical form).
pub const ENV_EVENTS: &str = "STROBE_EVENTS";
/// Overhead budget in parts per million.
pub const ENV_OVERHEAD: &str = "STROBE_OVERHEAD_PPM";
/// Samples a thread buffers before the writer is woken.
pub const ENV_WAKEUP: &str = "STROBE_WAKEUP";
/// Ring capacity per thread, in samples.
pub const ENV_BUFFER: &str = "STROBE_BUFFER";
/// `1`: forked children are profiled.
pub const ENV_FOLLOW_FORK: &str = "STROBE_FOLLOW_FORK";
/// `1`: events without a modifier count kernel activity too.
pub const ENV_KERNEL: &str = "STROBE_KERNEL";
/// `1`: a hardware PMU exists (picks the default leader).
pub const ENV_HARDWARE: &str = "STROBE_HARDWARE";
/// Set by the agent to its pid: a new image (after exec) with the same pid continues the
/// recording; a different pid is a forked child's new image.
pub const ENV_AGENT_PID: &str = "STROBE_AGENT_PID";

/// What the recorder asked for.
#[derive(Debug, Clone)]
pub struct Config {
    /// The record file.
    pub output: OsString,
    /// The event group.
    pub spec: GroupSpec,
    /// Overhead budget, ppm.
    pub overhead_ppm: u64,
    /// Wakeup threshold, samples.
    pub wakeup: u64,
    /// Ring capacity, samples.
    pub capacity: u64,
    /// Follow forks.
    pub follow_fork: bool,
    /// Count kernel activity for events without a modifier.
    pub kernel: bool,
}

/// Why the configuration could not be read: one line for a NOTE.
pub fn from_env() -> Result<Option<Config>, String> {
    let Some(output) = std::env::var_os(ENV_OUTPUT) else { return Ok(None) };
    let num = |name: &str, default: u64| -> Result<u64, String> {
        match std::env::var(name) {
            Ok(v) => v.parse().map_err(|_| format!("{name}={v} is not a number")),
            Err(_) => Ok(default),
        }
    };
    let flag = |name: &str| std::env::var(name).is_ok_and(|v| v == "1");
    let hardware = flag(ENV_HARDWARE);
    let events = std::env::var(ENV_EVENTS)
        .unwrap_or_else(|_| if hardware { "cycles" } else { "task-clock" }.to_string());
    let spec = spec::parse(&events, hardware).map_err(|e| e.to_string())?;
    let wakeup = num(ENV_WAKEUP, 2048)?.max(1);
    let capacity = num(ENV_BUFFER, 8192)?.max(wakeup).max(2);
    Ok(Some(Config {
        output,
        spec,
        overhead_ppm: num(ENV_OVERHEAD, 20_000)?.max(1),
        wakeup,
        capacity,
        follow_fork: flag(ENV_FOLLOW_FORK),
        kernel: flag(ENV_KERNEL),
    }))
}
