// strobe-testprogs: -O2 -fomit-frame-pointer
// The stack-walk target of crates/strobe-unwind's program tests: main -> a -> b, built
// without frame pointers, where b maps, touches and unmaps a page (samples land in libc's
// munmap, which has no frame pointer either) and runs a CPU loop. Runs for about
// `argv[1]` milliseconds of CPU time (default 800).
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
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

int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 800;
    double end = cpu_ms() + ms;
    unsigned long acc = 0;
    while (cpu_ms() < end) acc += a(acc);
    sink = acc;
    return 0;
}
