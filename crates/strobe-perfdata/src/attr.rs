//! `perf_event_attr` as perf.data stores it, and the facts about record layout that
//! follow from it (where a sample's id and time are, how long a sample-id trailer is).
//!
//! An attr in a file may be shorter than today's struct (written by an older perf) or
//! longer (a newer one): fields it lacks read as zero, fields it has beyond ours are
//! ignored, as the kernel itself does.
//!
//! This module must never read records: it describes them.

use crate::abi::*;
use crate::bytes::{u16_at, u32_at, u64_at};

/// One `perf_event_attr`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attr {
    /// `type`: the PMU (hardware 0, software 1, tracepoint 2, ... or a dynamic PMU).
    pub type_: u32,
    /// `size`: the struct's size as its writer knew it.
    pub size: u32,
    /// `config`: the event within the PMU.
    pub config: u64,
    /// `sample_period`, or `sample_freq` when [`Attr::freq`] is set.
    pub sample_period_or_freq: u64,
    /// `sample_type`: which fields samples carry (`abi::SAMPLE_*`).
    pub sample_type: u64,
    /// `read_format`: the layout of read values (`abi::FORMAT_*`).
    pub read_format: u64,
    /// The flag bitfield word (`disabled`, `inherit`, ..., `abi::ATTR_*`).
    pub flags: u64,
    /// `wakeup_events` / `wakeup_watermark`.
    pub wakeup: u32,
    /// `bp_type`.
    pub bp_type: u32,
    /// `config1` / `bp_addr`.
    pub config1: u64,
    /// `config2` / `bp_len`.
    pub config2: u64,
    /// `branch_sample_type`.
    pub branch_sample_type: u64,
    /// `sample_regs_user`: which user registers samples carry.
    pub sample_regs_user: u64,
    /// `sample_stack_user`: bytes of user stack samples carry.
    pub sample_stack_user: u32,
    /// `clockid`.
    pub clockid: i32,
    /// `sample_regs_intr`: which interrupted registers samples carry.
    pub sample_regs_intr: u64,
    /// `aux_watermark`.
    pub aux_watermark: u32,
    /// `sample_max_stack`.
    pub sample_max_stack: u16,
    /// `aux_sample_size`.
    pub aux_sample_size: u32,
    /// `sig_data`.
    pub sig_data: u64,
    /// `config3`.
    pub config3: u64,
}

impl Attr {
    /// Decodes an attr from its bytes (as many as the file stores for it).
    pub fn parse(b: &[u8]) -> Attr {
        let q = |at| u64_at(b, at).unwrap_or(0);
        let d = |at| u32_at(b, at).unwrap_or(0);
        Attr {
            type_: d(0),
            size: d(4),
            config: q(8),
            sample_period_or_freq: q(16),
            sample_type: q(24),
            read_format: q(32),
            flags: q(40),
            wakeup: d(48),
            bp_type: d(52),
            config1: q(56),
            config2: q(64),
            branch_sample_type: q(72),
            sample_regs_user: q(80),
            sample_stack_user: d(88),
            clockid: d(92) as i32,
            sample_regs_intr: q(96),
            aux_watermark: d(104),
            sample_max_stack: u16_at(b, 108).unwrap_or(0),
            aux_sample_size: d(112),
            sig_data: q(120),
            config3: q(128),
        }
    }

    /// True when the period field is a frequency (`perf record -F`).
    pub fn freq(&self) -> bool {
        self.flags & ATTR_FREQ != 0
    }

    /// The fixed sample period (`-c N`), or `None` in frequency mode.
    pub fn sample_period(&self) -> Option<u64> {
        (!self.freq()).then_some(self.sample_period_or_freq)
    }

    /// True when the event takes samples of its own (a period or a frequency), rather
    /// than being counted only (a group member read by its leader, or a counter).
    pub fn samples(&self) -> bool {
        self.sample_period_or_freq != 0
    }

    /// True for perf's software `dummy` event, which only carries side-band records.
    pub fn is_dummy(&self) -> bool {
        self.type_ == TYPE_SOFTWARE && self.config == SW_DUMMY
    }

    /// True when non-sample records of this event end with a sample-id trailer.
    pub fn sample_id_all(&self) -> bool {
        self.flags & ATTR_SAMPLE_ID_ALL != 0
    }

    /// True when the event excludes the kernel (`:u`).
    pub fn exclude_kernel(&self) -> bool {
        self.flags & ATTR_EXCLUDE_KERNEL != 0
    }

    /// True when the event excludes user space (`:k`).
    pub fn exclude_user(&self) -> bool {
        self.flags & ATTR_EXCLUDE_USER != 0
    }

    /// True when child tasks inherit the event.
    pub fn inherit(&self) -> bool {
        self.flags & ATTR_INHERIT != 0
    }

    fn has(&self, bit: u64) -> bool {
        self.sample_type & bit != 0
    }

    /// Byte offset of the event id in a SAMPLE body, if samples carry one.
    pub(crate) fn sample_id_pos(&self) -> Option<usize> {
        if self.has(SAMPLE_IDENTIFIER) {
            return Some(0);
        }
        if !self.has(SAMPLE_ID) {
            return None;
        }
        let before = [SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME, SAMPLE_ADDR];
        Some(8 * before.iter().filter(|&&b| self.has(b)).count())
    }

    /// Byte offset of the time in a SAMPLE body, if samples carry one.
    pub(crate) fn sample_time_pos(&self) -> Option<usize> {
        if !self.has(SAMPLE_TIME) {
            return None;
        }
        let before = [SAMPLE_IDENTIFIER, SAMPLE_IP, SAMPLE_TID];
        Some(8 * before.iter().filter(|&&b| self.has(b)).count())
    }

    /// Bytes of the sample-id trailer of non-sample records (0 without `sample_id_all`).
    pub(crate) fn trailer_len(&self) -> usize {
        if !self.sample_id_all() {
            return 0;
        }
        let fields =
            [SAMPLE_TID, SAMPLE_TIME, SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_IDENTIFIER];
        8 * fields.iter().filter(|&&b| self.has(b)).count()
    }

    /// Distance from a non-sample record's end back to the event id in its trailer.
    pub(crate) fn trailer_id_from_end(&self) -> Option<usize> {
        if !self.sample_id_all() {
            return None;
        }
        if self.has(SAMPLE_IDENTIFIER) {
            return Some(8);
        }
        if !self.has(SAMPLE_ID) {
            return None;
        }
        let after = [SAMPLE_STREAM_ID, SAMPLE_CPU];
        Some(8 * (1 + after.iter().filter(|&&b| self.has(b)).count()))
    }

    /// Distance from a non-sample record's end back to the time in its trailer.
    pub(crate) fn trailer_time_from_end(&self) -> Option<usize> {
        if !self.sample_id_all() || !self.has(SAMPLE_TIME) {
            return None;
        }
        let after = [SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_IDENTIFIER];
        Some(8 * (1 + after.iter().filter(|&&b| self.has(b)).count()))
    }

    /// The name perf gives a generic event, for files without event names.
    pub fn default_name(&self) -> String {
        const HW: [&str; 10] = [
            "cycles",
            "instructions",
            "cache-references",
            "cache-misses",
            "branches",
            "branch-misses",
            "bus-cycles",
            "stalled-cycles-frontend",
            "stalled-cycles-backend",
            "ref-cycles",
        ];
        const SW: [&str; 12] = [
            "cpu-clock",
            "task-clock",
            "page-faults",
            "context-switches",
            "cpu-migrations",
            "minor-faults",
            "major-faults",
            "alignment-faults",
            "emulation-faults",
            "dummy",
            "bpf-output",
            "cgroup-switches",
        ];
        let table: &[&str] = match self.type_ {
            TYPE_HARDWARE => &HW,
            TYPE_SOFTWARE => &SW,
            _ => &[],
        };
        let base = usize::try_from(self.config)
            .ok()
            .and_then(|i| table.get(i))
            .map_or_else(|| format!("{}:{:#x}", self.type_, self.config), |n| n.to_string());
        match (self.exclude_user(), self.exclude_kernel()) {
            (false, true) => format!("{base}:u"),
            (true, false) => format!("{base}:k"),
            _ => base,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(sample_type: u64, flags: u64) -> Attr {
        Attr { sample_type, flags, ..Attr::default() }
    }

    #[test]
    fn id_and_time_positions_follow_the_kernel_layout() {
        // perf's default: IP|TID|TIME|ID (|PERIOD), sample_id_all.
        let a = attr(SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ID, ATTR_SAMPLE_ID_ALL);
        assert_eq!(a.sample_id_pos(), Some(24));
        assert_eq!(a.sample_time_pos(), Some(16));
        assert_eq!(a.trailer_len(), 24, "tid, time, id");
        assert_eq!(a.trailer_id_from_end(), Some(8));
        assert_eq!(a.trailer_time_from_end(), Some(16));
        // IDENTIFIER is first in samples and last in trailers.
        let a = attr(
            SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TIME | SAMPLE_CPU | SAMPLE_STREAM_ID,
            ATTR_SAMPLE_ID_ALL,
        );
        assert_eq!(a.sample_id_pos(), Some(0));
        assert_eq!(a.sample_time_pos(), Some(16));
        assert_eq!(a.trailer_len(), 32);
        assert_eq!(a.trailer_id_from_end(), Some(8));
        assert_eq!(a.trailer_time_from_end(), Some(32));
        // Without sample_id_all there is no trailer.
        let a = attr(SAMPLE_TIME | SAMPLE_ID, 0);
        assert_eq!((a.trailer_len(), a.trailer_id_from_end()), (0, None));
    }

    #[test]
    fn short_attrs_read_missing_fields_as_zero() {
        let mut b = vec![0u8; 64];
        b[0] = 1; // software
        b[4] = 64; // PERF_ATTR_SIZE_VER0
        b[8] = 1; // task-clock
        b[40] = 1 << 5; // exclude_kernel
        let a = Attr::parse(&b);
        assert_eq!((a.type_, a.size, a.config, a.config3), (1, 64, 1, 0));
        assert_eq!(a.default_name(), "task-clock:u");
        assert_eq!(Attr { type_: 4, config: 0x1234, ..a }.default_name(), "4:0x1234:u");
    }
}
