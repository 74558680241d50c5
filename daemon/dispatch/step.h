/*
 * The steps of a call (docs/dispatch-model.md, section 2) as counted in echod_call_steps_total{step},
 * and the hand-offs that carry them between threads (section 7) as counted in
 * echod_handoffs_total{receiver,found}. Each enum's label values are beside it (step.c asserts one
 * per value).
 */
#ifndef ECHOD_STEP_H
#define ECHOD_STEP_H

typedef enum {
    ECHOD_STEP_METHOD_LOOKUP = 0,
    ECHOD_STEP_START_CALL,
    ECHOD_STEP_ON_READY,
    ECHOD_STEP_MESSAGES_AVAILABLE,
    ECHOD_STEP_HALF_CLOSED,
    ECHOD_STEP_CLOSED,
    ECHOD_STEP_LOOKUP_AND_START,        /* merge_lookup_and_start: steps 1+2 as one */
    ECHOD_STEP_MESSAGES_AND_HALF_CLOSE, /* coalesce_end_stream: steps 4+5 as one */
    ECHOD_STEP__COUNT
} echod_step_kind_t;

/* Label values, indexed by echod_step_kind_t (ECHOD_STEP__COUNT of them: step.c asserts it). */
extern const char *const echod_step_names[];

/* Who received a hand-off: a worker (a dispatch of the call's drain), or its loop (a loop task). */
typedef enum {
    ECHOD_HANDOFF_TO_LOOP = 0,
    ECHOD_HANDOFF_TO_WORKER,
    ECHOD_HANDOFF_RECEIVER__COUNT
} echod_handoff_receiver_t;
extern const char *const echod_handoff_receiver_names[];

/* What the hand-off found: its receiver parked (asleep in its wait, which the hand-off ended) or
 * running (it took the hand-off from its queue without sleeping). */
typedef enum { ECHOD_HANDOFF_PARKED = 0, ECHOD_HANDOFF_RUNNING, ECHOD_HANDOFF_FOUND__COUNT } echod_handoff_found_t;
extern const char *const echod_handoff_found_names[];

#endif
