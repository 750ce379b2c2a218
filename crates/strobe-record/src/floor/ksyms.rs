//! The kernel's symbols, from `/proc/kallsyms`, for the kernel addresses a recording
//! holds: each address found in the table once, and each symbol hit written once (a
//! KSYMS chunk per pass with the new ones), so a report names kernel functions later,
//! on any machine.
//!
//! `/proc/kallsyms` shows real addresses only to whom `kernel.kptr_restrict` allows
//! (zeros otherwise): then there is no table and kernel addresses stay unnamed.
//!
//! Owns: which symbols are written. Must never read the table where kernel addresses
//! cannot be recorded (it is large); the table itself is strobe-target's (`kallsyms`).

use rustc_hash::FxHashSet;
use strobe_format::KernelSymbol;
use strobe_target::kallsyms::Kallsyms;

/// Where the kernel half of a 64-bit address space starts.
pub(crate) const KERNEL_START: u64 = 1 << 63;

/// The most addresses [`KernelNames`] remembers as looked up.
const SEEN_MAX: usize = 1 << 13;

/// The symbols of a recording's kernel addresses, written as they are first hit.
#[derive(Debug, Default)]
pub(crate) struct KernelNames {
    /// Loaded on the first kernel address; `Some(None)` once found unreadable.
    table: Option<Option<Kallsyms>>,
    /// Addresses looked up lately (at most [`SEEN_MAX`]: a sampled kernel has many
    /// thousands of distinct return addresses, and a day-long system-wide recording
    /// would hold them all; one forgotten is looked up again, its symbol not written
    /// again).
    seen: FxHashSet<u64>,
    /// `seen` was emptied at its bound once.
    forgot_some: bool,
    /// Symbols already written.
    written: FxHashSet<usize>,
    /// Addresses to look up at the next [`KernelNames::take_new`].
    pending: Vec<u64>,
    allowed: bool,
}

impl KernelNames {
    /// Names kernel addresses when `allowed` (kernel samples can exist at all).
    pub(crate) fn new(allowed: bool) -> KernelNames {
        KernelNames { allowed, ..KernelNames::default() }
    }

    /// Reads the table now (before the target runs, so that reading it does not compete
    /// with the target for a CPU), where kernel addresses can be recorded at all.
    pub(crate) fn preload(&mut self) {
        if self.allowed && self.table.is_none() {
            self.table = Some(Kallsyms::load());
        }
    }

    /// Notes an address of a sample or frame; kernel addresses are named later.
    #[inline]
    pub(crate) fn note(&mut self, addr: u64) {
        if self.allowed && addr >= KERNEL_START && self.seen.insert(addr) {
            self.pending.push(addr);
            if self.seen.len() > SEEN_MAX {
                self.seen.clear();
                self.forgot_some = true;
            }
        }
    }

    /// The symbols first hit since the last call, sorted by address.
    pub(crate) fn take_new(&mut self) -> Vec<KernelSymbol> {
        if self.pending.is_empty() {
            return Vec::new();
        }
        let table = self.table.get_or_insert_with(Kallsyms::load);
        let Some(table) = table else {
            self.pending.clear();
            return Vec::new();
        };
        let mut idx: Vec<usize> =
            self.pending.drain(..).filter_map(|a| table.find(a)).collect::<Vec<_>>();
        idx.sort_unstable();
        idx.dedup();
        idx.into_iter()
            .filter(|i| self.written.insert(*i))
            .filter_map(|i| table.symbol(i))
            .map(|k| KernelSymbol { start: k.start, size: k.size, name: k.name, module: k.module })
            .collect()
    }

    /// True when a kernel address was noted.
    pub(crate) fn any_seen(&self) -> bool {
        self.forgot_some || !self.seen.is_empty()
    }

    /// True when `/proc/kallsyms` was read and shows addresses.
    pub(crate) fn readable(&self) -> bool {
        matches!(self.table, Some(Some(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
ffffffff81000000 T _stext
ffffffff81000100 t helper
ffffffff81000200 D some_data
ffffffff81000300 T clear_page_erms
ffffffff81000400 W weak_fn
ffffffffc0001000 t ext4_read [ext4]
ffffffffc0002000 t ext4_end [ext4]
";

    #[test]
    fn each_symbol_is_written_once() {
        let mut n = KernelNames::new(true);
        n.table = Some(Kallsyms::parse(TEXT));
        n.note(0xffffffff81000310);
        n.note(0xffffffff81000320);
        n.note(0x5555_0000_1000); // user space: ignored
        let got = n.take_new();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].name, "clear_page_erms");
        n.note(0xffffffff81000330);
        n.note(0xffffffff81000010);
        let got: Vec<String> = n.take_new().into_iter().map(|s| s.name).collect();
        assert_eq!(got, ["_stext"]);
        assert!(n.take_new().is_empty());
        // Past its bound the set of addresses looked up starts again: it stays bounded,
        // and an address forgotten is looked up again but its symbol not written again.
        let many = 0xffffffff81010000u64..0xffffffff81010000 + 3 * SEEN_MAX as u64;
        for a in many.clone() {
            n.note(a);
            assert!(n.seen.len() <= SEEN_MAX);
        }
        assert!(n.any_seen());
        let got: Vec<String> = n.take_new().into_iter().map(|s| s.name).collect();
        assert_eq!(got, ["weak_fn"]);
        many.for_each(|a| n.note(a));
        assert!(n.take_new().is_empty());
        let mut off = KernelNames::new(false);
        off.note(0xffffffff81000310);
        assert!(off.take_new().is_empty() && !off.readable());
    }
}
