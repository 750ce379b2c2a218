//! strobe-otlp: strobe's recordings as OpenTelemetry profiles, and the exporter that sends
//! them to an OpenTelemetry Collector (or any OTLP/HTTP profiles endpoint).
//!
//! - [`proto`]: the OTLP profiles messages (opentelemetry-proto v1.11.0,
//!   `profiles.v1development`, the version the Collector v0.161.0 speaks), hand-written
//!   over prost's encoders.
//! - [`profile`]: strobe-report reports to one `ExportProfilesServiceRequest`: a resource
//!   per process, a shared dictionary, a profile per sample type (CPU time; every window
//!   counter's net count and the windows' net time; off-CPU time).
//! - [`resource`]: the resource attributes (`service.name`, `host.name`, `process.*`,
//!   `container.id`) and `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES`.
//! - [`recording`]: a record file to a request, one report per process.
//! - [`config`]: the exporter's settings from the command line and the standard
//!   `OTEL_EXPORTER_OTLP_*` variables.
//! - [`export`]: the exporter thread: bounded queue, retries with backoff, a spool
//!   directory, counts of what could not be sent.
//! - [`continuous`]: `strobe record --every`: the record file followed as it grows, cut
//!   into one request per interval, its bytes freed behind the reader, a rotated local
//!   copy.
//!
//! How one request is built and sent (what [`continuous`] does for each interval):
//!
//! ```no_run
//! # fn interval_reports() -> Vec<(strobe_otlp::resource::ProcessFacts, strobe_report::Report)> { Vec::new() }
//! use strobe_otlp::profile::{build, ProcessProfile};
//! use strobe_otlp::resource::ResourceConfig;
//! use strobe_otlp::{CliExport, ExportConfig, Exporter};
//!
//! let env = |k: &str| std::env::var(k).ok();
//! // At the start of the session: settings errors are reported before recording begins.
//! let cli = CliExport { url: Some("http://127.0.0.1:4318".into()), ..Default::default() };
//! let exporter = Exporter::start(ExportConfig::resolve(&cli, env)?)?;
//! let resource = ResourceConfig::from_env(env);
//! // Each interval: one report per process (an Aggregator fed the interval's samples,
//! // with `keep_timeline` for the thread names), then one request, handed over without
//! // waiting.
//! let reports = interval_reports();
//! let (start_unix_ns, duration_ns) = (0, 10_000_000_000);
//! let parts: Vec<ProcessProfile<'_>> = reports
//!     .iter()
//!     .map(|(p, r)| ProcessProfile::new(r, &resource, p, start_unix_ns, duration_ns))
//!     .collect();
//! exporter.submit(exporter.encode(&build(&parts, env!("CARGO_PKG_VERSION"))));
//! // At exit: a deadline for what is still queued, then the counts to print.
//! let stats = exporter.finish(std::time::Duration::from_secs(5));
//! eprintln!("{} profiles sent, {} not sent", stats.sent, stats.not_sent);
//! # Ok::<(), strobe_otlp::OtlpError>(())
//! ```
//!
//! A profile in flight when the deadline passes is given up only when its request ends
//! (at most the request timeout later).
//!
//! This crate must never touch perf or the target, and never block its caller on the
//! network.

pub mod config;
pub mod continuous;
mod error;
pub mod export;
pub mod profile;
pub mod proto;
pub mod recording;
pub mod resource;
pub mod transport;

pub use config::{CliExport, ExportConfig, RetryPolicy};
pub use error::OtlpError;
pub use export::{ExportStats, Exporter, Payload, Submitted};
pub use recording::{from_file, Built, FileOptions};
