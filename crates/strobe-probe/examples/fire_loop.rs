//! Fires one enabled probe point in a loop on N threads and prints ns per
//! trigger with the strobe-rcu grace periods that ran meanwhile (a tool for
//! looking at the trigger path with perf; the quotable figures come from
//! `strobe bench probe`).
//!
//! `cargo run --release -p strobe-probe --example fire_loop -- [threads] [ms]`

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use strobe_probe::{attach, probe, Action, Consumer};

fn main() {
    let mut a = std::env::args().skip(1);
    let threads: usize = a.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let ms: u64 = a.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let _att = attach(
        "fire_loop",
        Consumer::new(|h| {
            black_box(h);
            Action::Keep
        }),
    )
    .expect("attach");
    let s0 = strobe_rcu::stats();
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let ws: Vec<_> = (0..threads)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for i in 0..1024u64 {
                        probe!(fire_loop, black_box(i));
                    }
                    n += 1024;
                }
                (n, thread_cpu_ns())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(ms));
    stop.store(true, Ordering::Relaxed);
    let done: Vec<(u64, u64)> = ws.into_iter().map(|w| w.join().unwrap_or((0, 0))).collect();
    let n: u64 = done.iter().map(|d| d.0).sum();
    let cpu_ns: u64 = done.iter().map(|d| d.1).sum();
    let secs = t0.elapsed().as_secs_f64();
    let s1 = strobe_rcu::stats();
    println!(
        "{threads} thr: {:.2} M/s total, {:.2} ns/trigger/thread, {:.2} ns per trigger of thread CPU time ({:.0}% of wall on CPU); grace periods {} (polled {}, lone {})",
        n as f64 / secs / 1e6,
        secs * 1e9 * threads as f64 / n as f64,
        cpu_ns as f64 / n as f64,
        100.0 * cpu_ns as f64 / (secs * 1e9 * threads as f64),
        s1.grace_periods - s0.grace_periods,
        s1.polled_grace_periods - s0.polled_grace_periods,
        s1.lone_grace_periods - s0.lone_grace_periods,
    );
}

/// CPU time the calling thread has used, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer; CLOCK_THREAD_CPUTIME_ID exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
