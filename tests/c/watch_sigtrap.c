// strobe-testprogs: -O0 -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer
/* A program with its own SIGTRAP handling, for strobe watch.
 *
 * usage: watch_sigtrap MODE [N]   (N defaults to 5)
 *
 *   sigaction: installs an SA_SIGINFO SIGTRAP handler with sigaction(), then N times
 *              stores i into `watched` (through outer() -> store()) and raises SIGTRAP;
 *              prints "own traps: K" (K must be N) and "watched=N".
 *   signal:    the same with a handler installed by signal().
 *   blocked:   blocks SIGTRAP, stores N values, unblocks it, prints "done".
 *   fork:      stores 1, forks a child that stores 100 and exits 0, waits, stores 2,
 *              prints "child exit: S".
 *   exec:      stores 1000, then execs itself as "sigaction 2".
 *
 * Built with frame pointers everywhere, so a watch hit's call stack is
 * store <- outer <- main. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

volatile long watched;
static volatile int own_traps;
static volatile int own_code_ok = 1;

static void on_trap_info(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    own_traps++;
    if (sig != SIGTRAP || si->si_code != SI_TKILL) own_code_ok = 0;
}

static void on_trap_plain(int sig) {
    if (sig == SIGTRAP) own_traps++;
}

__attribute__((noinline)) void store(long v) { watched = v; }
__attribute__((noinline)) void outer(long v) { store(v); }

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "sigaction";
    long n = argc > 2 ? atol(argv[2]) : 5;
    if (!strcmp(mode, "sigaction") || !strcmp(mode, "signal")) {
        if (!strcmp(mode, "sigaction")) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_sigaction = on_trap_info;
            sa.sa_flags = SA_SIGINFO;
            sigemptyset(&sa.sa_mask);
            if (sigaction(SIGTRAP, &sa, NULL) != 0) return 3;
            struct sigaction back;
            if (sigaction(SIGTRAP, NULL, &back) != 0 || back.sa_sigaction != on_trap_info) return 4;
        } else if (signal(SIGTRAP, on_trap_plain) == SIG_ERR) {
            return 3;
        }
        for (long i = 1; i <= n; i++) {
            outer(i);
            raise(SIGTRAP);
        }
        printf("own traps: %d\nwatched=%ld\ncodes ok: %d\n", own_traps, watched, own_code_ok);
        return own_traps == n ? 0 : 1;
    }
    if (!strcmp(mode, "blocked")) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTRAP);
        sigprocmask(SIG_BLOCK, &set, NULL);
        for (long i = 1; i <= n; i++) outer(i);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        printf("done\n");
        return 0;
    }
    if (!strcmp(mode, "fork")) {
        outer(1);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            outer(100);
            exit(0); /* runs atexit handlers, strobe's too: must not hang */
        }
        int st = 0;
        waitpid(pid, &st, 0);
        outer(2);
        printf("child exit: %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
        return 0;
    }
    if (!strcmp(mode, "exec")) {
        outer(1000);
        execl("/proc/self/exe", argv[0], "sigaction", "2", (char *)NULL);
        return 5;
    }
    return 2;
}
