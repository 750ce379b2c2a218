// strobe-testprogs: -static
/* A statically linked program: strobe cannot inject its agent into it (no dynamic loader,
 * so no LD_PRELOAD) and must say so before launching anything. */
#include <stdio.h>

int main(void) {
    printf("hello from a static binary\n");
    return 0;
}
