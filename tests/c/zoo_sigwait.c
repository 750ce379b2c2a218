// The coverage zoo: the common server design where every thread blocks every signal and
// one thread takes them with sigwait. main() blocks all signals, starts WORKERS threads
// (which inherit the mask) that each spend MS milliseconds of CPU in worker_spin(), spends
// MAIN_MS in main_work(), then waits for a SIGUSR1 the last worker sends it with sigwait,
// and joins them.
//
//   zoo_sigwait WORKERS MS MAIN_MS -> "worker_ns=N main_ns=N process_ns=N"
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include "zoo_common.h"

static unsigned long ms;
static _Atomic unsigned long worker_ns;
static _Atomic int left;
static pthread_t main_thread;

__attribute__((noinline)) unsigned long worker_spin(unsigned long ns) { return zoo_spin(ns, 3); }
__attribute__((noinline)) unsigned long main_work(unsigned long ns) { return zoo_spin(ns, 5); }

static void *worker(void *arg) {
    atomic_fetch_add(&worker_ns, worker_spin(ms * 1000000UL));
    if (atomic_fetch_sub(&left, 1) == 1) pthread_kill(main_thread, SIGUSR1);
    return arg;
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int n = atoi(argv[1]);
    ms = strtoul(argv[2], 0, 10);
    unsigned long main_ms = strtoul(argv[3], 0, 10);
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, 0);
    main_thread = pthread_self();
    left = n;
    pthread_t t[64];
    for (int i = 0; i < n && i < 64; i++) pthread_create(&t[i], 0, worker, 0);
    unsigned long main_ns = main_work(main_ms * 1000000UL);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    int sig = 0;
    sigwait(&usr1, &sig);
    for (int i = 0; i < n && i < 64; i++) pthread_join(t[i], 0);
    printf("worker_ns=%lu main_ns=%lu process_ns=%lu\n", (unsigned long)worker_ns, main_ns,
           zoo_now(CLOCK_PROCESS_CPUTIME_ID));
    return sig == SIGUSR1 ? 0 : 1;
}
