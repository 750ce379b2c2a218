// Shared by the coverage zoo's programs (tests/c/zoo_*.c): CPU clocks and a busy loop
// that spins for a given amount of the calling thread's CPU time. Each program measures
// its own truth with these and prints it as key=value pairs.
#ifndef ZOO_COMMON_H
#define ZOO_COMMON_H
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

static volatile unsigned long zoo_sink;

static inline unsigned long zoo_now(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (unsigned long)t.tv_sec * 1000000000UL + (unsigned long)t.tv_nsec;
}

// Spins for `ns` of the calling thread's CPU time; returns the CPU time it took.
static inline unsigned long zoo_spin(unsigned long ns, unsigned long seed) {
    unsigned long t0 = zoo_now(CLOCK_THREAD_CPUTIME_ID), end = t0 + ns, x = seed | 1;
    while (zoo_now(CLOCK_THREAD_CPUTIME_ID) < end)
        for (int i = 0; i < 200; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    zoo_sink = x;
    return zoo_now(CLOCK_THREAD_CPUTIME_ID) - t0;
}

// CPU time (ns) of this process's reaped children and their reaped descendants.
static inline unsigned long zoo_children_ns(void) {
    struct rusage r;
    getrusage(RUSAGE_CHILDREN, &r);
    return (unsigned long)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1000000000UL +
           (unsigned long)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1000UL;
}
#endif
