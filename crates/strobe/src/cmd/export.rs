//! `strobe report FILE --otlp OUT` and `--export [URL]`: a recording as OpenTelemetry
//! profiles, written to a file or sent to a collector; and the continuous mode of
//! `strobe record --every`. The work is in crate strobe-otlp; this module turns the
//! arguments into its options and says in a line or two what happened.
//!
//! Must never build a profile or open a connection itself.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use strobe_otlp::continuous::{Continuous, ContinuousConfig};
use strobe_otlp::resource::ResourceConfig;
use strobe_otlp::{CliExport, ExportConfig, Exporter, FileOptions, Payload};
use strobe_report::recording::ReadOptions;

/// The OTLP options of `strobe report`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct OtlpArgs {
    /// Write the recording as an OTLP profiles request (ExportProfilesServiceRequest,
    /// protobuf; gzipped when FILE ends in .gz) to FILE.
    #[arg(long, value_name = "FILE", help_heading = "OpenTelemetry")]
    pub otlp: Option<PathBuf>,
    /// Send the recording to an OpenTelemetry Collector over OTLP/HTTP (protobuf, gzip)
    /// at URL, a base such as http://collector:4318 (/v1development/profiles is
    /// appended). Without URL: OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT, else
    /// OTEL_EXPORTER_OTLP_ENDPOINT, else http://localhost:4318. OTEL_EXPORTER_OTLP_HEADERS,
    /// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are honoured (docs/fleet.md).
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = "", help_heading = "OpenTelemetry")]
    pub export: Option<String>,
    /// Trust the CA certificates in FILE (PEM) for an https endpoint, instead of the
    /// system's (also OTEL_EXPORTER_OTLP_CERTIFICATE).
    #[arg(long, value_name = "FILE", requires = "export", help_heading = "OpenTelemetry")]
    pub ca_file: Option<PathBuf>,
    /// Keep profiles that could not be sent in DIR; they are sent first by the next
    /// export that names DIR.
    #[arg(long, value_name = "DIR", requires = "export", help_heading = "OpenTelemetry")]
    pub spool: Option<PathBuf>,
}

impl OtlpArgs {
    /// True when an OTLP output was asked for.
    pub(crate) fn any(&self) -> bool {
        self.otlp.is_some() || self.export.is_some()
    }
}

fn processes(n: usize) -> String {
    if n == 1 {
        "1 process".into()
    } else {
        format!("{n} processes")
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The exporter settings `args` and the environment give.
pub(crate) fn config(args: &OtlpArgs) -> anyhow::Result<ExportConfig> {
    let cli = CliExport {
        url: args.export.clone(),
        ca_file: args.ca_file.clone(),
        spool: args.spool.clone(),
    };
    Ok(ExportConfig::resolve(&cli, env)?)
}

/// Starts a continuous recording's sender (its settings checked now).
pub(crate) fn continuous(
    every: Duration,
    export: ExportConfig,
    output: Option<PathBuf>,
    rotate_bytes: u64,
) -> anyhow::Result<Continuous> {
    let flush_wait = export.retry.max_elapsed + export.timeout + Duration::from_secs(2);
    one_malloc_arena();
    Ok(Continuous::start(ContinuousConfig {
        every,
        export,
        output,
        rotate_bytes,
        resource: ResourceConfig::from_env(env),
        // Function names and build ids, no source lines: reading DWARF every interval
        // would cost more than everything else the interval does.
        read: ReadOptions {
            symbols: strobe_report::SymbolOptions { names_only: true, ..Default::default() },
            ..ReadOptions::default()
        },
        live_containers: true,
        flush_wait,
    })?)
}

/// A continuous recorder runs for days: its threads (the recorder's, the interval
/// thread's, the sender's) share one glibc malloc arena, before any of them starts. With an
/// arena per thread, what one thread freed between intervals could not serve another's
/// allocations, and the memory the arenas held grew with fragmentation though little was
/// in use: under the export benchmark's load (600 processes a minute), anonymous RSS went
/// from 24.5 to 27.3 MB between 60 s and 190 s (heap in use, by heaptrack, 18.7 to 19.0
/// MB), and from 20.8 to 21.6 MB with one arena. Each interval's `malloc_trim` returns the
/// free pages either way.
fn one_malloc_arena() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt sets an allocator parameter; M_ARENA_MAX only limits the arenas
    // made from now on.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// The line that says where a continuous recording goes.
pub(crate) fn continuous_line(c: &Continuous, every: Duration, output: Option<&Path>) -> String {
    format!(
        "one profile every {} to {}{}",
        human_duration(every),
        c.url(),
        output.map_or(String::new(), |o| format!(", a copy in {} (rotated)", o.display()))
    )
}

fn human_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{} ms", d.as_millis())
    } else if s.fract() == 0.0 {
        format!("{s} s")
    } else {
        format!("{s:.1} s")
    }
}

/// Ends a continuous recording: the last interval sent, then what was sent and what was
/// not, said in a line (and the warnings).
pub(crate) fn finish_continuous(c: Continuous) -> anyhow::Result<()> {
    let url = c.url().to_string();
    let s = c.finish()?;
    for w in &s.warnings {
        eprintln!("strobe: warning: {w}");
    }
    let e = &s.export;
    let mut line = format!(
        "strobe record: {} interval{} ({} with samples), {} profiles sent to {url}",
        s.intervals,
        if s.intervals == 1 { "" } else { "s" },
        s.requests,
        e.sent + e.sent_from_spool
    );
    if e.sent_from_spool > 0 {
        line.push_str(&format!(" ({} kept from earlier)", e.sent_from_spool));
    }
    line.push_str(&format!(" from {} process reports", s.process_reports));
    if s.late > 0 {
        line.push_str(&format!(
            "; {} samples came after their interval was sent and went in the next",
            s.late
        ));
    }
    if let Some((path, rotations)) = &s.copy {
        if *rotations > 0 {
            line.push_str(&format!(
                "; {} rotated {rotations} time{} (the last one before is {}.1)",
                path.display(),
                if *rotations == 1 { "" } else { "s" },
                path.display()
            ));
        }
    }
    eprintln!("{line}");
    let lost = e.not_sent + e.rejected;
    if lost > 0 || e.spooled > 0 {
        let why = e
            .last_error
            .as_deref()
            .map_or_else(|| "no reason given".to_string(), crate::advice::send_failure);
        eprintln!(
            "strobe: warning: {} of {} profiles could not be sent to {url}: {why}{}",
            lost + e.spooled,
            e.submitted,
            if e.spooled > 0 {
                format!(" ({} kept in the spool, sent by the next export that names it)", e.spooled)
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

/// Writes or sends `file` as OTLP profiles.
pub(crate) fn run(
    file: &Path,
    read: &ReadOptions,
    args: &OtlpArgs,
    quiet: bool,
) -> anyhow::Result<()> {
    // Settings first: a wrong endpoint or CA file is reported before the file is read.
    let exporter = match &args.export {
        Some(url) => {
            let cli = CliExport {
                url: Some(url.clone()),
                ca_file: args.ca_file.clone(),
                spool: args.spool.clone(),
            };
            Some((ExportConfig::resolve(&cli, env)?, cli))
        }
        None => None,
    };
    let mut magic = [0u8; 8];
    let perf = std::fs::File::open(file)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok()
        && strobe_perfdata::is_perf_data(&magic);
    if perf {
        anyhow::bail!(
            "--otlp and --export take strobe recordings, and {} is a perf.data file: record the program with strobe record",
            file.display()
        );
    }
    let opts = FileOptions {
        read: read.clone(),
        resource: ResourceConfig::from_env(env),
        live_containers: true,
    };
    let built = strobe_otlp::from_file(file, &opts)?;
    if !quiet {
        let mut err = std::io::stderr().lock();
        for n in &built.notes {
            writeln!(err, "strobe: {n}")?;
        }
    }
    if let Some(out) = &args.otlp {
        let gz = out.extension().is_some_and(|e| e == "gz");
        let p = Payload::encode(&built.request, gz);
        std::fs::write(out, &p.body)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", out.display()))?;
        if !quiet {
            eprintln!(
                "strobe: wrote {} ({} profiles of {}, {} bytes)",
                out.display(),
                p.profiles,
                processes(built.request.resource_profiles.len()),
                p.body.len()
            );
        }
    }
    let Some((cfg, _)) = exporter else { return Ok(()) };
    let wait = cfg.retry.max_elapsed + cfg.timeout + Duration::from_secs(2);
    let exporter = Exporter::start(cfg)?;
    let url = exporter.url().to_string();
    let payload = exporter.encode(&built.request);
    let total = payload.profiles;
    exporter.submit(payload);
    let stats = exporter.finish(wait);
    let why = stats
        .last_error
        .as_deref()
        .map_or_else(|| "no reason given".to_string(), crate::advice::send_failure);
    let lost = stats.not_sent + stats.rejected;
    if lost > 0 {
        anyhow::bail!(
            "{lost} of {total} profiles could not be sent to {url}: {why}{}",
            if stats.spooled > 0 {
                format!(" ({} kept in the spool)", stats.spooled)
            } else {
                String::new()
            }
        );
    }
    if stats.spooled > 0 {
        if !quiet {
            eprintln!(
                "strobe: warning: {} of {total} profiles not sent to {url} ({why}); kept in {}, sent by the next export that names it",
                stats.spooled,
                args.spool.as_deref().map_or_else(|| "the spool".into(), |d| d.display().to_string())
            );
        }
        return Ok(());
    }
    if !quiet {
        let replayed = if stats.sent_from_spool > 0 {
            format!(", and {} kept from earlier", stats.sent_from_spool)
        } else {
            String::new()
        };
        eprintln!(
            "strobe: sent {} profiles of {} to {url}{replayed}",
            stats.sent,
            processes(built.request.resource_profiles.len())
        );
    }
    Ok(())
}
