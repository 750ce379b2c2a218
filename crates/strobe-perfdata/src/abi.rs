//! The numbers of the perf.data format: the kernel's record and sample ABI (taken from
//! `perf-event-open-sys`, the one home of kernel numbers in strobe) as `u64`/`u32` masks,
//! and the perf tool's own additions (file header, user record types, feature bits),
//! which the kernel headers do not carry.
//!
//! This module must never hold logic: constants only.

// The bindings type their constants with C aliases (`c_uint`, `c_ulong`) whose Rust type
// depends on the target; the casts fix ours whatever the target, even where a cast is a
// no-op on this one.
#![allow(clippy::unnecessary_cast)]

use perf_event_open_sys::bindings as b;

/// Magic of a little-endian perf.data file (and of a pipe-mode stream).
pub const MAGIC: &[u8; 8] = b"PERFILE2";
/// Magic of a perf.data written on a big-endian machine.
pub const MAGIC_BIG_ENDIAN: &[u8; 8] = b"2ELIFREP";
/// Size of the file-mode header (`struct perf_file_header`).
pub const FILE_HEADER_SIZE: u64 = 104;
/// Size of the pipe-mode header (`struct perf_pipe_file_header`): magic and size.
pub const PIPE_HEADER_SIZE: u64 = 16;

// `perf_event_attr.sample_type` bits.
/// `PERF_SAMPLE_IP`.
pub const SAMPLE_IP: u64 = b::PERF_SAMPLE_IP as u64;
/// `PERF_SAMPLE_TID`.
pub const SAMPLE_TID: u64 = b::PERF_SAMPLE_TID as u64;
/// `PERF_SAMPLE_TIME`.
pub const SAMPLE_TIME: u64 = b::PERF_SAMPLE_TIME as u64;
/// `PERF_SAMPLE_ADDR`.
pub const SAMPLE_ADDR: u64 = b::PERF_SAMPLE_ADDR as u64;
/// `PERF_SAMPLE_READ`.
pub const SAMPLE_READ: u64 = b::PERF_SAMPLE_READ as u64;
/// `PERF_SAMPLE_CALLCHAIN`.
pub const SAMPLE_CALLCHAIN: u64 = b::PERF_SAMPLE_CALLCHAIN as u64;
/// `PERF_SAMPLE_ID`.
pub const SAMPLE_ID: u64 = b::PERF_SAMPLE_ID as u64;
/// `PERF_SAMPLE_CPU`.
pub const SAMPLE_CPU: u64 = b::PERF_SAMPLE_CPU as u64;
/// `PERF_SAMPLE_PERIOD`.
pub const SAMPLE_PERIOD: u64 = b::PERF_SAMPLE_PERIOD as u64;
/// `PERF_SAMPLE_STREAM_ID`.
pub const SAMPLE_STREAM_ID: u64 = b::PERF_SAMPLE_STREAM_ID as u64;
/// `PERF_SAMPLE_RAW`.
pub const SAMPLE_RAW: u64 = b::PERF_SAMPLE_RAW as u64;
/// `PERF_SAMPLE_BRANCH_STACK`.
pub const SAMPLE_BRANCH_STACK: u64 = b::PERF_SAMPLE_BRANCH_STACK as u64;
/// `PERF_SAMPLE_REGS_USER`.
pub const SAMPLE_REGS_USER: u64 = b::PERF_SAMPLE_REGS_USER as u64;
/// `PERF_SAMPLE_STACK_USER`.
pub const SAMPLE_STACK_USER: u64 = b::PERF_SAMPLE_STACK_USER as u64;
/// `PERF_SAMPLE_WEIGHT`.
pub const SAMPLE_WEIGHT: u64 = b::PERF_SAMPLE_WEIGHT as u64;
/// `PERF_SAMPLE_DATA_SRC`.
pub const SAMPLE_DATA_SRC: u64 = b::PERF_SAMPLE_DATA_SRC as u64;
/// `PERF_SAMPLE_IDENTIFIER`.
pub const SAMPLE_IDENTIFIER: u64 = b::PERF_SAMPLE_IDENTIFIER as u64;
/// `PERF_SAMPLE_TRANSACTION`.
pub const SAMPLE_TRANSACTION: u64 = b::PERF_SAMPLE_TRANSACTION as u64;
/// `PERF_SAMPLE_REGS_INTR`.
pub const SAMPLE_REGS_INTR: u64 = b::PERF_SAMPLE_REGS_INTR as u64;
/// `PERF_SAMPLE_PHYS_ADDR`.
pub const SAMPLE_PHYS_ADDR: u64 = b::PERF_SAMPLE_PHYS_ADDR as u64;
/// `PERF_SAMPLE_AUX`.
pub const SAMPLE_AUX: u64 = b::PERF_SAMPLE_AUX as u64;
/// `PERF_SAMPLE_CGROUP`.
pub const SAMPLE_CGROUP: u64 = b::PERF_SAMPLE_CGROUP as u64;
/// `PERF_SAMPLE_DATA_PAGE_SIZE`.
pub const SAMPLE_DATA_PAGE_SIZE: u64 = b::PERF_SAMPLE_DATA_PAGE_SIZE as u64;
/// `PERF_SAMPLE_CODE_PAGE_SIZE`.
pub const SAMPLE_CODE_PAGE_SIZE: u64 = b::PERF_SAMPLE_CODE_PAGE_SIZE as u64;
/// `PERF_SAMPLE_WEIGHT_STRUCT` (shares one u64 with `PERF_SAMPLE_WEIGHT`).
pub const SAMPLE_WEIGHT_STRUCT: u64 = b::PERF_SAMPLE_WEIGHT_STRUCT as u64;

// `perf_event_attr.read_format` bits.
/// `PERF_FORMAT_TOTAL_TIME_ENABLED`.
pub const FORMAT_TOTAL_TIME_ENABLED: u64 = b::PERF_FORMAT_TOTAL_TIME_ENABLED as u64;
/// `PERF_FORMAT_TOTAL_TIME_RUNNING`.
pub const FORMAT_TOTAL_TIME_RUNNING: u64 = b::PERF_FORMAT_TOTAL_TIME_RUNNING as u64;
/// `PERF_FORMAT_ID`.
pub const FORMAT_ID: u64 = b::PERF_FORMAT_ID as u64;
/// `PERF_FORMAT_GROUP`.
pub const FORMAT_GROUP: u64 = b::PERF_FORMAT_GROUP as u64;
/// `PERF_FORMAT_LOST`.
pub const FORMAT_LOST: u64 = b::PERF_FORMAT_LOST as u64;

// `perf_event_attr.branch_sample_type` bits that change the sample layout.
/// `PERF_SAMPLE_BRANCH_HW_INDEX`: a `u64 hw_idx` follows the branch count.
pub const BRANCH_HW_INDEX: u64 = b::PERF_SAMPLE_BRANCH_HW_INDEX as u64;
/// `PERF_SAMPLE_BRANCH_COUNTERS`: `nr` u64 counters follow the branch entries.
pub const BRANCH_COUNTERS: u64 = b::PERF_SAMPLE_BRANCH_COUNTERS as u64;

/// `PERF_SAMPLE_REGS_ABI_NONE`: no registers follow the ABI word.
pub const REGS_ABI_NONE: u64 = b::PERF_SAMPLE_REGS_ABI_NONE as u64;

// `perf_event_attr` flag bits (the bitfield word at byte 40).
/// `inherit`.
pub const ATTR_INHERIT: u64 = 1 << 1;
/// `exclude_user`.
pub const ATTR_EXCLUDE_USER: u64 = 1 << 4;
/// `exclude_kernel`.
pub const ATTR_EXCLUDE_KERNEL: u64 = 1 << 5;
/// `freq`: the period field holds a frequency.
pub const ATTR_FREQ: u64 = 1 << 10;
/// `sample_id_all`: non-sample records carry a sample-id trailer.
pub const ATTR_SAMPLE_ID_ALL: u64 = 1 << 18;

// Kernel record types (`perf_event_header.type`).
/// `PERF_RECORD_MMAP`.
pub const RECORD_MMAP: u32 = b::PERF_RECORD_MMAP as u32;
/// `PERF_RECORD_LOST`.
pub const RECORD_LOST: u32 = b::PERF_RECORD_LOST as u32;
/// `PERF_RECORD_COMM`.
pub const RECORD_COMM: u32 = b::PERF_RECORD_COMM as u32;
/// `PERF_RECORD_EXIT`.
pub const RECORD_EXIT: u32 = b::PERF_RECORD_EXIT as u32;
/// `PERF_RECORD_THROTTLE`.
pub const RECORD_THROTTLE: u32 = b::PERF_RECORD_THROTTLE as u32;
/// `PERF_RECORD_UNTHROTTLE`.
pub const RECORD_UNTHROTTLE: u32 = b::PERF_RECORD_UNTHROTTLE as u32;
/// `PERF_RECORD_FORK`.
pub const RECORD_FORK: u32 = b::PERF_RECORD_FORK as u32;
/// `PERF_RECORD_SAMPLE`.
pub const RECORD_SAMPLE: u32 = b::PERF_RECORD_SAMPLE as u32;
/// `PERF_RECORD_MMAP2`.
pub const RECORD_MMAP2: u32 = b::PERF_RECORD_MMAP2 as u32;
/// `PERF_RECORD_LOST_SAMPLES`.
pub const RECORD_LOST_SAMPLES: u32 = b::PERF_RECORD_LOST_SAMPLES as u32;
/// `PERF_RECORD_SWITCH`.
pub const RECORD_SWITCH: u32 = b::PERF_RECORD_SWITCH as u32;
/// `PERF_RECORD_SWITCH_CPU_WIDE`.
pub const RECORD_SWITCH_CPU_WIDE: u32 = b::PERF_RECORD_SWITCH_CPU_WIDE as u32;

// Record types the perf tool adds (tools/perf/util/event.h, `enum perf_user_event_type`).
/// First type number of the perf tool's own records; below it, the kernel's.
pub const USER_RECORD_START: u32 = 64;
/// `PERF_RECORD_HEADER_ATTR` (pipe mode: an attr and its ids).
pub const RECORD_HEADER_ATTR: u32 = 64;
/// `PERF_RECORD_FINISHED_ROUND`: every record queued before it may be sorted and flushed.
pub const RECORD_FINISHED_ROUND: u32 = 68;
/// `PERF_RECORD_AUXTRACE`: its AUX data follows the record, outside `header.size`.
pub const RECORD_AUXTRACE: u32 = 71;
/// `PERF_RECORD_EVENT_UPDATE` (pipe mode: an event's name, unit, scale or cpus).
pub const RECORD_EVENT_UPDATE: u32 = 78;
/// `PERF_RECORD_HEADER_FEATURE` (pipe mode: one feature section).
pub const RECORD_HEADER_FEATURE: u32 = 80;
/// `PERF_RECORD_COMPRESSED`: zstd-compressed records (`perf record -z`).
pub const RECORD_COMPRESSED: u32 = 81;
/// `PERF_RECORD_COMPRESSED2`: the same, with an explicit data size.
pub const RECORD_COMPRESSED2: u32 = 83;

/// `PERF_EVENT_UPDATE__NAME`: an EVENT_UPDATE record naming an event.
pub const EVENT_UPDATE_NAME: u64 = 2;

// `perf_event_header.misc`.
/// `PERF_RECORD_MISC_CPUMODE_MASK`.
pub const MISC_CPUMODE_MASK: u16 = b::PERF_RECORD_MISC_CPUMODE_MASK as u16;
/// `PERF_RECORD_MISC_MMAP_DATA` (MMAP records): a data mapping.
pub const MISC_MMAP_DATA: u16 = b::PERF_RECORD_MISC_MMAP_DATA as u16;
/// `PERF_RECORD_MISC_COMM_EXEC` (COMM records): the name changed by exec.
pub const MISC_COMM_EXEC: u16 = b::PERF_RECORD_MISC_COMM_EXEC as u16;
/// `PERF_RECORD_MISC_SWITCH_OUT` (SWITCH records).
pub const MISC_SWITCH_OUT: u16 = b::PERF_RECORD_MISC_SWITCH_OUT as u16;
/// `PERF_RECORD_MISC_SWITCH_OUT_PREEMPT` (SWITCH records).
pub const MISC_SWITCH_OUT_PREEMPT: u16 = b::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT as u16;
/// `PERF_RECORD_MISC_MMAP_BUILD_ID` (MMAP2 records): a build id instead of device/inode.
pub const MISC_MMAP_BUILD_ID: u16 = b::PERF_RECORD_MISC_MMAP_BUILD_ID as u16;

// Callchain context markers.
/// `PERF_CONTEXT_HV`.
pub const CONTEXT_HV: u64 = b::PERF_CONTEXT_HV as u64;
/// `PERF_CONTEXT_KERNEL`.
pub const CONTEXT_KERNEL: u64 = b::PERF_CONTEXT_KERNEL as u64;
/// `PERF_CONTEXT_USER`.
pub const CONTEXT_USER: u64 = b::PERF_CONTEXT_USER as u64;
/// `PERF_CONTEXT_USER_DEFERRED` (the user part comes later in its own record).
pub const CONTEXT_USER_DEFERRED: u64 = b::PERF_CONTEXT_USER_DEFERRED as u64;
/// `PERF_CONTEXT_GUEST`.
pub const CONTEXT_GUEST: u64 = b::PERF_CONTEXT_GUEST as u64;
/// `PERF_CONTEXT_GUEST_KERNEL`.
pub const CONTEXT_GUEST_KERNEL: u64 = b::PERF_CONTEXT_GUEST_KERNEL as u64;
/// `PERF_CONTEXT_GUEST_USER`.
pub const CONTEXT_GUEST_USER: u64 = b::PERF_CONTEXT_GUEST_USER as u64;
/// `PERF_CONTEXT_MAX`: callchain entries at or above it are context markers, not IPs.
pub const CONTEXT_MAX: u64 = b::PERF_CONTEXT_MAX as u64;

// perf.data feature sections (tools/perf/util/header.h, `HEADER_*`).
/// `HEADER_BUILD_ID`: the build ids of the files with samples.
pub const FEAT_BUILD_ID: u32 = 2;
/// `PERF_RECORD_MISC_BUILD_ID_SIZE`: a build-id entry carries its size.
pub const MISC_BUILD_ID_SIZE: u16 = 1 << 15;
/// `HEADER_HOSTNAME`.
pub const FEAT_HOSTNAME: u32 = 3;
/// `HEADER_OSRELEASE`.
pub const FEAT_OSRELEASE: u32 = 4;
/// `HEADER_VERSION`: the perf tool's version.
pub const FEAT_VERSION: u32 = 5;
/// `HEADER_ARCH`.
pub const FEAT_ARCH: u32 = 6;
/// `HEADER_CMDLINE`: perf's own command line.
pub const FEAT_CMDLINE: u32 = 11;
/// `HEADER_EVENT_DESC`: every attr with its name and ids.
pub const FEAT_EVENT_DESC: u32 = 12;
/// `HEADER_GROUP_DESC`: the event groups.
pub const FEAT_GROUP_DESC: u32 = 17;
/// `HEADER_COMPRESSED`: records are zstd-compressed.
pub const FEAT_COMPRESSED: u32 = 27;
/// Bits in the header's feature bitmap.
pub const FEAT_BITS: u32 = 256;

// `perf_event_attr.type` and the names perf gives to generic events.
/// `PERF_TYPE_HARDWARE`.
pub const TYPE_HARDWARE: u32 = b::PERF_TYPE_HARDWARE as u32;
/// `PERF_TYPE_SOFTWARE`.
pub const TYPE_SOFTWARE: u32 = b::PERF_TYPE_SOFTWARE as u32;
/// `PERF_COUNT_SW_DUMMY`: perf's tracking-only event, which never samples.
pub const SW_DUMMY: u64 = b::PERF_COUNT_SW_DUMMY as u64;
