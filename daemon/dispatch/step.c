#include "dispatch/step.h"

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

const char *const echod_step_names[] = {
    [ECHOD_STEP_METHOD_LOOKUP] = "method_lookup",
    [ECHOD_STEP_START_CALL] = "start_call",
    [ECHOD_STEP_ON_READY] = "on_ready",
    [ECHOD_STEP_MESSAGES_AVAILABLE] = "messages_available",
    [ECHOD_STEP_HALF_CLOSED] = "half_closed",
    [ECHOD_STEP_CLOSED] = "closed",
    [ECHOD_STEP_LOOKUP_AND_START] = "lookup_and_start",
    [ECHOD_STEP_MESSAGES_AND_HALF_CLOSE] = "messages_and_half_close",
};
_Static_assert(NELEMS(echod_step_names) == ECHOD_STEP__COUNT, "a name per step");

const char *const echod_handoff_receiver_names[] = {
    [ECHOD_HANDOFF_TO_LOOP] = "loop",
    [ECHOD_HANDOFF_TO_WORKER] = "worker",
};
_Static_assert(NELEMS(echod_handoff_receiver_names) == ECHOD_HANDOFF_RECEIVER__COUNT, "a name per receiver");

const char *const echod_handoff_found_names[] = {
    [ECHOD_HANDOFF_PARKED] = "parked",
    [ECHOD_HANDOFF_RUNNING] = "running",
};
_Static_assert(NELEMS(echod_handoff_found_names) == ECHOD_HANDOFF_FOUND__COUNT, "a name per finding");
