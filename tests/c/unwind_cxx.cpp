// strobe-testprogs: -O2 -fomit-frame-pointer
// C++ that throws and catches in a loop: main -> outer -> middle -> thrower, with the
// exception caught in outer. Samples land in libstdc++ and libgcc_s's unwinder (which run
// the same kind of unwind tables we read) as well as in the program. Runs for about
// `argv[1]` ms of CPU (default 800).
#include <cstdlib>
#include <ctime>
#include <stdexcept>

static double cpu_ms() {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

volatile unsigned long sink;

__attribute__((noinline)) void thrower(unsigned long x) {
    for (int i = 0; i < 2000; i++) x = x * 6364136223846793005UL + 1;
    sink = x;
    if (x & 1) throw std::runtime_error("odd");
    throw std::out_of_range("even");
}

__attribute__((noinline)) unsigned long middle(unsigned long x) {
    thrower(x);
    return x + 1;  // not reached
}

__attribute__((noinline)) unsigned long outer(unsigned long x) {
    try {
        return middle(x);
    } catch (const std::runtime_error &e) {
        return x + 3;
    } catch (const std::exception &e) {
        return x + 5;
    }
}

int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 800;
    double end = cpu_ms() + ms;
    unsigned long acc = 0;
    while (cpu_ms() < end) acc = outer(acc);
    sink = acc;
    return 0;
}
