//! Attaching kernel uprobes: perf events of the uprobe PMU.
//!
//! A uprobe event is `perf_event_open` with `type` = the dynamic PMU type read from
//! `/sys/bus/event_source/devices/uprobe/type`, `config1` = a pointer to the file's path,
//! `config2` = the file offset, and two fields whose bit positions the PMU publishes in
//! sysfs (`format/retprobe`, `format/ref_ctr_offset`): the return-probe flag and the USDT
//! semaphore offset. The kernel copies the path during the call.
//!
//! # Two ways to name a uprobe, and why inheriting events use tracefs
//!
//! The uprobe PMU reads `config1` as a pointer *in the calling task* every time an event is
//! initialised, and an inherited event is initialised again in each thread or process the
//! target creates, inside the target, where strobe's pointer means nothing: the kernel's
//! copy faults and the target's `clone` fails with EFAULT (its threads never start). So
//! events that must follow the target ([`EventSettings::inherit`]) name their uprobe
//! through tracefs instead ([`Tracefs`]), as `perf probe` does: strobe writes a definition
//! (`p:strobe_PID/pN PATH:0xOFF(0xREF)`, `r:` for a return probe) to `uprobe_events`, and
//! opens a tracepoint event (`PERF_TYPE_TRACEPOINT`, config = the definition's id), which
//! inherits cleanly. A definition is removed when its [`TraceUprobe`] is dropped (after its
//! events are closed); definitions left by a strobe that was killed are removed by the
//! next run ([`Tracefs::detect`]). Events on threads that already exist (in-process use,
//! benchmarks) keep the PMU, which needs no tracefs.
//!
//! Where tracefs is not mounted (many machines leave it to the first tool that needs it),
//! [`mount_tracefs_if_absent`] mounts it at `/sys/kernel/tracing` as perf does; it stays
//! mounted. That takes `CAP_SYS_ADMIN`: without it nothing is mounted and
//! [`Tracefs::detect`] says what to run.
//!
//! Costs on the reference machine (docs: DESIGN.md): opening one uprobe event takes about
//! 1-10 ms, closing one about 60-90 ms (the kernel waits for a grace period on unregister),
//! and closing several from parallel threads is slower still, so events are opened once
//! per run, closed sequentially at its end, and never per hit.
//!
//! This module must never run inside the target.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;

use strobe_perf::pmu::{self, FormatField};
use strobe_perf::ring::{self, Wakeup};
use strobe_perf::sys::{self, perf_event_attr};
use strobe_perf::{PerfEvent, Target};

use crate::resolve::Site;
use crate::Error;

/// The uprobe PMU of this kernel: its type and where its flag fields live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UprobePmu {
    /// `perf_event_attr.type` for uprobes.
    pub type_: u32,
    /// The return-probe flag (normally `config:0`).
    pub retprobe: FormatField,
    /// The semaphore offset (normally `config:32-63`); absent before Linux 4.20.
    pub ref_ctr_offset: Option<FormatField>,
}

impl UprobePmu {
    /// Reads the uprobe PMU's description from sysfs.
    pub fn detect() -> Result<UprobePmu, Error> {
        let type_ = pmu::pmu_type("uprobe").map_err(|e| Error::NoUprobePmu {
            why: format!(
                "/sys/bus/event_source/devices/uprobe is unreadable ({e}); the kernel needs \
                 CONFIG_UPROBE_EVENTS (Linux 4.17 or later)"
            ),
        })?;
        let retprobe = pmu::pmu_format("uprobe", "retprobe").map_err(|e| Error::NoUprobePmu {
            why: format!("the uprobe PMU does not describe its retprobe flag ({e})"),
        })?;
        let ref_ctr_offset = pmu::pmu_format("uprobe", "ref_ctr_offset").ok();
        Ok(UprobePmu { type_, retprobe, ref_ctr_offset })
    }

    /// The attr of a (counting, disabled) uprobe on `site`; `path` must be the site's path
    /// as a C string and stay alive until the event is opened.
    pub fn attr(
        &self,
        site: &Site,
        retprobe: bool,
        path: &CString,
    ) -> Result<perf_event_attr, Error> {
        let mut attr = sys::new_attr(self.type_, 0);
        // config1 and config2 carry the path pointer and the offset, so the PMU's flag
        // fields must live in `config` (they do on every kernel with a uprobe PMU).
        let in_config = |f: FormatField| {
            if f.word == 0 {
                Ok(f)
            } else {
                Err(Error::NoUprobePmu {
                    why: format!("unexpected uprobe PMU format (a flag in config{})", f.word),
                })
            }
        };
        if retprobe {
            attr.config |= in_config(self.retprobe)?.encode(1);
        }
        if let Some(off) = site.ref_ctr_offset {
            let field = self.ref_ctr_offset.ok_or_else(|| Error::NoUprobePmu {
                why: "this kernel's uprobe PMU has no ref_ctr_offset field (Linux 4.20+), so \
                      USDT probes guarded by a semaphore cannot be enabled"
                    .to_string(),
            })?;
            attr.config |= in_config(field)?.encode(off);
        }
        attr.__bindgen_anon_3.config1 = path.as_ptr() as u64;
        attr.__bindgen_anon_4.config2 = site.offset;
        Ok(attr)
    }
}

/// How the probes' events are opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSettings {
    /// Count in threads (and processes) the target creates after the event is opened.
    pub inherit: bool,
    /// Enable when the target calls `execve` (open before exec, disabled).
    pub enable_on_exec: bool,
    /// Record a sample per hit into a ring buffer, with this wakeup policy.
    pub sampling: Option<Wakeup>,
}

impl EventSettings {
    /// Sets inheritance, enable-on-exec and (when sampling) a sample per hit with
    /// [`SAMPLE_TYPE`] on the monotonic clock, on either kind of uprobe event.
    fn apply(&self, attr: &mut perf_event_attr) {
        attr.set_inherit(u64::from(self.inherit));
        attr.set_enable_on_exec(u64::from(self.enable_on_exec));
        if let Some(wakeup) = self.sampling {
            attr.__bindgen_anon_1.sample_period = 1;
            attr.sample_type = SAMPLE_TYPE;
            ring::use_monotonic_clock(attr);
            wakeup.apply(attr);
        }
    }
}

/// The sample fields of sampling uprobes: which event (entry or return of which probe),
/// which thread, when.
pub const SAMPLE_TYPE: u64 =
    (sys::PERF_SAMPLE_IDENTIFIER | sys::PERF_SAMPLE_TID | sys::PERF_SAMPLE_TIME) as u64;

/// Opens one uprobe PMU event on `site` for `target`. `what` names it in errors.
///
/// Refuses `settings.inherit`: an inherited uprobe PMU event breaks the target's `clone`
/// (see the module doc); use [`Tracefs`] and [`open_trace_uprobe`] for that.
pub fn open_uprobe(
    pmu: &UprobePmu,
    site: &Site,
    retprobe: bool,
    target: Target,
    settings: EventSettings,
    what: &str,
) -> Result<PerfEvent, Error> {
    if settings.inherit {
        return Err(Error::BadSpec {
            spec: what.to_string(),
            why: "uprobe PMU events cannot be inherited (the kernel re-reads their path \
                  pointer inside each new thread); define the uprobe in tracefs instead"
                .to_string(),
        });
    }
    let path = CString::new(site.path.as_os_str().as_bytes()).map_err(|_| Error::BadSpec {
        spec: what.to_string(),
        why: "the file path contains a NUL byte".to_string(),
    })?;
    let mut attr = pmu.attr(site, retprobe, &path)?;
    settings.apply(&mut attr);
    // `path` outlives the call: the kernel copies the string during perf_event_open.
    let ev = PerfEvent::open(&attr, target, None, what)?;
    drop(path);
    Ok(ev)
}

/// Where tracefs is mounted, with the `uprobe_events` file: `/sys/kernel/tracing`, else
/// the debugfs mount point.
const TRACEFS_ROOTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Where [`mount_tracefs_if_absent`] mounts tracefs: its own mount point, which sysfs
/// provides on every kernel with tracefs.
pub const TRACEFS_MOUNT_POINT: &str = "/sys/kernel/tracing";

/// True when one of [`TRACEFS_ROOTS`] has `uprobe_events`, or has one this process may not
/// look at (then tracefs is mounted, and [`Tracefs::detect`] explains the refusal).
fn tracefs_reachable() -> bool {
    TRACEFS_ROOTS.iter().any(|r| {
        match std::fs::metadata(std::path::Path::new(r).join("uprobe_events")) {
            Ok(_) => true,
            Err(e) => e.kind() == std::io::ErrorKind::PermissionDenied,
        }
    })
}

/// Mounts tracefs at [`TRACEFS_MOUNT_POINT`] when no tracefs with `uprobe_events` is
/// reachable, as perf does. `Ok(Some(path))` when it mounted one there; `Ok(None)` when
/// one was there already, or when this process may not mount (then [`Tracefs::detect`]
/// gives its usual error, which says how to mount it). An error when the mount failed for
/// another reason (a kernel without tracefs).
pub fn mount_tracefs_if_absent() -> Result<Option<std::path::PathBuf>, Error> {
    let point = std::path::Path::new(TRACEFS_MOUNT_POINT);
    if tracefs_reachable() || !point.is_dir() {
        return Ok(None);
    }
    let c = |s: &str| CString::new(s).expect("no NUL in a constant");
    let (source, target, fstype) = (c("nodev"), c(TRACEFS_MOUNT_POINT), c("tracefs"));
    // SAFETY: every pointer is a NUL-terminated string that outlives the call; tracefs
    // takes no data argument (NULL).
    let r = unsafe {
        libc::mount(source.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, std::ptr::null())
    };
    if r != 0 {
        let err = std::io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => Ok(None),
            // Another strobe (or a person) mounted it meanwhile.
            Some(libc::EBUSY) if tracefs_reachable() => Ok(None),
            _ => Err(Error::Sys {
                what: format!("mounting tracefs at {TRACEFS_MOUNT_POINT}"),
                source: err,
            }),
        };
    }
    Ok(Some(point.to_path_buf()))
}

/// The tracefs group of a strobe process: `strobe_PID`.
fn group_of(pid: u32) -> String {
    format!("strobe_{pid}")
}

/// Numbers the definitions of this process, across every [`Tracefs`] it creates (they
/// share the process's group, so names must not repeat). Relaxed: only uniqueness
/// matters, which the atomic increment gives whatever the ordering.
static NEXT_DEFINITION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Defines uprobes in tracefs (`uprobe_events`) under this process's own group.
#[derive(Debug)]
pub struct Tracefs {
    root: std::path::PathBuf,
    group: String,
}

impl Tracefs {
    /// Finds tracefs, checks that uprobe definitions can be written, and removes
    /// definitions left by strobe processes that no longer exist.
    pub fn detect() -> Result<Tracefs, Error> {
        let mut denied = None;
        let found = TRACEFS_ROOTS.iter().map(std::path::PathBuf::from).find(|r| {
            let f = r.join("uprobe_events");
            match std::fs::metadata(&f) {
                Ok(_) => true,
                Err(e) => {
                    if e.kind() == std::io::ErrorKind::PermissionDenied && denied.is_none() {
                        denied = Some(f);
                    }
                    false
                }
            }
        });
        if let (None, Some(f)) = (&found, denied) {
            return Err(Self::not_permitted(&f));
        }
        let root = found.ok_or_else(|| Error::NoUprobePmu {
            why: "tracefs with uprobe_events is not mounted (mount it with \
                      `mount -t tracefs nodev /sys/kernel/tracing`; the kernel needs \
                      CONFIG_UPROBE_EVENTS)"
                .to_string(),
        })?;
        let t = Tracefs { root, group: group_of(std::process::id()) };
        // Opening for append fails early, and clearly, without root.
        t.events_file()?;
        t.remove_stale();
        Ok(t)
    }

    fn events_file(&self) -> Result<std::fs::File, Error> {
        let path = self.root.join("uprobe_events");
        std::fs::OpenOptions::new().append(true).open(&path).map_err(|source| {
            if source.kind() == std::io::ErrorKind::PermissionDenied {
                Self::not_permitted(&path)
            } else {
                Error::Io { what: format!("opening {}", path.display()), source }
            }
        })
    }

    fn not_permitted(path: &std::path::Path) -> Error {
        Error::NotPermitted {
            what: format!(
                "defining kernel uprobes in {} (uprobes that follow a program's threads are \
                 defined in tracefs)",
                path.display()
            ),
            need: "run strobe as root: tracefs is root-only, and perf_event_paranoid or \
                   CAP_PERFMON alone do not open it"
                .to_string(),
        }
    }

    /// Removes every definition in a `strobe_PID` group whose process is gone.
    fn remove_stale(&self) {
        let Ok(text) = std::fs::read_to_string(self.root.join("uprobe_events")) else { return };
        for line in text.lines() {
            // `p:strobe_123/p0 /path:0x...`
            let Some(name) = line.split_whitespace().next().and_then(|w| w.get(2..)) else {
                continue;
            };
            let Some(pid) = name
                .strip_prefix("strobe_")
                .and_then(|r| r.split_once('/'))
                .and_then(|(p, _)| p.parse::<u32>().ok())
            else {
                continue;
            };
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = self.write_line(&format!("-:{name}"));
            }
        }
    }

    fn write_line(&self, line: &str) -> std::io::Result<()> {
        use std::io::Write;
        let mut f =
            std::fs::OpenOptions::new().append(true).open(self.root.join("uprobe_events"))?;
        // One write per definition: the kernel parses each write as whole lines.
        f.write_all(format!("{line}\n").as_bytes())
    }

    /// Defines a uprobe (or a return probe) on `site`; `what` names it in errors.
    pub fn define(&self, site: &Site, retprobe: bool, what: &str) -> Result<TraceUprobe, Error> {
        let path = site.path.to_string_lossy();
        if path.chars().any(|c| c.is_whitespace()) || !site.path.is_absolute() {
            return Err(Error::BadSpec {
                spec: what.to_string(),
                why: format!(
                    "kernel uprobe definitions need an absolute path without spaces, not '{path}'"
                ),
            });
        }
        let n = NEXT_DEFINITION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let event = format!("{}{n}", if retprobe { 'r' } else { 'p' });
        let name = format!("{}/{event}", self.group);
        let mut line =
            format!("{}:{name} {path}:{:#x}", if retprobe { 'r' } else { 'p' }, site.offset);
        if let Some(r) = site.ref_ctr_offset {
            line.push_str(&format!("({r:#x})"));
        }
        self.write_line(&line).map_err(|source| Error::Sys {
            what: format!("defining the uprobe '{line}' in {}/uprobe_events", self.root.display()),
            source,
        })?;
        // From here on, dropping `def` removes the definition again.
        let mut def = TraceUprobe { root: self.root.clone(), name, id: 0 };
        let id_path = self.root.join("events").join(&def.name).join("id");
        let id = std::fs::read_to_string(&id_path).map_err(|source| Error::Io {
            what: format!("reading {}", id_path.display()),
            source,
        })?;
        let id = id.trim().parse().map_err(|_| Error::Io {
            what: format!("parsing {}", id_path.display()),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, id.trim().to_string()),
        })?;
        def.id = id;
        Ok(def)
    }
}

/// One uprobe defined in tracefs; its definition is removed on drop, which must come after
/// every event opened on it is closed (the kernel refuses to remove a definition in use).
#[derive(Debug)]
pub struct TraceUprobe {
    root: std::path::PathBuf,
    name: String,
    id: u64,
}

impl TraceUprobe {
    /// The tracepoint id (`perf_event_attr.config` for `PERF_TYPE_TRACEPOINT`).
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for TraceUprobe {
    fn drop(&mut self) {
        use std::io::Write;
        if let Ok(mut f) =
            std::fs::OpenOptions::new().append(true).open(self.root.join("uprobe_events"))
        {
            // A failure leaves a definition behind, which the next run removes.
            let _ = f.write_all(format!("-:{}\n", self.name).as_bytes());
        }
    }
}

/// Opens one event on a tracefs-defined uprobe for `target`. `what` names it in errors.
pub fn open_trace_uprobe(
    def: &TraceUprobe,
    target: Target,
    settings: EventSettings,
    what: &str,
) -> Result<PerfEvent, Error> {
    let mut attr = sys::new_attr(sys::PERF_TYPE_TRACEPOINT, def.id);
    settings.apply(&mut attr);
    Ok(PerfEvent::open(&attr, target, None, what)?)
}

/// The CPUs that are online (`/sys/devices/system/cpu/online`, e.g. `0-3,6`).
pub fn online_cpus() -> Result<Vec<i32>, Error> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").map_err(|source| {
        Error::Io { what: "reading /sys/devices/system/cpu/online".to_string(), source }
    })?;
    parse_cpu_list(&text).ok_or_else(|| Error::Io {
        what: "parsing /sys/devices/system/cpu/online".to_string(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, text.trim().to_string()),
    })
}

/// Parses a kernel CPU list such as `0-3,6`.
pub fn parse_cpu_list(text: &str) -> Option<Vec<i32>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<i32>().ok()?..=b.parse::<i32>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6\n"), Some(vec![0, 1, 2, 3, 6]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn attr_places_flags_where_sysfs_says() {
        let pmu = UprobePmu {
            type_: 9,
            retprobe: FormatField::parse("config:0").unwrap(),
            ref_ctr_offset: FormatField::parse("config:32-63"),
        };
        let site = Site { path: "/bin/true".into(), offset: 0x1234, ref_ctr_offset: Some(0x40) };
        let path = CString::new("/bin/true").unwrap();
        let a = pmu.attr(&site, true, &path).unwrap();
        assert_eq!(a.type_, 9);
        assert_eq!(a.config, 1 | (0x40 << 32));
        // SAFETY: reading the union fields we just wrote as u64.
        let (c1, c2) = unsafe { (a.__bindgen_anon_3.config1, a.__bindgen_anon_4.config2) };
        assert_eq!(c1, path.as_ptr() as u64);
        assert_eq!(c2, 0x1234);
    }

    #[test]
    fn tracefs_definitions_are_removed_on_drop() {
        let t = match Tracefs::detect() {
            Ok(t) => t,
            Err(e) => return eprintln!("skipping: {e}"),
        };
        let exe = std::env::current_exe().unwrap();
        let site = Site { path: exe, offset: 0x1000, ref_ctr_offset: None };
        let def = t.define(&site, true, "t").unwrap();
        let group = group_of(std::process::id());
        let listed = || std::fs::read_to_string(t.root.join("uprobe_events")).unwrap();
        let line = format!("r:{group}/");
        assert!(listed().contains(&line), "{}", listed());
        assert!(def.id() > 0);
        drop(def);
        assert!(!listed().contains(&line), "{}", listed());
    }

    /// A function whose calls the uprobe counts. `#[inline(never)]` and a black box keep
    /// one real call per iteration.
    #[inline(never)]
    #[no_mangle]
    extern "C" fn strobe_uprobe_attach_test_target(x: u64) -> u64 {
        std::hint::black_box(x.wrapping_mul(3))
    }

    #[test]
    fn a_counting_uprobe_counts_every_call_in_this_process() {
        let pmu = match UprobePmu::detect() {
            Ok(p) => p,
            Err(e) => return eprintln!("skipping: {e}"),
        };
        let addr = strobe_uprobe_attach_test_target as *const () as u64;
        let (path, offset) = strobe_target::maps::resolve_address(None, addr).unwrap().unwrap();
        let site = Site { path, offset, ref_ctr_offset: None };
        let settings = EventSettings { inherit: false, enable_on_exec: false, sampling: None };
        let ev = match open_uprobe(&pmu, &site, false, Target::CALLING_THREAD, settings, "t") {
            Ok(ev) => ev,
            Err(Error::Open(e @ strobe_perf::OpenError::NeedsCapability { .. })) => {
                return eprintln!("skipping: {e}")
            }
            Err(e) => panic!("{e}"),
        };
        ev.enable().unwrap();
        for i in 0..1000 {
            strobe_uprobe_attach_test_target(i);
        }
        ev.disable().unwrap();
        assert_eq!(ev.read_count().unwrap(), 1000);
    }
}
