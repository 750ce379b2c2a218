// strobe-testprogs: -O2 -fomit-frame-pointer
// The stack-walk target of crates/strobe-unwind's program tests and of strobe's stacks
// tests: main -> a -> b, built without frame pointers, where b maps, touches and unmaps
// pages (samples land in libc's mmap, memset and munmap, which have no frame pointer
// either) and runs a CPU loop; beside it main -> c, a CPU loop outside a, so that a holds
// about two thirds of the time rather than all of it. Runs for about `argv[1]`
// milliseconds of CPU time (default 800).
//
// Prints its own measurement on stdout at exit, as `key=value` pairs on one line:
//   a_cpu_ns        CPU time inside the calls of a (CLOCK_THREAD_CPUTIME_ID around each)
//   process_cpu_ns  the process's CPU time at the end of main (CLOCK_PROCESS_CPUTIME_ID)
//   loops           loops of main (each calls a and c once: a fixed amount of work)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static long long clock_ns(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

volatile unsigned long sink;

__attribute__((noinline)) unsigned long b(unsigned long seed) {
    unsigned long x = seed;
    for (int round = 0; round < 64; round++) {
        char *p = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) abort();
        memset(p, (int)x, 1 << 16);
        x += (unsigned char)p[round];
        munmap(p, 1 << 16);
    }
    for (int i = 0; i < 20000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    return x;
}

__attribute__((noinline)) unsigned long a(unsigned long seed) {
    unsigned long r = b(seed ^ 0x5bd1e995);
    sink = r;
    return r + 1;
}

// Work outside a: a CPU loop about half as long as a call of a.
__attribute__((noinline)) unsigned long c(unsigned long x) {
    for (int i = 0; i < 1200000; i++) x = x * 2862933555777941757UL + 3037000493UL;
    sink = x;
    return x;
}

int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 800;
    double end = cpu_ms() + ms;
    unsigned long acc = 0;
    long long in_a = 0, calls = 0;
    while (cpu_ms() < end) {
        long long t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        acc += a(acc);
        in_a += clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
        calls++;
        acc += c(acc);
    }
    sink = acc;
    long long process = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    printf("a_cpu_ns=%lld process_cpu_ns=%lld loops=%lld\n", in_a, process, calls);
    return 0;
}
