/*
 * The cost model's background (work.model.background_millicores; docs/work-model.md): CPU a
 * JVM burns whatever its call rate, in its collector, JIT compiler and timers, burnt at a steady
 * rate on a thread of its own, echod-bg. A slice is 1 ms of the thread's own CPU clock
 * (echod_burn_ns), one every 1000 / millicores ms on an absolute schedule; each is one
 * echod_work_model_charges_total{kind="background",thread="background"}.
 *
 * A thread of its own rather than the loop's idle time: a saturated loop has none, yet the
 * plateau a JVM publishes has its background in it; on a thread of its own the background
 * competes for the CPU at every load as a JVM's background threads do, under the process's CPU
 * affinity and dispatch.sched_policy like every echod thread.
 */
#ifndef ECHOD_BACKGROUND_H
#define ECHOD_BACKGROUND_H

#include <stddef.h>
#include "config/config.h"

typedef struct echod_background echod_background_t;

/*
 * Main thread, at start-up: starts echod-bg when the model is enabled with a background rate,
 * *out the handle; else *out is NULL. 0, or -1 with err filled when the thread cannot start.
 */
int echod_background_start(const echod_work_model_t *cfg, echod_background_t **out, char *err, size_t errlen);

/* Main thread, at shutdown: stops and joins it, and frees it (NULL: nothing). */
void echod_background_stop(echod_background_t *bg);

#endif
