//! One `strobe probe`: kernel uprobes and the program's own probe points on one launched
//! program, gathered into one table; and `--list`'s inventory of what can be probed.
//!
//! A [`Run`] classifies each probe by scheme ([`Probe`]), resolves the kernel ones against
//! the binary (the command's executable unless another is named), asks the program's
//! probe library to count the `point:` ones ([`crate::points`]), starts a
//! [`Session`], and, once the target has exited, returns one [`Row`] per probe in the
//! order given, with [`Warning`]s for what could not be counted. Rendering (table, JSON,
//! trace lines) is the caller's.
//!
//! The run's uprobes stay attached until the [`Run`] is dropped: closing one costs a
//! kernel grace period (about 60-90 ms), so a caller prints the report first and drops
//! the run after.
//!
//! This module must never print, nor run inside the target.

use std::path::PathBuf;
use std::time::Duration;

use strobe_target::elf::{ElfFile, Function};
use strobe_target::libpath::{self, SearchEnv};
use strobe_target::{Command, Exit};

use crate::latency::Summary;
use crate::points::{PointReport, PointsFile, POINT_PREFIX};
use crate::resolve::{ProbeKind, Resolver};
use crate::session::{Hit, Notice, Options, Session};
use crate::spec::ProbeSpec;
use crate::Error;

/// One probe argument, classified by scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// A kernel uprobe (function or USDT).
    Kernel {
        /// As typed.
        text: String,
        /// Parsed.
        spec: ProbeSpec,
    },
    /// A probe point declared inside the program (`point:NAME`).
    Point {
        /// The point's name.
        name: String,
    },
}

impl Probe {
    /// Classifies and parses one probe argument.
    pub fn parse(text: &str) -> Result<Probe, Error> {
        if let Some(name) = text.strip_prefix(POINT_PREFIX) {
            if name.is_empty() {
                return Err(Error::BadSpec {
                    spec: text.to_string(),
                    why: "write point:NAME".to_string(),
                });
            }
            return Ok(Probe::Point { name: name.to_string() });
        }
        Ok(Probe::Kernel { text: text.to_string(), spec: ProbeSpec::parse(text)? })
    }
}

/// What a run is asked to do.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The probes, in report order; at least one.
    pub probes: Vec<Probe>,
    /// The program to run under them.
    pub command: Command,
    /// The ELF file that kernel probes without a library part refer to; `None`: the
    /// command's executable, found as `execvp` finds it.
    pub binary: Option<PathBuf>,
    /// How the session collects hits.
    pub session: Options,
    /// A probe library to preload, for programs whose probe points are compiled in but
    /// not linked (`STROBE_PROBE_OPTIONAL`).
    pub probe_lib: Option<PathBuf>,
}

/// What a row counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowKind {
    /// A kernel probe: a function entry or a USDT site.
    Kernel(ProbeKind),
    /// A probe point counted by the program's probe library.
    Point,
}

impl RowKind {
    /// `uprobe`, `usdt` or `point`, as reports print it.
    pub fn as_str(self) -> &'static str {
        match self {
            RowKind::Kernel(k) => k.as_str(),
            RowKind::Point => "point",
        }
    }
}

/// One row of the end-of-run table, whichever mechanism counted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The probe as typed.
    pub probe: String,
    /// What counted it.
    pub kind: RowKind,
    /// What it resolved to.
    pub symbol: String,
    /// How many places it is attached to.
    pub sites: usize,
    /// Exact hits.
    pub hits: u64,
    /// Durations, when measured (percentiles of points are bucket upper bounds).
    pub latency: Option<Summary>,
}

/// Something a run could not count, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Warning {
    /// `point:` probes were asked for, but the program wrote no report.
    NoPointReport {
        /// The program as typed.
        program: String,
    },
    /// The program declares no probe point of that name.
    UnknownPoint {
        /// The name asked for.
        name: String,
        /// `" (did you mean X?)"`, or empty.
        hint: String,
    },
    /// Tracing shows kernel probes only.
    TraceShowsKernelProbesOnly,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Warning::NoPointReport { program } => write!(
                f,
                "{program} wrote no probe-point report: it does not link strobe-probe (Rust) or \
                 libstrobe_probe_c (C); for a C program built with STROBE_PROBE_OPTIONAL, give \
                 the path of its libstrobe_probe_c.so"
            ),
            Warning::UnknownPoint { name, hint } => write!(
                f,
                "probe 'point:{name}' is unknown: the program declares no probe point of that \
                 name{hint}"
            ),
            Warning::TraceShowsKernelProbesOnly => write!(
                f,
                "tracing shows kernel probes only: probe points are counted by the probe \
                 library, which reports at exit"
            ),
        }
    }
}

/// The end of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunReport {
    /// One row per probe, in the order given (unknown points have none).
    pub rows: Vec<Row>,
    /// From the target's release to its exit.
    pub elapsed: Duration,
    /// How the target ended.
    pub exit: Exit,
    /// Hit records the kernel dropped because a ring was full (counts stay exact).
    pub lost: u64,
    /// Returns whose entry was not seen.
    pub unmatched_returns: u64,
    /// Entries whose return was not seen.
    pub unmatched_entries: u64,
    /// What could not be counted.
    pub warnings: Vec<Warning>,
}

/// A program running under probes.
#[derive(Debug)]
pub struct Run {
    probes: Vec<Probe>,
    program: String,
    trace: bool,
    /// Removed when the run is dropped.
    points: Option<PointsFile>,
    /// Its events close when the run is dropped.
    session: Session,
}

impl Run {
    /// Resolves the probes, prepares the probe library's report, and starts the program
    /// under them. `on_notice` hears what is done on the user's behalf (mounting tracefs)
    /// before the program starts.
    pub fn start(opts: RunOptions, on_notice: impl FnMut(&Notice)) -> Result<Run, Error> {
        let RunOptions { probes, mut command, binary, session, probe_lib } = opts;
        let mut resolved = Vec::new();
        if probes.iter().any(|p| matches!(p, Probe::Kernel { .. })) {
            let binary = match binary {
                Some(b) => b,
                None => command.resolve_program()?,
            };
            let env = SearchEnv::new(command.ld_library_path().as_deref());
            let mut resolver = Resolver::new(&binary, env, None)?;
            for p in &probes {
                if let Probe::Kernel { text, spec } = p {
                    resolved.push(resolver.resolve(text, spec)?);
                }
            }
        }
        let names: Vec<&str> = probes
            .iter()
            .filter_map(|p| match p {
                Probe::Point { name } => Some(name.as_str()),
                Probe::Kernel { .. } => None,
            })
            .collect();
        let points = if names.is_empty() {
            None
        } else {
            let file = PointsFile::create()?;
            file.configure(&mut command, Some(&names), false, probe_lib.as_deref())?;
            Some(file)
        };
        let trace = session.trace;
        let session = Session::launch(&command, resolved, session, on_notice)?;
        Ok(Run {
            program: command.program.to_string_lossy().into_owned(),
            trace,
            probes,
            points,
            session,
        })
    }

    /// The target's pid.
    pub fn pid(&self) -> u32 {
        self.session.pid()
    }

    /// Waits for the program to exit and gathers the rows. With tracing, kernel hits go
    /// to `on_hits` as they are read (see [`Session::run`]).
    pub fn wait(&mut self, on_hits: impl FnMut(&[Hit<'_>])) -> Result<RunReport, Error> {
        let report = self.session.run(on_hits)?;
        let point_report = match &self.points {
            Some(f) => f.read()?,
            None => None,
        };
        let mut warnings = Vec::new();
        if self.points.is_some() && point_report.is_none() {
            warnings.push(Warning::NoPointReport { program: self.program.clone() });
        }
        let mut kernel_rows = report.probes.iter().map(|p| Row {
            probe: p.name.clone(),
            kind: RowKind::Kernel(p.kind),
            symbol: p.symbol.clone(),
            sites: p.sites,
            hits: p.hits,
            latency: p.latency,
        });
        let mut rows = Vec::new();
        for p in &self.probes {
            match p {
                Probe::Kernel { .. } => rows.extend(kernel_rows.next()),
                Probe::Point { name } => {
                    let Some(pr) = &point_report else { continue };
                    if let Some((_, hint)) = pr.unknown.iter().find(|(n, _)| n == name) {
                        warnings
                            .push(Warning::UnknownPoint { name: name.clone(), hint: hint.clone() });
                        continue;
                    }
                    let c = pr.counts.iter().find(|c| c.probe == *name);
                    rows.push(Row {
                        probe: format!("{POINT_PREFIX}{name}"),
                        kind: RowKind::Point,
                        symbol: name.clone(),
                        sites: 1,
                        hits: c.map_or(0, |c| c.hits),
                        latency: c.and_then(crate::points::latency),
                    });
                }
            }
        }
        if self.trace && self.points.is_some() {
            warnings.push(Warning::TraceShowsKernelProbesOnly);
        }
        Ok(RunReport {
            rows,
            elapsed: report.elapsed,
            exit: report.exit,
            lost: report.lost,
            unmatched_returns: report.unmatched_returns,
            unmatched_entries: report.unmatched_entries,
            warnings,
        })
    }
}

/// What `--list` is asked for.
#[derive(Debug, Clone)]
pub struct ListOptions {
    /// The ELF file to list; `None`: the command's executable.
    pub binary: Option<PathBuf>,
    /// A command to run so that its probe points can be listed (they are known only to
    /// the running program).
    pub command: Option<Command>,
    /// Also list the binary's functions.
    pub functions: bool,
    /// A probe library to preload (see [`RunOptions::probe_lib`]).
    pub probe_lib: Option<PathBuf>,
}

/// USDT probes of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtGroup {
    /// The library's soname or `DT_NEEDED` name; `None` for the binary itself.
    pub lib: Option<String>,
    /// The file.
    pub path: PathBuf,
    /// Its probes, each once, in note order.
    pub probes: Vec<UsdtEntry>,
}

/// One USDT probe, as it would be named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtEntry {
    /// `usdt:[LIB:]PROVIDER:NAME`.
    pub name: String,
    /// How many sites the compiler emitted for it.
    pub sites: usize,
    /// Guarded by a semaphore.
    pub semaphore: bool,
    /// The argument description (`-4@%edi 8@%rsi`), possibly empty.
    pub args: String,
}

/// What can be probed.
#[derive(Debug, Clone)]
pub struct Listing {
    /// The binary listed.
    pub binary: PathBuf,
    /// The binary's USDT probes first, then each library's that has any, in load order.
    pub usdt: Vec<UsdtGroup>,
    /// The binary's functions, when asked for.
    pub functions: Option<Vec<Function>>,
    /// With a command: its probe points (`None` inside when the program has no probe
    /// library), and how it exited.
    pub points: Option<(Option<PointReport>, Exit)>,
}

/// Lists the USDT probes of the binary and of the libraries it loads (and its functions),
/// then, with a command, runs it to list the probe points it declares. A bad binary fails
/// before anything runs.
pub fn list(opts: ListOptions) -> Result<Listing, Error> {
    let binary = match (&opts.binary, &opts.command) {
        (Some(b), _) => b.clone(),
        (None, Some(c)) => c.resolve_program()?,
        (None, None) => return Err(Error::NoBinary),
    };
    let env = SearchEnv::new(opts.command.as_ref().and_then(Command::ld_library_path).as_deref());
    let exe = ElfFile::open(&binary)?;
    let mut usdt = vec![usdt_group(None, &exe)];
    for l in libpath::load_closure(&exe, &env) {
        if let Ok(elf) = ElfFile::open(&l.path) {
            if !elf.usdt().is_empty() {
                usdt.push(usdt_group(Some(l.soname.unwrap_or(l.needed)), &elf));
            }
        }
    }
    let functions = opts.functions.then(|| exe.functions().to_vec());
    let points = match opts.command {
        Some(mut cmd) => {
            let file = PointsFile::create()?;
            file.configure(&mut cmd, None, true, opts.probe_lib.as_deref())?;
            let mut session = Session::launch(&cmd, Vec::new(), Options::default(), |_| {})?;
            let report = session.run(|_| {})?;
            Some((file.read()?, report.exit))
        }
        None => None,
    };
    Ok(Listing { binary, usdt, functions, points })
}

fn usdt_group(lib: Option<String>, elf: &ElfFile) -> UsdtGroup {
    let mut probes: Vec<UsdtEntry> = Vec::new();
    for n in elf.usdt() {
        let name = match &lib {
            Some(l) => format!("usdt:{l}:{}:{}", n.provider, n.name),
            None => format!("usdt:{}:{}", n.provider, n.name),
        };
        if probes.iter().any(|p| p.name == name) {
            continue;
        }
        probes.push(UsdtEntry {
            name,
            sites: elf
                .usdt()
                .iter()
                .filter(|m| m.provider == n.provider && m.name == n.name)
                .count(),
            semaphore: n.semaphore != 0,
            args: n.args.clone(),
        });
    }
    UsdtGroup { lib, path: elf.path().to_path_buf(), probes }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_args_are_classified_by_scheme() {
        assert!(
            matches!(Probe::parse("point:req").unwrap(), Probe::Point { name } if name == "req")
        );
        assert!(matches!(Probe::parse("usdt:a:b").unwrap(), Probe::Kernel { .. }));
        assert!(matches!(Probe::parse("libc:malloc").unwrap(), Probe::Kernel { .. }));
        let e = Probe::parse("point:").unwrap_err();
        assert_eq!(e.to_string(), "bad probe 'point:': write point:NAME");
    }
}
