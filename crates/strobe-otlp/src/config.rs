//! Where and how profiles are sent: the OTLP exporter settings, from the command line
//! and the standard environment variables.
//!
//! | setting | command line | environment (first set wins) | default |
//! |---|---|---|---|
//! | endpoint | `--export URL` (a base URL: `/v1development/profiles` is appended unless the path already ends with it) | `OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT` (used as is), `OTEL_EXPORTER_OTLP_ENDPOINT` (base) | `http://localhost:4318/v1development/profiles` |
//! | headers | | `OTEL_EXPORTER_OTLP_HEADERS`, then `OTEL_EXPORTER_OTLP_PROFILES_HEADERS` (same key: the latter wins) | none |
//! | CA certificates | `--ca-file FILE` | `OTEL_EXPORTER_OTLP_PROFILES_CERTIFICATE`, `OTEL_EXPORTER_OTLP_CERTIFICATE` | the system's bundle (`SSL_CERT_FILE`, else Debian's or Red Hat's path) |
//! | timeout per request | | `OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT`, `OTEL_EXPORTER_OTLP_TIMEOUT` (ms) | 10 s |
//! | compression | | `OTEL_EXPORTER_OTLP_PROFILES_COMPRESSION`, `OTEL_EXPORTER_OTLP_COMPRESSION` (`gzip`, `none`) | gzip |
//! | protocol | | `OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL`, `OTEL_EXPORTER_OTLP_PROTOCOL` | `http/protobuf`, the only one strobe speaks |
//!
//! The profiles variables follow the specification's per-signal pattern (its table names
//! traces, metrics and logs; the profiles signal is still in development).
//!
//! Owns: resolving settings. Must never open a connection.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::OtlpError;

/// The OTLP/HTTP path of the profiles signal, as the collector's receiver serves it.
pub const PROFILES_PATH: &str = "/v1development/profiles";
/// The default endpoint (a collector on this machine).
pub const DEFAULT_ENDPOINT: &str = "http://localhost:4318";

/// How the exporter retries a request that failed for a reason that may pass.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// The first wait.
    pub initial: Duration,
    /// The longest wait (the waits double up to it, with jitter).
    pub max_interval: Duration,
    /// Give up on a profile after this long.
    pub max_elapsed: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial: Duration::from_millis(500),
            max_interval: Duration::from_secs(5),
            max_elapsed: Duration::from_secs(10),
        }
    }
}

/// Everything the exporter needs.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportConfig {
    /// The URL profiles are POSTed to.
    pub url: String,
    /// Extra request headers (authentication, tenants).
    pub headers: Vec<(String, String)>,
    /// A PEM file of CA certificates to trust for https (None: the system's bundle).
    pub ca_file: Option<PathBuf>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Gzip the request body.
    pub gzip: bool,
    /// Retries.
    pub retry: RetryPolicy,
    /// Profiles waiting to be sent, at most; a profile submitted to a full queue is
    /// spooled or dropped (and counted), never waited for.
    pub queue: usize,
    /// Where profiles that could not be sent are kept (and sent from first at start).
    pub spool: Option<PathBuf>,
}

/// The settings from the command line.
#[derive(Debug, Clone, Default)]
pub struct CliExport {
    /// `--export URL` (None or empty: from the environment).
    pub url: Option<String>,
    /// `--ca-file FILE`.
    pub ca_file: Option<PathBuf>,
    /// `--spool DIR`.
    pub spool: Option<PathBuf>,
}

fn first(var: &impl Fn(&str) -> Option<String>, names: &[&str]) -> Option<String> {
    names.iter().find_map(|n| var(n).filter(|v| !v.trim().is_empty()))
}

/// Appends the profiles path to a base endpoint (unless it ends with it already).
pub fn signal_url(base: &str) -> String {
    let base = base.trim();
    if base.trim_end_matches('/').ends_with(PROFILES_PATH) {
        return base.to_string();
    }
    format!("{}{PROFILES_PATH}", base.trim_end_matches('/'))
}

fn check_url(url: &str, from: &str) -> Result<(), OtlpError> {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with('/') => Ok(()),
        _ => Err(OtlpError::Config(format!(
            "{from} '{url}' is not an http:// or https:// URL with a host (e.g. http://collector:4318)"
        ))),
    }
}

/// Parses an OTLP headers variable: `key=value,key=value`, values percent-decoded.
pub fn parse_headers(s: &str, from: &str) -> Result<Vec<(String, String)>, OtlpError> {
    let mut out = Vec::new();
    for pair in s.split(',').filter(|p| !p.trim().is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            return Err(OtlpError::Config(format!(
                "{from}: '{pair}' is not key=value (the form is key1=value1,key2=value2)"
            )));
        };
        let k = k.trim();
        if k.is_empty() || !k.bytes().all(|c| c.is_ascii_graphic() && c != b':') {
            return Err(OtlpError::Config(format!("{from}: '{k}' is not an HTTP header name")));
        }
        let pairs = crate::resource::parse_attributes(&format!("{k}={}", v.trim()));
        out.extend(pairs);
    }
    Ok(out)
}

impl ExportConfig {
    /// Resolves the settings from `cli` and the environment (through `var`).
    pub fn resolve(
        cli: &CliExport,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<ExportConfig, OtlpError> {
        let url = match cli.url.as_deref().filter(|u| !u.trim().is_empty()) {
            Some(u) => {
                check_url(u.trim(), "the export URL")?;
                signal_url(u)
            }
            None => match first(&var, &["OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT"]) {
                Some(u) => {
                    check_url(u.trim(), "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT")?;
                    u.trim().to_string()
                }
                None => {
                    let base = first(&var, &["OTEL_EXPORTER_OTLP_ENDPOINT"])
                        .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
                    check_url(base.trim(), "OTEL_EXPORTER_OTLP_ENDPOINT")?;
                    signal_url(&base)
                }
            },
        };
        let mut headers = Vec::new();
        for name in ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_PROFILES_HEADERS"] {
            if let Some(v) = var(name) {
                for (k, v) in parse_headers(&v, name)? {
                    headers.retain(|(old, _): &(String, String)| !old.eq_ignore_ascii_case(&k));
                    headers.push((k, v));
                }
            }
        }
        let ca_file = cli.ca_file.clone().or_else(|| {
            first(
                &var,
                &["OTEL_EXPORTER_OTLP_PROFILES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE"],
            )
            .map(PathBuf::from)
        });
        let timeout = match first(
            &var,
            &["OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"],
        ) {
            Some(t) => Duration::from_millis(t.trim().parse::<u64>().map_err(|_| {
                OtlpError::Config(format!(
                    "OTEL_EXPORTER_OTLP_TIMEOUT '{t}' is not a whole number of milliseconds"
                ))
            })?),
            None => Duration::from_secs(10),
        };
        let gzip = match first(
            &var,
            &["OTEL_EXPORTER_OTLP_PROFILES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION"],
        )
        .as_deref()
        .map(str::trim)
        {
            None | Some("gzip") => true,
            Some("none") => false,
            Some(other) => {
                return Err(OtlpError::Config(format!(
                    "OTEL_EXPORTER_OTLP_COMPRESSION '{other}': strobe sends gzip or none"
                )))
            }
        };
        if let Some(p) =
            first(&var, &["OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"])
        {
            if p.trim() != "http/protobuf" {
                return Err(OtlpError::Config(format!(
                    "OTEL_EXPORTER_OTLP_PROTOCOL is '{}': strobe sends http/protobuf (OTLP/HTTP, port 4318 by default); unset it or set it to http/protobuf",
                    p.trim()
                )));
            }
        }
        Ok(ExportConfig {
            url,
            headers,
            ca_file,
            timeout,
            gzip,
            retry: RetryPolicy::default(),
            queue: 16,
            spool: cli.spool.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn endpoints_resolve_in_the_specified_order() {
        let cli = CliExport::default();
        assert_eq!(
            ExportConfig::resolve(&cli, env(&[])).unwrap().url,
            "http://localhost:4318/v1development/profiles"
        );
        let e = [("OTEL_EXPORTER_OTLP_ENDPOINT", "https://gw.example:443/otlp/")];
        assert_eq!(
            ExportConfig::resolve(&cli, env(&e)).unwrap().url,
            "https://gw.example:443/otlp/v1development/profiles"
        );
        let e = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
            ("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", "http://b:9999/custom"),
        ];
        assert_eq!(ExportConfig::resolve(&cli, env(&e)).unwrap().url, "http://b:9999/custom");
        let cli = CliExport { url: Some("http://c:4318/v1development/profiles".into()), ..cli };
        assert_eq!(
            ExportConfig::resolve(&cli, env(&e)).unwrap().url,
            "http://c:4318/v1development/profiles"
        );
        let bad = CliExport { url: Some("collector:4318".into()), ..CliExport::default() };
        let err = ExportConfig::resolve(&bad, env(&[])).unwrap_err().to_string();
        assert!(err.contains("not an http:// or https:// URL"), "{err}");
    }

    #[test]
    fn headers_merge_and_decode() {
        let e = [
            ("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Basic%20abc, X-Scope-OrgID=a"),
            ("OTEL_EXPORTER_OTLP_PROFILES_HEADERS", "x-scope-orgid=b"),
        ];
        let c = ExportConfig::resolve(&CliExport::default(), env(&e)).unwrap();
        assert_eq!(
            c.headers,
            [
                ("Authorization".to_string(), "Basic abc".to_string()),
                ("x-scope-orgid".into(), "b".into())
            ]
        );
        let e = [("OTEL_EXPORTER_OTLP_HEADERS", "novalue")];
        assert!(ExportConfig::resolve(&CliExport::default(), env(&e)).is_err());
    }

    #[test]
    fn protocol_timeout_and_compression() {
        let e = [("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")];
        let err = ExportConfig::resolve(&CliExport::default(), env(&e)).unwrap_err().to_string();
        assert!(err.contains("http/protobuf"), "{err}");
        let e =
            [("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"), ("OTEL_EXPORTER_OTLP_COMPRESSION", "none")];
        let c = ExportConfig::resolve(&CliExport::default(), env(&e)).unwrap();
        assert_eq!((c.timeout, c.gzip), (Duration::from_millis(2500), false));
        let e = [("OTEL_EXPORTER_OTLP_CERTIFICATE", "/etc/ca.pem")];
        let c = ExportConfig::resolve(&CliExport::default(), env(&e)).unwrap();
        assert_eq!(c.ca_file, Some(PathBuf::from("/etc/ca.pem")));
    }
}
