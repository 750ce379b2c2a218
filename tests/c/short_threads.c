// The fairness target of strobe's trust tests: THREADS threads, CONCURRENCY at a time,
// each spending about US microseconds of CPU in short_worker(), while main() spends about
// MAIN_MS milliseconds in main_work(). It prints its own ground truth: the CPU time of
// every call, measured with CLOCK_THREAD_CPUTIME_ID around it, and the process's CPU time.
//
//   short_threads THREADS US CONCURRENCY MAIN_MS
//   -> "worker_ns=N main_ns=N process_ns=N threads=N"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long us_per_thread;
static _Atomic unsigned long worker_ns;
static volatile unsigned long sink;

static unsigned long now(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (unsigned long)t.tv_sec * 1000000000UL + (unsigned long)t.tv_nsec;
}

__attribute__((noinline)) void short_worker(unsigned long ns) {
    unsigned long end = now(CLOCK_THREAD_CPUTIME_ID) + ns, x = 1;
    while (now(CLOCK_THREAD_CPUTIME_ID) < end)
        for (int i = 0; i < 200; i++) x = x * 6364136223846793005UL + 1;
    sink = x;
}

__attribute__((noinline)) unsigned long main_work(unsigned long ns) {
    unsigned long t0 = now(CLOCK_THREAD_CPUTIME_ID), end = t0 + ns, x = 7;
    while (now(CLOCK_THREAD_CPUTIME_ID) < end)
        for (int i = 0; i < 200; i++) x = x * 2862933555777941757UL + 3;
    sink = x;
    return now(CLOCK_THREAD_CPUTIME_ID) - t0;
}

static void *thread_main(void *arg) {
    unsigned long t0 = now(CLOCK_THREAD_CPUTIME_ID);
    short_worker((unsigned long)us_per_thread * 1000);
    atomic_fetch_add(&worker_ns, now(CLOCK_THREAD_CPUTIME_ID) - t0);
    return arg;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: short_threads THREADS US CONCURRENCY MAIN_MS\n");
        return 2;
    }
    long threads = atol(argv[1]), conc = atol(argv[3]);
    double main_ms = atof(argv[4]);
    us_per_thread = atol(argv[2]);
    if (conc < 1 || conc > 256) return 2;
    unsigned long main_ns = 0;
    // The main thread's work is spread between the batches, so both run all along.
    unsigned long slice = threads > 0 ? (unsigned long)(main_ms * 1e6 / ((threads + conc - 1) / conc)) : 0;
    pthread_t t[256];
    for (long started = 0; started < threads;) {
        long n = threads - started < conc ? threads - started : conc;
        for (long i = 0; i < n; i++) pthread_create(&t[i], NULL, thread_main, NULL);
        for (long i = 0; i < n; i++) pthread_join(t[i], NULL);
        started += n;
        main_ns += main_work(slice);
    }
    printf("worker_ns=%lu main_ns=%lu process_ns=%lu threads=%ld\n", (unsigned long)worker_ns,
           main_ns, now(CLOCK_PROCESS_CPUTIME_ID), threads);
    return 0;
}
