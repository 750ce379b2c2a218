//! One OTLP/HTTP request: POST a protobuf body (gzipped) and classify the answer as
//! sent, worth retrying, or failed for good, with one line saying why.
//!
//! ureq (HTTP/1.1 on a blocking socket) with rustls and the ring provider; the trusted
//! roots are a CA file, by default the system's bundle, so a private CA and the
//! machine's own trust store both work. Retryable, as the OTLP/HTTP specification says:
//! 429, 502, 503 and 504 (honouring `Retry-After` in seconds), and failures to connect or
//! to get an answer in time. Any other status is final, with the collector's own message
//! (the `google.rpc.Status` body, or its text).
//!
//! Owns: the wire exchange. Must never retry or sleep itself (the exporter does).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig, TlsProvider};

use crate::config::ExportConfig;
use crate::error::OtlpError;
use crate::proto::{ExportProfilesServiceResponse, Status};

/// What a failed TLS handshake's message ends with: the remedy, which a caller with its
/// own name for the CA-file setting (a command-line flag) can add to.
pub const PRIVATE_CA_HINT: &str = "if the collector's certificate comes from a private CA, give \
     that CA's PEM file (OTEL_EXPORTER_OTLP_CERTIFICATE)";

/// What became of one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Accepted; `rejected` profiles of it were not (partial success), for `why`.
    Sent {
        /// Profiles the server rejected.
        rejected: u64,
        /// Its reason, when it gave one.
        why: String,
    },
    /// Failed for a reason that may pass: try again (after `after` when the server said).
    Retry {
        /// The server's `Retry-After`.
        after: Option<Duration>,
        /// Why, one line.
        why: String,
    },
    /// Failed for good.
    Fail(String),
}

/// The system CA bundles tried when no CA file is given (after `SSL_CERT_FILE`).
const SYSTEM_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// Reads the CA certificates of a PEM file.
fn load_ca(path: &Path) -> Result<Vec<Certificate<'static>>, OtlpError> {
    let pem = std::fs::read(path)
        .map_err(|e| OtlpError::Ca { path: path.to_path_buf(), why: e.to_string() })?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => return Err(OtlpError::Ca { path: path.to_path_buf(), why: e.to_string() }),
        }
    }
    if certs.is_empty() {
        return Err(OtlpError::Ca {
            path: path.to_path_buf(),
            why: "it holds no certificate".into(),
        });
    }
    Ok(certs)
}

/// An HTTP client for one endpoint.
#[derive(Debug)]
pub struct Transport {
    agent: ureq::Agent,
    url: String,
    headers: Vec<(String, String)>,
}

impl Transport {
    /// A client for `cfg`'s endpoint; loads the CA certificates for an https URL.
    pub fn new(cfg: &ExportConfig) -> Result<Transport, OtlpError> {
        let mut tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()));
        if cfg.url.starts_with("https://") {
            let file = match &cfg.ca_file {
                Some(f) => f.clone(),
                None => std::env::var_os("SSL_CERT_FILE")
                    .map(PathBuf::from)
                    .or_else(|| SYSTEM_BUNDLES.iter().map(PathBuf::from).find(|p| p.exists()))
                    .ok_or(OtlpError::NoCaBundle)?,
            };
            tls = tls.root_certs(RootCerts::Specific(Arc::new(load_ca(&file)?)));
        }
        let agent = ureq::Agent::config_builder()
            .tls_config(tls.build())
            .http_status_as_error(false)
            .timeout_global(Some(cfg.timeout))
            .max_redirects(0)
            .user_agent(concat!("strobe/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        Ok(Transport { agent, url: cfg.url.clone(), headers: cfg.headers.clone() })
    }

    /// The endpoint.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// POSTs `body` (gzipped when `gzip`).
    pub fn send(&self, body: &[u8], gzip: bool) -> Outcome {
        let mut req = self.agent.post(&self.url).header("Content-Type", "application/x-protobuf");
        if gzip {
            req = req.header("Content-Encoding", "gzip");
        }
        for (k, v) in &self.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let resp = match req.send(body) {
            Ok(r) => r,
            Err(e) => return self.classify(e),
        };
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let is_proto = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("protobuf"));
        let bytes = resp.into_body().with_config().limit(1 << 20).read_to_vec().unwrap_or_default();
        if (200..300).contains(&status) {
            let partial = if is_proto {
                ExportProfilesServiceResponse::decode(bytes.as_slice())
                    .ok()
                    .and_then(|r| r.partial_success)
            } else {
                None
            };
            return match partial {
                Some(p) if p.rejected_profiles > 0 || !p.error_message.is_empty() => {
                    Outcome::Sent {
                        rejected: p.rejected_profiles.max(0) as u64,
                        why: p.error_message,
                    }
                }
                _ => Outcome::Sent { rejected: 0, why: String::new() },
            };
        }
        let message = server_message(&bytes, is_proto);
        let why = format!("{} answered HTTP {status}{message}", self.url);
        if matches!(status, 429 | 502 | 503 | 504) {
            Outcome::Retry { after: retry_after, why }
        } else {
            Outcome::Fail(why)
        }
    }

    fn classify(&self, e: ureq::Error) -> Outcome {
        let url = &self.url;
        let tls_fail = |e: &dyn std::fmt::Display| {
            Outcome::Fail(format!("TLS with {url} failed: {e}; {PRIVATE_CA_HINT}"))
        };
        match e {
            // rustls reports a failed handshake through the socket's I/O error.
            ureq::Error::Io(io) if io.get_ref().is_some_and(|e| e.is::<rustls::Error>()) => {
                tls_fail(&io)
            }
            ureq::Error::Io(io) => match io.kind() {
                std::io::ErrorKind::ConnectionRefused => Outcome::Retry {
                    after: None,
                    why: format!("the collector at {url} refused the connection: is it running, and listening on that port?"),
                },
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => Outcome::Retry {
                    after: None,
                    why: format!("the collector at {url} did not answer in time"),
                },
                _ => Outcome::Retry { after: None, why: format!("cannot reach {url}: {io}") },
            },
            ureq::Error::Timeout(t) => Outcome::Retry {
                after: None,
                why: format!("the collector at {url} did not answer in time ({t})"),
            },
            ureq::Error::HostNotFound => Outcome::Retry {
                after: None,
                why: format!("the host of {url} cannot be resolved: check the endpoint's name"),
            },
            ureq::Error::ConnectionFailed => Outcome::Retry {
                after: None,
                why: format!("cannot connect to the collector at {url}"),
            },
            ureq::Error::Rustls(e) => tls_fail(&e),
            ureq::Error::Tls(e) => Outcome::Fail(format!("TLS with {url} failed: {e}")),
            other => Outcome::Fail(format!("sending to {url} failed: {other}")),
        }
    }
}

/// ": the message" from an error body (a `google.rpc.Status`, or text), or "".
fn server_message(body: &[u8], is_proto: bool) -> String {
    let msg = if is_proto {
        Status::decode(body).map(|s| s.message).unwrap_or_default()
    } else {
        String::from_utf8_lossy(body).into_owned()
    };
    let msg = msg.split_whitespace().collect::<Vec<_>>().join(" ");
    let msg: String = msg.chars().take(300).collect();
    if msg.is_empty() {
        String::new()
    } else {
        format!(": {msg}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_become_one_line() {
        let s = Status { code: 3, message: "unknown field\nin profile".into() };
        assert_eq!(server_message(&s.encode_to_vec(), true), ": unknown field in profile");
        assert_eq!(server_message(b"", false), "");
        assert_eq!(server_message(b"404 page not found\n", false), ": 404 page not found");
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused_clearly() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("ca.pem");
        std::fs::write(&f, "not a certificate").unwrap();
        let err = load_ca(&f).unwrap_err().to_string();
        assert!(err.contains("holds no certificate") && err.contains("PEM file"), "{err}");
        let err = load_ca(&dir.path().join("missing.pem")).unwrap_err().to_string();
        assert!(err.contains("missing.pem"), "{err}");
    }
}
