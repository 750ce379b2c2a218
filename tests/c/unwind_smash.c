// strobe-testprogs: -O2
// Smashed frames: `smash` overwrites its own saved frame pointer and return address with
// garbage, spins, and puts them back before returning, so samples taken while it spins see
// a stack no walker can follow past `smash`. They must end cleanly. Runs for about
// `argv[1]` ms of CPU (default 600).
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

volatile unsigned long sink;

// A frame pointer of its own, so that the saved rbp and return address are at known places.
__attribute__((noinline, optimize("no-omit-frame-pointer"))) void smash(uintptr_t garbage) {
    uintptr_t *fp = (uintptr_t *)__builtin_frame_address(0);
    uintptr_t saved_bp = fp[0], saved_ra = fp[1];
    fp[0] = garbage;
    fp[1] = garbage ^ 0x5a5a5a5a5a5a5a5aUL;
    __asm__ volatile("" ::: "memory");
    unsigned long x = garbage;
    for (int i = 0; i < 200000; i++) x = x * 6364136223846793005UL + 1;
    sink = x;
    __asm__ volatile("" ::: "memory");
    fp[0] = saved_bp;
    fp[1] = saved_ra;
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 600;
    double end = cpu_ms() + ms;
    uintptr_t g = 0x9e3779b97f4a7c15UL;
    while (cpu_ms() < end) {
        g = g * 6364136223846793005UL + 1442695040888963407UL;
        smash(g);
    }
    return 0;
}
