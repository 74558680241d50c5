/*
 * Burning CPU on the calling thread's own CPU clock: the synthetic work of a handler
 * (echod-cpu-us) and every charge of the cost model (work/model.h). Time the thread spends
 * preempted does not count, so a burn costs its CPU whatever else the machine runs. Any thread.
 */
#ifndef ECHOD_BURN_H
#define ECHOD_BURN_H

#include <stdint.h>

/* Burns `ns` nanoseconds of this thread's CPU time (0: returns at once). */
void echod_burn_ns(uint64_t ns);

#endif
