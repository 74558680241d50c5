/* The steps of a call (docs/dispatch-model.md, section 2) as counted in echod_call_steps_total{step}. */
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

#endif
