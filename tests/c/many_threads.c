// THREADS threads alive at once: each spins SPIN_US microseconds of CPU in many_work(),
// then waits at a barrier until all have started and spun, then exits. Prints its own
// peak resident memory (VmHWM) and "done".
//
//   many_threads THREADS SPIN_US
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_barrier_t barrier;
static long spin_us;
static volatile unsigned long sink;

static unsigned long tcpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (unsigned long)t.tv_sec * 1000000000UL + (unsigned long)t.tv_nsec;
}

__attribute__((noinline)) void many_work(void) {
    unsigned long end = tcpu() + (unsigned long)spin_us * 1000, x = 5;
    while (tcpu() < end)
        for (int i = 0; i < 100; i++) x = x * 6364136223846793005UL + 1;
    sink = x;
}

static void *run(void *arg) {
    many_work();
    pthread_barrier_wait(&barrier);
    return arg;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000;
    spin_us = argc > 2 ? atol(argv[2]) : 200;
    pthread_t *t = calloc((size_t)n, sizeof *t);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 << 10);
    pthread_barrier_init(&barrier, NULL, (unsigned)n + 1);
    long made = 0;
    for (; made < n; made++)
        if (pthread_create(&t[made], &attr, run, NULL) != 0) break;
    if (made < n) {
        fprintf(stderr, "only %ld threads could be created\n", made);
        return 4;
    }
    pthread_barrier_wait(&barrier);
    for (long i = 0; i < n; i++) pthread_join(t[i], NULL);
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) printf("vm_hwm_kb=%ld\n", atol(line + 6));
    if (f) fclose(f);
    printf("done threads=%ld\n", n);
    return 0;
}
