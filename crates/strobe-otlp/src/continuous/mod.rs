//! Continuous mode (`strobe record --every DURATION`): one profile per interval, sent while
//! the recording goes on.
//!
//! The recorder is left as it is: it writes its record file (the agents append their own
//! chunks to it, the kernel-mode writer its own) into a private temporary directory
//! ([`Continuous::path`]). A thread of this module follows that file as it grows
//! (strobe-format's reader in follow mode), hands every record to the `cut` state,
//! and at each interval's end (intervals are aligned to multiples of the period in Unix
//! time, so every host's profiles line up) cuts the interval: per process, a small
//! recording of its own (the header, the recorder's chunks, the process's state and the
//! interval's samples) that strobe-report reads as it reads any file, so every figure
//! is the report's. The reports become one OTLP request, handed to the exporter thread
//! without waiting ([`crate::Exporter`]: bounded queue, retries, spool, counts).
//!
//! - **Nothing lost or doubled at a cut**: see `cut`. An interval is cut a grace time
//!   after its end (the recorder writes a sample tens of milliseconds after it was
//!   taken); a sample that comes later still goes to the next interval.
//! - **Bounded**: the bytes read are given back to the file system behind the reader
//!   (`local`); memory holds one interval's samples and the state of the processes
//!   alive; the exporter's queue is bounded. A collector that is down costs retries on
//!   the exporter's thread and counted profiles, never a wait in the recorder or the
//!   target.
//! - **No local file** unless one is asked for: then the live file's bytes are copied to
//!   it as they are read, and it is rotated by size (`local`).
//! - **The last interval** is cut when the recording ends however it ends (the program
//!   exits, `--duration`, SIGINT or SIGTERM: the recorder's signal handling ends the
//!   recording, then [`Continuous::finish`] reads to the end and sends the rest within a
//!   deadline). This module's threads block the signals the recorder takes, so a
//!   signal never lands on them.
//!
//! Owns: following the file, the intervals, the local copy. Must never write into the
//! live file, wait on the network, or compute a figure (the report does).

mod cut;
mod local;

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rustc_hash::FxHashMap;
use strobe_format::{Reader, Record};
use strobe_report::recording::{read_from, ReadOptions};

use crate::config::ExportConfig;
use crate::error::OtlpError;
use crate::export::{ExportStats, Exporter};
use crate::profile::{build, ProcessProfile};
use crate::resource::{attributes, live_container_id, ProcessFacts, ResourceConfig};

/// How often the file is read between cuts.
const POLL: Duration = Duration::from_millis(200);
/// The longest an interval waits after its end for late samples.
const MAX_GRACE: Duration = Duration::from_secs(2);

/// What a continuous recording needs.
#[derive(Debug, Clone)]
pub struct ContinuousConfig {
    /// The interval.
    pub every: Duration,
    /// Where profiles go.
    pub export: ExportConfig,
    /// A local copy of the recording (`-o`), rotated at `rotate_bytes`.
    pub output: Option<PathBuf>,
    /// The local copy's rotation size.
    pub rotate_bytes: u64,
    /// Resource settings.
    pub resource: ResourceConfig,
    /// The report's options for each interval (the time line is always kept).
    pub read: ReadOptions,
    /// Look up the container ids of the processes.
    pub live_containers: bool,
    /// At the end, how long the exporter may take to send what is queued.
    pub flush_wait: Duration,
}

/// What a continuous recording did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Intervals cut.
    pub intervals: u64,
    /// Intervals with samples, each sent as one request.
    pub requests: u64,
    /// Time samples given to intervals.
    pub time_samples: u64,
    /// Process reports built: processes with samples, summed over the intervals.
    pub process_reports: u64,
    /// Samples that came after their interval was cut (sent in the next one).
    pub late: u64,
    /// The exporter's counts (in profiles, as OTLP counts them: one per sample type and
    /// process in each request).
    pub export: ExportStats,
    /// The local copy, and how many times it was rotated.
    pub copy: Option<(PathBuf, u64)>,
    /// The most disk the live file took at once, bytes.
    pub live_disk_max: u64,
    /// Processes (record streams) whose state is held now.
    pub streams_held: usize,
    /// Samples read and waiting for their interval now.
    pub samples_queued: usize,
    /// Warnings (the agents' notes, damage in the file, a file system that cannot free
    /// what was read), one line each.
    pub warnings: Vec<String>,
}

/// A continuous recording's reader and sender.
#[derive(Debug)]
pub struct Continuous {
    /// The live file's directory, removed with it when this is dropped.
    _dir: tempfile::TempDir,
    live: PathBuf,
    url: String,
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<Summary, OtlpError>>>,
    progress: Arc<Mutex<Summary>>,
}

/// The signals the recorder takes (strobe-record's signal thread): blocked in this
/// module's threads so that none is delivered to them.
const STOP_SIGNALS: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// Blocks [`STOP_SIGNALS`] in the calling thread; returns the mask it had.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset fill a local set; pthread_sigmask changes only the
    // calling thread's mask and writes the old one to a valid out-parameter.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in STOP_SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    }
}

fn restore_mask(old: &libc::sigset_t) {
    // SAFETY: restores a mask pthread_sigmask returned.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
}

impl Continuous {
    /// Checks the settings (the exporter's, the local copy's), makes the live file's
    /// directory and starts the threads. Record into [`Continuous::path`], then call
    /// [`Continuous::finish`].
    pub fn start(cfg: ContinuousConfig) -> Result<Continuous, OtlpError> {
        if cfg.every < Duration::from_millis(100) {
            return Err(OtlpError::Config(format!(
                "an interval of {:?} is too short: profiles are cut at most every 0.1 s",
                cfg.every
            )));
        }
        let dir = tempfile::Builder::new()
            .prefix("strobe-continuous-")
            .tempdir()
            .map_err(|e| OtlpError::io("a temporary directory for the live recording", e))?;
        let live = dir.path().join("live.strobe");
        let copy = cfg.output.as_deref().map(|p| local::Copy::create(p, cfg.rotate_bytes));
        let copy = copy.transpose()?;
        let done = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(Mutex::new(Summary::default()));
        // Both threads start with the stop signals blocked (a thread inherits its
        // creator's mask).
        let old = block_stop_signals();
        let url = cfg.export.url.clone();
        let started = Exporter::start(cfg.export.clone()).and_then(|exporter| {
            let f = Follower {
                cfg,
                live: live.clone(),
                exporter,
                copy,
                done: Arc::clone(&done),
                progress: Arc::clone(&progress),
                containers: FxHashMap::default(),
                symbols: strobe_report::SymbolCache::default(),
            };
            std::thread::Builder::new()
                .name("strobe-continuous".into())
                .spawn(move || f.run())
                .map_err(|e| OtlpError::io("the continuous recording's thread", e))
        });
        restore_mask(&old);
        let thread = started?;
        Ok(Continuous { _dir: dir, live, url, done, thread: Some(thread), progress })
    }

    /// Where profiles go.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The record file the recorder writes.
    pub fn path(&self) -> &Path {
        &self.live
    }

    /// What has been done so far.
    pub fn progress(&self) -> Summary {
        self.progress.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// After the recording ended: reads the rest of the file, sends the last interval,
    /// gives the exporter its deadline, and returns what was done. The stop signals stay
    /// blocked in the calling thread (a second Ctrl-C does not cut the last send short;
    /// the deadline bounds it).
    pub fn finish(mut self) -> Result<Summary, OtlpError> {
        let _ = block_stop_signals();
        self.done.store(true, Ordering::Release);
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(OtlpError::Send("the continuous recording's thread failed".into())),
            None => Ok(Summary::default()),
        }
    }
}

impl Drop for Continuous {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn pid_alive(pid: u32) -> bool {
    pid != 0 && Path::new(&format!("/proc/{pid}")).exists()
}

/// The following thread.
struct Follower {
    cfg: ContinuousConfig,
    live: PathBuf,
    exporter: Exporter,
    copy: Option<local::Copy>,
    done: Arc<AtomicBool>,
    progress: Arc<Mutex<Summary>>,
    /// Container ids by process (pid and start time: a pid used again is another
    /// process), looked up once.
    containers: FxHashMap<(u32, u64), Option<String>>,
    /// Names of addresses, kept from interval to interval.
    symbols: strobe_report::SymbolCache,
}

impl Follower {
    fn run(mut self) -> Result<Summary, OtlpError> {
        let mut sum = Summary::default();
        // The recorder creates the file and writes its header after the calibration.
        let mut reader = loop {
            let finishing = self.done.load(Ordering::Acquire);
            match Reader::open(&self.live) {
                Ok(r) => break r,
                Err(_) if !finishing => std::thread::sleep(Duration::from_millis(20)),
                Err(strobe_format::FormatError::Io { .. }) => {
                    // Nothing was recorded.
                    sum.export = self.exporter.finish(Duration::ZERO);
                    return Ok(sum);
                }
                Err(e) => return Err(e.into()),
            }
        };
        reader.set_follow(true);
        let mut live =
            local::Live::open(&self.live).map_err(|e| OtlpError::io("the live record file", e))?;
        let mut cutter = cut::Cutter::new(reader.header().clone());
        let h = cutter.header().clone();
        let every = self.cfg.every.as_nanos().max(1) as u64;
        let grace = (self.cfg.every / 2).min(MAX_GRACE).as_nanos() as u64;
        // Interval boundaries: multiples of `every` in Unix time, on the monotonic clock.
        let mono_of = |unix: u64| (h.start_mono_ns + unix).saturating_sub(h.start_unix_ns);
        let mut start_unix = h.start_unix_ns;
        let mut end_unix = (h.start_unix_ns / every + 1) * every;
        let mut errors = 0u32;
        loop {
            let finishing = self.done.load(Ordering::Acquire);
            if finishing {
                // Every writer is done: read to the end (a chunk still cut is the end).
                reader.set_follow(false);
            }
            for rec in reader.by_ref() {
                match rec {
                    Ok(Record::Truncated { .. }) => {}
                    Ok(r) => cutter.add(r),
                    Err(e) => {
                        errors += 1;
                        if errors <= 3 {
                            sum.warnings.push(format!("the live recording: {e}"));
                        }
                    }
                }
            }
            let read_to = reader.offset();
            if let Some(c) = self.copy.as_mut() {
                c.copy(&live, read_to)?;
            }
            sum.live_disk_max = sum.live_disk_max.max(live.disk_bytes());
            if let Some(e) = live.free_before(read_to) {
                sum.warnings.push(format!(
                    "cannot free what was read of the live recording in {} ({e}): it grows on disk until the recording ends",
                    self.live.parent().map_or(String::new(), |p| p.display().to_string())
                ));
            }
            if finishing {
                break;
            }
            let now = mono_ns();
            while now >= mono_of(end_unix) + grace {
                let parts = cutter.cut(Some(mono_of(end_unix)), &pid_alive);
                self.send(&mut sum, parts, start_unix, end_unix)?;
                // The interval's reports are done: the symbol tables too large for the
                // cache's bound that no report of the interval used go.
                self.symbols.end_batch();
                start_unix = end_unix;
                end_unix += every;
                // What an interval's reports freed goes back to the system: glibc keeps
                // freed memory of a thread's arena otherwise, and RSS climbs with the
                // largest interval seen.
                // SAFETY: malloc_trim only releases free memory of the allocator.
                unsafe { libc::malloc_trim(0) };
                if self.copy.as_ref().is_some_and(local::Copy::full) {
                    let mut e = strobe_format::Encoder::with_capacity(1 << 20);
                    cutter.write_resume(&mut e);
                    if let Some(c) = self.copy.as_mut() {
                        c.rotate(e.as_bytes())?;
                    }
                }
            }
            sum.late = cutter.late;
            sum.streams_held = cutter.streams();
            sum.samples_queued = cutter.queued();
            if let Ok(mut p) = self.progress.lock() {
                *p = sum.clone();
                p.export = self.exporter.stats();
            }
            let next = (mono_of(end_unix) + grace).saturating_sub(now);
            std::thread::sleep(POLL.min(Duration::from_nanos(next.max(1_000_000))));
        }
        // The last interval: everything left, up to the recording's end.
        let end = (h.start_unix_ns + mono_ns()).saturating_sub(h.start_mono_ns).max(start_unix);
        let parts = cutter.cut(None, &pid_alive);
        self.send(&mut sum, parts, start_unix, end)?;
        sum.late = cutter.late;
        sum.warnings.extend(cutter.notes.iter().cloned());
        if cutter.samples_cut != cutter.samples_read {
            sum.warnings.push(format!(
                "{} samples read, {} sent in intervals",
                cutter.samples_read, cutter.samples_cut
            ));
        }
        sum.copy = self.copy.as_ref().map(|c| (c.path().to_path_buf(), c.rotations));
        sum.export = self.exporter.finish(self.cfg.flush_wait);
        Ok(sum)
    }

    /// Turns one interval's parts into a request and hands it to the exporter.
    fn send(
        &mut self,
        sum: &mut Summary,
        parts: Vec<cut::Part>,
        start_unix: u64,
        end_unix: u64,
    ) -> Result<(), OtlpError> {
        sum.intervals += 1;
        let read = ReadOptions {
            timeline: true,
            cache: Some(self.symbols.clone()),
            ..self.cfg.read.clone()
        };
        let mut reports = Vec::new();
        for p in parts.into_iter().filter(|p| p.time_samples > 0) {
            sum.time_samples += p.time_samples;
            sum.process_reports += 1;
            let len = p.bytes.len() as u64;
            let reader = Reader::new(Cursor::new(p.bytes), "an interval of the recording")?;
            let loaded = read_from(reader, len, &read, &mut |_, _| {})?;
            reports.push((p.info, loaded));
        }
        if reports.is_empty() {
            return Ok(());
        }
        let facts: Vec<ProcessFacts> = reports
            .iter()
            .map(|(info, _)| {
                let (pid, ppid, exe, started) =
                    info.as_ref().map_or((0, 0, String::new(), 0), |i| {
                        (i.pid, i.ppid, i.exe.to_string_lossy().into_owned(), i.start_mono_ns)
                    });
                let live = self.cfg.live_containers && pid != 0;
                let container_id = self
                    .containers
                    .entry((pid, started))
                    .or_insert_with(|| {
                        live.then(|| live_container_id(pid, started.max(1))).flatten()
                    })
                    .clone();
                ProcessFacts { pid, ppid, exe, container_id }
            })
            .collect();
        // Forget the container ids of processes that are gone.
        if self.containers.len() > 4 * facts.len() + 64 {
            self.containers.retain(|&(pid, _), _| pid_alive(pid));
        }
        let duration_ns = end_unix.saturating_sub(start_unix);
        let profiles: Vec<ProcessProfile<'_>> = reports
            .iter()
            .zip(&facts)
            .map(|((_, l), p)| ProcessProfile {
                report: &l.report,
                resource: attributes(&self.cfg.resource, p),
                start_unix_ns: start_unix,
                duration_ns,
            })
            .collect();
        let version = env!("CARGO_PKG_VERSION");
        let request = build(&profiles, version);
        self.exporter.submit(self.exporter.encode(&request));
        sum.requests += 1;
        Ok(())
    }
}
