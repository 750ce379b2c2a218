/* Probe points declared with include/strobe_probe.h, fired a known number of times.
 *
 * usage: probe_points [THREADS [ITERS]]   (defaults 4 and 10000; THREADS <= 16)
 *
 * Each thread fires per iteration: c_tick (2 args) once, c_six (6 args) once, and every
 * 10th iteration c_zero (no argument) and a scoped probe c_scope. So a run fires
 *   c_tick  THREADS*ITERS     c_six   THREADS*ITERS
 *   c_zero  THREADS*ITERS/10  c_scope THREADS*ITERS/10 entries and as many exits
 * c_never is declared but never reached. The program checks the arguments it passes
 * are what a consumer would see only through strobe; it prints one line and exits 0.
 * Linked against libstrobe_probe_c; probe_points_nolib is the same program without it
 * (the header's functions are weak), which must run unchanged. */
// strobe-testprogs: -lstrobe_probe_c
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "strobe_probe.h"

static long iters = 10000;
static volatile unsigned long sink;

__attribute__((noinline)) static void scoped_work(long i) {
    STROBE_PROBE_SCOPE(c_scope, i);
    for (int k = 0; k < 100; k++)
        sink += (unsigned long)k * (unsigned long)i;
}

__attribute__((noinline)) static void never(void) { STROBE_PROBE(c_never, 1); }

static void *worker(void *arg) {
    long t = (long)arg;
    for (long i = 0; i < iters; i++) {
        STROBE_PROBE(c_tick, t, i);
        STROBE_PROBE(c_six, 1, 2, 3, -4, (void *)&sink, i);
        if (i % 10 == 0) {
            STROBE_PROBE(c_zero);
            scoped_work(i);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    if (argc > 2)
        iters = atol(argv[2]);
    if (n < 1 || n > 16 || iters < 0) {
        fprintf(stderr, "usage: probe_points [THREADS(1-16) [ITERS]]\n");
        return 2;
    }
    if (argc > 3)
        never();
    pthread_t th[16];
    for (long t = 0; t < n; t++)
        pthread_create(&th[t], NULL, worker, (void *)t);
    for (int t = 0; t < n; t++)
        pthread_join(th[t], NULL);
    printf("probe_points: %d threads x %ld iterations, library %s\n", n, iters,
           STROBE_PROBE_AVAILABLE() ? "present" : "absent");
    return 0;
}
