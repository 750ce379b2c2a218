// The coverage zoo: prints the signal state a program starts with (its blocked signals
// and which signals it ignores), so a test can compare it with and without strobe.
//
//   zoo_sigstate -> "blocked=1,10 ignored=2,13"
#include <signal.h>
#include <stdio.h>

int main(void) {
    sigset_t cur;
    sigprocmask(SIG_BLOCK, 0, &cur);
    printf("blocked=");
    const char *sep = "";
    for (int s = 1; s < 32; s++)
        if (sigismember(&cur, s)) { printf("%s%d", sep, s); sep = ","; }
    printf(" ignored=");
    sep = "";
    for (int s = 1; s < 32; s++) {
        struct sigaction a;
        if (sigaction(s, 0, &a) == 0 && a.sa_handler == SIG_IGN) { printf("%s%d", sep, s); sep = ","; }
    }
    printf("\n");
    return 0;
}
