/* Eight worker threads, each burning about 150 ms of its own CPU time in a function of its
 * own, then the program prints one line and exits 0. `strobe record` must sample all 8. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#define NTHREADS 8

static volatile unsigned long sink[NTHREADS];

static double thread_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) static void *burn(void *arg) {
    long id = (long)arg;
    unsigned long x = (unsigned long)id;
    double start = thread_cpu_ms();
    while (thread_cpu_ms() - start < 150.0)
        for (int i = 0; i < 10000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink[id] = x;
    return NULL;
}

int main(void) {
    pthread_t t[NTHREADS];
    for (long i = 0; i < NTHREADS; i++)
        if (pthread_create(&t[i], NULL, burn, (void *)i) != 0) return 2;
    for (int i = 0; i < NTHREADS; i++) pthread_join(t[i], NULL);
    printf("%d threads done\n", NTHREADS);
    return 0;
}
