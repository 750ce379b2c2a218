// strobe-testprogs: -fno-omit-frame-pointer -lwatchlib
/* Writes globals of a shared library (tests/c/watchlib.c) from threads, for strobe watch.
 *
 * usage: watch_libuser [THREADS [WRITES]]   (defaults 2, 100; THREADS <= 8)
 *
 * Thread i calls lib_bump(i * 1000000, WRITES), which stores i * 1000000 + k into the
 * library's lib_counter for k = 1..WRITES. main prints "writes=THREADS*WRITES". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

void lib_bump(long base, long n);

static long writes = 100;

static void *worker(void *arg) {
    lib_bump((long)arg * 1000000, writes);
    return NULL;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 2;
    if (argc > 2) writes = atol(argv[2]);
    if (n < 1 || n > 8 || writes < 0) return 2;
    pthread_t t[8];
    /* One thread at a time: the test checks every new value in order per thread. */
    for (long i = 0; i < n; i++) {
        pthread_create(&t[i], NULL, worker, (void *)i);
        pthread_join(t[i], NULL);
    }
    printf("writes=%ld\n", n * writes);
    return 0;
}
