#ifndef ECHOD_CLOCK_H
#define ECHOD_CLOCK_H

#include <pthread.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. Any thread. */
uint64_t echod_now_ns(void);

/* A condition variable whose timed waits take echod_now_ns deadlines (CLOCK_MONOTONIC: a change of
 * the wall clock moves no wake-up). */
void echod_cond_init_monotonic(pthread_cond_t *cond);

/* pthread_cond_timedwait on such a condition until deadline_ns (echod_now_ns time); its result. */
int echod_cond_wait_until(pthread_cond_t *cond, pthread_mutex_t *lock, uint64_t deadline_ns);

#endif
