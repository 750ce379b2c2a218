/* Blocking system calls that a signal would cut short with EINTR (SA_RESTART does
 * not restart them): nanosleep, ppoll and select with short timeouts, between bursts
 * of CPU work, on two threads.
 *
 * usage: slow_syscalls [ITERS]   (default 3000 per thread)
 *
 * Prints "eintr 0 of N" and exits 0 when no call returned EINTR; otherwise says how
 * many did and exits 1. Under `strobe record` with a short period, sampling overflows
 * land while the threads are in these calls; perf's sigtrap is raised on the way back
 * to user space, so they must never see EINTR. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/select.h>
#include <time.h>

static long iters = 3000;
static volatile unsigned long sink;

static void *worker(void *arg) {
    long eintr = 0;
    (void)arg;
    for (long i = 0; i < iters; i++) {
        for (int k = 0; k < 20000; k++)
            sink += (unsigned long)k;
        struct timespec ts = {0, 20000};
        if (nanosleep(&ts, NULL) != 0 && errno == EINTR)
            eintr++;
        if (ppoll(NULL, 0, &ts, NULL) < 0 && errno == EINTR)
            eintr++;
        struct timeval tv = {0, 20};
        if (select(0, NULL, NULL, NULL, &tv) < 0 && errno == EINTR)
            eintr++;
    }
    return (void *)eintr;
}

int main(int argc, char **argv) {
    if (argc > 1)
        iters = atol(argv[1]);
    pthread_t th[2];
    for (int t = 0; t < 2; t++)
        pthread_create(&th[t], NULL, worker, NULL);
    long eintr = 0;
    for (int t = 0; t < 2; t++) {
        void *r;
        pthread_join(th[t], &r);
        eintr += (long)r;
    }
    printf("eintr %ld of %ld\n", eintr, 2 * 3 * iters);
    return eintr != 0;
}
