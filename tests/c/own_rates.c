// strobe-testprogs: -O1 -fno-optimize-sibling-calls
/* The second family of ground-truth programs for window metrics, written apart from the
 * bundled workload: functions of fixed behaviour that count their own truth.
 *
 *   own_rates THREADS SECONDS NAME...
 *
 * Each of THREADS threads runs every named function in rounds, in an order shuffled each
 * round, until it has used SECONDS of CPU time (not wall time: on a loaded machine a run
 * still gives the samples it is sized for; a wall-time limit of 20 x SECONDS + 5 s stops
 * a thread that cannot get the CPU). A function's turn is a batch of calls sized to about 2 ms of the thread's CPU
 * time (adapted after every batch), measured around the batch, not around each call: a
 * measurement is code of its own (four system calls), and windows longer than a call
 * would take it in with the calls beside it. Per batch: the thread's own task-clock (a
 * counting perf event on itself, the clock strobe's per-ms rates use), its CPU time,
 * and its page faults (minor + major) and context switches (voluntary + involuntary)
 * from getrusage(RUSAGE_THREAD). Prints one line per function, summed over threads,
 * then a last line:
 *
 *   fn=NAME calls=N task_clock_ns=N cpu_ns=N faults=N switches=N faults_per_ms=X
 *       switches_per_ms=X [instructions=N instructions_per_call=X]
 *   done threads=T process_cpu_ns=N
 *
 * The instruction counts (user space, from a counting `instructions` event of each
 * thread's own) appear only on a machine with a hardware PMU; a call's count includes
 * the batch loop's few instructions around it (insns_known: 10,002 of its own).
 *
 * The functions (each its own symbol; no tail calls, so a window inside a call sees it
 * on the stack):
 *
 *   touch_anon_1, touch_anon_16, touch_anon_256  map N fresh anonymous pages, write one
 *                                                byte of each (a fault each), unmap
 *   touch_file_16, touch_file_256                map N pages of a file in the page cache,
 *                                                read one byte of each (a minor fault
 *                                                each), unmap
 *   nap_5us, nap_100us, nap_1ms                  one nanosleep (a switch each)
 *   pipe_rw                                      16 one-byte writes and reads on a pipe
 *                                                (system calls, no fault, no switch)
 *   compute                                      a dependent multiply chain, nothing else
 *   mixed                                        the chain with a fresh page written every
 *                                                3000 multiplications
 *   insns_known                                  exactly 2 + 2 * INSNS_LOOP instructions
 *                                                per call (x86-64 assembly: a counted loop),
 *                                                INSNS_LOOP + 1 of them branches
 *
 * Exits 2 on bad usage, 1 when a system call the functions need fails. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096UL
#define FILE_PAGES 256UL
#define BATCH_NS 2000000UL
#define MIXED_PAGES 16UL
#define INSNS_LOOP 5000
#define STR_(x) #x
#define STR(x) STR_(x)

static volatile uint64_t sink;
static int data_fd = -1;
static int pipe_fds[2] = {-1, -1};

static void die(const char *what) {
    fprintf(stderr, "own_rates: %s: %s\n", what, strerror(errno));
    exit(1);
}

static inline __attribute__((always_inline)) char *map_anon(unsigned long pages) {
    char *p = mmap(NULL, pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p == MAP_FAILED) die("mmap");
    return p;
}

static inline __attribute__((always_inline)) void touch_anon(unsigned long pages) {
    char *p = map_anon(pages);
    for (unsigned long i = 0; i < pages; i++) p[i * PAGE] = (char)i;
    munmap(p, pages * PAGE);
}

static inline __attribute__((always_inline)) void touch_file(unsigned long pages) {
    char *p = mmap(NULL, pages * PAGE, PROT_READ, MAP_PRIVATE, data_fd, 0);
    if (p == MAP_FAILED) die("mmap of the data file");
    uint64_t s = 0;
    for (unsigned long i = 0; i < pages; i++) s += (unsigned char)p[i * PAGE];
    sink += s;
    munmap(p, pages * PAGE);
}

static inline __attribute__((always_inline)) void nap(long ns) {
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

static inline __attribute__((always_inline)) uint64_t chain(uint64_t x, long n) {
    for (long i = 0; i < n; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x;
}

__attribute__((noinline)) void touch_anon_1(void) { touch_anon(1); }
__attribute__((noinline)) void touch_anon_16(void) { touch_anon(16); }
__attribute__((noinline)) void touch_anon_256(void) { touch_anon(256); }
__attribute__((noinline)) void touch_file_16(void) { touch_file(16); }
__attribute__((noinline)) void touch_file_256(void) { touch_file(256); }
__attribute__((noinline)) void nap_5us(void) { nap(5000); }
__attribute__((noinline)) void nap_100us(void) { nap(100000); }
__attribute__((noinline)) void nap_1ms(void) { nap(1000000); }

__attribute__((noinline)) void pipe_rw(void) {
    char b = 1;
    for (int i = 0; i < 16; i++) {
        if (write(pipe_fds[1], &b, 1) != 1) die("write to the pipe");
        if (read(pipe_fds[0], &b, 1) != 1) die("read from the pipe");
    }
}

__attribute__((noinline)) void compute(void) { sink += chain(sink, 20000); }

__attribute__((noinline)) void mixed(void) {
    char *p = map_anon(MIXED_PAGES);
    uint64_t x = sink;
    for (unsigned long i = 0; i < MIXED_PAGES; i++) {
        x = chain(x, 3000);
        p[i * PAGE] = (char)x;
    }
    sink += x;
    munmap(p, MIXED_PAGES * PAGE);
}

#if defined(__x86_64__)
/* Exactly 2 + 2 * INSNS_LOOP instructions from its first to its `ret` inclusive: the
 * load of the count, the loop's decrement and branch INSNS_LOOP times, the return. */
void insns_known(void);
__asm__(".text\n"
        ".globl insns_known\n"
        ".type insns_known, @function\n"
        "insns_known:\n"
        "    mov $" STR(INSNS_LOOP) ", %ecx\n"
        "1:  dec %ecx\n"
        "    jnz 1b\n"
        "    ret\n"
        ".size insns_known, .-insns_known\n");
#else
__attribute__((noinline)) void insns_known(void) { sink += chain(sink, INSNS_LOOP); }
#endif

struct function {
    const char *name;
    void (*run)(void);
};

static const struct function FUNCTIONS[] = {
    {"touch_anon_1", touch_anon_1},     {"touch_anon_16", touch_anon_16},
    {"touch_anon_256", touch_anon_256}, {"touch_file_16", touch_file_16},
    {"touch_file_256", touch_file_256}, {"nap_5us", nap_5us},
    {"nap_100us", nap_100us},           {"nap_1ms", nap_1ms},
    {"pipe_rw", pipe_rw},               {"compute", compute},
    {"mixed", mixed},                   {"insns_known", insns_known},
};
#define NFUNCS (sizeof FUNCTIONS / sizeof FUNCTIONS[0])

struct truth {
    uint64_t calls, task_clock_ns, cpu_ns, faults, switches, instructions;
};

static int chosen[NFUNCS];
static int nchosen;
static double seconds;
static struct truth totals[NFUNCS];
static pthread_mutex_t totals_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t clock_ns(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

/* The calling thread's task-clock, counted by a perf event it opens on itself (user
 * space only, so it opens at perf_event_paranoid 2; a clock counts the same either
 * way). -1 when perf events are unavailable: the truth then uses the CPU time. */
static int open_task_clock(void) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.type = PERF_TYPE_SOFTWARE;
    a.size = sizeof a;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

/* The calling thread's user-space instructions (-1: no hardware PMU). */
static int open_instructions(void) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.type = PERF_TYPE_HARDWARE;
    a.size = sizeof a;
    a.config = PERF_COUNT_HW_INSTRUCTIONS;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

static int has_instructions;

static uint64_t read_clock(int fd) {
    uint64_t v = 0;
    if (fd < 0 || read(fd, &v, sizeof v) != sizeof v) return 0;
    return v;
}

static void usage_counts(uint64_t *faults, uint64_t *switches) {
    struct rusage r;
    getrusage(RUSAGE_THREAD, &r);
    *faults = (uint64_t)(r.ru_minflt + r.ru_majflt);
    *switches = (uint64_t)(r.ru_nvcsw + r.ru_nivcsw);
}

static void *worker(void *arg) {
    uint64_t rng = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)(uintptr_t)arg << 32) ^ (uint64_t)getpid();
    int fd = open_task_clock();
    int ifd = open_instructions();
    if (ifd >= 0) has_instructions = 1;
    struct truth mine[NFUNCS];
    long batch[NFUNCS];
    int order[NFUNCS];
    memset(mine, 0, sizeof mine);
    for (int i = 0; i < nchosen; i++) {
        batch[i] = 1;
        order[i] = i;
    }
    uint64_t cpu_end = clock_ns(CLOCK_THREAD_CPUTIME_ID) + (uint64_t)(seconds * 1e9);
    uint64_t wall_end = clock_ns(CLOCK_MONOTONIC) + (uint64_t)((20 * seconds + 5) * 1e9);
    while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < cpu_end && clock_ns(CLOCK_MONOTONIC) < wall_end) {
        for (int i = nchosen - 1; i > 0; i--) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            int j = (int)(rng % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int k = 0; k < nchosen; k++) {
            int i = order[k];
            const struct function *f = &FUNCTIONS[chosen[i]];
            uint64_t f0, s0, f1, s1;
            usage_counts(&f0, &s0);
            uint64_t t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), c0 = read_clock(fd);
            uint64_t i0 = read_clock(ifd);
            for (long n = 0; n < batch[i]; n++) f->run();
            uint64_t i1 = read_clock(ifd);
            uint64_t c1 = read_clock(fd), t1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
            usage_counts(&f1, &s1);
            struct truth *m = &mine[i];
            m->calls += (uint64_t)batch[i];
            m->task_clock_ns += c1 - c0;
            m->cpu_ns += t1 - t0;
            m->faults += f1 - f0;
            m->switches += s1 - s0;
            m->instructions += i1 - i0;
            /* Toward BATCH_NS of CPU, at most 4x up or 2x down per batch. */
            long want = (long)((double)batch[i] * BATCH_NS / (double)(t1 - t0 + 1));
            if (want > 4 * batch[i]) want = 4 * batch[i];
            if (want < batch[i] / 2) want = batch[i] / 2;
            batch[i] = want < 1 ? 1 : want;
        }
    }
    if (fd >= 0) close(fd);
    if (ifd >= 0) close(ifd);
    pthread_mutex_lock(&totals_lock);
    for (int i = 0; i < nchosen; i++) {
        totals[i].calls += mine[i].calls;
        totals[i].task_clock_ns += mine[i].task_clock_ns;
        totals[i].cpu_ns += mine[i].cpu_ns;
        totals[i].faults += mine[i].faults;
        totals[i].switches += mine[i].switches;
        totals[i].instructions += mine[i].instructions;
    }
    pthread_mutex_unlock(&totals_lock);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: own_rates THREADS SECONDS NAME... (names: ");
        for (size_t i = 0; i < NFUNCS; i++) fprintf(stderr, "%s%s", i ? ", " : "", FUNCTIONS[i].name);
        fprintf(stderr, ")\n");
        return 2;
    }
    int threads = atoi(argv[1]);
    seconds = atof(argv[2]);
    if (threads < 1 || threads > 64 || !(seconds > 0)) {
        fprintf(stderr, "own_rates: THREADS must be 1 to 64 and SECONDS positive\n");
        return 2;
    }
    for (int a = 3; a < argc; a++) {
        size_t i = 0;
        while (i < NFUNCS && strcmp(FUNCTIONS[i].name, argv[a]) != 0) i++;
        if (i == NFUNCS || nchosen == (int)NFUNCS) {
            fprintf(stderr, "own_rates: no function %s\n", argv[a]);
            return 2;
        }
        chosen[nchosen++] = (int)i;
    }
    /* The file the touch_file functions map: FILE_PAGES pages written once, so every
     * fault on it is a minor fault on a page-cache page. */
    char path[] = "/tmp/own_rates.XXXXXX";
    data_fd = mkstemp(path);
    if (data_fd < 0) die("mkstemp");
    unlink(path);
    static char page[PAGE];
    memset(page, 7, sizeof page);
    for (unsigned long i = 0; i < FILE_PAGES; i++)
        if (write(data_fd, page, PAGE) != (ssize_t)PAGE) die("write the data file");
    if (pipe(pipe_fds) != 0) die("pipe");

    pthread_t th[64];
    for (int t = 0; t < threads; t++)
        if (pthread_create(&th[t], NULL, worker, (void *)(uintptr_t)(t + 1)) != 0) die("pthread_create");
    for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
    for (int i = 0; i < nchosen; i++) {
        const struct truth *m = &totals[i];
        double ms = (double)(m->task_clock_ns ? m->task_clock_ns : m->cpu_ns) / 1e6;
        printf("fn=%s calls=%llu task_clock_ns=%llu cpu_ns=%llu faults=%llu switches=%llu "
               "faults_per_ms=%.4f switches_per_ms=%.4f",
               FUNCTIONS[chosen[i]].name, (unsigned long long)m->calls,
               (unsigned long long)m->task_clock_ns, (unsigned long long)m->cpu_ns,
               (unsigned long long)m->faults, (unsigned long long)m->switches,
               ms > 0 ? (double)m->faults / ms : 0.0, ms > 0 ? (double)m->switches / ms : 0.0);
        if (has_instructions)
            printf(" instructions=%llu instructions_per_call=%.1f", (unsigned long long)m->instructions,
                   m->calls ? (double)m->instructions / (double)m->calls : 0.0);
        printf("\n");
    }
    printf("done threads=%d process_cpu_ns=%llu\n", threads,
           (unsigned long long)clock_ns(CLOCK_PROCESS_CPUTIME_ID));
    return 0;
}
