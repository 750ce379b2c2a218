// strobe-testprogs: -fno-omit-frame-pointer
/* A dynamically linked program that leaves strobe's agent behind: its first image
 * replaces itself with itself through the raw execve system call (as a sandbox or a
 * program with its own syscall layer would), with LD_PRELOAD taken out of the
 * environment it passes, so no library function sees the exec and the agent that loaded
 * into the first image is not in the second.
 *
 * A raw execve bypasses the agent's exec wrappers, which stop the thread's sampling
 * first; an overflow of its sampling timer during the system call raises a SIGTRAP that
 * the kernel delivers to the new image (a documented limit of agent mode). The first image
 * blocks SIGTRAP around the call and the second takes such a signal off its queue
 * (sigtimedwait) before it unblocks it, so the test exercises the floor, not that race.
 *
 * usage: reexec_noagent [CPU_MS]   (default 1200)
 *
 * The second image spins: spin_a burns 2 ms of CPU time, spin_b 1 ms, until they ran
 * CPU_MS together; then it prints "spin_a_ns=... spin_b_ns=..." (CLOCK_THREAD_CPUTIME_ID
 * around each call). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

static int64_t cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void burn(int64_t ns, uint64_t seed) {
    int64_t end = cpu_now() + ns;
    uint64_t x = seed;
    do {
        for (int i = 0; i < 20000; i++)
            x = x * 6364136223846793005ull + 1442695040888963407ull;
        sink = x;
    } while (cpu_now() < end);
}

__attribute__((noinline)) void spin_a(void) { burn(2000000, 1); }
__attribute__((noinline)) void spin_b(void) { burn(1000000, 2); }

int main(int argc, char **argv) {
    extern char **environ;
    if (!getenv("REEXEC_NOAGENT_AGAIN")) {
        static char *envp[4096];
        size_t n = 0;
        for (char **e = environ; *e && n + 2 < sizeof envp / sizeof *envp; e++)
            if (strncmp(*e, "LD_PRELOAD=", 11) != 0)
                envp[n++] = *e;
        envp[n++] = "REEXEC_NOAGENT_AGAIN=1";
        envp[n] = NULL;
        sigset_t trap;
        sigemptyset(&trap);
        sigaddset(&trap, SIGTRAP);
        sigprocmask(SIG_BLOCK, &trap, NULL);
        syscall(SYS_execve, "/proc/self/exe", argv, envp);
        perror("execve");
        return 1;
    }
    sigset_t trap;
    sigemptyset(&trap);
    sigaddset(&trap, SIGTRAP);
    struct timespec none = {0, 0};
    while (sigtimedwait(&trap, NULL, &none) == SIGTRAP)
        ;
    sigprocmask(SIG_UNBLOCK, &trap, NULL);
    long cpu_ms = argc > 1 ? atol(argv[1]) : 1200;
    int64_t a = 0, b = 0;
    while ((a + b) / 1000000 < cpu_ms) {
        int64_t t0 = cpu_now();
        spin_a();
        int64_t t1 = cpu_now();
        spin_b();
        int64_t t2 = cpu_now();
        a += t1 - t0;
        b += t2 - t1;
    }
    printf("spin_a_ns=%lld spin_b_ns=%lld\n", (long long)a, (long long)b);
    return 0;
}
