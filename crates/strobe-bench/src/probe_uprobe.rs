//! The kernel-uprobe rows of `strobe bench probe`: triggers/s of a uprobe on an empty
//! function, at 1, 2, 4 and 8 threads, for the two first instructions that matter.
//!
//! - `uprobe`: the function starts with a 5-byte nop (`0f 1f 44 00 00`), the site a USDT
//!   probe has; recent kernels (6.18 here) replace the trap with a call into a uprobe
//!   trampoline there, the fastest case.
//! - `uprobe-prologue`: the function starts with `push %rbp`, which the kernel emulates
//!   instead of single-stepping.
//!
//! Both functions are written in assembly in this module, so their first instruction is
//! fixed whatever the compiler does. The benchmark probes its own executable: a pool of
//! eight worker threads is started once per variant, a counting event is opened on each
//! worker's thread id (see [`Mechanism`] for how the uprobe is named), and each measurement wakes
//! the first N workers, lets them call the function in a loop for a fixed time, and
//! divides the calls by the wall time. Every call must be counted by the kernel: the
//! events' total is checked against the calls made, so a probe that silently stopped
//! firing fails the benchmark instead of reporting the speed of a plain call.
//!
//! Events are opened and closed once per variant (sequentially: closing a uprobe waits for
//! a kernel grace period, tens of milliseconds), never per measurement.
//!
//! This module must never be linked into a profiled target (like the whole crate).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::report::row;
use crate::stats::median_of;
use crate::{BenchError, BenchOpts, Row};

/// The thread counts every variant is measured at (the last two oversubscribe a 2-CPU
/// machine).
pub(crate) const THREADS: [usize; 4] = [1, 2, 4, 8];

/// The variants, with the function each one probes.
#[cfg(target_arch = "x86_64")]
fn variants() -> [(&'static str, unsafe extern "C" fn()); 2] {
    [("uprobe", strobe_bench_uprobe_nop5), ("uprobe-prologue", strobe_bench_uprobe_prologue)]
}

// Two empty functions whose first instruction is fixed: a 5-byte nop, and the classic
// frame-pointer prologue. `.p2align 4` keeps each on its own 16-byte boundary.
#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".pushsection .text.strobe_bench_uprobe,\"ax\",@progbits",
    ".p2align 4",
    ".globl strobe_bench_uprobe_nop5",
    ".type strobe_bench_uprobe_nop5,@function",
    "strobe_bench_uprobe_nop5:",
    ".byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
    "ret",
    ".size strobe_bench_uprobe_nop5, .-strobe_bench_uprobe_nop5",
    ".p2align 4",
    ".globl strobe_bench_uprobe_prologue",
    ".type strobe_bench_uprobe_prologue,@function",
    "strobe_bench_uprobe_prologue:",
    "push rbp",
    "mov rbp, rsp",
    "pop rbp",
    "ret",
    ".size strobe_bench_uprobe_prologue, .-strobe_bench_uprobe_prologue",
    ".popsection",
);

#[cfg(target_arch = "x86_64")]
extern "C" {
    /// `nopl 0x0(%rax,%rax,1); ret`.
    fn strobe_bench_uprobe_nop5();
    /// `push %rbp; mov %rsp,%rbp; pop %rbp; ret`.
    fn strobe_bench_uprobe_prologue();
}

/// How long each measurement runs.
fn measure_time(opts: &BenchOpts) -> Duration {
    if opts.quick {
        Duration::from_millis(30)
    } else {
        Duration::from_millis(400)
    }
}

/// How the rows name their uprobe, the first that works here.
enum Mechanism {
    /// One uprobe defined in tracefs, with a tracepoint event per thread on it: one kernel
    /// consumer, as `perf probe` and `strobe probe` use it. Needs root.
    Tracefs(strobe_uprobe::attach::Tracefs),
    /// A uprobe PMU event per thread. Each such event registers a uprobe consumer of its
    /// own, and every hit runs all of them (each filtering by thread): with the 8 workers'
    /// events, a hit cost 1.41 us here against 0.76 us through one tracefs definition.
    Pmu(strobe_uprobe::attach::UprobePmu),
}

impl Mechanism {
    fn detect() -> Result<Mechanism, BenchError> {
        if let Ok(t) = strobe_uprobe::attach::Tracefs::detect() {
            return Ok(Mechanism::Tracefs(t));
        }
        strobe_uprobe::attach::UprobePmu::detect()
            .map(Mechanism::Pmu)
            .map_err(|e| BenchError::Unsupported(e.to_string()))
    }

    /// A line for the report saying which one ran.
    fn describe(&self) -> &'static str {
        match self {
            Mechanism::Tracefs(_) => {
                "uprobe rows: one tracefs uprobe per function, a counting event per thread \
                 (the kernel's fastest setup)"
            }
            Mechanism::Pmu(_) => {
                "uprobe rows: a uprobe PMU event per thread, each a kernel consumer of its \
                 own (tracefs uprobe_events is not writable here); every hit runs all 8, so these \
                 rows are about 2x slower than the kernel's best and strobe/uprobe is \
                 flattered by that much"
            }
        }
    }
}

/// Held while uprobes are attached to the probed functions: the kernel writes a
/// breakpoint over their first instruction then, so readers of that code (a test) and a
/// second concurrent `rows` call (the `probe` bench's tests) wait for it.
static ATTACHED: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The `uprobe` and `uprobe-prologue` rows, `{"variant","threads","mtrig_per_s"}`, at
/// 1, 2, 4 and 8 threads (the median of `opts.repeats` measurements each), and a line
/// saying how the uprobes were opened.
#[cfg(target_arch = "x86_64")]
pub fn rows(opts: &BenchOpts) -> Result<(Vec<Row>, &'static str), BenchError> {
    let _attached = ATTACHED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mechanism = Mechanism::detect()?;
    let mut rows = Vec::new();
    for (variant, f) in variants() {
        let site = site_of(f)?;
        let pool = Pool::start(*THREADS.iter().max().unwrap_or(&1), f)?;
        // Opened one by one on each worker's thread, enabled from the start: the workers
        // only call the function while a measurement runs.
        let settings = strobe_uprobe::attach::EventSettings {
            inherit: false,
            enable_on_exec: false,
            sampling: None,
        };
        // With tracefs, the one definition every event of the variant opens on.
        let definition = match &mechanism {
            Mechanism::Tracefs(t) => Some(
                t.define(&site, false, variant).map_err(|e| BenchError::Other(e.to_string()))?,
            ),
            Mechanism::Pmu(_) => None,
        };
        let mut events = Vec::with_capacity(pool.tids.len());
        for &tid in &pool.tids {
            let target = strobe_perf::Target::thread(tid);
            let opened = match (&definition, &mechanism) {
                (Some(def), _) => {
                    strobe_uprobe::attach::open_trace_uprobe(def, target, settings, variant)
                }
                (None, Mechanism::Pmu(pmu)) => {
                    strobe_uprobe::attach::open_uprobe(pmu, &site, false, target, settings, variant)
                }
                (None, Mechanism::Tracefs(_)) => {
                    return Err(BenchError::Other("a tracefs uprobe without its definition".into()))
                }
            };
            let ev = opened.map_err(|e| match e {
                strobe_uprobe::Error::Open(o) => BenchError::Unsupported(o.to_string()),
                other => BenchError::Other(other.to_string()),
            })?;
            ev.enable()
                .map_err(|source| BenchError::Io { what: "enabling a uprobe".into(), source })?;
            events.push(ev);
        }
        let mut calls = 0u64;
        for threads in THREADS {
            let rate = median_of(opts.repeats, || {
                let (n, elapsed) = pool.run(threads, measure_time(opts));
                calls += n;
                n as f64 / elapsed.as_secs_f64() / 1e6
            });
            rows.push(row([
                ("variant", Value::from(variant)),
                ("threads", Value::from(threads)),
                ("mtrig_per_s", Value::from((rate * 1e4).round() / 1e4)),
            ]));
        }
        let mut counted = 0u64;
        for ev in &events {
            counted += ev.read_count().map_err(|source| BenchError::Io {
                what: "reading a uprobe count".into(),
                source,
            })?;
        }
        if counted != calls {
            return Err(BenchError::Other(format!(
                "{variant}: the kernel counted {counted} uprobe hits for {calls} calls; the \
                 figures would not measure a uprobe"
            )));
        }
        // Closing each takes a kernel grace period: one at a time, after measuring.
        for ev in events {
            drop(ev);
        }
        // The definition goes after its events: the kernel keeps one in use.
        drop(definition);
        pool.stop();
    }
    Ok((rows, mechanism.describe()))
}

/// On other architectures the probed functions cannot be written.
#[cfg(not(target_arch = "x86_64"))]
pub fn rows(_opts: &BenchOpts) -> Result<(Vec<Row>, &'static str), BenchError> {
    Err(BenchError::Unsupported(
        "the uprobe rows need x86-64 (their functions are x86 assembly)".into(),
    ))
}

/// The file and offset of function `f` in this executable.
fn site_of(f: unsafe extern "C" fn()) -> Result<strobe_uprobe::Site, BenchError> {
    let addr = f as *const () as u64;
    match strobe_target::maps::resolve_address(None, addr) {
        Ok(Some((path, offset))) => Ok(strobe_uprobe::Site { path, offset, ref_ctr_offset: None }),
        Ok(None) => {
            Err(BenchError::Other(format!("no file maps address {addr:#x} of this process")))
        }
        Err(source) => Err(BenchError::Io { what: "reading /proc/self/maps".into(), source }),
    }
}

/// One measurement for a worker: wait at `start`, call until `stop`, send the count.
struct Job {
    start: Arc<Barrier>,
    stop: Arc<AtomicBool>,
    done: mpsc::Sender<u64>,
}

/// Worker threads that stay alive (and keep their thread ids, which the events follow)
/// across measurements.
struct Pool {
    tids: Vec<libc::pid_t>,
    jobs: Vec<mpsc::Sender<Job>>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

impl Pool {
    fn start(n: usize, f: unsafe extern "C" fn()) -> Result<Pool, BenchError> {
        let (tid_tx, tid_rx) = mpsc::channel();
        let mut jobs = Vec::with_capacity(n);
        let mut handles = Vec::with_capacity(n);
        for i in 0..n {
            let (tx, rx) = mpsc::channel::<Job>();
            let tid_tx = tid_tx.clone();
            let h = std::thread::Builder::new()
                .name(format!("uprobe-bench-{i}"))
                .spawn(move || {
                    // SAFETY: gettid has no preconditions.
                    let tid = unsafe { libc::gettid() };
                    if tid_tx.send((i, tid)).is_err() {
                        return;
                    }
                    while let Ok(job) = rx.recv() {
                        job.start.wait();
                        let mut n = 0u64;
                        // Relaxed: the flag only ends the loop; the count travels through
                        // the channel, which synchronises.
                        while !job.stop.load(Ordering::Relaxed) {
                            // SAFETY: the probed functions take nothing, return nothing
                            // and preserve every register the C ABI asks them to.
                            unsafe { std::hint::black_box(f)() };
                            n += 1;
                        }
                        let _ = job.done.send(n);
                    }
                })
                .map_err(|source| BenchError::Io { what: "spawning a worker".into(), source })?;
            jobs.push(tx);
            handles.push(h);
        }
        drop(tid_tx);
        let mut tids = vec![0; n];
        for _ in 0..n {
            let (i, tid) = tid_rx
                .recv()
                .map_err(|_| BenchError::Other("a benchmark worker died at start".into()))?;
            tids[i] = tid;
        }
        Ok(Pool { tids, jobs, handles })
    }

    /// Runs the first `threads` workers for about `time`; returns the calls they made
    /// and the wall time from their common start to the stop flag.
    fn run(&self, threads: usize, time: Duration) -> (u64, Duration) {
        let threads = threads.min(self.jobs.len());
        let start = Arc::new(Barrier::new(threads + 1));
        let stop = Arc::new(AtomicBool::new(false));
        let (done_tx, done_rx) = mpsc::channel();
        for tx in &self.jobs[..threads] {
            let job = Job { start: start.clone(), stop: stop.clone(), done: done_tx.clone() };
            let _ = tx.send(job);
        }
        drop(done_tx);
        start.wait();
        let t0 = Instant::now();
        std::thread::sleep(time);
        // Relaxed: see the worker loop.
        stop.store(true, Ordering::Relaxed);
        let elapsed = t0.elapsed();
        (done_rx.iter().sum(), elapsed)
    }

    fn stop(self) {
        drop(self.jobs);
        for h in self.handles {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probed_functions_start_with_the_promised_instruction() {
        #[cfg(target_arch = "x86_64")]
        {
            let _attached = ATTACHED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let code = |f: unsafe extern "C" fn()| {
                // SAFETY: reading the first bytes of a function in this executable's
                // mapped, readable text.
                unsafe { std::slice::from_raw_parts(f as *const () as *const u8, 5).to_vec() }
            };
            assert_eq!(code(strobe_bench_uprobe_nop5), [0x0f, 0x1f, 0x44, 0x00, 0x00]);
            assert_eq!(code(strobe_bench_uprobe_prologue)[0], 0x55, "push %rbp");
        }
    }

    /// A smoke run: every row present and positive, and (inside `rows`) every call counted
    /// by the kernel. Figures from it mean nothing.
    #[test]
    fn quick_rows_cover_both_variants_at_every_thread_count() {
        let opts = BenchOpts { quick: true, repeats: 1, strobe_exe: None };
        let rows = match rows(&opts) {
            Ok((r, _)) => r,
            Err(BenchError::Unsupported(why)) => return eprintln!("skipping: {why}"),
            Err(e) => panic!("{e}"),
        };
        assert_eq!(rows.len(), 2 * THREADS.len());
        for variant in ["uprobe", "uprobe-prologue"] {
            for t in THREADS {
                let r = rows
                    .iter()
                    .find(|r| r["variant"] == variant && r["threads"] == t)
                    .unwrap_or_else(|| panic!("no row {variant}/{t}: {rows:?}"));
                assert!(r["mtrig_per_s"].as_f64().is_some_and(|x| x > 0.0), "{r:?}");
            }
        }
    }
}
