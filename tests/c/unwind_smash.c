// strobe-testprogs: -O2
// Smashed frames: `smash` overwrites its own saved frame pointer and return address with
// garbage, spins, calls `beneath` (which spins as long, under the smashed frame), and puts
// them back before returning, so samples taken meanwhile see a stack no walker can follow
// past `smash`. They must end cleanly. Beside it main -> clean, a CPU loop on an intact
// stack. Runs for about `argv[1]` ms of CPU (default 600).
//
// Prints its own measurement on stdout at exit, as `key=value` pairs on one line:
//   smash_cpu_ns    CPU time inside the calls of smash (CLOCK_THREAD_CPUTIME_ID)
//   process_cpu_ns  the process's CPU time at the end of main (CLOCK_PROCESS_CPUTIME_ID)
// then the line `unwind_smash: every frame restored`, and exits with status `argv[2]`
// (default 0): output and status a profiler must pass through unchanged.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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

__attribute__((noinline)) unsigned long beneath(unsigned long x) {
    for (int i = 0; i < 200000; i++) x = x * 2862933555777941757UL + 3037000493UL;
    sink = x;
    return x;
}

// A frame pointer of its own, so that the saved rbp and return address are at known places.
__attribute__((noinline, optimize("no-omit-frame-pointer"))) void smash(uintptr_t garbage) {
    uintptr_t *fp = (uintptr_t *)__builtin_frame_address(0);
    uintptr_t saved_bp = fp[0], saved_ra = fp[1];
    fp[0] = garbage;
    fp[1] = garbage ^ 0x5a5a5a5a5a5a5a5aUL;
    __asm__ volatile("" ::: "memory");
    unsigned long x = garbage;
    for (int i = 0; i < 200000; i++) x = x * 6364136223846793005UL + 1;
    sink = beneath(x);
    __asm__ volatile("" ::: "memory");
    fp[0] = saved_bp;
    fp[1] = saved_ra;
    __asm__ volatile("" ::: "memory");
}

// Work on an intact stack.
__attribute__((noinline)) unsigned long clean(unsigned long x) {
    for (int i = 0; i < 200000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
    return x;
}

int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 600;
    int status = argc > 2 ? atoi(argv[2]) : 0;
    double end = cpu_ms() + ms;
    uintptr_t g = 0x9e3779b97f4a7c15UL;
    long long in_smash = 0;
    while (cpu_ms() < end) {
        g = g * 6364136223846793005UL + 1442695040888963407UL;
        long long t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        smash(g);
        in_smash += clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
        g = clean(g);
    }
    long long process = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    printf("smash_cpu_ns=%lld process_cpu_ns=%lld\n", in_smash, process);
    printf("unwind_smash: every frame restored\n");
    return status;
}
