// strobe-testprogs: shared -fno-omit-frame-pointer
/* A shared library for `strobe probe` tests: a function and a USDT probe (without a
 * semaphore) that live in a .so, so probes must find the library (by soname, through the
 * program's DT_RUNPATH) and attach to its file offsets. Built as libprobelib.so. */
#include "usdt.h"

static volatile unsigned long lib_sink;

/* Called a known number of times by probe_target; noipa keeps one real call each. */
__attribute__((noipa)) unsigned long lib_counted_call(unsigned long x) {
    lib_sink += x;
    USDT_PROBE1(strobe_lib, hello, x);
    return lib_sink;
}
