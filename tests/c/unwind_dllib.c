// strobe-testprogs: shared -O2 -fomit-frame-pointer
// A library that crates/strobe-unwind's tests load with dlopen after the program started
// (unwind_dlopen.c) and in its dlopen/dlclose churn test.
volatile unsigned long dllib_sink;

__attribute__((noinline)) unsigned long dllib_inner(unsigned long x) {
    for (int i = 0; i < 50000; i++) x = x * 6364136223846793005UL + 1442695040888963407UL;
    return x;
}

__attribute__((noinline)) unsigned long dllib_work(unsigned long x) {
    unsigned long r = dllib_inner(x);
    dllib_sink = r;
    return r + 1;
}

// Calls back into the caller (for walks that start inside the caller but pass through
// this library's frames).
__attribute__((noinline)) unsigned long dllib_call(unsigned long (*f)(unsigned long),
                                                    unsigned long x) {
    unsigned long r = f(x);
    dllib_sink = r;
    return r + 1;
}
