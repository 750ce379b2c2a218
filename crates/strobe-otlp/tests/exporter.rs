//! The exporter against real sockets on 127.0.0.1: a collector that never answers (the
//! caller must not wait), one that asks to retry later, one that accepts part of a
//! request, one that refuses it for good. The servers are small HTTP/1.1 responders in
//! the test; the real collector is exercised by the strobe binary's `fleet` tests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;
use strobe_otlp::proto::{ExportProfilesPartialSuccess, ExportProfilesServiceResponse};
use strobe_otlp::{ExportConfig, Exporter, Payload, RetryPolicy, Submitted};

fn cfg(port: u16) -> ExportConfig {
    ExportConfig {
        url: format!("http://127.0.0.1:{port}/v1development/profiles"),
        headers: vec![("X-Scope-OrgID".into(), "t1".into())],
        ca_file: None,
        timeout: Duration::from_secs(5),
        gzip: true,
        retry: RetryPolicy {
            initial: Duration::from_millis(50),
            max_interval: Duration::from_millis(200),
            max_elapsed: Duration::from_secs(10),
        },
        queue: 2,
        spool: None,
    }
}

fn payload(profiles: u64) -> Payload {
    Payload { body: strobe_otlp::export::gzip_bytes(b"not looked at"), gzip: true, profiles }
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    headers: String,
    body_len: usize,
}

/// Serves HTTP/1.1 on 127.0.0.1, answering the n-th request with `answers[n]` (the last
/// one for any later request), and records what it saw.
fn server(answers: Vec<Vec<u8>>) -> (u16, Arc<Mutex<Vec<Seen>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for conn in l.incoming() {
            let Ok(conn) = conn else { return };
            let mut w = conn.try_clone().unwrap();
            let mut r = BufReader::new(conn);
            loop {
                let mut headers = String::new();
                loop {
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    if line == "\r\n" {
                        break;
                    }
                    headers.push_str(&line);
                }
                if headers.is_empty() {
                    break;
                }
                let len = headers
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap();
                let n = {
                    let mut s = log.lock().unwrap();
                    s.push(Seen { at: Instant::now(), headers, body_len: len });
                    s.len() - 1
                };
                let a = &answers[n.min(answers.len() - 1)];
                if w.write_all(a).is_err() {
                    break;
                }
            }
        }
    });
    (port, seen)
}

fn answer(status: &str, extra: &str, body: &[u8]) -> Vec<u8> {
    let mut v = format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    v.extend_from_slice(body);
    v
}

#[test]
fn a_collector_that_never_answers_never_blocks_the_caller() {
    // Accepts connections and never reads or answers.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let held = Arc::new(Mutex::new(Vec::<TcpStream>::new()));
    let h = Arc::clone(&held);
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            h.lock().unwrap().push(c);
        }
    });
    let e = Exporter::start(cfg(port)).unwrap();
    let start = Instant::now();
    let mut outcomes = Vec::new();
    for _ in 0..20 {
        outcomes.push(e.submit(payload(3)));
    }
    // Twenty submissions while the only request in flight waits for an answer that never
    // comes (its timeout is 5 s): had any waited on the network, this would take seconds.
    assert!(start.elapsed() < Duration::from_secs(2), "{:?}", start.elapsed());
    let queued = outcomes.iter().filter(|o| **o == Submitted::Queued).count();
    let dropped = outcomes.iter().filter(|o| **o == Submitted::Dropped).count();
    // The queue holds 2, the thread has at most 1 in hand.
    assert!((2..=3).contains(&queued), "{outcomes:?}");
    assert_eq!(queued + dropped, 20);
    let s = e.finish(Duration::from_millis(200));
    assert_eq!(s.submitted, 60);
    assert_eq!(s.sent, 0);
    assert_eq!(s.not_sent, 60, "{s:?}");
    assert!(s.last_error.is_some(), "{s:?}");
}

#[test]
fn a_full_queue_spools_and_the_spool_is_sent_when_the_collector_answers() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l); // nothing listens: every request is refused
    let dir = tempfile::tempdir().unwrap();
    let mut c = cfg(port);
    c.spool = Some(dir.path().to_path_buf());
    c.retry.max_elapsed = Duration::from_millis(300);
    let e = Exporter::start(c.clone()).unwrap();
    for _ in 0..6 {
        e.submit(payload(2));
    }
    let s = e.finish(Duration::from_secs(3));
    assert_eq!((s.submitted, s.sent, s.not_sent, s.spooled), (12, 0, 0, 12), "{s:?}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 6);

    // A collector on another port; the spool goes there on the next run.
    let ok = answer("200 OK", "", &[]);
    let (port2, seen) = server(vec![ok]);
    let mut c2 = c.clone();
    c2.url = format!("http://127.0.0.1:{port2}/v1development/profiles");
    let e = Exporter::start(c2).unwrap();
    let s = e.finish(Duration::from_secs(5));
    assert_eq!(s.sent_from_spool, 12, "{s:?}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 6);
    let h = seen[0].headers.to_ascii_lowercase();
    assert!(h.starts_with("post /v1development/profiles http/1.1"), "{h}");
    assert!(h.contains("content-encoding: gzip") && h.contains("x-scope-orgid: t1"), "{h}");
    assert!(seen[0].body_len > 0);
}

#[test]
fn retry_after_is_honoured_and_the_retry_succeeds() {
    let (port, seen) = server(vec![
        answer("503 Service Unavailable", "Retry-After: 1\r\n", &[]),
        answer("200 OK", "", &[]),
    ]);
    let e = Exporter::start(cfg(port)).unwrap();
    e.submit(payload(4));
    let s = e.finish(Duration::from_secs(10));
    assert_eq!((s.sent, s.not_sent), (4, 0), "{s:?}");
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    let gap = seen[1].at - seen[0].at;
    assert!(gap >= Duration::from_millis(990), "retried after {gap:?}, asked 1 s");
}

#[test]
fn a_partial_success_counts_the_rejected_profiles() {
    let body = ExportProfilesServiceResponse {
        partial_success: Some(ExportProfilesPartialSuccess {
            rejected_profiles: 2,
            error_message: "2 profiles had no samples".into(),
        }),
    }
    .encode_to_vec();
    let (port, _) = server(vec![answer("200 OK", "", &body)]);
    let e = Exporter::start(cfg(port)).unwrap();
    e.submit(payload(5));
    let s = e.finish(Duration::from_secs(5));
    assert_eq!((s.sent, s.rejected), (3, 2), "{s:?}");
    assert!(s.last_error.unwrap().contains("2 profiles had no samples"));
}

#[test]
fn a_client_error_is_final_with_the_servers_message() {
    let status = strobe_otlp::proto::Status { code: 3, message: "unsupported profile".into() };
    let (port, seen) = server(vec![answer("400 Bad Request", "", &status.encode_to_vec())]);
    let e = Exporter::start(cfg(port)).unwrap();
    e.submit(payload(1));
    let s = e.finish(Duration::from_secs(5));
    assert_eq!((s.sent, s.not_sent), (0, 1), "{s:?}");
    let why = s.last_error.unwrap();
    assert!(why.contains("HTTP 400: unsupported profile"), "{why}");
    assert_eq!(seen.lock().unwrap().len(), 1, "not retried");
}
