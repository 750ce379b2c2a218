/* Writers of known globals, for strobe watch.
 *
 * usage: watch_writers [THREADS [WRITES]]   (defaults 4 and 1000; THREADS <= 4)
 *
 * Thread i runs writer_i (writer_0 .. writer_3, one function each, so a report can name
 * the accessing function) and stores WRITES values into `counter`: thread i writes
 * i * 1000000 + k for k = 1..WRITES, so every new value says which thread wrote it and
 * when. Each writer also stores into lanes[0..7] once per write (8 watchable 8-byte
 * globals for multiplexing tests). main prints one line per thread and exits 0.
 *
 * The other globals give symbol resolution something of every shape: 1, 2, 4 and 8 bytes,
 * a 12-byte struct, a thread-local, a file-local. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

volatile long counter;                        /* 8 bytes */
volatile long lanes[8];                       /* 64 bytes, 8-aligned */
volatile int hits32;                          /* 4 bytes */
volatile short half;                          /* 2 bytes */
volatile char flag;                           /* 1 byte */
volatile struct { int a, b, c; } triple;      /* 12 bytes, 4-aligned */
__thread volatile long per_thread;            /* thread-local */
static volatile long file_local;              /* local symbol */

static long writes = 1000;

#define WRITER(N)                                                     \
    __attribute__((noinline)) void *writer_##N(void *arg) {           \
        (void)arg;                                                    \
        for (long k = 1; k <= writes; k++) {                          \
            counter = (long)N * 1000000 + k;                          \
            for (int l = 0; l < 8; l++) lanes[l] = (long)N * 1000000 + k; \
            per_thread = k;                                           \
        }                                                             \
        return NULL;                                                  \
    }
WRITER(0)
WRITER(1)
WRITER(2)
WRITER(3)

int main(int argc, char **argv) {
    void *(*writers[4])(void *) = {writer_0, writer_1, writer_2, writer_3};
    int n = argc > 1 ? atoi(argv[1]) : 4;
    if (argc > 2) writes = atol(argv[2]);
    if (n < 1 || n > 4 || writes < 0) return 2;
    pthread_t t[4];
    hits32 = 1;
    half = 2;
    flag = 3;
    triple.b = 4;
    file_local = 5;
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, writers[i], NULL);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < n; i++) printf("writer_%d wrote %ld times\n", i, writes);
    return 0;
}
