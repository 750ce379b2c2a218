// strobe-testprogs: -static -fno-omit-frame-pointer
/* A statically linked program that measures its own time per function: strobe cannot
 * inject its agent into it, so `strobe record` profiles it in kernel mode.
 *
 * usage: kernel_spin [THREADS [CPU_MS [SLEEP_US]]]   (default 2 threads, 400 ms, 0)
 *
 * Each thread loops: spin_a burns 2 ms of the thread's CPU time, spin_b 1 ms, and, with
 * SLEEP_US, block_c sleeps SLEEP_US with a nanosleep system call made from its own code
 * (an inline `syscall`, so the instruction a switched-out thread left at is in block_c),
 * until the thread has run CPU_MS of spin_a and spin_b. It prints "ready PID" at start
 * and, at the end, its ground truth summed over the threads: CPU time in spin_a and
 * spin_b (CLOCK_THREAD_CPUTIME_ID around each call), wall time in block_c
 * (CLOCK_MONOTONIC around each call), the calls, and the times the threads left the CPU
 * around them (voluntary and involuntary switches, getrusage RUSAGE_THREAD before and
 * after each call): one a sleep, and more when a thread is preempted in block_c or a signal
 * makes the sleep start again. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long cpu_ms = 400, sleep_us = 0;
static volatile uint64_t sink;

struct truth {
    int64_t a_ns, b_ns, c_wall_ns, c_calls, c_switches;
};

static int64_t now(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Burns `ns` of this thread's CPU time, checking the clock every ~50 us of work. */
static void burn(int64_t ns, uint64_t seed) {
    int64_t end = now(CLOCK_THREAD_CPUTIME_ID) + ns;
    uint64_t x = seed;
    do {
        for (int i = 0; i < 20000; i++)
            x = x * 6364136223846793005ull + 1442695040888963407ull;
        sink = x;
    } while (now(CLOCK_THREAD_CPUTIME_ID) < end);
}

__attribute__((noinline)) void spin_a(void) { burn(2000000, 1); }
__attribute__((noinline)) void spin_b(void) { burn(1000000, 2); }

__attribute__((noinline)) void block_c(void) {
    struct timespec ts = {sleep_us / 1000000, (sleep_us % 1000000) * 1000};
    long ret;
    /* nanosleep(&ts, NULL), made here: a switched-out thread's user IP is in block_c. */
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "0"((long)SYS_nanosleep), "D"(&ts), "S"(0L)
                     : "rcx", "r11", "memory");
    (void)ret;
}

static void *worker(void *arg) {
    struct truth *t = arg;
    while ((t->a_ns + t->b_ns) / 1000000 < cpu_ms) {
        int64_t t0 = now(CLOCK_THREAD_CPUTIME_ID);
        spin_a();
        int64_t t1 = now(CLOCK_THREAD_CPUTIME_ID);
        spin_b();
        int64_t t2 = now(CLOCK_THREAD_CPUTIME_ID);
        t->a_ns += t1 - t0;
        t->b_ns += t2 - t1;
        if (sleep_us > 0) {
            struct rusage r0, r1;
            getrusage(RUSAGE_THREAD, &r0);
            int64_t w0 = now(CLOCK_MONOTONIC);
            block_c();
            t->c_wall_ns += now(CLOCK_MONOTONIC) - w0;
            getrusage(RUSAGE_THREAD, &r1);
            t->c_calls++;
            t->c_switches += (r1.ru_nvcsw + r1.ru_nivcsw) - (r0.ru_nvcsw + r0.ru_nivcsw);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    if (argc > 2)
        cpu_ms = atol(argv[2]);
    if (argc > 3)
        sleep_us = atol(argv[3]);
    if (threads < 1 || threads > 64)
        threads = 2;
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    pthread_t th[64];
    struct truth t[64] = {{0}};
    for (int i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, worker, &t[i]);
    struct truth sum = {0};
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
        sum.a_ns += t[i].a_ns;
        sum.b_ns += t[i].b_ns;
        sum.c_wall_ns += t[i].c_wall_ns;
        sum.c_calls += t[i].c_calls;
        sum.c_switches += t[i].c_switches;
    }
    printf("spin_a_ns=%lld spin_b_ns=%lld block_c_wall_ns=%lld block_c_calls=%lld "
           "block_c_switches=%lld threads=%d\n",
           (long long)sum.a_ns, (long long)sum.b_ns, (long long)sum.c_wall_ns,
           (long long)sum.c_calls, (long long)sum.c_switches, threads);
    return 0;
}
