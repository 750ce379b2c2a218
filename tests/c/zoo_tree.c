// The coverage zoo's truth for programs that cannot measure themselves: runs COMMAND,
// waits for it, and appends to LOG one line with the CPU time of the whole tree it
// started (wait4's rusage: the command and every descendant it reaped), then exits with
// the command's status. Its own CPU time is a fork and a wait.
//
//   zoo_tree LOG COMMAND [ARGS...] -> LOG gains "tree_ns=N command=NAME"
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "zoo_common.h"

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid) return 1;
    unsigned long ns = (unsigned long)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000UL +
                       (unsigned long)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000UL;
    FILE *log = fopen(argv[1], "a");
    if (!log) return 1;
    fprintf(log, "tree_ns=%lu command=%s\n", ns, argv[2]);
    fclose(log);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}
