// A function inlined into its caller: with `strobe report --inline` the samples in
// mix_step are its own, under outer_loop; without it they are outer_loop's.
// strobe-testprogs: -O2
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static volatile uint64_t sink;

static inline __attribute__((always_inline)) uint64_t mix_step(uint64_t x, uint64_t i) {
    for (int k = 0; k < 64; k++) x = (x ^ (x >> 13)) * 0x9E3779B97F4A7C15u + i + (uint64_t)k;
    return x;
}

__attribute__((noinline)) uint64_t outer_loop(uint64_t n) {
    uint64_t x = n;
    for (uint64_t i = 0; i < n; i++) x = mix_step(x, i);
    return x;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        sink += outer_loop(2000000);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < seconds);
    return 0;
}
