/* Spends its time reading the clock: on kernels whose clocksource the vDSO can read
 * (tsc, kvm-clock), almost every sample lands in the vDSO's clock_gettime.
 *
 * usage: clock_loop [CALLS]   (default 3000000) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 3000000;
    unsigned long s = 0;
    struct timespec ts;
    for (long i = 0; i < n; i++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        s += (unsigned long)ts.tv_nsec;
    }
    printf("clock_loop: %ld calls (%lu)\n", n, s & 1);
    return 0;
}
