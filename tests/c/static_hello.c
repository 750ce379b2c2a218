// strobe-testprogs: -static
/* A statically linked program: strobe cannot inject its agent into it (no dynamic loader,
 * so no LD_PRELOAD) and must say so before launching anything.
 *
 *   static_hello [MS]
 *
 * Prints a line; with MS, first spins MS milliseconds of its own CPU time (so that a
 * recording of a shell that runs it has samples of it) and then prints its CPU time:
 * `process_ns=N`. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc > 1) {
        double until = cpu_ms() + atof(argv[1]);
        volatile unsigned long x = 1;
        while (cpu_ms() < until)
            for (int i = 0; i < 10000; i++)
                x = x * 6364136223846793005UL + 1;
    }
    printf("hello from a static binary\n");
    if (argc > 1)
        printf("process_ns=%.0f\n", cpu_ms() * 1e6);
    return 0;
}
