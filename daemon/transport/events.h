/*
 * What the transport counts, by kind: the enums live here, with their owner, and metrics sizes
 * its counters by them (echod_loop_tasks_total, echod_flushes_total,
 * echod_connections_closed_total, echod_closed_stream_frames_total).
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

/* Why a connection flushed (transport/conn.c). */
typedef enum {
    ECHOD_FLUSH_TRIGGER_LOOP_TAIL = 0,
    ECHOD_FLUSH_TRIGGER_READ_COMPLETE,
    ECHOD_FLUSH_TRIGGER_IMMEDIATE,
    ECHOD_FLUSH_TRIGGER_LOOP_TASK,
    ECHOD_FLUSH_TRIGGER__COUNT
} echod_flush_trigger_t;

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

/* How the server answered a DATA or HEADERS frame on a closed client stream (transport/stream_ids.h). */
typedef enum {
    ECHOD_CLOSED_FRAME_DISCARDED = 0,  /* the server had reset the stream, or it is above a GOAWAY */
    ECHOD_CLOSED_FRAME_STREAM_CLOSED,  /* a connection error STREAM_CLOSED */
    ECHOD_CLOSED_FRAME_PROTOCOL_ERROR, /* HEADERS on a skipped id: a connection error PROTOCOL_ERROR */
    ECHOD_CLOSED_FRAME__COUNT
} echod_closed_frame_t;

#endif
