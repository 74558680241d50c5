/*
 * What the transport counts, by kind: the enums live here, with their owner, and metrics sizes
 * its counters by them (echod_loop_tasks_total, echod_loop_wakeups_total, echod_flushes_total,
 * echod_connections_closed_total, echod_closed_stream_frames_total, echod_rest_requests_total).
 * Each enum's label values are beside it, indexed by it (events.c asserts one per value).
 */
#ifndef ECHOD_EVENTS_H
#define ECHOD_EVENTS_H

/* Work a handler off the home thread posts to its stream's loop (transport/stream.c). */
typedef enum {
    ECHOD_LOOP_TASK_REQUEST = 0,
    ECHOD_LOOP_TASK_WRITE,
    ECHOD_LOOP_TASK_CLOSE,
    ECHOD_LOOP_TASK__COUNT
} echod_loop_task_kind_t;
extern const char *const echod_loop_task_names[];

/* What woke an I/O loop that slept in its poll (transport/loop.c): a read or an accept, or a
 * batch of loop tasks (its queue's pipe). */
typedef enum { ECHOD_LOOP_WAKE_IO = 0, ECHOD_LOOP_WAKE_TASK, ECHOD_LOOP_WAKE__COUNT } echod_loop_wake_t;
extern const char *const echod_loop_wake_names[];

/* Why a connection flushed (transport/conn.c). */
typedef enum {
    ECHOD_FLUSH_TRIGGER_LOOP_TAIL = 0,
    ECHOD_FLUSH_TRIGGER_READ_COMPLETE,
    ECHOD_FLUSH_TRIGGER_IMMEDIATE,
    ECHOD_FLUSH_TRIGGER_LOOP_TASK,
    ECHOD_FLUSH_TRIGGER__COUNT
} echod_flush_trigger_t;
extern const char *const echod_flush_trigger_names[];

/* Why the server closed a connection (transport/conn.c). */
typedef enum {
    ECHOD_CLOSE_HANDSHAKE_TIMEOUT = 0,
    ECHOD_CLOSE_IDLE,
    ECHOD_CLOSE_MAX_AGE,
    ECHOD_CLOSE_LIMIT,
    ECHOD_CLOSE_RESET_FLOOD,    /* RST_STREAM over transport.max_resets_per_second (CVE-2023-44487) */
    ECHOD_CLOSE_FLOOD,          /* SETTINGS/PING acks piling up, too many CONTINUATION frames */
    ECHOD_CLOSE_PROTOCOL_ERROR, /* bad preface, malformed frames, any other HTTP/2 connection error */
    ECHOD_CLOSE__COUNT
} echod_close_reason_t;
extern const char *const echod_close_reason_names[];

/* How the server answered a DATA or HEADERS frame on a closed client stream (transport/stream_ids.h). */
typedef enum {
    ECHOD_CLOSED_FRAME_DISCARDED = 0,  /* the server had reset the stream, or it is above a GOAWAY */
    ECHOD_CLOSED_FRAME_STREAM_CLOSED,  /* a connection error STREAM_CLOSED */
    ECHOD_CLOSED_FRAME_PROTOCOL_ERROR, /* HEADERS on a skipped id: a connection error PROTOCOL_ERROR */
    ECHOD_CLOSED_FRAME__COUNT
} echod_closed_frame_t;
extern const char *const echod_closed_frame_names[];

/* Responses of the REST control arm (transport/rest.c), by HTTP status. */
typedef enum {
    ECHOD_REST_STATUS_200 = 0,
    ECHOD_REST_STATUS_400,
    ECHOD_REST_STATUS_404,
    ECHOD_REST_STATUS_405,
    ECHOD_REST_STATUS_413,
    ECHOD_REST_STATUS_MAX
} echod_rest_status_t;
extern const char *const echod_rest_status_names[];

#endif
