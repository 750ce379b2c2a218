//! `strobe record`: clap arguments, their conversion into the recording session's plain
//! options (crate strobe-record, which does the work), and the summary it prints.
//!
//! Must never hold engine logic (launching, draining, ELF or /proc reading): that is
//! strobe-record's and strobe-target's.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use strobe_protocol::CallGraph;
use strobe_record::{Attach, Mode, RecordError, RecordOptions, Recorded};

use crate::agent_lib;

/// The default output file.
pub(crate) const DEFAULT_OUTPUT: &str = "strobe.data";

/// Arguments of `strobe record`.
#[derive(Debug, clap::Args)]
#[command(
    about = "Profile a program (or the bundled workload) into a record file",
    long_about = "Profile a program and all its threads into a record file.\n\n\
In agent mode, strobe injects its agent (libstrobe_agent.so) into a dynamically linked \
program with LD_PRELOAD (other programs are recorded in kernel mode, below). Every thread, including threads created later, gets its own \
perf event group: a sampling leader (task-clock, or cycles when the machine has a hardware \
PMU) and the counters chosen with -e. Sampling alternates a long period and a short window \
(150 us of task-clock by default); the counters read at both ends of each window give \
per-function metrics (strobe report). A window whose overflow interrupted the kernel's \
work for the thread (a system call or a page fault) begins at the overflow (the kernel's own \
record of the counters there), so functions that spend time in long calls or faults are \
measured whole. Each thread's first period starts at a random \
phase, so threads shorter than a period are sampled in proportion to their CPU time. \
Stacks are walked in the signal handler (--call-graph).\n\n\
Each sample leaves the program as it is taken, into a shared buffer strobe drains while the \
program runs: a program that crashes or is killed keeps every sample it took. Before the \
program starts, a short calibration measures what each counter counts in a window that is \
not the program's own work (the kernel's overflow and return paths and the handler, about \
20-35 us of task-clock per window on a VM); strobe report subtracts it, and gives every \
metric a 95% interval.\n\n\
The long period comes from the overhead budget (--overhead): before the program starts, the \
agent measures what one sample costs it, in a short process of its own (about 15 ms of CPU the \
program does not pay), charges twice that for what the measurement \
cannot see (cache refill after each signal; the factor comes from strobe bench sampling), and \
picks the period whose predicted slowdown equals the budget. Costs that do not grow with the \
sample rate (the perf group switched at each context switch, software counters such as \
page-faults) are not in the prediction and come on top. An explicit period= overrides that, \
with a warning when the predicted slowdown exceeds the budget.\n\n\
With no command, strobe profiles its bundled workload (strobe workload).\n\n\
Kernel mode (--mode kernel, -p, -a) injects nothing: strobe opens the events on every CPU \
for the target, with inherit so every thread and child it makes is followed, and reads the \
kernel's ring buffers itself, woken only past a watermark (--wakeup). It profiles programs \
the agent cannot serve (statically linked, Go, or one that goes on without the agent \
for 0.5 s: chosen automatically, saying so in one line), running processes (-p) and the whole system (-a). Samples carry the group's values \
and the kernel's frame-pointer call chain; windows need a kernel with hf_sample_period \
(none released has it), so per-function window metrics need agent mode. The period is \
fixed (period=, default 1 ms of CPU time). Every sample the kernel drops is counted, and \
strobe report shows it. --off-cpu adds the time threads spend switched out, with the \
stack they left at, so strobe report shows on-CPU, off-CPU and wall time per function.\n\n\
Permissions (kernel.perf_event_paranoid): at 2, the default, an ordinary user can record \
their own programs and processes, user space only; kernel functions and frames, and \
--off-cpu, need 1 or lower; -a needs 0 or lower (or, for all of these, root or \
CAP_PERFMON).",
    after_help = "Examples:\n  \
strobe record                                          # profile the bundled workload\n  \
strobe record -o run.strobe -- ./myprog args\n  \
strobe record -e '{task-clock/period=1ms,window=50us/,page-faults,context-switches}' -- ./myprog\n  \
strobe record -e '{cycles/period=999700,window=300/,instructions,branch-misses}' -- ./myprog\n  \
strobe record --call-graph fp -- ./myprog\n  \
strobe record -p 1234                                  # a running process, until it exits or Ctrl-C\n  \
strobe record -p 1234,1240 --duration 10 --off-cpu\n  \
sudo strobe record -a --duration 5                     # the whole system\n  \
strobe record --mode kernel -- ./myprog\n  \
strobe record --export http://collector:4318 -- ./myprog   # sent when it ends\n  \
sudo strobe record -a --every 10s --export http://collector:4318   # a continuous agent\n  \
strobe record --every 10s -o run.strobe --rotate 256M -- ./server   # and a local copy\n  \
strobe report strobe.data"
)]
pub(crate) struct Args {
    /// The record file to write (replaced if it exists); default strobe.data. With
    /// --every, no file is kept unless this is given: then it is rotated (--rotate).
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
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
    /// ms, and whatever is left when the program ends). In kernel mode, the ring buffer's
    /// watermark: this many samples, at most half the ring; 1 wakes strobe per sample.
    #[arg(long, value_name = "N", default_value_t = 2048)]
    wakeup: u64,
    /// Size of the buffer samples wait in (e.g. 64M, 1G). Agent mode: one buffer shared
    /// by all threads, default 64M; memory is this plus 64 bytes per thread alive at once.
    /// Kernel mode: the ring buffer of each CPU, default 512K, or 4M when samples carry
    /// copies of the user stack (dwarf); rounded down to a power of two pages (and 32K more
    /// per CPU for threads' CPU times at their exit). A sample that finds the buffer full
    /// is counted as lost, and the report says so.
    #[arg(long, value_name = "BYTES")]
    buffer: Option<String>,
    /// How samples' call stacks are walked: dwarf (from the unwind tables, correct through
    /// code without frame pointers, such as Debian's libc and -O2 C), fp (frame pointers:
    /// cheaper, loses callers in code built without them), or none. Default: dwarf for a
    /// launched program, fp for -p and -a (the kernel's call chains). In kernel mode, dwarf
    /// copies 8 KiB of user stack with each sample and strobe record walks it.
    #[arg(long, value_name = "MODE")]
    call_graph: Option<String>,
    /// The most caller frames a sample keeps.
    #[arg(long, value_name = "N", default_value_t = 128)]
    max_depth: u32,
    /// Profile forked children too (each in its own stream of the file). Kernel mode
    /// always follows them.
    #[arg(long)]
    follow_fork: bool,
    /// How to take samples: agent (inject the agent with LD_PRELOAD: windows, the
    /// overhead budget), kernel (read the kernel's ring buffers; nothing injected), or
    /// auto: the agent, unless the program is statically linked or a Go program.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    mode: ModeArg,
    /// Record running processes (kernel mode): every thread they have and make, until
    /// they exit, --duration passes, or Ctrl-C. At the default perf_event_paranoid (2),
    /// an ordinary user can record their own processes (user space only).
    #[arg(
        short,
        long = "pid",
        value_name = "PID[,PID...]",
        value_delimiter = ',',
        conflicts_with = "all_cpus"
    )]
    pid: Vec<u32>,
    /// Record the whole system, every task on every CPU (kernel mode), until --duration
    /// passes or Ctrl-C. Needs kernel.perf_event_paranoid 0 or lower, root or CAP_PERFMON.
    #[arg(short = 'a', long)]
    all_cpus: bool,
    /// With -p or -a: stop after this many seconds (e.g. 10, 0.5).
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Kernel mode: also record the time threads spend switched out (blocked or waiting
    /// for a CPU) with the stack they left at, so strobe report shows on-CPU, off-CPU and
    /// wall time per function and call path. Needs perf_event_paranoid 1 or lower.
    #[arg(long)]
    off_cpu: bool,
    /// Continuous mode: send one profile every DURATION (e.g. 10s, 500ms, 1m) to an
    /// OpenTelemetry Collector (--export's URL, default from the OTEL_EXPORTER_OTLP_*
    /// variables, else http://localhost:4318), cut on multiples of DURATION in Unix time,
    /// until the program ends (or, with -p and -a, until --duration passes or SIGINT or
    /// SIGTERM; the last interval is sent then). A collector that is down or slow costs
    /// only the profiles it does not take, counted and said at the end (kept with
    /// --spool). Memory and disk stay bounded however long it runs.
    #[arg(long, value_name = "DURATION", help_heading = "OpenTelemetry")]
    every: Option<String>,
    /// Send the recording as OTLP profiles to an OpenTelemetry Collector over OTLP/HTTP
    /// (protobuf, gzip) at URL, a base such as http://collector:4318, when it ends (with
    /// --every: each interval). Without URL: OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT, else
    /// OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318. OTEL_EXPORTER_OTLP_HEADERS,
    /// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are honoured (docs/fleet.md).
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "", help_heading = "OpenTelemetry")]
    export: Option<String>,
    /// Trust the CA certificates in FILE (PEM) for an https endpoint, instead of the
    /// system's (also OTEL_EXPORTER_OTLP_CERTIFICATE).
    #[arg(long, value_name = "FILE", help_heading = "OpenTelemetry")]
    ca_file: Option<PathBuf>,
    /// Keep profiles that could not be sent in DIR; they are sent first by the next
    /// export that names DIR (and, with --every, as soon as the collector answers).
    #[arg(long, value_name = "DIR", help_heading = "OpenTelemetry")]
    spool: Option<PathBuf>,
    /// With --every and -o: start a new FILE when it reaches SIZE (e.g. 64M, 1G); the
    /// previous one is kept as FILE.1 (replacing the one before), so the two take at most
    /// twice SIZE. Each reads on its own with strobe report.
    #[arg(
        long,
        value_name = "SIZE",
        default_value = "64M",
        requires = "every",
        help_heading = "OpenTelemetry"
    )]
    rotate: String,
    /// The program to profile and its arguments, after `--` or after strobe's own options
    /// (default: strobe's bundled workload).
    #[arg(trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ModeArg {
    /// Inject the agent (LD_PRELOAD).
    Agent,
    /// Read the kernel's ring buffers; inject nothing.
    Kernel,
    /// The agent where it can serve the program, else kernel mode.
    Auto,
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
    parse_size("--buffer", s)
}

/// Parses a size given to `flag`.
fn parse_size(flag: &str, s: &str) -> anyhow::Result<u64> {
    let bad =
        || anyhow::anyhow!("{flag} {s}: expected a size such as 64M, 1G or 512K (at least 4K)");
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
    if !(4 << 10..=64 << 30).contains(&bytes) {
        return Err(bad());
    }
    Ok(bytes)
}

/// Parses `--every`: `10s`, `500ms`, `1m`, `2.5s`, or a plain number of seconds.
fn parse_every(s: &str) -> anyhow::Result<std::time::Duration> {
    let bad = || {
        anyhow::anyhow!(
            "--every {s}: expected a duration such as 10s, 500ms or 1m (at least 100ms, at most a day)"
        )
    };
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| bad())?;
    let secs = v * scale;
    if !(0.1..=86_400.0).contains(&secs) {
        return Err(bad());
    }
    Ok(std::time::Duration::from_secs_f64(secs))
}

/// The options `args` give, checked where the check needs the flag's name.
fn options(args: &Args) -> anyhow::Result<RecordOptions> {
    let overhead_ppm = parse_overhead(&args.overhead)?;
    let given_buffer = args.buffer.as_deref().map(parse_bytes).transpose()?;
    let call_graph_name = args.call_graph.as_deref().unwrap_or("dwarf");
    let call_graph = CallGraph::from_name(call_graph_name).ok_or_else(|| {
        anyhow::anyhow!("--call-graph {call_graph_name}: expected dwarf, fp or none")
    })?;
    let attach = match (args.pid.is_empty(), args.all_cpus) {
        (false, _) => Attach::Processes(args.pid.clone()),
        (true, true) => Attach::System,
        (true, false) => Attach::Launch,
    };
    let duration = match args.duration {
        None => None,
        Some(d) if d.is_finite() && d > 0.0 && d < 1e9 => {
            Some(std::time::Duration::from_secs_f64(d))
        }
        Some(d) => anyhow::bail!("--duration {d}: expected a number of seconds above 0"),
    };
    if !(1..=strobe_sampler::custody::record::MAX_FRAMES as u32).contains(&args.max_depth) {
        anyhow::bail!(
            "--max-depth {}: expected 1 to {}",
            args.max_depth,
            strobe_sampler::custody::record::MAX_FRAMES
        );
    }
    let self_exe = std::env::current_exe().context("cannot find strobe's own executable")?;
    let command: Vec<OsString> = if args.command.is_empty() && attach == Attach::Launch {
        vec![self_exe.clone().into_os_string(), "workload".into()]
    } else {
        args.command.clone()
    };
    Ok(RecordOptions {
        output: args.output.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_OUTPUT)),
        events: args.event.clone(),
        overhead_ppm,
        wakeup: args.wakeup,
        buffer_bytes: given_buffer.unwrap_or(64 << 20),
        call_graph,
        max_depth: args.max_depth,
        command,
        agent: agent_lib::agent_path()?,
        calibration_command: vec![self_exe.into_os_string(), COSTS_SUBCOMMAND.into()],
        mode: match args.mode {
            ModeArg::Agent => Mode::Agent,
            ModeArg::Kernel => Mode::Kernel,
            ModeArg::Auto => Mode::Auto,
        },
        attach,
        duration,
        off_cpu: args.off_cpu,
        ring_bytes: given_buffer,
        explicit_call_graph: args.call_graph.is_some(),
    })
}

/// The library's refusals, said with the flags that caused them.
fn with_flags(e: RecordError, args: &Args) -> anyhow::Error {
    match e {
        RecordError::WakeupZero => anyhow::anyhow!("--wakeup must be at least 1"),
        RecordError::BufferTooSmall { min, .. } => anyhow::anyhow!(
            "--buffer {}: the agent's buffer needs at least {}K (kernel mode's per-CPU rings \
             take less: --mode kernel)",
            args.buffer.as_deref().unwrap_or_default(),
            min >> 10
        ),
        RecordError::RingTooSmall { bytes, sample, stack_copy } => anyhow::anyhow!(
            "--buffer {}: a ring of {}K per CPU cannot hold one sample ({sample} bytes or more{}), \
             so every sample would be lost; give --buffer {}K or more{}",
            args.buffer.as_deref().unwrap_or_default(),
            bytes >> 10,
            if stack_copy { " with its 8 KiB copy of the user stack" } else { "" },
            (sample.next_power_of_two().max(4096) * 2) >> 10,
            if stack_copy { ", or --call-graph fp (the kernel's call chains, no copy)" } else { "" }
        ),
        RecordError::CommandWithAttach { program } => anyhow::anyhow!(
            "-p and -a record what already runs: give no command (or drop -p/-a to launch \
             {program})"
        ),
        RecordError::AgentCannotAttach => {
            anyhow::anyhow!("-p and -a record in kernel mode: drop --mode agent")
        }
        RecordError::DurationNeedsAttach => anyhow::anyhow!(
            "--duration applies to -p and -a; a launched command is recorded until it ends"
        ),
        RecordError::NotInjectable { program, why } => anyhow::anyhow!(
            "cannot profile {} in agent mode: {why}; strobe injects its agent with LD_PRELOAD, \
             which needs a dynamically linked executable (record it with --mode kernel, or \
             rebuild without -static)",
            program.display()
        ),
        RecordError::Output { path, source } => anyhow::anyhow!(
            "cannot write the output file {}: {source} (choose another path with -o)",
            path.display()
        ),
        RecordError::NoProcess { pid } => {
            anyhow::anyhow!("no process {pid} is running (-p takes the ids of running processes)")
        }
        RecordError::PeriodNeeded { leader } => anyhow::anyhow!(
            "kernel mode samples {leader} at a fixed period: give one, e.g. -e \
             '{{{leader}/period=1000/}}'"
        ),
        e => e.into(),
    }
}

/// The export settings `args` give (checked before anything is recorded).
fn export_args(args: &Args) -> Option<super::export::OtlpArgs> {
    (args.export.is_some() || args.every.is_some()).then(|| super::export::OtlpArgs {
        otlp: None,
        export: Some(args.export.clone().unwrap_or_default()),
        ca_file: args.ca_file.clone(),
        spool: args.spool.clone(),
    })
}

/// Runs `strobe record`.
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.export.is_none()
        && args.every.is_none()
        && (args.ca_file.is_some() || args.spool.is_some())
    {
        anyhow::bail!("--ca-file and --spool go with --export or --every");
    }
    let every = args.every.as_deref().map(parse_every).transpose()?;
    let rotate = parse_size("--rotate", &args.rotate)?;
    let mut opts = options(&args)?;
    let plan = strobe_record::plan(&opts).map_err(|e| with_flags(e, &args))?;
    let export = export_args(&args);
    // The export settings are checked before anything is recorded.
    let export_cfg = export.as_ref().map(super::export::config).transpose()?;
    let continuous = match (every, export_cfg) {
        (Some(every), Some(cfg)) => {
            let c = super::export::continuous(every, cfg, args.output.clone(), rotate)?;
            opts.output = c.path().to_path_buf();
            Some(c)
        }
        _ => None,
    };
    if args.follow_fork {
        eprintln!(
            "strobe: note: --follow-fork is the default now (every process of the tree is \
             recorded); the option changes nothing"
        );
    }
    for n in &plan.notices {
        eprintln!("strobe: note: {n}");
    }
    let stop = match &opts.attach {
        Attach::Launch => "",
        _ if opts.duration.is_some() => "",
        _ => "; Ctrl-C stops",
    };
    if plan.mode == strobe_format::RecordMode::Kernel {
        eprintln!("strobe: {}{stop}", plan.mode_line());
    }
    if let (Some(c), Some(every)) = (&continuous, every) {
        eprintln!("strobe: {}", super::export::continuous_line(c, every, args.output.as_deref()));
    }
    let recorded = strobe_record::record(&opts, &plan).map_err(|e| with_flags(e, &args));
    let rec = match (recorded, continuous) {
        (Ok(rec), Some(c)) => {
            summarize(args.output.as_deref(), &rec, true);
            super::export::finish_continuous(c)?;
            rec
        }
        (Ok(rec), None) => {
            let path = opts.output.clone();
            summarize(Some(&path), &rec, false);
            if let Some(e) = &export {
                // Sent when it ends; a failure is said, and the target's status kept.
                let read = strobe_report::recording::ReadOptions::default();
                if let Err(err) = super::export::run(&path, &read, e, false) {
                    eprintln!("strobe: warning: {err:#}");
                }
            }
            rec
        }
        (Err(e), c) => {
            drop(c);
            return Err(e);
        }
    };
    Ok(match rec.exit {
        strobe_target::Exit::Code(c) => ExitCode::from(c as u8),
        e @ strobe_target::Exit::Signal { .. } => {
            eprintln!("strobe: the target was killed by {e}");
            ExitCode::from(e.code())
        }
    })
}

/// Prints the agents' notes, the warnings and one summary line on stderr. `path`: the
/// file kept (none in continuous mode without -o); `continuous`: the file is a copy
/// written as the recording was read.
fn summarize(path: Option<&std::path::Path>, r: &Recorded, continuous: bool) {
    for n in &r.notes {
        eprintln!("strobe: agent: {n}");
    }
    let kernel = r.mode == strobe_format::RecordMode::Kernel;
    if let (Err(why), false) = (&r.calibration, kernel) {
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
        "strobe record: {} samples and {} window ends{} ({} lost) from {} process{}, {} thread{}; {}",
        t.samples,
        t.window_ends,
        if t.tails > 0 { format!(" ({} windows began inside the kernel)", t.tails) } else { String::new() },
        t.lost,
        r.processes,
        if r.processes == 1 { "" } else { "es" },
        t.threads,
        if t.threads == 1 { "" } else { "s" },
        match (path, continuous) {
            (Some(p), false) => format!("{} written to {}", super::human_bytes(r.bytes), p.display()),
            (Some(p), true) => format!("{} recorded, copied to {}", super::human_bytes(r.bytes), p.display()),
            (None, _) => format!("{} recorded (no local file kept)", super::human_bytes(r.bytes)),
        }
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
    if kernel {
        line.push_str(&format!("; {} ring wakeups", t.wakeups));
        if r.off_cpu_intervals > 0 {
            line.push_str(&format!("; {} off-CPU intervals", r.off_cpu_intervals));
        }
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
pub(crate) const COSTS_SUBCOMMAND: &str = "__costs";

/// `strobe __costs`: nothing to do (see [`COSTS_SUBCOMMAND`]).
pub(crate) fn print_costs() -> anyhow::Result<ExitCode> {
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
        assert_eq!(parse_bytes("8K").unwrap(), 8 << 10, "a small kernel ring");
        assert!(parse_bytes("lots").is_err());
    }

    #[test]
    fn intervals_parse_with_units() {
        use std::time::Duration;
        assert_eq!(parse_every("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_every("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_every("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_every("2.5").unwrap(), Duration::from_millis(2500));
        assert!(parse_every("10ms").is_err(), "too short");
        assert!(parse_every("soon").is_err());
    }
}
