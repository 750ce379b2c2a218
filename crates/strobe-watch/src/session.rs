//! One `strobe watch` (feature `session`): resolve the watch specs against the program and
//! the libraries it loads, check that breakpoints work here, run the program with the agent
//! preloaded, read the hits the agent streams over a pipe ([`crate::stream`]), name the
//! accessing code, and hand back each hit (or, counting, the hits per function) and the
//! run's summary.
//!
//! Specs resolve in the executable first, then (for a name the executable lacks) in the
//! shared libraries it loads at start, found as the dynamic linker will find them with the
//! program's own `LD_LIBRARY_PATH` (strobe-target's libpath); `LIB:SYMBOL` looks in that
//! library alone, which must be loaded at start because the agent finds each watched
//! library's load address when the program starts.
//!
//! Code is named by strobe-report's symbolization ([`strobe_report::lookup`]): a hit's IP is
//! the instruction after the access (the trap comes after it) and a frame's is a return
//! address, so both are looked up at `vaddr - 1`, inside the instruction that caused them,
//! turned into a file offset with the module's program headers. Addresses are named once
//! each, in batches: every hit already waiting in the pipe is named in one pass.
//!
//! This module must never interpret hits in the target (the agent only collects), nor
//! hide or change the program's exit status: the session reports it as the program ended.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use strobe_protocol::env;
use strobe_protocol::watch::{fd_to_env, Base, HitStream, WatchOptions, WatchPoint, WatchRequest};
use strobe_report::lookup::{symbolize_file_offsets, CodeLocation};
use strobe_target::elf::{self, ElfFile, Identity};
use strobe_target::launch::{HeldChild, InterruptGuard};
use strobe_target::libpath::{self, SearchEnv};
pub use strobe_target::{Command, Exit};

use crate::bp::{self, Breakpoint, Mode, Scope};
use crate::slots::DEBUG_REGISTERS;
use crate::stream::{AgentLog, CodeAddr, HitRecord};
use crate::{
    Access, ElfSymbols, Len, Multiplexer, MuxError, Place, Policy, ResolveError, SpecError,
    WatchSpec, Watchpoint,
};

/// What a watch is asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// The watch specs as typed (`[LIB:]SYMBOL[+OFF][:LEN][:w|rw]`, `[LIB:]0xADDR...`).
    pub specs: Vec<String>,
    /// The program to run.
    pub command: Command,
    /// The agent library to preload (`libstrobe_agent.so`).
    pub agent: PathBuf,
    /// Count hits per accessing function instead of handing back each hit.
    pub count: bool,
    /// Walk a short call stack per hit (frame pointers).
    pub stack: bool,
    /// Give each thread its own events instead of inherited ones.
    pub per_thread: bool,
    /// Whether more watchpoints than debug registers take turns or are refused.
    pub policy: Policy,
    /// How long each turn lasts when they take turns.
    pub rotate: Duration,
}

/// Why a watch could not run.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A spec does not parse.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A spec names nothing that can be watched.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// The program or a library could not be read or started.
    #[error(transparent)]
    Target(#[from] strobe_target::Error),
    /// More watchpoints than registers, and rotation refused.
    #[error(transparent)]
    Mux(#[from] MuxError),
    /// The kernel refuses breakpoints here.
    #[error("hardware breakpoints are not available: {0}")]
    Breakpoints(strobe_perf::OpenError),
    /// `LIB:SYMBOL` names a library the program does not load at start.
    #[error(
        "{token} ({}) is not loaded when {} starts, so strobe watch cannot find its address (a \
         library opened later with dlopen cannot be watched by symbol); the program loads: {}",
        path.display(),
        exe.display(),
        if loads.is_empty() { "no shared library".to_string() } else { loads.join(", ") }
    )]
    NotLoadedAtStart {
        /// The library as typed.
        token: String,
        /// Where it was found.
        path: PathBuf,
        /// The program.
        exe: PathBuf,
        /// What the program loads at start.
        loads: Vec<String>,
    },
    /// The agent ran but could not watch anything.
    #[error("{0}")]
    Agent(String),
    /// Reading or setting up something failed.
    #[error("{what}: {source}")]
    Io {
        /// What.
        what: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A code address of the program, named where it can be.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Code {
    /// The module the agent found it in (none: an address outside every module).
    pub module: Option<PathBuf>,
    /// Its link-time address in that module (the address itself without one).
    pub vaddr: u64,
    /// The function and source line, when the module's symbols say.
    pub location: Option<CodeLocation>,
}

impl Code {
    /// The function, or `MODULE+0xVADDR` (`0xADDR` outside every module) when unnamed.
    pub fn function(&self) -> String {
        match (&self.location, &self.module) {
            (Some(l), _) => l.function.clone(),
            (None, Some(m)) => {
                let name = m
                    .file_name()
                    .map_or_else(|| m.display().to_string(), |n| n.to_string_lossy().into_owned());
                format!("{name}+{:#x}", self.vaddr)
            }
            (None, None) => format!("{:#x}", self.vaddr),
        }
    }

    /// `file:line`, when line tables say.
    pub fn source(&self) -> Option<&str> {
        self.location.as_ref().and_then(|l| l.source.as_deref())
    }
}

/// One access to watched memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit<'a> {
    /// The watchpoint's index, in spec order.
    pub wp: usize,
    /// The spec as typed.
    pub label: &'a str,
    /// The accessing thread.
    pub tid: i32,
    /// The value before the access (`None` when the agent did not know it: the first hit
    /// after the watchpoint was armed or took its turn again).
    pub old: Option<u64>,
    /// The value after the access.
    pub new: u64,
    /// The watched length in bytes (how to read the values).
    pub len: u64,
    /// The SIGTRAP was blocked, so the hit was found late and `at` is where it was found.
    pub imprecise: bool,
    /// The accessing code.
    pub at: &'a Code,
    /// Its callers, innermost first (with [`Options::stack`]).
    pub stack: Vec<&'a Code>,
}

/// Hits of one watchpoint by one function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionCount {
    /// The function (see [`Code::function`]).
    pub function: String,
    /// The source line of its most frequent accessing instruction.
    pub source: Option<String>,
    /// Hits.
    pub hits: u64,
}

/// The hits of one watchpoint, per accessing function, most first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchCounts {
    /// The watchpoint's index.
    pub wp: usize,
    /// Per function.
    pub functions: Vec<FunctionCount>,
}

/// Something the run could not do, that the user should hear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// The agent reported that it could not watch something.
    Agent(String),
    /// The program was killed before the agent said anything.
    KilledBeforeStart {
        /// The program as typed.
        program: String,
        /// The signal.
        signal: i32,
    },
    /// The agent never started (the program ignores `LD_PRELOAD`).
    AgentDidNotStart {
        /// The program as typed.
        program: String,
    },
    /// The agent's messages could not be read past a point (why, from
    /// [`strobe_protocol::watch::StreamError`]); what it said after that is missing.
    Stream(String),
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Warning::Agent(e) => write!(f, "the agent could not watch: {e}"),
            Warning::KilledBeforeStart { program, signal } => write!(
                f,
                "{program} was killed by signal {signal} before the agent reported anything"
            ),
            Warning::AgentDidNotStart { program } => write!(
                f,
                "the agent did not start in {program} (a statically linked or setuid program \
                 ignores LD_PRELOAD); nothing was watched"
            ),
            Warning::Stream(e) => write!(f, "{e}; what the agent said after that is not shown"),
        }
    }
}

/// The end of a watch.
#[derive(Debug, Clone)]
pub struct WatchReport {
    /// How the program ended.
    pub exit: Exit,
    /// What the agent said besides the hits: totals, armed times, losses.
    pub log: AgentLog,
    /// Per watchpoint and function, when counting.
    pub counts: Vec<WatchCounts>,
    /// What the user should hear.
    pub warnings: Vec<Warning>,
}

impl WatchReport {
    /// The run's failure, when the agent started nothing and said why.
    pub fn failure(&self) -> Option<SessionError> {
        (!self.log.started && !self.log.errors.is_empty())
            .then(|| SessionError::Agent(self.log.errors.join("; ")))
    }
}

/// A program running with watchpoints.
#[derive(Debug)]
pub struct Watch {
    labels: Vec<String>,
    program: String,
    count: bool,
    child: HeldChild,
    hits: Option<OwnedFd>,
    /// Ctrl-C goes to the program from its start; the watch reads on until it ends.
    _interrupts: InterruptGuard,
}

impl Watch {
    /// Resolves the specs, checks that breakpoints can work, and starts the program with
    /// the agent preloaded. Nothing runs when a spec is wrong.
    pub fn start(opts: Options) -> Result<Watch, SessionError> {
        let Options { specs, mut command, agent, count, stack, per_thread, policy, rotate } = opts;
        let exe =
            std::path::absolute(command.resolve_program()?).map_err(|source| SessionError::Io {
                what: "finding the program from the current directory".into(),
                source,
            })?;
        let env = SearchEnv::new(command.ld_library_path().as_deref());
        let wps = resolve_all(&specs, &exe, &env)?;
        Multiplexer::new(wps.len(), DEBUG_REGISTERS, policy)?;
        check_breakpoints_permitted()?;

        let request = WatchRequest {
            points: wps.iter().map(|w| agent_point(w, &exe)).collect::<Result<_, _>>()?,
            options: WatchOptions {
                per_thread,
                multiplex: policy == Policy::Multiplex,
                stack,
                // Whole microseconds, and not below 100 us.
                rotate: Duration::from_micros((rotate.as_micros() as u64).max(100)),
            },
        };
        let (read_end, write_end) = pipe()?;
        let old = command.env_var(env::LD_PRELOAD);
        let preload = env::preload_with(agent.as_os_str(), old.as_deref());
        command.env.push((env::LD_PRELOAD.into(), preload));
        command.env.push((env::WATCH_FD.into(), fd_to_env(write_end.as_raw_fd())));
        command.env.push((env::WATCH.into(), request.to_env()));
        command.keep_fds.push(write_end.as_raw_fd());
        // The program gets the default dispositions whatever strobe's are.
        let interrupts = InterruptGuard::ignore();
        let mut child = HeldChild::spawn(&command)?;
        child.release()?;
        // Only the program (and what it starts) holds the write end now: the pipe ends
        // when they have all exited.
        drop(write_end);
        Ok(Watch {
            labels: wps.into_iter().map(|w| w.label).collect(),
            program: command.program.to_string_lossy().into_owned(),
            count,
            child,
            hits: Some(read_end),
            _interrupts: interrupts,
        })
    }

    /// The watchpoints' labels (the specs as typed), by index.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// Reads the agent's messages until the program and everything it started have exited,
    /// handing each hit to `on_hit` (unless counting), then reaps the program and reports.
    /// Ctrl-C goes to the program; the watch keeps reading until it ends.
    pub fn run(mut self, mut on_hit: impl FnMut(&Hit<'_>)) -> Result<WatchReport, SessionError> {
        let Some(fd) = self.hits.take() else {
            return Err(SessionError::Agent("the watch was already run".into()));
        };
        let mut stream = HitStream::new(std::fs::File::from(fd));
        let mut log = AgentLog::default();
        let mut names = Names::default();
        let mut pending: Vec<HitRecord> = Vec::new();
        let mut counted: HashMap<(usize, CodeAddr), u64> = HashMap::new();
        let mut unread = None;
        loop {
            let m = match stream.read() {
                Ok(Some(m)) => m,
                Ok(None) => break,
                Err(e) => {
                    unread = Some(e);
                    break;
                }
            };
            if let Some(h) = log.take(&m) {
                if self.count {
                    *counted.entry((h.wp as usize, h.at())).or_default() += 1;
                } else {
                    pending.push(h);
                }
            }
            // Name every hit already waiting in one pass, then hand them on.
            if !pending.is_empty() && (!stream.ready() || pending.len() >= 4096) {
                self.deliver(&mut pending, &log, &mut names, &mut on_hit);
            }
        }
        if unread.is_some() {
            // The program runs on to its end: keep its pipe drained.
            let mut rest = stream.into_inner();
            let _ = std::io::copy(&mut rest, &mut std::io::sink());
        }
        self.deliver(&mut pending, &log, &mut names, &mut on_hit);
        let exit = self.child.wait()?;
        let counts =
            if self.count { count_by_function(&counted, &log, &mut names) } else { Vec::new() };
        let mut warnings: Vec<Warning> = log.errors.iter().cloned().map(Warning::Agent).collect();
        if let Some(e) = unread {
            warnings.push(Warning::Stream(e.to_string()));
        }
        if !log.started && log.errors.is_empty() {
            warnings.push(match exit.signal() {
                Some(signal) => {
                    Warning::KilledBeforeStart { program: self.program.clone(), signal }
                }
                None => Warning::AgentDidNotStart { program: self.program.clone() },
            });
        }
        Ok(WatchReport { exit, log, counts, warnings })
    }

    fn deliver(
        &self,
        pending: &mut Vec<HitRecord>,
        log: &AgentLog,
        names: &mut Names,
        on_hit: &mut impl FnMut(&Hit<'_>),
    ) {
        names.name_all(log, pending.iter().flat_map(|h| h.addrs().iter().copied()));
        for h in pending.drain(..) {
            let wp = h.wp as usize;
            let hit = Hit {
                wp,
                label: self.labels.get(wp).map_or("?", String::as_str),
                tid: h.tid,
                old: h.old,
                new: h.new,
                len: log.wp_len.get(&wp).copied().unwrap_or(8),
                imprecise: h.imprecise,
                at: names.get(h.at()),
                stack: h.addrs().iter().skip(1).map(|&a| names.get(a)).collect(),
            };
            on_hit(&hit);
        }
    }
}

/// Named code addresses, each named once.
#[derive(Debug, Default)]
struct Names {
    /// Module id -> its program headers (None: unreadable).
    modules: HashMap<u32, Option<Identity>>,
    codes: HashMap<CodeAddr, Code>,
    unknown: Code,
}

impl Names {
    /// Names every address of `addrs` not named yet, in one symbolization pass.
    fn name_all(&mut self, log: &AgentLog, addrs: impl Iterator<Item = CodeAddr>) {
        let mut new: Vec<CodeAddr> = addrs.filter(|a| !self.codes.contains_key(a)).collect();
        new.sort_unstable();
        new.dedup();
        if new.is_empty() {
            return;
        }
        let mut queries: Vec<(PathBuf, u64)> = Vec::new();
        let mut asked: Vec<Option<usize>> = Vec::new();
        for &CodeAddr { module: m, vaddr: v } in &new {
            let path = log.modules.get(&m);
            let offset = path.and_then(|p| {
                let id = self.modules.entry(m).or_insert_with(|| elf::identify(p).ok().flatten());
                id.as_ref()?.vaddr_to_offset(v.saturating_sub(1))
            });
            asked.push(match (path, offset) {
                (Some(p), Some(o)) => {
                    queries.push((p.clone(), o));
                    Some(queries.len() - 1)
                }
                _ => None,
            });
        }
        let refs: Vec<(&Path, u64)> = queries.iter().map(|(p, o)| (p.as_path(), *o)).collect();
        let found = symbolize_file_offsets(&refs);
        for (&a, q) in new.iter().zip(asked) {
            let location = q.and_then(|i| found.get(i).cloned().flatten());
            let module = log.modules.get(&a.module).cloned();
            self.codes.insert(a, Code { module, vaddr: a.vaddr, location });
        }
    }

    fn get(&self, a: CodeAddr) -> &Code {
        self.codes.get(&a).unwrap_or(&self.unknown)
    }
}

/// Folds per-address counts into per-function counts, most hits first.
fn count_by_function(
    counted: &HashMap<(usize, CodeAddr), u64>,
    log: &AgentLog,
    names: &mut Names,
) -> Vec<WatchCounts> {
    names.name_all(log, counted.keys().map(|&(_, a)| a));
    /// One function's hits, and the source line of its busiest address.
    #[derive(Default)]
    struct Tally {
        hits: u64,
        top: u64,
        source: Option<String>,
    }
    let mut by: BTreeMap<usize, BTreeMap<String, Tally>> = BTreeMap::new();
    for (&(wp, a), &n) in counted {
        let code = names.get(a);
        let t = by.entry(wp).or_default().entry(code.function()).or_default();
        t.hits += n;
        let src = code.source().map(str::to_string);
        // Ties go to the smaller source, so the choice does not depend on hash order.
        if n > t.top || (n == t.top && src < t.source) {
            (t.top, t.source) = (n, src);
        }
    }
    by.into_iter()
        .map(|(wp, funcs)| {
            let mut functions: Vec<FunctionCount> = funcs
                .into_iter()
                .map(|(function, t)| FunctionCount { function, source: t.source, hits: t.hits })
                .collect();
            functions.sort_by(|a, b| b.hits.cmp(&a.hits).then_with(|| a.function.cmp(&b.function)));
            WatchCounts { wp, functions }
        })
        .collect()
}

/// The agent's form of a watchpoint: its address relative to the executable (whose load
/// bias the agent adds), to a library (named by its file's identity, which survives
/// symlinks), or absolute.
fn agent_point(w: &Watchpoint, exe: &Path) -> Result<WatchPoint, SessionError> {
    let (base, addr) = match &w.place {
        Place::Module { vaddr, relocatable: true, path } if path == exe => {
            (Base::Executable, *vaddr)
        }
        Place::Module { vaddr, relocatable: true, path } => {
            let m = std::fs::metadata(path).map_err(|source| SessionError::Io {
                what: format!("reading {}", path.display()),
                source,
            })?;
            (Base::Library { dev: m.dev(), ino: m.ino() }, *vaddr)
        }
        _ => (Base::Absolute, w.address(0)),
    };
    Ok(WatchPoint { base, addr, len: w.len.bytes() as u8, access: w.access.into() })
}

/// Resolves every spec. A symbol is looked up in the executable, then (if it is not
/// there) in the shared libraries the executable loads at start; `LIB:SYMBOL` looks in
/// that library alone.
fn resolve_all(
    specs: &[String],
    exe: &Path,
    env: &SearchEnv,
) -> Result<Vec<Watchpoint>, SessionError> {
    let parsed: Vec<WatchSpec> =
        specs.iter().map(|s| WatchSpec::parse(s)).collect::<Result<_, _>>()?;
    let mut libs = Libraries { exe, env, elf: None, modules: Vec::new(), closure_read: false };
    let mut out = Vec::new();
    for spec in &parsed {
        if let Some(w) = spec.as_absolute() {
            out.push(w);
            continue;
        }
        if let Some(token) = &spec.module {
            let lib = libs.named(token)?;
            out.push(crate::resolve(spec, std::slice::from_ref(lib))?);
            continue;
        }
        match crate::resolve(spec, libs.exe()?) {
            // Automatic lookup: the libraries loaded at start, in load order.
            Err(ResolveError::NotFound { .. }) => out.push(crate::resolve(spec, libs.all()?)?),
            other => out.push(other?),
        }
    }
    Ok(out)
}

/// The executable's symbols and, read on first need, its libraries'.
struct Libraries<'a> {
    exe: &'a Path,
    env: &'a SearchEnv,
    elf: Option<ElfFile>,
    /// The executable first, then each library of its load closure that could be read.
    modules: Vec<ElfSymbols>,
    closure_read: bool,
}

impl Libraries<'_> {
    fn elf(&mut self) -> Result<&ElfFile, SessionError> {
        if self.elf.is_none() {
            self.elf = Some(ElfFile::open(self.exe)?);
        }
        Ok(self.elf.as_ref().expect("just read"))
    }

    fn exe(&mut self) -> Result<&[ElfSymbols], SessionError> {
        if self.modules.is_empty() {
            let m = ElfSymbols::from_elf(self.elf()?);
            self.modules.push(m);
        }
        Ok(&self.modules[..1])
    }

    /// The executable and every library it loads at start.
    fn all(&mut self) -> Result<&[ElfSymbols], SessionError> {
        self.exe()?;
        if !self.closure_read {
            self.closure_read = true;
            let env = self.env;
            for l in libpath::load_closure(self.elf()?, env) {
                // A library that cannot be read only narrows the search.
                if let Ok(m) = ElfSymbols::open(&l.path) {
                    self.modules.push(m);
                }
            }
        }
        Ok(&self.modules)
    }

    /// The library `token` names (path, file name, soname or short name), which must be
    /// loaded at start.
    fn named(&mut self, token: &str) -> Result<&ElfSymbols, SessionError> {
        let env = self.env;
        let exe = self.exe.to_path_buf();
        let elf = self.elf()?;
        let path = libpath::find_library(token, elf, env, None)?;
        let loaded = libpath::load_closure(elf, env);
        let same = |a: &Path, b: &Path| match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
            _ => false,
        };
        if !loaded.iter().any(|l| same(&l.path, &path)) {
            return Err(SessionError::NotLoadedAtStart {
                token: token.to_string(),
                path,
                exe,
                loads: loaded.iter().map(|l| l.needed.clone()).collect(),
            });
        }
        let m = ElfSymbols::open(&path)?;
        self.modules.push(m);
        Ok(self.modules.last().expect("just pushed"))
    }
}

/// Opens (and closes) one counting breakpoint on this thread: the clearest place to learn
/// that the kernel refuses them, before the program runs.
fn check_breakpoints_permitted() -> Result<(), SessionError> {
    static PROBE_WORD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let b =
        Breakpoint { addr: &PROBE_WORD as *const _ as u64, len: Len::B8, access: Access::Write };
    bp::open(b, Mode::Count, Scope::Thread, strobe_perf::Target::CALLING_THREAD, "a watchpoint")
        .map(drop)
        .map_err(SessionError::Breakpoints)
}

fn pipe() -> Result<(OwnedFd, OwnedFd), SessionError> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(SessionError::Io {
            what: "creating the agent's pipe".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unnamed_code_reads_as_module_and_address() {
        let c = Code { module: Some("/usr/lib/libx.so.1".into()), vaddr: 0x1a2b, location: None };
        assert_eq!(c.function(), "libx.so.1+0x1a2b");
        assert_eq!(Code { module: None, vaddr: 0x10, location: None }.function(), "0x10");
        let named = Code {
            location: Some(CodeLocation {
                function: "f".into(),
                module: "x".into(),
                source: Some("a.c:3".into()),
            }),
            ..c
        };
        assert_eq!((named.function().as_str(), named.source()), ("f", Some("a.c:3")));
    }

    #[test]
    fn counts_fold_addresses_into_functions_busiest_source_first() {
        let mut names = Names::default();
        let f = |func: &str, src: &str| Code {
            module: None,
            vaddr: 0,
            location: Some(CodeLocation {
                function: func.into(),
                module: "m".into(),
                source: Some(src.into()),
            }),
        };
        let a = |vaddr| CodeAddr { module: 1, vaddr };
        names.codes.insert(a(0x10), f("writer", "w.c:5"));
        names.codes.insert(a(0x20), f("writer", "w.c:9"));
        names.codes.insert(a(0x30), f("reader", "r.c:2"));
        let counted = HashMap::from([
            ((0, a(0x10)), 2),
            ((0, a(0x20)), 7),
            ((0, a(0x30)), 3),
            ((1, a(0x30)), 1),
        ]);
        let c = count_by_function(&counted, &AgentLog::default(), &mut names);
        assert_eq!(c.len(), 2);
        assert_eq!(
            c[0].functions,
            [
                FunctionCount { function: "writer".into(), source: Some("w.c:9".into()), hits: 9 },
                FunctionCount { function: "reader".into(), source: Some("r.c:2".into()), hits: 3 },
            ]
        );
        assert_eq!((c[1].wp, c[1].functions[0].hits), (1, 1));
    }
}
