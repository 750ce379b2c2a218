// strobe-testprogs: -O2 -fomit-frame-pointer
// A program whose own signal handlers get sampled. `victim` runs a CPU loop and then
// raise(SIGUSR1), whose handler spins in `in_handler` for about as long (so samples land
// there, on top of the sigreturn frame and libc's pthread_kill); SIGALRM every 10 ms
// (ITIMER_REAL) interrupts whatever runs with a short handler (the kernel often delivers the
// profiling signal right at that handler's entry). A stack walk from a sample in a handler
// must cross the trampoline (`__restore_rt`) back into the interrupted code and reach
// main. Runs for about `argv[1]` ms of CPU (default 800).
#include <signal.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

volatile unsigned long sink;

__attribute__((noinline)) void in_handler(void) {
    unsigned long x = sink;
    for (int i = 0; i < 200000; i++) x = x * 6364136223846793005UL + 1;
    sink = x;
}

static void on_usr1(int sig) {
    (void)sig;
    in_handler();
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
    while (cpu_ms() < end) acc = victim(acc) + 1;
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    sink = acc;
    return 0;
}
