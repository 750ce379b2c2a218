// strobe-testprogs: -O2 -fno-omit-frame-pointer
// A stack about 20 frames deep (main -> deep x 18 -> leaf) built with frame pointers, so
// that both walkers can follow it: the stack crates/strobe-unwind's cost measurement
// (examples/unwind_preload.rs with STROBE_UNWIND_TIME=1) samples. Runs for about `argv[1]`
// ms of CPU (default 800).
#include <stdlib.h>
#include <time.h>

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

volatile unsigned long sink;

__attribute__((noinline)) unsigned long leaf(unsigned long x) {
    for (int i = 0; i < 200000; i++) x = x * 6364136223846793005UL + 1;
    return x;
}

__attribute__((noinline)) unsigned long deep(int n, unsigned long x) {
    unsigned long r = n == 0 ? leaf(x) : deep(n - 1, x + 1);
    sink = r;
    return r + 1;
}

int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 800;
    double end = cpu_ms() + ms;
    unsigned long acc = 0;
    while (cpu_ms() < end) acc += deep(17, acc);
    sink = acc;
    return 0;
}
