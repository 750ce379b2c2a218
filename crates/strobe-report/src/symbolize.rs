//! From instruction pointers to functions: address spaces, normalization, symbolization.
//!
//! Each process's recorded mappings form an *address space*; an exec starts a new one
//! for the same pid. An IP is normalized with its space's mappings to (file, file
//! offset), and all offsets of one file are named together. Each unique address is
//! symbolized once, whatever its sample count.
//!
//! - **Names** come from the file's symbol table read as `perf report` reads it
//!   (strobe-target's `symtab`: the separate debug file's table when there is one, perf's
//!   rules for aliases, unsized symbols and PLT entries), so a function has the name perf
//!   gives it, in perf.data files and strobe's recordings alike; Rust and C++ names are
//!   demangled here.
//! - **Source lines and inlined frames** come from DWARF (blazesym), read only when an
//!   output shows them ([`SymbolOptions::names_only`], [`SymbolOptions::inline`]).
//!
//! The vDSO has no file: `strobe record` saves its bytes in the recording (an IMAGE
//! chunk), and its addresses are named from those bytes.
//!
//! Where the symbol tables say nothing:
//!
//! - JIT code (anonymous memory, or no recorded mapping at all) is named from the JIT's
//!   own symbol files (`/tmp/perf-PID.map`, jitdump; module `jit`), by the OS pid the
//!   source gave for the address space.
//! - A stripped file is named from MiniDebugInfo (`.gnu_debugdata`) when it has it, and
//!   otherwise split into functions at its `.eh_frame` FDE boundaries, each named
//!   `<module>+0x<start>` (the link-time address of the function's first byte).
//! - Separate debug files are found under the debug directories
//!   ([`SymbolOptions::debug_dirs`]): by build id here (`.build-id/ab/cdef.debug`: its
//!   symbol table names the file's code, and its DWARF is read by link-time address),
//!   and by `.gnu_debuglink` by blazesym for lines.
//!
//! An address that still cannot be named is never dropped: it becomes
//! `[unknown in <module>]` when a mapping holds it (a vDSO the recording has no image of,
//! code no FDE covers) and `[unknown]` when none does.
//!
//! This module must never look at counters or decide attribution.

use std::path::Path;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::input::{KernelSymbol, Mapping};

/// Where the kernel half of a 64-bit address space starts.
pub(crate) const KERNEL_START: u64 = 1 << 63;
/// The module name of the kernel image.
pub(crate) const KERNEL_MODULE: &str = "[kernel]";

/// The processes' address spaces, keyed by a small id the aggregation uses.
#[derive(Debug, Default)]
pub(crate) struct Spaces {
    /// pid -> its current space id.
    current: FxHashMap<u32, u32>,
    /// Space id -> its mappings.
    spaces: Vec<Space>,
    /// Modules with no file, by mapping name (`[vdso]`): their bytes.
    images: FxHashMap<String, Vec<u8>>,
    /// Space id -> the OS pid of its process, when the source says (JIT symbol files
    /// are named by it).
    pids: FxHashMap<u32, u32>,
    /// Kernel functions, sorted by start.
    kernel: Vec<KernelSymbol>,
    /// The running kernel's table, for sources that carry no kernel symbols of their own
    /// (perf.data recorded on this kernel).
    kallsyms: Option<strobe_target::kallsyms::Kallsyms>,
    /// The same as `/proc/kallsyms` text, read only for the kernel addresses symbolized.
    kallsyms_text: Option<String>,
}

#[derive(Debug)]
struct Space {
    maps: Vec<Mapping>,
    sorted: bool,
}

impl Spaces {
    /// The current space of `pid`, creating an empty one for a pid not seen before.
    pub(crate) fn space_of(&mut self, pid: u32) -> u32 {
        if let Some(&id) = self.current.get(&pid) {
            return id;
        }
        self.new_space(pid)
    }

    /// Starts a new, empty space for `pid` (after an exec) and returns its id.
    pub(crate) fn new_space(&mut self, pid: u32) -> u32 {
        let id = self.spaces.len() as u32;
        self.spaces.push(Space { maps: Vec::new(), sorted: true });
        self.current.insert(pid, id);
        id
    }

    /// Adds a mapping to `pid`'s current space. A later mapping that overlaps an
    /// earlier one replaces it (munmap + mmap, dlclose + dlopen).
    pub(crate) fn add_mapping(&mut self, pid: u32, m: Mapping) {
        let id = self.space_of(pid) as usize;
        if let Some(space) = self.spaces.get_mut(id) {
            space.maps.retain(|old| old.end <= m.start || old.start >= m.end);
            space.maps.push(m);
            space.sorted = false;
        }
    }

    /// Notes that `key`'s current space is the process with OS pid `pid`.
    pub(crate) fn set_pid(&mut self, key: u32, pid: u32) {
        let id = self.space_of(key);
        self.pids.insert(id, pid);
    }

    /// The OS pid of `space`'s process, when known.
    pub(crate) fn pid_of(&self, space: u32) -> Option<u32> {
        self.pids.get(&space).copied()
    }

    /// The paths `space` maps.
    pub(crate) fn paths_of(&self, space: u32) -> impl Iterator<Item = &str> {
        self.spaces
            .get(space as usize)
            .into_iter()
            .flat_map(|s| s.maps.iter().map(|m| m.path.as_str()))
    }

    /// Records the bytes of the module mapped under `name` (a pseudo path like `[vdso]`).
    pub(crate) fn add_image(&mut self, name: String, bytes: Vec<u8>) {
        self.images.insert(name, bytes);
    }

    /// Adds kernel symbols (later ones with the same start are dropped).
    pub(crate) fn add_kernel_symbols(&mut self, syms: impl IntoIterator<Item = KernelSymbol>) {
        self.kernel.extend(syms);
        self.kernel.sort_by_key(|k| k.start);
        self.kernel.dedup_by_key(|k| k.start);
    }

    /// Names kernel addresses from the running kernel's table too.
    pub(crate) fn set_kallsyms(&mut self, table: strobe_target::kallsyms::Kallsyms) {
        self.kallsyms = Some(table);
    }

    /// Names kernel addresses from the running kernel's table too, given as the text of
    /// `/proc/kallsyms`: only the symbols the symbolized addresses need are kept.
    pub(crate) fn set_kallsyms_text(&mut self, text: String) {
        self.kallsyms_text = Some(text);
    }

    /// Turns the kallsyms text, if any, into a table of the symbols `addrs` need.
    fn prepare_kernel(&mut self, addrs: &[(u32, u64)]) {
        let Some(text) = self.kallsyms_text.take() else { return };
        let mut kernel: Vec<u64> =
            addrs.iter().map(|&(_, a)| a).filter(|&a| a >= KERNEL_START).collect();
        kernel.sort_unstable();
        kernel.dedup();
        if let Some(t) = strobe_target::kallsyms::Kallsyms::for_addresses(&text, &kernel) {
            self.kallsyms = Some(t);
        }
    }

    /// The kernel function holding `ip`.
    fn kernel_symbol(&self, ip: u64) -> Option<KernelSymbol> {
        let i = self.kernel.partition_point(|k| k.start <= ip).checked_sub(1);
        let listed = i.and_then(|i| self.kernel.get(i)).filter(|k| ip - k.start < k.size);
        listed.cloned().or_else(|| self.kallsyms.as_ref()?.lookup(ip))
    }

    fn sort(&mut self) {
        for s in &mut self.spaces {
            if !s.sorted {
                s.maps.sort_by_key(|m| m.start);
                s.sorted = true;
            }
        }
    }

    fn find(&self, space: u32, ip: u64) -> Option<&Mapping> {
        let maps = &self.spaces.get(space as usize)?.maps;
        let i = maps.partition_point(|m| m.start <= ip);
        let m = maps.get(i.checked_sub(1)?)?;
        (ip < m.end).then_some(m)
    }

    /// The mapping holding `ip` in `space`; failing that, in any other space (a forked
    /// child shares its parent's layout until it execs), lowest id first.
    fn locate(&self, space: u32, ip: u64) -> Option<&Mapping> {
        self.find(space, ip)
            .or_else(|| (0..self.spaces.len() as u32).find_map(|s| self.find(s, ip)))
    }
}

/// How addresses are named: options a user may set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SymbolOptions {
    /// Report functions inlined at an address as frames of their own (DWARF inline info).
    pub inline: bool,
    /// Directories searched for separate debug files (by build id, `.build-id/ab/cdef.debug`,
    /// and by `.gnu_debuglink` name); `None`: `/usr/lib/debug` and `/lib/debug`.
    pub debug_dirs: Option<Vec<std::path::PathBuf>>,
    /// Do not read JIT symbol files (`/tmp/perf-PID.map`, jitdump).
    pub no_jit: bool,
    /// Names only: no source lines (`FunctionStats::source`, `lines`), so no DWARF is
    /// read (unless [`SymbolOptions::inline`] asks for inlined frames). For outputs that
    /// show no lines (the table, folded stacks, flame graphs): reading a large library's
    /// DWARF costs more than the rest of a report.
    pub names_only: bool,
    /// Read every file that names code (the mapped files, their debug files, JIT symbol
    /// files) under this directory instead of `/`, as perf's `--symfs` does: for a
    /// recording made on another machine, or a fixed set of files. `None`: `/`.
    pub symfs: Option<std::path::PathBuf>,
    /// Name kernel addresses of a perf.data file from this copy of `/proc/kallsyms` (the
    /// machine and boot it was recorded on), as perf's `--kallsyms` does; `None`: the
    /// running kernel's, when the file was recorded on it.
    pub kallsyms: Option<std::path::PathBuf>,
}

impl SymbolOptions {
    /// Where the file recorded as `path` is read: `path` itself, or under
    /// [`SymbolOptions::symfs`].
    pub fn file(&self, path: &str) -> std::path::PathBuf {
        under_symfs(self.symfs.as_deref(), path)
    }

    /// The directories searched for separate debug files: those given, else
    /// `/usr/lib/debug` and `/lib/debug` (under the symfs when there is one).
    pub fn debug_dirs(&self) -> Vec<std::path::PathBuf> {
        match &self.debug_dirs {
            Some(d) => d.clone(),
            None => ["/usr/lib/debug", "/lib/debug"].map(|d| self.file(d)).to_vec(),
        }
    }
}

/// Where the file recorded as `path` is read: `path` itself, or under `symfs` (perf's
/// `--symfs`).
pub(crate) fn under_symfs(symfs: Option<&std::path::Path>, path: &str) -> std::path::PathBuf {
    match symfs {
        Some(root) => root.join(path.trim_start_matches('/')),
        None => std::path::PathBuf::from(path),
    }
}

/// A function inlined at an address: its name and the source line inside it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct InlinedFrame {
    /// The inlined function.
    pub function: String,
    /// `file:line` inside it.
    pub source: Option<String>,
}

/// What one address symbolized to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Frame {
    /// The function, or `[unknown in <module>]` / `[unknown]`.
    pub function: String,
    /// The module's file name (or pseudo name such as `[vdso]`); empty for `[unknown]`.
    pub module: String,
    /// The module's full path: with `function`, what makes two functions the same.
    pub module_path: String,
    /// `file:line` of the address in `function` when DWARF line tables exist: where
    /// the outermost inlined call is when code was inlined at the address (that call's
    /// line, not a line of the inlined function), with or without inlined frames.
    pub source: Option<String>,
    /// Functions inlined at the address, outermost first (only with
    /// [`SymbolOptions::inline`]); the last one's `source` is the address's own line.
    pub inlined: Vec<InlinedFrame>,
}

/// The display name of a mapping's module.
fn module_name(path: &str) -> String {
    if path.is_empty() {
        return "[anon]".to_string();
    }
    if path.starts_with('[') {
        return path.to_string();
    }
    Path::new(path).file_name().map_or_else(|| path.to_string(), |n| n.to_string_lossy().into())
}

fn unknown_in(path: &str) -> Frame {
    let module = module_name(path);
    Frame {
        function: format!("[unknown in {module}]"),
        module,
        module_path: path.to_string(),
        source: None,
        inlined: Vec::new(),
    }
}

/// Whether code at an address in a mapping of `path` may be JIT code: anonymous memory,
/// a pseudo mapping other than the vDSO family, or a jitdump file mapped executable.
fn maybe_jit(path: &str) -> bool {
    path.is_empty()
        || path.starts_with("[anon")
        || path.starts_with("/memfd:")
        || path.starts_with("//anon")
        || Path::new(path).file_name().is_some_and(|n| {
            let n = n.to_string_lossy();
            n.starts_with("jit-") && n.ends_with(".dump")
        })
}

/// Names of file addresses kept across reports, for a caller that builds a report every
/// few seconds from the same processes (continuous recording): reading a file's symbol
/// table and DWARF costs far more than the rest of a small report, and the same
/// addresses come back interval after interval.
///
/// Entries are keyed by the file's path and the address's file offset, and belong to
/// the file as it was when they were made (its device, inode, size and modification
/// time): a file replaced on disk is read again. The addresses that name the same frame
/// share one copy of it (a function's addresses, in a report without source lines), so
/// an entry costs about 16 bytes, and a frame its strings once. Every entry is dropped when the
/// [`SymbolOptions`] change; the names (not the parsed tables) when the cache holds
/// [`SymbolCache::MAX_ENTRIES`]. Kernel, JIT and pseudo-mapping names are not kept
/// (they are cheap, or change).
///
/// Parsed symbol tables (and code indexes) are kept while the reports use them: the
/// caller groups its reports in batches ([`SymbolCache::end_batch`]: a continuous
/// recording's interval, one report per process), and a table used in the batch that
/// just ended is never dropped, so a file is parsed at most once a batch and once for
/// as long as some process that maps it keeps sampling. Of the tables that neither the
/// current batch nor the last one used, up to [`SymbolCache::MAX_TABLE_BYTES`] are kept,
/// least recently used dropped first (a shell or a libm that no process sampled for a
/// batch is not parsed again when one does). The memory this holds follows the files the host's sampled
/// processes map (a compiler's libraries hold tens of megabytes of symbols each).
#[derive(Debug, Clone, Default)]
pub struct SymbolCache(std::sync::Arc<std::sync::Mutex<CacheInner>>);

#[derive(Debug, Default)]
struct CacheInner {
    opts: Option<SymbolOptions>,
    files: FxHashMap<String, CachedFile>,
    entries: usize,
    /// Parsed symbol tables (and code indexes), least recently used first: a new
    /// address in a file already read costs a lookup, not a parse.
    tables: Vec<Parsed>,
}

type FileId = (u64, u64, u64, i64, i64);

type Table = std::sync::Arc<strobe_target::symtab::FunctionTable>;
/// A file's code index (FDE ranges, MiniDebugInfo), once looked for: `None` inside when
/// the file has none that can be read.
type Index = Option<std::sync::Arc<strobe_target::debuginfo::CodeIndex>>;

/// What was parsed of one file.
#[derive(Debug)]
struct Parsed {
    path: String,
    id: Option<FileId>,
    table: Table,
    /// Parsed only when an address needed it (one no symbol names, or DWARF by vaddr).
    index: Option<Index>,
    bytes: usize,
    /// Used in the current batch.
    used: bool,
    /// Used in the batch that ended last.
    used_last: bool,
}

impl Parsed {
    fn new(path: &str, id: Option<FileId>, table: Table, index: Option<Index>) -> Parsed {
        let index_bytes = index.as_ref().and_then(Option::as_ref).map_or(0, |i| {
            i.fde_ranges.capacity() * 16
                + i.mini_symbols.iter().map(|m| m.name.capacity() + 48).sum::<usize>()
        });
        let bytes = table.heap_bytes() + index_bytes;
        Parsed { path: path.to_string(), id, table, index, bytes, used: true, used_last: false }
    }
}

impl CacheInner {
    fn table(&mut self, path: &str, id: Option<FileId>) -> Option<(Table, Option<Index>)> {
        let i = self.tables.iter().position(|t| t.path == path && t.id == id)?;
        let mut t = self.tables.remove(i);
        t.used = true;
        let found = (std::sync::Arc::clone(&t.table), t.index.clone());
        self.tables.push(t);
        Some(found)
    }

    fn keep_table(&mut self, path: &str, id: Option<FileId>, table: Table, index: Option<Index>) {
        let kept = self.tables.iter().find(|t| t.path == path && t.id == id);
        if kept.is_some_and(|t| t.index.is_some() || index.is_none()) {
            return;
        }
        // New, or its code index parsed since it was kept.
        let used_last = kept.is_some_and(|t| t.used_last);
        self.tables.retain(|t| t.path != path);
        let mut parsed = Parsed::new(path, id, table, index);
        parsed.used_last = used_last;
        self.tables.push(parsed);
        self.trim();
    }

    /// Drops the least recently used tables that neither this batch nor the last one
    /// used, while those hold more than [`SymbolCache::MAX_TABLE_BYTES`].
    fn trim(&mut self) {
        let idle = |t: &Parsed| !t.used && !t.used_last;
        let mut bytes: usize = self.tables.iter().filter(|t| idle(t)).map(|t| t.bytes).sum();
        let mut i = 0;
        while bytes > SymbolCache::MAX_TABLE_BYTES && i < self.tables.len() {
            let t = &self.tables[i];
            if idle(t) {
                bytes -= t.bytes;
                self.tables.remove(i);
            } else {
                i += 1;
            }
        }
    }
}

#[derive(Debug, Default)]
struct CachedFile {
    id: Option<FileId>,
    /// By file offset: its frame, one of `distinct`.
    frames: FxHashMap<u64, std::sync::Arc<Frame>>,
    /// The different frames of `frames`, each once.
    distinct: FxHashSet<std::sync::Arc<Frame>>,
}

impl CachedFile {
    /// Keeps `frame` as the name of `off`; true if `off` was not kept before.
    fn keep(&mut self, off: u64, frame: &Frame) -> bool {
        let shared = match self.distinct.get(frame) {
            Some(f) => std::sync::Arc::clone(f),
            None => {
                let f = std::sync::Arc::new(frame.clone());
                self.distinct.insert(std::sync::Arc::clone(&f));
                f
            }
        };
        self.frames.insert(off, shared).is_none()
    }
}

impl SymbolCache {
    /// The most addresses kept (about 16 bytes each, and each different frame once).
    pub const MAX_ENTRIES: usize = 1 << 16;
    /// The most bytes of parsed symbol tables kept of those the last two batches did
    /// not use.
    pub const MAX_TABLE_BYTES: usize = 32 << 20;

    /// Addresses kept now.
    pub fn len(&self) -> usize {
        self.0.lock().map_or(0, |c| c.entries)
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ends a batch of reports: from now on, the tables it did not use may be dropped.
    pub fn end_batch(&self) {
        if let Ok(mut c) = self.0.lock() {
            for t in &mut c.tables {
                t.used_last = std::mem::take(&mut t.used);
            }
            c.trim();
        }
    }

    /// Bytes of parsed tables held now.
    pub fn table_bytes(&self) -> usize {
        self.0.lock().map_or(0, |c| c.tables.iter().map(|t| t.bytes).sum())
    }
}

/// What identifies a file's contents: device, inode, size, modification time.
fn file_id(path: &Path) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()))
}

/// Symbolizes `addrs` ((space, ip) pairs), returning one frame per address in order.
pub(crate) fn symbolize(spaces: &mut Spaces, addrs: &[(u32, u64)]) -> Vec<Frame> {
    symbolize_with(spaces, addrs, &SymbolOptions::default(), None)
}

/// [`symbolize`] under `opts`, with names kept in `cache`.
pub(crate) fn symbolize_with(
    spaces: &mut Spaces,
    addrs: &[(u32, u64)],
    opts: &SymbolOptions,
    cache: Option<&SymbolCache>,
) -> Vec<Frame> {
    spaces.sort();
    spaces.prepare_kernel(addrs);
    let unknown = Frame {
        function: "[unknown]".into(),
        module: String::new(),
        module_path: String::new(),
        source: None,
        inlined: Vec::new(),
    };
    let mut out: Vec<Frame> = vec![unknown; addrs.len()];
    let by_file = name_without_files(spaces, addrs, opts, &mut out);
    // Names are demangled here, not by blazesym: its demangler reads an unmangled C name
    // such as `b` as the Itanium type code for `bool` (and `a` as `signed char`). Only
    // `_Z` (C++) and `_R`/legacy Rust names are demangled.
    //
    // Inline information is read even without `opts.inline`: without it blazesym gives
    // the line table's row for an address, which in optimized code is often a line of a
    // function inlined there (`core::hint::black_box`, `Vec::push`), so a frame would
    // name one function and a line of another. With it, the symbol's line is the one in
    // the function the symbol table names (where the outermost inlined call is).
    let mut builder = Symbolizer::builder()
        .enable_code_info(true)
        .enable_inlined_fns(true)
        .enable_demangling(false);
    let debug_dirs = opts.debug_dirs();
    if opts.debug_dirs.is_some() || opts.symfs.is_some() {
        builder = builder.set_debug_dirs(Some(&debug_dirs));
    }
    let symbolizer = builder.build();
    let mut guard = cache.and_then(|c| c.0.lock().ok());
    if let Some(c) = guard.as_deref_mut() {
        if c.opts.as_ref() != Some(opts) {
            *c = CacheInner { opts: Some(opts.clone()), ..CacheInner::default() };
        }
    }
    for (path, mut offs) in by_file {
        let mut id = None;
        if let Some(c) = guard.as_deref_mut() {
            // Names kept for this file as it is now fill their slots; the rest are named.
            id = if spaces.images.contains_key(path) { None } else { file_id(&opts.file(path)) };
            let entry = c.files.entry(path.to_string()).or_default();
            if entry.id != id {
                c.entries -= entry.frames.len();
                *entry = CachedFile { id, ..CachedFile::default() };
            }
            offs.retain(|&(off, i)| match (entry.frames.get(&off), out.get_mut(i)) {
                (Some(f), Some(slot)) => {
                    *slot = Frame::clone(f);
                    false
                }
                _ => true,
            });
            if offs.is_empty() {
                continue;
            }
        }
        let named: Vec<(u64, usize)> = if guard.is_some() { offs.clone() } else { Vec::new() };
        let (table, index) = guard.as_deref_mut().and_then(|c| c.table(path, id)).unzip();
        let file = FileToName {
            path,
            symbolizer: &symbolizer,
            debug_dirs: &debug_dirs,
            table: std::cell::RefCell::new(table),
            index: std::cell::RefCell::new(index.flatten()),
        };
        file.name(spaces, opts, offs, &mut out);
        if let Some(c) = guard.as_deref_mut() {
            if let Some(t) = file.table.into_inner() {
                c.keep_table(path, id, t, file.index.into_inner());
            }
            if c.entries + named.len() > SymbolCache::MAX_ENTRIES {
                // The names go; the parsed tables stay (a name is looked up again in
                // them at the cost of a search, a table is parsed again at the cost
                // of reading the file).
                c.files.clear();
                c.entries = 0;
            }
            let entry = c.files.entry(path.to_string()).or_default();
            entry.id = id;
            for (off, i) in named {
                if let Some(f) = out.get(i) {
                    if entry.keep(off, f) {
                        c.entries += 1;
                    }
                }
            }
        }
    }
    out
}

/// Names the addresses no file is read for (kernel addresses, JIT code, pseudo
/// mappings), setting each other mapped address to `[unknown in <module>]` for now;
/// returns the addresses to be named from files: path -> [(file offset, index)].
fn name_without_files<'s>(
    spaces: &'s Spaces,
    addrs: &[(u32, u64)],
    opts: &SymbolOptions,
    out: &mut [Frame],
) -> FxHashMap<&'s str, Vec<(u64, usize)>> {
    let mut by_file: FxHashMap<&str, Vec<(u64, usize)>> = FxHashMap::default();
    // JIT symbols per OS pid, loaded on first use.
    let mut jit: FxHashMap<u32, crate::jit::JitSymbols> = FxHashMap::default();
    for (i, &(space, ip)) in addrs.iter().enumerate() {
        let Some(slot) = out.get_mut(i) else { continue };
        if ip >= KERNEL_START {
            if let Some(k) = spaces.kernel_symbol(ip) {
                let module = if k.module.is_empty() {
                    KERNEL_MODULE.to_string()
                } else {
                    format!("[{}]", k.module)
                };
                *slot = Frame {
                    function: k.name,
                    module_path: module.clone(),
                    module,
                    source: None,
                    inlined: Vec::new(),
                };
                continue;
            }
            if spaces.locate(space, ip).is_none() {
                *slot = unknown_in(KERNEL_MODULE);
                continue;
            }
        }
        let m = spaces.locate(space, ip);
        if !opts.no_jit && m.is_none_or(|m| maybe_jit(&m.path)) {
            if let Some(pid) = spaces.pid_of(space) {
                let syms = jit.entry(pid).or_insert_with(|| {
                    crate::jit::JitSymbols::load(pid, spaces.paths_of(space), opts.symfs.as_deref())
                });
                if let Some((name, source)) = syms.find(ip) {
                    *slot = Frame {
                        function: demangled(name),
                        module: source.to_string(),
                        module_path: format!("[jit {pid}]"),
                        source: None,
                        inlined: Vec::new(),
                    };
                    continue;
                }
            }
        }
        let Some(m) = m else { continue };
        // Real files, and pseudo mappings the recording has the bytes of, can be
        // symbolized; other pseudo mappings keep their module name.
        let is_file = m.path.starts_with('/') && !m.path.ends_with(" (deleted)");
        if is_file || spaces.images.contains_key(&m.path) {
            by_file.entry(m.path.as_str()).or_default().push((ip - m.start + m.offset, i));
        }
        *slot = unknown_in(&m.path);
    }
    by_file
}

/// One mapped file whose addresses are named from its symbols.
struct FileToName<'a> {
    /// The path the recording gives (or an image's pseudo name).
    path: &'a str,
    symbolizer: &'a Symbolizer,
    debug_dirs: &'a [std::path::PathBuf],
    /// Its symbol table, parsed already (kept by a [`SymbolCache`]), or once parsed.
    table: std::cell::RefCell<Option<Table>>,
    /// Its code index, likewise.
    index: std::cell::RefCell<Option<Index>>,
}

impl FileToName<'_> {
    /// Names `offs` ((file offset, index into `out`)) from the file's symbols; what they
    /// do not name stays as it is.
    fn name(
        &self,
        spaces: &Spaces,
        opts: &SymbolOptions,
        mut offs: Vec<(u64, usize)>,
        out: &mut [Frame],
    ) {
        offs.sort_unstable();
        let mut unique: Vec<u64> = offs.iter().map(|&(o, _)| o).collect();
        unique.dedup();
        let image = spaces.images.get(self.path).map(Vec::as_slice);
        let file = opts.file(self.path);
        let Some(frames) = self.frames(&file, image, &unique, opts) else { return };
        for (off, i) in offs {
            let Ok(u) = unique.binary_search(&off) else { continue };
            if let (Some(Some(f)), Some(slot)) = (frames.get(u), out.get_mut(i)) {
                *slot = f.clone();
            }
        }
    }

    /// The frame of each of the file offsets `unique` (sorted, distinct) in `file` (or in
    /// `image`, the bytes of a module with no file), where something names it; `None` when
    /// the file cannot be read as ELF.
    ///
    /// Names come from the symbol table as `perf report` reads it (strobe-target's
    /// `symtab`, from the separate debug file when there is one); an address no symbol
    /// holds is named from MiniDebugInfo or split at its FDE (`module+0xSTART`). Source
    /// lines and inlined frames come from DWARF (blazesym), unless only names are wanted.
    fn frames(
        &self,
        file: &Path,
        image: Option<&[u8]>,
        unique: &[u64],
        opts: &SymbolOptions,
    ) -> Option<Vec<Option<Frame>>> {
        use strobe_target::debuginfo::{debug_file_of, CodeIndex};
        use strobe_target::mapped::MappedFile;
        use strobe_target::symtab::FunctionTable;
        // The file, opened and mapped once for all that reads it here (its build id, its
        // symbol table, its names, its code index); blazesym opens it by path on its own
        // for DWARF (it takes no open file).
        let mapped_cell = std::cell::OnceCell::new();
        let mapped = || -> Option<&MappedFile> {
            mapped_cell
                .get_or_init(|| match image {
                    Some(_) => None,
                    None => MappedFile::open(file).ok(),
                })
                .as_ref()
        };
        // The separate debug file: looked for when the table is parsed or DWARF read.
        let debug_cell = std::cell::OnceCell::new();
        let debug = || -> Option<&Path> {
            debug_cell.get_or_init(|| debug_file_of(mapped()?, self.debug_dirs)).as_deref()
        };
        // Mapped when the table is parsed from it (its names are read from it too).
        let mut mapped_debug: Option<MappedFile> = None;
        let cached = self.table.borrow().clone();
        let table = match cached {
            Some(t) => t,
            None => {
                let table = match image {
                    Some(bytes) => FunctionTable::parse(file, bytes, None),
                    None => {
                        let m = mapped()?;
                        debug().map(MappedFile::open).transpose().and_then(|d| {
                            mapped_debug = d;
                            FunctionTable::from_mapped(m, mapped_debug.as_ref())
                        })
                    }
                };
                // Unreadable (above) or not ELF: every address stays
                // "[unknown in <module>]".
                let t = std::sync::Arc::new(table.ok()?);
                *self.table.borrow_mut() = Some(std::sync::Arc::clone(&t));
                t
            }
        };
        // What a stripped file still says (its segments, FDE boundaries, MiniDebugInfo).
        let index = || -> Index {
            self.index
                .borrow_mut()
                .get_or_insert_with(|| {
                    match image {
                        Some(bytes) => CodeIndex::parse(file, bytes).ok(),
                        None => CodeIndex::parse(file, mapped()?.bytes()).ok(),
                    }
                    .map(std::sync::Arc::new)
                })
                .clone()
        };
        // Lines and inlined frames: DWARF, of files (a module with no file has none).
        let dwarf = match image {
            Some(_) => None,
            None if opts.names_only && !opts.inline => None,
            None => self.dwarf(file, debug(), index().as_deref(), unique),
        };
        let module = module_name(self.path);
        // The functions holding the offsets, then their names, read together.
        let found: Vec<Option<strobe_target::symtab::Found>> =
            unique.iter().map(|&off| table.find(off)).collect();
        let hits: Vec<_> = found.iter().flatten().copied().collect();
        let maps: Vec<&MappedFile> =
            mapped_cell.get().into_iter().flatten().chain(mapped_debug.as_ref()).collect();
        let mut names = table.names_in(&hits, &maps).into_iter();
        let named: Vec<Option<(String, bool)>> = found
            .iter()
            .map(|f| {
                let f = f.as_ref()?;
                names.next().flatten().map(|n| (n, f.plt))
            })
            .collect();
        let frames = unique
            .iter()
            .enumerate()
            .map(|(k, &off)| {
                let (source, inlined) = match dwarf.as_ref().and_then(|d| d.get(k)) {
                    Some(Symbolized::Sym(sym)) => (
                        sym.code_info.as_deref().map(source_of),
                        sym.inlined
                            .iter()
                            .filter(|_| opts.inline)
                            .map(|f| InlinedFrame {
                                function: demangled(&f.name),
                                source: f.code_info.as_ref().map(source_of),
                            })
                            .collect(),
                    ),
                    _ => (None, Vec::new()),
                };
                let function = match named.get(k).and_then(Option::as_ref) {
                    Some((name, true)) => format!("{}@plt", demangled(name)),
                    Some((name, false)) => demangled(name),
                    None => {
                        let index = index()?;
                        let vaddr = index.offset_to_vaddr(off)?;
                        match index.mini_symbol_at(vaddr) {
                            Some(s) => demangled(&s.name),
                            None => format!("{module}+{:#x}", index.fde_at(vaddr)?.0),
                        }
                    }
                };
                Some(Frame {
                    function,
                    module: module.clone(),
                    module_path: self.path.to_string(),
                    source,
                    inlined,
                })
            })
            .collect();
        Some(frames)
    }

    /// blazesym's view of `unique` (file offsets in `file`), for its source lines and
    /// inlined frames: through the separate debug file by link-time address when there is
    /// one, else through the file by offset.
    fn dwarf(
        &self,
        file: &Path,
        debug: Option<&Path>,
        index: Option<&strobe_target::debuginfo::CodeIndex>,
        unique: &[u64],
    ) -> Option<Vec<Symbolized<'_>>> {
        let syms = match debug {
            Some(dbg) => {
                let index = index?;
                let vaddrs: Vec<u64> =
                    unique.iter().map(|&o| index.offset_to_vaddr(o).unwrap_or(0)).collect();
                self.symbolizer.symbolize(&Source::Elf(Elf::new(dbg)), Input::VirtOffset(&vaddrs))
            }
            None => {
                self.symbolizer.symbolize(&Source::Elf(Elf::new(file)), Input::FileOffset(unique))
            }
        };
        syms.ok()
    }
}

/// `file:line` of a blazesym code location.
fn source_of(ci: &blazesym::symbolize::CodeInfo<'_>) -> String {
    match ci.line {
        Some(line) => format!("{}:{line}", ci.to_path().display()),
        None => ci.to_path().display().to_string(),
    }
}

/// A symbol's demangled name (Rust, C++), or the name itself.
fn demangled(name: &str) -> String {
    match strobe_target::elf::demangle(name) {
        (Some(full), _) => full,
        (None, _) => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names() {
        assert_eq!(module_name("/usr/lib/libc.so.6"), "libc.so.6");
        assert_eq!(module_name("[vdso]"), "[vdso]");
        assert_eq!(module_name(""), "[anon]");
    }

    #[test]
    fn later_overlapping_mapping_replaces_earlier() {
        let mut s = Spaces::default();
        let m = |start, end, path: &str| Mapping { start, end, offset: 0, path: path.into() };
        s.add_mapping(1, m(0x1000, 0x3000, "/old"));
        s.add_mapping(1, m(0x5000, 0x6000, "/other"));
        s.add_mapping(1, m(0x2000, 0x4000, "/new"));
        s.sort();
        let sp = s.space_of(1);
        assert_eq!(s.locate(sp, 0x2800).map(|m| m.path.as_str()), Some("/new"));
        assert_eq!(s.locate(sp, 0x1800), None, "the replaced mapping is gone");
        assert_eq!(s.locate(sp, 0x5fff).map(|m| m.path.as_str()), Some("/other"));
        assert_eq!(s.locate(sp, 0x6000), None);
        // A forked child without mappings of its own resolves through its parent's.
        let child = s.space_of(2);
        assert_eq!(s.locate(child, 0x5800).map(|m| m.path.as_str()), Some("/other"));
    }

    #[test]
    fn kernel_addresses_are_named_from_kernel_symbols() {
        let mut s = Spaces::default();
        let k = |start, size, name: &str, module: &str| KernelSymbol {
            start,
            size,
            name: name.into(),
            module: module.into(),
        };
        s.add_kernel_symbols([
            k(0xffff_ffff_8100_0000, 0x100, "clear_page_erms", ""),
            k(0xffff_ffff_c000_0000, 0x40, "ext4_read", "ext4"),
        ]);
        let sp = s.space_of(1);
        let addrs = [
            (sp, 0xffff_ffff_8100_0010),
            (sp, 0xffff_ffff_c000_0020),
            (sp, 0xffff_ffff_8100_0100), // past the symbol's size
        ];
        let f = symbolize(&mut s, &addrs);
        assert_eq!((f[0].function.as_str(), f[0].module.as_str()), ("clear_page_erms", "[kernel]"));
        assert_eq!((f[1].function.as_str(), f[1].module.as_str()), ("ext4_read", "[ext4]"));
        assert_eq!(f[2].function, "[unknown in [kernel]]");
    }

    /// The cache's addresses that name the same frame share one copy of it, and a
    /// report named through the cache reads as one named without it.
    #[test]
    fn cached_addresses_of_one_function_share_its_frame() {
        #[inline(never)]
        fn named(x: u64) -> u64 {
            std::hint::black_box(x).wrapping_mul(6364136223846793005).rotate_left(7)
        }
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let exe = exe.to_str().unwrap().to_string();
        let mut s = Spaces::default();
        for line in std::fs::read_to_string("/proc/self/maps").unwrap().lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() == 6 && f[5] == exe && f[1].contains('x') {
                let (a, b) = f[0].split_once('-').unwrap();
                let hex = |t: &str| u64::from_str_radix(t, 16).unwrap();
                let m =
                    Mapping { start: hex(a), end: hex(b), offset: hex(f[2]), path: exe.clone() };
                s.add_mapping(1, m);
            }
        }
        let sp = s.space_of(1);
        let at = named as *const () as u64;
        assert_eq!(named(1), named(1));
        let addrs = [(sp, at), (sp, at + 1), (sp, at + 4), (sp, at + 8)];
        let opts = SymbolOptions { names_only: true, ..SymbolOptions::default() };
        let plain = symbolize_with(&mut s, &addrs, &opts, None);
        assert!(plain[0].function.contains("named"), "{:?}", plain[0]);
        let cache = SymbolCache::default();
        let first = symbolize_with(&mut s, &addrs, &opts, Some(&cache));
        let again = symbolize_with(&mut s, &addrs, &opts, Some(&cache));
        assert_eq!(first, plain);
        assert_eq!(again, plain);
        assert_eq!(cache.len(), 4);
        let c = cache.0.lock().unwrap();
        let file = &c.files[&exe];
        assert_eq!((file.frames.len(), file.distinct.len()), (4, 1));
    }

    /// The symbol cache keeps a table for as long as batches use it, whatever its size,
    /// and once a whole batch went by without it, keeps it only within the bound on such
    /// tables (least recently used dropped first).
    #[test]
    fn symbol_cache_keeps_what_the_batches_use() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let table =
            std::sync::Arc::new(strobe_target::symtab::FunctionTable::open(&exe, None).unwrap());
        let cache = SymbolCache::default();
        let big = SymbolCache::MAX_TABLE_BYTES / 3 * 2;
        let keep = |path: &str| {
            let mut c = cache.0.lock().unwrap();
            c.keep_table(path, None, std::sync::Arc::clone(&table), None);
            // Each as large as the bound.
            c.tables.iter_mut().for_each(|t| t.bytes = big);
            c.trim();
        };
        let held = || -> Vec<String> {
            cache.0.lock().unwrap().tables.iter().map(|t| t.path.clone()).collect()
        };
        keep("/a");
        cache.end_batch();
        keep("/b");
        cache.end_batch();
        // /a went a whole batch unused, but within the bound.
        assert_eq!(held(), ["/a", "/b"]);
        keep("/c");
        cache.end_batch();
        // /a and /b unused for a batch: past the bound, the older goes; /c stays
        // whatever the bound.
        assert_eq!(held(), ["/b", "/c"]);
        assert_eq!(cache.table_bytes(), 2 * big);
        assert!(cache.0.lock().unwrap().table("/c", None).is_some());
        cache.end_batch();
        assert_eq!(held(), ["/b", "/c"]);
        cache.end_batch();
        // Neither used since: only the most recent fits the bound.
        assert_eq!(held(), ["/c"]);
    }
}
