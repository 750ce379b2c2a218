// The coverage zoo: a parent that makes CHILDREN short-lived child processes, CONC at a
// time, each spending US microseconds of CPU in child_work(), while the parent spends
// PARENT_MS milliseconds in parent_work() spread between them. HOW the children are made:
//   fork     fork, the child works and _exits (no exec)
//   exec     fork + execv of this program (`zoo_children --child US FD`)
//   selfexe  fork + execv of /proc/self/exe
//   vfork    vfork + execv
//   spawn    posix_spawn
// Each child writes the CPU time of its child_work() to a pipe the parent reads. The
// parent prints the truth: the children's child_work() time, its own parent_work() time
// and the tree's CPU time (its own and its reaped children's).
//
//   zoo_children HOW CHILDREN CONC US PARENT_MS
//   -> "child_ns=N parent_ns=N tree_ns=N children=N"
#include <errno.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "zoo_common.h"

extern char **environ;

__attribute__((noinline)) unsigned long child_work(unsigned long ns) { return zoo_spin(ns, 11); }
__attribute__((noinline)) unsigned long parent_work(unsigned long ns) { return zoo_spin(ns, 13); }

static int child_main(unsigned long us, int fd) {
    unsigned long ns = child_work(us * 1000UL);
    if (write(fd, &ns, sizeof ns) != sizeof ns) return 1;
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--child") == 0)
        return child_main(strtoul(argv[2], 0, 10), atoi(argv[3]));
    if (argc < 6) return 2;
    const char *how = argv[1];
    long children = atol(argv[2]), conc = atol(argv[3]);
    unsigned long us = strtoul(argv[4], 0, 10), parent_ms = strtoul(argv[5], 0, 10);
    int p[2];
    if (pipe(p) != 0) return 1;
    char us_s[32], fd_s[16];
    snprintf(us_s, sizeof us_s, "%lu", us);
    snprintf(fd_s, sizeof fd_s, "%d", p[1]);
    const char *self = strcmp(how, "selfexe") == 0 ? "/proc/self/exe" : argv[0];
    char *cargv[] = {argv[0], "--child", us_s, fd_s, 0};
    unsigned long parent_ns = 0, child_ns = 0, slice = parent_ms * 1000000UL / (children / conc + 1);
    long made = 0, running = 0, failed = 0;
    while (made < children || running > 0) {
        while (running < conc && made < children) {
            pid_t pid = -1;
            if (strcmp(how, "fork") == 0) {
                pid = fork();
                if (pid == 0) _exit(child_main(us, p[1]));
            } else if (strcmp(how, "vfork") == 0) {
                pid = vfork();
                if (pid == 0) {
                    execv(self, cargv);
                    _exit(127);
                }
            } else if (strcmp(how, "spawn") == 0) {
                if (posix_spawn(&pid, self, 0, 0, cargv, environ) != 0) pid = -1;
            } else {
                pid = fork();
                if (pid == 0) {
                    execv(self, cargv);
                    _exit(127);
                }
            }
            if (pid < 0) return 1;
            made++;
            running++;
        }
        parent_ns += parent_work(slice);
        int status;
        if (wait(&status) > 0) {
            running--;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                failed++;
                if (WIFSIGNALED(status))
                    fprintf(stderr, "zoo_children: a child was killed by signal %d\n", WTERMSIG(status));
                else
                    fprintf(stderr, "zoo_children: a child exited with status %d\n", WEXITSTATUS(status));
            }
        }
    }
    close(p[1]);
    unsigned long ns;
    while (read(p[0], &ns, sizeof ns) == sizeof ns) child_ns += ns;
    printf("child_ns=%lu parent_ns=%lu tree_ns=%lu children=%ld\n", child_ns, parent_ns,
           zoo_now(CLOCK_PROCESS_CPUTIME_ID) + zoo_children_ns(), made - failed);
    return failed ? 1 : 0;
}
