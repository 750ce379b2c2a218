/* A program with a SIGTRAP handler of its own: it raises SIGTRAP 5 times while burning CPU
 * and counts its handler's calls. Under strobe (whose samples are SIGTRAPs) it must still
 * count exactly 5, and see its own handler when it asks for the disposition. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t calls;
static volatile unsigned long sink;

static void on_trap(int sig, siginfo_t *info, void *uc) {
    (void)sig;
    (void)info;
    (void)uc;
    calls++;
}

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_trap;
    sa.sa_flags = SA_SIGINFO;
    if (sigaction(SIGTRAP, &sa, NULL) != 0) return 2;
    struct sigaction now;
    if (sigaction(SIGTRAP, NULL, &now) != 0 || now.sa_sigaction != on_trap) {
        printf("disposition changed\n");
        return 3;
    }
    unsigned long x = 1;
    for (int r = 0; r < 5; r++) {
        double start = cpu_ms();
        while (cpu_ms() - start < 40)
            for (int i = 0; i < 10000; i++) x = x * 6364136223846793005UL + 1;
        raise(SIGTRAP);
    }
    sink = x;
    printf("handled %d of 5\n", (int)calls);
    return calls == 5 ? 0 : 1;
}
