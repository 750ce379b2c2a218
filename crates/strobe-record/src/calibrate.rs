//! Running the agent's calibration in a process of its own, before the target: a trivial
//! command with only the agent preloaded and a small arena in calibration mode. The
//! agent measures the cost per sample and the empty-window baseline at load, leaves them
//! in the arena and the command exits. The target is then told the costs, so it pays none
//! of this.
//!
//! Owns: that process and reading its result. Must never let it run past its deadline or
//! outlive the recording (it is killed and reaped).

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use strobe_protocol::{env, Arena, ArenaSizes, Calibration, RecordConfig};
use strobe_target::launch::{Command, HeldChild};

/// How long the calibration may take (it takes about 0.2 s of CPU).
pub(crate) const DEADLINE: Duration = Duration::from_secs(10);

/// Runs `command` with `agent` preloaded and a calibration arena for `config`; returns
/// what the agent measured, or why nothing was measured.
pub(crate) fn run(
    command: &[OsString],
    agent: &Path,
    config: &RecordConfig,
) -> Result<Calibration, String> {
    let Some((program, args)) = command.split_first() else {
        return Err("no calibration command".into());
    };
    let cfg = RecordConfig { calibrate: true, costs: None, follow_fork: false, ..config.clone() };
    let sizes = ArenaSizes { slots: 16, blocks: 64, block_words: 512, procs: 4, wakeup: u64::MAX };
    let arena = Arena::create(sizes, &cfg).map_err(|e| e.to_string())?;
    let path = arena.child_path().ok_or("the calibration arena has no path")?;
    let mut cmd = Command::new(program.clone(), args.iter().cloned());
    cmd.env.push((env::LD_PRELOAD.into(), agent.as_os_str().to_os_string()));
    cmd.env.push((env::ARENA.into(), path.into_os_string()));
    cmd.env.push((env::AGENT_PID.into(), OsString::new()));
    let mut child = HeldChild::spawn(&cmd).map_err(|e| e.to_string())?;
    child.release().map_err(|e| e.to_string())?;
    let deadline = Instant::now() + DEADLINE;
    loop {
        let mut pfd = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&child.pidfd()),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the call.
        let n = unsafe { libc::poll(&mut pfd, 1, 20) };
        if n > 0 {
            break;
        }
        if Instant::now() > deadline {
            child.signal(libc::SIGKILL);
            let _ = child.wait();
            return Err(format!("the calibration did not finish in {} s", DEADLINE.as_secs()));
        }
    }
    let exit = child.wait().map_err(|e| e.to_string())?;
    match arena.calibration() {
        Some(Ok(c)) => Ok(c),
        Some(Err(e)) => Err(format!("the calibration's result is unreadable: {e}")),
        None if arena.attached() == 0 => {
            Err(format!("the agent did not load in the calibration process ({exit})"))
        }
        None => Err(format!("the calibration process ended ({exit}) before reporting")),
    }
}
