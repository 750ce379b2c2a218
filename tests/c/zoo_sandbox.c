// The coverage zoo: a program that confines itself with a seccomp filter halfway, as
// OpenSSH's privilege separation, libseccomp users and browser sandboxes do. The filter
// kills the process on ioctl and perf_event_open (system calls the program itself never
// makes), so a profiler that makes them in the program's threads after the filter is in
// place kills it.
//
//   zoo_sandbox HOW THREADS MS -> "before_ns=N after_ns=N child_ns=N process_ns=N tree_ns=N"
//
// THREADS workers and main each spend MS ms of CPU in before_spin(); then main installs
// the filter (HOW: `prctl` PR_SET_SECCOMP on main alone, `tsync` seccomp(2) with
// SECCOMP_FILTER_FLAG_TSYNC on every thread, `exec` prctl once the workers are done and
// then an exec of itself as `inherited`, which starts under the filter, `vfork` the same
// in a vfork child while main, unfiltered, spends MS ms in parent_spin()); then every
// thread (`exec`, `vfork`: the new image's main alone) spends MS ms in after_spin(); then
// a forked child spends MS ms in child_spin(). `vfork` prints the new image's line, then
// "parent_ns=N all_ns=N" (the whole tree's CPU time). The truth is each
// function's CPU time, the process's and the tree's.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "zoo_common.h"

static unsigned long ms;
static int threads;
static pthread_barrier_t installed, spun;
static _Atomic unsigned long before_ns, after_ns;

__attribute__((noinline)) unsigned long before_spin(unsigned long ns) { return zoo_spin(ns, 3); }
__attribute__((noinline)) unsigned long after_spin(unsigned long ns) { return zoo_spin(ns, 5); }
__attribute__((noinline)) unsigned long child_spin(unsigned long ns) { return zoo_spin(ns, 9); }
__attribute__((noinline)) unsigned long parent_spin(unsigned long ns) { return zoo_spin(ns, 7); }

// Installs the filter; a failure ends the process (with _exit: a vfork child calls it).
static void install(const char *how) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_perf_event_open, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog p = {.len = sizeof f / sizeof f[0], .filter = f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) _exit(3);
    long rc = strcmp(how, "tsync") == 0
                  ? syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &p)
                  : prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &p);
    if (rc != 0) _exit(3);
}

static int exec_mode;

static void *worker(void *arg) {
    before_ns += before_spin(ms * 1000000UL);
    if (exec_mode) return arg; // exec would end the thread
    pthread_barrier_wait(&installed);
    after_ns += after_spin(ms * 1000000UL);
    pthread_barrier_wait(&spun);
    return arg;
}

static void rest(void) {
    pid_t c = fork();
    if (c == 0) {
        unsigned long ns = child_spin(ms * 1000000UL);
        printf("child_ns=%lu ", ns);
        fflush(stdout);
        _exit(0);
    }
    int st;
    waitpid(c, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) exit(4);
    unsigned long process = zoo_now(CLOCK_PROCESS_CPUTIME_ID);
    printf("before_ns=%lu after_ns=%lu process_ns=%lu tree_ns=%lu\n", (unsigned long)before_ns,
           (unsigned long)after_ns, process, process + zoo_children_ns());
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    const char *how = argv[1];
    threads = atoi(argv[2]);
    ms = strtoul(argv[3], 0, 10);
    if (strcmp(how, "inherited") == 0) {
        // The exec'd image: started under the filter; before_ns comes from the first image.
        before_ns = argc > 4 ? strtoul(argv[4], 0, 10) : 0;
        after_ns += after_spin(ms * 1000000UL);
        rest();
        return 0;
    }
    pthread_t t[64];
    if (threads > 64) return 2;
    exec_mode = strcmp(how, "exec") == 0 || strcmp(how, "vfork") == 0;
    pthread_barrier_init(&installed, 0, threads + 1);
    pthread_barrier_init(&spun, 0, threads + 1);
    for (int i = 0; i < threads; i++) pthread_create(&t[i], 0, worker, 0);
    before_ns += before_spin(ms * 1000000UL);
    if (exec_mode) {
        // The workers finish first (exec would end them); the new image spins after.
        for (int i = 0; i < threads; i++) pthread_join(t[i], 0);
        char before[32], n[16], m[16];
        snprintf(before, sizeof before, "%lu", (unsigned long)before_ns);
        snprintf(n, sizeof n, "%d", threads);
        snprintf(m, sizeof m, "%lu", ms);
        if (strcmp(how, "exec") == 0) {
            install(how);
            execl("/proc/self/exe", argv[0], "inherited", n, m, before, (char *)0);
            return 5;
        }
        // vfork: the child installs the filter on our memory and execs; we go on unfiltered.
        pid_t c = vfork();
        if (c == 0) {
            install("prctl");
            execl("/proc/self/exe", argv[0], "inherited", n, m, before, (char *)0);
            _exit(5);
        }
        unsigned long parent = parent_spin(ms * 1000000UL);
        int st;
        if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 4;
        printf("parent_ns=%lu all_ns=%lu\n", parent,
               zoo_now(CLOCK_PROCESS_CPUTIME_ID) + zoo_children_ns());
        return 0;
    }
    install(how);
    pthread_barrier_wait(&installed);
    after_ns += after_spin(ms * 1000000UL);
    pthread_barrier_wait(&spun);
    for (int i = 0; i < threads; i++) pthread_join(t[i], 0);
    rest();
    return 0;
}
