// Two functions with a known split of the CPU time (hot_a twice the iterations of hot_b;
// a round of both takes about 0.3 ms, far less than a sampling period and its jitter, so
// samples do not lock onto the rounds' phase),
// for naming code that has lost its symbols: the tests strip a copy (names from the
// .eh_frame FDEs), add MiniDebugInfo to another, and keep the debug file apart by build id.
// Prints each function's link-time address (`hot_a 0x1139`), runs for about the seconds of
// CPU time given (default 1: CPU time, so that a loaded machine does not cut the samples a run
// gives), and prints hot_a's share of the CPU time the two took, measured around each
// call with the thread's CPU clock (`share_a 0.667`): the ground truth.
#define _GNU_SOURCE
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile uint64_t sink;

__attribute__((noinline)) static uint64_t hot_a(uint64_t n) {
    uint64_t x = n;
    for (uint64_t i = 0; i < n; i++) x = x * 6364136223846793005u + i;
    return x;
}

__attribute__((noinline)) static uint64_t hot_b(uint64_t n) {
    uint64_t x = n;
    for (uint64_t i = 0; i < n; i++) x = (x ^ (x >> 7)) * 2862933555777941757u + i;
    return x;
}

static int base_of(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    *(uintptr_t *)data = info->dlpi_addr; // the main program comes first
    return 1;
}

static double clock_s(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    uintptr_t base = 0;
    dl_iterate_phdr(base_of, &base);
    printf("hot_a %#lx\nhot_b %#lx\n", (unsigned long)((uintptr_t)hot_a - base),
           (unsigned long)((uintptr_t)hot_b - base));
    fflush(stdout);
    double end = clock_s(CLOCK_THREAD_CPUTIME_ID) + seconds, in_a = 0, in_b = 0;
    while (clock_s(CLOCK_THREAD_CPUTIME_ID) < end) {
        double t0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        sink += hot_a(100000);
        double t1 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        sink += hot_b(50000);
        double t2 = clock_s(CLOCK_THREAD_CPUTIME_ID);
        in_a += t1 - t0;
        in_b += t2 - t1;
    }
    printf("share_a %.4f\n", in_a / (in_a + in_b));
    return 0;
}
