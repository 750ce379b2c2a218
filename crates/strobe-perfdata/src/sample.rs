//! PERF_RECORD_SAMPLE bodies, decoded in the order the kernel writes them
//! (`perf_output_sample`), as the attr's `sample_type` says: every field perf can ask
//! for, read values in every `read_format` combination, callchains with their context
//! markers, branch stacks, and register and stack dumps kept as raw bytes.
//!
//! [`Sample::decode`] walks the body once, checking every length against the bytes the
//! record holds and noting where each field starts; the accessors then read a field
//! where it is. A sample is a small view (about 100 bytes) over the file's bytes:
//! decoding never allocates and moving a sample copies little, which matters at tens of
//! millions of samples per file. Variable-length parts (read values, callchain, raw data,
//! registers, user stack, branches, AUX data) are views with iterators on top.
//!
//! This module must never trust a length in the data: every count is checked against
//! the bytes the record actually holds.

use crate::abi::*;
use crate::attr::Attr;
use crate::bytes::{u32_at, u64_at, words, Cursor};

/// The fields of a sample in the kernel's order, with their `sample_type` bits.
const FIELDS: [u64; 24] = [
    SAMPLE_IDENTIFIER,
    SAMPLE_IP,
    SAMPLE_TID,
    SAMPLE_TIME,
    SAMPLE_ADDR,
    SAMPLE_ID,
    SAMPLE_STREAM_ID,
    SAMPLE_CPU,
    SAMPLE_PERIOD,
    SAMPLE_READ,
    SAMPLE_CALLCHAIN,
    SAMPLE_RAW,
    SAMPLE_BRANCH_STACK,
    SAMPLE_REGS_USER,
    SAMPLE_STACK_USER,
    SAMPLE_WEIGHT | SAMPLE_WEIGHT_STRUCT,
    SAMPLE_DATA_SRC,
    SAMPLE_TRANSACTION,
    SAMPLE_REGS_INTR,
    SAMPLE_PHYS_ADDR,
    SAMPLE_CGROUP,
    SAMPLE_DATA_PAGE_SIZE,
    SAMPLE_CODE_PAGE_SIZE,
    SAMPLE_AUX,
];

// Indices into FIELDS.
const F_IDENTIFIER: usize = 0;
const F_IP: usize = 1;
const F_TID: usize = 2;
const F_TIME: usize = 3;
const F_ADDR: usize = 4;
const F_ID: usize = 5;
const F_STREAM_ID: usize = 6;
const F_CPU: usize = 7;
const F_PERIOD: usize = 8;
const F_READ: usize = 9;
const F_CALLCHAIN: usize = 10;
const F_RAW: usize = 11;
const F_BRANCH_STACK: usize = 12;
const F_REGS_USER: usize = 13;
const F_STACK_USER: usize = 14;
const F_WEIGHT: usize = 15;
const F_DATA_SRC: usize = 16;
const F_TRANSACTION: usize = 17;
const F_REGS_INTR: usize = 18;
const F_PHYS_ADDR: usize = 19;
const F_CGROUP: usize = 20;
const F_DATA_PAGE_SIZE: usize = 21;
const F_CODE_PAGE_SIZE: usize = 22;
const F_AUX: usize = 23;

/// A decoded sample: a view of its record's body. Fields the attr's `sample_type` does
/// not ask for read as `None`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sample<'a> {
    body: &'a [u8],
    sample_type: u64,
    read_format: u64,
    branch_sample_type: u64,
    regs_user_mask: u64,
    regs_intr_mask: u64,
    /// Where each field of FIELDS starts in `body` (meaningful when present).
    at: [u16; 24],
}

/// How samples of one attr are laid out: where the fields before the first
/// variable-length one sit (the same in every sample), computed once per attr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SamplePlan {
    sample_type: u64,
    read_format: u64,
    branch_sample_type: u64,
    regs_user_mask: u64,
    regs_intr_mask: u64,
    /// Offsets of the fixed-position fields (0 for the others).
    fixed_at: [u16; 24],
    /// Bytes of the fixed-position prefix.
    fixed_len: usize,
    /// Index in FIELDS of the first variable-length field (24 if none).
    first_var: usize,
}

impl SamplePlan {
    pub(crate) fn new(attr: &Attr) -> SamplePlan {
        let t = attr.sample_type;
        let mut plan = SamplePlan {
            sample_type: t,
            read_format: attr.read_format,
            branch_sample_type: attr.branch_sample_type,
            regs_user_mask: attr.sample_regs_user,
            regs_intr_mask: attr.sample_regs_intr,
            fixed_at: [0; 24],
            fixed_len: 0,
            first_var: FIELDS.len(),
        };
        let variable = [
            F_READ,
            F_CALLCHAIN,
            F_RAW,
            F_BRANCH_STACK,
            F_REGS_USER,
            F_STACK_USER,
            F_REGS_INTR,
            F_AUX,
        ];
        for (i, &bit) in FIELDS.iter().enumerate() {
            if t & bit == 0 {
                continue;
            }
            if variable.contains(&i) {
                plan.first_var = i;
                break;
            }
            if let Some(a) = plan.fixed_at.get_mut(i) {
                *a = plan.fixed_len as u16;
            }
            plan.fixed_len += 8;
        }
        plan
    }
}

impl<'a> Sample<'a> {
    /// Decodes a SAMPLE body (the bytes after the record header) written for `attr`.
    /// `None` when the body is shorter than its `sample_type` needs (or longer than a
    /// record can be, 64 KiB); bytes beyond the last field are ignored.
    pub fn decode(body: &'a [u8], attr: &Attr) -> Option<Sample<'a>> {
        Sample::decode_planned(body, &SamplePlan::new(attr))
    }

    #[inline]
    pub(crate) fn decode_planned(body: &'a [u8], plan: &SamplePlan) -> Option<Sample<'a>> {
        if body.len() > usize::from(u16::MAX) || body.len() < plan.fixed_len {
            return None;
        }
        let t = plan.sample_type;
        let mut s = Sample {
            body,
            sample_type: t,
            read_format: plan.read_format,
            branch_sample_type: plan.branch_sample_type,
            regs_user_mask: plan.regs_user_mask,
            regs_intr_mask: plan.regs_intr_mask,
            at: plan.fixed_at,
        };
        if plan.first_var == FIELDS.len() {
            return Some(s);
        }
        let mut c = Cursor::new(body);
        c.take(plan.fixed_len)?;
        for (i, &bit) in FIELDS.iter().enumerate().skip(plan.first_var) {
            if t & bit == 0 {
                continue;
            }
            // Fits: body.len() <= u16::MAX was checked.
            if let Some(a) = s.at.get_mut(i) {
                *a = (body.len() - c.rest().len()) as u16;
            }
            match i {
                F_READ => {
                    ReadValues::decode(&mut c, plan.read_format)?;
                }
                F_CALLCHAIN => {
                    let nr = c.u64()?;
                    c.take_words(nr)?;
                }
                F_RAW => {
                    let size = c.u32()?;
                    c.take(usize::try_from(size).ok()?)?;
                }
                F_BRANCH_STACK => {
                    BranchStack::decode(&mut c, plan.branch_sample_type)?;
                }
                F_REGS_USER => {
                    Regs::decode(&mut c, plan.regs_user_mask)?;
                }
                F_REGS_INTR => {
                    Regs::decode(&mut c, plan.regs_intr_mask)?;
                }
                F_STACK_USER => {
                    StackUser::decode(&mut c)?;
                }
                F_AUX => {
                    let size = c.u64()?;
                    c.take(usize::try_from(size).ok()?)?;
                }
                _ => {
                    c.u64()?;
                }
            }
        }
        Some(s)
    }

    /// Where field `i` starts, if the sample has it.
    #[inline]
    fn at(&self, i: usize) -> Option<usize> {
        let bit = FIELDS.get(i).copied().unwrap_or(0);
        (self.sample_type & bit != 0).then(|| self.at.get(i).map(|&a| usize::from(a))).flatten()
    }

    #[inline]
    fn word(&self, i: usize) -> Option<u64> {
        u64_at(self.body, self.at(i)?)
    }

    /// A cursor at field `i`, if the sample has it.
    fn cursor(&self, i: usize) -> Option<Cursor<'a>> {
        Some(Cursor::new(self.body.get(self.at(i)?..)?))
    }

    /// The record body the sample was decoded from.
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// `PERF_SAMPLE_IDENTIFIER`.
    pub fn identifier(&self) -> Option<u64> {
        self.word(F_IDENTIFIER)
    }

    /// `PERF_SAMPLE_IP`: the interrupted instruction pointer.
    #[inline]
    pub fn ip(&self) -> Option<u64> {
        self.word(F_IP)
    }

    /// `PERF_SAMPLE_TID`: the process id.
    #[inline]
    pub fn pid(&self) -> Option<u32> {
        u32_at(self.body, self.at(F_TID)?)
    }

    /// `PERF_SAMPLE_TID`: the thread id.
    #[inline]
    pub fn tid(&self) -> Option<u32> {
        u32_at(self.body, self.at(F_TID)? + 4)
    }

    /// `PERF_SAMPLE_TIME`.
    #[inline]
    pub fn time(&self) -> Option<u64> {
        self.word(F_TIME)
    }

    /// `PERF_SAMPLE_ADDR`.
    pub fn addr(&self) -> Option<u64> {
        self.word(F_ADDR)
    }

    /// `PERF_SAMPLE_ID`.
    pub fn id(&self) -> Option<u64> {
        self.word(F_ID)
    }

    /// `PERF_SAMPLE_STREAM_ID`.
    pub fn stream_id(&self) -> Option<u64> {
        self.word(F_STREAM_ID)
    }

    /// `PERF_SAMPLE_CPU`.
    pub fn cpu(&self) -> Option<u32> {
        u32_at(self.body, self.at(F_CPU)?)
    }

    /// `PERF_SAMPLE_PERIOD`.
    #[inline]
    pub fn period(&self) -> Option<u64> {
        self.word(F_PERIOD)
    }

    /// `PERF_SAMPLE_READ`: counter values.
    #[inline]
    pub fn read(&self) -> Option<ReadValues<'a>> {
        ReadValues::decode(&mut self.cursor(F_READ)?, self.read_format)
    }

    /// `PERF_SAMPLE_CALLCHAIN`.
    pub fn callchain(&self) -> Option<Callchain<'a>> {
        let mut c = self.cursor(F_CALLCHAIN)?;
        let nr = c.u64()?;
        Some(Callchain { words: c.take_words(nr)? })
    }

    /// `PERF_SAMPLE_RAW`: the raw data (padding included, as the kernel sizes it).
    pub fn raw(&self) -> Option<&'a [u8]> {
        let mut c = self.cursor(F_RAW)?;
        let size = c.u32()?;
        c.take(usize::try_from(size).ok()?)
    }

    /// `PERF_SAMPLE_BRANCH_STACK`.
    pub fn branch_stack(&self) -> Option<BranchStack<'a>> {
        BranchStack::decode(&mut self.cursor(F_BRANCH_STACK)?, self.branch_sample_type)
    }

    /// `PERF_SAMPLE_REGS_USER`.
    pub fn regs_user(&self) -> Option<Regs<'a>> {
        Regs::decode(&mut self.cursor(F_REGS_USER)?, self.regs_user_mask)
    }

    /// `PERF_SAMPLE_STACK_USER`.
    pub fn stack_user(&self) -> Option<StackUser<'a>> {
        StackUser::decode(&mut self.cursor(F_STACK_USER)?)
    }

    /// `PERF_SAMPLE_WEIGHT` or `PERF_SAMPLE_WEIGHT_STRUCT` (one word for either).
    pub fn weight(&self) -> Option<u64> {
        self.word(F_WEIGHT)
    }

    /// `PERF_SAMPLE_DATA_SRC`.
    pub fn data_src(&self) -> Option<u64> {
        self.word(F_DATA_SRC)
    }

    /// `PERF_SAMPLE_TRANSACTION`.
    pub fn transaction(&self) -> Option<u64> {
        self.word(F_TRANSACTION)
    }

    /// `PERF_SAMPLE_REGS_INTR`.
    pub fn regs_intr(&self) -> Option<Regs<'a>> {
        Regs::decode(&mut self.cursor(F_REGS_INTR)?, self.regs_intr_mask)
    }

    /// `PERF_SAMPLE_PHYS_ADDR`.
    pub fn phys_addr(&self) -> Option<u64> {
        self.word(F_PHYS_ADDR)
    }

    /// `PERF_SAMPLE_CGROUP`.
    pub fn cgroup(&self) -> Option<u64> {
        self.word(F_CGROUP)
    }

    /// `PERF_SAMPLE_DATA_PAGE_SIZE`.
    pub fn data_page_size(&self) -> Option<u64> {
        self.word(F_DATA_PAGE_SIZE)
    }

    /// `PERF_SAMPLE_CODE_PAGE_SIZE`.
    pub fn code_page_size(&self) -> Option<u64> {
        self.word(F_CODE_PAGE_SIZE)
    }

    /// `PERF_SAMPLE_AUX`: the AUX snapshot.
    pub fn aux(&self) -> Option<&'a [u8]> {
        let mut c = self.cursor(F_AUX)?;
        let size = c.u64()?;
        c.take(usize::try_from(size).ok()?)
    }
}

impl std::fmt::Debug for Sample<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Sample");
        let mut opt = |name: &str, v: Option<&dyn std::fmt::Debug>| {
            if let Some(v) = v {
                d.field(name, v);
            }
        };
        opt("identifier", self.identifier().as_ref().map(|v| v as _));
        opt("ip", self.ip().map(|v| format!("{v:#x}")).as_ref().map(|v| v as _));
        opt("pid", self.pid().as_ref().map(|v| v as _));
        opt("tid", self.tid().as_ref().map(|v| v as _));
        opt("time", self.time().as_ref().map(|v| v as _));
        opt("addr", self.addr().as_ref().map(|v| v as _));
        opt("id", self.id().as_ref().map(|v| v as _));
        opt("stream_id", self.stream_id().as_ref().map(|v| v as _));
        opt("cpu", self.cpu().as_ref().map(|v| v as _));
        opt("period", self.period().as_ref().map(|v| v as _));
        opt("read", self.read().as_ref().map(|v| v as _));
        opt("callchain", self.callchain().as_ref().map(|v| v as _));
        opt("raw", self.raw().map(<[u8]>::len).as_ref().map(|v| v as _));
        opt("branch_stack", self.branch_stack().as_ref().map(|v| v as _));
        opt("regs_user", self.regs_user().as_ref().map(|v| v as _));
        opt("stack_user", self.stack_user().as_ref().map(|v| v as _));
        opt("weight", self.weight().as_ref().map(|v| v as _));
        opt("data_src", self.data_src().as_ref().map(|v| v as _));
        opt("transaction", self.transaction().as_ref().map(|v| v as _));
        opt("regs_intr", self.regs_intr().as_ref().map(|v| v as _));
        opt("phys_addr", self.phys_addr().as_ref().map(|v| v as _));
        opt("cgroup", self.cgroup().as_ref().map(|v| v as _));
        opt("data_page_size", self.data_page_size().as_ref().map(|v| v as _));
        opt("code_page_size", self.code_page_size().as_ref().map(|v| v as _));
        opt("aux", self.aux().map(<[u8]>::len).as_ref().map(|v| v as _));
        d.finish()
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
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ReadValues<'a> {
    format: u64,
    /// The whole read block: `value, [enabled], [running], [id], [lost]` without
    /// `PERF_FORMAT_GROUP`; `nr, [enabled], [running], nr x (value, [id], [lost])` with.
    words: &'a [u8],
}

impl<'a> ReadValues<'a> {
    fn decode(c: &mut Cursor<'a>, format: u64) -> Option<ReadValues<'a>> {
        let start = *c;
        let flag = |bit: u64| u64::from(format & bit != 0);
        let times = flag(FORMAT_TOTAL_TIME_ENABLED) + flag(FORMAT_TOTAL_TIME_RUNNING);
        let n = if format & FORMAT_GROUP != 0 {
            let nr = c.u64()?;
            let stride = 1 + flag(FORMAT_ID) + flag(FORMAT_LOST);
            c.take_words(times.checked_add(nr.checked_mul(stride)?)?)?;
            1 + times + nr * stride
        } else {
            let n = 1 + times + flag(FORMAT_ID) + flag(FORMAT_LOST);
            c.take_words(n)?;
            n
        };
        Some(ReadValues { format, words: start.rest().get(..usize::try_from(n * 8).ok()?)? })
    }

    fn word(&self, i: u64) -> Option<u64> {
        u64_at(self.words, usize::try_from(i).ok()?.checked_mul(8)?)
    }

    fn flag(&self, bit: u64) -> u64 {
        u64::from(self.format & bit != 0)
    }

    /// True when the values are a group's (`PERF_FORMAT_GROUP`).
    pub fn is_group(&self) -> bool {
        self.format & FORMAT_GROUP != 0
    }

    /// `PERF_FORMAT_TOTAL_TIME_ENABLED`.
    pub fn time_enabled(&self) -> Option<u64> {
        (self.flag(FORMAT_TOTAL_TIME_ENABLED) == 1).then(|| self.word(1)).flatten()
    }

    /// `PERF_FORMAT_TOTAL_TIME_RUNNING`.
    pub fn time_running(&self) -> Option<u64> {
        let at = 1 + self.flag(FORMAT_TOTAL_TIME_ENABLED);
        (self.flag(FORMAT_TOTAL_TIME_RUNNING) == 1).then(|| self.word(at)).flatten()
    }

    /// Number of counters.
    pub fn len(&self) -> usize {
        if self.is_group() {
            let stride = 1 + self.flag(FORMAT_ID) + self.flag(FORMAT_LOST);
            usize::try_from(self.word(0).unwrap_or(0).min(self.words.len() as u64 / (8 * stride)))
                .unwrap_or(0)
        } else {
            1
        }
    }

    /// True when there are no counters (an empty group).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The counters, leader first for a group.
    pub fn iter(&self) -> impl Iterator<Item = ReadValue> + 'a {
        let this = *self;
        let (has_id, has_lost) = (self.flag(FORMAT_ID), self.flag(FORMAT_LOST));
        let times = self.flag(FORMAT_TOTAL_TIME_ENABLED) + self.flag(FORMAT_TOTAL_TIME_RUNNING);
        let (first, stride) =
            if self.is_group() { (1 + times, 1 + has_id + has_lost) } else { (0, 0) };
        (0..self.len() as u64).map(move |k| {
            let at = first + k * stride;
            // A single value has the times between the value and its id.
            let after = if this.is_group() { at + 1 } else { 1 + times };
            ReadValue {
                value: this.word(at).unwrap_or(0),
                id: (has_id == 1).then(|| this.word(after)).flatten(),
                lost: (has_lost == 1).then(|| this.word(after + has_id)).flatten(),
            }
        })
    }
}

impl std::fmt::Debug for ReadValues<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadValues")
            .field("time_enabled", &self.time_enabled())
            .field("time_running", &self.time_running())
            .field("values", &self.iter().collect::<Vec<_>>())
            .finish()
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
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Callchain<'a> {
    words: &'a [u8],
}

impl std::fmt::Debug for Callchain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.raw().map(|w| format!("{w:#x}"))).finish()
    }
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
    fn decode(c: &mut Cursor<'a>, branch_sample_type: u64) -> Option<BranchStack<'a>> {
        let nr = c.u64()?;
        let hw_idx = if branch_sample_type & BRANCH_HW_INDEX != 0 { Some(c.u64()?) } else { None };
        let entries = c.take_words(nr.checked_mul(3)?)?;
        let counters =
            if branch_sample_type & BRANCH_COUNTERS != 0 { Some(c.take_words(nr)?) } else { None };
        Some(BranchStack { hw_idx, entries, counters })
    }

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

impl<'a> StackUser<'a> {
    fn decode(c: &mut Cursor<'a>) -> Option<StackUser<'a>> {
        let size = c.u64()?;
        if size == 0 {
            return Some(StackUser { data: &[], dyn_size: 0 });
        }
        let data = c.take(usize::try_from(size).ok()?)?;
        Some(StackUser { data, dyn_size: c.u64()? })
    }
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
        assert_eq!((s.ip(), s.pid(), s.tid()), (Some(0x401000), Some(7), Some(8)));
        let r = s.read().unwrap();
        assert!(r.is_group());
        assert_eq!((r.time_enabled(), r.time_running(), r.len()), (Some(555), None, 2));
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
        assert_eq!(s.period(), Some(100));
        let r = s.read().unwrap();
        assert!(!r.is_group());
        assert_eq!((r.time_enabled(), r.time_running()), (Some(5), Some(6)));
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
            assert_eq!(s.cpu(), Some(9));
            let r = s.read().unwrap();
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
        let cc = s.callchain().unwrap();
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
        let br = s.branch_stack().unwrap();
        assert_eq!(br.hw_idx, Some(77));
        assert_eq!(
            br.entries().collect::<Vec<_>>(),
            [BranchEntry { from: 0x10, to: 0x20, flags: 0x30 }]
        );
        let regs = s.regs_user().unwrap();
        assert_eq!(regs.iter().collect::<Vec<_>>(), [(0, 1), (1, 2), (3, 3)]);
        let st = s.stack_user().unwrap();
        assert_eq!((st.data.len(), st.dyn_size), (16, 12));
        assert_eq!((s.weight(), s.data_src()), (Some(500), Some(0x42)));
        assert_eq!(s.regs_intr().unwrap().bytes.len(), 0);
        assert_eq!((s.cgroup(), s.code_page_size()), (Some(99), Some(4096)));
        assert_eq!(s.aux().map(<[u8]>::len), Some(8));
    }
}
