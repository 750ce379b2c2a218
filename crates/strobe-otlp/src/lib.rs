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
//!
//! `strobe record` (continuous mode) builds a request per interval with [`profile::build`]
//! and hands it to [`export::Exporter::submit`], which never blocks.
//!
//! This crate must never touch perf or the target, and never block its caller on the
//! network.

pub mod config;
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
