//! perf's event names and what they mean to the kernel: (type, config) pairs, with the
//! aliases perf accepts. Also the advice strobe gives when a hardware event is missing.
//!
//! Owns the name table and the software substitute for each hardware event. It must never
//! probe the machine: whether an event exists here is `pmu.rs`'s to say.

use crate::sys;

/// Which PMU an event name belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Counted by the kernel in software; available everywhere.
    Software,
    /// Counted by the CPU's PMU; absent in many VMs.
    Hardware,
}

/// A named event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NamedEvent {
    /// The canonical name, as strobe prints it.
    pub name: &'static str,
    /// `perf_event_attr.type`.
    pub type_: u32,
    /// `perf_event_attr.config`.
    pub config: u64,
    /// Software or hardware.
    pub kind: EventKind,
    /// True for time-based events whose count is in nanoseconds.
    pub is_time: bool,
}

macro_rules! ev {
    ($name:literal, $ty:ident, $cfg:ident, $kind:ident, $time:literal) => {
        NamedEvent {
            name: $name,
            type_: sys::$ty,
            config: sys::$cfg as u64,
            kind: EventKind::$kind,
            is_time: $time,
        }
    };
}

/// Every event name strobe knows, canonical names first.
pub const EVENTS: &[NamedEvent] = &[
    ev!("task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, Software, true),
    ev!("cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, Software, true),
    ev!("page-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, Software, false),
    ev!("minor-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MIN, Software, false),
    ev!("major-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MAJ, Software, false),
    ev!("context-switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, Software, false),
    ev!("cpu-migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS, Software, false),
    ev!("alignment-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_ALIGNMENT_FAULTS, Software, false),
    ev!("emulation-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_EMULATION_FAULTS, Software, false),
    ev!("cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, Hardware, false),
    ev!("instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, Hardware, false),
    ev!("cache-references", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES, Hardware, false),
    ev!("cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, Hardware, false),
    ev!(
        "branch-instructions",
        PERF_TYPE_HARDWARE,
        PERF_COUNT_HW_BRANCH_INSTRUCTIONS,
        Hardware,
        false
    ),
    ev!("branch-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES, Hardware, false),
    ev!("bus-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BUS_CYCLES, Hardware, false),
    ev!(
        "stalled-cycles-frontend",
        PERF_TYPE_HARDWARE,
        PERF_COUNT_HW_STALLED_CYCLES_FRONTEND,
        Hardware,
        false
    ),
    ev!(
        "stalled-cycles-backend",
        PERF_TYPE_HARDWARE,
        PERF_COUNT_HW_STALLED_CYCLES_BACKEND,
        Hardware,
        false
    ),
    ev!("ref-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_REF_CPU_CYCLES, Hardware, false),
];

/// Aliases perf accepts, mapped to canonical names.
pub const ALIASES: &[(&str, &str)] = &[
    ("faults", "page-faults"),
    ("cs", "context-switches"),
    ("migrations", "cpu-migrations"),
    ("cpu-cycles", "cycles"),
    ("branches", "branch-instructions"),
    ("idle-cycles-frontend", "stalled-cycles-frontend"),
    ("idle-cycles-backend", "stalled-cycles-backend"),
];

/// Looks up an event by canonical name or alias (case-sensitive, as perf).
pub fn lookup(name: &str) -> Option<&'static NamedEvent> {
    let canonical = ALIASES.iter().find(|(a, _)| *a == name).map_or(name, |(_, c)| *c);
    EVENTS.iter().find(|e| e.name == canonical)
}

/// The software event to use instead of a missing hardware one, with a reason.
pub fn software_substitute(name: &str) -> (&'static str, &'static str) {
    match lookup(name).map(|e| e.name) {
        Some("cycles" | "ref-cycles" | "bus-cycles" | "instructions") => {
            ("task-clock", "task-clock samples CPU time, which is what cycles approximate")
        }
        Some("cache-misses" | "cache-references") => {
            ("page-faults", "page faults are the memory events counted in software")
        }
        Some("branch-misses" | "branch-instructions") => {
            ("task-clock", "branches have no software counter; sample time with task-clock")
        }
        _ => ("task-clock", "task-clock is the software sampling event"),
    }
}

/// The known names closest to `name` (edit distance at most 3), best first, for
/// "did you mean" hints.
pub fn suggestions(name: &str) -> Vec<&'static str> {
    let mut scored: Vec<(usize, &'static str)> = EVENTS
        .iter()
        .map(|e| e.name)
        .chain(ALIASES.iter().map(|(a, _)| *a))
        .map(|n| (edit_distance(name, n), n))
        .filter(|(d, _)| *d <= 3)
        .collect();
    scored.sort();
    scored.into_iter().map(|(_, n)| n).take(3).collect()
}

/// Levenshtein distance between two strings (by chars).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_names_and_aliases() {
        assert_eq!(lookup("task-clock").unwrap().config, sys::PERF_COUNT_SW_TASK_CLOCK as u64);
        assert_eq!(lookup("faults").unwrap().name, "page-faults");
        assert_eq!(lookup("cpu-cycles").unwrap().kind, EventKind::Hardware);
        assert!(lookup("bogus").is_none());
    }

    #[test]
    fn suggests_close_names() {
        assert_eq!(suggestions("page-fault").first(), Some(&"page-faults"));
        assert_eq!(suggestions("instrutions").first(), Some(&"instructions"));
        assert!(suggestions("zzzzzzzzzzzz").is_empty());
    }
}
