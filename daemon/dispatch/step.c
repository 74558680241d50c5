#include "dispatch/step.h"

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
_Static_assert(sizeof(echod_step_names) / sizeof(echod_step_names[0]) == ECHOD_STEP__COUNT, "a name per step");
