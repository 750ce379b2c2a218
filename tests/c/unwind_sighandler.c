// strobe-testprogs: -O2 -fomit-frame-pointer
// A program whose own signal handlers get sampled. `victim` runs a CPU loop and then
// raise(SIGUSR1), whose handler spins in `in_handler` for about as long (so samples land
// there, on top of the sigreturn frame and libc's pthread_kill); SIGALRM every 10 ms
// (ITIMER_REAL) interrupts whatever runs with a short handler (the kernel often delivers the
// profiling signal right at that handler's entry). A stack walk from a sample in a handler
// must cross the trampoline (`__restore_rt`) back into the interrupted code and reach
// main. Beside it main -> other, a CPU loop outside victim, so that victim (whose calls
// include the handler's time: raise returns after the handler ran) holds about two thirds
// of the time. Runs for about `argv[1]` ms of CPU (default 800).
//
// Prints its own measurement on stdout at exit, as `key=value` pairs on one line:
//   victim_cpu_ns      CPU time inside the calls of victim (CLOCK_THREAD_CPUTIME_ID)
//   in_handler_cpu_ns  CPU time inside the calls of in_handler, timed in the handler
//   process_cpu_ns     the process's CPU time at the end of main (CLOCK_PROCESS_CPUTIME_ID)
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static long long clock_ns(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

volatile unsigned long sink;
static long long in_handler_ns;

__attribute__((noinline)) void in_handler(void) {
    unsigned long x = sink;
    for (int i = 0; i < 200000; i++) x = x * 6364136223846793005UL + 1;
    sink = x;
}

static void on_usr1(int sig) {
    (void)sig;
    // clock_gettime is async-signal-safe.
    long long t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    in_handler();
    in_handler_ns += clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
    sink++;
}

static void on_alarm(int sig) {
    (void)sig;
    sink += 2;
}

__attribute__((noinline)) unsigned long victim(unsigned long x) {
    for (int i = 0; i < 200000; i++) x = x * 2862933555777941757UL + 3037000493UL;
    raise(SIGUSR1);
    return x;
}

// Work outside victim.
__attribute__((noinline)) unsigned long other(unsigned long x) {
    for (int i = 0; i < 200000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
    return x;
}

int main(int argc, char **argv) {
    double ms = argc > 1 ? atof(argv[1]) : 800;
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 10000}, {0, 10000}};
    setitimer(ITIMER_REAL, &it, NULL);
    double end = cpu_ms() + ms;
    unsigned long acc = 1;
    long long in_victim = 0;
    while (cpu_ms() < end) {
        long long t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        acc = victim(acc) + 1;
        in_victim += clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0;
        acc = other(acc);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    sink = acc;
    long long process = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    printf("victim_cpu_ns=%lld in_handler_cpu_ns=%lld process_cpu_ns=%lld\n", in_victim,
           in_handler_ns, process);
    return 0;
}
