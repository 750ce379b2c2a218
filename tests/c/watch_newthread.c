/* Threads whose start routine writes a global as its very first instruction, for
 * `strobe watch --thread`: a watcher that arms a thread only after it has started misses
 * these writes.
 *
 * usage: watch_newthread [THREADS]   (default 20)
 *
 * Thread i (1-based, created and joined one after another) stores i into `first_word`
 * and returns. main prints "threads=THREADS last=VALUE". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

volatile long first_word;

/* The store is the routine's first instruction (after endbr64 where CET is on). */
__attribute__((noinline)) static void *first_write(void *arg) {
    first_word = (long)arg;
    return NULL;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 20;
    if (n < 1) return 2;
    for (long i = 1; i <= n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, first_write, (void *)i) != 0) return 1;
        pthread_join(t, NULL);
    }
    printf("threads=%ld last=%ld\n", n, first_word);
    return 0;
}
