// strobe-testprogs: -O2 -fomit-frame-pointer -ldl
// Loads `argv[1]` (libunwind_dllib.so) with dlopen after start and runs its `dllib_work`
// for about `argv[2]` ms of CPU (default 800), closing and reopening the library every
// 100 ms so that samples land in a library loaded, unloaded and loaded again.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

volatile unsigned long sink;

__attribute__((noinline)) unsigned long run_lib(unsigned long (*work)(unsigned long), double until) {
    unsigned long acc = 0;
    while (cpu_ms() < until) acc = work(acc);
    sink = acc;
    return acc + 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: unwind_dlopen LIBRARY [MS]\n");
        return 2;
    }
    double ms = argc > 2 ? atof(argv[2]) : 800;
    double end = cpu_ms() + ms;
    unsigned long acc = 0;
    while (cpu_ms() < end) {
        void *h = dlopen(argv[1], RTLD_NOW);
        if (!h) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            return 1;
        }
        unsigned long (*work)(unsigned long) = (unsigned long (*)(unsigned long))dlsym(h, "dllib_work");
        double until = cpu_ms() + 100;
        acc += run_lib(work, until < end ? until : end);
        dlclose(h);
    }
    sink = acc;
    return 0;
}
