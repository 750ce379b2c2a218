// strobe-testprogs: -O2 -fomit-frame-pointer -ldl
// Loads `argv[1]` (libunwind_dllib.so) with dlopen after start and runs its `dllib_work`
// for about `argv[2]` ms of CPU (default 800), closing and reopening the library every
// 100 ms so that samples land in a library loaded, unloaded and loaded again. Between
// loads main -> own_work runs a CPU loop of about 50 ms outside the library, so that
// run_lib holds about two thirds of the time.
//
// Prints its own measurement on stdout at exit, as `key=value` pairs on one line:
//   run_lib_cpu_ns  CPU time inside the calls of run_lib (CLOCK_THREAD_CPUTIME_ID)
//   process_cpu_ns  the process's CPU time at the end of main (CLOCK_PROCESS_CPUTIME_ID)
#include <dlfcn.h>
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

__attribute__((noinline)) unsigned long run_lib(unsigned long (*work)(unsigned long), double until) {
    unsigned long acc = 0;
    while (cpu_ms() < until) acc = work(acc);
    sink = acc;
    return acc + 1;
}

// Work outside the library.
__attribute__((noinline)) unsigned long own_work(unsigned long x) {
    for (int i = 0; i < 40000000; i++) x = x * 2862933555777941757UL + 3037000493UL;
    sink = x;
    return x;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: unwind_dlopen LIBRARY [MS]\n");
        return 2;
    }
    double ms = argc > 2 ? atof(argv[2]) : 800;
    double end = cpu_ms() + ms;
    unsigned long acc = 0;
    long long in_run_lib = 0;
    while (cpu_ms() < end) {
        void *h = dlopen(argv[1], RTLD_NOW);
        if (!h) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            return 1;
        }
        unsigned long (*work)(unsigned long) = (unsigned long (*)(unsigned long))dlsym(h, "dllib_work");
        double until = cpu_ms() + 100;
        long long t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        acc += run_lib(work, until < end ? until : end);
        in_run_lib += clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
        dlclose(h);
        acc = own_work(acc);
    }
    sink = acc;
    long long process = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    printf("run_lib_cpu_ns=%lld process_cpu_ns=%lld\n", in_run_lib, process);
    return 0;
}
