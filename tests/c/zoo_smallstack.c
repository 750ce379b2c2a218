// The coverage zoo: work on small stacks. A thread sets a small alternate signal stack
// of its own (for a SIGSEGV handler, as Rust and Go runtimes do) and then runs
// coroutine_work() on a 16 KiB coroutine stack (makecontext/swapcontext, no guard
// page) for MS milliseconds of CPU. A profiler whose handler ran on the interrupted
// stack could overflow the coroutine's; one that took the program's small alternate
// stack could overflow that. It prints what sigaltstack reports afterwards (the
// program's own setting) and the truth.
//
//   zoo_smallstack MS -> "altstack=N coroutine_ns=N process_ns=N"
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <ucontext.h>
#include <unistd.h>
#include "zoo_common.h"

static unsigned long ms, coroutine_ns;
static ucontext_t main_ctx, co_ctx;

__attribute__((noinline)) unsigned long coroutine_work(unsigned long ns) { return zoo_spin(ns, 23); }

static void coroutine(void) { coroutine_ns = coroutine_work(ms * 1000000UL); }

static void on_segv(int sig) { (void)sig; _exit(99); }

static void *thread_main(void *arg) {
    static char alt[8192];
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
    if (sigaltstack(&ss, 0) != 0) return (void *)1;
    struct sigaction sa = {0};
    sa.sa_handler = on_segv;
    sa.sa_flags = SA_ONSTACK;
    sigaction(SIGSEGV, &sa, 0);
    static char co_stack[16384];
    getcontext(&co_ctx);
    co_ctx.uc_stack.ss_sp = co_stack;
    co_ctx.uc_stack.ss_size = sizeof co_stack;
    co_ctx.uc_link = &main_ctx;
    makecontext(&co_ctx, coroutine, 0);
    swapcontext(&main_ctx, &co_ctx);
    stack_t now;
    sigaltstack(0, &now);
    printf("altstack=%zu coroutine_ns=%lu process_ns=%lu\n", now.ss_size, coroutine_ns,
           zoo_now(CLOCK_PROCESS_CPUTIME_ID));
    return arg;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    ms = strtoul(argv[1], 0, 10);
    pthread_t t;
    if (pthread_create(&t, 0, thread_main, 0) != 0) return 3;
    void *r;
    pthread_join(t, &r);
    return r ? 1 : 0;
}
