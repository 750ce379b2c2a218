/* The perf.data tests' single-threaded target: its time goes to functions of its own, in
 * fixed proportions per round (work_a 1 unit, work_b 2, leaf 1 through outer -> middle ->
 * leaf), and fault_pages takes fresh page faults (for page-faults counters). No libc
 * call sits in a hot loop, so every sample names a function of this file, ld.so's startup
 * or the kernel. Built with frame pointers so `perf record -g` unwinds it.
 *
 * usage: perf_mix [ROUNDS]   (default 40; about 4 ms of CPU each) */
// strobe-testprogs: -fno-omit-frame-pointer
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

static volatile unsigned long sink;

#define SPIN(n, k)                                                                           \
    do {                                                                                     \
        unsigned long x_ = (k);                                                              \
        for (unsigned long i_ = 0; i_ < (n); i_++) x_ = x_ * 6364136223846793005UL + (k);    \
        sink = x_;                                                                           \
    } while (0)

#define UNIT 1000000UL

__attribute__((noinline)) static void work_a(void) { SPIN(UNIT, 1); }
__attribute__((noinline)) static void work_b(void) { SPIN(2 * UNIT, 3); }
__attribute__((noinline)) static void leaf(void) { SPIN(UNIT, 5); }

__attribute__((noinline)) static void middle(void) {
    leaf();
    sink++;
}

__attribute__((noinline)) static void outer(void) {
    middle();
    sink++;
}

__attribute__((noinline)) static void fault_pages(long pages) {
    char *p = mmap(NULL, (size_t)pages * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) exit(2);
    for (long i = 0; i < pages; i++) p[i * 4096] = (char)i;
    sink += (unsigned long)p[4096];
    munmap(p, (size_t)pages * 4096);
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 40;
    for (long r = 0; r < rounds; r++) {
        work_a();
        work_b();
        outer();
        fault_pages(64);
    }
    printf("perf_mix: %ld rounds\n", rounds);
    return 0;
}
