/*
 * A call: one gRPC request from HEADERS to close, and its six steps (docs/dispatch-model.md).
 *
 * The call is the dispatch side of a stream. The transport (transport/stream.h) embeds it in its
 * stream, drives it and is reached from here only through the call's ops table: dispatch never
 * sees a socket, a session or a loop. Fields say who owns them:
 *  - the transport's home thread (the I/O loop that owns the stream): `path`, `seq`, `chain`,
 *    `final_code` (written before the closed step is submitted);
 *  - the handler, inside steps only (steps of one call never run concurrently): `h`, the timing
 *    sums;
 *  - shared atomics: refs, cancelled, out_bytes, handler_started.
 *
 * Handlers use only the echod_call_* functions under "for handlers" (and the adapters of
 * services/adapters.h built on them).
 */
#ifndef ECHOD_CALL_H
#define ECHOD_CALL_H

#include <stdatomic.h>
#include <stdint.h>
#include "config/config.h"
#include "dispatch/dispatcher.h"
#include "dispatch/method.h"
#include "dispatch/serializer.h"
#include "dispatch/step.h"
#include "grpc/codec.h"
#include "grpc/deframe.h"
#include "grpc/status.h"
#include "work/spec.h"

typedef struct echod_call echod_call_t;

/*
 * What dispatch needs of the transport. request, send and close act at once on the home thread
 * and post a counted loop task (echod_loop_tasks_total) from any other; wake_ready posts an
 * uncounted one. free runs on whichever thread drops the last reference.
 */
typedef struct echod_call_ops {
    void (*request)(echod_call_t *call, uint32_t n);
    void (*send)(echod_call_t *call, echod_msg_t *msg); /* ownership passes */
    /* timing: the echod-timing trailer value (NULL or "" for none), in the call's own memory: the
     * transport keeps the pointer, whichever thread closed, until the trailers are sent */
    void (*close)(echod_call_t *call, int code, const char *message, const char *timing);
    /* makes on_ready due again and pumps, unless the stream is gone by then */
    void (*wake_ready)(echod_call_t *call);
    /* true on the call's home thread */
    int (*on_home)(const echod_call_t *call);
    /* the last reference went: the transport frees its stream, the call inside it */
    void (*free)(echod_call_t *call);
} echod_call_ops_t;

/* One submission to the serializer: a step and, for messages_available, its message. */
typedef struct {
    echod_step_t super;
    echod_call_t *call;
    echod_step_kind_t kind;
    echod_msg_t *msg;
    uint64_t submitted_ns; /* for the queue part of echod-timing; 0 when timing is off */
    int on_stack;          /* run at once by an idle inline runner: not to be freed */
} echod_call_step_t;

/* echod_call_admit's verdict. */
typedef enum {
    ECHOD_ADMIT_ACCEPTED = 0,
    ECHOD_ADMIT_SHED, /* over limits.max_calls_in_flight: end it RESOURCE_EXHAUSTED, submit no step */
} echod_admit_t;

struct echod_call {
    const echod_call_ops_t *ops;
    atomic_int refs;
    atomic_int cancelled;    /* set by the transport when the stream is reset, times out or dies */
    atomic_size_t out_bytes; /* handler-queued response bytes not yet handed to the socket */
    const echod_dispatcher_t *dispatcher;
    const echod_method_t *method; /* set by echod_call_admit (NULL while unknown) */
    /* :path as received, owned by the transport (valid for the call's life; NULL if none came) */
    const char *path;
    size_t path_len;
    /* The call's number on its loop, in the order HEADERS arrived (set by the transport before
     * admission): the key of its draws (work/draw.h) unless echod-seed gives one. */
    uint64_t seq;
    uint64_t started_ns;
    int final_code; /* the status the call ended with: written by the transport before `closed` */
    /* Synthetic work and the cost model for this call: resolved by echod_call_admit, read-only
     * after but for spec.draws, which the steps advance (they never overlap). */
    echod_work_spec_t spec;
    /* grpc-encoding of the request and of the response: set by the transport when HEADERS
     * completes, read-only after (the first step is submitted after it) */
    echod_encoding_t in_encoding, out_encoding;
    char *work_error;           /* "echod-cpu-us: ..." when a work header was malformed: INVALID_ARGUMENT */
    int looked_up;              /* echod_call_admit ran the method lookup */
    int admitted;               /* counted against limits.max_calls_in_flight */
    atomic_int handler_started; /* start_call ran: a deadline after this was not "expired in queue" */
    /* Server timing (telemetry.timing_trailer): steps add to these inside the serializer.
     * step_ended_ns, once a step has run handler code, is a clock read taken after the last of it
     * (do_message's or echod_call_close's), which the step then takes as its end. */
    uint64_t queue_ns, handler_ns, step_started_ns, step_ended_ns;
    /* Home thread: while `active` (a pump runs), `ns` is when the inline step that ran last
     * ended, 0 before the first: back-to-back inline steps share that clock read as the next
     * one's start (timing on). */
    struct {
        int active;
        uint64_t ns;
    } chain;
    echod_serializer_t serializer;
    /* A handler's echod_call_sleep, which echod_call_cancel (the loop) cuts short. */
    echod_exec_sleeper_t sleeper;

    struct {
        void *state;          /* the method's own */
        echod_msg_t *held;    /* an adapter's: the request until half-close, or a reply until on_ready */
        char timing[96];      /* echod-timing value, filled by echod_call_close */
        int closed;           /* echod_call_close was called */
        echod_codec_t *codec; /* made by the first message to inflate or deflate (grpc/codec.h); freed by `closed` */
    } h;
};

/* --- for the transport (home thread unless said otherwise) --- */

/* Sets up a call in memory the transport owns; it holds one reference, the transport's. */
void echod_call_init(echod_call_t *call, const echod_call_ops_t *ops, const echod_dispatcher_t *dispatcher);
/* Any thread. The last release frees what the call owns, then calls ops->free. */
void echod_call_retain(echod_call_t *call);
void echod_call_release(echod_call_t *call);

/*
 * HEADERS is complete and passed the HTTP checks: looks the method up (once per call), switches
 * an on_loop method to the inline runner, applies limits.max_calls_in_flight to the rest and
 * resolves the call's work spec from the config and the echod-* headers (`over`; *work_error is
 * taken when metadata overrides are allowed), then charges the model's request-headers half of
 * the call. A shed call has no work resolved and is charged nothing.
 */
echod_admit_t echod_call_admit(echod_call_t *call, const echod_work_over_t *over, char **work_error);

/*
 * The cost model's charge of one step, hand-off or message (work/model.h) for this call, burnt
 * on the calling thread, which is of the kind `thread`. One branch when the call's model is off.
 * Any thread, inside the call's life.
 */
static inline void echod_call_charge(const echod_call_t *call, echod_charge_kind_t kind, echod_charge_thread_t thread)
{
    if (call->spec.model.on)
        echod_model_charge(&call->spec.model, kind, thread);
}

/*
 * A hand-off of this call that the calling thread received (`to`: a worker, as a drain of its
 * serializer starts there; the loop, as a loop task runs), which found that thread parked or
 * running: counted in echod_handoffs_total whether or not the model is on, and charged by the
 * call's model (handoff, and handoff_wake on top when parked). Any thread, inside the call's life.
 */
void echod_call_handoff(const echod_call_t *call, echod_handoff_receiver_t to, int parked);

/* Home thread: the trailers' half of the model's call charge, as the call's status is queued. */
static inline void echod_call_charge_trailers(const echod_call_t *call)
{
    if (call->spec.model.on)
        echod_model_charge_call(&call->spec.model, 1);
}

/* The one entry for steps: counts the step in echod_call_steps_total, then serializes it. Only
 * the transport's pump calls it, holding a reference (the inline runner takes none). */
void echod_call_submit(echod_call_t *call, echod_step_kind_t kind, echod_msg_t *msg);

/*
 * Home thread: the stream was reset, timed out, cut by drain or died. Handlers see
 * echod_call_is_cancelled, and a handler parked in echod_call_sleep wakes now.
 */
void echod_call_cancel(echod_call_t *call);

/* --- for handlers (inside steps, any thread, unless said otherwise) --- */

/* Asks for n more messages (flow control: bytes return to the window as they are delivered). */
void echod_call_request(echod_call_t *call, uint32_t n);
/* Sends one response message (ownership passes); headers go out with the first one. */
void echod_call_send(echod_call_t *call, echod_msg_t *msg);
/* Ends the call with a status (message may be NULL). Further sends are dropped. */
void echod_call_close(echod_call_t *call, int code, const char *message);
/* True while the handler's queued bytes are below transport.max_send_buffer_bytes. */
int echod_call_is_ready(echod_call_t *call);
int echod_call_is_cancelled(echod_call_t *call);
/* Any thread, inside or outside steps, holding a reference: an on_ready step follows (a health
 * watch's status changed), unless the call has ended by then. */
void echod_call_wake_ready(echod_call_t *call);
/* The server's config and methods, read-only. */
const echod_config_t *echod_call_config(const echod_call_t *call);
const echod_registry_t *echod_call_registry(const echod_call_t *call);
/* The call's synthetic work (work/spec.h): the config's and the echod-* headers', read-only. */
static inline const echod_work_t *echod_call_work(const echod_call_t *call)
{
    return &call->spec.work;
}
/* One handler run's CPU, sleep and failure drawn from the call's work (work/draw.h), within
 * work.max_cpu_ms and max_sleep_ms: each draw advances the call's draws. */
void echod_call_draw_work(echod_call_t *call, echod_drawn_t *out);
/*
 * Sleeps `us` microseconds (echod-sleep-us). On a virtual thread it parks, freeing the carrier,
 * and a cancel wakes it early; on any other thread it blocks the thread for the whole time.
 */
void echod_call_sleep(echod_call_t *call, uint32_t us);

#endif
