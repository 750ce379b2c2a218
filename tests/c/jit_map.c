// A tiny JIT, as a profiler meets one: it copies a counting loop into two executable
// anonymous regions, names the first in /tmp/perf-PID.map and the second in a jitdump
// file (/tmp/jit-PID.dump, mapped executable as perf expects), and runs each for the same
// number of iterations, alternating in rounds far shorter than a sampling period, for
// about the seconds given (default 1).
// Prints "ready" when the code is in place.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

// mov rax, rdi; 1: dec rax; jnz 1b; ret
static const unsigned char LOOP[] = {0x48, 0x89, 0xf8, 0x48, 0xff, 0xc8, 0x75, 0xfb, 0xc3};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void put(FILE *f, const void *p, size_t n) { fwrite(p, 1, n, f); }

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.0;
    unsigned char *a = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    unsigned char *b = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED || b == MAP_FAILED) return 1;
    memcpy(a, LOOP, sizeof LOOP);
    memcpy(b, LOOP, sizeof LOOP);
    pid_t pid = getpid();
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", pid);
    FILE *map = fopen(path, "w");
    if (!map) return 2;
    fprintf(map, "%lx %zx jit_loop_perfmap\n", (unsigned long)(uintptr_t)a, sizeof LOOP);
    fclose(map);

    snprintf(path, sizeof path, "/tmp/jit-%d.dump", pid);
    FILE *dump = fopen(path, "w+");
    if (!dump) return 3;
    uint32_t h32[] = {0x4A695444, 1, 40, 62, 0, (uint32_t)pid};
    uint64_t ts = now_ns(), flags = 0;
    put(dump, h32, sizeof h32);
    put(dump, &ts, 8);
    put(dump, &flags, 8);
    const char name[] = "jit_loop_jitdump";
    uint32_t rec[] = {0, (uint32_t)(16 + 8 + 8 * 4 + sizeof name + sizeof LOOP)};
    put(dump, rec, sizeof rec);
    put(dump, &ts, 8);
    uint32_t ids[] = {(uint32_t)pid, (uint32_t)syscall(SYS_gettid)};
    put(dump, ids, sizeof ids);
    uint64_t addr = (uintptr_t)b, size = sizeof LOOP, index = 1;
    put(dump, &addr, 8); // vma
    put(dump, &addr, 8); // code_addr
    put(dump, &size, 8);
    put(dump, &index, 8);
    put(dump, name, sizeof name);
    put(dump, LOOP, sizeof LOOP);
    fflush(dump);
    // perf finds a jitdump file through an executable mapping of it.
    void *marker = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fileno(dump), 0);
    (void)marker;
    printf("ready\n");
    fflush(stdout);

    uint64_t (*fa)(uint64_t) = (uint64_t (*)(uint64_t))(void *)a;
    uint64_t (*fb)(uint64_t) = (uint64_t (*)(uint64_t))(void *)b;
    uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
    while (now_ns() < end) {
        fa(200000);
        fb(200000);
    }
    fclose(dump);
    return 0;
}
