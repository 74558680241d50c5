/* A minimal test harness: CHECK records a failure and goes on; check_done prints the totals. */
#ifndef ECHOD_TEST_CHECK_H
#define ECHOD_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

static int check_passed, check_failed;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (cond) {                                                                                                    \
            check_passed++;                                                                                            \
        } else {                                                                                                       \
            check_failed++;                                                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);                                   \
        }                                                                                                              \
    } while (0)

/* ECHOD_TEST_STRESS=N: how many times over a test runs its races (1 unset; CI's arm64 suite: 20). */
static inline long check_stress(void)
{
    const char *v = getenv("ECHOD_TEST_STRESS");
    long n = v != NULL ? atol(v) : 0;
    return n > 0 ? n : 1;
}

static inline int check_done(void)
{
    printf("%d passed, %d failed\n", check_passed, check_failed);
    return check_failed == 0 ? 0 : 1;
}

#endif
