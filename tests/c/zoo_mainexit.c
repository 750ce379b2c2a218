// The coverage zoo: main() starts WORKERS threads that each spend MS milliseconds of CPU
// in worker_spin(), then ends with pthread_exit while they go on (the process lives
// until the last thread ends). The last worker prints the truth.
//
//   zoo_mainexit WORKERS MS -> "worker_ns=N process_ns=N"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "zoo_common.h"

static unsigned long ms;
static _Atomic unsigned long worker_ns;
static _Atomic int left;

__attribute__((noinline)) unsigned long worker_spin(unsigned long ns) { return zoo_spin(ns, 7); }

static void *worker(void *arg) {
    atomic_fetch_add(&worker_ns, worker_spin(ms * 1000000UL));
    if (atomic_fetch_sub(&left, 1) == 1) {
        printf("worker_ns=%lu process_ns=%lu\n", (unsigned long)worker_ns,
               zoo_now(CLOCK_PROCESS_CPUTIME_ID));
        fflush(stdout);
    }
    return arg;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    int n = atoi(argv[1]);
    ms = strtoul(argv[2], 0, 10);
    left = n;
    for (int i = 0; i < n; i++) {
        pthread_t t;
        pthread_create(&t, 0, worker, 0);
        pthread_detach(t);
    }
    pthread_exit(0);
}
