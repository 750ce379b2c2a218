/* A minimal multi-threaded program: N threads (argv[1], default 4) each spin for a while
 * in a function of their own, then the program prints one line and exits 0.
 * Used to check that the build of test programs works and that targets run unchanged. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void *spin(void *arg) {
    unsigned long x = (unsigned long)arg;
    for (unsigned long i = 0; i < 20000000UL; i++)
        x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 4;
    pthread_t t[64];
    if (n < 1 || n > 64) return 2;
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, spin, (void *)(long)i);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    printf("hello from %d threads\n", n);
    return 0;
}
