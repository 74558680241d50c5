/*
 * The per-call serializer (docs/dispatch-model.md, section 3): steps of one call never run concurrently and
 * run in submission order. Three wrappers, chosen per call at init:
 *
 *  - serializing executor (grpc-java SerializingExecutor): an MPSC queue and a state word.
 *    submit appends, then tries STOPPED->RUNNING with a CAS; only the winner hands a drain to
 *    the executor (one dispatch). A submit that finds it RUNNING only appends (coalescing).
 *    A drain that ends while work arrived re-dispatches (fresh CAS, fresh dispatch).
 *  - inline runner (SerializeReentrantCallsDirectExecutor): runs a step at once on the calling
 *    thread; a step submitted while one runs is queued and runs right after. No dispatch, no
 *    atomics: only legal when every submit comes from one thread (the loop), and the submitter
 *    holds the owner alive until submit returns (the call's pump does), so the runner takes no
 *    reference of its own: that was two atomics per step on the floor arm.
 *  - pass-through (the "don't wrap sequential executors" proposal, grpc-java PR #5521, never
 *    merged; only with dispatch.unwrap_sequential): each step is handed to an
 *    executor that already runs tasks one at a time in FIFO order (fixed, 1 thread), one
 *    dispatch per step and no serializer state at all.
 *
 * Lifetime: the serializer lives inside its owner (the call). The serializing and pass-through
 * wrappers call owner_retain when they start running steps and owner_release when they have
 * stopped touching themselves, so the owner can be freed by the last step they run.
 */
#ifndef ECHOD_SERIALIZER_H
#define ECHOD_SERIALIZER_H

#include <stdatomic.h>
#include "dispatch/exec.h"

struct echod_exec_metrics;

typedef enum { ECHOD_SER_SERIALIZING = 0, ECHOD_SER_INLINE, ECHOD_SER_PASSTHROUGH } echod_ser_mode_t;

typedef struct echod_step echod_step_t;
struct echod_step {
    echod_task_t task; /* pass-through mode hands the step itself to the executor */
    _Atomic(echod_step_t *) next;
    void (*run)(echod_step_t *step); /* may free the step */
    struct echod_serializer *owner;  /* set by submit */
};

typedef struct echod_serializer echod_serializer_t;
struct echod_serializer {
    void (*owner_retain)(echod_serializer_t *s);
    void (*owner_release)(echod_serializer_t *s);
    /* NULL (init), or set by the owner before the first submit: called on the receiving thread
     * as a drain or a pass-through step starts there after a dispatch that crossed threads
     * (not through `direct`), with whether it found that thread parked (echod_exec_task_woke),
     * for the hand-off counters and the cost model's charge (work/model.h). */
    void (*on_handoff)(echod_serializer_t *s, int parked);
    /* Where the next drain goes; changed only by a step running on this serializer. */
    echod_exec_t *exec;
    struct echod_exec_metrics *exec_metrics;
    echod_ser_mode_t mode;
    /* serializing executor */
    _Atomic int running;
    _Atomic(echod_step_t *) head; /* producers exchange this */
    /* The drain pops from here. Atomic only because a finished drain may still peek at it while
     * the next drain (another thread, after a fresh CAS) pops: relaxed is enough for that. */
    _Atomic(echod_step_t *) tail;
    echod_step_t stub;
    echod_task_t drain;
    /* inline runner: loop thread only */
    int inline_busy;
    echod_step_t *iq_head, *iq_tail;
};

/* Any thread, before the first submit. */
void echod_serializer_init(echod_serializer_t *s, echod_exec_t *exec, struct echod_exec_metrics *exec_metrics,
                           echod_ser_mode_t mode);

/* Runs step->run(step) after every step submitted before it. Any thread (inline: loop only). */
void echod_serializer_submit(echod_serializer_t *s, echod_step_t *step);

/*
 * Moves later steps to another executor (method_lookup's per-method switch). Only legal from a
 * step running on this serializer, and only for the serializing executor: the drain stops
 * after the current step and the rest of the queue is dispatched to the new executor.
 */
void echod_serializer_switch(echod_serializer_t *s, echod_exec_t *exec, struct echod_exec_metrics *exec_metrics);

#endif
