//! The agent's clocks that every part reads: `CLOCK_MONOTONIC` for time stamps.
//!
//! Owns: reading them. Must never take a lock or allocate (the signal handler reads
//! them).

/// `CLOCK_MONOTONIC` in ns. Async-signal-safe (vDSO clock_gettime).
#[inline]
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}
