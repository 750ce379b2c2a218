/* strobe_probe.h: probe points inside a C program, for strobe.
 *
 *     #include "strobe_probe.h"
 *     STROBE_PROBE(request_done, fd, nbytes);      // 0 to 6 integer/pointer arguments
 *     { STROBE_PROBE_SCOPE(parse, len); ... }      // entry + exit with the duration
 *
 * Disabled, a probe point costs one relaxed load of its site's flag and a branch
 * predicted not taken; its arguments are not evaluated.
 *
 * Link with -lstrobe_probe_c (libstrobe_probe_c.so or .a, crate strobe-probe-c).
 * Or #define STROBE_PROBE_OPTIONAL before including this header: the library's
 * functions are then declared weak, the program needs no library at link time and
 * runs normally without one (each site switches itself off on its first hit), and
 * `strobe probe` can inject it (LD_PRELOAD) to enable probe points by name. (Do not
 * combine STROBE_PROBE_OPTIONAL with -lstrobe_probe_c under --as-needed, the default
 * of many distributions: weak references alone do not keep the library.)
 *
 * In C, every site lives in its module's `strobe_probe_sites` section; one constructor
 * per module (executable or shared library) registers that section with the library
 * at load time, so `strobe probe --list` shows every site, fired or not, and a site can
 * be enabled by name before it first runs. The library then keeps that module loaded
 * (dlclose does not unmap it), since it holds pointers to its sites. In C++ (where
 * sites in inline functions and templates cannot share one named section) and for a
 * site the constructor missed (the library was not loaded yet), a site registers on
 * its first hit, which then takes a lock and allocates; later hits take no lock and
 * allocate nothing. Requires GCC or Clang (uses __atomic builtins, ##__VA_ARGS__, the
 * section attribute and, for scopes, the cleanup attribute). */
#ifndef STROBE_PROBE_H
#define STROBE_PROBE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One probe point. Layout shared with strobe_probe::Site: never reorder.
 * Aligned to a cache line so that no other variable's writes slow the
 * site's disabled test or its firing path (false sharing). */
struct __attribute__((aligned(64))) strobe_probe_site {
    unsigned char state;      /* 0 off, 1 consumers attached, 2 not registered yet */
    void *list;               /* owned by the library */
    const char *name;         /* string literal */
    size_t name_len;
    const char *file;         /* string literal */
    size_t file_len;
    uint32_t line;
    uint32_t nargs;
};

#ifndef __cplusplus
_Static_assert(sizeof(struct strobe_probe_site) == 64, "strobe_probe_site layout");
_Static_assert(_Alignof(struct strobe_probe_site) == 64, "strobe_probe_site alignment");
#endif

#define STROBE_PROBE_ABI_VERSION 2

#ifdef STROBE_PROBE_OPTIONAL
#define STROBE__LINK __attribute__((weak))
/* Whether the library is loaded (always 1 when linked normally). */
#define STROBE_PROBE_AVAILABLE() (strobe_probe_fire != NULL)
#else
#define STROBE__LINK
#define STROBE_PROBE_AVAILABLE() 1
#endif

uint32_t strobe_probe_abi_version(void) STROBE__LINK;
void strobe_probe_fire(const struct strobe_probe_site *site, const uint64_t *args,
                       uint32_t nargs) STROBE__LINK;
uint64_t strobe_probe_enter(const struct strobe_probe_site *site, const uint64_t *args,
                            uint32_t nargs) STROBE__LINK;
void strobe_probe_exit(const struct strobe_probe_site *site, uint64_t start) STROBE__LINK;
/* Registers n sites (one module's section); called by the constructor below. Always
 * weak: a file that includes this header but fires no probe needs no library. */
void strobe_probe_register_sites(const struct strobe_probe_site *sites, size_t n)
    __attribute__((weak));

/* ---- implementation details below ---- */

#define STROBE__ARG(x) ((uint64_t)(uintptr_t)(x))
#define STROBE__CAT2(a, b) a##b
#define STROBE__CAT(a, b) STROBE__CAT2(a, b)
#define STROBE__NTH(_0, _1, _2, _3, _4, _5, _6, _7, N, ...) N
/* Number of arguments after the name: 0..6 (7 or more fails to compile). */
#define STROBE__NARGS(...) STROBE__NTH(_, ##__VA_ARGS__, STROBE__TOO_MANY_ARGS, 6, 5, 4, 3, 2, 1, 0)

#define STROBE__A0()
#define STROBE__A1(a) STROBE__ARG(a)
#define STROBE__A2(a, b) STROBE__ARG(a), STROBE__ARG(b)
#define STROBE__A3(a, b, c) STROBE__A2(a, b), STROBE__ARG(c)
#define STROBE__A4(a, b, c, d) STROBE__A3(a, b, c), STROBE__ARG(d)
#define STROBE__A5(a, b, c, d, e) STROBE__A4(a, b, c, d), STROBE__ARG(e)
#define STROBE__A6(a, b, c, d, e, f) STROBE__A5(a, b, c, d, e), STROBE__ARG(f)
#define STROBE__ARGS(n, ...) STROBE__CAT(STROBE__A, n)(__VA_ARGS__)

#ifndef __cplusplus
/* Every C site goes to this section; the linker gathers a module's sites into one
 * array between __start_strobe_probe_sites and __stop_strobe_probe_sites (each site is
 * 64 bytes and 64-byte aligned, so there is no padding between them). */
#define STROBE__SECTION __attribute__((section("strobe_probe_sites")))

/* Per module, not per translation unit: the definition is weak and hidden, so the
 * linker keeps one per executable or shared library, and the __start/__stop symbols
 * it reads are that module's own. Every translation unit adds a constructor entry for
 * it, so it may run several times: registering is idempotent, and a flag makes the
 * repeats return at once. */
extern struct strobe_probe_site __start_strobe_probe_sites[]
    __attribute__((weak, visibility("hidden")));
extern struct strobe_probe_site __stop_strobe_probe_sites[]
    __attribute__((weak, visibility("hidden")));

void strobe__register_module(void);
__attribute__((constructor, weak, visibility("hidden"))) void strobe__register_module(void) {
    static int done;
    if (done || !__start_strobe_probe_sites || !__stop_strobe_probe_sites)
        return;
    done = 1;
    if (!strobe_probe_register_sites)
        return;
    strobe_probe_register_sites(__start_strobe_probe_sites,
                                (size_t)(__stop_strobe_probe_sites - __start_strobe_probe_sites));
}
#else
/* C++: a static local of an inline function or template is emitted in a COMDAT group
 * (or in a section of its own), which cannot share a named section with the others;
 * C++ sites register on their first hit. */
#define STROBE__SECTION
#endif

#define STROBE__SITE_INIT(name, n) \
    { 2, NULL, #name, sizeof(#name) - 1, __FILE__, sizeof(__FILE__) - 1, __LINE__, n }

#define STROBE__ON(site) __builtin_expect(__atomic_load_n(&(site).state, __ATOMIC_RELAXED) != 0, 0)

/* Fire through the library, or switch the site off for good when it is absent. */
#define STROBE__CALL(site, n, ...)                                                      \
    do {                                                                                \
        if (STROBE_PROBE_AVAILABLE()) {                                                  \
            const uint64_t strobe__args[n + 1] = {STROBE__ARGS(n, ##__VA_ARGS__)};      \
            strobe_probe_fire(&(site), strobe__args, n);                                \
        } else {                                                                        \
            __atomic_store_n(&(site).state, 0, __ATOMIC_RELAXED);                       \
        }                                                                               \
    } while (0)

/* STROBE_PROBE(name, args...): a probe point called `name` (an identifier) with
 * 0 to 6 integer or pointer arguments. */
#define STROBE_PROBE(name, ...)                                                          \
    do {                                                                                 \
        static STROBE__SECTION struct strobe_probe_site strobe__site =                   \
            STROBE__SITE_INIT(name, STROBE__NARGS(__VA_ARGS__));                         \
        if (STROBE__ON(strobe__site))                                                    \
            STROBE__CALL(strobe__site, STROBE__NARGS(__VA_ARGS__), ##__VA_ARGS__);       \
    } while (0)

struct strobe__scope {
    const struct strobe_probe_site *site; /* NULL when disabled at entry */
    uint64_t start;
};

static inline void strobe__scope_end(struct strobe__scope *s) {
    if (__builtin_expect(s->site != NULL, 0) && STROBE_PROBE_AVAILABLE())
        strobe_probe_exit(s->site, s->start);
}

static inline struct strobe__scope strobe__scope_begin(struct strobe_probe_site *site,
                                                       const uint64_t *args, uint32_t n) {
    struct strobe__scope s = {NULL, 0};
    if (STROBE_PROBE_AVAILABLE()) {
        s.start = strobe_probe_enter(site, args, n);
        s.site = site;
    } else {
        __atomic_store_n(&site->state, 0, __ATOMIC_RELAXED);
    }
    return s;
}

#define STROBE__SCOPE(id, name, ...)                                                       \
    static STROBE__SECTION struct strobe_probe_site STROBE__CAT(strobe__ssite, id) =       \
        STROBE__SITE_INIT(name, STROBE__NARGS(__VA_ARGS__));                               \
    __attribute__((cleanup(strobe__scope_end), unused)) struct strobe__scope               \
        STROBE__CAT(strobe__scope, id) =                                                   \
            STROBE__ON(STROBE__CAT(strobe__ssite, id))                                     \
                ? ({                                                                       \
                      const uint64_t strobe__sargs[STROBE__NARGS(__VA_ARGS__) + 1] = {     \
                          STROBE__ARGS(STROBE__NARGS(__VA_ARGS__), ##__VA_ARGS__)};        \
                      strobe__scope_begin(&STROBE__CAT(strobe__ssite, id), strobe__sargs,  \
                                          STROBE__NARGS(__VA_ARGS__));                     \
                  })                                                                       \
                : (struct strobe__scope){NULL, 0}

/* STROBE_PROBE_SCOPE(name, args...): a scoped probe until the end of the enclosing
 * block: an entry event now, an exit event with the elapsed nanoseconds when the
 * block is left. Disabled, its arguments are not evaluated. */
#define STROBE_PROBE_SCOPE(name, ...) STROBE__SCOPE(__COUNTER__, name, ##__VA_ARGS__)

#ifdef __cplusplus
}
#endif

#endif /* STROBE_PROBE_H */
