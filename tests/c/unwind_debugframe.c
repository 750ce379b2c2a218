// strobe-testprogs: -O2 -fomit-frame-pointer -fno-asynchronous-unwind-tables -fno-unwind-tables
// The unwind_nofp shape (main -> a -> b, b mapping and unmapping pages and running a CPU
// loop) built so that the program's own functions have no .eh_frame entries, only the
// .debug_frame that -g writes into the file: a walk must read that from the file.
// Runs for about `argv[1]` ms of CPU (default 800).
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
    for (int round = 0; round < 16; round++) {
        char *p = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) abort();
        memset(p, (int)x, 1 << 16);
        x += (unsigned char)p[round];
        munmap(p, 1 << 16);
    }
    for (int i = 0; i < 200000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
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
