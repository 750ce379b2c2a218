// strobe-testprogs: -DSTROBE_PROBE_OPTIONAL -ldl
/* Loads a library with probe sites (libprobe_dllib.so, path in argv[1]), fires one of
 * its sites twice, unloads it with dlclose, then exits. The probe library (injected
 * with LD_PRELOAD) registered the library's sites at load and lists them at exit, so it
 * must have kept the library mapped. Prints "closed" and exits 0. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: probe_dlclose LIBRARY\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    void (*fire)(long) = (void (*)(long))dlsym(h, "dl_fire");
    if (!fire) {
        fprintf(stderr, "dlsym: %s\n", dlerror());
        return 1;
    }
    fire(1);
    fire(2);
    dlclose(h);
    printf("closed\n");
    return 0;
}
