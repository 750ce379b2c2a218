//! PERF_RECORD_SAMPLE bodies, decoded field by field in the order the kernel writes them
//! (`perf_output_sample`), as the attr's `sample_type` says: every field perf can ask
//! for, read values in every `read_format` combination, callchains with their context
//! markers, branch stacks, and register and stack dumps kept as raw bytes.
//!
//! Decoding borrows from the record: variable-length parts (read values, callchain,
//! raw data, registers, user stack, branches, AUX data) are views over the file's bytes
//! with iterators on top, so decoding a sample never allocates.
//!
//! This module must never trust a length in the data: every count is checked against
//! the bytes the record actually holds.

use crate::abi::*;
use crate::attr::Attr;
use crate::bytes::{words, Cursor};

/// A decoded sample. Fields the attr's `sample_type` does not ask for are `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sample<'a> {
    /// `PERF_SAMPLE_IDENTIFIER`.
    pub identifier: Option<u64>,
    /// `PERF_SAMPLE_IP`: the interrupted instruction pointer.
    pub ip: Option<u64>,
    /// `PERF_SAMPLE_TID`: process id.
    pub pid: Option<u32>,
    /// `PERF_SAMPLE_TID`: thread id.
    pub tid: Option<u32>,
    /// `PERF_SAMPLE_TIME`.
    pub time: Option<u64>,
    /// `PERF_SAMPLE_ADDR`.
    pub addr: Option<u64>,
    /// `PERF_SAMPLE_ID`.
    pub id: Option<u64>,
    /// `PERF_SAMPLE_STREAM_ID`.
    pub stream_id: Option<u64>,
    /// `PERF_SAMPLE_CPU`.
    pub cpu: Option<u32>,
    /// `PERF_SAMPLE_PERIOD`.
    pub period: Option<u64>,
    /// `PERF_SAMPLE_READ`: counter values.
    pub read: Option<ReadValues<'a>>,
    /// `PERF_SAMPLE_CALLCHAIN`.
    pub callchain: Option<Callchain<'a>>,
    /// `PERF_SAMPLE_RAW`: the raw data (padding included, as the kernel sizes it).
    pub raw: Option<&'a [u8]>,
    /// `PERF_SAMPLE_BRANCH_STACK`.
    pub branch_stack: Option<BranchStack<'a>>,
    /// `PERF_SAMPLE_REGS_USER`.
    pub regs_user: Option<Regs<'a>>,
    /// `PERF_SAMPLE_STACK_USER`.
    pub stack_user: Option<StackUser<'a>>,
    /// `PERF_SAMPLE_WEIGHT` or `PERF_SAMPLE_WEIGHT_STRUCT` (one word for either).
    pub weight: Option<u64>,
    /// `PERF_SAMPLE_DATA_SRC`.
    pub data_src: Option<u64>,
    /// `PERF_SAMPLE_TRANSACTION`.
    pub transaction: Option<u64>,
    /// `PERF_SAMPLE_REGS_INTR`.
    pub regs_intr: Option<Regs<'a>>,
    /// `PERF_SAMPLE_PHYS_ADDR`.
    pub phys_addr: Option<u64>,
    /// `PERF_SAMPLE_CGROUP`.
    pub cgroup: Option<u64>,
    /// `PERF_SAMPLE_DATA_PAGE_SIZE`.
    pub data_page_size: Option<u64>,
    /// `PERF_SAMPLE_CODE_PAGE_SIZE`.
    pub code_page_size: Option<u64>,
    /// `PERF_SAMPLE_AUX`: the AUX snapshot.
    pub aux: Option<&'a [u8]>,
}

impl<'a> Sample<'a> {
    /// Decodes a SAMPLE body (the bytes after the record header) written for `attr`.
    /// `None` when the body is shorter than its `sample_type` needs; bytes beyond
    /// the last field are ignored.
    pub fn decode(body: &'a [u8], attr: &Attr) -> Option<Sample<'a>> {
        let t = attr.sample_type;
        let mut c = Cursor::new(body);
        let mut s = Sample::default();
        let has = |bit: u64| t & bit != 0;
        if has(SAMPLE_IDENTIFIER) {
            s.identifier = Some(c.u64()?);
        }
        if has(SAMPLE_IP) {
            s.ip = Some(c.u64()?);
        }
        if has(SAMPLE_TID) {
            let (pid, tid) = c.u32_pair()?;
            s.pid = Some(pid);
            s.tid = Some(tid);
        }
        if has(SAMPLE_TIME) {
            s.time = Some(c.u64()?);
        }
        if has(SAMPLE_ADDR) {
            s.addr = Some(c.u64()?);
        }
        if has(SAMPLE_ID) {
            s.id = Some(c.u64()?);
        }
        if has(SAMPLE_STREAM_ID) {
            s.stream_id = Some(c.u64()?);
        }
        if has(SAMPLE_CPU) {
            s.cpu = Some(c.u32_pair()?.0);
        }
        if has(SAMPLE_PERIOD) {
            s.period = Some(c.u64()?);
        }
        if has(SAMPLE_READ) {
            s.read = Some(ReadValues::decode(&mut c, attr.read_format)?);
        }
        if has(SAMPLE_CALLCHAIN) {
            let nr = c.u64()?;
            s.callchain = Some(Callchain { words: c.take_words(nr)? });
        }
        if has(SAMPLE_RAW) {
            let size = c.u32()?;
            s.raw = Some(c.take(usize::try_from(size).ok()?)?);
        }
        if has(SAMPLE_BRANCH_STACK) {
            let nr = c.u64()?;
            let hw_idx =
                if attr.branch_sample_type & BRANCH_HW_INDEX != 0 { Some(c.u64()?) } else { None };
            let entries = c.take_words(nr.checked_mul(3)?)?;
            let counters = if attr.branch_sample_type & BRANCH_COUNTERS != 0 {
                Some(c.take_words(nr)?)
            } else {
                None
            };
            s.branch_stack = Some(BranchStack { hw_idx, entries, counters });
        }
        if has(SAMPLE_REGS_USER) {
            s.regs_user = Some(Regs::decode(&mut c, attr.sample_regs_user)?);
        }
        if has(SAMPLE_STACK_USER) {
            let size = c.u64()?;
            s.stack_user = Some(if size == 0 {
                StackUser { data: &[], dyn_size: 0 }
            } else {
                let data = c.take(usize::try_from(size).ok()?)?;
                StackUser { data, dyn_size: c.u64()? }
            });
        }
        if t & (SAMPLE_WEIGHT | SAMPLE_WEIGHT_STRUCT) != 0 {
            s.weight = Some(c.u64()?);
        }
        if has(SAMPLE_DATA_SRC) {
            s.data_src = Some(c.u64()?);
        }
        if has(SAMPLE_TRANSACTION) {
            s.transaction = Some(c.u64()?);
        }
        if has(SAMPLE_REGS_INTR) {
            s.regs_intr = Some(Regs::decode(&mut c, attr.sample_regs_intr)?);
        }
        if has(SAMPLE_PHYS_ADDR) {
            s.phys_addr = Some(c.u64()?);
        }
        if has(SAMPLE_CGROUP) {
            s.cgroup = Some(c.u64()?);
        }
        if has(SAMPLE_DATA_PAGE_SIZE) {
            s.data_page_size = Some(c.u64()?);
        }
        if has(SAMPLE_CODE_PAGE_SIZE) {
            s.code_page_size = Some(c.u64()?);
        }
        if has(SAMPLE_AUX) {
            let size = c.u64()?;
            s.aux = Some(c.take(usize::try_from(size).ok()?)?);
        }
        Some(s)
    }
}

/// One counter's value in a read (`PERF_SAMPLE_READ`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadValue {
    /// The counter's value.
    pub value: u64,
    /// Its event id (`PERF_FORMAT_ID`), which names its attr.
    pub id: Option<u64>,
    /// Samples it lost (`PERF_FORMAT_LOST`).
    pub lost: Option<u64>,
}

/// The counter values of a sample: one value, or a whole group (leader first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadValues<'a> {
    /// `PERF_FORMAT_TOTAL_TIME_ENABLED`.
    pub time_enabled: Option<u64>,
    /// `PERF_FORMAT_TOTAL_TIME_RUNNING`.
    pub time_running: Option<u64>,
    layout: ReadLayout<'a>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadLayout<'a> {
    /// Without `PERF_FORMAT_GROUP`: value, [enabled], [running], [id], [lost].
    Single(ReadValue),
    /// With it: nr, [enabled], [running], then nr times value, [id], [lost].
    Group { entries: &'a [u8], has_id: bool, has_lost: bool },
}

impl<'a> ReadValues<'a> {
    fn decode(c: &mut Cursor<'a>, format: u64) -> Option<ReadValues<'a>> {
        let has_id = format & FORMAT_ID != 0;
        let has_lost = format & FORMAT_LOST != 0;
        let enabled = format & FORMAT_TOTAL_TIME_ENABLED != 0;
        let running = format & FORMAT_TOTAL_TIME_RUNNING != 0;
        if format & FORMAT_GROUP != 0 {
            let nr = c.u64()?;
            let time_enabled = if enabled { Some(c.u64()?) } else { None };
            let time_running = if running { Some(c.u64()?) } else { None };
            let stride = 1 + u64::from(has_id) + u64::from(has_lost);
            let entries = c.take_words(nr.checked_mul(stride)?)?;
            Some(ReadValues {
                time_enabled,
                time_running,
                layout: ReadLayout::Group { entries, has_id, has_lost },
            })
        } else {
            let value = c.u64()?;
            let time_enabled = if enabled { Some(c.u64()?) } else { None };
            let time_running = if running { Some(c.u64()?) } else { None };
            let id = if has_id { Some(c.u64()?) } else { None };
            let lost = if has_lost { Some(c.u64()?) } else { None };
            Some(ReadValues {
                time_enabled,
                time_running,
                layout: ReadLayout::Single(ReadValue { value, id, lost }),
            })
        }
    }

    /// True when the values are a group's (`PERF_FORMAT_GROUP`).
    pub fn is_group(&self) -> bool {
        matches!(self.layout, ReadLayout::Group { .. })
    }

    /// Number of counters.
    pub fn len(&self) -> usize {
        match self.layout {
            ReadLayout::Single(_) => 1,
            ReadLayout::Group { entries, has_id, has_lost } => {
                entries.len() / (8 * (1 + usize::from(has_id) + usize::from(has_lost)))
            }
        }
    }

    /// True when there are no counters (an empty group).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The counters, leader first for a group.
    pub fn iter(&self) -> impl Iterator<Item = ReadValue> + 'a {
        let (single, entries, has_id, has_lost) = match self.layout {
            ReadLayout::Single(v) => (Some(v), &[][..], false, false),
            ReadLayout::Group { entries, has_id, has_lost } => (None, entries, has_id, has_lost),
        };
        let stride = 8 * (1 + usize::from(has_id) + usize::from(has_lost));
        let group = entries.chunks_exact(stride.max(8)).map(move |e| {
            let mut w = words(e);
            let value = w.next().unwrap_or(0);
            let id = if has_id { w.next() } else { None };
            let lost = if has_lost { w.next() } else { None };
            ReadValue { value, id, lost }
        });
        single.into_iter().chain(group)
    }
}

/// Where a callchain entry was taken, from the context marker preceding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Context {
    /// Before any marker (the kernel always writes one first; other writers may not).
    Unknown,
    /// `PERF_CONTEXT_KERNEL`.
    Kernel,
    /// `PERF_CONTEXT_USER`.
    User,
    /// `PERF_CONTEXT_USER_DEFERRED`: the user part follows in a later record.
    UserDeferred,
    /// `PERF_CONTEXT_HV`.
    Hypervisor,
    /// `PERF_CONTEXT_GUEST`.
    Guest,
    /// `PERF_CONTEXT_GUEST_KERNEL`.
    GuestKernel,
    /// `PERF_CONTEXT_GUEST_USER`.
    GuestUser,
}

impl Context {
    /// The context a marker word switches to; `None` if the word is an address.
    pub fn of_marker(word: u64) -> Option<Context> {
        if word < CONTEXT_MAX {
            return None;
        }
        Some(match word {
            CONTEXT_KERNEL => Context::Kernel,
            CONTEXT_USER => Context::User,
            CONTEXT_USER_DEFERRED => Context::UserDeferred,
            CONTEXT_HV => Context::Hypervisor,
            CONTEXT_GUEST => Context::Guest,
            CONTEXT_GUEST_KERNEL => Context::GuestKernel,
            CONTEXT_GUEST_USER => Context::GuestUser,
            _ => Context::Unknown,
        })
    }
}

/// A sample's callchain (`PERF_SAMPLE_CALLCHAIN`): addresses, innermost first, with
/// context markers between the kernel and user parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Callchain<'a> {
    words: &'a [u8],
}

impl<'a> Callchain<'a> {
    /// Entries, markers included.
    pub fn len(&self) -> usize {
        self.words.len() / 8
    }

    /// True when the chain has no entries.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Every entry as written, markers included.
    pub fn raw(&self) -> impl Iterator<Item = u64> + 'a {
        words(self.words)
    }

    /// The addresses with the context each was taken in, markers removed, innermost
    /// first.
    pub fn frames(&self) -> impl Iterator<Item = (Context, u64)> + 'a {
        let mut ctx = Context::Unknown;
        words(self.words).filter_map(move |w| match Context::of_marker(w) {
            Some(c) => {
                ctx = c;
                None
            }
            None => Some((ctx, w)),
        })
    }
}

/// One taken branch of a branch stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BranchEntry {
    /// Source address.
    pub from: u64,
    /// Target address.
    pub to: u64,
    /// The packed flags word (mispred, predicted, in_tx, abort, cycles, type, ...).
    pub flags: u64,
}

/// A sample's branch stack (`PERF_SAMPLE_BRANCH_STACK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BranchStack<'a> {
    /// `hw_idx`, when `PERF_SAMPLE_BRANCH_HW_INDEX` was asked for.
    pub hw_idx: Option<u64>,
    entries: &'a [u8],
    counters: Option<&'a [u8]>,
}

impl<'a> BranchStack<'a> {
    /// The branches, most recent first.
    pub fn entries(&self) -> impl Iterator<Item = BranchEntry> + 'a {
        self.entries.chunks_exact(24).map(|e| {
            let mut w = words(e);
            BranchEntry {
                from: w.next().unwrap_or(0),
                to: w.next().unwrap_or(0),
                flags: w.next().unwrap_or(0),
            }
        })
    }

    /// Number of branches.
    pub fn len(&self) -> usize {
        self.entries.len() / 24
    }

    /// True when the stack is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The per-branch counter words (`PERF_SAMPLE_BRANCH_COUNTERS`), if asked for.
    pub fn counters(&self) -> Option<impl Iterator<Item = u64> + 'a> {
        self.counters.map(words)
    }
}

/// A register dump (`PERF_SAMPLE_REGS_USER` / `PERF_SAMPLE_REGS_INTR`), kept raw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regs<'a> {
    /// `PERF_SAMPLE_REGS_ABI_*`: 0 when the task had no registers to give (a kernel
    /// thread), then no values follow.
    pub abi: u64,
    /// The attr's register mask: which registers the values are, lowest bit first.
    pub mask: u64,
    /// The values, 8 bytes each, one per set mask bit.
    pub bytes: &'a [u8],
}

impl<'a> Regs<'a> {
    fn decode(c: &mut Cursor<'a>, mask: u64) -> Option<Regs<'a>> {
        let abi = c.u64()?;
        let bytes = if abi == REGS_ABI_NONE {
            &[][..]
        } else {
            c.take_words(u64::from(mask.count_ones()))?
        };
        Some(Regs { abi, mask, bytes })
    }

    /// `(register number, value)` pairs.
    pub fn iter(&self) -> impl Iterator<Item = (u32, u64)> + 'a {
        let mask = self.mask;
        (0..64u32).filter(move |r| mask & (1 << r) != 0).zip(words(self.bytes))
    }
}

/// A user stack copy (`PERF_SAMPLE_STACK_USER`), kept raw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackUser<'a> {
    /// The copied bytes (the size asked for; only `dyn_size` of them are valid).
    pub data: &'a [u8],
    /// How many bytes the kernel actually copied.
    pub dyn_size: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn attr(sample_type: u64, read_format: u64) -> Attr {
        Attr { sample_type, read_format, ..Attr::default() }
    }

    #[test]
    fn group_read_is_leader_first_with_ids_and_lost() {
        let a = attr(
            SAMPLE_IP | SAMPLE_TID | SAMPLE_READ,
            FORMAT_GROUP | FORMAT_ID | FORMAT_LOST | FORMAT_TOTAL_TIME_ENABLED,
        );
        let pid_tid = 7u64 | (8 << 32);
        let b = body(&[0x401000, pid_tid, 2, 555, 1000, 11, 0, 3, 12, 1]);
        let s = Sample::decode(&b, &a).unwrap();
        assert_eq!((s.ip, s.pid, s.tid), (Some(0x401000), Some(7), Some(8)));
        let r = s.read.unwrap();
        assert!(r.is_group());
        assert_eq!((r.time_enabled, r.time_running, r.len()), (Some(555), None, 2));
        let v: Vec<ReadValue> = r.iter().collect();
        assert_eq!(
            v,
            [
                ReadValue { value: 1000, id: Some(11), lost: Some(0) },
                ReadValue { value: 3, id: Some(12), lost: Some(1) }
            ]
        );
    }

    #[test]
    fn single_read_puts_times_between_value_and_id() {
        let all = FORMAT_TOTAL_TIME_ENABLED | FORMAT_TOTAL_TIME_RUNNING | FORMAT_ID | FORMAT_LOST;
        let a = attr(SAMPLE_READ | SAMPLE_PERIOD, all);
        let b = body(&[100, 42, 5, 6, 77, 9]);
        let s = Sample::decode(&b, &a).unwrap();
        assert_eq!(s.period, Some(100));
        let r = s.read.unwrap();
        assert!(!r.is_group());
        assert_eq!((r.time_enabled, r.time_running), (Some(5), Some(6)));
        assert_eq!(
            r.iter().collect::<Vec<_>>(),
            [ReadValue { value: 42, id: Some(77), lost: Some(9) }]
        );
    }

    #[test]
    fn every_read_format_combination_consumes_exactly_its_words() {
        for format in 0..32u64 {
            let a = attr(SAMPLE_READ | SAMPLE_CPU, format);
            let per = 1 + (format & FORMAT_ID != 0) as u64 + (format & FORMAT_LOST != 0) as u64;
            let times = (format & FORMAT_TOTAL_TIME_ENABLED != 0) as u64
                + (format & FORMAT_TOTAL_TIME_RUNNING != 0) as u64;
            let group = format & FORMAT_GROUP != 0;
            let (nr, n_words) = if group { (3, times + 3 * per) } else { (1, times + per) };
            // CPU comes before READ in the kernel order; a group read starts with nr.
            let mut w = vec![9u64];
            if group {
                w.push(3);
            }
            w.extend((0..n_words).map(|i| 100 + i));
            let b = body(&w);
            let s = Sample::decode(&b, &a).unwrap();
            assert_eq!(s.cpu, Some(9));
            let r = s.read.unwrap();
            assert_eq!(r.len(), nr, "format {format:#x}");
            // One word short fails.
            w.pop();
            assert!(Sample::decode(&body(&w), &a).is_none(), "format {format:#x}");
        }
    }

    #[test]
    fn callchain_frames_carry_their_context() {
        let a = attr(SAMPLE_CALLCHAIN, 0);
        let b = body(&[5, CONTEXT_KERNEL, 0xffffffff81000000, CONTEXT_USER, 0x401000, 0x401100]);
        let s = Sample::decode(&b, &a).unwrap();
        let cc = s.callchain.unwrap();
        assert_eq!(cc.len(), 5);
        assert_eq!(
            cc.frames().collect::<Vec<_>>(),
            [
                (Context::Kernel, 0xffffffff81000000),
                (Context::User, 0x401000),
                (Context::User, 0x401100)
            ]
        );
        // A count larger than the record fails instead of reading past it.
        assert!(Sample::decode(&body(&[u64::MAX, 1]), &a).is_none());
        assert!(Sample::decode(&body(&[3, 1, 2]), &a).is_none());
    }

    #[test]
    fn regs_stack_branches_and_trailing_fields() {
        let mut a = attr(
            SAMPLE_BRANCH_STACK
                | SAMPLE_REGS_USER
                | SAMPLE_STACK_USER
                | SAMPLE_WEIGHT
                | SAMPLE_WEIGHT_STRUCT
                | SAMPLE_DATA_SRC
                | SAMPLE_REGS_INTR
                | SAMPLE_CGROUP
                | SAMPLE_CODE_PAGE_SIZE
                | SAMPLE_AUX,
            0,
        );
        a.branch_sample_type = BRANCH_HW_INDEX;
        a.sample_regs_user = 0b1011; // three registers
        a.sample_regs_intr = 0b1;
        let mut w = vec![1, 77, 0x10, 0x20, 0x30]; // branches: nr, hw_idx, one entry
        w.extend([2, 1, 2, 3]); // regs_user: abi 64, three values
        w.extend([16, 0xaa, 0xbb, 12]); // stack_user: 16 bytes, dyn_size 12
        w.extend([500, 0x42]); // one weight word for both bits, data_src
        w.extend([0]); // regs_intr: ABI_NONE, no values
        w.extend([99, 4096, 8, 0x0102030405060708]); // cgroup, code page, aux of 8 bytes
        let b = body(&w);
        let s = Sample::decode(&b, &a).unwrap();
        let br = s.branch_stack.unwrap();
        assert_eq!(br.hw_idx, Some(77));
        assert_eq!(
            br.entries().collect::<Vec<_>>(),
            [BranchEntry { from: 0x10, to: 0x20, flags: 0x30 }]
        );
        let regs = s.regs_user.unwrap();
        assert_eq!(regs.iter().collect::<Vec<_>>(), [(0, 1), (1, 2), (3, 3)]);
        let st = s.stack_user.unwrap();
        assert_eq!((st.data.len(), st.dyn_size), (16, 12));
        assert_eq!((s.weight, s.data_src), (Some(500), Some(0x42)));
        assert_eq!(s.regs_intr.unwrap().bytes.len(), 0);
        assert_eq!((s.cgroup, s.code_page_size), (Some(99), Some(4096)));
        assert_eq!(s.aux.map(<[u8]>::len), Some(8));
    }
}
