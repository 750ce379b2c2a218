//! An event group opened on one thread from a [`GroupSpec`]: the sampling leader and its
//! counted members, read together with one `read(2)` of the leader.
//!
//! Opening allocates (the member list) and may format errors: do it in normal context.
//! Reading and re-arming go through [`EventGroup::leader`], whose operations are
//! async-signal-safe.
//!
//! Owns opening a parsed group's events in order (the leader first, members into its
//! group) and closing them together. It must never change the spec it opens (that is
//! `spec.rs`'s) and never leave half a group open: a member that fails closes what was
//! opened before it.

use crate::error::OpenError;
use crate::event::{PerfEvent, Target};
use crate::spec::GroupSpec;

/// An open group: leader first, then members in spec order.
#[derive(Debug)]
pub struct EventGroup {
    leader: PerfEvent,
    members: Vec<PerfEvent>,
}

impl EventGroup {
    /// Opens `spec` on `target`: the leader samples every `period` with a synchronous
    /// SIGTRAP carrying `sig_data`; members count. Everything starts disabled: arm the
    /// leader with `refresh(1)` (one-shot) or `enable_group`.
    pub fn open(
        spec: &GroupSpec,
        target: Target,
        period: u64,
        sig_data: u64,
        kernel_allowed: bool,
    ) -> Result<EventGroup, OpenError> {
        Self::open_sampling(spec, target, period, sig_data, kernel_allowed, false)
    }

    /// [`open`](Self::open), and with `overflow_read` the leader also writes the group's
    /// values at each overflow (`PERF_SAMPLE_READ`) to its ring buffer, for
    /// [`OverflowRing`](crate::overflow::OverflowRing) to read.
    pub fn open_sampling(
        spec: &GroupSpec,
        target: Target,
        period: u64,
        sig_data: u64,
        kernel_allowed: bool,
        overflow_read: bool,
    ) -> Result<EventGroup, OpenError> {
        let attrs = Self::sampling_attrs(spec, period, sig_data, kernel_allowed, overflow_read);
        let Some((lattr, rest)) = attrs.split_first() else {
            // A group spec has its leader (the parser makes sure).
            let err = std::io::Error::from_raw_os_error(libc::EINVAL);
            return Err(OpenError::diagnose(err, &crate::sys::new_attr(0, 0), 0, "an empty group"));
        };
        let leader = PerfEvent::open(lattr, target, None, &spec.leader().name)?;
        let mut members = Vec::with_capacity(rest.len());
        for (attr, e) in rest.iter().zip(spec.events.iter().skip(1)) {
            members.push(PerfEvent::open(attr, target, Some(&leader), &e.name)?);
        }
        Ok(EventGroup { leader, members })
    }

    /// The attrs [`open_sampling`](Self::open_sampling) opens, leader first: the leader
    /// samples (see [`GroupSpec::leader_attr`]; with `overflow_read` it also writes the
    /// group's values at each overflow to its ring), the members count and follow the
    /// leader's enable state.
    pub fn sampling_attrs(
        spec: &GroupSpec,
        period: u64,
        sig_data: u64,
        kernel_allowed: bool,
        overflow_read: bool,
    ) -> Vec<crate::sys::perf_event_attr> {
        let mut attrs = Vec::with_capacity(spec.events.len());
        let mut lattr = spec.leader_attr(period, sig_data, kernel_allowed);
        if overflow_read {
            lattr.sample_type = u64::from(crate::sys::PERF_SAMPLE_READ);
        }
        attrs.push(lattr);
        for i in 1..spec.events.len() {
            let mut attr = spec.counting_attr(i, kernel_allowed);
            // Members follow the leader's enable state.
            attr.set_disabled(0);
            attrs.push(attr);
        }
        attrs
    }

    /// The sampling leader (read it for the whole group).
    pub fn leader(&self) -> &PerfEvent {
        &self.leader
    }

    /// Moves every event's descriptor to the lowest free numbers at or above `min`
    /// (see [`PerfEvent::relocate`]); the group is unchanged. Each new number must be
    /// below `below`, else the old numbers stay and the error says so (`EMFILE`).
    pub fn relocate(
        &mut self,
        min: std::os::fd::RawFd,
        below: std::os::fd::RawFd,
    ) -> std::io::Result<()> {
        for e in std::iter::once(&mut self.leader).chain(self.members.iter_mut()) {
            let fd = e.relocate(min)?;
            if fd >= below {
                return Err(std::io::Error::from_raw_os_error(libc::EMFILE));
            }
        }
        Ok(())
    }

    /// Gives up ownership of every descriptor, leader first: the caller closes them.
    pub fn into_raw_fds(self) -> Vec<std::os::fd::RawFd> {
        std::iter::once(self.leader).chain(self.members).map(PerfEvent::into_raw_fd).collect()
    }

    /// Events in the group, leader included.
    pub fn len(&self) -> usize {
        1 + self.members.len()
    }

    /// Never true: a group has its leader.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// u64 words one group read fills: `nr, time_enabled, time_running, values...`.
    pub fn read_words(&self) -> usize {
        3 + self.len()
    }

    /// The raw fds, leader first (for closing in a forked child, or diagnostics).
    pub fn fds(&self) -> impl Iterator<Item = std::os::fd::RawFd> + '_ {
        std::iter::once(self.leader.raw_fd()).chain(self.members.iter().map(PerfEvent::raw_fd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::GroupRead;
    use crate::spec;

    #[test]
    fn a_software_group_opens_and_reads_as_one() {
        let g = spec::parse("{task-clock,page-faults,context-switches}", false).unwrap();
        let grp = EventGroup::open(&g, Target::CALLING_THREAD, 1_000_000_000, 7, false).unwrap();
        grp.leader().enable_group().unwrap();
        let v: Vec<u8> = vec![1; 1 << 22]; // touch fresh pages
        std::hint::black_box(&v);
        let mut words = [0u64; 16];
        let n = grp.leader().read_into(&mut words[..grp.read_words()]).unwrap();
        let r = GroupRead::parse(&words[..n], false).unwrap();
        assert_eq!(r.len(), 3);
        assert!(r.value(0).unwrap() > 0, "task-clock advanced");
        assert!(r.value(1).unwrap() > 0, "page faults counted");
        assert_eq!(grp.fds().count(), 3);
    }
}
