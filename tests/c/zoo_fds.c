// The coverage zoo: descriptors. With the usual soft limit of 1024 open files, THREADS
// threads each open FDS files (/dev/null) and hold them until every thread has opened
// its own, then close them; each spends MS milliseconds of CPU in fd_work() meanwhile.
// Unprofiled, every open succeeds; a profiler that takes the program's descriptors
// makes some fail. Exits 1 if any open failed. At the end main closes every descriptor
// /proc/self/fd lists above stderr, as daemons do, and counts the closes that failed.
//
//   zoo_fds THREADS FDS MS -> "failed=N fd_ns=N process_ns=N peak_fds=N close_failed=N"
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#include "zoo_common.h"

static int fds_per;
static unsigned long ms;
static _Atomic int failed, opened_all, peak;
static _Atomic unsigned long fd_ns;
static pthread_barrier_t barrier;

__attribute__((noinline)) unsigned long fd_work(unsigned long ns) { return zoo_spin(ns, 17); }

static int count_fds(void) {
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    while (readdir(d)) n++;
    closedir(d);
    return n - 3; // ".", ".." and the directory's own descriptor
}

static void *thread_main(void *arg) {
    int fds[64];
    for (int i = 0; i < fds_per && i < 64; i++) {
        fds[i] = open("/dev/null", O_RDONLY);
        if (fds[i] < 0) atomic_fetch_add(&failed, 1);
    }
    atomic_fetch_add(&fd_ns, fd_work(ms * 1000000UL));
    if (pthread_barrier_wait(&barrier) == PTHREAD_BARRIER_SERIAL_THREAD) peak = count_fds();
    pthread_barrier_wait(&barrier);
    for (int i = 0; i < fds_per && i < 64; i++)
        if (fds[i] >= 0) close(fds[i]);
    return arg;
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    int n = atoi(argv[1]);
    fds_per = atoi(argv[2]);
    ms = strtoul(argv[3], 0, 10);
    struct rlimit r;
    getrlimit(RLIMIT_NOFILE, &r);
    r.rlim_cur = 1024;
    setrlimit(RLIMIT_NOFILE, &r);
    pthread_barrier_init(&barrier, 0, n);
    pthread_t *t = calloc(n, sizeof *t);
    for (int i = 0; i < n; i++)
        if (pthread_create(&t[i], 0, thread_main, 0) != 0) return 3;
    for (int i = 0; i < n; i++) pthread_join(t[i], 0);
    // As a daemon (or Chromium's crashpad) does before it goes on: close every descriptor
    // above stderr that /proc/self/fd lists, counting the closes that fail.
    int close_failed = 0, listed[4096], nlisted = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return 4;
    for (struct dirent *e; (e = readdir(d)) && nlisted < 4096;) {
        int fd = atoi(e->d_name);
        if (fd > 2 && fd != dirfd(d)) listed[nlisted++] = fd;
    }
    closedir(d);
    for (int i = 0; i < nlisted; i++)
        if (close(listed[i]) != 0) close_failed++;
    printf("failed=%d fd_ns=%lu process_ns=%lu peak_fds=%d close_failed=%d\n", (int)failed,
           (unsigned long)fd_ns, zoo_now(CLOCK_PROCESS_CPUTIME_ID), (int)peak, close_failed);
    return failed ? 1 : 0;
}
