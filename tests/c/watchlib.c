// strobe-testprogs: shared -fno-omit-frame-pointer
/* A shared library for `strobe watch` tests: globals that live in a .so, so watch specs
 * must find the library (through the program's DT_RUNPATH) and the agent its load bias.
 * Built as libwatchlib.so; watch_libuser calls it. */

volatile long lib_counter;   /* written by lib_bump */
volatile int lib_flag;       /* never written: a second, silent watchpoint */

/* Stores base + k into lib_counter for k = 1..n; noipa keeps one real call. */
__attribute__((noipa)) void lib_bump(long base, long n) {
    for (long k = 1; k <= n; k++) lib_counter = base + k;
}
