#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <nghttp2/nghttp2.h>
#include "admin/stage.h"
#include "grpc/status.h"
#include "grpc/timeout.h"
#include "metrics/metrics.h"
#include "transport/conn_internal.h"
#include "transport/loop.h"
#include "transport/stream.h"
#include "util/clock.h"
#include "util/err.h"
#include "work/spec.h"

static const echod_call_ops_t stream_call_ops;

/*
 * The legal moves of the stream's state machines (stream.h): for each state, the states it may be
 * entered from. MOVE asserts them in debug builds (ECHOD_DEBUG), as h2o asserts its stream
 * states; a release build only stores the state.
 */
#define FROM(state) (1u << (state))
static const unsigned moves_state[] = {[ECHOD_STREAM_CLOSED] = FROM(ECHOD_STREAM_OPEN)};
static const unsigned moves_recv[] = {[ECHOD_RECV_END_STREAM] = FROM(ECHOD_RECV_OPEN)};
static const unsigned moves_deframe[] = {
    [ECHOD_DEFRAME_STATE_FAILED] = FROM(ECHOD_DEFRAME_STATE_OK),
    [ECHOD_DEFRAME_STATE_REPORTED] = FROM(ECHOD_DEFRAME_STATE_FAILED),
};
static const unsigned moves_send[] = {
    [ECHOD_SEND_HEADERS] = FROM(ECHOD_SEND_IDLE),
    [ECHOD_SEND_TRAILERS_QUEUED] = FROM(ECHOD_SEND_IDLE) | FROM(ECHOD_SEND_HEADERS),
    [ECHOD_SEND_DONE] = FROM(ECHOD_SEND_TRAILERS_QUEUED),
};
static const unsigned moves_steps[] = {
    [ECHOD_STEPS_STARTED] = FROM(ECHOD_STEPS_NONE),
    [ECHOD_STEPS_HALF_CLOSED] = FROM(ECHOD_STEPS_STARTED),
    [ECHOD_STEPS_CLOSED] = FROM(ECHOD_STEPS_STARTED) | FROM(ECHOD_STEPS_HALF_CLOSED),
    [ECHOD_STEPS_REJECTED] = FROM(ECHOD_STEPS_NONE),
};
static const unsigned moves_pump[] = {
    [ECHOD_PUMP_IDLE] = FROM(ECHOD_PUMP_RUNNING),
    [ECHOD_PUMP_RUNNING] = FROM(ECHOD_PUMP_IDLE) | FROM(ECHOD_PUMP_AGAIN),
    [ECHOD_PUMP_AGAIN] = FROM(ECHOD_PUMP_RUNNING) | FROM(ECHOD_PUMP_AGAIN),
};
static const unsigned moves_drain[] = {
    [ECHOD_DRAIN_OPEN] = FROM(ECHOD_DRAIN_NONE),
    [ECHOD_DRAIN_CUT] = FROM(ECHOD_DRAIN_NONE) | FROM(ECHOD_DRAIN_OPEN),
};

#ifdef ECHOD_DEBUG
#define MOVE(s, field, to) (assert(moves_##field[to] & FROM((s)->field)), (s)->field = (to))
#else
#define MOVE(s, field, to) ((void)moves_##field, (s)->field = (to))
#endif

static void on_deadline(h2o_timeout_entry_t *entry);

echod_stream_t *echod_stream_new(struct echod_conn *conn, int32_t id)
{
    echod_loop_t *loop = echod_conn__loop(conn);
    /* from the loop's pool: glibc's calloc skips its thread cache (-270 instructions per call) */
    echod_stream_t *s = echod_must(echod_pool_calloc(&loop->pool, 1, sizeof(*s)), "stream");
    echod_call_init(&s->call, &stream_call_ops, &loop->server->dispatcher);
    s->call.seq = (uint64_t)loop->index << 48 | loop->calls_seen++;
    s->loop = loop;
    s->conn = conn;
    s->id = id;
    s->deadline.cb = on_deadline;
    echod_deframer_init(&s->deframer, loop->server->cfg->transport.max_receive_message_bytes);
    echod_conn__hold(conn);
    atomic_fetch_add_explicit(&loop->live_calls, 1, memory_order_relaxed);
    return s;
}

/* The call's last reference went, on any thread: nothing here touches loop-owned state but atomics. */
static void stream_free(echod_call_t *call)
{
    echod_stream_t *s = echod_stream_of(call);
    echod_deframer_dispose(&s->deframer);
    for (echod_msg_t *m = s->out_head, *next; m != NULL; m = next) {
        next = m->next;
        echod_msg_free(m);
    }
    free(s->path);
    free(s->status_message);
    free(s->hdr.meta);
    free(s->hdr.work_error);
    echod_loop_t *loop = s->loop;
    echod_conn_release(s->conn);
    echod_pool_release(s); /* to the loop's freelist on the loop; a worker's last reference frees it */
    atomic_fetch_sub_explicit(&loop->live_calls, 1, memory_order_release);
}

/* --- sending --- */

#define NV(n, v)                                                                                                       \
    {                                                                                                                  \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE                                 \
    }
#define NV_UNINDEXED(n, v)                                                                                             \
    {                                                                                                                  \
        (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NO_INDEX                             \
    }

/* grpc-status values by code; a code outside 0..16 is sent as UNKNOWN */
static const char *status_code_str(int code)
{
    static const char *const codes[] = {"0", "1",  "2",  "3",  "4",  "5",  "6",  "7", "8",
                                        "9", "10", "11", "12", "13", "14", "15", "16"};
    return code >= 0 && code < (int)(sizeof(codes) / sizeof(codes[0])) ? codes[code] : codes[ECHOD_UNKNOWN];
}

/* grpc-status, grpc-message and echod-timing: at most 3 entries. */
static void status_nv(echod_stream_t *s, nghttp2_nv *nv, size_t *n, char *msg_buf, size_t msg_cap)
{
    nv[(*n)++] = (nghttp2_nv)NV("grpc-status", status_code_str(s->status_code));
    if (s->status_message != NULL && s->status_message[0] != '\0') {
        echod_status_encode_message(msg_buf, msg_cap, s->status_message);
        nv[(*n)++] = (nghttp2_nv)NV_UNINDEXED("grpc-message", msg_buf);
    }
    /* a new value every call: indexing it would churn the HPACK table for nothing */
    if (s->timing != NULL)
        nv[(*n)++] = (nghttp2_nv)NV_UNINDEXED("echod-timing", s->timing);
}

/* nghttp2's data provider: the queued messages, then the trailers once nothing else is queued. */
static ssize_t data_read_cb(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                            uint32_t *data_flags, nghttp2_data_source *source, void *user_data)
{
    (void)buf;
    (void)user_data;
    echod_stream_t *s = source->ptr;
    int trailers = s->send >= ECHOD_SEND_TRAILERS_QUEUED;
    if (s->out_queued == 0 && !trailers) {
        s->data_deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    size_t n = s->out_queued < length ? s->out_queued : length;
    if (n != 0)
        *data_flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    if (n == s->out_queued && trailers) {
        nghttp2_nv nv[3];
        size_t nvlen = 0;
        char msg[512];
        status_nv(s, nv, &nvlen, msg, sizeof(msg));
        *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(session, stream_id, nv, nvlen) != 0)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

void echod_stream_copy_data(echod_stream_t *s, uint8_t *dst, size_t length)
{
    size_t freed = 0;
    while (length != 0) {
        echod_msg_t *m = s->out_head;
        size_t avail = echod_msg_frame_len(m) - s->out_offset;
        size_t take = avail < length ? avail : length;
        memcpy(dst, m->frame + s->out_offset, take);
        dst += take;
        length -= take;
        s->out_queued -= take;
        s->out_offset += take;
        if (s->out_offset == echod_msg_frame_len(m)) {
            s->out_head = m->next;
            if (s->out_head == NULL)
                s->out_tail = NULL;
            s->out_offset = 0;
            freed += echod_msg_frame_len(m);
            echod_msg_free(m);
        }
    }
    if (freed != 0) {
        size_t limit = s->loop->server->cfg->transport.max_send_buffer_bytes;
        size_t before = atomic_fetch_sub_explicit(&s->call.out_bytes, freed, memory_order_relaxed);
        if (before >= limit && before - freed < limit) {
            s->ready_due = 1; /* grpc-java's onReady: a transition back to ready */
            echod_conn__touch(s->conn, s);
        }
    }
}

static void submit_headers(echod_stream_t *s, int with_data)
{
    size_t echoed = s->call.spec.work.echo_metadata ? s->hdr.meta_count : 0;
    nghttp2_nv fixed[7], *nv = echoed != 0 ? echod_must(malloc((7 + echoed) * sizeof(*nv)), "echoed metadata") : fixed;
    nv[0] = (nghttp2_nv)NV(":status", "200");
    nv[1] = (nghttp2_nv)NV("content-type", "application/grpc");
    size_t n = 2;
    /* grpc-encoding (grpc/codec.h): what the client may send, to a client that speaks of
     * encodings (HPACK costs a call ~550 instructions for it: not paid by one that does not) */
    if (s->hdr.enc_seen)
        nv[n++] = (nghttp2_nv){(uint8_t *)"grpc-accept-encoding", (uint8_t *)ECHOD_ACCEPT_ENCODING,
                               sizeof("grpc-accept-encoding") - 1, sizeof(ECHOD_ACCEPT_ENCODING) - 1,
                               NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
    if (with_data && s->call.out_encoding != ECHOD_ENCODING_IDENTITY)
        nv[n++] = (nghttp2_nv)NV("grpc-encoding", echod_encoding_name(s->call.out_encoding));
    char msg[512];
    if (!with_data)
        status_nv(s, nv, &n, msg, sizeof(msg));
    for (const char *p = s->hdr.meta; echoed != 0 && p < s->hdr.meta + s->hdr.meta_len;) {
        size_t nl = strlen(p), vl = strlen(p + nl + 1);
        nv[n++] = (nghttp2_nv){(uint8_t *)p, (uint8_t *)p + nl + 1, nl, vl, NGHTTP2_NV_FLAG_NONE};
        p += nl + vl + 2;
    }
    nghttp2_data_provider prd = {.source.ptr = s, .read_callback = data_read_cb};
    nghttp2_submit_response(echod_conn__session(s->conn), s->id, nv, n, with_data ? &prd : NULL);
    if (nv != fixed)
        free(nv);
}

static int send_open(const echod_stream_t *s)
{
    return !echod_conn__closed(s->conn) && s->state == ECHOD_STREAM_OPEN && s->send < ECHOD_SEND_TRAILERS_QUEUED;
}

static void resume_data(echod_stream_t *s)
{
    if (s->data_deferred) {
        s->data_deferred = 0;
        nghttp2_session_resume_data(echod_conn__session(s->conn), s->id);
    }
}

/* Queues a response message (headers go first); drops it if the stream is gone. */
static void send_message(echod_stream_t *s, echod_msg_t *msg)
{
    if (!send_open(s)) {
        atomic_fetch_sub_explicit(&s->call.out_bytes, echod_msg_frame_len(msg), memory_order_relaxed);
        echod_msg_free(msg);
        return;
    }
    msg->next = NULL;
    if (s->out_tail != NULL)
        s->out_tail->next = msg;
    else
        s->out_head = msg;
    s->out_tail = msg;
    s->out_queued += echod_msg_frame_len(msg);
    if (s->send == ECHOD_SEND_IDLE) {
        MOVE(s, send, ECHOD_SEND_HEADERS);
        submit_headers(s, 1);
    } else {
        resume_data(s);
    }
    echod_conn__dirty(s->conn);
}

/* Queues the status as trailers (or Trailers-Only). If the client has not half-closed, the
 * trailers are followed by RST_STREAM(NO_ERROR) (PROTOCOL-HTTP2 "early server closure"): any
 * other code races the trailers at the client, and grpc-core then reports CANCELLED instead of
 * the status we sent (measured: 5 of 60 grpcio deadline calls with CANCEL, 0 of 200 with NO_ERROR). */
void echod_stream_close(echod_stream_t *s, int code, const char *message, const char *timing)
{
    if (!send_open(s))
        return;
    echod_call_charge_trailers(&s->call); /* once: send_open is false from here on */
    int trailers_only = s->send == ECHOD_SEND_IDLE;
    MOVE(s, send, ECHOD_SEND_TRAILERS_QUEUED);
    s->status_code = code;
    s->status_message = message != NULL ? echod_must(strdup(message), "grpc-message") : NULL;
    s->timing = timing != NULL && timing[0] != '\0' ? timing : NULL;
    if (trailers_only)
        submit_headers(s, 0);
    else
        resume_data(s);
    echod_conn__dirty(s->conn);
    if (s->loop->server->cfg->transport.flush == ECHOD_FLUSH_IMMEDIATE)
        echod_conn__flush_immediate(s->conn);
}

void echod_stream_end_received(echod_stream_t *s)
{
    MOVE(s, recv, ECHOD_RECV_END_STREAM);
}

int echod_stream_end_sent(echod_stream_t *s)
{
    MOVE(s, send, ECHOD_SEND_DONE);
    return s->recv != ECHOD_RECV_END_STREAM;
}

static void on_deadline(h2o_timeout_entry_t *entry)
{
    echod_stream_t *s = H2O_STRUCT_FROM_MEMBER(echod_stream_t, deadline, entry);
    if (s->send >= ECHOD_SEND_TRAILERS_QUEUED || s->state == ECHOD_STREAM_CLOSED)
        return;
    if (!atomic_load_explicit(&s->call.handler_started, memory_order_relaxed))
        ECHOD_COUNT(echod_metrics.deadline_expired_queued);
    echod_call_cancel(&s->call);
    echod_stream_close(s, ECHOD_DEADLINE_EXCEEDED, "Deadline exceeded", NULL);
    echod_conn__process(s->conn);
}

void echod_stream_closed(echod_stream_t *s)
{
    MOVE(s, state, ECHOD_STREAM_CLOSED);
    if (s->drain == ECHOD_DRAIN_OPEN)
        ECHOD_COUNT(echod_metrics.drain_streams_finished);
    if (s->send != ECHOD_SEND_DONE)
        echod_call_cancel(&s->call);
    h2o_timeout_unlink(&s->deadline);
}

int echod_stream_drain_mark(echod_stream_t *s)
{
    if (s->steps == ECHOD_STEPS_REJECTED || s->send >= ECHOD_SEND_TRAILERS_QUEUED)
        return 0;
    MOVE(s, drain, ECHOD_DRAIN_OPEN);
    return 1;
}

void echod_stream_cut(echod_stream_t *s)
{
    if (s->steps == ECHOD_STEPS_REJECTED || s->send >= ECHOD_SEND_TRAILERS_QUEUED)
        return;
    if (s->drain == ECHOD_DRAIN_OPEN) /* a max_connection_age grace cut is not a drain cut */
        ECHOD_COUNT(echod_metrics.drain_streams_cut);
    MOVE(s, drain, ECHOD_DRAIN_CUT);
    echod_call_cancel(&s->call);
    echod_stream_close(s, ECHOD_UNAVAILABLE, "Server shutting down: shutdown.drain_timeout passed", NULL);
}

/* --- receiving --- */

/* lit must be a string literal: its length is known at compile time */
#define header_is(p, len, lit) ((len) == sizeof(lit) - 1 && memcmp((p), (lit), sizeof(lit) - 1) == 0)

/* application/grpc, application/grpc+proto, application/grpc;charset=... (gRPC's rule) */
static int content_type_ok(const uint8_t *v, size_t len)
{
    static const char base[] = "application/grpc";
    size_t bl = sizeof(base) - 1;
    if (len < bl || strncasecmp((const char *)v, base, bl) != 0)
        return 0;
    return len == bl || v[bl] == '+' || v[bl] == ';';
}

/* Transport and gRPC protocol headers are not application metadata: they are never echoed. */
static int is_reserved_header(const uint8_t *name, size_t len)
{
    return header_is(name, len, "te") || header_is(name, len, "user-agent") || header_is(name, len, "host") ||
           (len >= 5 && memcmp(name, "grpc-", 5) == 0);
}

static void keep_metadata(echod_stream_t *s, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen)
{
    size_t need = s->hdr.meta_len + nlen + vlen + 2;
    char *m = echod_must(realloc(s->hdr.meta, need), "request metadata");
    memcpy(m + s->hdr.meta_len, name, nlen);
    m[s->hdr.meta_len + nlen] = '\0';
    memcpy(m + s->hdr.meta_len + nlen + 1, value, vlen);
    m[need - 1] = '\0';
    s->hdr.meta = m;
    s->hdr.meta_len = need;
    s->hdr.meta_count++;
}

int echod_stream_on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                           const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data)
{
    (void)flags;
    (void)user_data;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    echod_stream_t *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (s == NULL)
        return 0;
    s->header_bytes += namelen + valuelen + 32;
    if (s->header_bytes > s->loop->server->cfg->transport.max_header_list_bytes) {
        ECHOD_COUNT(echod_metrics.header_lists_too_large);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets this stream only */
    }
    if (header_is(name, namelen, ":method")) {
        s->hdr.method_seen = 1;
        s->hdr.is_post = header_is(value, valuelen, "POST");
    } else if (header_is(name, namelen, ":path")) {
        free(s->path);
        s->path = echod_must(strndup((const char *)value, valuelen), ":path");
        s->call.path = s->path;
        s->call.path_len = valuelen;
    } else if (header_is(name, namelen, "content-type")) {
        s->hdr.ct_seen = 1;
        s->hdr.ct_ok = content_type_ok(value, valuelen);
    } else if (header_is(name, namelen, "grpc-encoding")) {
        s->hdr.enc_seen = 1;
        s->hdr.enc_unsupported = echod_encoding_parse((const char *)value, valuelen, &s->hdr.encoding) != 0;
    } else if (header_is(name, namelen, "grpc-accept-encoding")) {
        s->hdr.enc_seen = 1;
        s->hdr.accept = echod_encoding_accept_parse((const char *)value, valuelen);
    } else if (header_is(name, namelen, "grpc-timeout")) {
        if (echod_grpc_timeout_parse((const char *)value, valuelen, &s->hdr.timeout_ns) != 0)
            s->hdr.timeout_bad = 1;
    } else if (header_is(name, namelen, "echod-stage")) {
        echod_stage_header(s->loop->stage, sizeof(s->loop->stage), (const char *)value, valuelen);
    } else if (echod_work_parse_header((const char *)name, namelen, (const char *)value, valuelen, &s->hdr.work,
                                       &s->hdr.work_error)) {
        /* a work knob: also echoed with the rest of the metadata */
        keep_metadata(s, name, namelen, value, valuelen);
    } else if (name[0] != ':' && !is_reserved_header(name, namelen)) {
        keep_metadata(s, name, namelen, value, valuelen);
    }
    return 0;
}

/* Answered before any step, with input dropped from here on. */
static void reject(echod_stream_t *s, int code, const nghttp2_nv *nv, size_t nvlen)
{
    MOVE(s, steps, ECHOD_STEPS_REJECTED);
    MOVE(s, send, ECHOD_SEND_TRAILERS_QUEUED);
    s->status_code = code;
    nghttp2_submit_response(echod_conn__session(s->conn), s->id, nv, nvlen, NULL);
}

static void reject_http(echod_stream_t *s, const char *status, const char *message)
{
    nghttp2_nv nv[] = {NV(":status", status), NV("content-type", "text/plain; charset=utf-8"),
                       NV("grpc-status", status_code_str(ECHOD_INTERNAL)), NV("grpc-message", message)};
    reject(s, ECHOD_INTERNAL, nv, sizeof(nv) / sizeof(nv[0]));
}

/* Ends the stream with a status before any step: nothing was accepted. */
static void refuse(echod_stream_t *s, int code, const char *message)
{
    MOVE(s, steps, ECHOD_STEPS_REJECTED);
    echod_stream_close(s, code, message, NULL);
}

void echod_stream_headers_done(echod_stream_t *s)
{
    if (!s->hdr.is_post) {
        reject_http(s, "405", "Method not allowed: gRPC requires POST");
        return;
    }
    if (!s->hdr.ct_ok) {
        reject_http(s, "415", "Unsupported content-type: gRPC requires application/grpc");
        return;
    }
    if (s->hdr.enc_unsupported) {
        static const nghttp2_nv accept = NV("grpc-accept-encoding", ECHOD_ACCEPT_ENCODING);
        nghttp2_nv nv[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                           NV("grpc-status", status_code_str(ECHOD_UNIMPLEMENTED)),
                           NV("grpc-message", "Unsupported grpc-encoding: supported are " ECHOD_ACCEPT_ENCODING),
                           accept};
        reject(s, ECHOD_UNIMPLEMENTED, nv, sizeof(nv) / sizeof(nv[0]));
        return;
    }
    /* grpc-encoding: compressed messages pass the deframer, and the messages step inflates them */
    s->call.in_encoding = s->hdr.encoding;
    s->call.out_encoding =
        echod_encoding_respond(s->loop->server->cfg->transport.compression.respond, s->call.in_encoding, s->hdr.accept);
    s->deframer.allow_compressed = s->call.in_encoding != ECHOD_ENCODING_IDENTITY;
    if (s->path == NULL) {
        s->path = echod_must(strdup(""), ":path");
        s->call.path = s->path;
        s->call.path_len = 0;
    }
    if (echod_call_admit(&s->call, &s->hdr.work, &s->hdr.work_error) == ECHOD_ADMIT_SHED) {
        refuse(s, ECHOD_RESOURCE_EXHAUSTED, "Server at limits.max_calls_in_flight");
        return;
    }
    if (s->hdr.timeout_bad) {
        refuse(s, ECHOD_INTERNAL, "Malformed grpc-timeout header"); /* the request never reached a method */
        return;
    }
    if (s->hdr.timeout_ns != 0) {
        uint64_t ms = (s->hdr.timeout_ns + 999999) / 1000000;
        uint64_t now = h2o_now(s->loop->evloop);
        s->deadline_ms = ms > UINT64_MAX - now ? UINT64_MAX : now + ms;
        echod_loop_link_deadline(s->loop, &s->deadline, s->deadline_ms);
    }
    echod_conn__touch(s->conn, s);
}

static size_t take_data(echod_stream_t *s, const uint8_t *data, size_t len)
{
    if (s->steps == ECHOD_STEPS_REJECTED || s->deframe != ECHOD_DEFRAME_STATE_OK ||
        s->send >= ECHOD_SEND_TRAILERS_QUEUED)
        return len;
    echod_deframer_t *d = &s->deframer;
    size_t now;
    if (echod_deframer_feed(d, data, len) != ECHOD_DEFRAME_OK) {
        MOVE(s, deframe, ECHOD_DEFRAME_STATE_FAILED);
        now = len + s->held_bytes;
        s->held_bytes = 0;
        echod_conn__touch(s->conn, s);
        return now;
    }
    /* bytes return to the window as messages are delivered: a slow handler back-pressures */
    if (d->count == 0) {
        now = len + s->held_bytes;
        s->held_bytes = 0;
        return now;
    }
    s->held_bytes += len;
    echod_conn__touch(s->conn, s);
    return 0;
}

int echod_stream_on_data(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data, size_t len,
                         void *user_data)
{
    (void)flags;
    (void)user_data;
    echod_stream_t *s = nghttp2_session_get_stream_user_data(session, stream_id);
    size_t consumed = s != NULL ? take_data(s, data, len) : len;
    if (consumed != 0)
        nghttp2_session_consume(session, stream_id, consumed);
    return 0;
}

/* --- the pump: which steps are due (loop thread) --- */

static void deliver_messages(echod_stream_t *s)
{
    const echod_config_t *cfg = s->loop->server->cfg;
    while (s->requested > 0 && s->steps < ECHOD_STEPS_HALF_CLOSED) {
        echod_msg_t *msg = echod_deframer_pop(&s->deframer);
        if (msg == NULL)
            break;
        s->requested--;
        if (s->deframer.count == 0 && s->held_bytes != 0) {
            s->call.chain.ns = 0; /* flow control is the transport's time, not the next step's */
            echod_conn__consume(s->conn, s->id, s->held_bytes);
            s->held_bytes = 0;
        }
        int last = s->recv == ECHOD_RECV_END_STREAM && s->deframer.count == 0 && !echod_deframer_partial(&s->deframer);
        if (last && cfg->dispatch.coalesce_end_stream) {
            MOVE(s, steps, ECHOD_STEPS_HALF_CLOSED);
            echod_call_submit(&s->call, ECHOD_STEP_MESSAGES_AND_HALF_CLOSE, msg);
        } else {
            echod_call_submit(&s->call, ECHOD_STEP_MESSAGES_AVAILABLE, msg);
        }
    }
}

/* Like grpc-java's deframeFailed: the transport ends the call with a status and cancels it. */
static void report_deframe_error(echod_stream_t *s)
{
    const echod_deframer_t *d = &s->deframer;
    char msg[128];
    int code = ECHOD_INTERNAL;
    switch (d->error) {
    case ECHOD_DEFRAME_TOO_LARGE:
        code = ECHOD_RESOURCE_EXHAUSTED;
        snprintf(msg, sizeof(msg), "Received message larger than max (%u vs. %u)", d->error_len, d->max_message);
        break;
    case ECHOD_DEFRAME_COMPRESSED:
        snprintf(msg, sizeof(msg), "Compressed message received but no grpc-encoding was negotiated");
        break;
    default:
        snprintf(msg, sizeof(msg), "Invalid gRPC message flags");
        break;
    }
    echod_call_cancel(&s->call);
    echod_stream_close(s, code, msg, NULL);
}

static void pump_once(echod_stream_t *s)
{
    if (s->steps == ECHOD_STEPS_REJECTED || s->steps == ECHOD_STEPS_CLOSED)
        return;
    if (s->steps == ECHOD_STEPS_NONE) {
        MOVE(s, steps, ECHOD_STEPS_STARTED);
        if (s->loop->server->cfg->dispatch.merge_lookup_and_start) {
            echod_call_submit(&s->call, ECHOD_STEP_LOOKUP_AND_START, NULL);
        } else {
            echod_call_submit(&s->call, ECHOD_STEP_METHOD_LOOKUP, NULL);
            echod_call_submit(&s->call, ECHOD_STEP_START_CALL, NULL);
        }
        echod_call_submit(&s->call, ECHOD_STEP_ON_READY, NULL);
    }
    if (s->state == ECHOD_STREAM_CLOSED) {
        MOVE(s, steps, ECHOD_STEPS_CLOSED);
        /* decided here, on the loop, so the closed step reads one plain field */
        s->call.final_code = s->send == ECHOD_SEND_DONE ? s->status_code : ECHOD_CANCELLED;
        echod_call_submit(&s->call, ECHOD_STEP_CLOSED, NULL);
        return;
    }
    if (s->deframe != ECHOD_DEFRAME_STATE_OK) {
        if (s->deframe == ECHOD_DEFRAME_STATE_FAILED) {
            MOVE(s, deframe, ECHOD_DEFRAME_STATE_REPORTED);
            report_deframe_error(s);
        }
        return;
    }
    deliver_messages(s);
    if (s->recv == ECHOD_RECV_END_STREAM && s->steps < ECHOD_STEPS_HALF_CLOSED && s->deframer.count == 0) {
        MOVE(s, steps, ECHOD_STEPS_HALF_CLOSED);
        if (echod_deframer_partial(&s->deframer))
            echod_stream_close(s, ECHOD_INTERNAL, "Incomplete message: END_STREAM in the middle of a message", NULL);
        else
            echod_call_submit(&s->call, ECHOD_STEP_HALF_CLOSED, NULL);
    }
    if (s->ready_due) {
        s->ready_due = 0;
        echod_call_submit(&s->call, ECHOD_STEP_ON_READY, NULL);
    }
}

void echod_stream_pump(echod_stream_t *s)
{
    /* An inline step may request messages and so re-enter: the outer pump goes round again,
     * which keeps steps in transport order (start, on_ready, then messages). */
    if (s->pump != ECHOD_PUMP_IDLE) {
        MOVE(s, pump, ECHOD_PUMP_AGAIN);
        return;
    }
    s->call.chain.active = 1; /* chain.ns is 0: only a pump sets it, and it clears it on the way out */
    echod_call_retain(&s->call);
    do {
        MOVE(s, pump, ECHOD_PUMP_RUNNING);
        pump_once(s);
    } while (s->pump == ECHOD_PUMP_AGAIN);
    MOVE(s, pump, ECHOD_PUMP_IDLE);
    s->call.chain.active = 0;
    s->call.chain.ns = 0;
    echod_call_release(&s->call);
}

/* --- the call's ops: act now on the loop, else post a loop task --- */

typedef enum {
    TASK_REQUEST = ECHOD_LOOP_TASK_REQUEST,
    TASK_WRITE = ECHOD_LOOP_TASK_WRITE,
    TASK_CLOSE = ECHOD_LOOP_TASK_CLOSE,
    TASK_WAKE, /* a wake-up from outside any step: not one of the counted hops */
} task_kind_t;

typedef struct {
    echod_loop_msg_t super;
    task_kind_t kind;
    echod_stream_t *stream;
    uint32_t n;
    echod_msg_t *msg;
    int code;
    const char *message; /* close: NULL, or its copy in text[] (the handler's buffer may be on its stack) */
    const char *timing;  /* close: as given (the call's memory, valid for its life) */
    char text[];
} stream_task_t;

static int on_home(const echod_call_t *call)
{
    return echod_loop_current() == ((const echod_stream_t *)call)->loop;
}

static void apply_request(echod_stream_t *s, uint32_t n)
{
    if (s->state == ECHOD_STREAM_CLOSED)
        return;
    s->requested += n;
    echod_stream_pump(s);
}

static void apply_wake(echod_stream_t *s)
{
    /* once closed the closed step may be queued: a wake-up after it would follow on_complete */
    if (s->state == ECHOD_STREAM_CLOSED)
        return;
    s->ready_due = 1;
    echod_stream_pump(s);
}

static void task_run(echod_loop_msg_t *m)
{
    stream_task_t *t = (stream_task_t *)m;
    echod_stream_t *s = t->stream;
    int parked = echod_loop_task_woke(s->loop); /* taken by a health wake too: it woke the loop */
    if (t->kind != TASK_WAKE)                   /* a handler's hop back, received by the loop */
        echod_call_handoff(&s->call, ECHOD_HANDOFF_TO_LOOP, parked);
    switch (t->kind) {
    case TASK_REQUEST:
        apply_request(s, t->n);
        break;
    case TASK_WRITE:
        send_message(s, t->msg);
        break;
    case TASK_CLOSE:
        echod_stream_close(s, t->code, t->message, t->timing);
        break;
    case TASK_WAKE:
        apply_wake(s);
        break;
    }
    echod_call_release(&s->call);
    free(t);
}

/* A task with `text` bytes after it for the caller's strings. */
static stream_task_t *post_task(echod_stream_t *s, task_kind_t kind, size_t text)
{
    /* zeroed: h2o asserts the link is not linked */
    stream_task_t *t = echod_must(calloc(1, sizeof(*t) + text), "loop task");
    t->super.run = task_run;
    t->kind = kind;
    t->stream = s;
    echod_call_retain(&s->call);
    if (kind != TASK_WAKE)
        ECHOD_COUNT(echod_metrics.loop_tasks[kind]);
    return t;
}

static void op_request(echod_call_t *call, uint32_t n)
{
    echod_stream_t *s = echod_stream_of(call);
    if (on_home(call)) {
        apply_request(s, n);
        return;
    }
    stream_task_t *t = post_task(s, TASK_REQUEST, 0);
    t->n = n;
    echod_loop_post(s->loop, &t->super);
}

static void op_send(echod_call_t *call, echod_msg_t *msg)
{
    echod_stream_t *s = echod_stream_of(call);
    if (on_home(call)) {
        send_message(s, msg);
        return;
    }
    stream_task_t *t = post_task(s, TASK_WRITE, 0);
    t->msg = msg;
    echod_loop_post(s->loop, &t->super);
}

static void op_close(echod_call_t *call, int code, const char *message, const char *timing)
{
    echod_stream_t *s = echod_stream_of(call);
    if (on_home(call)) {
        echod_stream_close(s, code, message, timing);
        return;
    }
    size_t len = message != NULL ? strlen(message) + 1 : 0;
    stream_task_t *t = post_task(s, TASK_CLOSE, len);
    t->code = code;
    t->message = message != NULL ? memcpy(t->text, message, len) : NULL;
    t->timing = timing;
    echod_loop_post(s->loop, &t->super);
}

/* Always a loop task, even on the loop: the caller may hold a lock that on_complete takes. */
static void op_wake_ready(echod_call_t *call)
{
    echod_stream_t *s = echod_stream_of(call);
    echod_loop_post(s->loop, &post_task(s, TASK_WAKE, 0)->super);
}

static const echod_call_ops_t stream_call_ops = {
    .request = op_request,
    .send = op_send,
    .close = op_close,
    .wake_ready = op_wake_ready,
    .on_home = on_home,
    .free = stream_free,
};
