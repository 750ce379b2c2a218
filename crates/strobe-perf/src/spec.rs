//! Event specs in perf's syntax, e.g. `{task-clock/period=1ms,window=20us/,page-faults}`.
//!
//! A spec names one event group: the first event leads and samples, the others are
//! counted alongside it and read with it. Accepted forms:
//!
//! - a group in braces with an optional modifier for all members:
//!   `{cycles/period=999700,window=300/,instructions,branch-misses}:u`
//! - a plain comma list, read as one group: `task-clock/period=1ms/,page-faults`
//! - bare names: `page-faults,context-switches` (when the first event cannot lead a
//!   sampling group by itself, the default leader, task-clock or cycles, is put in front)
//! - raw hardware events as `rHEX` (`r003c`).
//!
//! Terms (leader only): `period=` (the long period), `window=` with the aliases
//! `alt-period=` and `hf-period=` (the names in the kernel patch series), and `jitter=`
//! (random extra on each long period). Values are plain counts, or for time events
//! (task-clock, cpu-clock) a number with `ns`, `us`, `ms` or `s` (a plain number is ns).
//! Modifiers: `:u` (user only), `:k` (kernel only), `:uk`; `S` is accepted and changes
//! nothing (strobe always reads the whole group at each sample). There is no `freq=`:
//! strobe samples at a period.
//!
//! Parsing is pure; [`GroupSpec::check_pmu`] diagnoses hardware events on a machine
//! without a PMU, and [`GroupSpec::counting_attr`] / [`GroupSpec::leader_attr`] build the
//! `perf_event_attr`s the recorder and the agent open.
//!
//! Owns the spec grammar, its parsed form ([`GroupSpec`]), printing it back, and the attrs
//! built from it. It must never open an event or read the machine's state itself (the
//! caller passes whether a hardware PMU and kernel counting are available), and never
//! panic on any text: every malformed spec is a [`SpecError`] that says what is wrong
//! and what is accepted.

use crate::names::{self, EventKind};
use crate::sys::{self, perf_event_attr};

/// The most events in a group (leader included); matches the record format's limit.
pub const MAX_GROUP: usize = 8;

/// Default window for a time-based leader: 150 us. What a window holds that is not the
/// target's is a fixed amount per window, whatever its length: the handler's return
/// (2-4 us on this VM) and, for a window that begins inside a system call or a fault,
/// the signal's delivery from the call's tail (10-12 us). At 50 us that was 8-24% of the
/// net window, so a few microseconds of difference between the calibration's figures and
/// the target's moved every rate by as much; at 150 us it is 3-6%. The number of windows
/// does not change (the cycle follows the overhead budget, not the window); the price is
/// more windows that straddle two functions and are dropped (15% of the bundled
/// workload's, against 5% at 50 us). Measured in docs/BENCHMARKS.md ("The default
/// length: 150 us"). The kernel clamps task-clock periods below 10 us.
pub const DEFAULT_TIME_WINDOW_NS: u64 = 150_000;
/// Default window for a hardware leader, in its counts (the kernel patch series' 300).
pub const DEFAULT_HW_WINDOW: u64 = 300;
/// The kernel's shortest period for hrtimer-based software events (task-clock, cpu-clock).
pub const MIN_TIMER_PERIOD_NS: u64 = 10_000;

/// Which privilege levels an event counts, from perf's modifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privilege {
    /// No modifier: user and kernel when the system allows kernel counting, else user only.
    Default,
    /// `:u`.
    User,
    /// `:k`.
    Kernel,
    /// `:uk`.
    UserKernel,
}

impl Privilege {
    /// `(exclude_user, exclude_kernel)` given whether kernel counting is allowed here.
    pub fn excludes(self, kernel_allowed: bool) -> (bool, bool) {
        match self {
            Privilege::Default => (false, !kernel_allowed),
            Privilege::User => (false, true),
            Privilege::Kernel => (true, false),
            Privilege::UserKernel => (false, false),
        }
    }
}

/// One event of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    /// Canonical name (`page-faults` for `faults`), or `rHEX` for a raw event.
    pub name: String,
    /// `perf_event_attr.type`.
    pub type_: u32,
    /// `perf_event_attr.config`.
    pub config: u64,
    /// Software or hardware.
    pub kind: EventKind,
    /// The count is in nanoseconds.
    pub is_time: bool,
    /// Privilege levels counted.
    pub privilege: Privilege,
}

impl EventSpec {
    fn from_named(e: &names::NamedEvent) -> EventSpec {
        EventSpec {
            name: e.name.to_string(),
            type_: e.type_,
            config: e.config,
            kind: e.kind,
            is_time: e.is_time,
            privilege: Privilege::Default,
        }
    }

    /// True if strobe can derive this event's period from the overhead budget: a time
    /// event, or a hardware event (whose rate per ns the recorder measures).
    pub fn can_lead_without_period(&self) -> bool {
        self.is_time || self.kind == EventKind::Hardware
    }
}

/// A parsed event group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSpec {
    /// Leader first.
    pub events: Vec<EventSpec>,
    /// `period=`, in leader units (ns for time events).
    pub period: Option<u64>,
    /// `window=` (or an alias), in leader units; `Some(0)` means no windows.
    pub window: Option<u64>,
    /// `jitter=`, in leader units.
    pub jitter: Option<u64>,
    /// True when the default leader was put in front of the user's events.
    pub leader_added: bool,
}

/// Why a spec was refused. Each message is one line that says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Nothing to parse.
    #[error("empty event spec; give events such as -e '{{task-clock,page-faults}}'")]
    Empty,
    /// An event name strobe does not know.
    #[error(
        "unknown event '{name}'{}; run `perf list sw hw` for the names this machine knows",
        did_you_mean(suggestions)
    )]
    UnknownEvent {
        /// The name as written.
        name: String,
        /// Close known names.
        suggestions: Vec<&'static str>,
    },
    /// A term strobe does not know.
    #[error("unknown term '{term}' on '{event}'; strobe accepts period=, window= (alias alt-period=, hf-period=) and jitter=")]
    UnknownTerm {
        /// The term.
        term: String,
        /// Its event.
        event: String,
    },
    /// `freq=` or `freq`.
    #[error("'{event}': strobe samples at a period, not a frequency; write period= (e.g. period=1ms) instead of freq=")]
    Frequency {
        /// The event.
        event: String,
    },
    /// A value that is not a number with an accepted unit.
    #[error("'{term}={value}' on '{event}': {why}")]
    BadValue {
        /// The term.
        term: String,
        /// The value as written.
        value: String,
        /// The event.
        event: String,
        /// What is wrong.
        why: String,
    },
    /// A sampling term on a member.
    #[error("'{term}=' on '{event}': only the group's first event (the sampling leader) takes sampling terms; move it to the leader")]
    TermOnMember {
        /// The term.
        term: String,
        /// The member.
        event: String,
    },
    /// A modifier strobe does not support.
    #[error(
        "modifier ':{modifiers}' on '{event}' is not supported; strobe accepts :u, :k, :uk (and S)"
    )]
    BadModifier {
        /// The modifiers as written.
        modifiers: String,
        /// The event (or group).
        event: String,
    },
    /// Malformed syntax.
    #[error("cannot parse event spec '{spec}' at character {pos}: {why}")]
    Syntax {
        /// The whole spec.
        spec: String,
        /// 0-based character offset.
        pos: usize,
        /// What was expected.
        why: &'static str,
    },
    /// Too many events.
    #[error("{n} events in one group; strobe reads at most {MAX_GROUP} (leader included)")]
    TooMany {
        /// Events given.
        n: usize,
    },
    /// A leader whose period cannot come from the budget.
    #[error("'{event}' cannot lead the sampling group without period= (strobe derives periods only for time and cycle events); add period=, or put task-clock first")]
    NeedsPeriod {
        /// The leader.
        event: String,
    },
    /// Window not shorter than the period.
    #[error("window={window} is not shorter than period={period} on '{event}'; the window must be the short one")]
    WindowNotShorter {
        /// The leader.
        event: String,
        /// Its window.
        window: u64,
        /// Its period.
        period: u64,
    },
    /// A hardware event on a machine without a hardware PMU.
    #[error("{event}: this machine has no hardware PMU for this event; use the software event '{substitute}' instead ({reason})")]
    NoHardwarePmu {
        /// The event.
        event: String,
        /// What to use instead.
        substitute: &'static str,
        /// Why that one.
        reason: &'static str,
    },
}

fn did_you_mean(s: &[&str]) -> String {
    match s {
        [] => String::new(),
        [one] => format!("; did you mean '{one}'?"),
        many => format!(
            "; did you mean {}?",
            many.iter().map(|m| format!("'{m}'")).collect::<Vec<_>>().join(" or ")
        ),
    }
}

/// The default group: `{task-clock,page-faults,context-switches}`, or with a hardware PMU
/// `{cycles,instructions,branch-misses,cache-references,cache-misses,page-faults}`.
pub fn default_group(hardware: bool) -> GroupSpec {
    let names: &[&str] = if hardware {
        &[
            "cycles",
            "instructions",
            "branch-misses",
            "cache-references",
            "cache-misses",
            "page-faults",
        ]
    } else {
        &["task-clock", "page-faults", "context-switches"]
    };
    GroupSpec {
        events: names.iter().filter_map(|n| names::lookup(n)).map(EventSpec::from_named).collect(),
        period: None,
        window: None,
        jitter: None,
        leader_added: false,
    }
}

/// The default sampling leader's name.
pub fn default_leader(hardware: bool) -> &'static str {
    if hardware {
        "cycles"
    } else {
        "task-clock"
    }
}

/// Parses `spec`; `hardware` says whether a hardware PMU exists (it picks the default
/// leader put in front of events that cannot lead).
pub fn parse(spec: &str, hardware: bool) -> Result<GroupSpec, SpecError> {
    let p = Parser { s: spec, chars: spec.char_indices().collect(), i: 0 };
    p.parse(hardware)
}

struct RawEvent {
    name: String,
    terms: Vec<(String, String)>,
    modifiers: Option<String>,
}

struct Parser<'a> {
    s: &'a str,
    chars: Vec<(usize, char)>,
    i: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).map(|&(_, c)| c)
    }

    fn err(&self, why: &'static str) -> SpecError {
        SpecError::Syntax { spec: self.s.to_string(), pos: self.i, why }
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.i += 1;
        }
    }

    fn word(&mut self) -> String {
        let mut w = String::new();
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                w.push(c);
                self.i += 1;
            } else {
                break;
            }
        }
        w
    }

    fn modifiers(&mut self) -> Result<Option<String>, SpecError> {
        if self.peek() != Some(':') {
            return Ok(None);
        }
        self.i += 1;
        let m = self.word();
        if m.is_empty() {
            return Err(self.err("expected modifiers after ':'"));
        }
        Ok(Some(m))
    }

    fn event(&mut self) -> Result<RawEvent, SpecError> {
        self.skip_ws();
        let name = self.word();
        if name.is_empty() {
            return Err(self.err("expected an event name"));
        }
        let mut terms = Vec::new();
        if self.peek() == Some('/') {
            self.i += 1;
            loop {
                self.skip_ws();
                if self.peek() == Some('/') {
                    self.i += 1;
                    break;
                }
                let key = self.word();
                if key.is_empty() {
                    return Err(self.err("expected a term such as period=1ms"));
                }
                let mut value = String::new();
                if self.peek() == Some('=') {
                    self.i += 1;
                    value = self.word();
                    if value.is_empty() {
                        return Err(self.err("expected a value after '='"));
                    }
                }
                terms.push((key, value));
                self.skip_ws();
                match self.peek() {
                    Some(',') => self.i += 1,
                    Some('/') => {}
                    None => return Err(self.err("unterminated terms: expected a closing '/'")),
                    Some(_) => return Err(self.err("expected ',' or '/' after a term")),
                }
            }
        }
        let modifiers = self.modifiers()?;
        self.skip_ws();
        Ok(RawEvent { name, terms, modifiers })
    }

    fn list(&mut self, closing: Option<char>) -> Result<Vec<RawEvent>, SpecError> {
        let mut out = vec![self.event()?];
        loop {
            match self.peek() {
                Some(',') => {
                    self.i += 1;
                    out.push(self.event()?);
                }
                c if c == closing => return Ok(out),
                Some('{') => {
                    return Err(self.err(
                        "strobe records one event group; nested or second groups are not supported",
                    ))
                }
                _ => return Err(self.err("expected ',' between events")),
            }
        }
    }

    fn parse(mut self, hardware: bool) -> Result<GroupSpec, SpecError> {
        self.skip_ws();
        if self.peek().is_none() {
            return Err(SpecError::Empty);
        }
        let (raw, group_mods) = if self.peek() == Some('{') {
            self.i += 1;
            let raw = self.list(Some('}'))?;
            self.i += 1; // '}'
            let m = self.modifiers()?;
            self.skip_ws();
            if self.peek() == Some(',') {
                return Err(
                    self.err("strobe records one event group; put every event inside the braces")
                );
            }
            if self.peek().is_some() {
                return Err(self.err("unexpected text after the group"));
            }
            (raw, m)
        } else {
            let raw = self.list(None)?;
            (raw, None)
        };
        build(raw, group_mods, hardware)
    }
}

fn privilege(mods: &str, event: &str) -> Result<Privilege, SpecError> {
    let (mut u, mut k) = (false, false);
    for c in mods.chars() {
        match c {
            'u' => u = true,
            'k' => k = true,
            'S' | 'h' => {}
            _ => {
                return Err(SpecError::BadModifier {
                    modifiers: mods.to_string(),
                    event: event.to_string(),
                })
            }
        }
    }
    Ok(match (u, k) {
        (true, false) => Privilege::User,
        (false, true) => Privilege::Kernel,
        (true, true) => Privilege::UserKernel,
        (false, false) => Privilege::Default,
    })
}

fn lookup_event(name: &str) -> Result<EventSpec, SpecError> {
    if let Some(e) = names::lookup(name) {
        return Ok(EventSpec::from_named(e));
    }
    if let Some(hex) = name.strip_prefix('r') {
        if !hex.is_empty() && hex.len() <= 16 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
            if let Ok(config) = u64::from_str_radix(hex, 16) {
                return Ok(EventSpec {
                    name: name.to_string(),
                    type_: sys::PERF_TYPE_RAW,
                    config,
                    kind: EventKind::Hardware,
                    is_time: false,
                    privilege: Privilege::Default,
                });
            }
        }
    }
    Err(SpecError::UnknownEvent { name: name.to_string(), suggestions: names::suggestions(name) })
}

/// Parses a period-like value for `event`: a count, or a time with a unit for time events.
pub fn parse_quantity(term: &str, value: &str, event: &EventSpec) -> Result<u64, SpecError> {
    let bad = |why: String| SpecError::BadValue {
        term: term.to_string(),
        value: value.to_string(),
        event: event.name.clone(),
        why,
    };
    let digits_end = value.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(value.len());
    let (num, unit) = value.split_at(digits_end);
    if num.is_empty() {
        return Err(bad("expected a number, e.g. 1ms or 1000000".into()));
    }
    let scale = match unit {
        "" => 1.0,
        "ns" | "us" | "ms" | "s" if !event.is_time => {
            return Err(bad(format!(
                "'{}' counts events, not time; give a plain count (e.g. {term}=1000000)",
                event.name
            )))
        }
        "ns" => 1.0,
        "us" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        other => {
            return Err(bad(if event.is_time {
                format!("unknown unit '{other}'; use ns, us, ms or s")
            } else {
                format!("unknown unit '{other}'; '{}' takes a plain count", event.name)
            }))
        }
    };
    if num.contains('.') && unit.is_empty() {
        return Err(bad("a count must be a whole number".into()));
    }
    let v: f64 = num.parse().map_err(|_| bad("expected a number, e.g. 1ms or 1000000".into()))?;
    let out = (v * scale).round();
    if !(0.0..1.8e19).contains(&out) {
        return Err(bad("out of range".into()));
    }
    Ok(out as u64)
}

fn build(
    raw: Vec<RawEvent>,
    group_mods: Option<String>,
    hardware: bool,
) -> Result<GroupSpec, SpecError> {
    let mut events = Vec::with_capacity(raw.len() + 1);
    let (mut period, mut window, mut jitter) = (None, None, None);
    let mut leader_has_terms = false;
    for (i, r) in raw.iter().enumerate() {
        let mut e = lookup_event(&r.name)?;
        let mods = r.modifiers.as_deref().or(group_mods.as_deref());
        if let Some(m) = mods {
            e.privilege = privilege(m, &r.name)?;
        }
        for (key, value) in &r.terms {
            let slot = match key.as_str() {
                "period" => &mut period,
                "window" | "alt-period" | "hf-period" => &mut window,
                "jitter" | "alt-period-jitter" => &mut jitter,
                "freq" => return Err(SpecError::Frequency { event: e.name.clone() }),
                _ => {
                    return Err(SpecError::UnknownTerm { term: key.clone(), event: e.name.clone() })
                }
            };
            if i > 0 {
                return Err(SpecError::TermOnMember { term: key.clone(), event: e.name.clone() });
            }
            if value.is_empty() {
                return Err(SpecError::BadValue {
                    term: key.clone(),
                    value: String::new(),
                    event: e.name.clone(),
                    why: "expected a value, e.g. period=1ms".into(),
                });
            }
            *slot = Some(parse_quantity(key, value, &e)?);
            leader_has_terms = true;
        }
        events.push(e);
    }
    let mut leader_added = false;
    if let Some(first) = events.first() {
        if !leader_has_terms && !first.can_lead_without_period() {
            let mut leader = lookup_event(default_leader(hardware))?;
            if let Some(m) = group_mods.as_deref() {
                leader.privilege = privilege(m, leader.name.as_str())?;
            }
            events.insert(0, leader);
            leader_added = true;
        }
    }
    if events.len() > MAX_GROUP {
        return Err(SpecError::TooMany { n: events.len() });
    }
    let leader = &events[0];
    if period.is_none() && !leader.can_lead_without_period() {
        return Err(SpecError::NeedsPeriod { event: leader.name.clone() });
    }
    if period == Some(0) {
        return Err(SpecError::BadValue {
            term: "period".into(),
            value: "0".into(),
            event: leader.name.clone(),
            why: "the period must be positive".into(),
        });
    }
    if let (Some(p), Some(w)) = (period, window) {
        if w >= p {
            return Err(SpecError::WindowNotShorter {
                event: leader.name.clone(),
                window: w,
                period: p,
            });
        }
    }
    Ok(GroupSpec { events, period, window, jitter, leader_added })
}

impl GroupSpec {
    /// The sampling leader.
    pub fn leader(&self) -> &EventSpec {
        &self.events[0]
    }

    /// The window to use: the explicit one, else 150 us for time leaders, 300 counts for
    /// hardware leaders, and 0 (plain fixed-period sampling) for anything else.
    pub fn window_or_default(&self) -> u64 {
        self.window.unwrap_or_else(|| {
            let l = self.leader();
            if l.is_time {
                DEFAULT_TIME_WINDOW_NS
            } else if l.kind == EventKind::Hardware {
                DEFAULT_HW_WINDOW
            } else {
                0
            }
        })
    }

    /// Warnings the user should see (settings the kernel will not honour exactly).
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        let l = self.leader();
        let win = self.window_or_default();
        if l.is_time && win > 0 && win < MIN_TIMER_PERIOD_NS {
            w.push(format!(
                "window={win}ns is below the kernel's {MIN_TIMER_PERIOD_NS}ns minimum for {} timers; windows will be at least that long",
                l.name
            ));
        }
        w
    }

    /// The spec written back in perf's syntax (for the header and messages).
    pub fn to_spec_string(&self) -> String {
        let mut parts = Vec::new();
        for (i, e) in self.events.iter().enumerate() {
            let mut s = e.name.clone();
            if i == 0 {
                let mut terms = Vec::new();
                if let Some(p) = self.period {
                    terms.push(format!("period={p}"));
                }
                if let Some(w) = self.window {
                    terms.push(format!("window={w}"));
                }
                if let Some(j) = self.jitter {
                    terms.push(format!("jitter={j}"));
                }
                if !terms.is_empty() {
                    s = format!("{s}/{}/", terms.join(","));
                }
            }
            match e.privilege {
                Privilege::Default => {}
                Privilege::User => s.push_str(":u"),
                Privilege::Kernel => s.push_str(":k"),
                Privilege::UserKernel => s.push_str(":uk"),
            }
            parts.push(s);
        }
        format!("{{{}}}", parts.join(","))
    }

    /// Refuses hardware events when this machine has no hardware PMU, naming the software
    /// event to use instead.
    pub fn check_pmu(&self, hardware_available: bool) -> Result<(), SpecError> {
        if hardware_available {
            return Ok(());
        }
        match self.events.iter().find(|e| e.kind == EventKind::Hardware) {
            Some(e) => {
                let (substitute, reason) = names::software_substitute(&e.name);
                Err(SpecError::NoHardwarePmu { event: e.name.clone(), substitute, reason })
            }
            None => Ok(()),
        }
    }

    /// The counting attr of event `i` (disabled; the leader enables the group).
    /// `kernel_allowed`: whether events without a modifier may count kernel activity.
    pub fn counting_attr(&self, i: usize, kernel_allowed: bool) -> perf_event_attr {
        let e = &self.events[i.min(self.events.len() - 1)];
        let mut attr = sys::new_attr(e.type_, e.config);
        let (xu, xk) = e.privilege.excludes(kernel_allowed);
        attr.set_exclude_user(u64::from(xu));
        attr.set_exclude_kernel(u64::from(xk));
        attr
    }

    /// The sampling leader's attr: sample period `period`, overflow delivered as a
    /// synchronous SIGTRAP to the overflowing thread (`sigtrap`, with `sig_data` in
    /// `si_perf_data`), removed at exec, the group read as `GROUP | TOTAL_TIME_ENABLED |
    /// TOTAL_TIME_RUNNING` (see [`crate::GroupRead`]). Disabled: arm it with
    /// [`crate::PerfEvent::refresh`] (one-shot) or enable it.
    pub fn leader_attr(&self, period: u64, sig_data: u64, kernel_allowed: bool) -> perf_event_attr {
        let mut attr = self.counting_attr(0, kernel_allowed);
        attr.__bindgen_anon_1.sample_period = period.max(1);
        attr.read_format = u64::from(
            sys::PERF_FORMAT_GROUP
                | sys::PERF_FORMAT_TOTAL_TIME_ENABLED
                | sys::PERF_FORMAT_TOTAL_TIME_RUNNING,
        );
        attr.sample_type = 0;
        attr.set_sigtrap(1);
        attr.set_remove_on_exec(1);
        attr.sig_data = sig_data;
        attr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<GroupSpec, SpecError> {
        parse(s, false)
    }

    fn names(g: &GroupSpec) -> Vec<&str> {
        g.events.iter().map(|e| e.name.as_str()).collect()
    }

    #[test]
    fn the_issue_examples_parse() {
        let g =
            parse("{cycles/period=999700,window=300/,instructions,branch-misses}", true).unwrap();
        assert_eq!(names(&g), ["cycles", "instructions", "branch-misses"]);
        assert_eq!((g.period, g.window, g.jitter), (Some(999_700), Some(300), None));
        let g = p("{task-clock/period=1ms,window=20us/,page-faults,context-switches}").unwrap();
        assert_eq!(names(&g), ["task-clock", "page-faults", "context-switches"]);
        assert_eq!((g.period, g.window), (Some(1_000_000), Some(20_000)));
        assert!(!g.leader_added);
    }

    #[test]
    fn aliases_units_and_jitter() {
        for alias in ["window", "alt-period", "hf-period"] {
            let g = p(&format!("task-clock/period=2ms,{alias}=30us,jitter=100us/")).unwrap();
            assert_eq!(
                (g.period, g.window, g.jitter),
                (Some(2_000_000), Some(30_000), Some(100_000))
            );
        }
        let g = p("task-clock/period=1500,window=0.5us/").unwrap();
        assert_eq!((g.period, g.window), (Some(1500), Some(500)));
        let g = p("cpu-clock/period=1s/").unwrap();
        assert_eq!(g.period, Some(1_000_000_000));
        let g =
            parse("{cycles/period=999700,alt-period=300,alt-period-jitter=100/}", true).unwrap();
        assert_eq!(g.jitter, Some(100));
    }

    #[test]
    fn bare_members_get_the_default_leader() {
        let g = p("page-faults,context-switches").unwrap();
        assert_eq!(names(&g), ["task-clock", "page-faults", "context-switches"]);
        assert!(g.leader_added);
        let g = parse("{faults,cs}", true).unwrap();
        assert_eq!(names(&g), ["cycles", "page-faults", "context-switches"]);
        // A time or hardware event leads by itself.
        assert_eq!(names(&p("cpu-clock").unwrap()), ["cpu-clock"]);
        // An explicit period makes any event a leader.
        let g = p("page-faults/period=100/").unwrap();
        assert_eq!((names(&g), g.period), (vec!["page-faults"], Some(100)));
        assert_eq!(g.window_or_default(), 0);
    }

    #[test]
    fn modifiers() {
        let g = p("{task-clock,page-faults:k}:u").unwrap();
        assert_eq!(g.events[0].privilege, Privilege::User);
        assert_eq!(g.events[1].privilege, Privilege::Kernel);
        let g = parse("{cycles/period=999700,alt-period=300/,instructions}:uS", true).unwrap();
        assert!(g.events.iter().all(|e| e.privilege == Privilege::User));
        let e = p("task-clock:pp").unwrap_err();
        assert!(e.to_string().contains(":u, :k"), "{e}");
        let a = g.counting_attr(1, true);
        assert_eq!((a.exclude_user(), a.exclude_kernel()), (0, 1));
        let d = p("task-clock").unwrap();
        assert_eq!(d.counting_attr(0, true).exclude_kernel(), 0);
        assert_eq!(d.counting_attr(0, false).exclude_kernel(), 1);
    }

    #[test]
    fn raw_events() {
        let g = parse("r003c/period=100000/", true).unwrap();
        assert_eq!((g.events[0].type_, g.events[0].config), (sys::PERF_TYPE_RAW, 0x3c));
    }

    #[test]
    fn errors_say_what_to_write() {
        let e = p("page-fault").unwrap_err();
        assert_eq!(e.to_string().lines().count(), 1);
        assert!(e.to_string().contains("did you mean 'page-faults'"), "{e}");
        let e = p("task-clock/perod=1ms/").unwrap_err();
        assert!(matches!(e, SpecError::UnknownTerm { .. }), "{e}");
        let e = p("task-clock/period=1kg/").unwrap_err();
        assert!(e.to_string().contains("unknown unit 'kg'"), "{e}");
        let e = parse("cycles/period=1ms/", true).unwrap_err();
        assert!(e.to_string().contains("counts events, not time"), "{e}");
        let e = p("task-clock/freq=4000/").unwrap_err();
        assert!(matches!(e, SpecError::Frequency { .. }), "{e}");
        let e = p("{task-clock,page-faults/period=10/}").unwrap_err();
        assert!(matches!(e, SpecError::TermOnMember { .. }), "{e}");
        let e = p("task-clock/period=1ms,window=2ms/").unwrap_err();
        assert!(matches!(e, SpecError::WindowNotShorter { .. }), "{e}");
        let e = p("task-clock/period=0/").unwrap_err();
        assert!(e.to_string().contains("positive"), "{e}");
        let e = p("{task-clock},{cpu-clock}").unwrap_err();
        assert!(e.to_string().contains("one event group"), "{e}");
        let e = p("{task-clock").unwrap_err();
        assert!(matches!(e, SpecError::Syntax { .. }), "{e}");
        let e = p("task-clock/period=1ms").unwrap_err();
        assert!(e.to_string().contains("closing '/'"), "{e}");
        assert_eq!(p("  ").unwrap_err(), SpecError::Empty);
        let e = p("a,b,c,d,e,f,g,h,i").unwrap_err();
        assert!(matches!(e, SpecError::UnknownEvent { .. }));
        let many = ["page-faults"; 8].join(",");
        assert!(matches!(p(&many).unwrap_err(), SpecError::TooMany { n: 9 }));
    }

    #[test]
    fn hardware_on_a_machine_without_pmu_suggests_a_software_event() {
        let g = p("{cycles,instructions}").unwrap();
        let e = g.check_pmu(false).unwrap_err();
        assert!(
            e.to_string().contains("no hardware PMU") && e.to_string().contains("'task-clock'"),
            "{e}"
        );
        assert!(g.check_pmu(true).is_ok());
        let g = p("{task-clock,cache-misses}").unwrap();
        assert!(g.check_pmu(false).unwrap_err().to_string().contains("'page-faults'"));
        assert!(default_group(false).check_pmu(false).is_ok());
    }

    #[test]
    fn leader_attr_samples_with_sigtrap() {
        let g = default_group(false);
        let a = g.leader_attr(2_000_000, 0xabc, false);
        assert_eq!(a.sigtrap(), 1);
        assert_eq!(a.remove_on_exec(), 1);
        assert_eq!(a.sig_data, 0xabc);
        // SAFETY: reading the period member of the period/freq union we just wrote.
        assert_eq!(unsafe { a.__bindgen_anon_1.sample_period }, 2_000_000);
        assert_eq!(a.disabled(), 1);
        assert!(g.to_spec_string().starts_with("{task-clock,page-faults"));
    }

    /// The group a machine with a hardware PMU samples windows on (this VM has none, so
    /// it cannot open it): instructions as the leader with a window in instructions,
    /// cycles and branch misses counted beside it. Every field the kernel reads for it.
    #[test]
    fn the_instructions_window_group_has_the_attrs_a_pmu_needs() {
        let g = parse("{instructions/window=20000/,cycles,branch-misses}", true).unwrap();
        assert_eq!(names(&g), ["instructions", "cycles", "branch-misses"]);
        assert_eq!((g.period, g.window), (None, Some(20_000)));
        assert!(!g.leader().is_time, "windows are counted in instructions, not ns");
        let attrs = crate::EventGroup::sampling_attrs(&g, 1_000_000, 0x7_0005, false, true);
        assert_eq!(attrs.len(), 3);
        let want = [
            (sys::PERF_COUNT_HW_INSTRUCTIONS, 1_000_000),
            (sys::PERF_COUNT_HW_CPU_CYCLES, 0),
            (sys::PERF_COUNT_HW_BRANCH_MISSES, 0),
        ];
        for (i, (a, (config, period))) in attrs.iter().zip(want).enumerate() {
            assert_eq!(a.type_, sys::PERF_TYPE_HARDWARE, "event {i}");
            assert_eq!(a.config, u64::from(config), "event {i}");
            assert_eq!(a.size as usize, std::mem::size_of::<sys::perf_event_attr>());
            // SAFETY: reading the period member of the period/freq union the attr's
            // constructor wrote (0 for a counting event).
            assert_eq!(unsafe { a.__bindgen_anon_1.sample_period }, period, "event {i}");
            assert_eq!(a.freq(), 0, "event {i}");
            // At perf_event_paranoid 2 (kernel counting not allowed): user space only.
            assert_eq!((a.exclude_user(), a.exclude_kernel()), (0, 1), "event {i}");
        }
        let (l, m) = (&attrs[0], &attrs[1..]);
        assert_eq!(l.disabled(), 1, "the leader waits to be armed");
        assert_eq!((l.sigtrap(), l.remove_on_exec(), l.sig_data), (1, 1, 0x7_0005));
        assert_eq!(
            l.read_format,
            u64::from(
                sys::PERF_FORMAT_GROUP
                    | sys::PERF_FORMAT_TOTAL_TIME_ENABLED
                    | sys::PERF_FORMAT_TOTAL_TIME_RUNNING
            )
        );
        assert_eq!(l.sample_type, u64::from(sys::PERF_SAMPLE_READ), "the overflow ring's values");
        for a in m {
            assert_eq!((a.disabled(), a.sigtrap(), a.sample_type), (0, 0, 0));
        }
        // With kernel counting allowed, user and kernel.
        let k = crate::EventGroup::sampling_attrs(&g, 1_000_000, 0, true, false);
        assert!(k.iter().all(|a| a.exclude_kernel() == 0 && a.exclude_user() == 0));
        assert_eq!(k[0].sample_type, 0, "no ring without windows' overflow reads");
        // Without a PMU the same spec is refused before anything is opened.
        assert!(g.check_pmu(false).is_err());
    }

    #[test]
    fn short_windows_warn() {
        let g = p("task-clock/window=5us/").unwrap();
        assert_eq!(g.warnings().len(), 1);
        assert!(p("task-clock").unwrap().warnings().is_empty());
    }
}
