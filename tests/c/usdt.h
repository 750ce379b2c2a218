/* The USDT probe macros strobe's test programs use, so that building them needs no
 * systemtap-sdt-dev (<sys/sdt.h>). Each probe leaves what <sys/sdt.h> leaves, which is
 * what strobe-uprobe's note parser reads:
 *
 * - a `nop` at the probe site;
 * - a `.note.stapsdt` note (owner "stapsdt", type 3) whose descriptor holds the site's
 *   address, the address of `.stapsdt.base`, the semaphore's address (0: none), then
 *   "provider\0name\0args\0", with args in the "SIZE@OPERAND" form (-4@%edi: a signed
 *   4-byte value in %edi);
 * - a `.stapsdt.base` section (one byte, shared by every probe of the object).
 *
 * A probe whose provider and name have a semaphore `provider_name_semaphore` (an
 * `unsigned short` in section ".probes") uses USDT_PROBE1_SEMA, which records its
 * address: a tool that attaches increments it, so the program can test it and skip
 * the cost of computing arguments.
 *
 * x86-64 and aarch64, one argument (all the test programs need), GCC and Clang. */
#ifndef STROBE_TEST_USDT_H
#define STROBE_TEST_USDT_H

#if defined(__x86_64__)
#define USDT_ASM_ADDR ".8byte"
#elif defined(__aarch64__)
#define USDT_ASM_ADDR ".8byte"
#else
#error "tests/c/usdt.h: x86-64 or aarch64 only"
#endif

/* The size of an argument, negated for signed types (the "-4@" form): %n prints the
 * negation of a constant, so it is given the opposite sign. */
#define USDT_ARG_SIZE(x) \
    (((__typeof__((x) + 0))-1 < (__typeof__((x) + 0))1) ? (int)sizeof((x) + 0) : -(int)sizeof((x) + 0))

#define USDT_NOTE(provider, name, sema_addr)                                             \
    "990: nop\n"                                                                         \
    ".pushsection .note.stapsdt,\"?\",\"note\"\n"                                        \
    ".balign 4\n"                                                                        \
    ".4byte 992f-991f, 994f-993f, 3\n"                                                   \
    "991: .asciz \"stapsdt\"\n"                                                          \
    "992: .balign 4\n"                                                                   \
    "993: " USDT_ASM_ADDR " 990b\n"                                                      \
    USDT_ASM_ADDR " _.stapsdt.base\n"                                                    \
    USDT_ASM_ADDR " " sema_addr "\n"                                                     \
    ".asciz \"" #provider "\"\n"                                                         \
    ".asciz \"" #name "\"\n"                                                             \
    ".asciz \"%n[size]@%[arg]\"\n"                                                       \
    "994: .balign 4\n"                                                                   \
    ".popsection\n"                                                                      \
    ".ifndef _.stapsdt.base\n"                                                           \
    ".pushsection .stapsdt.base,\"aG\",\"progbits\",.stapsdt.base,comdat\n"              \
    ".weak _.stapsdt.base\n"                                                             \
    ".hidden _.stapsdt.base\n"                                                           \
    "_.stapsdt.base: .space 1\n"                                                         \
    ".size _.stapsdt.base, 1\n"                                                          \
    ".popsection\n"                                                                      \
    ".endif\n"

/* A probe with one argument and no semaphore. */
#define USDT_PROBE1(provider, name, a1)                                                  \
    __asm__ __volatile__(USDT_NOTE(provider, name, "0")                                  \
                         :: [size] "n"(USDT_ARG_SIZE(a1)), [arg] "nor"(a1))

/* A probe with one argument whose semaphore is `provider_name_semaphore`. */
#define USDT_PROBE1_SEMA(provider, name, a1)                                             \
    __asm__ __volatile__(USDT_NOTE(provider, name, #provider "_" #name "_semaphore")     \
                         :: [size] "n"(USDT_ARG_SIZE(a1)), [arg] "nor"(a1))

#endif
