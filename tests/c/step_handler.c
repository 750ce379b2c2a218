/* Counts, one instruction at a time, the user-space instructions a window carries that are
 * not the target's: from the sampler handler's last system call (the group read that
 * starts a window) to its `rt_sigreturn`, both included. A hardware `instructions`
 * leader counts them in every window (at perf_event_paranoid 2 it counts user space
 * only); this VM has no PMU, so they are counted here by single-stepping with ptrace.
 *
 *   step_handler spin SECONDS     prints "pid=N", then spins for SECONDS of wall time
 *   step_handler trace PID        attaches to PID (a `spin` under `strobe record`),
 *                                 single-steps one window-start handler and prints
 *                                 "handler steps=S lead=L tail=T", where tail counts the
 *                                 instructions after the read that starts the window up
 *                                 to and including the rt_sigreturn `syscall`, and lead
 *                                 those after the ioctl that enables the group up to and
 *                                 including that read's `syscall` (the ioctl is an
 *                                 enable or, for a one-shot window, a refresh); then
 *                                 kills PID
 *
 * One handler per process: a single-step trap taken while SIGTRAP is blocked (inside a
 * SIGTRAP handler) is forced on the task, and the kernel then resets SIGTRAP's
 * disposition to the default, so the agent's next overflow would end the process.
 *
 * x86-64 only (it decodes `syscall`); elsewhere it prints "unsupported" and exits 0.
 * Exits 1 when ptrace fails, 2 on bad usage. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TRAP_PERF_CODE 6
#define IOC_ENABLE 0x2400
#define IOC_REFRESH 0x2402
#define NR_READ 0
#define NR_IOCTL 16
#define NR_RT_SIGRETURN 15
#define MAX_STEPS 2000000L

static volatile uint64_t sink;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int spin(double seconds) {
    printf("pid=%d\n", getpid());
    fflush(stdout);
    double end = now_s() + seconds;
    while (now_s() < end)
        for (int i = 0; i < 1000; i++) sink = sink * 6364136223846793005ULL + 1;
    return 0;
}

#if defined(__x86_64__)
static void die(const char *what) {
    fprintf(stderr, "step_handler: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* Waits for the tracee's next stop; returns the stop signal (0 when it exited, -1 for a
 * ptrace event stop, which is no signal). */
static int wait_stop(pid_t pid) {
    int st;
    if (waitpid(pid, &st, __WALL) < 0) die("waitpid");
    if (WIFEXITED(st) || WIFSIGNALED(st)) return 0;
    if (!WIFSTOPPED(st) || (st >> 16) != 0) return -1;
    return WSTOPSIG(st);
}

/* Whether the instruction at `rip` is `syscall` (0f 05). */
static int at_syscall(pid_t pid, uint64_t rip) {
    errno = 0;
    long w = ptrace(PTRACE_PEEKTEXT, pid, (void *)rip, NULL);
    if (errno) return 0;
    return (w & 0xffff) == 0x050f;
}

/* Single-steps one handler from its delivery; prints its counts when it was a window
 * start. Returns 1 when it counted one, 0 for another handler, -1 on a surprise. */
static int step_one(pid_t pid) {
    long steps = 0, lead = -1, tail = -1;
    int enabled = 0, reading = 0;
    long read_at = -1, enable_at = -1;
    int sig = SIGTRAP; /* the first step delivers the perf signal */
    for (;;) {
        if (ptrace(PTRACE_SINGLESTEP, pid, NULL, (void *)(long)sig) < 0) die("PTRACE_SINGLESTEP");
        sig = 0;
        int s = wait_stop(pid);
        if (s == 0) return -1;
        steps++;
        if (s != SIGTRAP) {
            /* Another signal arrived: let it be delivered later, give up on this one. */
            kill(pid, s);
            return -1;
        }
        siginfo_t si;
        if (ptrace(PTRACE_GETSIGINFO, pid, NULL, &si) == 0 && si.si_code == TRAP_PERF_CODE) {
            /* A new overflow's signal while the handler is stepped (a step costs tens of
             * microseconds, so the long period's timer can come round again): dropped,
             * as a signal that finds SIGTRAP blocked would wait; the agent takes the
             * overflow's record from its ring at the next one. */
            steps--;
            continue;
        }
        struct user_regs_struct r;
        if (ptrace(PTRACE_GETREGS, pid, NULL, &r) < 0) die("PTRACE_GETREGS");
        if (steps > MAX_STEPS) return -1;
        if (!at_syscall(pid, r.rip)) continue;
        /* The next step executes this system call. */
        if (r.rax == NR_IOCTL && (r.rsi == IOC_ENABLE || r.rsi == IOC_REFRESH)) {
            enabled = 1;
            enable_at = steps;
        } else if (r.rax == NR_READ && enabled) {
            reading = 1;
            read_at = steps;
            lead = read_at - enable_at;
        } else if (r.rax == NR_RT_SIGRETURN) {
            if (reading) tail = steps - read_at + 1;
            /* Step over the return, into the target again. */
            if (ptrace(PTRACE_SINGLESTEP, pid, NULL, NULL) < 0) die("PTRACE_SINGLESTEP");
            if (wait_stop(pid) == 0) return -1;
            if (tail < 0) return 0;
            printf("handler steps=%ld lead=%ld tail=%ld\n", steps, lead, tail);
            fflush(stdout);
            return 1;
        }
    }
}

static int trace(pid_t pid) {
    const int n = 1;
    if (ptrace(PTRACE_SEIZE, pid, NULL, NULL) < 0) die("PTRACE_SEIZE");
    if (ptrace(PTRACE_INTERRUPT, pid, NULL, NULL) < 0) die("PTRACE_INTERRUPT");
    int s = wait_stop(pid);
    int counted = 0, tries = 0;
    int pass = 0;
    while (counted < n && tries < 50 * n) {
        if (ptrace(PTRACE_CONT, pid, NULL, (void *)(long)pass) < 0) die("PTRACE_CONT");
        pass = 0;
        s = wait_stop(pid);
        if (s == 0) break;
        if (s < 0) continue; /* an event stop */
        siginfo_t si;
        if (ptrace(PTRACE_GETSIGINFO, pid, NULL, &si) < 0) continue; /* a group-stop */
        if (s != SIGTRAP) {
            pass = s; /* another signal: pass it on */
            continue;
        }
        if (si.si_code != TRAP_PERF_CODE) continue; /* a stale step trap: drop it */
        tries++;
        int r = step_one(pid);
        if (r > 0) counted++;
    }
    /* SIGTRAP's disposition is the default now (see the note at the top). */
    kill(pid, SIGKILL);
    ptrace(PTRACE_DETACH, pid, NULL, NULL);
    return counted == n ? 0 : 1;
}
#endif

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "spin") == 0) return spin(atof(argv[2]));
    if (argc >= 3 && strcmp(argv[1], "trace") == 0) {
#if defined(__x86_64__)
        return trace((pid_t)atoi(argv[2]));
#else
        printf("unsupported\n");
        return 0;
#endif
    }
    fprintf(stderr, "usage: step_handler spin SECONDS | step_handler trace PID\n");
    return 2;
}
