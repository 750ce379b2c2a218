// The coverage zoo: a process that spends MS milliseconds of CPU in spin_work() and
// prints its own truth (for shell and make cases, where it runs as one of many
// processes).
//
//   zoo_spin MS -> "spin_ns=N process_ns=N"
#include <stdlib.h>
#include "zoo_common.h"

__attribute__((noinline)) unsigned long spin_work(unsigned long ns) { return zoo_spin(ns, 19); }

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    unsigned long ns = spin_work(strtoul(argv[1], 0, 10) * 1000000UL);
    printf("spin_ns=%lu process_ns=%lu\n", ns, zoo_now(CLOCK_PROCESS_CPUTIME_ID));
    return 0;
}
