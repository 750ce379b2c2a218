// strobe-testprogs: -no-pie -fno-pie -fno-omit-frame-pointer
/* A position-dependent (ET_EXEC) program: its symbols' addresses are absolute, so a uprobe
 * needs the segment arithmetic to find the file offset.
 *   probe_nopie N   calls nopie_call N times and prints "calls=N" */
#include <stdio.h>
#include <stdlib.h>

static volatile unsigned long sink;

__attribute__((noipa)) void nopie_call(unsigned long x) { sink += x; }

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10;
    for (long i = 0; i < n; i++) nopie_call((unsigned long)i);
    printf("calls=%ld\n", n);
    return 0;
}
