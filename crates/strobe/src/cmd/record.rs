//! `strobe record`: clap arguments, their conversion into the recording session's plain
//! options (crate strobe-record, which does the work), and the summary it prints.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use strobe_protocol::CallGraph;
use strobe_record::{RecordOptions, Recorded};

use crate::agent_lib;

/// The default output file.
pub const DEFAULT_OUTPUT: &str = "strobe.data";

/// Arguments of `strobe record`.
#[derive(Debug, clap::Args)]
#[command(
    about = "Profile a program (or the bundled workload) into a record file",
    long_about = "Profile a program and all its threads into a record file.\n\n\
strobe injects its agent (libstrobe_agent.so) with LD_PRELOAD, so the program must be a \
dynamically linked executable. Every thread, including threads created later, gets its own \
perf event group: a sampling leader (task-clock, or cycles when the machine has a hardware \
PMU) and the counters chosen with -e. Sampling alternates a long period and a short window; \
the counters read at both ends of each window give per-function metrics (strobe report). \
Each thread's first period starts at a random phase, so threads shorter than a period are \
sampled in proportion to their CPU time.\n\n\
Each sample leaves the program as it is taken, into a shared buffer strobe drains while the \
program runs: a program that crashes or is killed keeps every sample it took. Before the \
program starts, a short calibration measures what each counter counts in a window that is \
not the program's own work (the kernel's overflow and return paths, about 28 us of \
task-clock per window on a VM); strobe report subtracts it.\n\n\
The long period comes from the overhead budget (--overhead): before the program starts, the \
agent measures what one sample costs it, in a short process of its own (about 15 ms of CPU the \
program does not pay), charges twice that for what the measurement \
cannot see (cache refill after each signal; the factor comes from strobe bench sampling), and \
picks the period whose predicted slowdown equals the budget. Costs that do not grow with the \
sample rate (the perf group switched at each context switch, software counters such as \
page-faults) are not in the prediction and come on top. An explicit period= overrides that, \
with a warning when the predicted slowdown exceeds the budget.\n\n\
With no command, strobe profiles its bundled workload (strobe workload).",
    after_help = "Examples:\n  \
strobe record                                          # profile the bundled workload\n  \
strobe record -o run.strobe -- ./myprog args\n  \
strobe record -e '{task-clock/period=1ms,window=20us/,page-faults,context-switches}' -- ./myprog\n  \
strobe record -e '{cycles/period=999700,window=300/,instructions,branch-misses}' -- ./myprog\n  \
strobe record --call-graph fp -- ./myprog\n  \
strobe report strobe.data"
)]
pub struct Args {
    /// The record file to write (replaced if it exists).
    #[arg(short, long, value_name = "FILE", default_value = DEFAULT_OUTPUT)]
    output: PathBuf,
    /// The event group, in perf's syntax: the first event samples (terms period=,
    /// window= (alias alt-period=, hf-period=), jitter=), the others are counted.
    /// Default: {task-clock,page-faults,context-switches}, or cycles and cache/branch
    /// counters with a hardware PMU.
    #[arg(short, long, value_name = "SPEC")]
    event: Option<String>,
    /// Overhead budget: the slowdown the default period aims for (e.g. 2%, 0.5%, 0.02).
    #[arg(long, value_name = "PERCENT", default_value = "2%")]
    overhead: String,
    /// Samples buffered before strobe is woken to save them (strobe also saves every 100
    /// ms, and whatever is left when the program ends).
    #[arg(long, value_name = "N", default_value_t = 2048)]
    wakeup: u64,
    /// Size of the buffer samples wait in, shared by all threads (e.g. 64M, 1G). Memory is
    /// this plus 64 bytes per thread alive at once, whatever the number of threads; a
    /// sample that finds the buffer full is counted as lost, and the report says so.
    #[arg(long, value_name = "BYTES", default_value = "64M")]
    buffer: String,
    /// How samples' call stacks are walked: dwarf (from the unwind tables, correct through
    /// code without frame pointers, such as Debian's libc and -O2 C), fp (frame pointers:
    /// cheaper, loses callers in code built without them), or none.
    #[arg(long, value_name = "MODE", default_value = "dwarf")]
    call_graph: String,
    /// The most caller frames a sample keeps.
    #[arg(long, value_name = "N", default_value_t = 128)]
    max_depth: u32,
    /// Profile forked children too (each in its own stream of the file).
    #[arg(long)]
    follow_fork: bool,
    /// The program to profile and its arguments, after `--` or after strobe's own options
    /// (default: strobe's bundled workload).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// Parses `2%`, `0.5%` or a fraction `0.02` into parts per million.
fn parse_overhead(s: &str) -> anyhow::Result<u64> {
    let bad = || {
        anyhow::anyhow!(
            "--overhead {s}: expected a percentage such as 2% or 0.5% (between 0.01% and 50%)"
        )
    };
    let (num, scale) = match s.strip_suffix('%') {
        Some(n) => (n, 1e4),
        None => (s, 1e6),
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    let ppm = (v * scale).round();
    if !(100.0..=500_000.0).contains(&ppm) {
        return Err(bad());
    }
    Ok(ppm as u64)
}

/// Parses `64M`, `1G`, `512K` or a plain number of bytes.
fn parse_bytes(s: &str) -> anyhow::Result<u64> {
    let bad =
        || anyhow::anyhow!("--buffer {s}: expected a size such as 64M, 1G or 512K (at least 64K)");
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c @ ('K' | 'k' | 'M' | 'm' | 'G' | 'g'))) => (
            &t[..i],
            match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                _ => 1 << 30,
            },
        ),
        _ => (t, 1),
    };
    let v: u64 = num.trim().parse().map_err(|_| bad())?;
    let bytes = v.checked_mul(mult).ok_or_else(bad)?;
    if !(64 << 10..=64 << 30).contains(&bytes) {
        return Err(bad());
    }
    Ok(bytes)
}

/// Runs `strobe record`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let overhead_ppm = parse_overhead(&args.overhead)?;
    let buffer_bytes = parse_bytes(&args.buffer)?;
    let call_graph = CallGraph::from_name(&args.call_graph).ok_or_else(|| {
        anyhow::anyhow!("--call-graph {}: expected dwarf, fp or none", args.call_graph)
    })?;
    if !(1..=strobe_sampler::custody::record::MAX_FRAMES as u32).contains(&args.max_depth) {
        anyhow::bail!(
            "--max-depth {}: expected 1 to {}",
            args.max_depth,
            strobe_sampler::custody::record::MAX_FRAMES
        );
    }
    let self_exe = std::env::current_exe().context("cannot find strobe's own executable")?;
    let command: Vec<OsString> = if args.command.is_empty() {
        vec![self_exe.clone().into_os_string(), "workload".into()]
    } else {
        args.command.clone()
    };
    let opts = RecordOptions {
        output: args.output.clone(),
        events: args.event.clone(),
        overhead_ppm,
        wakeup: args.wakeup,
        buffer_bytes,
        follow_fork: args.follow_fork,
        call_graph,
        max_depth: args.max_depth,
        command,
        agent: agent_lib::agent_path()?,
        calibration_command: vec![self_exe.into_os_string(), COSTS_SUBCOMMAND.into()],
    };
    let rec = strobe_record::record(&opts)?;
    summarize(&args.output, &rec);
    Ok(match rec.exit {
        strobe_target::Exit::Code(c) => ExitCode::from(c as u8),
        e @ strobe_target::Exit::Signal { .. } => {
            eprintln!("strobe: the target was killed by {e}");
            ExitCode::from(e.code())
        }
    })
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 10 << 20 => format!("{:.1} MB", n as f64 / 1048576.0),
        n if n >= 10 << 10 => format!("{:.1} KB", n as f64 / 1024.0),
        n => format!("{n} bytes"),
    }
}

/// Prints the agents' notes, the warnings and one summary line on stderr.
fn summarize(path: &std::path::Path, r: &Recorded) {
    for n in &r.notes {
        eprintln!("strobe: agent: {n}");
    }
    if let Err(why) = &r.calibration {
        eprintln!("strobe: warning: calibration failed ({why}); the agent measured its costs in the target and window metrics include the sampler's own counts");
    } else if let Ok(c) = &r.calibration {
        for n in &c.notes {
            eprintln!("strobe: warning: calibration: {n}");
        }
    }
    for w in &r.warnings {
        eprintln!("strobe: warning: {w}");
    }
    let t = &r.totals;
    let mut line = format!(
        "strobe record: {} samples and {} window ends{} ({} lost) from {} process{}, {} thread{}; {} written to {}",
        t.samples,
        t.window_ends,
        if t.tails > 0 { format!(" ({} windows began inside a system call)", t.tails) } else { String::new() },
        t.lost,
        r.processes,
        if r.processes == 1 { "" } else { "es" },
        t.threads,
        if t.threads == 1 { "" } else { "s" },
        human_bytes(r.bytes),
        path.display()
    );
    if let Some(s) = r.sampling {
        let unit = |v: u64| {
            if r.leader_is_time {
                format!("{:.1} us", v as f64 / 1e3)
            } else {
                v.to_string()
            }
        };
        line.push_str(&format!("; period {}, window {}", unit(s.period), unit(s.window)));
    }
    if let Ok(c) = &r.calibration {
        if let Some(costs) = &c.costs {
            line.push_str(&format!(", {:.1} us per sample", costs.sample_ns as f64 / 1e3));
        }
        if let Some(b) = &c.baseline {
            if let Some(lead) = b.counters.first() {
                let unit = if r.leader_is_time { " us" } else { "" };
                let scale = if r.leader_is_time { 1e3 } else { 1.0 };
                line.push_str(&format!(
                    ", {:.1}{unit} of each window is the sampler's (measured before the start)",
                    lead.mean / scale
                ));
                if let Some(t) = b.tail.first() {
                    line.push_str(&format!(
                        ", {:.1}{unit} from an overflow to the handler",
                        t.mean / scale
                    ));
                }
            }
        }
    }
    eprintln!("{line}");
}

/// The hidden subcommand the calibration process runs: the agent preloaded into it does
/// the work at load; the command itself only exits.
pub const COSTS_SUBCOMMAND: &str = "__costs";

/// `strobe __costs`: nothing to do (see [`COSTS_SUBCOMMAND`]).
pub fn print_costs() -> anyhow::Result<ExitCode> {
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overhead_parses_percent_and_fraction() {
        assert_eq!(parse_overhead("2%").unwrap(), 20_000);
        assert_eq!(parse_overhead("0.5%").unwrap(), 5_000);
        assert_eq!(parse_overhead("0.02").unwrap(), 20_000);
        assert!(parse_overhead("0%").is_err());
        assert!(parse_overhead("two").is_err());
    }

    #[test]
    fn buffer_sizes_parse_with_units() {
        assert_eq!(parse_bytes("64M").unwrap(), 64 << 20);
        assert_eq!(parse_bytes("1g").unwrap(), 1 << 30);
        assert_eq!(parse_bytes("524288").unwrap(), 512 << 10);
        assert!(parse_bytes("1K").is_err(), "too small");
        assert!(parse_bytes("lots").is_err());
    }
}
