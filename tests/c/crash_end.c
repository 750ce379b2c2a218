// Ends in a chosen way after spinning MS milliseconds of CPU in spin(): the target of
// strobe's test that samples outlive the target.
//
//   crash_end exit|_exit|kill|abort|segv MS
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static unsigned long cpu_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (unsigned long)t.tv_sec * 1000000000UL + (unsigned long)t.tv_nsec;
}

__attribute__((noinline)) void spin(double ms) {
    unsigned long end = cpu_ns() + (unsigned long)(ms * 1e6), x = 3;
    while (cpu_ns() < end)
        for (int i = 0; i < 500; i++) x = x * 6364136223846793005UL + 1;
    sink = x;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: crash_end exit|_exit|kill|abort|segv MS\n");
        return 2;
    }
    spin(atof(argv[2]));
    const char *how = argv[1];
    if (!strcmp(how, "exit")) exit(0);
    if (!strcmp(how, "_exit")) _exit(0);
    if (!strcmp(how, "kill")) kill(getpid(), SIGKILL);
    if (!strcmp(how, "abort")) abort();
    if (!strcmp(how, "segv")) {
        signal(SIGSEGV, SIG_DFL);
        *(volatile int *)(unsigned long)sink = 1; // an unmapped address (sink is a hash)
        raise(SIGSEGV);
    }
    return 3;
}
