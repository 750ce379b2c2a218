/* Thread churn: 300 rounds of 8 short threads (2,400 in all, more than the agent's 1,024
 * slots), so the agent must reclaim the slots of exited threads to follow them all. */
#include <pthread.h>
#include <stdio.h>

static volatile unsigned long sink;

static void *work(void *arg) {
    unsigned long x = (unsigned long)arg;
    for (int i = 0; i < 200000; i++) x = x * 3 + i;
    sink = x;
    return NULL;
}

int main(void) {
    for (int round = 0; round < 300; round++) {
        pthread_t t[8];
        for (long i = 0; i < 8; i++)
            if (pthread_create(&t[i], NULL, work, (void *)i) != 0) return 2;
        for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    }
    printf("churn done\n");
    return 0;
}
