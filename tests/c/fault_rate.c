// A function whose page-fault rate is uniform over its whole run: touch_pages() touches
#define _GNU_SOURCE
// fresh anonymous pages one after another and nothing else; the mapping and unmapping
// (fault-free, and slow) happen in other functions. Windows of any length inside
// touch_pages() see one rate, so the report's faults/ms tests the window baseline alone,
// with no attribution effect. Prints the ground truth measured around every call.
//
//   fault_rate MS   -> "faults=N cpu_ns=N faults_per_ms=X"
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#define CHUNK (64UL << 20)

static unsigned long tcpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (unsigned long)t.tv_sec * 1000000000UL + (unsigned long)t.tv_nsec;
}

static unsigned long faults(void) {
    struct rusage r;
    getrusage(RUSAGE_THREAD, &r);
    return (unsigned long)(r.ru_minflt + r.ru_majflt);
}

__attribute__((noinline)) char *map_chunk(void) {
    char *p = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) abort();
    return p;
}

__attribute__((noinline)) void unmap_chunk(char *p) { munmap(p, CHUNK); }

__attribute__((noinline)) void touch_pages(char *p, unsigned long n) {
    for (unsigned long i = 0; i < n; i++) p[i * 4096] = (char)i;
}

int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 2000;
    unsigned long total_f = 0, total_ns = 0, end = tcpu() + (unsigned long)(ms * 1e6);
    while (tcpu() < end) {
        char *p = map_chunk();
        unsigned long pages = CHUNK / 4096;
        for (unsigned long at = 0; at < pages; at += 2048) {
            unsigned long f0 = faults(), t0 = tcpu();
            touch_pages(p + at * 4096, 2048);
            unsigned long t1 = tcpu(), f1 = faults();
            total_ns += t1 - t0;
            total_f += f1 - f0;
        }
        unmap_chunk(p);
    }
    printf("faults=%lu cpu_ns=%lu faults_per_ms=%.2f\n", total_f, total_ns, total_f / (total_ns / 1e6));
    return 0;
}
