/*
 * A call: one gRPC stream from HEADERS to close, and the six steps of DESIGN.md section 2.
 *
 * Two sides share this struct, and each field says which one owns it:
 *  - `io`: the transport, on the owning loop thread only (stream state, deframer, write queue).
 *  - `h`: the handler, inside steps only (steps of one call never run concurrently).
 * A few atomics are shared (refcount, cancelled, out_bytes).
 *
 * Handlers use only the echod_call_* functions below: on the loop thread they act at once,
 * elsewhere they post a counted loop task to the owning loop (the request(n) and write hops).
 */
#ifndef ECHOD_CALL_H
#define ECHOD_CALL_H

#include <stdatomic.h>
#include <stdint.h>
#include <h2o/timeout.h>
#include "config/config.h"
#include "dispatch/serializer.h"
#include "dispatch/step.h"
#include "grpc/codec.h"
#include "grpc/deframe.h"
#include "grpc/status.h"
#include "services/registry.h"

struct echod_conn;
struct echod_loop;
struct echod_server;

typedef struct echod_call echod_call_t;

/* One submission to the serializer: a step and, for messages_available, its message. */
typedef struct {
    echod_step_t super;
    echod_call_t *call;
    echod_step_kind_t kind;
    echod_msg_t *msg;
    uint64_t submitted_ns; /* for the queue part of echod-timing; 0 when timing is off */
    int on_stack;          /* run at once by an idle inline runner: not to be freed */
} echod_call_step_t;

struct echod_call {
    atomic_int refs;
    atomic_int cancelled;    /* set by the loop when the stream is reset, times out or dies */
    atomic_size_t out_bytes; /* handler-queued response bytes not yet handed to the socket */
    struct echod_server *server;
    struct echod_loop *loop;
    struct echod_conn *conn;
    const echod_method_t *method; /* set by method_lookup (NULL while unknown) */
    uint64_t started_ns;
    int final_code; /* the status the call ended with: written by the loop before `closed` */
    /* Synthetic work for this call: resolved on the loop when HEADERS completes, read-only after. */
    echod_work_t work;
    /* grpc-encoding of the request and of the response: resolved on the loop when HEADERS
     * completes, read-only after (the first step is submitted after it) */
    echod_encoding_t in_encoding, out_encoding;
    char *work_error;           /* "echod-cpu-us: ..." when a work header was malformed: INVALID_ARGUMENT */
    unsigned admitted : 1;      /* counted against limits.max_calls_in_flight */
    atomic_int handler_started; /* start_call ran: a deadline after this was not "expired in queue" */
    /* Server timing (telemetry.timing_trailer): steps add to these inside the serializer.
     * step_ended_ns, once a step has run handler code, is a clock read taken after the last of it
     * (do_message's or echod_call_close's), which the step then takes as its end. */
    uint64_t queue_ns, handler_ns, step_started_ns, step_ended_ns;
    echod_serializer_t serializer;
    /* A handler's echod_call_sleep, which echod_call_cancel (the loop) cuts short. */
    echod_exec_sleeper_t sleeper;

    struct {
        void *state;          /* the method's own */
        char timing[96];      /* echod-timing value, filled by echod_call_close */
        int closed;           /* echod_call_close was called */
        echod_codec_t *codec; /* made by the first message to inflate or deflate (grpc/codec.h); freed by `closed` */
    } h;

    struct {
        int32_t stream_id;
        char *path; /* :path as received, for method_lookup */
        size_t path_len;
        struct {
            unsigned method_seen : 1, is_post : 1, ct_seen : 1, ct_ok : 1, enc_unsupported : 1, timeout_bad : 1,
                enc_seen : 1;          /* grpc-encoding or grpc-accept-encoding present */
            echod_encoding_t encoding; /* grpc-encoding, when supported */
            unsigned accept;           /* grpc-accept-encoding as a set (echod_encoding_accept_parse) */
            uint64_t timeout_ns;       /* 0 = no grpc-timeout */
            echod_work_t work;         /* echod-* overrides, valid where `work_set` has the bit */
            unsigned work_set;         /* 1 << ECHOD_WORK_* */
            char *work_error;
            char *meta; /* custom request metadata, "name\0value\0" pairs, for echo_metadata */
            size_t meta_len, meta_count;
        } hdr; /* request headers, checked once HEADERS is complete */
        echod_deframer_t deframer;
        uint32_t requested;   /* messages the handler asked for and has not been given */
        size_t held_bytes;    /* received but not yet returned to the flow-control window */
        uint64_t deadline_ms; /* 0 = none; in h2o_now() time */
        unsigned started : 1, end_stream : 1, half_close_submitted : 1, ready_due : 1, closed : 1, close_submitted : 1,
            headers_sent : 1, trailers_queued : 1, trailers_sent : 1, touched : 1, deframe_failed : 1,
            deframe_reported : 1, data_deferred : 1, expired : 1, pumping : 1, repump : 1, rejected : 1, in_conn : 1,
            drain_open : 1, drain_cut : 1;
        /* When the inline step that ran last in this pump ended, 0 outside a pump: back-to-back
         * inline steps share that clock read as the next one's start (timing on). */
        uint64_t chain_ns;
        const char *timing; /* echod-timing for the trailers (points into h.timing) */
        size_t out_queued;  /* bytes in out_head..out_tail not yet sent */
        int status_code;    /* trailers to send once the write queue is empty */
        char *status_message;
        echod_msg_t *out_head, *out_tail; /* messages waiting for nghttp2 */
        size_t out_offset;                /* bytes of out_head already sent */
        echod_call_t *next_touched;
        echod_call_t *prev_in_conn, *next_in_conn;
        h2o_timeout_entry_t deadline; /* linked while a grpc-timeout runs */
    } io;
};

/* Loop thread. The call starts with one reference, the transport's. */
echod_call_t *echod_call_new(struct echod_server *server, struct echod_loop *loop, struct echod_conn *conn,
                             int32_t stream_id);
void echod_call_retain(echod_call_t *call);
void echod_call_release(echod_call_t *call);

/*
 * Loop thread: submits whatever steps the transport state now makes due (start, on_ready,
 * messages while requested, half_close, closed). Never called from inside nghttp2 callbacks.
 * Every step is submitted here, holding a reference (the inline runner takes none).
 */
void echod_call_pump(echod_call_t *call);

/*
 * Loop thread: the stream was reset, timed out, cut by drain or died. Handlers see
 * echod_call_is_cancelled, and a handler parked in echod_call_sleep wakes now.
 */
void echod_call_cancel(echod_call_t *call);

/* Loop thread, outside steps: makes on_ready due again (a health watch's status changed) and
 * pumps, so that like every step it is submitted by the pump, which holds the call. */
void echod_call_wake_ready(echod_call_t *call);

/* --- for handlers (inside steps, any thread) --- */

/* Asks for n more messages (flow control: bytes return to the window as they are delivered). */
void echod_call_request(echod_call_t *call, uint32_t n);
/* Sends one response message (ownership passes); headers go out with the first one. */
void echod_call_send(echod_call_t *call, echod_msg_t *msg);
/* Ends the call with a status (message may be NULL). Further sends are dropped. */
void echod_call_close(echod_call_t *call, int code, const char *message);
/* True while the handler's queued bytes are below transport.max_send_buffer_bytes. */
int echod_call_is_ready(echod_call_t *call);
int echod_call_is_cancelled(echod_call_t *call);
/*
 * Sleeps `us` microseconds (echod-sleep-us). On a virtual thread it parks, freeing the carrier,
 * and a cancel wakes it early; on any other thread it blocks the thread for the whole time.
 */
void echod_call_sleep(echod_call_t *call, uint32_t us);

#endif
