// handler_allocs [control]: threads burning CPU in nested calls, with an allocator and
// pthread locks that count the calls made while the calling thread runs on its alternate
// signal stack.
//
// strobe's agent runs its sampling handler with SA_ONSTACK on a stack it maps for each
// thread it serves; this program installs no handler of its own (without `control`), so
// every such call comes from inside the agent's handler. The malloc family and the
// pthread lock entry points are interposed here, in the executable, so calls from the
// agent (and from the libraries it calls, libgcc's unwinder among them) reach these
// definitions. The kernel says whether the thread is on its alternate stack
// (sigaltstack's SS_ONSTACK, asked with the raw system call so that no interposer
// answers instead).
//
// With `control`, a SIGUSR1 handler of the program's own, on an alternate stack of its
// own, allocates and locks once per thread: the counts must then be non-zero, which shows
// that the detector sees what it is meant to see.
//
// Prints one line: "onstack_allocs=A onstack_locks=L allocs=T locks=K".
// strobe-testprogs: -O1 -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

static unsigned long onstack_allocs, onstack_locks, allocs, locks;

static int on_altstack(void) {
    stack_t ss;
    if (syscall(SYS_sigaltstack, NULL, &ss) != 0) return 0;
    return (ss.ss_flags & SS_ONSTACK) != 0;
}

static void count_alloc(void) {
    __atomic_fetch_add(&allocs, 1, __ATOMIC_RELAXED);
    if (on_altstack()) __atomic_fetch_add(&onstack_allocs, 1, __ATOMIC_RELAXED);
}

static void count_lock(void) {
    __atomic_fetch_add(&locks, 1, __ATOMIC_RELAXED);
    if (on_altstack()) __atomic_fetch_add(&onstack_locks, 1, __ATOMIC_RELAXED);
}

void *malloc(size_t n) { count_alloc(); return __libc_malloc(n); }
void *calloc(size_t k, size_t n) { count_alloc(); return __libc_calloc(k, n); }
void *realloc(void *p, size_t n) { count_alloc(); return __libc_realloc(p, n); }
void free(void *p) {
    if (p) count_alloc();
    __libc_free(p);
}
void *memalign(size_t a, size_t n) { count_alloc(); return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { count_alloc(); return __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
    count_alloc();
    void *p = __libc_memalign(a, n);
    if (!p) return 12; // ENOMEM
    *out = p;
    return 0;
}

// The real lock functions, found on first use (dlsym allocates: the first call of each is
// made by this program's main thread before any thread is sampled).
typedef int (*lockfn)(void *);
static lockfn real(lockfn *slot, const char *name) {
    lockfn f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!f) {
        f = (lockfn)dlsym(RTLD_NEXT, name);
        __atomic_store_n(slot, f, __ATOMIC_RELEASE);
    }
    return f;
}
static lockfn r_mlock, r_mtrylock, r_rdlock, r_wrlock, r_tryrd, r_trywr;
int pthread_mutex_lock(pthread_mutex_t *m) {
    count_lock();
    return real(&r_mlock, "pthread_mutex_lock")(m);
}
int pthread_mutex_trylock(pthread_mutex_t *m) {
    count_lock();
    return real(&r_mtrylock, "pthread_mutex_trylock")(m);
}
int pthread_rwlock_rdlock(pthread_rwlock_t *l) {
    count_lock();
    return real(&r_rdlock, "pthread_rwlock_rdlock")(l);
}
int pthread_rwlock_wrlock(pthread_rwlock_t *l) {
    count_lock();
    return real(&r_wrlock, "pthread_rwlock_wrlock")(l);
}
int pthread_rwlock_tryrdlock(pthread_rwlock_t *l) {
    count_lock();
    return real(&r_tryrd, "pthread_rwlock_tryrdlock")(l);
}
int pthread_rwlock_trywrlock(pthread_rwlock_t *l) {
    count_lock();
    return real(&r_trywr, "pthread_rwlock_trywrlock")(l);
}

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static volatile uint64_t sink;
static void *volatile escaped; // keeps the compiler from eliding malloc/free pairs

__attribute__((noinline)) static uint64_t leaf(uint64_t x) {
    for (int i = 0; i < 2000; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x;
}

__attribute__((noinline)) static uint64_t nest(int depth, uint64_t x) {
    if (depth == 0) return leaf(x);
    return nest(depth - 1, x + depth) ^ (uint64_t)depth;
}

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void on_usr1(int sig) {
    (void)sig;
    escaped = malloc(64);
    free(escaped);
    pthread_mutex_lock(&mu);
    pthread_mutex_unlock(&mu);
}

static int control;

static void *worker(void *arg) {
    (void)arg;
    if (control) {
        stack_t ss = {.ss_sp = __libc_malloc(1 << 16), .ss_size = 1 << 16, .ss_flags = 0};
        sigaltstack(&ss, NULL);
        raise(SIGUSR1);
    }
    double end = cpu_seconds() + 0.4;
    uint64_t acc = 0;
    int round = 0;
    while (cpu_seconds() < end) {
        acc += nest(8 + round % 8, acc);
        if (++round % 64 == 0) {
            // Allocations and locks off the signal stack: counted in the totals only.
            escaped = malloc(100 + round % 300);
            free(escaped);
            pthread_mutex_lock(&mu);
            pthread_mutex_unlock(&mu);
        }
    }
    sink = acc;
    return NULL;
}

int main(int argc, char **argv) {
    control = argc > 1 && strcmp(argv[1], "control") == 0;
    // Resolve the lock functions here, off any signal stack.
    pthread_mutex_lock(&mu);
    pthread_mutex_unlock(&mu);
    pthread_mutex_trylock(&mu);
    pthread_mutex_unlock(&mu);
    pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
    pthread_rwlock_rdlock(&rw);
    pthread_rwlock_unlock(&rw);
    pthread_rwlock_wrlock(&rw);
    pthread_rwlock_unlock(&rw);
    pthread_rwlock_tryrdlock(&rw);
    pthread_rwlock_unlock(&rw);
    pthread_rwlock_trywrlock(&rw);
    pthread_rwlock_unlock(&rw);
    if (control) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr1;
        sa.sa_flags = SA_ONSTACK;
        sigaction(SIGUSR1, &sa, NULL);
    }
    pthread_t t[3];
    for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, worker, NULL);
    worker(NULL);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    printf("onstack_allocs=%lu onstack_locks=%lu allocs=%lu locks=%lu\n",
           __atomic_load_n(&onstack_allocs, __ATOMIC_RELAXED),
           __atomic_load_n(&onstack_locks, __ATOMIC_RELAXED),
           __atomic_load_n(&allocs, __ATOMIC_RELAXED), __atomic_load_n(&locks, __ATOMIC_RELAXED));
    return 0;
}
