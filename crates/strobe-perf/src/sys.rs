//! The raw perf_event ABI: the one module that speaks to the kernel directly.
//!
//! Bindings come from `perf-event-open-sys` (generated from the kernel's uapi headers);
//! this module re-exports what strobe uses and adds the few constants those bindings lack.
//! Everything here is `unsafe` or plain data; the safe layer is [`crate::PerfEvent`].
//!
//! Owns the ABI's types, constants and ioctl numbers and the raw system-call wrappers. It
//! must never hold policy or state (no caching, no diagnosis, no retry), and never be
//! bypassed: other modules reach the kernel's perf interface only through it.

pub use perf_event_open_sys::bindings::{
    perf_event_attr, perf_event_header, perf_event_mmap_page, HW_BREAKPOINT_R, HW_BREAKPOINT_RW,
    HW_BREAKPOINT_W, HW_BREAKPOINT_X, PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
    PERF_COUNT_HW_BRANCH_MISSES, PERF_COUNT_HW_BUS_CYCLES, PERF_COUNT_HW_CACHE_MISSES,
    PERF_COUNT_HW_CACHE_REFERENCES, PERF_COUNT_HW_CPU_CYCLES, PERF_COUNT_HW_INSTRUCTIONS,
    PERF_COUNT_HW_REF_CPU_CYCLES, PERF_COUNT_HW_STALLED_CYCLES_BACKEND,
    PERF_COUNT_HW_STALLED_CYCLES_FRONTEND, PERF_COUNT_SW_ALIGNMENT_FAULTS,
    PERF_COUNT_SW_CONTEXT_SWITCHES, PERF_COUNT_SW_CPU_CLOCK, PERF_COUNT_SW_CPU_MIGRATIONS,
    PERF_COUNT_SW_DUMMY, PERF_COUNT_SW_EMULATION_FAULTS, PERF_COUNT_SW_PAGE_FAULTS,
    PERF_COUNT_SW_PAGE_FAULTS_MAJ, PERF_COUNT_SW_PAGE_FAULTS_MIN, PERF_COUNT_SW_TASK_CLOCK,
    PERF_FLAG_FD_CLOEXEC, PERF_FORMAT_GROUP, PERF_FORMAT_ID, PERF_FORMAT_LOST,
    PERF_FORMAT_TOTAL_TIME_ENABLED, PERF_FORMAT_TOTAL_TIME_RUNNING, PERF_RECORD_COMM,
    PERF_RECORD_EXIT, PERF_RECORD_FORK, PERF_RECORD_LOST, PERF_RECORD_LOST_SAMPLES,
    PERF_RECORD_MISC_COMM_EXEC, PERF_RECORD_MISC_CPUMODE_MASK, PERF_RECORD_MISC_KERNEL,
    PERF_RECORD_MISC_SWITCH_OUT, PERF_RECORD_MISC_SWITCH_OUT_PREEMPT, PERF_RECORD_MISC_USER,
    PERF_RECORD_MMAP2, PERF_RECORD_READ, PERF_RECORD_SAMPLE, PERF_RECORD_SWITCH, PERF_SAMPLE_ADDR,
    PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_CPU, PERF_SAMPLE_ID, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP,
    PERF_SAMPLE_PERIOD, PERF_SAMPLE_READ, PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER,
    PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_TYPE_BREAKPOINT,
    PERF_TYPE_HARDWARE, PERF_TYPE_HW_CACHE, PERF_TYPE_RAW, PERF_TYPE_SOFTWARE,
    PERF_TYPE_TRACEPOINT,
};

/// The `PERF_EVENT_IOC_*` request numbers, computed like the kernel's `_IO/_IOW/_IOR`
/// macros (x86-64/arm64 encoding). Defined here rather than taken from the bindings crate
/// because its `PERIOD` wrapper passes the period by value where the kernel expects a
/// pointer to it.
pub mod ioctl {
    const fn ioc(dir: u64, nr: u64, size: u64) -> u64 {
        (dir << 30) | (size << 16) | ((b'$' as u64) << 8) | nr
    }
    const NONE: u64 = 0;
    const WRITE: u64 = 1;
    const READ: u64 = 2;
    /// `_IO('$', 0)`: enable (arg: PERF_IOC_FLAG_GROUP or 0).
    pub const ENABLE: u64 = ioc(NONE, 0, 0);
    /// `_IO('$', 1)`: disable.
    pub const DISABLE: u64 = ioc(NONE, 1, 0);
    /// `_IO('$', 2)`: allow N more overflows, then disable.
    pub const REFRESH: u64 = ioc(NONE, 2, 0);
    /// `_IO('$', 3)`: zero the count.
    pub const RESET: u64 = ioc(NONE, 3, 0);
    /// `_IOW('$', 4, __u64)`: new sample period, passed by pointer.
    pub const PERIOD: u64 = ioc(WRITE, 4, 8);
    /// `_IO('$', 5)`: redirect output to another event's ring buffer.
    pub const SET_OUTPUT: u64 = ioc(NONE, 5, 0);
    /// `_IOR('$', 7, __u64 *)`: read the event id.
    pub const ID: u64 = ioc(READ, 7, 8);
    /// `_IOW('$', 9, __u32)`: pause (1) or resume (0) ring-buffer output.
    pub const PAUSE_OUTPUT: u64 = ioc(WRITE, 9, 4);
    /// `_IOW('$', 11, struct perf_event_attr *)`: change a breakpoint's attributes in place.
    pub const MODIFY_ATTRIBUTES: u64 = ioc(WRITE, 11, 8);
    /// `PERF_IOC_FLAG_GROUP`: apply ENABLE/DISABLE/RESET to the whole group.
    pub const FLAG_GROUP: u64 = 1;

    #[cfg(test)]
    mod tests {
        #[test]
        fn request_numbers_match_the_kernel_headers() {
            assert_eq!(super::ENABLE, 0x2400);
            assert_eq!(super::REFRESH, 0x2402);
            assert_eq!(super::PERIOD, 0x4008_2404);
            assert_eq!(super::ID, 0x8008_2407);
            assert_eq!(super::MODIFY_ATTRIBUTES, 0x4008_240b);
        }
    }
}

/// The size of `perf_event_attr` as these bindings know it (`PERF_ATTR_SIZE_VER9`: up to
/// `config4`).
pub const ATTR_SIZE: usize = std::mem::size_of::<perf_event_attr>();
const _: () = assert!(ATTR_SIZE == 144);

/// The attr's bytes as the kernel reads them (for decoders that take the attr as bytes,
/// as perf.data stores it).
pub fn attr_bytes(attr: &perf_event_attr) -> [u8; ATTR_SIZE] {
    // SAFETY: perf_event_attr is a repr(C) struct of integers and bitfield words with no
    // implicit padding (its 144 bytes are all declared fields, the reserved ones
    // included), so every byte is initialised and any byte pattern is a valid [u8; N].
    unsafe { std::mem::transmute_copy(attr) }
}

/// The byte offset of the high-frequency sampling word of the alternating-period series
/// (seed 004, v4 of April 2025): "a new u64 after `config3`", making the attr 144 bytes.
/// The series was never merged; newer uapi headers (these bindings) give the same slot
/// to `config4`.
pub const HF_WORD_OFFSET: usize = 136;

/// The high-frequency sampling word: `hf_sample_period:32` (bits 0..32, the short window
/// in the event's units) and `hf_sample_rand:4` (bits 32..36, random bits added to each
/// long period; at most 15).
pub fn hf_word(period: u32, rand_bits: u8) -> u64 {
    u64::from(period) | (u64::from(rand_bits.min(15)) << 32)
}

/// `attr` asking for the alternating period: the word of [`hf_word`] at
/// [`HF_WORD_OFFSET`] and the size 144. A kernel older than that slot refuses it with
/// `E2BIG` (non-zero bytes past the attr it knows); one whose slot is `config4` may
/// accept it and ignore it for events that do not use `config4`, so a caller must check
/// that the periods really alternate (the recorder samples itself briefly) before it
/// believes the kernel has the series.
pub fn with_hf_sampling(attr: &perf_event_attr, period: u32, rand_bits: u8) -> perf_event_attr {
    let mut a = *attr;
    a.size = ATTR_SIZE as u32;
    a.config4 = hf_word(period, rand_bits);
    a
}

/// The `hf_sample_period` and `hf_sample_rand` an attr asks for.
pub fn hf_fields(attr: &perf_event_attr) -> (u32, u8) {
    (attr.config4 as u32, ((attr.config4 >> 32) & 0xf) as u8)
}

/// `fcntl(F_SETOWN_EX)`: route an fd's signal to one thread.
pub const F_SETOWN_EX: libc::c_int = 15;
/// `fcntl(F_SETSIG)`: choose which signal an fd raises (and get `si_fd` in siginfo).
pub const F_SETSIG: libc::c_int = 10;
/// `f_owner_ex.type` for a single thread.
pub const F_OWNER_TID: libc::c_int = 0;

/// `struct f_owner_ex` for `F_SETOWN_EX`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct FOwnerEx {
    /// `F_OWNER_TID`, `F_OWNER_PID` or `F_OWNER_PGRP`.
    pub type_: libc::c_int,
    /// The thread, process or group id.
    pub pid: libc::pid_t,
}

/// `si_code` of a SIGTRAP raised by a perf event with `sigtrap=1` (`TRAP_PERF`).
pub const TRAP_PERF: libc::c_int = 6;
/// `si_perf_flags` bit: the signal was delivered asynchronously (the thread had SIGTRAP
/// blocked, so the kernel could not deliver it synchronously).
pub const TRAP_PERF_FLAG_ASYNC: u32 = 1;

/// A zeroed `perf_event_attr` with `size` set, `type_` and `config` filled in, the event
/// disabled, and kernel and hypervisor excluded (strobe profiles user space, which works
/// at the default `perf_event_paranoid=2`).
pub fn new_attr(type_: u32, config: u64) -> perf_event_attr {
    let mut attr = perf_event_attr {
        type_,
        size: std::mem::size_of::<perf_event_attr>() as u32,
        config,
        ..Default::default()
    };
    attr.set_disabled(1);
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    attr
}

/// The raw `perf_event_open(2)` system call.
///
/// # Safety
/// `attr` must point to a valid, initialised `perf_event_attr` whose `size` field is
/// correct, and any pointers it carries (e.g. the uprobe path in `config1`) must be valid
/// NUL-terminated strings for the duration of the call.
pub unsafe fn perf_event_open(
    attr: *mut perf_event_attr,
    pid: libc::pid_t,
    cpu: libc::c_int,
    group_fd: libc::c_int,
    flags: libc::c_ulong,
) -> libc::c_int {
    // SAFETY: the caller upholds the attr contract above; the remaining arguments are
    // plain integers the kernel validates.
    unsafe { perf_event_open_sys::perf_event_open(attr, pid, cpu, group_fd, flags) }
}

/// The calling thread's id (`gettid(2)`). Async-signal-safe.
#[inline]
pub fn gettid() -> libc::pid_t {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::pid_t }
}

/// The leading fields of a `siginfo_t` raised by a perf event with `sigtrap=1`
/// (`si_code == TRAP_PERF`): the kernel's `_sigfault._perf` layout on LP64 Linux
/// (x86-64, arm64). The libc crate does not expose `si_perf_*`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct PerfSigInfo {
    /// `si_signo`.
    pub signo: libc::c_int,
    /// `si_errno`.
    pub errno: libc::c_int,
    /// `si_code`: [`TRAP_PERF`] for perf's synchronous SIGTRAP.
    pub code: libc::c_int,
    _pad: libc::c_int,
    /// `si_addr`: the sample address (0 for time events).
    pub addr: u64,
    /// `si_perf_data`: the event's `attr.sig_data`.
    pub perf_data: u64,
    /// `si_perf_type`: the event's `attr.type`.
    pub perf_type: u32,
    /// `si_perf_flags`: [`TRAP_PERF_FLAG_ASYNC`] when delivered late.
    pub perf_flags: u32,
}

const _: () = assert!(std::mem::size_of::<PerfSigInfo>() <= std::mem::size_of::<libc::siginfo_t>());

/// Views a `siginfo_t` as its perf fields. Async-signal-safe.
///
/// # Safety
/// `info` must point to a valid `siginfo_t` (as passed to an `SA_SIGINFO` handler); the
/// perf fields are meaningful only when `code == TRAP_PERF`.
#[inline]
pub unsafe fn perf_siginfo<'a>(info: *const libc::siginfo_t) -> &'a PerfSigInfo {
    // SAFETY: siginfo_t is 128 bytes and at least 8-aligned, PerfSigInfo is a prefix of
    // its layout made of plain integers (any bit pattern is valid).
    unsafe { &*info.cast::<PerfSigInfo>() }
}
