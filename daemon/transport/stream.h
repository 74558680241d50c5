/*
 * One HTTP/2 stream carrying one gRPC call: the request-header checks, the request metadata,
 * the hand-off of DATA to the deframer, the send side (data provider, trailers) and the pump
 * that turns what the stream saw into the call's steps (grpc-java's TransportState feeding its
 * ServerStreamListener). The call (dispatch/call.h) lives inside the stream, as h2o keeps a
 * request inside its HTTP/2 stream, and reaches it only through echod_stream_call_ops.
 *
 * Threads: everything here is for the owning loop thread, except the call ops, which hop to
 * it with a loop task, and the stream's release (a worker may drop the last reference).
 * The connection (transport/conn.h) owns the session and the socket; a stream uses them
 * through the echod_conn__* functions (transport/conn_internal.h).
 */
#ifndef ECHOD_STREAM_H
#define ECHOD_STREAM_H

#include <h2o/timeout.h>
#include <nghttp2/nghttp2.h>
#include "dispatch/call.h"
#include "grpc/deframe.h"

struct echod_conn;
struct echod_loop;

/*
 * Seven state machines, one field each. Their moves are the ones listed under each enum; no
 * other is made, and debug builds (meson's debug option: the default and sanitizer builds)
 * assert each move, as h2o asserts its stream states (the tables in stream.c). A state never
 * moves back: each field starts at 0 (the stream is zeroed) and only goes forward.
 */

/* The stream's life as the connection sees it. Moves: OPEN -> CLOSED (echod_stream_closed). */
typedef enum {
    ECHOD_STREAM_OPEN = 0, /* in the connection's list of streams */
    ECHOD_STREAM_CLOSED,   /* nghttp2 closed it or the connection went: the closed step is due */
} echod_stream_state_t;

/* What the client has sent. Moves: OPEN -> END_STREAM (echod_stream_end_received). */
typedef enum {
    ECHOD_RECV_OPEN = 0,   /* more DATA may come */
    ECHOD_RECV_END_STREAM, /* END_STREAM seen: the client half-closed */
} echod_recv_state_t;

/* What the deframer made of the DATA. Moves: OK -> FAILED (a bad frame arrives) -> REPORTED (the pump
 * ends the call with it). */
typedef enum {
    ECHOD_DEFRAME_STATE_OK = 0,
    ECHOD_DEFRAME_STATE_FAILED,   /* a bad frame: input is dropped, the error is due */
    ECHOD_DEFRAME_STATE_REPORTED, /* and the call was ended with it */
} echod_deframe_state_t;

/* What the server has queued: each state implies the ones before it. Moves: IDLE -> HEADERS (the first
 * message) -> TRAILERS_QUEUED (the status) -> DONE (sent); IDLE -> TRAILERS_QUEUED (Trailers-Only: a
 * status before any message, or a rejection). */
typedef enum {
    ECHOD_SEND_IDLE = 0,
    ECHOD_SEND_HEADERS,         /* response HEADERS submitted, messages may follow */
    ECHOD_SEND_TRAILERS_QUEUED, /* status queued (trailers, or Trailers-Only with the HEADERS) */
    ECHOD_SEND_DONE,            /* the frame with END_STREAM is on its way to the socket */
} echod_send_state_t;

/* Which of the call's steps the pump has submitted. Moves: NONE -> STARTED -> HALF_CLOSED -> CLOSED;
 * STARTED -> CLOSED (the stream closed before the client half-closed); NONE -> REJECTED (at
 * HEADERS: an HTTP error, a shed call, a bad grpc-timeout). */
typedef enum {
    ECHOD_STEPS_NONE = 0,
    ECHOD_STEPS_STARTED,     /* lookup, start, on_ready */
    ECHOD_STEPS_HALF_CLOSED, /* and half_close (or messages_and_half_close) */
    ECHOD_STEPS_CLOSED,      /* and closed: nothing more */
    ECHOD_STEPS_REJECTED,    /* answered before any step (HTTP error, shed, bad grpc-timeout): never any */
} echod_steps_state_t;

/* Whether the pump is running (an inline step may re-enter it). Moves: IDLE -> RUNNING -> IDLE;
 * RUNNING -> AGAIN (re-entered) -> RUNNING (the next round); AGAIN -> AGAIN (re-entered again). */
typedef enum {
    ECHOD_PUMP_IDLE = 0,
    ECHOD_PUMP_RUNNING,
    ECHOD_PUMP_AGAIN, /* re-entered while running: the running pump goes round once more */
} echod_pump_state_t;

/* Which streams a shutdown drain counts. Moves: NONE -> OPEN (the drain began) -> CUT (drain_timeout);
 * NONE -> CUT (a max_connection_age grace cut). */
typedef enum {
    ECHOD_DRAIN_NONE = 0,
    ECHOD_DRAIN_OPEN, /* open when the drain began: counted finished when it closes */
    ECHOD_DRAIN_CUT,  /* ended UNAVAILABLE by a cut (drain_timeout or a max_connection_age grace) */
} echod_drain_state_t;

typedef struct echod_stream echod_stream_t;

struct echod_stream {
    echod_call_t call; /* first: the call's ops find the stream from it */
    struct echod_loop *loop;
    struct echod_conn *conn; /* holds a reference for the stream's life */
    int32_t id;
    echod_stream_state_t state;
    echod_recv_state_t recv;
    echod_deframe_state_t deframe;
    echod_send_state_t send;
    echod_steps_state_t steps;
    echod_pump_state_t pump;
    echod_drain_state_t drain;
    int ready_due;       /* on_ready is due (bytes drained below the threshold, or a wake-up) */
    int touched;         /* in the connection's touched list */
    int data_deferred;   /* the data provider said DEFERRED: resume it when something is queued */
    char *path;          /* :path as received (call.path points here) */
    size_t header_bytes; /* of the request header block, RFC 9113's way (name + value + 32 each) */
    struct {
        int method_seen, is_post, ct_seen, ct_ok, enc_unsupported, timeout_bad;
        int enc_seen;              /* grpc-encoding or grpc-accept-encoding present */
        echod_encoding_t encoding; /* grpc-encoding, when supported */
        unsigned accept;           /* grpc-accept-encoding as a set (echod_encoding_accept_parse) */
        uint64_t timeout_ns;       /* 0 = no grpc-timeout */
        echod_work_over_t work;    /* echod-* overrides (work/spec.h) */
        char *work_error;
        char *meta; /* custom request metadata, "name\0value\0" pairs, for echo_metadata */
        size_t meta_len, meta_count;
    } hdr; /* request headers, checked once HEADERS is complete */
    echod_deframer_t deframer;
    uint32_t requested;   /* messages the handler asked for and has not been given */
    size_t held_bytes;    /* received but not yet returned to the flow-control window */
    uint64_t deadline_ms; /* 0 = none; in h2o_now() time */
    const char *timing;   /* echod-timing for the trailers, as the close op was given it (the call's memory) */
    size_t out_queued;    /* bytes in out_head..out_tail not yet sent */
    int status_code;      /* trailers to send once the write queue is empty */
    char *status_message;
    echod_msg_t *out_head, *out_tail; /* messages waiting for nghttp2 */
    size_t out_offset;                /* bytes of out_head already sent */
    echod_stream_t *next_touched;
    echod_stream_t *prev_in_conn, *next_in_conn;
    h2o_timeout_entry_t deadline; /* linked while a grpc-timeout runs */
};

/* A new stream for a request HEADERS, from the loop's pool. It holds the transport's reference to
 * its call and one to conn. */
echod_stream_t *echod_stream_new(struct echod_conn *conn, int32_t id);

/* nghttp2's on_header callback: one request header field, counted against max_header_list_bytes. */
int echod_stream_on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                           const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data);

/* HEADERS is complete: HTTP checks, then admission (echod_call_admit), then the deadline. */
void echod_stream_headers_done(echod_stream_t *s);

/* nghttp2's on_data_chunk_recv callback: hands DATA to the deframer; bytes go back to the
 * flow-control window as their messages are delivered. */
int echod_stream_on_data(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data, size_t len,
                         void *user_data);

/* The send_data callback's part: copies `length` queued bytes, which nghttp2 has framed, to dst. */
void echod_stream_copy_data(echod_stream_t *s, uint8_t *dst, size_t length);

/* The client's END_STREAM arrived (with HEADERS or DATA): it has half-closed. */
void echod_stream_end_received(echod_stream_t *s);

/* The frame with END_STREAM was sent: 1 if the client still sends (the stream gets RST_STREAM). */
int echod_stream_end_sent(echod_stream_t *s);

/* The stream is gone: cancels the call unless its trailers went out, makes closed due. The
 * connection unlinks it afterwards and drops the transport's reference. */
void echod_stream_closed(echod_stream_t *s);

/* Submits whatever steps the stream state now makes due. Never inside nghttp2 callbacks. */
void echod_stream_pump(echod_stream_t *s);

/* Queues the status (trailers, or Trailers-Only) after the queued messages. message is copied;
 * timing (may be NULL) is kept as given until the trailers go: memory that lives as the call does. */
void echod_stream_close(echod_stream_t *s, int code, const char *message, const char *timing);

/* Shutdown: 1 if this stream counts as open for the drain (and marks it). */
int echod_stream_drain_mark(echod_stream_t *s);

/* A cut: ends the stream UNAVAILABLE unless it has already ended. */
void echod_stream_cut(echod_stream_t *s);

static inline echod_stream_t *echod_stream_of(echod_call_t *call)
{
    return (echod_stream_t *)call;
}

#endif
