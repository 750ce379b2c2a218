// strobe-testprogs: -fno-omit-frame-pointer
/* A dynamically linked program that leaves strobe's agent behind: when started with
 * LD_PRELOAD set, it removes it from its environment and replaces its image with itself
 * (as a program that sanitizes its environment would), so the agent that loaded into the
 * first image is not in the second.
 *
 * usage: reexec_noagent [CPU_MS]   (default 1200)
 *
 * The second image spins: spin_a burns 2 ms of CPU time, spin_b 1 ms, until they ran
 * CPU_MS together; then it prints "spin_a_ns=... spin_b_ns=..." (CLOCK_THREAD_CPUTIME_ID
 * around each call). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

static int64_t cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void burn(int64_t ns, uint64_t seed) {
    int64_t end = cpu_now() + ns;
    uint64_t x = seed;
    do {
        for (int i = 0; i < 20000; i++)
            x = x * 6364136223846793005ull + 1442695040888963407ull;
        sink = x;
    } while (cpu_now() < end);
}

__attribute__((noinline)) void spin_a(void) { burn(2000000, 1); }
__attribute__((noinline)) void spin_b(void) { burn(1000000, 2); }

int main(int argc, char **argv) {
    if (getenv("LD_PRELOAD")) {
        unsetenv("LD_PRELOAD");
        execv("/proc/self/exe", argv);
        perror("execv");
        return 1;
    }
    long cpu_ms = argc > 1 ? atol(argv[1]) : 1200;
    int64_t a = 0, b = 0;
    while ((a + b) / 1000000 < cpu_ms) {
        int64_t t0 = cpu_now();
        spin_a();
        int64_t t1 = cpu_now();
        spin_b();
        int64_t t2 = cpu_now();
        a += t1 - t0;
        b += t2 - t1;
    }
    printf("spin_a_ns=%lld spin_b_ns=%lld\n", (long long)a, (long long)b);
    return 0;
}
