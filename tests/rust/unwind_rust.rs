// strobe-testprogs: -C opt-level=2
//! A Rust program for strobe's stacks tests, built like a release build (optimized, no
//! frame pointers, std from the toolchain): a worker thread runs worker -> rs_a -> rs_b,
//! where rs_b maps, fills and unmaps pages through libc's mmap and munmap and fills a
//! vector from the allocator (samples land in libc, which has no frame pointers), then runs
//! a CPU loop; beside it worker -> rs_c, a CPU loop outside rs_a, so that rs_a holds about
//! two thirds of the time. Runs for about `argv[1]` ms of CPU (default 800).
//!
//! Prints its own measurement on stdout at exit, as `key=value` pairs on one line:
//!   rs_a_cpu_ns     CPU time inside the calls of rs_a (CLOCK_THREAD_CPUTIME_ID around each)
//!   process_cpu_ns  the process's CPU time at the end of main (CLOCK_PROCESS_CPUTIME_ID)

use std::hint::black_box;

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;
const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
const PROT_READ: i32 = 1;
const PROT_WRITE: i32 = 2;
const MAP_PRIVATE: i32 = 2;
const MAP_ANONYMOUS: i32 = 0x20;
const MAP_BYTES: usize = 1 << 16;

extern "C" {
    fn clock_gettime(id: i32, ts: *mut Timespec) -> i32;
    fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> *mut u8;
    fn munmap(addr: *mut u8, len: usize) -> i32;
}

fn clock_ns(id: i32) -> i64 {
    let mut t = Timespec { sec: 0, nsec: 0 };
    // SAFETY: t is a valid timespec to write.
    unsafe { clock_gettime(id, &mut t) };
    t.sec * 1_000_000_000 + t.nsec
}

#[inline(never)]
fn rs_b(seed: u64) -> u64 {
    let mut x = seed;
    for round in 0..48 {
        // SAFETY: a fresh private anonymous mapping, written and unmapped here only.
        unsafe {
            let p = mmap(
                std::ptr::null_mut(),
                MAP_BYTES,
                PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS,
                -1,
                0,
            );
            if p as isize == -1 {
                std::process::abort();
            }
            std::ptr::write_bytes(p, x as u8, MAP_BYTES);
            x = x.wrapping_add(u64::from(*p.add(round)));
            munmap(p, MAP_BYTES);
        }
        let v = vec![x as u8 | 1; 4096 + round * 64];
        x = x.wrapping_add(u64::from(black_box(&v)[round]));
    }
    for _ in 0..20_000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    }
    x
}

#[inline(never)]
fn rs_a(seed: u64) -> u64 {
    let r = rs_b(black_box(seed ^ 0x5bd1_e995));
    black_box(r).wrapping_add(1)
}

/// Work outside rs_a.
#[inline(never)]
fn rs_c(mut x: u64) -> u64 {
    for _ in 0..8_000_000 {
        x = x.wrapping_mul(2862933555777941757).wrapping_add(3037000493);
    }
    black_box(x)
}

#[inline(never)]
fn worker(ms: f64) -> (i64, u64) {
    let end = clock_ns(CLOCK_PROCESS_CPUTIME_ID) as f64 + ms * 1e6;
    let mut acc = 0u64;
    let mut in_a = 0i64;
    while (clock_ns(CLOCK_PROCESS_CPUTIME_ID) as f64) < end {
        let t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        acc = acc.wrapping_add(rs_a(acc));
        in_a += clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
        acc = rs_c(acc);
    }
    (in_a, acc)
}

fn main() {
    let ms: f64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(800.0);
    let t = std::thread::Builder::new().name("worker".into()).spawn(move || worker(ms));
    let (in_a, acc) = t.expect("spawn the worker").join().expect("the worker finished");
    black_box(acc);
    let process = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    println!("rs_a_cpu_ns={in_a} process_cpu_ns={process}");
}
