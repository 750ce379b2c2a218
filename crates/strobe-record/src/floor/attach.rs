//! Opening the floor on running processes (`-p`): every thread they have now (threads a
//! thread made before its own events were open are not inherited, so new ones are
//! looked for until none appears), what `/proc` shows of each process before the
//! recording, and the errors an attach can meet (another user's process, a thread id).
//!
//! Owns: that. Must never touch the target beyond opening perf events on it.

use rustc_hash::FxHashMap;
use strobe_perf::percpu::{CpuRings, RingSampling, RingSetError, Scope};
use strobe_perf::spec::GroupSpec;
use strobe_perf::OpenError;

use super::writer::Known;
use crate::RecordError;

/// Lets this process hold as many descriptors as its hard limit allows: every CPU of
/// every attached thread holds a descriptor per event.
pub(crate) fn raise_fd_limit() {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on our own limits with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// The real uid owning process `pid`.
fn owner_of(pid: u32) -> Option<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().next()?.parse().ok()
}

/// What `/proc` shows of process `pid` before the recording.
pub(crate) fn known_of(pid: u32) -> Option<Known> {
    let tids = strobe_target::tasks::threads_of(pid).ok()?;
    let maps = strobe_target::maps::read(Some(pid))
        .map(|text| {
            strobe_target::maps::parse(&text)
                .filter(|m| m.perms.exec)
                .map(|m| strobe_format::Mapping {
                    start: m.start,
                    end: m.end,
                    file_offset: m.offset,
                    path: m.path.into(),
                })
                .collect()
        })
        .unwrap_or_default();
    Some(Known {
        ppid: strobe_target::tasks::parent_of(pid).unwrap_or(0),
        exe: strobe_target::tasks::executable(pid).unwrap_or_default(),
        maps,
        names: tids
            .iter()
            .filter_map(|&t| Some((t, strobe_target::tasks::thread_name(pid, t)?)))
            .collect(),
    })
}

/// Why opening failed, said for an attach: another user's process is named as such.
fn attach_error(e: RingSetError, pids: &[u32]) -> RecordError {
    if let RingSetError::Open(
        OpenError::NeedsCapability { .. } | OpenError::Paranoid { .. } | OpenError::Rejected { .. },
    ) = &e
    {
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if let Some(&pid) = pids.iter().find(|&&p| owner_of(p).is_some_and(|u| u != me)) {
            if !strobe_perf::pmu::perfmon_capable() {
                return RecordError::OtherUser { pid };
            }
        }
    }
    e.into()
}

/// Threads of `pids` that have no events yet get them (threads a thread made before its
/// own events were open are not inherited): a few rounds, until no new one appears.
pub(crate) fn add_new_threads(
    rings: &mut CpuRings,
    pids: &[u32],
    tids: &mut Vec<libc::pid_t>,
) -> Result<(), RecordError> {
    for _ in 0..3 {
        let mut new = Vec::new();
        for &pid in pids {
            for t in strobe_target::tasks::threads_of(pid).unwrap_or_default() {
                if !tids.contains(&(t as libc::pid_t)) {
                    new.push(t as libc::pid_t);
                }
            }
        }
        if new.is_empty() {
            break;
        }
        for t in new {
            tids.push(t);
            match rings.add_thread(t) {
                Ok(()) | Err(RingSetError::Open(OpenError::NoSuchTask { .. })) => {}
                Err(e) => return Err(attach_error(e, pids)),
            }
        }
    }
    Ok(())
}

/// Opens `spec` on every thread of running processes `pids`, enabled.
pub(crate) fn attach_threads(
    spec: &GroupSpec,
    sampling: &RingSampling,
    pids: &[u32],
    pages: usize,
    known: &mut FxHashMap<u32, Known>,
) -> Result<CpuRings, RecordError> {
    let mut tids = Vec::new();
    for &pid in pids {
        let k = known_of(pid).ok_or(RecordError::NoProcess { pid })?;
        if strobe_target::tasks::process_of(pid) != Some(pid) {
            return Err(RecordError::ThreadNotProcess {
                tid: pid,
                pid: strobe_target::tasks::process_of(pid).unwrap_or(0),
            });
        }
        tids.extend(k.names.iter().map(|(t, _)| *t as libc::pid_t));
        known.insert(pid, k);
    }
    let mut rings = CpuRings::open(spec, sampling, Scope::Threads(tids.clone()), pages)
        .map_err(|e| attach_error(e, pids))?;
    rings
        .enable()
        .map_err(|source| RecordError::Io { what: "enabling the perf events".into(), source })?;
    add_new_threads(&mut rings, pids, &mut tids)?;
    Ok(rings)
}
