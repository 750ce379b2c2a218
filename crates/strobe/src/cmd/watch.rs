//! `strobe watch`: resolves watch specs against the program, checks that breakpoints can
//! work here, runs the program with the agent preloaded, reads the hits the agent streams
//! over a pipe (the line protocol is documented in `agent/src/watch/mod.rs`), symbolizes
//! the accessing instructions with blazesym and prints each hit or a per-function count.
//!
//! Must never: interpret hits in the target (the agent only collects), or hide the target's
//! exit status (strobe exits with it).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context};
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};
use strobe_uprobe::elf::ElfFile;
use strobe_uprobe::libpath::{self, SearchEnv};
use strobe_watch::bp::{self, Breakpoint, Mode, Scope};
use strobe_watch::slots::DEBUG_REGISTERS;
use strobe_watch::{Access, ElfSymbols, Len, Multiplexer, Place, Policy, WatchSpec, Watchpoint};

const EXAMPLE: &str = "\
Examples:
  strobe watch counter -- ./server          every write to the global `counter`
  strobe watch 'table+16:4:rw' --count -- ./app
                                            reads and writes of table+16, per function
  strobe watch libfoo.so:state -- ./app     `state` in the shared library libfoo.so
  strobe watch 0x601040:8 --stack -- ./app  a raw address, with a call stack per hit

Each hit prints the thread, the accessing function and source line, and the old and new
value for writes, as it happens. A symbol is a data symbol of the program's executable or,
when the executable has none by that name, of the first shared library (in load order)
the program loads at start that has one; `LIB:SYMBOL` looks in that library only (named by
file name, soname, path, or a short name starting with `lib`; `LIB:0xADDR` is a link-time
address in it).
Libraries are found as the dynamic linker will find them (DT_RUNPATH, LD_LIBRARY_PATH,
ld.so.cache); one opened later with dlopen cannot be watched by symbol.
With more watchpoints than the 4 debug registers they take turns (round-robin every
4 ms); the summary gives each one's armed fraction so counts can be scaled (hits / armed).
Hits of a thread that blocks SIGTRAP arrive late and are marked imprecise.";

/// Arguments of `strobe watch`.
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLE)]
pub struct Args {
    /// What to watch: `[LIB:]SYMBOL[+OFF][:LEN][:w|rw]` (a data symbol of the program or
    /// of a shared library it loads) or `[LIB:]0xADDR[:LEN][:w|rw]`. LEN is 1, 2, 4 or 8 (default: 8, or the symbol's size if
    /// smaller); `w` (default) traps writes, `rw` reads and writes.
    #[arg(required = true, value_name = "SPEC")]
    specs: Vec<String>,
    /// Print a summary per accessing function instead of each hit.
    #[arg(long)]
    count: bool,
    /// Print a short call stack with each hit (frame-pointer walk; needs code built with
    /// frame pointers).
    #[arg(long)]
    stack: bool,
    /// Give each thread its own watchpoint events instead of inherited ones, with slots
    /// accounted per thread. A thread made with pthread_create opens them before its start
    /// routine runs; one made otherwise (raw clone) is found within about a millisecond
    /// and its earlier accesses are missed.
    #[arg(long)]
    thread: bool,
    /// Refuse more watchpoints than debug registers instead of rotating them.
    #[arg(long)]
    no_multiplex: bool,
    /// Rotation interval when multiplexing, in milliseconds.
    #[arg(long, default_value_t = 4.0, value_name = "MS")]
    rotate_ms: f64,
    /// The program to run and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// Runs `strobe watch`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let exe = find_program(&args.command[0])?;
    let wps = resolve_all(&args.specs, &exe)?;
    let policy = if args.no_multiplex { Policy::NoMultiplex } else { Policy::Multiplex };
    Multiplexer::new(wps.len(), DEBUG_REGISTERS, policy)?;
    check_breakpoints_permitted()?;

    let points: Vec<String> = wps
        .iter()
        .map(|w| {
            let (kind, addr) = match &w.place {
                Place::Module { vaddr, relocatable: true, path } if path == &exe => {
                    ("pie".to_string(), *vaddr)
                }
                // A library: the agent finds its load bias by the file's identity (device
                // and inode), which survives symlinks and needs no escaping.
                Place::Module { vaddr, relocatable: true, path } => {
                    let m = std::fs::metadata(path)
                        .with_context(|| format!("cannot read {}", path.display()))?;
                    (format!("lib={:x}:{:x}", m.dev(), m.ino()), *vaddr)
                }
                _ => ("abs".to_string(), w.address(0)),
            };
            let acc = if w.access == Access::Write { "w" } else { "rw" };
            Ok(format!("{kind},{addr:x},{},{acc}", w.len.bytes()))
        })
        .collect::<anyhow::Result<_>>()?;
    let mut opts = vec![format!("rotate_us={}", (args.rotate_ms * 1000.0).max(100.0) as u64)];
    if args.thread {
        opts.push("thread".into());
    }
    if args.no_multiplex {
        opts.push("nomux".into());
    }
    if args.stack {
        opts.push("stack".into());
    }

    let (read_end, write_end) = pipe()?;
    let wfd = write_end.as_raw_fd();
    let agent = crate::agent_lib::agent_path()?;
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(p) if !p.is_empty() => format!("{} {p}", agent.display()),
        _ => agent.display().to_string(),
    };
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..])
        .env("LD_PRELOAD", preload)
        .env("STROBE_WATCH_FD", wfd.to_string())
        .env("STROBE_WATCH_POINTS", points.join(";"))
        .env("STROBE_WATCH_OPTS", opts.join(","));
    // SAFETY: the closure only calls fcntl, which is async-signal-safe, between fork and
    // exec; it clears close-on-exec on the pipe's write end so the agent can use it.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(wfd, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().with_context(|| format!("cannot run {}", args.command[0]))?;
    drop(write_end);

    // Like perf and time: Ctrl-C is for the program; strobe keeps reading until the
    // program ends, then prints the summary.
    // SAFETY: ignoring SIGINT in strobe itself, after the child was spawned with the
    // default disposition.
    unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };

    let labels: Vec<String> = wps.iter().map(|w| w.label.clone()).collect();
    let mut run = RunLog::default();
    let mut symbols = Symbols::new();
    let mut counts: BTreeMap<usize, BTreeMap<String, (u64, Option<String>)>> = BTreeMap::new();
    // Line-buffered (std's stdout): each hit line leaves in one write, never split by
    // the program's own output to the same terminal or pipe.
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let reader = std::io::BufReader::new(std::fs::File::from(read_end));
    for line in reader.lines() {
        let line = line.context("reading the agent's hits")?;
        let Some(h) = run.take(&line) else { continue };
        if args.count {
            let c = h.addrs.first().map(|&a| symbols.code(&run, a)).unwrap_or_default();
            let e = counts.entry(h.wp).or_default().entry(c.func).or_insert((0, c.source));
            e.0 += 1;
        } else {
            write_hit(&mut out, &h, &run, &labels, &mut symbols)?;
        }
    }
    let status = child.wait().context("waiting for the program")?;
    if args.count {
        write_counts(&mut out, &counts, &labels)?;
    }
    write_summary(&mut out, &run, &labels)?;
    out.flush()?;
    drop(out);
    for e in &run.errors {
        eprintln!("strobe: warning: the agent could not watch: {e}");
    }
    if !run.started && run.errors.is_empty() && status.signal().is_some() {
        eprintln!(
            "strobe: warning: {} was killed by signal {} before the agent reported anything",
            args.command[0],
            status.signal().unwrap_or(0)
        );
    } else if !run.started && run.errors.is_empty() {
        eprintln!(
            "strobe: warning: the agent did not start in {} (a statically linked or setuid \
             program ignores LD_PRELOAD); nothing was watched",
            args.command[0]
        );
    }
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    };
    if !run.started && !run.errors.is_empty() {
        bail!("{}", run.errors.join("; "));
    }
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

fn find_program(name: &str) -> anyhow::Result<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        if !p.is_file() {
            bail!("{name}: no such program");
        }
        return Ok(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .with_context(|| format!("{name}: not found in PATH"))
}

/// Resolves every spec. A symbol is looked up in the executable, then (if it is not
/// there) in the shared libraries the executable loads at start, found as the dynamic
/// linker will find them; `LIB:SYMBOL` looks in that library alone.
fn resolve_all(specs: &[String], exe: &Path) -> anyhow::Result<Vec<Watchpoint>> {
    let parsed: Vec<WatchSpec> =
        specs.iter().map(|s| WatchSpec::parse(s)).collect::<Result<_, _>>()?;
    let mut libs = Libraries::new(exe);
    let mut out = Vec::new();
    for spec in &parsed {
        if let Some(w) = spec.as_absolute() {
            out.push(w);
            continue;
        }
        if let Some(token) = &spec.module {
            let lib = libs.named(token)?;
            out.push(strobe_watch::resolve(spec, std::slice::from_ref(lib))?);
            continue;
        }
        let in_exe = strobe_watch::resolve(spec, libs.exe()?);
        match in_exe {
            Err(strobe_watch::ResolveError::NotFound { .. }) => {
                // Automatic lookup: the libraries loaded at start, in load order.
                out.push(strobe_watch::resolve(spec, libs.all()?)?);
            }
            other => out.push(other?),
        }
    }
    Ok(out)
}

/// The executable's symbols and, read on first need, its libraries'.
struct Libraries<'a> {
    exe: &'a Path,
    /// The executable first, then each library of its load closure that could be read.
    modules: Vec<ElfSymbols>,
    closure_read: bool,
}

impl<'a> Libraries<'a> {
    fn new(exe: &'a Path) -> Self {
        Libraries { exe, modules: Vec::new(), closure_read: false }
    }

    fn exe(&mut self) -> anyhow::Result<&[ElfSymbols]> {
        if self.modules.is_empty() {
            self.modules.push(ElfSymbols::open(self.exe)?);
        }
        Ok(&self.modules[..1])
    }

    fn search_env() -> SearchEnv {
        SearchEnv::new(std::env::var("LD_LIBRARY_PATH").ok().as_deref())
    }

    /// The executable and every library it loads at start.
    fn all(&mut self) -> anyhow::Result<&[ElfSymbols]> {
        self.exe()?;
        if !self.closure_read {
            self.closure_read = true;
            let elf = ElfFile::open(self.exe)
                .with_context(|| format!("cannot read {}", self.exe.display()))?;
            for l in libpath::load_closure(&elf, &Self::search_env()) {
                // A library that cannot be read only narrows the search.
                if let Ok(m) = ElfSymbols::open(&l.path) {
                    self.modules.push(m);
                }
            }
        }
        Ok(&self.modules)
    }

    /// The library `token` names (path, file name, soname or short name), which must be
    /// loaded at start: the agent finds each watched library's load address when the
    /// program starts.
    fn named(&mut self, token: &str) -> anyhow::Result<&ElfSymbols> {
        let elf = ElfFile::open(self.exe)
            .with_context(|| format!("cannot read {}", self.exe.display()))?;
        let path = libpath::find_library(token, &elf, &Self::search_env(), None)?;
        let loaded = libpath::load_closure(&elf, &Self::search_env());
        let same = |a: &Path, b: &Path| match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
            _ => false,
        };
        if !loaded.iter().any(|l| same(&l.path, &path)) {
            let names: Vec<String> = loaded.iter().map(|l| l.needed.clone()).collect();
            bail!(
                "{token} ({}) is not loaded when {} starts, so strobe watch cannot find its \
                 address (a library opened later with dlopen cannot be watched by symbol); \
                 the program loads: {}",
                path.display(),
                self.exe.display(),
                if names.is_empty() { "no shared library".to_string() } else { names.join(", ") }
            );
        }
        let m = ElfSymbols::open(&path)?;
        self.modules.push(m);
        self.modules.last().context("a module was just added")
    }
}

/// Opens (and closes) one counting breakpoint on this thread: the clearest place to learn
/// that the kernel refuses them, before the program runs.
fn check_breakpoints_permitted() -> anyhow::Result<()> {
    static PROBE_WORD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let b =
        Breakpoint { addr: &PROBE_WORD as *const _ as u64, len: Len::B8, access: Access::Write };
    bp::open(b, Mode::Count, Scope::Thread, strobe_perf::Target::CALLING_THREAD, "a watchpoint")
        .map(drop)
        .context("hardware breakpoints are not available")
}

fn pipe() -> anyhow::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("cannot create a pipe");
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// One hit as the agent reported it.
#[derive(Debug, Clone)]
struct HitLine {
    wp: usize,
    tid: i32,
    flags: u32,
    old: u64,
    new: u64,
    /// (module id, vaddr): the IP first, then return addresses.
    addrs: Vec<(u32, u64)>,
}

#[derive(Debug, Default)]
struct Armed {
    hits: u64,
    armed_ns: u64,
    enabled_ns: u64,
    times: u64,
}

/// Everything the agent said.
#[derive(Debug, Default)]
struct RunLog {
    started: bool,
    multiplexed: bool,
    slots: u32,
    modules: HashMap<u32, PathBuf>,
    wp_len: HashMap<usize, u64>,
    hits: u64,
    armed: BTreeMap<usize, Armed>,
    lost: u64,
    chained: u64,
    /// Per-thread mode: threads that got their own events.
    threads: Option<u64>,
    errors: Vec<String>,
    ended: bool,
}

impl RunLog {
    /// Takes one line; returns it if it is a hit.
    fn take(&mut self, line: &str) -> Option<HitLine> {
        let mut f = line.split(' ');
        let hex = |s: Option<&str>| s.and_then(|s| u64::from_str_radix(s, 16).ok()).unwrap_or(0);
        let dec = |s: Option<&str>| s.and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
        match f.next() {
            Some("start") => {
                self.started = true;
                let _pid = f.next();
                let _n = f.next();
                self.slots = dec(f.next()) as u32;
                self.multiplexed = f.next() == Some("1");
            }
            Some("wp") => {
                let i = dec(f.next()) as usize;
                let _addr = f.next();
                self.wp_len.insert(i, dec(f.next()));
            }
            Some("mod") => {
                let id = dec(f.next()) as u32;
                let _bias = f.next();
                let path: Vec<&str> = f.collect();
                self.modules.insert(id, PathBuf::from(path.join(" ")));
            }
            Some("hit") => {
                let wp = dec(f.next()) as usize;
                let tid = dec(f.next()) as i32;
                let flags = dec(f.next()) as u32;
                let old = hex(f.next());
                let new = hex(f.next());
                let addrs = f
                    .filter_map(|a| {
                        let (m, v) = a.split_once(':')?;
                        Some((m.parse().ok()?, u64::from_str_radix(v, 16).ok()?))
                    })
                    .collect();
                self.hits += 1;
                return Some(HitLine { wp, tid, flags, old, new, addrs });
            }
            Some("armed") => {
                let i = dec(f.next()) as usize;
                let a = Armed {
                    hits: dec(f.next()),
                    armed_ns: dec(f.next()),
                    enabled_ns: dec(f.next()),
                    times: dec(f.next()),
                };
                self.armed.insert(i, a);
            }
            Some("lost") => self.lost = dec(f.next()),
            Some("chained") => self.chained = dec(f.next()),
            Some("threads") => self.threads = Some(dec(f.next())),
            Some("err") => self.errors.push(line.trim_start_matches("err ").to_string()),
            Some("end") => self.ended = true,
            _ => {}
        }
        None
    }
}

/// A symbolized code address.
#[derive(Debug, Clone, Default)]
struct Code {
    func: String,
    source: Option<String>,
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.source {
            Some(s) => write!(f, "{} ({s})", self.func),
            None => write!(f, "{}", self.func),
        }
    }
}

/// Symbolized code addresses, looked up once each: one blazesym call per new
/// (module, vaddr). A hit's IP is the instruction after the access (the trap comes after
/// it), and a frame's is a return address: both are looked up at `vaddr - 1`, inside the
/// instruction that caused them.
struct Symbols {
    symbolizer: Symbolizer,
    cache: HashMap<(u32, u64), Code>,
}

impl Symbols {
    fn new() -> Symbols {
        let symbolizer =
            Symbolizer::builder().enable_code_info(true).enable_inlined_fns(false).build();
        Symbols { symbolizer, cache: HashMap::new() }
    }

    fn code(&mut self, run: &RunLog, a: (u32, u64)) -> Code {
        if let Some(c) = self.cache.get(&a) {
            return c.clone();
        }
        let found = run.modules.get(&a.0).and_then(|path| {
            let src = Source::Elf(Elf::new(path));
            let at = [a.1.saturating_sub(1)];
            let syms = self.symbolizer.symbolize(&src, Input::VirtOffset(&at)).ok()?;
            match syms.into_iter().next()? {
                Symbolized::Sym(sym) => Some(Code {
                    func: sym.name.to_string(),
                    source: sym.code_info.as_ref().map(|ci| match ci.line {
                        Some(line) => format!("{}:{line}", file_name(&ci.to_path())),
                        None => file_name(&ci.to_path()),
                    }),
                }),
                Symbolized::Unknown(_) => None,
            }
        });
        let c = found.unwrap_or_else(|| Code {
            func: match a {
                (0, v) => format!("{v:#x}"),
                (m, v) => format!("[module {m}]+{v:#x}"),
            },
            source: None,
        });
        self.cache.insert(a, c.clone());
        c
    }
}

fn file_name(p: &Path) -> String {
    p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned())
}

fn label(labels: &[String], wp: usize) -> &str {
    labels.get(wp).map_or("?", String::as_str)
}

/// One hit: `tid=T wp=LABEL old=O new=V at FUNC (FILE:LINE)`, then its frames, all in
/// one write.
fn write_hit(
    out: &mut impl Write,
    h: &HitLine,
    run: &RunLog,
    labels: &[String],
    symbols: &mut Symbols,
) -> std::io::Result<()> {
    use std::fmt::Write as _;
    let at = h.addrs.first().map(|&a| symbols.code(run, a)).unwrap_or_default();
    let len = run.wp_len.get(&h.wp).copied().unwrap_or(8);
    let mut s = format!("tid={} wp={} ", h.tid, label(labels, h.wp));
    if h.flags & 2 == 0 {
        let _ = write!(s, "old={} ", show_value(h.old, len));
    }
    let _ = write!(s, "new={} at {at}", show_value(h.new, len));
    if h.flags & 1 != 0 {
        s.push_str(" [imprecise: SIGTRAP was blocked]");
    }
    s.push('\n');
    for &f in h.addrs.iter().skip(1) {
        let _ = writeln!(s, "    <- {}", symbols.code(run, f));
    }
    out.write_all(s.as_bytes())
}

/// `--count`: per watchpoint, hits per accessing function, most first.
fn write_counts(
    out: &mut impl Write,
    counts: &BTreeMap<usize, BTreeMap<String, (u64, Option<String>)>>,
    labels: &[String],
) -> std::io::Result<()> {
    for (wp, funcs) in counts {
        writeln!(out, "{}:", label(labels, *wp))?;
        let mut rows: Vec<_> = funcs.iter().collect();
        rows.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
        for (func, (n, src)) in rows {
            let src = src.as_ref().map_or(String::new(), |x| format!(" ({x})"));
            writeln!(out, "  {n:>10}  {func}{src}")?;
        }
    }
    Ok(())
}

/// The totals, each watchpoint's armed fraction, and what was lost or passed on.
fn write_summary(out: &mut impl Write, run: &RunLog, labels: &[String]) -> std::io::Result<()> {
    writeln!(out, "-- {} hits", run.hits)?;
    for (wp, a) in &run.armed {
        let frac = if a.enabled_ns > 0 { a.armed_ns as f64 / a.enabled_ns as f64 } else { 1.0 };
        let scaled = if frac > 0.0 { a.hits as f64 / frac } else { 0.0 };
        writeln!(
            out,
            "armed {}: {:.1}% of the time ({} turns), {} hits, about {:.0} if always armed",
            label(labels, *wp),
            frac * 100.0,
            a.times,
            a.hits,
            scaled
        )?;
    }
    if run.multiplexed {
        writeln!(
            out,
            "-- {} watchpoints took turns in {} debug registers; scale counts by the armed \
             fraction",
            labels.len(),
            run.slots
        )?;
    }
    if let Some(n) = run.threads {
        writeln!(out, "-- per-thread watchpoints in {n} threads")?;
    }
    if run.lost > 0 {
        writeln!(out, "-- {} hits lost (the agent's buffer was full)", run.lost)?;
    }
    if run.chained > 0 {
        writeln!(out, "-- {} SIGTRAPs passed to the program's own handler", run.chained)?;
    }
    if run.started && !run.ended {
        writeln!(
            out,
            "-- the program ended without exit() (exec, _exit or a signal): no armed times"
        )?;
    }
    Ok(())
}

/// A value of `len` bytes as a signed decimal (the usual reading of a counter).
fn show_value(v: u64, len: u64) -> String {
    let x = match len {
        1 => v as u8 as i8 as i64,
        2 => v as u16 as i16 as i64,
        4 => v as u32 as i32 as i64,
        _ => v as i64,
    };
    x.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_lines_are_read_back() {
        let mut run = RunLog::default();
        for l in ["start 42 2 2 0", "wp 0 5000 4 w", "mod 1 1000 /bin/prog"] {
            assert!(run.take(l).is_none());
        }
        let h = run.take("hit 0 77 1 ffffffff 5 1:1a2b 1:30").unwrap();
        assert_eq!((h.wp, h.tid, h.flags, h.old, h.new), (0, 77, 1, 0xffff_ffff, 5));
        assert_eq!(h.addrs, [(1, 0x1a2b), (1, 0x30)]);
        for l in ["armed 0 1 500 1000 3", "lost 2", "chained 4", "err no slots", "end"] {
            assert!(run.take(l).is_none());
        }
        assert!(run.started && run.ended && !run.multiplexed);
        assert_eq!((run.slots, run.hits, run.lost, run.chained), (2, 1, 2, 4));
        assert_eq!(run.wp_len[&0], 4);
        assert_eq!(run.modules[&1], PathBuf::from("/bin/prog"));
        assert_eq!((run.armed[&0].armed_ns, run.armed[&0].times), (500, 3));
        assert_eq!(run.errors, ["no slots"]);
        // A 4-byte -1 reads as -1, not 4294967295.
        assert_eq!(show_value(h.old, 4), "-1");
        assert_eq!(show_value(0xff, 1), "-1");
        assert_eq!(show_value(7, 8), "7");
    }
}
