//! The exporter: a thread of its own that sends profiles, so that whoever produces them
//! (`strobe record` one profile per interval, `strobe report --export` once) never waits
//! on the network.
//!
//! - [`Exporter::submit`] never blocks: the profile goes into a bounded queue; when the
//!   queue is full it goes to the spool directory (if one was given) or is dropped, and
//!   is counted either way.
//! - The thread sends each queued profile, retrying what may pass (connection refused, a
//!   timeout, HTTP 429/502/503/504) with exponential backoff and jitter, at least as long
//!   as the server's `Retry-After` asks, for at most [`RetryPolicy::max_elapsed`]. A
//!   profile it gives up on is spooled or counted as not sent, with the last reason kept.
//! - With a spool directory, profiles kept there (by this run or an earlier one) are sent
//!   when the queue is idle, oldest first, and removed once sent. The spool holds at most
//!   [`SPOOL_MAX_BYTES`]; past that a profile is counted as not sent.
//! - [`Exporter::finish`] closes the queue and gives the thread until a deadline to send
//!   what is queued; what is left then is spooled or counted.
//!
//! Counting is in profiles (`Profile` messages, the unit of OTLP's partial success):
//! every submitted profile ends up counted once as sent, rejected by the server, spooled,
//! or not sent.
//!
//! Owns: the queue, retries, the spool and the counts. Must never block the caller or
//! grow without bound.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use prost::Message;

use crate::config::{ExportConfig, RetryPolicy};
use crate::error::OtlpError;
use crate::proto::ExportProfilesServiceRequest;
use crate::transport::{Outcome, Transport};

/// The most bytes the spool directory may hold.
pub const SPOOL_MAX_BYTES: u64 = 256 << 20;

/// An encoded request, ready to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Payload {
    /// The request body (protobuf, gzipped when `gzip`).
    pub body: Vec<u8>,
    /// Whether `body` is gzipped.
    pub gzip: bool,
    /// How many profiles the request holds.
    pub profiles: u64,
}

impl Payload {
    /// Encodes `req` (gzipped when `gzip`).
    pub fn encode(req: &ExportProfilesServiceRequest, gzip: bool) -> Payload {
        let profiles = req
            .resource_profiles
            .iter()
            .flat_map(|r| &r.scope_profiles)
            .map(|s| s.profiles.len() as u64)
            .sum();
        let raw = req.encode_to_vec();
        let body = if gzip { gzip_bytes(&raw) } else { raw };
        Payload { body, gzip, profiles }
    }
}

/// Gzips `raw` (level 6, the collector's own default).
pub fn gzip_bytes(raw: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(
        Vec::with_capacity(raw.len() / 4 + 64),
        flate2::Compression::default(),
    );
    // Writing to a Vec cannot fail.
    let _ = gz.write_all(raw);
    gz.finish().unwrap_or_default()
}

/// What [`Exporter::submit`] did with a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// Queued for sending.
    Queued,
    /// The queue was full: kept in the spool directory.
    Spooled,
    /// The queue was full and there is no spool: counted as not sent.
    Dropped,
}

/// The exporter's counts, in profiles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Submitted.
    pub submitted: u64,
    /// Accepted by the server.
    pub sent: u64,
    /// Accepted in the request but rejected by the server (partial success).
    pub rejected: u64,
    /// Kept in the spool directory.
    pub spooled: u64,
    /// Sent from the spool (kept earlier).
    pub sent_from_spool: u64,
    /// Neither sent nor spooled.
    pub not_sent: u64,
    /// Why the last failure happened, one line.
    pub last_error: Option<String>,
}

#[derive(Debug, Default)]
struct Shared {
    submitted: AtomicU64,
    sent: AtomicU64,
    rejected: AtomicU64,
    spooled: AtomicU64,
    sent_from_spool: AtomicU64,
    not_sent: AtomicU64,
    last_error: Mutex<Option<String>>,
    /// Set by finish: stop retrying at `deadline`.
    closing: AtomicBool,
    deadline: Mutex<Option<Instant>>,
}

impl Shared {
    fn fail(&self, why: String) {
        if let Ok(mut e) = self.last_error.lock() {
            *e = Some(why);
        }
    }

    fn past_deadline(&self) -> bool {
        self.closing.load(Ordering::Acquire)
            && self.deadline.lock().ok().and_then(|d| *d).is_some_and(|d| Instant::now() >= d)
    }
}

/// Sends profiles from a thread of its own.
#[derive(Debug)]
pub struct Exporter {
    tx: Option<SyncSender<Payload>>,
    thread: Option<JoinHandle<()>>,
    shared: Arc<Shared>,
    spool: Option<Spool>,
    gzip: bool,
    url: String,
}

impl Exporter {
    /// Starts the exporter thread for `cfg` (the CA file and the spool directory are
    /// checked now, so a mistake in either is one error before anything is recorded).
    pub fn start(cfg: ExportConfig) -> Result<Exporter, OtlpError> {
        let transport = Transport::new(&cfg)?;
        let spool = cfg.spool.as_deref().map(Spool::open).transpose()?;
        let (tx, rx) = sync_channel(cfg.queue.max(1));
        let shared = Arc::new(Shared::default());
        let worker = Worker {
            transport,
            retry: cfg.retry,
            shared: Arc::clone(&shared),
            spool: spool.clone(),
            replay_after: std::cell::Cell::new(Instant::now()),
        };
        let thread = std::thread::Builder::new()
            .name("strobe-otlp".into())
            .spawn(move || worker.run(rx))
            .map_err(|e| OtlpError::io("the exporter thread", e))?;
        Ok(Exporter {
            tx: Some(tx),
            thread: Some(thread),
            shared,
            spool,
            gzip: cfg.gzip,
            url: cfg.url,
        })
    }

    /// The endpoint profiles go to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Encodes `req` as this exporter sends it.
    pub fn encode(&self, req: &ExportProfilesServiceRequest) -> Payload {
        Payload::encode(req, self.gzip)
    }

    /// Hands `p` to the exporter thread without waiting.
    pub fn submit(&self, p: Payload) -> Submitted {
        self.shared.submitted.fetch_add(p.profiles, Ordering::Relaxed);
        let Some(tx) = &self.tx else {
            return self.overflow(p);
        };
        match tx.try_send(p) {
            Ok(()) => Submitted::Queued,
            Err(TrySendError::Full(p)) | Err(TrySendError::Disconnected(p)) => self.overflow(p),
        }
    }

    fn overflow(&self, p: Payload) -> Submitted {
        let n = p.profiles;
        match &self.spool {
            Some(s) if s.keep(&p).is_ok() => {
                self.shared.spooled.fetch_add(n, Ordering::Relaxed);
                Submitted::Spooled
            }
            _ => {
                self.shared.not_sent.fetch_add(n, Ordering::Relaxed);
                self.shared.fail(format!(
                    "the export queue was full ({} not answering fast enough)",
                    self.url
                ));
                Submitted::Dropped
            }
        }
    }

    /// The counts so far.
    pub fn stats(&self) -> ExportStats {
        let s = &self.shared;
        ExportStats {
            submitted: s.submitted.load(Ordering::Relaxed),
            sent: s.sent.load(Ordering::Relaxed),
            rejected: s.rejected.load(Ordering::Relaxed),
            spooled: s.spooled.load(Ordering::Relaxed),
            sent_from_spool: s.sent_from_spool.load(Ordering::Relaxed),
            not_sent: s.not_sent.load(Ordering::Relaxed),
            last_error: s.last_error.lock().ok().and_then(|e| e.clone()),
        }
    }

    /// Closes the queue, lets the thread send what is queued until `wait` has passed,
    /// and returns the final counts.
    pub fn finish(mut self, wait: Duration) -> ExportStats {
        if let Ok(mut d) = self.shared.deadline.lock() {
            *d = Some(Instant::now() + wait);
        }
        self.shared.closing.store(true, Ordering::Release);
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.stats()
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.shared.closing.store(true, Ordering::Release);
            if let Ok(mut d) = self.shared.deadline.lock() {
                *d = Some(Instant::now());
            }
            self.tx = None;
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }
}

struct Worker {
    transport: Transport,
    retry: RetryPolicy,
    shared: Arc<Shared>,
    spool: Option<Spool>,
    /// No spool replay before this: after a failed one, the collector gets the longest
    /// retry interval before the next (an idle exporter would otherwise knock every
    /// 200 ms, or block for a request timeout each time on an unreachable host).
    replay_after: std::cell::Cell<Instant>,
}

impl Worker {
    fn run(self, rx: Receiver<Payload>) {
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(p) => {
                    if self.shared.past_deadline() {
                        self.give_up(&p, None);
                        continue;
                    }
                    self.deliver(&p);
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.replay_one();
                }
                Err(RecvTimeoutError::Disconnected) => {
                    // The queue is closed and empty: send what the spool holds while the
                    // collector takes it and time remains.
                    while !self.shared.past_deadline() && self.replay_one() {}
                    return;
                }
            }
        }
    }

    /// Sends the oldest spooled profile; true when one was sent.
    fn replay_one(&self) -> bool {
        let Some(spool) = &self.spool else { return false };
        if Instant::now() < self.replay_after.get() {
            return false;
        }
        let Some((path, p)) = spool.oldest() else { return false };
        self.replay_after.set(Instant::now() + self.retry.max_interval);
        match self.transport.send(&p.body, p.gzip) {
            Outcome::Sent { rejected, why } => {
                self.replay_after.set(Instant::now());
                let _ = std::fs::remove_file(&path);
                self.shared.sent_from_spool.fetch_add(p.profiles, Ordering::Relaxed);
                if rejected > 0 {
                    self.shared.rejected.fetch_add(rejected, Ordering::Relaxed);
                    self.shared.fail(format!(
                        "{} rejected {rejected} profiles: {why}",
                        self.transport.url()
                    ));
                }
                true
            }
            Outcome::Fail(why) => {
                // A spooled profile the server refuses for good would block the spool.
                let _ = std::fs::remove_file(&path);
                self.shared.not_sent.fetch_add(p.profiles, Ordering::Relaxed);
                self.shared.fail(why);
                false
            }
            Outcome::Retry { why, .. } => {
                self.shared.fail(why);
                false
            }
        }
    }

    /// Sends `p` with retries; spools or counts it when that fails.
    fn deliver(&self, p: &Payload) {
        let start = Instant::now();
        let mut wait = self.retry.initial;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            match self.transport.send(&p.body, p.gzip) {
                Outcome::Sent { rejected, why } => {
                    let rejected = rejected.min(p.profiles);
                    self.shared.sent.fetch_add(p.profiles - rejected, Ordering::Relaxed);
                    if rejected > 0 {
                        self.shared.rejected.fetch_add(rejected, Ordering::Relaxed);
                        self.shared.fail(format!(
                            "{} rejected {rejected} profiles: {why}",
                            self.transport.url()
                        ));
                    }
                    return;
                }
                Outcome::Fail(why) => {
                    self.give_up(p, Some(why));
                    return;
                }
                Outcome::Retry { after, why } => {
                    let pause = jitter(wait, attempt).max(after.unwrap_or_default());
                    if start.elapsed() + pause > self.retry.max_elapsed || !self.sleep(pause) {
                        self.give_up(p, Some(why));
                        return;
                    }
                    wait = (wait * 2).min(self.retry.max_interval);
                }
            }
        }
    }

    /// Sleeps `d` in short steps; false when the deadline passed meanwhile.
    fn sleep(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        while Instant::now() < end {
            if self.shared.past_deadline() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20).min(end - Instant::now()));
        }
        !self.shared.past_deadline()
    }

    fn give_up(&self, p: &Payload, why: Option<String>) {
        if let Some(w) = why {
            self.shared.fail(w);
        } else if self.shared.past_deadline() {
            self.shared.fail(format!(
                "time ran out before {} took the queued profiles",
                self.transport.url()
            ));
        }
        match &self.spool {
            Some(s) if s.keep(p).is_ok() => {
                self.shared.spooled.fetch_add(p.profiles, Ordering::Relaxed);
            }
            _ => {
                self.shared.not_sent.fetch_add(p.profiles, Ordering::Relaxed);
            }
        }
    }
}

/// Backoff `base` scaled by a factor in [0.5, 1.5) that differs per attempt and process
/// (hosts that lost their collector together do not retry in step).
fn jitter(base: Duration, attempt: u32) -> Duration {
    let seed = u64::from(std::process::id()) ^ (u64::from(attempt) << 32) ^ 0x9e37_79b9_7f4a_7c15;
    let mut x = seed;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    let f = 0.5 + (x % 1000) as f64 / 1000.0;
    base.mul_f64(f)
}

/// The spool directory: one file per request, named so that names sort by age:
/// `strobe-<unix ns>-<seq>-<profiles>p.binpb[.gz]`.
#[derive(Debug, Clone)]
struct Spool {
    dir: PathBuf,
    seq: Arc<AtomicU64>,
}

impl Spool {
    fn open(dir: &Path) -> Result<Spool, OtlpError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| OtlpError::io(&format!("the spool directory {}", dir.display()), e))?;
        // Writable? (fail now, not when the collector is down)
        let probe = dir.join(".strobe-spool-probe");
        std::fs::write(&probe, b"")
            .map_err(|e| OtlpError::io(&format!("the spool directory {}", dir.display()), e))?;
        let _ = std::fs::remove_file(&probe);
        Ok(Spool { dir: dir.to_path_buf(), seq: Arc::new(AtomicU64::new(0)) })
    }

    fn files(&self) -> Vec<(PathBuf, u64)> {
        let mut v: Vec<(PathBuf, u64)> = std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                n.starts_with("strobe-") && (n.ends_with(".binpb") || n.ends_with(".binpb.gz"))
            })
            .map(|e| (e.path(), e.metadata().map_or(0, |m| m.len())))
            .collect();
        v.sort();
        v
    }

    fn keep(&self, p: &Payload) -> std::io::Result<()> {
        let used: u64 = self.files().iter().map(|(_, n)| n).sum();
        if used + p.body.len() as u64 > SPOOL_MAX_BYTES {
            return Err(std::io::Error::other("the spool is full"));
        }
        let ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            "strobe-{ns:020}-{seq:06}-{}p.binpb{}",
            p.profiles,
            if p.gzip { ".gz" } else { "" }
        );
        // Written beside and renamed, so a reader never sees half a file.
        let tmp = self.dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, &p.body)?;
        std::fs::rename(&tmp, self.dir.join(name))
    }

    fn oldest(&self) -> Option<(PathBuf, Payload)> {
        let (path, _) = self.files().into_iter().next()?;
        let name = path.file_name()?.to_string_lossy().into_owned();
        let gzip = name.ends_with(".gz");
        let profiles = name
            .split('-')
            .nth(3)
            .and_then(|s| s.split('p').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let body = std::fs::read(&path).ok()?;
        Some((path, Payload { body, gzip, profiles }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_half_to_one_and_a_half() {
        for a in 0..100 {
            let d = jitter(Duration::from_secs(1), a);
            assert!(d >= Duration::from_millis(500) && d < Duration::from_millis(1500), "{d:?}");
        }
    }

    #[test]
    fn spooled_files_come_back_oldest_first_with_their_count() {
        let dir = tempfile::tempdir().unwrap();
        let s = Spool::open(dir.path()).unwrap();
        let a = Payload { body: vec![1, 2, 3], gzip: true, profiles: 4 };
        let b = Payload { body: vec![9], gzip: false, profiles: 1 };
        s.keep(&a).unwrap();
        s.keep(&b).unwrap();
        let (pa, got) = s.oldest().unwrap();
        assert_eq!(got, a);
        std::fs::remove_file(pa).unwrap();
        assert_eq!(s.oldest().unwrap().1, b);
    }
}
