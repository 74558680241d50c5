#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "dispatch/call.h"
#include "metrics/metrics.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/limit.h"

/* --- lifetime --- */

static void serializer_retain(echod_serializer_t *s)
{
    echod_call_retain((echod_call_t *)((char *)s - offsetof(echod_call_t, serializer)));
}

static void serializer_release(echod_serializer_t *s)
{
    echod_call_release((echod_call_t *)((char *)s - offsetof(echod_call_t, serializer)));
}

/* The kind of thread the caller runs on, for the model's counters. */
static echod_charge_thread_t thread_of(const echod_call_t *call)
{
    return call->ops->on_home(call) ? ECHOD_CHARGE_ON_LOOP : ECHOD_CHARGE_ON_WORKER;
}

/* A charge where the caller does not know which thread it is on (messages: any step's thread). */
static void charge_here(const echod_call_t *call, echod_charge_kind_t kind)
{
    if (call->spec.model.on)
        echod_model_charge(&call->spec.model, kind, thread_of(call));
}

void echod_call_handoff(const echod_call_t *call, echod_handoff_receiver_t to, int parked)
{
    ECHOD_COUNT(echod_metrics.handoffs[to][parked ? ECHOD_HANDOFF_PARKED : ECHOD_HANDOFF_RUNNING]);
    if (call->spec.model.on)
        echod_model_charge_handoff(&call->spec.model,
                                   to == ECHOD_HANDOFF_TO_LOOP ? ECHOD_CHARGE_ON_LOOP : ECHOD_CHARGE_ON_WORKER, parked);
}

/* A dispatch's drain (or pass-through step) starts on a worker: the hand-off it received. */
static void serializer_handoff(echod_serializer_t *s, int parked)
{
    echod_call_handoff((const echod_call_t *)((char *)s - offsetof(echod_call_t, serializer)), ECHOD_HANDOFF_TO_WORKER,
                       parked);
}

void echod_call_init(echod_call_t *call, const echod_call_ops_t *ops, const echod_dispatcher_t *dispatcher)
{
    call->ops = ops;
    atomic_init(&call->refs, 1);
    atomic_init(&call->cancelled, 0);
    atomic_init(&call->out_bytes, 0);
    call->dispatcher = dispatcher;
    echod_exec_sleeper_init(&call->sleeper, &call->cancelled);
    call->started_ns = echod_now_ns();
    echod_serializer_init(&call->serializer, dispatcher->exec, dispatcher->exec_metrics, dispatcher->mode);
    call->serializer.owner_retain = serializer_retain;
    call->serializer.owner_release = serializer_release;
    call->serializer.on_handoff = serializer_handoff;
    call->spec.model.on = 0; /* until admission resolves it: a call shed or rejected is charged nothing */
    ECHOD_COUNT(echod_metrics.calls_in_flight);
}

/*
 * calls_admitted: under limits.max_calls_in_flight, a shared gauge reserved atomically, so no two
 * loops admit past the limit together (util/limit.h); without one, a gauge like any other. +1
 * returns 0 at the limit. Any thread.
 */
static int admitted_add(uint32_t limit, int n)
{
    if (limit == 0)
        ECHOD_ADD(echod_metrics.calls_admitted, n);
    else if (n > 0)
        return echod_limit_reserve(&echod_metrics.calls_admitted, limit, &echod_metrics.calls_admitted_peak);
    else
        echod_limit_release(&echod_metrics.calls_admitted);
    return 1;
}

void echod_call_retain(echod_call_t *call)
{
    atomic_fetch_add_explicit(&call->refs, 1, memory_order_relaxed);
}

/* The last reference may go on a worker: nothing here touches home-thread state. */
void echod_call_release(echod_call_t *call)
{
    if (atomic_fetch_sub_explicit(&call->refs, 1, memory_order_acq_rel) != 1)
        return;
    echod_codec_free(call->h.codec);
    free(call->work_error);
    if (call->admitted)
        admitted_add(call->dispatcher->cfg->limits.max_calls_in_flight, -1);
    ECHOD_ADD(echod_metrics.calls_in_flight, -1);
    call->ops->free(call);
}

/*
 * `cancelled` publishes no data: a reader that sees it only skips work, so relaxed loads do. The
 * one ordering that matters is echod_call_cancel's seq_cst exchange against the parking carrier's
 * seq_cst load (exec_virtual.c: file_parked and echod_exec_interrupt).
 */
int echod_call_is_cancelled(echod_call_t *call)
{
    return atomic_load_explicit(&call->cancelled, memory_order_relaxed);
}

void echod_call_cancel(echod_call_t *call)
{
    /* seq_cst: echod_exec_interrupt's protocol with a fiber that is parking right now; an
     * exchange, not a store (docs/threads.md, "Store-buffering pairs") */
    atomic_exchange_explicit(&call->cancelled, 1, memory_order_seq_cst);
    echod_exec_interrupt(&call->sleeper);
}

void echod_call_sleep(echod_call_t *call, uint32_t us)
{
    if (us == 0 || echod_exec_sleep(&call->sleeper, (uint64_t)us * 1000) == 0)
        return;
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/*
 * out_bytes is a byte count, not a guard for other data (messages cross threads in loop tasks),
 * so relaxed does: the ready transition is decided by the transport's fetch_sub on the one
 * variable's modification order (stream.c), and a handler that reads "not ready" after its own
 * fetch_add sees that add or a later value, so the sub that crosses the limit comes after it.
 */
int echod_call_is_ready(echod_call_t *call)
{
    return atomic_load_explicit(&call->out_bytes, memory_order_relaxed) <
           call->dispatcher->cfg->transport.max_send_buffer_bytes;
}

const echod_config_t *echod_call_config(const echod_call_t *call)
{
    return call->dispatcher->cfg;
}

const echod_registry_t *echod_call_registry(const echod_call_t *call)
{
    return call->dispatcher->registry;
}

void echod_call_draw_work(echod_call_t *call, echod_drawn_t *out)
{
    const echod_config_t *cfg = call->dispatcher->cfg;
    echod_draw_work(&call->spec.work, &call->spec.draws, cfg->work.max_cpu_ms * 1000, cfg->work.max_sleep_ms * 1000,
                    out);
}

/* --- admission: server policy, on the home thread once HEADERS is complete --- */

echod_admit_t echod_call_admit(echod_call_t *call, const echod_work_over_t *over, char **work_error)
{
    const echod_dispatcher_t *d = call->dispatcher;
    const echod_config_t *cfg = d->cfg;
    const echod_method_t *m = echod_method_find(d->registry, call->path, call->path_len);
    call->method = m;
    call->looked_up = 1;
    if (m != NULL && m->on_loop) {
        /* before any step: the call switches to the inline runner on its loop */
        echod_serializer_init(&call->serializer, d->exec, d->exec_metrics, ECHOD_SER_INLINE);
    } else {
        if (!admitted_add(cfg->limits.max_calls_in_flight, 1)) {
            ECHOD_COUNT(echod_metrics.calls_shed);
            if (m != NULL) {
                /* as a load-shedding interceptor would: started and handled, never run */
                ECHOD_COUNT(echod_metrics.methods[m->metrics_index].started);
                ECHOD_COUNT(echod_metrics.methods[m->metrics_index].handled[ECHOD_RESOURCE_EXHAUSTED]);
            }
            return ECHOD_ADMIT_SHED;
        }
        call->admitted = 1;
    }
    if (cfg->work.allow_metadata_overrides) {
        call->work_error = *work_error;
        *work_error = NULL;
    }
    echod_work_resolve(cfg, call->path, over, call->seq, m == NULL || !m->on_loop, &call->spec, &call->work_error);
    if (call->spec.model.on)
        echod_model_charge_call(&call->spec.model, 0);
    return ECHOD_ADMIT_ACCEPTED;
}

/* --- steps --- */

static void do_lookup(echod_call_t *call)
{
    /* echod_call_admit looked it up, unless the stream ended before its HEADERS did */
    if (!call->looked_up) {
        call->method = echod_method_find(call->dispatcher->registry, call->path, call->path_len);
        call->looked_up = 1;
    }
    if (call->method == NULL) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Method not found: %.*s", (int)(call->path_len > 120 ? 120 : call->path_len),
                 call->path != NULL ? call->path : "");
        echod_call_close(call, ECHOD_UNIMPLEMENTED, msg);
        return;
    }
    const echod_method_exec_t *me = echod_dispatcher_find(call->dispatcher, call->method);
    if (me != NULL)
        echod_serializer_switch(&call->serializer, me->exec, me->metrics);
}

static void do_start(echod_call_t *call)
{
    if (call->method == NULL || echod_call_is_cancelled(call))
        return;
    atomic_store_explicit(&call->handler_started, 1, memory_order_relaxed); /* a counter's choice only */
    ECHOD_COUNT(echod_metrics.methods[call->method->metrics_index].started);
    /* like a server interceptor: a malformed echod-* header fails the call before the handler */
    if (call->work_error != NULL && !call->method->on_loop) { /* a probe never fails on a knob */
        echod_call_close(call, ECHOD_INVALID_ARGUMENT, call->work_error);
        return;
    }
    call->method->on_start(call);
}

/* Handlers are not called once the call is closed or cancelled: grpc-java drops them too. */
static int handler_live(echod_call_t *call)
{
    return call->method != NULL && !call->h.closed && !echod_call_is_cancelled(call);
}

/* --- grpc-encoding (grpc/codec.h): inflate requests, compress responses, inside steps --- */

static void count_encoding(echod_direction_t dir, echod_encoding_t enc, uint32_t wire, uint32_t payload)
{
    echod_encoding_metrics_t *em = &echod_metrics.encodings[dir][enc];
    ECHOD_COUNT(em->messages);
    ECHOD_ADD(em->wire_bytes, wire);
    if (enc != ECHOD_ENCODING_IDENTITY)
        ECHOD_ADD(em->payload_bytes, payload);
}

static echod_codec_t *codec_of(echod_call_t *call)
{
    if (call->h.codec == NULL)
        call->h.codec = echod_codec_new(call->in_encoding, call->out_encoding,
                                        (int)call->dispatcher->cfg->transport.compression.level);
    return call->h.codec;
}

/*
 * Inflated here, in the messages step, on whichever thread runs it: grpc-java's server deframes
 * on the transport thread but inflates lazily as messagesAvailable parses the request on the
 * call's executor, so a pool arm pays decompression on a worker in both (docs/compression.md).
 * NULL when the call was ended instead (too large, corrupt, truncated).
 */
static echod_msg_t *call_inflate(echod_call_t *call, echod_msg_t *msg)
{
    uint32_t max = call->dispatcher->cfg->transport.max_receive_message_bytes;
    echod_msg_t *out = NULL;
    echod_inflate_status_t st = echod_codec_inflate(codec_of(call), msg, max, &out);
    if (st == ECHOD_INFLATE_OK)
        count_encoding(ECHOD_DIRECTION_RECEIVED, call->in_encoding, msg->len, out->len);
    echod_msg_free(msg);
    if (st == ECHOD_INFLATE_OK)
        return out;
    ECHOD_COUNT(echod_metrics.inflate_failures[st]);
    char text[160];
    const char *enc = echod_encoding_name(call->in_encoding);
    int code = ECHOD_INTERNAL;
    if (st == ECHOD_INFLATE_TOO_LARGE) {
        code = ECHOD_RESOURCE_EXHAUSTED;
        snprintf(text, sizeof(text), "Decompressed %s message larger than max (%u bytes)", enc, max);
    } else {
        snprintf(text, sizeof(text), "Could not decompress %s message: %s", enc, echod_inflate_status_str(st));
    }
    atomic_store_explicit(&call->cancelled, 1, memory_order_relaxed); /* this call's own step: no sleeper to wake */
    echod_call_close(call, code, text);
    return NULL;
}

/* The response's encoding; below min_bytes, or when zlib fails, a message goes as identity
 * (flag 0), which gRPC allows per message. Runs on the thread that sends, as grpc-java's
 * MessageFramer compresses in sendMessage. */
static echod_msg_t *call_encode(echod_call_t *call, echod_msg_t *msg)
{
    echod_msg_t *out;
    if (call->out_encoding == ECHOD_ENCODING_IDENTITY ||
        msg->len < call->dispatcher->cfg->transport.compression.min_bytes ||
        (out = echod_codec_deflate(codec_of(call), msg)) == NULL) {
        count_encoding(ECHOD_DIRECTION_SENT, ECHOD_ENCODING_IDENTITY, msg->len, msg->len);
        return msg;
    }
    count_encoding(ECHOD_DIRECTION_SENT, call->out_encoding, out->len, msg->len);
    echod_msg_free(msg);
    return out;
}

static void do_message(echod_call_t *call, echod_msg_t *msg)
{
    if (!handler_live(call)) {
        echod_msg_free(msg);
        return;
    }
    if ((msg->frame[0] & 1) == 0)
        count_encoding(ECHOD_DIRECTION_RECEIVED, ECHOD_ENCODING_IDENTITY, msg->len, msg->len);
    else if ((msg = call_inflate(call, msg)) == NULL)
        return;
    echod_method_metrics_t *mm = &echod_metrics.methods[call->method->metrics_index];
    ECHOD_COUNT(mm->msg_received);
    /* clock reads are a visible share of a call: share them with the step's (timing on) */
    uint64_t t0 = call->step_started_ns != 0 ? call->step_started_ns : echod_now_ns();
    charge_here(call, ECHOD_CHARGE_MESSAGE); /* grpc-java parses the request here, in messagesAvailable */
    call->method->on_message(call, msg);
    call->step_ended_ns = echod_now_ns(); /* step_run takes it as the step's end */
    echod_histogram_observe(&mm->msg_handling, (call->step_ended_ns - t0) / 1000);
}

static void do_half_close(echod_call_t *call)
{
    call->step_ended_ns = 0; /* a merged step's message end is not this handler's end */
    if (handler_live(call))
        call->method->on_half_close(call);
}

static void do_closed(echod_call_t *call)
{
    if (call->method != NULL) {
        echod_method_metrics_t *mm = &echod_metrics.methods[call->method->metrics_index];
        ECHOD_COUNT(mm->handled[call->final_code]);
        uint64_t now = call->step_started_ns != 0 ? call->step_started_ns : echod_now_ns();
        echod_histogram_observe(&mm->handling, (now - call->started_ns) / 1000);
        if (call->method->on_complete != NULL)
            call->method->on_complete(call);
    }
    /* Freed by the thread that made it: zlib's ~270 KiB of deflate state freed from the loop
     * into a worker's malloc arena was trimmed and faulted back in (5.5 page faults per gzip
     * call under `fixed`; fewer than half as many when freed here, docs/compression.md). */
    echod_codec_free(call->h.codec);
    call->h.codec = NULL;
}

static void run_step(echod_call_t *call, echod_step_kind_t kind, echod_msg_t *msg);

static void step_run(echod_step_t *step)
{
    echod_call_step_t *cs = (echod_call_step_t *)step;
    echod_call_t *call = cs->call;
    echod_step_kind_t kind = cs->kind;
    echod_msg_t *msg = cs->msg;
    uint64_t submitted = cs->submitted_ns;
    if (!cs->on_stack)
        free(cs);
    int on_loop = call->ops->on_home(call);
    if (on_loop)
        ECHOD_COUNT(echod_metrics.step_runs_loop);
    else
        ECHOD_COUNT(echod_metrics.step_runs_worker);
    if (submitted != 0) {
        /* A clock read costs ~28 ns here, a tenth of a direct call at 13 reads: inline steps
         * submitted back to back by one pump start when the previous one ended. Runnable but
         * not running: from the later of its submission and the previous step's end, so steps
         * queued together do not count their common wait twice. */
        call->step_started_ns = on_loop && call->chain.ns != 0 ? call->chain.ns : echod_now_ns();
        uint64_t ready = submitted > call->step_ended_ns ? submitted : call->step_ended_ns;
        if (call->step_started_ns > ready)
            call->queue_ns += call->step_started_ns - ready;
    }
    call->step_ended_ns = 0; /* read above; handler code sets it as it ends (do_message, close) */
    echod_call_charge(call, ECHOD_CHARGE_STEP, on_loop ? ECHOD_CHARGE_ON_LOOP : ECHOD_CHARGE_ON_WORKER);
    run_step(call, kind, msg);
    /* the serializer holds a reference while a step runs, so the call is still here */
    if (submitted != 0 && kind != ECHOD_STEP_CLOSED) {
        if (call->step_ended_ns == 0)
            call->step_ended_ns = echod_now_ns();
        call->handler_ns += call->step_ended_ns - call->step_started_ns;
        call->step_started_ns = 0;
        if (on_loop && call->chain.active)
            call->chain.ns = call->step_ended_ns;
    }
}

static void run_step(echod_call_t *call, echod_step_kind_t kind, echod_msg_t *msg)
{
    switch (kind) {
    case ECHOD_STEP_METHOD_LOOKUP:
        do_lookup(call);
        break;
    case ECHOD_STEP_START_CALL:
        do_start(call);
        break;
    case ECHOD_STEP_LOOKUP_AND_START:
        do_lookup(call);
        do_start(call);
        break;
    case ECHOD_STEP_ON_READY:
        if (handler_live(call) && call->method->on_ready != NULL)
            call->method->on_ready(call);
        break;
    case ECHOD_STEP_MESSAGES_AVAILABLE:
        do_message(call, msg);
        break;
    case ECHOD_STEP_HALF_CLOSED:
        do_half_close(call);
        break;
    case ECHOD_STEP_MESSAGES_AND_HALF_CLOSE:
        do_message(call, msg);
        do_half_close(call);
        break;
    case ECHOD_STEP_CLOSED:
        do_closed(call);
        break;
    case ECHOD_STEP__COUNT:
        break;
    }
}

void echod_call_submit(echod_call_t *call, echod_step_kind_t kind, echod_msg_t *msg)
{
    int timing = call->dispatcher->cfg->telemetry.timing_trailer;
    echod_call_step_t local, *cs;
    ECHOD_COUNT(echod_metrics.steps[kind]);
    if (call->serializer.mode == ECHOD_SER_INLINE && !call->serializer.inline_busy) {
        /* an idle inline runner runs the step before submit returns: no heap, no wait to time */
        cs = &local;
        cs->on_stack = 1;
        cs->submitted_ns = timing ? UINT64_MAX : 0;
    } else {
        cs = echod_must(malloc(sizeof(*cs)), "call step");
        cs->on_stack = 0;
        cs->submitted_ns = timing ? echod_now_ns() : 0;
    }
    cs->super.run = step_run;
    cs->call = call;
    cs->kind = kind;
    cs->msg = msg;
    echod_serializer_submit(&call->serializer, &cs->super);
}

/* --- handler-facing operations: the transport acts on its home thread or posts a loop task --- */

static char *put_u64(char *p, uint64_t v)
{
    char tmp[20];
    int n = 0;
    do
        tmp[n++] = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    while (n != 0)
        *p++ = tmp[--n];
    return p;
}

/* "queue=12us;handler=3us;total=40us" without snprintf: this runs once per call */
static void format_timing(char *dst, uint64_t queue_us, uint64_t handler_us, uint64_t total_us)
{
    char *p = dst;
    memcpy(p, "queue=", 6);
    p = put_u64(p + 6, queue_us);
    memcpy(p, "us;handler=", 11);
    p = put_u64(p + 11, handler_us);
    memcpy(p, "us;total=", 9);
    p = put_u64(p + 9, total_us);
    memcpy(p, "us", 3);
}

void echod_call_request(echod_call_t *call, uint32_t n)
{
    call->ops->request(call, n);
}

void echod_call_send(echod_call_t *call, echod_msg_t *msg)
{
    if (call->h.closed) {
        echod_msg_free(msg);
        return;
    }
    ECHOD_COUNT(echod_metrics.methods[call->method->metrics_index].msg_sent);
    charge_here(call, ECHOD_CHARGE_MESSAGE); /* grpc-java serializes and frames it here, in sendMessage */
    msg = call_encode(call, msg);
    atomic_fetch_add_explicit(&call->out_bytes, echod_msg_frame_len(msg), memory_order_relaxed);
    call->ops->send(call, msg);
}

void echod_call_close(echod_call_t *call, int code, const char *message)
{
    if (call->h.closed)
        return;
    call->h.closed = 1;
    if (call->dispatcher->cfg->telemetry.timing_trailer) {
        uint64_t now = echod_now_ns();
        call->step_ended_ns = now; /* what the handler does after closing is not in the trailer either */
        uint64_t handler = call->handler_ns + (call->step_started_ns != 0 ? now - call->step_started_ns : 0);
        format_timing(call->h.timing, call->queue_ns / 1000, handler / 1000, (now - call->started_ns) / 1000);
    }
    call->ops->close(call, code, message, call->h.timing);
}

void echod_call_wake_ready(echod_call_t *call)
{
    call->ops->wake_ready(call);
}
