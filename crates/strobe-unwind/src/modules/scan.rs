//! The loaded modules as the dynamic linker reports them (`dl_iterate_phdr`),
//! with where their unwind tables are.
//!
//! Owns: [`Module`] and the scan that builds it, and the set of modules that
//! can never be unloaded (computed once at init: the program, the vdso, the
//! dynamic linker, the `LD_PRELOAD` libraries, and everything their
//! `DT_NEEDED` entries reach).
//!
//! A permanent module's `.eh_frame_hdr` and `.eh_frame` are used in place. A
//! removable one's are copied into memory the module owns, so that a handler
//! never reads the mapping of a library that can go away, even one that
//! glibc unloads without going through the public `dlclose` (its gconv
//! modules): such an unload can at worst leave stale entries until the next
//! rescan, never a fault.
//!
//! Must never: be called from a signal handler (it allocates and takes the
//! dynamic linker's lock); read a module's memory outside the callback of
//! `dl_iterate_phdr` (which keeps it loaded), or past the module's mapped
//! segments.

use std::collections::{HashSet, VecDeque};
use std::ffi::CStr;
use std::sync::Arc;

use super::registry::ModuleRange;

/// A module's identity across scans: load bias and code range.
pub(crate) type Key = (u64, u64, u64);

/// Where a module's `.eh_frame_hdr` and `.eh_frame` are (addresses as the
/// module sees them, and the bytes to read, in place or copied).
#[derive(Debug)]
pub(crate) struct Tables {
    pub(crate) hdr_addr: u64,
    pub(crate) eh_addr: u64,
    hdr: (*const u8, usize),
    eh: (*const u8, usize),
    /// The copy `hdr` and `eh` point into, for removable modules.
    _owned: Option<Box<[u8]>>,
}

// SAFETY: the pointers are read-only views of memory that stays valid as long
// as the module is listed in a published table (in place: a permanent module's
// mapping; copied: `_owned`, which moves with the struct without moving its heap
// data).
unsafe impl Send for Tables {}
// SAFETY: as above; nothing is ever written through the pointers.
unsafe impl Sync for Tables {}

impl Tables {
    /// Tables held in memory of their own: `hdr` is the `.eh_frame_hdr` at
    /// `hdr_addr`, `eh` the `.eh_frame` at `eh_addr`.
    pub(crate) fn owned(hdr_addr: u64, hdr: Vec<u8>, eh_addr: u64, eh: Vec<u8>) -> Tables {
        let hdr_len = hdr.len();
        let mut owned = hdr;
        owned.extend_from_slice(&eh);
        let owned = owned.into_boxed_slice();
        let p = owned.as_ptr();
        Tables {
            hdr_addr,
            eh_addr,
            hdr: (p, hdr_len),
            // SAFETY: `owned` holds hdr_len + eh.len() bytes.
            eh: (unsafe { p.add(hdr_len) }, eh.len()),
            _owned: Some(owned),
        }
    }

    /// The `.eh_frame_hdr` bytes.
    #[inline]
    pub(crate) fn hdr(&self) -> &[u8] {
        // SAFETY: see the Send impl: valid for as long as `self` is reachable.
        unsafe { std::slice::from_raw_parts(self.hdr.0, self.hdr.1) }
    }

    /// The `.eh_frame` bytes.
    #[inline]
    pub(crate) fn eh(&self) -> &[u8] {
        // SAFETY: as in `hdr`.
        unsafe { std::slice::from_raw_parts(self.eh.0, self.eh.1) }
    }
}

/// One loaded object: the program, a shared library, the vdso.
#[derive(Debug)]
pub struct Module {
    pub(crate) name: Box<str>,
    pub(crate) bias: u64,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) permanent: bool,
    pub(crate) cfi: Option<Tables>,
    /// `.debug_frame` from the file, for code `.eh_frame` does not cover.
    pub(crate) debug: Option<super::DebugFrame>,
}

impl Module {
    /// The path the dynamic linker knows the module by (empty for the
    /// program itself).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The load bias: the difference between run-time addresses and the
    /// addresses in the module's file.
    pub fn bias(&self) -> u64 {
        self.bias
    }

    /// The code (executable segments) as `[start, end)`.
    pub fn code(&self) -> (u64, u64) {
        (self.start, self.end)
    }

    /// True when the module was loaded with the program and is never
    /// unloaded; its unwind tables are read in place.
    pub fn is_permanent(&self) -> bool {
        self.permanent
    }

    /// True when the module has unwind tables we can search (`.eh_frame`
    /// through its header, or `.debug_frame` from the file).
    pub fn has_unwind_info(&self) -> bool {
        self.cfi.is_some() || self.debug.is_some()
    }

    /// True when the module's `.debug_frame` was loaded from its file.
    pub fn has_debug_frame(&self) -> bool {
        self.debug.is_some()
    }

    pub(crate) fn key(&self) -> Key {
        (self.bias, self.start, self.end)
    }
}

impl ModuleRange for Module {
    #[inline]
    fn range(&self) -> (u64, u64) {
        (self.start, self.end)
    }
    fn permanent(&self) -> bool {
        self.permanent
    }
}

/// A full scan of the loaded modules.
pub(crate) struct Scan {
    /// The dynamic linker's load plus unload count when the scan ran: scans
    /// with a larger stamp saw a later state.
    pub(crate) stamp: u64,
    pub(crate) modules: Vec<Arc<Module>>,
    /// Dependency facts for the permanence closure (init only).
    deps: Vec<Deps>,
}

struct Deps {
    key: Key,
    name: String,
    soname: Option<String>,
    needed: Vec<String>,
    interp: Option<String>,
    is_main: bool,
    is_vdso: bool,
}

struct State<'a> {
    known: &'a [Arc<Module>],
    permanent: Option<&'a HashSet<Key>>,
    want_deps: bool,
    out: Scan,
    first: bool,
}

/// Scans the loaded modules. `known` modules (same key) are reused as they
/// are; new ones are permanent if `permanent` lists them (`None`: treat all
/// as permanent, the init scan, fixed up by [`permanent_closure`]).
pub(crate) fn scan(known: &[Arc<Module>], permanent: Option<&HashSet<Key>>) -> Scan {
    let mut st = State {
        known,
        permanent,
        want_deps: permanent.is_none(),
        out: Scan { stamp: 0, modules: Vec::new(), deps: Vec::new() },
        first: true,
    };
    // SAFETY: the callback has the signature dl_iterate_phdr expects and
    // `st` outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(callback), (&mut st as *mut State<'_>).cast()) };
    let mut out = st.out;
    // New modules (the only ones not shared yet): `.debug_frame` from their
    // files, read outside the dynamic linker's lock.
    for (i, m) in out.modules.iter_mut().enumerate() {
        if let Some(m) = Arc::get_mut(m) {
            let path = if i == 0 && m.name.is_empty() {
                std::path::PathBuf::from("/proc/self/exe")
            } else {
                std::path::PathBuf::from(&*m.name)
            };
            if path.is_absolute() || path.exists() {
                m.debug = super::DebugFrame::load(&path);
            }
        }
    }
    out
}

unsafe extern "C" fn callback(
    info: *mut libc::dl_phdr_info,
    _size: libc::size_t,
    data: *mut libc::c_void,
) -> libc::c_int {
    // SAFETY: `data` is the State passed to dl_iterate_phdr by `scan`, and
    // `info` is valid for this call.
    let (st, info) = unsafe { (&mut *data.cast::<State<'_>>(), &*info) };
    st.out.stamp = info.dlpi_adds.wrapping_add(info.dlpi_subs);
    let is_main = std::mem::take(&mut st.first);
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: dl_iterate_phdr passes a NUL-terminated name (maybe empty).
        unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned()
    };
    // SAFETY: the phdr array has dlpi_phnum entries for the duration of the call.
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let bias = info.dlpi_addr;
    let loads: Vec<(u64, u64, u64, bool)> = phdrs
        .iter()
        .filter(|p| p.p_type == libc::PT_LOAD)
        .map(|p| {
            let s = bias.wrapping_add(p.p_vaddr);
            (s, s.wrapping_add(p.p_filesz), s.wrapping_add(p.p_memsz), p.p_flags & libc::PF_X != 0)
        })
        .collect();
    let (start, end) =
        loads.iter().filter(|l| l.3).fold((u64::MAX, 0), |(s, e), l| (s.min(l.0), e.max(l.2)));
    if start >= end {
        return 0; // no code
    }
    let key = (bias, start, end);
    let is_vdso = name.starts_with("linux-vdso") || name.starts_with("linux-gate");
    if st.want_deps {
        // SAFETY: the module is loaded while we are in the callback.
        let deps = unsafe { read_deps(phdrs, bias, &loads) };
        st.out.deps.push(Deps {
            key,
            name: name.clone(),
            soname: deps.0,
            needed: deps.1,
            interp: deps.2,
            is_main,
            is_vdso,
        });
    }
    if let Some(m) = st.known.iter().find(|m| m.key() == key && *m.name == *name) {
        st.out.modules.push(m.clone());
        return 0;
    }
    let permanent = st.permanent.is_none_or(|p| p.contains(&key));
    let cfi = phdrs.iter().find(|p| p.p_type == libc::PT_GNU_EH_FRAME).and_then(|p| {
        let hdr_addr = bias.wrapping_add(p.p_vaddr);
        // SAFETY: the module is loaded while we are in the callback; the
        // helper reads only inside its file-backed segments.
        unsafe { eh_frame_of(hdr_addr, p.p_memsz as usize, &loads, !permanent) }
    });
    st.out.modules.push(Arc::new(Module {
        name: name.into_boxed_str(),
        bias,
        start,
        end,
        permanent,
        cfi,
        debug: None,
    }));
    0
}

/// The file-backed segment `[start, file_end)` holding `[addr, addr + len)`.
fn segment_of(loads: &[(u64, u64, u64, bool)], addr: u64, len: u64) -> Option<(u64, u64)> {
    loads
        .iter()
        .find(|l| addr >= l.0 && addr.checked_add(len).is_some_and(|e| e <= l.1))
        .map(|l| (l.0, l.1))
}

/// Reads a little-endian u32 at `addr`.
///
/// # Safety
/// `[addr, addr + 4)` is mapped and readable.
unsafe fn read_u32(addr: u64) -> u32 {
    // SAFETY: per the contract.
    unsafe { std::ptr::read_unaligned(addr as *const u32) }
}

/// Locates `.eh_frame` through the header at `hdr_addr` and measures it by
/// walking its entries' length fields to the terminator. Copies both when
/// `copy`.
///
/// # Safety
/// The module is loaded for the duration of the call; `loads` are its
/// PT_LOAD segments.
unsafe fn eh_frame_of(
    hdr_addr: u64,
    hdr_len: usize,
    loads: &[(u64, u64, u64, bool)],
    copy: bool,
) -> Option<Tables> {
    segment_of(loads, hdr_addr, hdr_len as u64)?;
    // SAFETY: the header lies in a file-backed segment of a loaded module.
    let hdr = unsafe { std::slice::from_raw_parts(hdr_addr as *const u8, hdr_len) };
    let bases = gimli::BaseAddresses::default().set_eh_frame_hdr(hdr_addr);
    let parsed = gimli::EhFrameHdr::new(hdr, gimli::LittleEndian).parse(&bases, 8).ok()?;
    let eh_addr = parsed.eh_frame_ptr().direct().ok()?;
    let (_, seg_end) = segment_of(loads, eh_addr, 4)?;
    // Measure: CIE/FDE records up to the zero terminator or the segment's end.
    let mut off = eh_addr;
    while off.checked_add(4)? <= seg_end {
        // SAFETY: [off, off + 4) is inside the segment (checked above).
        let len = u64::from(unsafe { read_u32(off) });
        if len == 0 {
            off += 4;
            break;
        }
        let next = if len == 0xffff_ffff {
            if off + 12 > seg_end {
                break;
            }
            // SAFETY: [off + 4, off + 12) is inside the segment (checked).
            let l64 = u64::from(unsafe { read_u32(off + 4) })
                | (u64::from(unsafe { read_u32(off + 8) }) << 32);
            off.checked_add(12)?.checked_add(l64)?
        } else {
            off + 4 + len
        };
        if next > seg_end {
            break;
        }
        off = next;
    }
    let eh_len = (off - eh_addr) as usize;
    // SAFETY: [eh_addr, off) lies inside the segment.
    let eh = unsafe { std::slice::from_raw_parts(eh_addr as *const u8, eh_len) };
    if !copy {
        return Some(Tables {
            hdr_addr,
            eh_addr,
            hdr: (hdr.as_ptr(), hdr.len()),
            eh: (eh.as_ptr(), eh.len()),
            _owned: None,
        });
    }
    Some(Tables::owned(hdr_addr, hdr.to_vec(), eh_addr, eh.to_vec()))
}

const DT_NULL: i64 = 0;
const DT_NEEDED: i64 = 1;
const DT_STRTAB: i64 = 5;
const DT_STRSZ: i64 = 10;
const DT_SONAME: i64 = 14;

/// The soname, `DT_NEEDED` names and interpreter (`PT_INTERP`) of a loaded
/// module, read from its dynamic section in memory.
///
/// # Safety
/// The module is loaded for the duration of the call; `phdrs`, `bias` and
/// `loads` describe it.
unsafe fn read_deps(
    phdrs: &[libc::Elf64_Phdr],
    bias: u64,
    loads: &[(u64, u64, u64, bool)],
) -> (Option<String>, Vec<String>, Option<String>) {
    let mut interp = None;
    let mut needed_off = Vec::new();
    let mut soname_off = None;
    let (mut strtab, mut strsz) = (0u64, 0u64);
    for p in phdrs {
        let addr = bias.wrapping_add(p.p_vaddr);
        if p.p_type == libc::PT_INTERP && segment_of(loads, addr, p.p_filesz).is_some() {
            // SAFETY: inside a file-backed segment of the loaded module.
            let b = unsafe { std::slice::from_raw_parts(addr as *const u8, p.p_filesz as usize) };
            interp = CStr::from_bytes_until_nul(b).ok().map(|c| c.to_string_lossy().into_owned());
        }
        if p.p_type != libc::PT_DYNAMIC {
            continue;
        }
        let Some((_, seg_end)) = segment_of(loads, addr, 16) else { continue };
        let n = ((seg_end - addr) / 16).min(p.p_memsz / 16);
        for i in 0..n {
            // SAFETY: entry i lies inside the segment (n bounds it).
            let (tag, val) = unsafe {
                let e = (addr + 16 * i) as *const u64;
                (std::ptr::read_unaligned(e) as i64, std::ptr::read_unaligned(e.add(1)))
            };
            match tag {
                DT_NULL => break,
                DT_NEEDED => needed_off.push(val),
                DT_SONAME => soname_off = Some(val),
                DT_STRTAB => strtab = val,
                DT_STRSZ => strsz = val,
                _ => {}
            }
        }
    }
    // glibc relocates DT_STRTAB in place for most modules; the vdso keeps the
    // link-time value.
    if strtab < bias {
        strtab = strtab.wrapping_add(bias);
    }
    let Some((_, seg_end)) = segment_of(loads, strtab, strsz.max(1)) else {
        return (None, Vec::new(), interp);
    };
    let string = |off: u64| -> Option<String> {
        let a = strtab.checked_add(off)?;
        if a >= seg_end {
            return None;
        }
        // SAFETY: [a, seg_end) lies inside the segment.
        let b = unsafe { std::slice::from_raw_parts(a as *const u8, (seg_end - a) as usize) };
        CStr::from_bytes_until_nul(b).ok().map(|c| c.to_string_lossy().into_owned())
    };
    let needed = needed_off.into_iter().filter_map(string).collect();
    (soname_off.and_then(string), needed, interp)
}

fn base_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// The keys of the modules that can never be unloaded: the program, the
/// vdso, the interpreter, the `LD_PRELOAD` libraries, and the `DT_NEEDED`
/// closure of those. Everything else in the init scan was loaded by a
/// `dlopen` (a constructor's, before ours) and may go away.
pub(crate) fn permanent_closure(scan: &Scan) -> HashSet<Key> {
    let preload: Vec<String> = std::env::var("LD_PRELOAD")
        .unwrap_or_default()
        .split([' ', ':'])
        .filter(|s| !s.is_empty())
        .map(|s| base_name(s).to_string())
        .collect();
    let interp: Vec<String> =
        scan.deps.iter().filter_map(|d| d.interp.as_deref()).map(|s| base_name(s).into()).collect();
    let matches =
        |d: &Deps, want: &str| base_name(&d.name) == want || d.soname.as_deref() == Some(want);
    let mut seen: HashSet<Key> = HashSet::new();
    let mut queue: VecDeque<&Deps> = VecDeque::new();
    for d in &scan.deps {
        let root =
            d.is_main || d.is_vdso || preload.iter().chain(&interp).any(|w| matches(d, w.as_str()));
        if root && seen.insert(d.key) {
            queue.push_back(d);
        }
    }
    while let Some(d) = queue.pop_front() {
        for want in &d.needed {
            let want = base_name(want);
            for e in scan.deps.iter().filter(|e| matches(e, want)) {
                if seen.insert(e.key) {
                    queue.push_back(e);
                }
            }
        }
    }
    seen
}

/// Marks the modules of the init scan that the closure does not hold as
/// removable, copying their unwind tables.
pub(crate) fn apply_closure(scan: Scan, permanent: &HashSet<Key>) -> Scan {
    let removable: Vec<Key> =
        scan.modules.iter().filter(|m| !permanent.contains(&m.key())).map(|m| m.key()).collect();
    if removable.is_empty() {
        return scan;
    }
    // Rescan: the copies must be made while the dynamic linker guarantees
    // the modules are loaded (inside its callback).
    let keep: Vec<Arc<Module>> =
        scan.modules.into_iter().filter(|m| permanent.contains(&m.key())).collect();
    let again = self::scan(&keep, Some(permanent));
    Scan { stamp: again.stamp, modules: again.modules, deps: Vec::new() }
}
