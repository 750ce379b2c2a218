//! The bundled workload: what `strobe record` profiles when given no command, and the
//! ground truth strobe's accuracy tests compare a report against.
//!
//! Each worker thread rotates through functions of distinct behaviour:
//!
//! | function | behaviour |
//! |---|---|
//! | `workload_fp_math` | a dependent chain of floating-point multiply-add and divide |
//! | `workload_int_divide` | a dependent chain of 64-bit integer divides |
//! | `workload_page_faults` | mmap fresh anonymous pages, touch each one, munmap |
//! | `workload_sleep` | nanosleep: system calls and context switches, little CPU |
//! | `workload_branches` | branches on random bits the predictor cannot learn |
//! | `workload_pointer_chase` | a random cyclic walk through a buffer far larger than L2 |
//!
//! The order changes every round (a shuffle from the thread's own generator), so no
//! function can ride a harmonic of the sample period. Each call's size adapts so that
//! a call takes about one millisecond of CPU time: every CPU-bound function gets a
//! comparable share (about a fifth each); sleeping burns little CPU.
//!
//! The ground truth ([`Truth`]) is measured around every call: CPU time with
//! `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`, page faults and context switches (voluntary
//! and involuntary: what `context-switches` counts) with `getrusage(RUSAGE_THREAD)`, and
//! the thread's own `task-clock` (a counting perf event it opens on itself), the clock
//! per-ms rates are given in. The two clocks differ where a function switches often:
//! the thread's CPU time also counts the scheduler's work of switching it out and in
//! (about 9 us a switch here), which `task-clock` does not see.
//!
//! The functions keep all their work inside themselves, so a sample taken during their
//! work has its IP in them: no helper calls (even `core` methods are calls in an
//! unoptimized build), system calls made with inline `syscall` instructions rather than
//! libc wrappers, only built-in arithmetic. They are `#[inline(never)]` and
//! `#[no_mangle]` so a profile names them plainly.
//!
//! This crate must never depend on the rest of strobe: it is the profiled program.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;

/// Options of a workload run.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Wall-clock duration of the run.
    pub seconds: f64,
    /// Worker threads, each rotating through every function.
    pub threads: usize,
    /// Fixed work instead of a fixed duration: each thread runs exactly this many
    /// rounds (one call of every function per round) with fixed call sizes
    /// ([`FIXED_UNITS`]), and `seconds` is ignored. The same work every run, so a
    /// profiler's slowdown shows as more time taken.
    pub rounds: Option<u64>,
    /// Run only these functions (names from [`FUNCTIONS`]); empty runs them all. A run of
    /// `workload_sleep` alone gives a sleeping function enough windows to measure its
    /// context switches per ms.
    pub only: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        Options { seconds: 5.0, threads: 2, rounds: None, only: Vec::new() }
    }
}

/// Why the workload could not run or report.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The run length is not a positive, finite number of seconds.
    #[error("the run length must be a positive number of seconds, not {0}")]
    Seconds(f64),
    /// No worker threads were asked for.
    #[error("the workload needs at least 1 thread")]
    NoThreads,
    /// A fixed round count of zero.
    #[error("a fixed number of rounds must be at least 1")]
    NoRounds,
    /// A function to run that the workload does not have.
    #[error("the workload has no function {name}; its functions are {}", FUNCTIONS.join(", "))]
    UnknownFunction {
        /// The name given.
        name: String,
    },
    /// A worker thread could not start or died.
    #[error("workload thread: {0}")]
    Thread(String),
    /// The ground truth file could not be written.
    #[error("cannot write the ground truth to {path}: {source}")]
    Write {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// The measured truth about one function, summed over threads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionTruth {
    /// The function's symbol name.
    pub function: String,
    /// Calls made.
    pub calls: u64,
    /// CPU time inside the calls, in nanoseconds (CLOCK_THREAD_CPUTIME_ID).
    pub cpu_ns: u64,
    /// `cpu_ns` as a percentage of the process's CPU time.
    pub cpu_pct: f64,
    /// Page faults inside the calls (minor + major, RUSAGE_THREAD).
    pub page_faults: u64,
    /// Page faults per ms of the calls' time ([`Truth::rate_clock`]).
    pub page_faults_per_ms: f64,
    /// Context switches inside the calls (voluntary + involuntary, RUSAGE_THREAD).
    pub context_switches: u64,
    /// Context switches per ms of the calls' time ([`Truth::rate_clock`]).
    pub context_switches_per_ms: f64,
    /// The thread's `task-clock` inside the calls, in nanoseconds (0 when the perf event
    /// could not be opened).
    pub task_clock_ns: u64,
}

/// The ground truth of a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Truth {
    /// Worker threads.
    pub threads: usize,
    /// Wall-clock seconds the run took.
    pub seconds: f64,
    /// CPU time of the whole process from its start to the end of the run
    /// (CLOCK_PROCESS_CPUTIME_ID): the denominator of `cpu_pct`.
    pub process_cpu_ns: u64,
    /// The clock the per-ms rates are per ms of: `task-clock` (the thread's own perf
    /// event, what strobe's windows measure time with), or `thread-cpu` when it could not
    /// be opened.
    pub rate_clock: &'static str,
    /// Per function, in rotation order.
    pub functions: Vec<FunctionTruth>,
}

impl Truth {
    /// The truth as pretty JSON.
    pub fn to_json(&self) -> String {
        // Plain data always serializes.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// Writes the truth as JSON to `path`.
    pub fn write(&self, path: &Path) -> Result<(), WorkloadError> {
        std::fs::write(path, self.to_json())
            .map_err(|source| WorkloadError::Write { path: path.display().to_string(), source })
    }

    /// The entry for `function`.
    pub fn function(&self, function: &str) -> Option<&FunctionTruth> {
        self.functions.iter().find(|f| f.function == function)
    }
}

/// The names of the workload's functions, in rotation order before shuffling.
pub const FUNCTIONS: [&str; 6] = [
    "workload_fp_math",
    "workload_int_divide",
    "workload_page_faults",
    "workload_sleep",
    "workload_branches",
    "workload_pointer_chase",
];

/// The one-time setup of a thread's pointer-chasing buffer, reported in the truth too.
pub const SETUP: &str = "workload_setup_chain";

/// Entries in each thread's pointer-chasing cycle: 4 MiB of `u32`, well past L2.
const CHAIN_LEN: usize = 1 << 20;

/// The CPU time each call aims at.
const TARGET_CALL_NS: u64 = 1_000_000;

/// Calls per measurement when one function runs alone (see `worker`).
const SINGLE_BATCH: u64 = 32;

/// How long `workload_sleep` sleeps per call, in microseconds.
const SLEEP_US: u64 = 100;

/// Work units per call in fixed-work mode ([`Options::rounds`]), in [`FUNCTIONS`]
/// order: about one millisecond of CPU each in a release build on the 2-vCPU VM the
/// benchmarks run on (measured; the sizes matter only in being the same every run).
pub const FIXED_UNITS: [u64; 6] = [200_000, 160_000, 360, SLEEP_US, 100_000, 13_000];

// ---------------------------------------------------------------------------------
// Raw system calls, expanded inline into the calling function so that the IP after
// the `syscall` instruction (where a signal taken in the kernel lands) is in it.

#[cfg(target_arch = "x86_64")]
macro_rules! raw_syscall {
    ($nr:expr, $a:expr, $b:expr, $c:expr, $d:expr, $e:expr, $f:expr) => {{
        let ret: i64;
        // SAFETY: the caller passes a valid system call number and arguments that are
        // valid for it; the kernel clobbers only rcx and r11 (declared) and rax (the
        // result). The asm may read and write memory the arguments point to, which
        // the compiler therefore assumes (no `nomem`).
        unsafe {
            std::arch::asm!(
                "syscall",
                inlateout("rax") $nr as i64 => ret,
                in("rdi") $a as u64,
                in("rsi") $b as u64,
                in("rdx") $c as u64,
                in("r10") $d as u64,
                in("r8") $e as u64,
                in("r9") $f as u64,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret
    }};
}

#[cfg(target_arch = "aarch64")]
macro_rules! raw_syscall {
    ($nr:expr, $a:expr, $b:expr, $c:expr, $d:expr, $e:expr, $f:expr) => {{
        let ret: i64;
        // SAFETY: as for x86_64: a valid system call and arguments; `svc 0` returns in
        // x0 and preserves every other register.
        unsafe {
            std::arch::asm!(
                "svc 0",
                in("x8") $nr as u64,
                inlateout("x0") $a as u64 => ret,
                in("x1") $b as u64,
                in("x2") $c as u64,
                in("x3") $d as u64,
                in("x4") $e as u64,
                in("x5") $f as u64,
                options(nostack),
            );
        }
        ret
    }};
}

/// A branch the compiler may not turn into a conditional move: an empty asm statement
/// has side effects as far as the optimizer knows, so it cannot be speculated.
macro_rules! keep_branch {
    () => {
        // SAFETY: an empty instruction sequence touches nothing.
        unsafe { std::arch::asm!("", options(nomem, nostack, preserves_flags)) }
    };
}

// ---------------------------------------------------------------------------------
// The functions. `units` sizes the work; the harness adapts it per call.

/// Floating point: a dependent chain of multiply-add and divide (divider latency bound).
#[inline(never)]
#[no_mangle]
pub fn workload_fp_math(units: u64) -> u64 {
    let mut x = 1.000_001_f64 + (units & 0xff) as f64 * 1e-9;
    let mut y = 0.5_f64;
    let mut i = 0u64;
    while i < units {
        x = x * 1.000_000_1 + 1e-7;
        y = y / x + 0.25;
        i += 1;
    }
    (x + y * 1e3) as u64
}

/// Integer divides: each quotient feeds the next divisor and dividend.
#[inline(never)]
#[no_mangle]
pub fn workload_int_divide(units: u64) -> u64 {
    let mut a: u64 = 0x7fff_ffff_ffff_fff1 ^ (units & 0xffff);
    let mut d: u64 = 7;
    let mut i = 0u64;
    while i < units {
        // a / d < 2^61 (d >= 3) plus a constant below 2^62: never overflows.
        a = a / d + 0x3c6e_f372_fe94_f82b;
        d = (a & 0xf) + 3;
        i += 1;
    }
    a
}

/// Page faults: maps `units` fresh anonymous pages, writes one byte in each (one
/// minor fault per page), unmaps them.
#[inline(never)]
#[no_mangle]
pub fn workload_page_faults(units: u64) -> u64 {
    const PAGE: u64 = 4096;
    let len = units * PAGE;
    let prot = (libc::PROT_READ | libc::PROT_WRITE) as u64;
    let flags = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64;
    let addr = raw_syscall!(libc::SYS_mmap, 0u64, len, prot, flags, -1i64, 0u64);
    if addr < 0 {
        return 0;
    }
    let base = addr as u64;
    let mut off = 0u64;
    while off < len {
        // SAFETY: `base + off` is inside the `len` bytes just mapped readable and
        // writable, and nothing else refers to them.
        unsafe { *((base + off) as *mut u8) = 1 };
        off += PAGE;
    }
    raw_syscall!(libc::SYS_munmap, base, len, 0u64, 0u64, 0u64, 0u64);
    units
}

/// Sleeping: one nanosleep of `units` microseconds (a system call and two context
/// switches; almost no CPU time).
#[inline(never)]
#[no_mangle]
pub fn workload_sleep(units: u64) -> u64 {
    let ts: [i64; 2] = [(units / 1_000_000) as i64, ((units % 1_000_000) * 1_000) as i64];
    let ret =
        raw_syscall!(libc::SYS_nanosleep, &ts as *const [i64; 2], 0u64, 0u64, 0u64, 0u64, 0u64);
    ret as u64
}

/// Unpredictable branches: two nested branches per step on bits of a xorshift
/// generator, so about half of them mispredict.
#[inline(never)]
#[no_mangle]
pub fn workload_branches(units: u64) -> u64 {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d ^ units;
    let mut acc: u64 = 0;
    let mut i = 0u64;
    while i < units {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if x & 1 != 0 {
            keep_branch!();
            if x & 2 != 0 {
                keep_branch!();
                acc ^= x >> 11;
            } else {
                acc = (acc << 1) ^ (x >> 23);
            }
        } else {
            keep_branch!();
            acc = (acc >> 1) | (x & 0x100);
        }
        i += 1;
    }
    acc
}

/// Memory-bound pointer chasing: `steps` dependent loads through a random cycle.
#[inline(never)]
#[no_mangle]
pub fn workload_pointer_chase(chain: &[u32], start: u32, steps: u64) -> u64 {
    let mut at = start as usize;
    let mut i = 0u64;
    while i < steps {
        at = chain[at] as usize;
        i += 1;
    }
    at as u64
}

/// Builds a thread's pointer-chasing buffer: one random cycle through every entry
/// (Sattolo's algorithm), so the walk never settles into a cached subset.
#[inline(never)]
#[no_mangle]
// The swap is written out by hand on purpose (see inside).
#[allow(clippy::manual_swap)]
pub fn workload_setup_chain(seed: u64) -> Vec<u32> {
    let mut chain: Vec<u32> = vec![0; CHAIN_LEN];
    let c = chain.as_mut_slice();
    let mut i = 0;
    while i < c.len() {
        c[i] = i as u32;
        i += 1;
    }
    let mut x = seed | 1;
    let mut i = c.len() - 1;
    while i > 0 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let j = (x % i as u64) as usize;
        // By hand: `slice::swap` is a call in an unoptimized build, and samples taken
        // in it would not name this function.
        let t = c[i];
        c[i] = c[j];
        c[j] = t;
        i -= 1;
    }
    chain
}

// ---------------------------------------------------------------------------------
// The harness.

fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime writes only it.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// The calling thread's page faults (minor + major) and context switches (voluntary +
/// involuntary).
fn thread_faults_and_switches() -> (u64, u64) {
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage; getrusage writes only it.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if rc != 0 {
        return (0, 0);
    }
    (
        (ru.ru_minflt as u64).saturating_add(ru.ru_majflt as u64),
        (ru.ru_nvcsw as u64).saturating_add(ru.ru_nivcsw as u64),
    )
}

#[derive(Debug, Clone, Copy, Default)]
struct Acc {
    calls: u64,
    cpu_ns: u64,
    faults: u64,
    switches: u64,
    task_clock_ns: u64,
}

/// The calling thread's own `task-clock`, counted by a perf event it opens on itself
/// (user space only, so it opens at any perf_event_paranoid). `None` when perf events
/// are not available.
struct TaskClock(Option<libc::c_int>);

impl TaskClock {
    fn open() -> TaskClock {
        // perf_event_attr, version 0 (64 bytes): type, size, config, then zeros (no
        // sampling), with the disabled bit clear and exclude_kernel/exclude_hv set (a
        // time count is the same either way; the exclusions satisfy paranoid 2).
        let mut attr = [0u64; 8];
        attr[0] = 1 /* PERF_TYPE_SOFTWARE */ | (64u64 << 32);
        attr[1] = 1; // PERF_COUNT_SW_TASK_CLOCK
        attr[5] = (1 << 5) | (1 << 6); // exclude_kernel, exclude_hv
                                       // SAFETY: perf_event_open with a valid 64-byte attr on the calling thread
                                       // (pid 0, any CPU); it returns an fd or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                attr.as_ptr(),
                0,
                -1,
                -1,
                8, /* FD_CLOEXEC */
            )
        };
        TaskClock((fd >= 0).then_some(fd as libc::c_int))
    }

    fn read(&self) -> u64 {
        let Some(fd) = self.0 else { return 0 };
        let mut v = 0u64;
        // SAFETY: reads 8 bytes into `v` from our own counting fd.
        let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
        if n == 8 {
            v
        } else {
            0
        }
    }
}

impl Drop for TaskClock {
    fn drop(&mut self) {
        if let Some(fd) = self.0 {
            // SAFETY: our own fd, closed once.
            unsafe { libc::close(fd) };
        }
    }
}

/// One worker thread: returns per-function accumulators (FUNCTIONS order, then SETUP).
/// Runs until `deadline`, or exactly `rounds` rounds of fixed sizes when given.
fn worker(index: usize, deadline: Instant, rounds: Option<u64>, run: [bool; 6]) -> [Acc; 7] {
    let mut acc = [Acc::default(); 7];
    let mut rng: u64 =
        0x9e37_79b9_7f4a_7c15 ^ ((index as u64 + 1) << 32) ^ u64::from(std::process::id());

    let clock = TaskClock::open();
    let measure = |acc: &mut Acc, calls: u64, f: &mut dyn FnMut() -> u64| -> u64 {
        let ((f0, s0), t0) = (thread_faults_and_switches(), thread_cpu_ns());
        let c0 = clock.read();
        let r = f();
        let c1 = clock.read();
        let t1 = thread_cpu_ns();
        let (f1, s1) = thread_faults_and_switches();
        acc.calls += calls;
        acc.cpu_ns += t1.saturating_sub(t0);
        acc.task_clock_ns += c1.saturating_sub(c0);
        acc.faults += f1.saturating_sub(f0);
        acc.switches += s1.saturating_sub(s0);
        std::hint::black_box(r);
        t1.saturating_sub(t0)
    };

    let mut chain = Vec::new();
    measure(&mut acc[6], 1, &mut || {
        chain = workload_setup_chain(rng);
        chain.len() as u64
    });
    let mut chase_at: u32 = 0;

    // Work units per call, adapted after every call toward TARGET_CALL_NS.
    let mut units: [u64; 6] = match rounds {
        Some(_) => FIXED_UNITS,
        None => [20_000, 20_000, 16, SLEEP_US, 50_000, 20_000],
    };
    let mut order: [usize; 6] = [0, 1, 2, 3, 4, 5];
    // One function alone (`--only`): its truth is measured around batches of calls, not
    // around each one. The measurement is code of its own (six system calls), which a
    // window longer than a call (a sleep's 15-30 us of CPU) would take in with the calls
    // on either side of it: measured around every call, the sleeping function's windows
    // were a fifth the harness's and read its switches per ms that much low.
    let batch = if run.iter().filter(|&&r| r).count() == 1 { SINGLE_BATCH } else { 1 };
    let mut done: u64 = 0;
    while match rounds {
        Some(n) => done < n,
        None => Instant::now() < deadline,
    } {
        done += 1;
        for i in (1..order.len()).rev() {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            order.swap(i, (rng % (i as u64 + 1)) as usize);
        }
        for &f in &order {
            if !run[f] {
                continue;
            }
            let u = units[f];
            let ns = measure(&mut acc[f], batch, &mut || {
                let mut r = 0;
                for _ in 0..batch {
                    r += match f {
                        0 => workload_fp_math(u),
                        1 => workload_int_divide(u),
                        2 => workload_page_faults(u),
                        3 => workload_sleep(u),
                        4 => workload_branches(u),
                        _ => {
                            let end = workload_pointer_chase(&chain, chase_at, u);
                            chase_at = end as u32;
                            end
                        }
                    };
                }
                r
            }) / batch;
            if f != 3 && rounds.is_none() {
                // Scale toward the target, at most 4x up or 2x down per call, so one
                // preempted call cannot swing the size far.
                let scaled = (u as u128 * TARGET_CALL_NS as u128 / ns.max(1) as u128) as u64;
                units[f] = scaled.clamp(u / 2, u.saturating_mul(4)).max(1);
            }
        }
    }
    acc
}

/// Runs the workload and returns its ground truth.
pub fn run(opts: &Options) -> Result<Truth, WorkloadError> {
    if !(opts.seconds > 0.0 && opts.seconds.is_finite()) {
        return Err(WorkloadError::Seconds(opts.seconds));
    }
    if opts.threads == 0 {
        return Err(WorkloadError::NoThreads);
    }
    if opts.rounds == Some(0) {
        return Err(WorkloadError::NoRounds);
    }
    let rounds = opts.rounds;
    let mut run = [opts.only.is_empty(); 6];
    for name in &opts.only {
        let i = FUNCTIONS
            .iter()
            .position(|f| f == name)
            .ok_or_else(|| WorkloadError::UnknownFunction { name: name.clone() })?;
        run[i] = true;
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(opts.seconds);
    let handles = (0..opts.threads)
        .map(|i| {
            std::thread::Builder::new()
                .name(format!("workload-{i}"))
                .spawn(move || worker(i, deadline, rounds, run))
                .map_err(|e| WorkloadError::Thread(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut total = [Acc::default(); 7];
    for h in handles {
        let acc = h.join().map_err(|_| WorkloadError::Thread("a worker panicked".into()))?;
        for (t, a) in total.iter_mut().zip(acc) {
            t.calls += a.calls;
            t.cpu_ns += a.cpu_ns;
            t.faults += a.faults;
            t.switches += a.switches;
            t.task_clock_ns += a.task_clock_ns;
        }
    }
    // Rates per ms of task-clock when every call had it, else of thread CPU time.
    let task_clock = total.iter().all(|a| a.calls == 0 || a.task_clock_ns > 0);
    let per_ms = |n: u64, a: &Acc| {
        let ns = if task_clock { a.task_clock_ns } else { a.cpu_ns };
        if ns > 0 {
            n as f64 / (ns as f64 / 1e6)
        } else {
            0.0
        }
    };
    let process_cpu_ns = clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID);
    let names = FUNCTIONS.iter().chain(std::iter::once(&SETUP));
    let functions = names
        .zip(total)
        .map(|(name, a)| FunctionTruth {
            function: name.to_string(),
            calls: a.calls,
            cpu_ns: a.cpu_ns,
            cpu_pct: 100.0 * a.cpu_ns as f64 / process_cpu_ns.max(1) as f64,
            page_faults: a.faults,
            page_faults_per_ms: per_ms(a.faults, &a),
            context_switches: a.switches,
            context_switches_per_ms: per_ms(a.switches, &a),
            task_clock_ns: a.task_clock_ns,
        })
        .collect();
    Ok(Truth {
        threads: opts.threads,
        seconds: started.elapsed().as_secs_f64(),
        process_cpu_ns,
        rate_clock: if task_clock { "task-clock" } else { "thread-cpu" },
        functions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_compute_what_they_claim() {
        assert_eq!(workload_page_faults(8), 8);
        assert_eq!(workload_sleep(10), 0, "nanosleep succeeds");
        let chain = workload_setup_chain(12345);
        // One cycle through every entry: walking CHAIN_LEN steps returns to the start
        // and no shorter walk does (checked at a few points).
        assert_eq!(workload_pointer_chase(&chain, 0, CHAIN_LEN as u64), 0);
        assert_ne!(workload_pointer_chase(&chain, 0, CHAIN_LEN as u64 / 2), 0);
        assert_ne!(workload_fp_math(1000), workload_fp_math(1001));
        assert_ne!(workload_int_divide(1000), workload_int_divide(1001));
        assert_ne!(workload_branches(1000), workload_branches(1001));
    }

    #[test]
    fn truth_shares_are_comparable_and_faults_belong_to_the_faulting_function() {
        let t = run(&Options { seconds: 1.5, threads: 2, ..Options::default() }).unwrap();
        assert_eq!(t.functions.len(), 7);
        // Other tests share this process's CPU time, so only an upper bound holds here.
        let sum: f64 = t.functions.iter().map(|f| f.cpu_pct).sum();
        assert!(sum <= 100.5, "functions cannot exceed the process's CPU time: {sum}");
        let own: u64 = t.functions.iter().map(|f| f.cpu_ns).sum();
        let share = |name: &str| 100.0 * t.function(name).unwrap().cpu_ns as f64 / own as f64;
        for name in FUNCTIONS {
            let f = t.function(name).unwrap();
            assert!(f.calls > 0, "{name} ran");
            if name != "workload_sleep" {
                assert!(share(name) >= 5.0, "{name} takes a comparable share:\n{}", t.to_json());
            }
        }
        assert!(share("workload_sleep") < 5.0, "{}", t.to_json());
        let pf = t.function("workload_page_faults").unwrap();
        // workload_setup_chain allocates the chain it builds, so it faults too, at a rate
        // that depends on what the allocator has in hand (75 to 230 per ms seen).
        for f in &t.functions {
            if f.function != pf.function && f.function != "workload_setup_chain" {
                assert!(pf.page_faults_per_ms > 10.0 * f.page_faults_per_ms, "{}", t.to_json());
            }
        }
        let json: serde_json::Value = serde_json::from_str(&t.to_json()).unwrap();
        assert_eq!(json["functions"][0]["function"], "workload_fp_math");
    }

    #[test]
    fn bad_options_are_rejected() {
        let o = Options::default();
        assert!(matches!(
            run(&Options { seconds: 0.0, ..o.clone() }),
            Err(WorkloadError::Seconds(s)) if s == 0.0
        ));
        assert!(matches!(run(&Options { threads: 0, ..o.clone() }), Err(WorkloadError::NoThreads)));
        assert!(matches!(
            run(&Options { rounds: Some(0), ..o.clone() }),
            Err(WorkloadError::NoRounds)
        ));
        let e = run(&Options { only: vec!["nope".into()], ..o }).unwrap_err().to_string();
        assert!(e.contains("no function nope") && e.contains("workload_sleep"), "{e}");
        assert!(!e.contains("--"), "a library message names no flag: {e}");
    }

    #[test]
    fn fixed_rounds_make_the_same_calls_every_run() {
        let opts = Options { seconds: 1000.0, threads: 2, rounds: Some(3), only: Vec::new() };
        for _ in 0..2 {
            let t = run(&opts).unwrap();
            for name in FUNCTIONS {
                assert_eq!(t.function(name).unwrap().calls, 6, "{name}: 3 rounds x 2 threads");
            }
            // 360 fresh pages per call, each touched once.
            assert!(t.function("workload_page_faults").unwrap().page_faults >= 6 * 360);
        }
    }
}
