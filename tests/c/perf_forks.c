/* The perf.data tests' fork and exec target. The parent works in parent_work, forks a
 * child that works in child_work (the child gets no mapping records of its own: it
 * inherits its parent's address space), waits for it, then execs itself as
 * "perf_forks stage2", a new image that works in stage2_work and exits 0.
 *
 * usage: perf_forks [stage2] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile unsigned long sink;

#define SPIN(n, k)                                                                           \
    do {                                                                                     \
        unsigned long x_ = (k);                                                              \
        for (unsigned long i_ = 0; i_ < (n); i_++) x_ = x_ * 6364136223846793005UL + (k);    \
        sink = x_;                                                                           \
    } while (0)

#define UNIT 1000000UL

__attribute__((noinline)) static void parent_work(void) { SPIN(30 * UNIT, 1); }
__attribute__((noinline)) static void child_work(void) { SPIN(40 * UNIT, 3); }
__attribute__((noinline)) static void stage2_work(void) { SPIN(50 * UNIT, 5); }

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "stage2") == 0) {
        stage2_work();
        printf("perf_forks: stage2 done\n");
        return 0;
    }
    parent_work();
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
        child_work();
        _exit(0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 3;
    execl("/proc/self/exe", argv[0], "stage2", (char *)NULL);
    perror("execl");
    return 4;
}
