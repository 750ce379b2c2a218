/* The perf.data tests' multi-threaded target: four threads, each spinning in a function of
 * its own (lane_1 .. lane_4 doing 1 .. 4 units of work), while main waits for them. Their
 * samples interleave across CPUs, so a reader must order them as perf does.
 *
 * usage: perf_threads [UNITS]   (default 20; about 1.3 ms of CPU per unit) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static volatile unsigned long sink;
static long units = 20;

#define SPIN(n, k)                                                                           \
    do {                                                                                     \
        unsigned long x_ = (k);                                                              \
        for (unsigned long i_ = 0; i_ < (n); i_++) x_ = x_ * 6364136223846793005UL + (k);    \
        sink = x_;                                                                           \
    } while (0)

#define UNIT 1000000UL

__attribute__((noinline)) static void *lane_1(void *arg) { SPIN(1 * units * UNIT, 1); return arg; }
__attribute__((noinline)) static void *lane_2(void *arg) { SPIN(2 * units * UNIT, 3); return arg; }
__attribute__((noinline)) static void *lane_3(void *arg) { SPIN(3 * units * UNIT, 5); return arg; }
__attribute__((noinline)) static void *lane_4(void *arg) { SPIN(4 * units * UNIT, 7); return arg; }

int main(int argc, char **argv) {
    if (argc > 1) units = atol(argv[1]);
    void *(*lanes[4])(void *) = {lane_1, lane_2, lane_3, lane_4};
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        if (pthread_create(&t[i], NULL, lanes[i], NULL) != 0) return 2;
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("perf_threads: 4 threads, %ld units\n", units);
    return 0;
}
