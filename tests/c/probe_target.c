// strobe-testprogs: -fno-omit-frame-pointer -lprobelib
/* The program `strobe probe` tests attach to. Every count it prints is the ground truth
 * the test compares strobe's counts with.
 *
 *   probe_target calls THREADS N   each thread calls counted_call N times, the shared
 *                                  library's lib_counted_call N times, and passes the USDT
 *                                  probes strobe_test:tick (N times) and strobe_test:guarded
 *                                  (N times, but only while its semaphore is set, i.e.
 *                                  while a tool has the probe attached); prints
 *                                  "calls=T*N guarded=K"
 *   probe_target sleep THREADS N MS  each thread calls sleepy(MS) N times
 *   probe_target exit CODE         exits with CODE after one counted_call
 */
#include "usdt.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

unsigned long lib_counted_call(unsigned long x);

/* USDT semaphores: the kernel increments them while a uprobe with ref_ctr_offset is
 * attached. */
__extension__ unsigned short strobe_test_tick_semaphore __attribute__((unused))
    __attribute__((section(".probes")));
__extension__ unsigned short strobe_test_guarded_semaphore __attribute__((unused))
    __attribute__((section(".probes")));

static volatile unsigned long sink;
static long n_calls, sleep_ms;
static unsigned long guarded_seen;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noipa)) void counted_call(unsigned long x) { sink += x; }

__attribute__((noipa)) void sleepy(long ms) {
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0) {}
}

static void *caller(void *arg) {
    unsigned long guarded = 0;
    for (long i = 0; i < n_calls; i++) {
        counted_call((unsigned long)i);
        lib_counted_call((unsigned long)i);
        USDT_PROBE1_SEMA(strobe_test, tick, i);
        if (strobe_test_guarded_semaphore) {
            guarded++;
            USDT_PROBE1_SEMA(strobe_test, guarded, i);
        }
    }
    pthread_mutex_lock(&lock);
    guarded_seen += guarded;
    pthread_mutex_unlock(&lock);
    return arg;
}

static void *sleeper(void *arg) {
    for (long i = 0; i < n_calls; i++) sleepy(sleep_ms);
    return arg;
}

static int run_threads(int threads, void *(*fn)(void *)) {
    pthread_t t[64];
    if (threads < 1 || threads > 64) return 2;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, fn, NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "calls") == 0) {
        int threads = atoi(argv[2]);
        n_calls = atol(argv[3]);
        if (run_threads(threads, caller)) return 2;
        printf("calls=%ld guarded=%lu\n", threads * n_calls, guarded_seen);
        return 0;
    }
    if (argc >= 5 && strcmp(argv[1], "sleep") == 0) {
        int threads = atoi(argv[2]);
        n_calls = atol(argv[3]);
        sleep_ms = atol(argv[4]);
        if (run_threads(threads, sleeper)) return 2;
        printf("slept=%ld\n", threads * n_calls);
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "exit") == 0) {
        counted_call(1);
        return atoi(argv[2]);
    }
    fprintf(stderr, "usage: probe_target calls THREADS N | sleep THREADS N MS | exit CODE\n");
    return 2;
}
