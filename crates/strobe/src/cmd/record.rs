//! `strobe record`: checks that the target can be profiled, writes the record file's
//! preamble and header, launches the target with the agent preloaded, waits for it, and
//! passes its exit status on.
//!
//! The capture itself happens inside the target (agent/, libstrobe_agent.so). This
//! module only decides what to ask for and checks, before launching anything, every
//! error a user can cause: an unknown or unavailable event, a too strict
//! `perf_event_paranoid`, a missing or statically linked target, an unwritable output.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{bail, Context};
use strobe_format::{EventDesc, Header, NoteLevel, PeriodSource};
use strobe_perf::names::EventKind;
use strobe_perf::spec::{self, GroupSpec};

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
the counters read at both ends of each window give per-function metrics (strobe report).\n\n\
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
    /// Samples a thread buffers before the writer thread is woken to save them.
    #[arg(long, value_name = "N", default_value_t = 2048)]
    wakeup: u64,
    /// Samples each thread's buffer holds; when full, samples are counted as lost.
    #[arg(long, value_name = "N", default_value_t = 8192)]
    buffer: u64,
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

/// Finds `prog` like execvp: a name with a slash is a path, otherwise searched in PATH.
fn resolve_program(prog: &OsStr) -> anyhow::Result<PathBuf> {
    let p = Path::new(prog);
    let is_exec = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if prog.as_bytes().contains(&b'/') {
        if !p.exists() {
            bail!("target not found: {}", p.display());
        }
        if !is_exec(p) {
            bail!("target {} is not an executable file", p.display());
        }
        return Ok(p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let c = dir.join(p);
        if is_exec(&c) {
            return Ok(c);
        }
    }
    bail!("target not found: '{}' is not a file and not in PATH", p.display())
}

/// Whether an ELF file asks for a program interpreter (PT_INTERP): `Ok(None)` for a
/// dynamic executable, `Ok(Some(reason))` when injection cannot work.
fn check_injectable(path: &Path, depth: u32) -> anyhow::Result<Option<String>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    if let Some(rest) = bytes.strip_prefix(b"#!") {
        // A script: its interpreter is what runs (and what the agent is injected into).
        let line = rest.split(|&b| b == b'\n').next().unwrap_or(&[]);
        let interp = String::from_utf8_lossy(line);
        let Some(first) = interp.split_whitespace().next() else {
            return Ok(Some("its #! line names no interpreter".into()));
        };
        if depth > 3 {
            return Ok(None);
        }
        return check_injectable(Path::new(first), depth + 1);
    }
    if bytes.get(..4) != Some(b"\x7fELF") {
        return Ok(Some("it is neither an ELF executable nor a #! script".into()));
    }
    let u16_at = |o: usize| bytes.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at =
        |o: usize| bytes.get(o..o + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    let u64_at =
        |o: usize| bytes.get(o..o + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])));
    let (phoff, phentsize, phnum) = match bytes.get(4) {
        Some(2) => (u64_at(0x20), u16_at(0x36), u16_at(0x38)),
        Some(1) => (u32_at(0x1c).map(u64::from), u16_at(0x2a), u16_at(0x2c)),
        _ => return Ok(Some("its ELF class is not recognised".into())),
    };
    let (Some(phoff), Some(phentsize), Some(phnum)) = (phoff, phentsize, phnum) else {
        return Ok(Some("its ELF header is cut short".into()));
    };
    for i in 0..u64::from(phnum) {
        let at = phoff.saturating_add(i * u64::from(phentsize));
        if u32_at(at as usize) == Some(3) {
            return Ok(None); // PT_INTERP
        }
    }
    Ok(Some("it is statically linked (no PT_INTERP program header)".into()))
}

fn event_descs(spec: &GroupSpec, kernel: bool) -> Vec<EventDesc> {
    spec.events
        .iter()
        .map(|e| {
            let (exclude_user, exclude_kernel) = e.privilege.excludes(kernel);
            EventDesc {
                name: e.name.clone(),
                type_: e.type_,
                config: e.config,
                is_time: e.is_time,
                is_hardware: e.kind == EventKind::Hardware,
                exclude_user,
                exclude_kernel,
            }
        })
        .collect()
}

fn now_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer for the call.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 10 << 20 => format!("{:.1} MB", n as f64 / 1048576.0),
        n if n >= 10 << 10 => format!("{:.1} KB", n as f64 / 1024.0),
        n => format!("{n} bytes"),
    }
}

/// Runs `strobe record`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let overhead_ppm = parse_overhead(&args.overhead)?;
    if args.wakeup == 0 || args.buffer == 0 {
        bail!("--wakeup and --buffer must be at least 1");
    }
    let buffer = args.buffer.max(args.wakeup);

    // The events: parse, then refuse what this machine cannot count.
    let hardware = strobe_perf::pmu::hardware_pmu_available();
    let spec = match &args.event {
        Some(e) => spec::parse(e, hardware)?,
        None => spec::default_group(hardware),
    };
    spec.check_pmu(hardware)?;
    for w in spec.warnings() {
        eprintln!("strobe: warning: {w}");
    }
    let kernel = strobe_perf::pmu::kernel_counting_allowed();
    // Open the group once on ourselves: a too strict perf_event_paranoid (or a seccomp
    // policy) shows here, with the sysctl to change, before anything is launched.
    strobe_perf::EventGroup::open(
        &spec,
        strobe_perf::Target::CALLING_THREAD,
        spec.period.unwrap_or(1_000_000_000),
        0,
        kernel,
    )?;

    // The target.
    let self_exe = std::env::current_exe().context("cannot find strobe's own executable")?;
    let command: Vec<OsString> = if args.command.is_empty() {
        vec![self_exe.clone().into_os_string(), "workload".into()]
    } else {
        args.command.clone()
    };
    let program = resolve_program(&command[0])?;
    if let Some(why) = check_injectable(&program, 0)? {
        bail!(
            "cannot profile {}: {why}; strobe injects its agent with LD_PRELOAD, which needs a \
             dynamically linked executable (rebuild without -static)",
            program.display()
        );
    }
    let agent = agent_lib::agent_path()?;

    // The file: preamble and header, written before the target starts.
    let mut file = std::fs::File::create(&args.output).with_context(|| {
        format!(
            "cannot write the output file {} (choose another path with -o)",
            args.output.display()
        )
    })?;
    let mut enc = strobe_format::Encoder::new();
    enc.preamble();
    enc.header(&Header {
        minor_version: strobe_format::MINOR_VERSION,
        strobe_version: env!("CARGO_PKG_VERSION").to_string(),
        start_unix_ns: now_ns(libc::CLOCK_REALTIME),
        start_mono_ns: now_ns(libc::CLOCK_MONOTONIC),
        command: command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        events: event_descs(&spec, kernel),
        period: spec.period,
        window: spec.window,
        jitter: spec.jitter,
        wakeup: args.wakeup,
        buffer_capacity: buffer,
        overhead_ppm,
        follow_fork: args.follow_fork,
    });
    // The vDSO has no file: save its bytes so report can name the functions in it
    // (clock_gettime, gettimeofday). The target maps the same image as we do.
    if let Some(image) = own_vdso() {
        enc.image(strobe_format::RECORDER_STREAM, &image);
    }
    file.write_all(enc.as_bytes())
        .with_context(|| format!("cannot write the output file {}", args.output.display()))?;
    drop(file);
    let output_abs = std::path::absolute(&args.output).unwrap_or(args.output.clone());

    // Launch with the agent preloaded and its configuration in the environment.
    let mut preload = agent.clone().into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let agent_env = |cmd: &mut Command, output: &Path, preload: &OsStr| {
        cmd.env("LD_PRELOAD", preload)
            .env("STROBE_OUTPUT", output)
            .env("STROBE_EVENTS", spec.to_spec_string())
            .env("STROBE_OVERHEAD_PPM", overhead_ppm.to_string())
            .env("STROBE_WAKEUP", args.wakeup.to_string())
            .env("STROBE_BUFFER", buffer.to_string())
            .env("STROBE_FOLLOW_FORK", if args.follow_fork { "1" } else { "0" })
            .env("STROBE_KERNEL", if kernel { "1" } else { "0" })
            .env("STROBE_HARDWARE", if hardware { "1" } else { "0" })
            .env_remove("STROBE_AGENT_PID")
            .env_remove("STROBE_COSTS");
    };
    // The agent's start-up calibration, run in a process of its own so that the target
    // does not pay it: the target's agent takes the costs from the environment, as an
    // exec'd image does. When that process cannot measure, the target calibrates itself.
    // Only the agent is preloaded there: the user's own LD_PRELOAD libraries run in the
    // target alone, as they would without strobe.
    let costs = calibrate_apart(|c| agent_env(c, Path::new("/dev/null"), agent.as_os_str()));
    let mut cmd = Command::new(&program);
    cmd.arg0(&command[0]).args(&command[1..]);
    agent_env(&mut cmd, &output_abs, &preload);
    if let Some(costs) = &costs {
        cmd.env("STROBE_COSTS", costs);
    }
    let mut child = cmd.spawn().with_context(|| format!("cannot start {}", program.display()))?;
    // Ctrl-C reaches the target (same process group); strobe stays to write the summary.
    // SAFETY: setting SIGINT/SIGQUIT to ignored in this process only; the child was
    // already spawned with the default dispositions.
    let old = unsafe {
        (libc::signal(libc::SIGINT, libc::SIG_IGN), libc::signal(libc::SIGQUIT, libc::SIG_IGN))
    };
    let status = child.wait().context("waiting for the target")?;
    // SAFETY: restoring the dispositions saved above.
    unsafe {
        libc::signal(libc::SIGINT, old.0);
        libc::signal(libc::SIGQUIT, old.1);
    }

    summarize(&args.output, costs.is_some());
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => ExitCode::from(c as u8),
        (None, Some(sig)) => {
            eprintln!("strobe: the target was killed by signal {sig}");
            ExitCode::from((128 + sig) as u8)
        }
        _ => ExitCode::FAILURE,
    })
}

/// Prints the agent's notes and one summary line on stderr. `calibrated_apart`: the cost
/// per sample was measured before the target started, in a process of its own.
fn summarize(path: &Path, calibrated_apart: bool) {
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let rec = match strobe_format::read_all(path) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("strobe: warning: cannot read back {}: {e}", path.display());
            return;
        }
    };
    for p in &rec.processes {
        for n in &p.notes {
            let level = match n.level {
                NoteLevel::Info => "note",
                NoteLevel::Warning => "warning",
                NoteLevel::Error => "error",
            };
            eprintln!("strobe: agent {level}: {}", n.message);
        }
    }
    let started: Vec<_> = rec.processes.iter().filter_map(|p| p.info.as_ref()).collect();
    if started.is_empty() {
        eprintln!(
            "strobe: warning: the agent did not start in the target, so nothing was sampled \
             (did the program reset LD_PRELOAD, or is it setuid?)"
        );
    }
    // Counted as `strobe report` counts them: a window's end is part of its window, not
    // another sample of where time went.
    let ends = rec
        .processes
        .iter()
        .flat_map(|p| &p.samples)
        .filter(|s| s.kind == strobe_format::SampleKind::WindowEnd)
        .count();
    let samples = rec.total_samples() - ends;
    let lost = rec.total_lost();
    let threads: usize = rec.processes.iter().map(|p| p.threads.len()).sum();
    let mut line = format!(
        "strobe record: {samples} samples and {ends} window ends ({lost} lost) from {} process{}, \
         {threads} thread{}; {} written to {}",
        started.len(),
        if started.len() == 1 { "" } else { "es" },
        if threads == 1 { "" } else { "s" },
        human_bytes(size),
        path.display()
    );
    if let Some(i) = started.first() {
        let unit = |v: u64| {
            if rec.header.events.first().is_some_and(|e| e.is_time) {
                format!("{:.1} us", v as f64 / 1e3)
            } else {
                v.to_string()
            }
        };
        line.push_str(&format!(
            "; period {} ({}), window {}, {:.1} us per sample (floor {:.1} us, measured {}), \
             predicted overhead {:.2}%",
            unit(i.period),
            match i.period_source {
                PeriodSource::Budget => "from the budget",
                PeriodSource::Explicit => "explicit",
            },
            unit(i.window),
            i.sample_cost_ns as f64 / 1e3,
            i.floor_cost_ns as f64 / 1e3,
            if calibrated_apart { "before the start" } else { "in the target" },
            i.predicted_overhead_ppm as f64 / 1e4
        ));
    }
    if let Some(at) = rec.truncated_at {
        line.push_str(&format!("; the file is cut short at byte {at}"));
    }
    eprintln!("{line}");
}

/// Runs `strobe __costs` with the agent preloaded (its environment set by `env`, its
/// output sent to /dev/null): the agent calibrates its cost per sample at load and puts
/// `sample_ns,floor_ns,leader_per_ns` in the environment, which the subcommand prints.
/// `None` when that fails; the target's agent then calibrates itself.
///
/// It runs on whatever CPU the scheduler gives it, not under the target's wrapper: on a
/// machine whose cores differ (or a command like `taskset`), the figure is that of an
/// ordinary core. It is given [`CALIBRATION_DEADLINE`]; past that it is killed.
fn calibrate_apart(env: impl FnOnce(&mut Command)) -> Option<String> {
    use std::io::Read;
    let exe = std::env::current_exe().ok()?;
    let mut cmd = Command::new(exe);
    cmd.arg(COSTS_SUBCOMMAND).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    env(&mut cmd);
    let mut child = cmd.spawn().ok()?;
    let deadline = std::time::Instant::now() + CALIBRATION_DEADLINE;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    // The process has exited and started nothing, so its stdout is at end of file.
    let mut text = String::new();
    child.stdout.take()?.read_to_string(&mut text).ok()?;
    let costs = text.trim();
    let fields: Vec<&str> = costs.split(',').collect();
    let valid = status.success()
        && fields.len() == 3
        && fields[..2].iter().all(|f| f.parse::<u64>().is_ok_and(|v| v > 0))
        && fields[2].parse::<f64>().is_ok_and(|v| v > 0.0);
    valid.then(|| costs.to_string())
}

/// How long [`calibrate_apart`] waits (the calibration takes about 20 ms of CPU).
const CALIBRATION_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// The hidden subcommand [`calibrate_apart`] runs.
pub const COSTS_SUBCOMMAND: &str = "__costs";

/// `strobe __costs`: prints the costs the preloaded agent measured, or nothing.
pub fn print_costs() -> anyhow::Result<ExitCode> {
    if let Ok(c) = std::env::var("STROBE_COSTS") {
        println!("{c}");
    }
    Ok(ExitCode::SUCCESS)
}

/// This process's vDSO as `/proc/self/maps` and `/proc/self/mem` show it; `None` when
/// the kernel maps none (then its samples stay `[unknown in [vdso]]`).
fn own_vdso() -> Option<strobe_format::Image> {
    use std::os::unix::fs::FileExt;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let vdso =
        strobe_report::input::parse_proc_maps(&maps).into_iter().find(|m| m.path == "[vdso]")?;
    let mut bytes = vec![0u8; usize::try_from(vdso.end.checked_sub(vdso.start)?).ok()?];
    std::fs::File::open("/proc/self/mem").ok()?.read_exact_at(&mut bytes, vdso.start).ok()?;
    bytes.starts_with(b"\x7fELF").then(|| strobe_format::Image { name: "[vdso]".into(), bytes })
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
    fn own_executable_is_injectable_and_a_script_follows_its_interpreter() {
        let me = std::env::current_exe().unwrap();
        assert_eq!(check_injectable(&me, 0).unwrap(), None);
        let dir = std::env::temp_dir().join(format!("strobe-rec-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("s.sh");
        std::fs::write(&script, format!("#!{}\n", me.display())).unwrap();
        assert_eq!(check_injectable(&script, 0).unwrap(), None);
        std::fs::write(&script, b"plain text").unwrap();
        assert!(check_injectable(&script, 0).unwrap().is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
