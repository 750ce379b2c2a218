//! `strobe watch`: the CLI and the rendering of a watch. The flags become
//! `strobe_watch::session::Options`; the session (in strobe-watch) resolves the specs,
//! runs the program with the agent and names the accessing code; this module prints each
//! hit as it arrives (or the per-function counts), then the summary, and exits with the
//! program's status.
//!
//! Must never: resolve, launch or symbolize anything itself, or hide the program's exit
//! status.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;

use strobe_watch::session::{Hit, Options, Watch, WatchCounts, WatchReport};
use strobe_watch::Policy;

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
pub(crate) struct Args {
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
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let Some((program, rest)) = args.command.split_first() else {
        bail!("no program to run: put it after -- (e.g. strobe watch counter -- ./app)");
    };
    if !(args.rotate_ms.is_finite() && args.rotate_ms > 0.0) {
        bail!("--rotate-ms {}: give a positive number of milliseconds", args.rotate_ms);
    }
    let opts = Options {
        specs: args.specs.clone(),
        command: strobe_target::Command::new(program, rest),
        agent: crate::agent_lib::agent_path()?,
        count: args.count,
        stack: args.stack,
        per_thread: args.thread,
        policy: if args.no_multiplex { Policy::NoMultiplex } else { Policy::Multiplex },
        rotate: Duration::from_secs_f64(args.rotate_ms / 1000.0),
    };
    let watch = Watch::start(opts)?;
    let labels = watch.labels().to_vec();
    // Line-buffered (std's stdout): each hit leaves in one write, never split by the
    // program's own output to the same terminal or pipe. After a failed write (a closed
    // pipe) nothing more is written, but the program runs on to its end.
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut write_err = None;
    let report = watch.run(|h| {
        if write_err.is_none() {
            write_err = out.write_all(hit_text(h).as_bytes()).err();
        }
    })?;
    if let Some(e) = write_err {
        return Err(anyhow::Error::new(e).context("writing hits"));
    }
    if args.count {
        write_counts(&mut out, &report.counts, &labels)?;
    }
    write_summary(&mut out, &report, &labels)?;
    out.flush()?;
    drop(out);
    for w in &report.warnings {
        eprintln!("strobe: warning: {w}");
    }
    if let Some(e) = report.failure() {
        return Err(e.into());
    }
    Ok(ExitCode::from(report.exit.code()))
}

fn file_name(p: &str) -> &str {
    Path::new(p).file_name().and_then(|n| n.to_str()).unwrap_or(p)
}

/// `FUNC (FILE:LINE)`, the file without its directory.
fn code_text(c: &strobe_watch::session::Code) -> String {
    match c.source() {
        Some(s) => format!("{} ({})", c.function(), file_name(s)),
        None => c.function(),
    }
}

/// One hit: `tid=T wp=LABEL old=O new=V at FUNC (FILE:LINE)`, then its frames.
fn hit_text(h: &Hit<'_>) -> String {
    use std::fmt::Write as _;
    let mut s = format!("tid={} wp={} ", h.tid, h.label);
    if let Some(old) = h.old {
        let _ = write!(s, "old={} ", show_value(old, h.len));
    }
    let _ = write!(s, "new={} at {}", show_value(h.new, h.len), code_text(h.at));
    if h.imprecise {
        s.push_str(" [imprecise: SIGTRAP was blocked]");
    }
    s.push('\n');
    for f in &h.stack {
        let _ = writeln!(s, "    <- {}", code_text(f));
    }
    s
}

fn label(labels: &[String], wp: usize) -> &str {
    labels.get(wp).map_or("?", String::as_str)
}

/// `--count`: per watchpoint, hits per accessing function, most first.
fn write_counts(
    out: &mut impl Write,
    counts: &[WatchCounts],
    labels: &[String],
) -> std::io::Result<()> {
    for c in counts {
        writeln!(out, "{}:", label(labels, c.wp))?;
        for f in &c.functions {
            let src = f.source.as_deref().map_or(String::new(), |x| format!(" ({})", file_name(x)));
            writeln!(out, "  {:>10}  {}{src}", f.hits, f.function)?;
        }
    }
    Ok(())
}

/// The totals, each watchpoint's armed fraction, and what was lost or passed on.
fn write_summary(
    out: &mut impl Write,
    report: &WatchReport,
    labels: &[String],
) -> std::io::Result<()> {
    let log = &report.log;
    writeln!(out, "-- {} hits", log.hits)?;
    for (wp, a) in &log.armed {
        let frac = a.fraction();
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
    if log.multiplexed {
        writeln!(
            out,
            "-- {} watchpoints took turns in {} debug registers; scale counts by the armed \
             fraction",
            labels.len(),
            log.slots
        )?;
    }
    if let Some(n) = log.threads {
        writeln!(out, "-- per-thread watchpoints in {n} threads")?;
    }
    if log.lost > 0 {
        writeln!(out, "-- {} hits lost (the agent's buffer was full)", log.lost)?;
    }
    if log.chained > 0 {
        writeln!(out, "-- {} SIGTRAPs passed to the program's own handler", log.chained)?;
    }
    if log.started && !log.ended {
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
    fn values_read_as_signed_numbers_of_their_length() {
        // A 4-byte -1 reads as -1, not 4294967295.
        assert_eq!(show_value(0xffff_ffff, 4), "-1");
        assert_eq!(show_value(0xff, 1), "-1");
        assert_eq!(show_value(7, 8), "7");
    }
}
