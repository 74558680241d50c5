/*
 * The cost model (docs/work-model.md): synthetic CPU that rides on the dispatch structure. Where
 * grpc-java's JVM spends a call's CPU in its transport, in each step, in each hand-off between
 * threads (more for one that wakes a parked thread) and in each message, the model burns a unit
 * cost at the same point, on the thread that does that work, so a toggle that removes a step or a
 * hand-off saves what it saves in grpc-java. Beside the calls, the server's model prices the I/O
 * loop's own wake-ups (transport/loop.c) and a steady background (work/background.h).
 *
 * A call's model is resolved with its work (work/spec.h) and read-only after; every charge
 * point costs one branch on `on` when the model is off.
 */
#ifndef ECHOD_MODEL_H
#define ECHOD_MODEL_H

#include <stdint.h>
#include "config/config.h"
#include "work/charges.h"

typedef struct {
    int on;                           /* 0: no charge of a call's (call ... message) burns anything */
    uint32_t us[ECHOD_CHARGE__COUNT]; /* unit costs by echod_charge_kind_t; all 0 when not enabled */
    uint32_t wakeup_short_us;         /* WAKEUP after no sleep at all... */
    uint64_t wakeup_full_sleep_ns;    /* ...and the whole unit from this sleep on (0: whatever the sleep) */
    double wakeup_exponent;
} echod_model_t;

/* From the config's (or a call's) unit costs: on when enabled and a call's cost is not 0. */
void echod_model_init(echod_model_t *m, const echod_work_model_t *cfg);

/* Burns one unit of `kind` on the calling thread and counts it (not for ECHOD_CHARGE_CALL). */
void echod_model_charge(const echod_model_t *m, echod_charge_kind_t kind, echod_charge_thread_t thread);

/*
 * One I/O wake-up of the calling loop after `slept_ns` in its poll: WAKEUP, or for a sleep
 * shorter than the model's full sleep short + (WAKEUP - short) x (slept / full)^exponent
 * (config.h): a thread woken after a short sleep finds more of its caches as it left them.
 */
void echod_model_charge_wakeup(const echod_model_t *m, uint64_t slept_ns);

/*
 * One hand-off received by the calling thread: HANDOFF, and HANDOFF_WAKE on top when it found
 * the thread parked (`parked`), and HANDOFF_WAKE_LOOP on top of that when the thread is a loop,
 * burnt in one stretch and counted as a charge of each kind.
 */
void echod_model_charge_handoff(const echod_model_t *m, echod_charge_thread_t thread, int parked);

/*
 * The call charge, on the call's loop, in two halves: the request headers (counted as the
 * call's one charge) and the trailers. A call that never sends trailers burns only the first.
 */
void echod_model_charge_call(const echod_model_t *m, int trailers);

/* Burns `us` on the calling thread as one charge of `kind` (what no unit of a model holds: the
 * background's slices). */
void echod_model_charge_us(echod_charge_kind_t kind, echod_charge_thread_t thread, uint32_t us);

#endif
