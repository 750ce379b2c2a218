/* fork and exec under a profiler: the output and exit status must be exactly those of an
 * unprofiled run.
 *
 *   exec_fork            prints "parent start", forks a child that burns CPU, prints
 *                        "child done" and exits 3; the parent checks that status, burns
 *                        CPU itself, runs /bin/true through vfork + execl (a vfork
 *                        child shares the parent's memory, and so the agent's), prints
 *                        "vfork child exited 0", then execs itself (execl) as
 *                        "exec_fork stage2".
 *   exec_fork stage2     burns CPU, prints "stage2 done", exits 7. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) static void burn(double ms) {
    unsigned long x = 1;
    double start = cpu_ms();
    while (cpu_ms() - start < ms)
        for (int i = 0; i < 10000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "stage2") == 0) {
        burn(60);
        printf("stage2 done\n");
        return 7;
    }
    printf("parent start\n");
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
        burn(60);
        printf("child done\n");
        exit(3);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 3) {
        printf("child status wrong: %d\n", status);
        return 4;
    }
    printf("child exited 3\n");
    fflush(stdout);
    pid = vfork();
    if (pid < 0) return 2;
    if (pid == 0) {
        execl("/bin/true", "true", (char *)NULL);
        _exit(9);
    }
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("vfork child status wrong: %d\n", status);
        return 6;
    }
    printf("vfork child exited 0\n");
    burn(60);
    fflush(stdout);
    execl("/proc/self/exe", argv[0], "stage2", (char *)NULL);
    perror("execl");
    return 5;
}
