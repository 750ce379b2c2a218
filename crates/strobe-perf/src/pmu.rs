//! What this machine's perf subsystem offers: dynamic PMU types, whether a hardware PMU
//! exists, and the `perf_event_paranoid` level. Reads sysfs/procfs; never opens files in
//! the target's name.
//!
//! Owns those questions and their answers (the hardware PMU probe is cached for the
//! process). It must never change the machine's settings, never open an event beyond the
//! one counting probe it closes at once, and never turn an unreadable file into a panic
//! (an unknown answer is `None`, `false` or an `io::Error`).

use std::io;
use std::os::fd::FromRawFd;
use std::path::Path;
use std::sync::OnceLock;

use crate::sys;

const EVENT_SOURCES: &str = "/sys/bus/event_source/devices";

/// The value of `kernel.perf_event_paranoid`, if readable.
pub fn paranoid_level() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").ok()?.trim().parse().ok()
}

/// True when the calling process has `CAP_PERFMON` or `CAP_SYS_ADMIN` in its effective set
/// (root normally has both), which lifts the paranoid restrictions.
pub fn perfmon_capable() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return false };
    let Some(hex) = status.lines().find_map(|l| l.strip_prefix("CapEff:")) else { return false };
    let Ok(caps) = u64::from_str_radix(hex.trim(), 16) else { return false };
    const CAP_SYS_ADMIN: u64 = 21;
    const CAP_PERFMON: u64 = 38;
    caps & (1 << CAP_SYS_ADMIN) != 0 || caps & (1 << CAP_PERFMON) != 0
}

/// Whether events may count kernel activity here: with CAP_PERFMON/CAP_SYS_ADMIN or at
/// `perf_event_paranoid <= 1`. Without it strobe counts user space only (`:u`).
pub fn kernel_counting_allowed() -> bool {
    perfmon_capable() || paranoid_level().is_some_and(|l| l <= 1)
}

/// The `type` number of a dynamic PMU (`uprobe`, `kprobe`, `breakpoint`, ...), read from
/// `/sys/bus/event_source/devices/NAME/type`.
pub fn pmu_type(name: &str) -> io::Result<u32> {
    let path = Path::new(EVENT_SOURCES).join(name).join("type");
    let s = std::fs::read_to_string(&path)?;
    s.trim().parse().map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a number: {s:?}", path.display()),
        )
    })
}

/// A bit range of a PMU format field, e.g. `config:0` or `config:32-63`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FormatField {
    /// Which attr word: 0 = `config`, 1 = `config1`, 2 = `config2`.
    pub word: u8,
    /// Lowest bit of the field.
    pub lo: u8,
    /// Highest bit of the field (inclusive).
    pub hi: u8,
}

impl FormatField {
    /// Parses sysfs format text such as `config:32-63`.
    pub fn parse(s: &str) -> Option<FormatField> {
        let (word, bits) = s.trim().split_once(':')?;
        let word = match word {
            "config" => 0,
            "config1" => 1,
            "config2" => 2,
            _ => return None,
        };
        let (lo, hi) = match bits.split_once('-') {
            Some((lo, hi)) => (lo.parse().ok()?, hi.parse().ok()?),
            None => {
                let b = bits.parse().ok()?;
                (b, b)
            }
        };
        (lo <= hi && hi < 64).then_some(FormatField { word, lo, hi })
    }

    /// Places `value` into this field's bits of a u64.
    pub fn encode(&self, value: u64) -> u64 {
        let width = u32::from(self.hi - self.lo) + 1;
        let mask = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
        (value & mask) << self.lo
    }
}

/// Reads `/sys/bus/event_source/devices/PMU/format/FIELD`.
pub fn pmu_format(pmu: &str, field: &str) -> io::Result<FormatField> {
    let path = Path::new(EVENT_SOURCES).join(pmu).join("format").join(field);
    let s = std::fs::read_to_string(&path)?;
    FormatField::parse(&s).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: unexpected format {s:?}", path.display()),
        )
    })
}

/// Whether a hardware PMU can count `cycles` for this thread. Probed once (by opening and
/// closing a counting event) and cached. On this project's reference VM it is absent.
pub fn hardware_pmu_available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let mut attr = sys::new_attr(sys::PERF_TYPE_HARDWARE, sys::PERF_COUNT_HW_CPU_CYCLES as u64);
        // The raw call, not `PerfEvent::open`: a refusal here is an answer, not an error to
        // diagnose, and this module sits below the event layer.
        // SAFETY: `attr` is a valid, initialised attr with its size set by `new_attr` and
        // no pointers; pid 0 / cpu -1 is the calling thread on any CPU; no group.
        let fd = unsafe {
            sys::perf_event_open(&mut attr, 0, -1, -1, sys::PERF_FLAG_FD_CLOEXEC as libc::c_ulong)
        };
        if fd < 0 {
            return false;
        }
        // SAFETY: the kernel just returned this fd to us; nothing else owns it.
        drop(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) });
        true
    })
}

/// Why a test or benchmark that needs a hardware PMU skips here, or `None` if it can run.
pub fn hardware_pmu_skip_reason() -> Option<String> {
    (!hardware_pmu_available()).then(|| {
        "no hardware PMU on this machine (perf_event_open(cycles) fails), so hardware counters \
         cannot be measured; software events are used instead"
            .to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_fields() {
        let f = FormatField::parse("config:32-63\n").unwrap();
        assert_eq!(f, FormatField { word: 0, lo: 32, hi: 63 });
        assert_eq!(f.encode(0x10), 0x10 << 32);
        let r = FormatField::parse("config:0").unwrap();
        assert_eq!(r.encode(1), 1);
        assert!(FormatField::parse("config:63-32").is_none());
        assert!(FormatField::parse("bogus:1").is_none());
    }

    #[test]
    fn software_pmu_type_is_readable() {
        assert_eq!(pmu_type("software").unwrap(), sys::PERF_TYPE_SOFTWARE);
    }
}
