/*
 * The cost model (docs/work-model.md): synthetic CPU that rides on the dispatch structure. Where
 * grpc-java's JVM spends a call's CPU in its transport, in each step, in each hand-off between
 * threads and in each message, the model burns a unit cost at the same point, on the thread that
 * does that work, so a toggle that removes a step or a hand-off saves what it saves in grpc-java.
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
    int on;                           /* 0: every charge is skipped */
    uint32_t us[ECHOD_CHARGE__COUNT]; /* unit costs by echod_charge_kind_t */
} echod_model_t;

/* From the config's (or a call's) unit costs: on when enabled and some cost is not 0. */
void echod_model_init(echod_model_t *m, const echod_work_model_t *cfg);

/* Burns one unit of `kind` on the calling thread and counts it (not for ECHOD_CHARGE_CALL). */
void echod_model_charge(const echod_model_t *m, echod_charge_kind_t kind, echod_charge_thread_t thread);

/*
 * The call charge, on the call's loop, in two halves: the request headers (counted as the
 * call's one charge) and the trailers. A call that never sends trailers burns only the first.
 */
void echod_model_charge_call(const echod_model_t *m, int trailers);

#endif
