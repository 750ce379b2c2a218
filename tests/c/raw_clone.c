// Burns MS milliseconds of CPU in a thread made with the raw clone system call (no
// pthread_create, as Go's runtime does without cgo), while main waits: a program strobe's
// agent cannot follow, to check that strobe says so instead of printing an empty profile.
//
//   raw_clone MS
#define _GNU_SOURCE
#include <linux/sched.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;
static volatile int done;
static double ms;

static unsigned long tcpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (unsigned long)t.tv_sec * 1000000000UL + (unsigned long)t.tv_nsec;
}

static int cloned(void *arg) {
    unsigned long end = tcpu() + (unsigned long)(ms * 1e6), x = 9;
    while (tcpu() < end)
        for (int i = 0; i < 500; i++) x = x * 6364136223846793005UL + 1;
    sink = x;
    done = 1;
    return 0;
}

int main(int argc, char **argv) {
    ms = argc > 1 ? atof(argv[1]) : 500;
    size_t size = 1 << 20;
    char *stack = malloc(size);
    int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM;
    if (clone(cloned, stack + size, flags, NULL) < 0) return 3;
    while (!done) usleep(1000);
    printf("done\n");
    return 0;
}
