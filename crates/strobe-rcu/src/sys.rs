//! The raw kernel ABI this crate uses: `sys_membarrier(2)`.
//!
//! Owns the command numbers and the one syscall wrapper; must never decide
//! policy (which scheme to run is `domain/mod.rs`'s choice, `ensure_mode`).

/// `MEMBARRIER_CMD_QUERY`: returns the bitmask of supported commands.
const CMD_QUERY: libc::c_int = 0;
/// `MEMBARRIER_CMD_PRIVATE_EXPEDITED`: every running thread of this process
/// executes a full memory barrier before the call returns.
const CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
/// `MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED`: must be issued once per
/// process before `CMD_PRIVATE_EXPEDITED` is allowed.
const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

fn membarrier(cmd: libc::c_int) -> libc::c_long {
    // SAFETY: membarrier takes three integer arguments and touches no user
    // memory; any return value is handled by the caller.
    unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_uint, 0 as libc::c_int) }
}

/// Registers this process for expedited private membarriers. Returns false when
/// the kernel lacks the command (pre-4.14, or blocked by seccomp); the caller
/// then runs the fence-based fallback.
pub(crate) fn register_private_expedited() -> bool {
    let mask = membarrier(CMD_QUERY);
    if mask < 0 {
        return false;
    }
    let needed = (CMD_PRIVATE_EXPEDITED | CMD_REGISTER_PRIVATE_EXPEDITED) as libc::c_long;
    if mask & needed != needed {
        return false;
    }
    membarrier(CMD_REGISTER_PRIVATE_EXPEDITED) == 0
}

/// `MEMBARRIER_CMD_GLOBAL`: every thread of the system has passed a full
/// memory barrier when it returns, by waiting for a kernel RCU grace period
/// (no IPIs; milliseconds). Returns false when unavailable (nohz_full, old
/// kernels, seccomp).
pub(crate) fn global() -> bool {
    const CMD_GLOBAL: libc::c_int = 1;
    membarrier(CMD_GLOBAL) == 0
}

/// Makes every running thread of the process execute a full memory barrier.
/// Returns false if the kernel refused (it cannot once registration succeeded).
pub(crate) fn private_expedited() -> bool {
    membarrier(CMD_PRIVATE_EXPEDITED) == 0
}
