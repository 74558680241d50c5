#ifndef ECHOD_CLOCK_H
#define ECHOD_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds. Any thread. */
uint64_t echod_now_ns(void);

#endif
