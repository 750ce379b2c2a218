//! What to type: the libraries' errors say what went wrong and what to change in words
//! (a library knows no command line); this module adds the flag that changes it, for the
//! typed errors whose remedy is one of strobe's options.
//!
//! Owns: the mapping from a library error to the flag that answers it. Must never
//! rephrase a library's message, only add to it.

use strobe_otlp::transport::PRIVATE_CA_HINT;
use strobe_otlp::OtlpError;
use strobe_record::RecordError;
use strobe_watch::session::SessionError;
use strobe_watch::MuxError;

/// The flag that answers `err`, as a clause to append to its message, if strobe has one.
pub(crate) fn flags_for(err: &anyhow::Error) -> Option<&'static str> {
    err.chain().find_map(|e| {
        if let Some(o) = e.downcast_ref::<OtlpError>() {
            return match o {
                OtlpError::Ca { .. } | OtlpError::NoCaBundle => {
                    Some("with --ca-file or OTEL_EXPORTER_OTLP_CERTIFICATE")
                }
                OtlpError::Send(m) if m.contains(PRIVATE_CA_HINT) => Some(CA_FLAG),
                _ => None,
            };
        }
        let mux = |m: &MuxError| matches!(m, MuxError::TooMany { .. });
        if let Some(SessionError::Mux(m)) = e.downcast_ref::<SessionError>() {
            return mux(m).then_some("multiplexing is what --no-multiplex turns off");
        }
        if e.downcast_ref::<MuxError>().is_some_and(mux) {
            return Some("multiplexing is what --no-multiplex turns off");
        }
        if let Some(r) = e.downcast_ref::<RecordError>() {
            return r
                .is_off_cpu_refused()
                .then_some("off-CPU recording is what --off-cpu asked for");
        }
        None
    })
}

/// What the CA clause of a send failure's remedy adds.
const CA_FLAG: &str = "or with --ca-file";

/// An exporter's last send failure, with the flag that answers it where one does.
pub(crate) fn send_failure(why: &str) -> String {
    if why.contains(PRIVATE_CA_HINT) {
        format!("{why} ({CA_FLAG})")
    } else {
        why.to_string()
    }
}
