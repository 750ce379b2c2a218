// The coverage zoo: THREADS threads that each spend MS ms of CPU in quiet_spin(), reading
// their CPU clock only every few milliseconds (a program that makes few system calls, so
// that a tracer such as strace, which stops it at each one, barely slows it). Prints the
// truth once every thread is done.
//
//   zoo_quiet THREADS MS -> "quiet_ns=N process_ns=N"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "zoo_common.h"

static unsigned long ms;
static _Atomic unsigned long quiet_ns;

__attribute__((noinline)) unsigned long quiet_spin(unsigned long ns) {
    unsigned long t0 = zoo_now(CLOCK_THREAD_CPUTIME_ID), x = 11;
    while (zoo_now(CLOCK_THREAD_CPUTIME_ID) < t0 + ns)
        for (int i = 0; i < 2000000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    zoo_sink = x;
    return zoo_now(CLOCK_THREAD_CPUTIME_ID) - t0;
}

static void *worker(void *arg) {
    quiet_ns += quiet_spin(ms * 1000000UL);
    return arg;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int n = atoi(argv[1]);
    ms = strtoul(argv[2], 0, 10);
    pthread_t t[64];
    if (n < 1 || n > 64) return 2;
    for (int i = 0; i < n; i++) pthread_create(&t[i], 0, worker, 0);
    for (int i = 0; i < n; i++) pthread_join(t[i], 0);
    printf("quiet_ns=%lu process_ns=%lu\n", (unsigned long)quiet_ns,
           zoo_now(CLOCK_PROCESS_CPUTIME_ID));
    return 0;
}
