// strobe-testprogs: -O2 -fomit-frame-pointer
// C++ that throws and catches in a loop: main -> outer -> middle -> thrower, with the
// exception caught in outer. Samples land in libstdc++ and libgcc_s's unwinder (which run
// the same kind of unwind tables we read) as well as in the program. Beside it main ->
// spin, a CPU loop outside outer, so that outer holds about two thirds of the time. Runs
// for about `argv[1]` ms of CPU (default 800).
//
// Prints its own measurement on stdout at exit, as `key=value` pairs on one line:
//   outer_cpu_ns    CPU time inside the calls of outer (CLOCK_THREAD_CPUTIME_ID around
//                   each batch of 64 calls: one call is too short to time alone)
//   process_cpu_ns  the process's CPU time at the end of main (CLOCK_PROCESS_CPUTIME_ID)
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <stdexcept>

static double cpu_ms() {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static long long clock_ns(clockid_t id) {
    timespec t;
    clock_gettime(id, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

volatile unsigned long sink;

__attribute__((noinline)) void thrower(unsigned long x) {
    for (int i = 0; i < 2000; i++) x = x * 6364136223846793005UL + 1;
    sink = x;
    if (x & 1) throw std::runtime_error("odd");
    throw std::out_of_range("even");
}

__attribute__((noinline)) unsigned long middle(unsigned long x) {
    thrower(x);
    return x + 1;  // not reached
}

__attribute__((noinline)) unsigned long outer(unsigned long x) {
    try {
        return middle(x);
    } catch (const std::runtime_error &e) {
        return x + 3;
    } catch (const std::exception &e) {
        return x + 5;
    }
}

// Work outside outer: a CPU loop about half as long as a batch of outer calls.
__attribute__((noinline)) unsigned long spin(unsigned long x) {
    for (int i = 0; i < 100000; i++) x = x * 2862933555777941757UL + 3037000493UL;
    sink = x;
    return x;
}

int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 800;
    double end = cpu_ms() + ms;
    unsigned long acc = 0;
    long long in_outer = 0;
    while (cpu_ms() < end) {
        long long t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        for (int k = 0; k < 64; k++) acc = outer(acc);
        in_outer += clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
        acc = spin(acc);
    }
    sink = acc;
    long long process = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    printf("outer_cpu_ns=%lld process_cpu_ns=%lld\n", in_outer, process);
    return 0;
}
