/* The label values of transport/events.h's enums, each indexed by its enum. */
#include "transport/events.h"

#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

const char *const echod_loop_task_names[] = {
    [ECHOD_LOOP_TASK_REQUEST] = "request",
    [ECHOD_LOOP_TASK_WRITE] = "write",
    [ECHOD_LOOP_TASK_CLOSE] = "close",
};
_Static_assert(NELEMS(echod_loop_task_names) == ECHOD_LOOP_TASK__COUNT, "a name per loop task kind");

const char *const echod_loop_wake_names[] = {
    [ECHOD_LOOP_WAKE_IO] = "io",
    [ECHOD_LOOP_WAKE_TASK] = "task",
};
_Static_assert(NELEMS(echod_loop_wake_names) == ECHOD_LOOP_WAKE__COUNT, "a name per wake-up cause");

const char *const echod_flush_trigger_names[] = {
    [ECHOD_FLUSH_TRIGGER_LOOP_TAIL] = "loop_tail",
    [ECHOD_FLUSH_TRIGGER_READ_COMPLETE] = "read_complete",
    [ECHOD_FLUSH_TRIGGER_IMMEDIATE] = "immediate",
    [ECHOD_FLUSH_TRIGGER_LOOP_TASK] = "loop_task",
};
_Static_assert(NELEMS(echod_flush_trigger_names) == ECHOD_FLUSH_TRIGGER__COUNT, "a name per flush trigger");

const char *const echod_close_reason_names[] = {
    [ECHOD_CLOSE_HANDSHAKE_TIMEOUT] = "handshake_timeout",
    [ECHOD_CLOSE_IDLE] = "idle",
    [ECHOD_CLOSE_MAX_AGE] = "max_age",
    [ECHOD_CLOSE_LIMIT] = "limit",
    [ECHOD_CLOSE_RESET_FLOOD] = "reset_flood",
    [ECHOD_CLOSE_FLOOD] = "flood",
    [ECHOD_CLOSE_PROTOCOL_ERROR] = "protocol_error",
};
_Static_assert(NELEMS(echod_close_reason_names) == ECHOD_CLOSE__COUNT, "a name per close reason");

const char *const echod_closed_frame_names[] = {
    [ECHOD_CLOSED_FRAME_DISCARDED] = "discarded",
    [ECHOD_CLOSED_FRAME_STREAM_CLOSED] = "stream_closed",
    [ECHOD_CLOSED_FRAME_PROTOCOL_ERROR] = "protocol_error",
};
_Static_assert(NELEMS(echod_closed_frame_names) == ECHOD_CLOSED_FRAME__COUNT, "a name per closed-stream answer");

const char *const echod_rest_status_names[] = {
    [ECHOD_REST_STATUS_200] = "200", [ECHOD_REST_STATUS_400] = "400", [ECHOD_REST_STATUS_404] = "404",
    [ECHOD_REST_STATUS_405] = "405", [ECHOD_REST_STATUS_413] = "413",
};
_Static_assert(NELEMS(echod_rest_status_names) == ECHOD_REST_STATUS_MAX, "a name per REST status");
