#include "dispatch/step.h"

const char *const echod_step_names[ECHOD_STEP__COUNT] = {
    "method_lookup", "start_call", "on_ready",         "messages_available",
    "half_closed",   "closed",     "lookup_and_start", "messages_and_half_close",
};
