/*
 * Seeded draws of synthetic work: how long a handler computes or sleeps (work.defaults.cpu_dist,
 * sleep_dist) and whether it fails on purpose (error_rate).
 *
 * A draw is a pure function of (work.seed, the call's key, the draw's index in the call): a
 * counter-based generator, not a generator with state. So a call draws the same values whichever
 * thread runs its handler and whatever other calls do meanwhile. The call's key is the call's
 * number on its I/O loop in the order its HEADERS arrived (the transport's `seq`), or its
 * echod-seed metadata: the same seed and the same sequence of requests (or the same echod-seed
 * values) reproduce the same values, run after run.
 */
#ifndef ECHOD_DRAW_H
#define ECHOD_DRAW_H

#include <stdint.h>
#include "config/config.h"

/* Where one call's draws come from; owned by the call's steps (they never overlap). */
typedef struct {
    uint64_t key;  /* work.seed mixed with the call's key */
    uint64_t next; /* index of the next draw */
} echod_draws_t;

/* What one run of the handler's work (a call, or one bidi message) drew. */
typedef struct {
    uint64_t cpu_us, sleep_us;
    int fail; /* error_rate said this one fails */
} echod_drawn_t;

/* A call's draws: from `seed` (work.seed) and the call's key; `seeded` keys come from echod-seed
 * metadata and never collide with sequence numbers. */
void echod_draws_init(echod_draws_t *d, uint64_t seed, uint64_t key, int seeded);

/* Uniform in [0, 1) for (key, index): the generator itself. Pure, any thread. */
double echod_draw_uniform(uint64_t key, uint64_t index);

/* The value of a distribution around `us` for the uniforms u (the value) and v (a stall). */
uint64_t echod_dist_value(const echod_dist_t *dist, uint32_t us, double u, double v);

/*
 * Draws the cpu, the sleep and the failure of one handler run of `w` (capped at the work caps in
 * microseconds) and observes them in echod_work_drawn_seconds. Inside the call's steps.
 */
void echod_draw_work(const echod_work_t *w, echod_draws_t *d, uint64_t max_cpu_us, uint64_t max_sleep_us,
                     echod_drawn_t *out);

#endif
