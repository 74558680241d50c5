#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <nghttp2/nghttp2.h>
#include "grpc/status.h"
#include "grpc/timeout.h"
#include "services/work.h"
#include "util/clock.h"
#include "transport/conn.h"
#include "transport/stream_ids.h"
#include "util/log.h"

/* Above this many unsent bytes, stop asking nghttp2 for more until the socket drains. */
#define OUT_HIGH_WATER (256 * 1024)

typedef struct {
    uint8_t *data;
    size_t len, cap;
} bytes_t;

struct echod_conn {
    echod_loop_t *loop;
    h2o_socket_t *sock;
    nghttp2_session *ngh;
    atomic_int refs; /* one for the open socket, one per call, one while batch-dirty */
    h2o_linklist_t link;
    echod_call_t *calls; /* open streams */
    echod_call_t *touched_head, *touched_tail;
    bytes_t out;     /* frames nghttp2 produced, not yet handed to the socket */
    bytes_t writing; /* the bytes of the one outstanding h2o_socket_write */
    h2o_timeout_entry_t tail_entry;
    h2o_timeout_entry_t guard_entry;        /* handshake, then idle timeout */
    h2o_timeout_entry_t age_entry;          /* max_connection_age, then its grace */
    size_t header_bytes;                    /* of the request header block being received */
    uint64_t reset_budget, reset_budget_ms; /* RST_STREAMs the peer may still send, in 1/1000ths; refilled then */
    echod_conn_t *next_batch_dirty;
    size_t frames;                 /* sent since the last counted flush */
    echod_stream_ids_t stream_ids; /* client stream ids used: RFC 9113 5.1.1 (on_begin_frame) */
    unsigned in_recv : 1, processing : 1, closed : 1, goaway_notice : 1, goaway_final : 1, immediate_due : 1,
        batch_dirty : 1, established : 1, aged : 1, terminated : 1;
};

static void conn_close(echod_conn_t *conn);
static void final_goaway(echod_conn_t *conn);

/* The PING sent with the GOAWAY notice; its ack triggers the final GOAWAY. */
static const uint8_t goaway_ping[8] = {'e', 'c', 'h', 'o', 'd', 'g', 'o', 'a'};
/*
 * A peer that never acks that PING gets the final GOAWAY after this long anyway (python-h2 drops
 * its queued ack when the GOAWAY arrives). grpc-java waits 10 s; the ack only has to cover one
 * round trip, and a stream that loses the race is refused above last-stream-id, which gRPC retries.
 */
#define GOAWAY_PING_TIMEOUT_MS 2000

static void conn_hold(echod_conn_t *conn)
{
    atomic_fetch_add_explicit(&conn->refs, 1, memory_order_relaxed);
}
static void conn_process(echod_conn_t *conn);

echod_conn_t *echod_conn_from_link(h2o_linklist_t *link)
{
    return H2O_STRUCT_FROM_MEMBER(echod_conn_t, link, link);
}

void echod_conn_release(echod_conn_t *conn)
{
    if (atomic_fetch_sub_explicit(&conn->refs, 1, memory_order_acq_rel) == 1) {
        free(conn->out.data);
        free(conn->writing.data);
        free(conn);
    }
}

static int bytes_append(bytes_t *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap < 16384 ? 16384 : b->cap;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *d = realloc(b->data, cap);
        if (d == NULL)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

/* --- flushing (DESIGN.md section 6) --- */

static void on_write_complete(h2o_socket_t *sock, const char *err);

static void start_write(echod_conn_t *conn)
{
    if (conn->closed || h2o_socket_is_writing(conn->sock) || conn->out.len == 0)
        return;
    bytes_t tmp = conn->writing;
    conn->writing = conn->out;
    conn->out = tmp;
    conn->out.len = 0;
    h2o_iovec_t iov = h2o_iovec_init(conn->writing.data, conn->writing.len);
    h2o_socket_write(conn->sock, &iov, 1, on_write_complete);
}

/* Asks nghttp2 for every frame it has ready. Never from inside an nghttp2 callback. */
static int produce(echod_conn_t *conn)
{
    if (conn->closed || conn->in_recv || conn->out.len >= OUT_HIGH_WATER)
        return 0;
    int rv = nghttp2_session_send(conn->ngh);
    if (rv != 0) {
        echod_warn("connection: nghttp2_session_send: %s", nghttp2_strerror(rv));
        conn_close(conn);
        return -1;
    }
    return 0;
}

static void maybe_close(echod_conn_t *conn)
{
    if (conn->closed)
        return;
    if (!nghttp2_session_want_read(conn->ngh) && !nghttp2_session_want_write(conn->ngh) && conn->out.len == 0 &&
        !h2o_socket_is_writing(conn->sock))
        conn_close(conn);
}

void echod_conn_flush(echod_conn_t *conn, echod_flush_trigger_t trigger)
{
    if (conn->closed || conn->in_recv)
        return;
    size_t before = conn->out.len;
    conn->frames = 0;
    if (produce(conn) != 0)
        return;
    size_t produced = conn->out.len - before;
    if (produced != 0) {
        ECHOD_COUNT(echod_metrics.flushes[trigger]);
        echod_histogram_observe(&echod_metrics.flush_frames, conn->frames);
        echod_histogram_observe(&echod_metrics.flush_bytes, produced);
        start_write(conn);
    }
    /* sending may have closed streams (trailers out): their `closed` steps are due */
    conn_process(conn);
    maybe_close(conn);
}

static void on_write_complete(h2o_socket_t *sock, const char *err)
{
    echod_conn_t *conn = sock->data;
    conn_hold(conn);
    conn->writing.len = 0;
    if (err != NULL) {
        conn_close(conn);
    } else if (produce(conn) == 0) {
        /* frames held back by OUT_HIGH_WATER belong to flushes already counted */
        start_write(conn);
        conn_process(conn);
        maybe_close(conn);
    }
    echod_conn_release(conn);
}

static void on_tail(h2o_timeout_entry_t *entry)
{
    echod_conn_t *conn = H2O_STRUCT_FROM_MEMBER(echod_conn_t, tail_entry, entry);
    conn_hold(conn);
    echod_conn_flush(conn, ECHOD_FLUSH_TRIGGER_LOOP_TAIL);
    echod_conn_release(conn);
}

/* Something was queued in nghttp2: schedule the flush the policy asks for. */
static void mark_dirty(echod_conn_t *conn)
{
    echod_loop_t *loop = conn->loop;
    if (conn->closed)
        return;
    if (loop->in_task_batch) {
        if (!conn->batch_dirty) {
            conn->batch_dirty = 1;
            atomic_fetch_add_explicit(&conn->refs, 1, memory_order_relaxed);
            conn->next_batch_dirty = loop->batch_dirty;
            loop->batch_dirty = conn;
        }
        return;
    }
    if (!h2o_timeout_is_linked(&conn->tail_entry))
        h2o_timeout_link(loop->evloop, &loop->tail, &conn->tail_entry);
}

echod_conn_t *echod_conn_flush_batch(echod_conn_t *conn)
{
    echod_conn_t *next = conn->next_batch_dirty;
    conn->batch_dirty = 0;
    conn_process(conn);
    echod_conn_flush(conn, ECHOD_FLUSH_TRIGGER_LOOP_TASK);
    echod_conn_release(conn);
    return next;
}

/* --- connection guards: handshake, idle and age timers (transport.*_timeout, max_connection_age) --- */

static void close_for(echod_conn_t *conn, echod_close_reason_t reason)
{
    ECHOD_COUNT(echod_metrics.connections_closed[reason]);
    conn_close(conn);
}

static void on_guard(h2o_timeout_entry_t *entry)
{
    echod_conn_t *conn = H2O_STRUCT_FROM_MEMBER(echod_conn_t, guard_entry, entry);
    if (conn->terminated) {
        conn_close(conn); /* the GOAWAY had its chance: a peer that does not read keeps nothing open */
        return;
    }
    if (!conn->established) {
        close_for(conn, ECHOD_CLOSE_HANDSHAKE_TIMEOUT); /* nothing to say to a peer that never spoke HTTP/2 */
        return;
    }
    conn_hold(conn);
    if (conn->goaway_notice) {
        /* the GOAWAY PING was never acked: without this an idle or aged connection would stay forever */
        final_goaway(conn);
        echod_conn_flush(conn, ECHOD_FLUSH_TRIGGER_LOOP_TAIL);
    } else {
        ECHOD_COUNT(echod_metrics.connections_closed[ECHOD_CLOSE_IDLE]);
        echod_conn_goaway(conn); /* closes once the final GOAWAY is out and no stream is open */
    }
    echod_conn_release(conn);
}

/*
 * The guard timer as a last-chance deadline: after the GOAWAY notice it waits for the PING ack,
 * after a terminated session for the GOAWAY to leave (the idle timer has no use then).
 */
static void arm_guard_deadline(echod_conn_t *conn)
{
    h2o_timeout_unlink(&conn->guard_entry);
    echod_loop_link_deadline(conn->loop, &conn->guard_entry, h2o_now(conn->loop->evloop) + GOAWAY_PING_TIMEOUT_MS);
}

/*
 * The session ended on an error (flood, protocol error, reset rate): nghttp2 has a GOAWAY queued
 * and the connection closes once it is out. A peer that stopped reading would never let it out,
 * so the guard timer closes the connection after GOAWAY_PING_TIMEOUT_MS regardless.
 */
static void terminate(echod_conn_t *conn, uint32_t code, echod_close_reason_t reason)
{
    ECHOD_COUNT(echod_metrics.connections_closed[reason]);
    nghttp2_session_terminate_session(conn->ngh, code);
    conn->terminated = 1;
    arm_guard_deadline(conn);
}

/* Idle means no open stream: the timer runs only while conn->calls is empty. */
static void update_idle(echod_conn_t *conn)
{
    uint64_t idle = conn->loop->server->cfg->transport.idle_timeout_ms;
    if (idle == 0 || !conn->established || conn->closed || conn->goaway_notice || conn->terminated)
        return;
    if (conn->calls == NULL && !h2o_timeout_is_linked(&conn->guard_entry))
        h2o_timeout_link(conn->loop->evloop, &conn->loop->idle, &conn->guard_entry);
    else if (conn->calls != NULL)
        h2o_timeout_unlink(&conn->guard_entry);
}

static void on_age(h2o_timeout_entry_t *entry)
{
    echod_conn_t *conn = H2O_STRUCT_FROM_MEMBER(echod_conn_t, age_entry, entry);
    const echod_config_t *cfg = conn->loop->server->cfg;
    conn_hold(conn);
    if (!conn->aged) {
        /* gRPC A9: a graceful GOAWAY at the age, then, with a grace, the rest is cut */
        conn->aged = 1;
        ECHOD_COUNT(echod_metrics.connections_closed[ECHOD_CLOSE_MAX_AGE]);
        echod_conn_goaway(conn);
        if (cfg->transport.max_connection_age_grace_ms != 0 && !conn->closed)
            echod_loop_link_deadline(conn->loop, &conn->age_entry,
                                     h2o_now(conn->loop->evloop) + cfg->transport.max_connection_age_grace_ms);
    } else {
        echod_conn_cut(conn);
    }
    echod_conn_release(conn);
}

static void start_age(echod_conn_t *conn)
{
    uint64_t age = conn->loop->server->cfg->transport.max_connection_age_ms;
    if (age == 0)
        return;
    /* +-10% jitter, so connections opened together do not all reconnect together */
    uint64_t jitter = age / 10;
    uint64_t r = ((uint64_t)(uintptr_t)conn * 0x9E3779B97F4A7C15ull) ^ echod_now_ns();
    uint64_t when = age - jitter + (jitter != 0 ? (r >> 17) % (2 * jitter + 1) : 0);
    echod_loop_link_deadline(conn->loop, &conn->age_entry, h2o_now(conn->loop->evloop) + when);
}

/* --- calls: touched list and stream bookkeeping --- */

static void touch(echod_call_t *call)
{
    echod_conn_t *conn = call->conn;
    if (call->io.touched)
        return;
    call->io.touched = 1;
    echod_call_retain(call);
    call->io.next_touched = NULL;
    if (conn->touched_tail != NULL)
        conn->touched_tail->io.next_touched = call;
    else
        conn->touched_head = call;
    conn->touched_tail = call;
}

static void conn_process(echod_conn_t *conn)
{
    if (conn->processing)
        return;
    conn->processing = 1;
    echod_call_t *call;
    while ((call = conn->touched_head) != NULL) {
        conn->touched_head = call->io.next_touched;
        if (conn->touched_head == NULL)
            conn->touched_tail = NULL;
        call->io.touched = 0;
        echod_call_pump(call);
        echod_call_release(call);
        if (conn->immediate_due) {
            conn->immediate_due = 0;
            conn->processing = 0;
            echod_conn_flush(conn, ECHOD_FLUSH_TRIGGER_IMMEDIATE);
            conn->processing = 1;
        }
    }
    conn->processing = 0;
}

static void unlink_call(echod_call_t *call)
{
    echod_conn_t *conn = call->conn;
    if (!call->io.in_conn)
        return;
    call->io.in_conn = 0;
    if (call->io.prev_in_conn != NULL)
        call->io.prev_in_conn->io.next_in_conn = call->io.next_in_conn;
    else
        conn->calls = call->io.next_in_conn;
    if (call->io.next_in_conn != NULL)
        call->io.next_in_conn->io.prev_in_conn = call->io.prev_in_conn;
    update_idle(conn);
}

/* The stream is gone (trailers sent and peer done, reset, or connection lost). */
static void stream_closed(echod_call_t *call)
{
    call->io.closed = 1;
    if (call->io.drain_open && !call->io.drain_cut)
        ECHOD_COUNT(echod_metrics.drain_streams_finished);
    if (!call->io.trailers_sent)
        echod_call_cancel(call);
    h2o_timeout_unlink(&call->io.deadline);
    unlink_call(call);
    touch(call);
    echod_call_release(call); /* the transport's reference */
}

/* --- sending --- */

static ssize_t data_read_cb(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                            uint32_t *data_flags, nghttp2_data_source *source, void *user_data);

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
static void status_nv(echod_call_t *call, nghttp2_nv *nv, size_t *n, char *msg_buf, size_t msg_cap)
{
    nv[(*n)++] = (nghttp2_nv)NV("grpc-status", status_code_str(call->io.status_code));
    if (call->io.status_message != NULL && call->io.status_message[0] != '\0') {
        echod_status_encode_message(msg_buf, msg_cap, call->io.status_message);
        nv[(*n)++] = (nghttp2_nv)NV_UNINDEXED("grpc-message", msg_buf);
    }
    /* a new value every call: indexing it would churn the HPACK table for nothing */
    if (call->io.timing != NULL)
        nv[(*n)++] = (nghttp2_nv)NV_UNINDEXED("echod-timing", call->io.timing);
}

static ssize_t data_read_cb(nghttp2_session *session, int32_t stream_id, uint8_t *buf, size_t length,
                            uint32_t *data_flags, nghttp2_data_source *source, void *user_data)
{
    (void)buf;
    (void)user_data;
    echod_call_t *call = source->ptr;
    if (call->io.out_queued == 0 && !call->io.trailers_queued) {
        call->io.data_deferred = 1;
        return NGHTTP2_ERR_DEFERRED;
    }
    size_t n = call->io.out_queued < length ? call->io.out_queued : length;
    if (n != 0)
        *data_flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    if (n == call->io.out_queued && call->io.trailers_queued) {
        nghttp2_nv nv[3];
        size_t nvlen = 0;
        char msg[512];
        status_nv(call, nv, &nvlen, msg, sizeof(msg));
        *data_flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (nghttp2_submit_trailer(session, stream_id, nv, nvlen) != 0)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    return (ssize_t)n;
}

static int send_data_cb(nghttp2_session *session, nghttp2_frame *frame, const uint8_t *framehd, size_t length,
                        nghttp2_data_source *source, void *user_data)
{
    (void)session;
    (void)frame;
    echod_conn_t *conn = user_data;
    echod_call_t *call = source->ptr;
    if (bytes_append(&conn->out, framehd, 9) != 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    size_t freed = 0;
    while (length != 0) {
        echod_msg_t *m = call->io.out_head;
        size_t avail = echod_msg_frame_len(m) - call->io.out_offset;
        size_t take = avail < length ? avail : length;
        if (bytes_append(&conn->out, m->frame + call->io.out_offset, take) != 0)
            return NGHTTP2_ERR_CALLBACK_FAILURE;
        length -= take;
        call->io.out_queued -= take;
        call->io.out_offset += take;
        if (call->io.out_offset == echod_msg_frame_len(m)) {
            call->io.out_head = m->next;
            if (call->io.out_head == NULL)
                call->io.out_tail = NULL;
            call->io.out_offset = 0;
            freed += echod_msg_frame_len(m);
            echod_msg_free(m);
        }
    }
    if (freed != 0) {
        size_t limit = call->server->cfg->transport.max_send_buffer_bytes;
        size_t before = atomic_fetch_sub_explicit(&call->out_bytes, freed, memory_order_acq_rel);
        if (before >= limit && before - freed < limit) {
            call->io.ready_due = 1; /* grpc-java's onReady: a transition back to ready */
            touch(call);
        }
    }
    return 0;
}

static void submit_headers(echod_call_t *call, int with_data)
{
    echod_conn_t *conn = call->conn;
    size_t echoed = call->work.echo_metadata ? call->io.hdr.meta_count : 0;
    nghttp2_nv fixed[7], *nv = echoed != 0 ? malloc((7 + echoed) * sizeof(*nv)) : fixed;
    if (nv == NULL)
        nv = fixed, echoed = 0;
    nv[0] = (nghttp2_nv)NV(":status", "200");
    nv[1] = (nghttp2_nv)NV("content-type", "application/grpc");
    size_t n = 2;
    /* grpc-encoding (grpc/codec.h): what the client may send, to a client that speaks of
     * encodings (HPACK costs a call ~550 instructions for it: not paid by one that does not) */
    if (call->io.hdr.enc_seen)
        nv[n++] = (nghttp2_nv){(uint8_t *)"grpc-accept-encoding", (uint8_t *)ECHOD_ACCEPT_ENCODING,
                               sizeof("grpc-accept-encoding") - 1, sizeof(ECHOD_ACCEPT_ENCODING) - 1,
                               NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
    if (with_data && call->out_encoding != ECHOD_ENCODING_IDENTITY)
        nv[n++] = (nghttp2_nv)NV("grpc-encoding", echod_encoding_name(call->out_encoding));
    char msg[512];
    if (!with_data)
        status_nv(call, nv, &n, msg, sizeof(msg));
    for (const char *p = call->io.hdr.meta; echoed != 0 && p < call->io.hdr.meta + call->io.hdr.meta_len;) {
        size_t nl = strlen(p), vl = strlen(p + nl + 1);
        nv[n++] = (nghttp2_nv){(uint8_t *)p, (uint8_t *)p + nl + 1, nl, vl, NGHTTP2_NV_FLAG_NONE};
        p += nl + vl + 2;
    }
    nghttp2_data_provider prd = {.source.ptr = call, .read_callback = data_read_cb};
    nghttp2_submit_response(conn->ngh, call->io.stream_id, nv, n, with_data ? &prd : NULL);
    if (nv != fixed)
        free(nv);
}

void echod_conn_send_message(echod_call_t *call, echod_msg_t *msg)
{
    echod_conn_t *conn = call->conn;
    if (conn->closed || call->io.closed || call->io.trailers_queued) {
        atomic_fetch_sub_explicit(&call->out_bytes, echod_msg_frame_len(msg), memory_order_acq_rel);
        echod_msg_free(msg);
        return;
    }
    msg->next = NULL;
    if (call->io.out_tail != NULL)
        call->io.out_tail->next = msg;
    else
        call->io.out_head = msg;
    call->io.out_tail = msg;
    call->io.out_queued += echod_msg_frame_len(msg);
    if (!call->io.headers_sent) {
        call->io.headers_sent = 1;
        submit_headers(call, 1);
    } else if (call->io.data_deferred) {
        call->io.data_deferred = 0;
        nghttp2_session_resume_data(conn->ngh, call->io.stream_id);
    }
    mark_dirty(conn);
}

/* Queues the status as trailers (or Trailers-Only). If the client has not half-closed, the
 * trailers are followed by RST_STREAM(NO_ERROR) (PROTOCOL-HTTP2 "early server closure"): any
 * other code races the trailers at the client, and grpc-core then reports CANCELLED instead of
 * the status we sent (measured: 5 of 60 grpcio deadline calls with CANCEL, 0 of 200 with NO_ERROR). */
void echod_conn_close_call(echod_call_t *call, int code, const char *message, const char *timing)
{
    echod_conn_t *conn = call->conn;
    if (conn->closed || call->io.closed || call->io.trailers_queued)
        return;
    call->io.trailers_queued = 1;
    call->io.status_code = code;
    call->io.status_message = message != NULL ? strdup(message) : NULL;
    call->io.timing = timing != NULL && timing[0] != '\0' ? timing : NULL;
    if (!call->io.headers_sent) {
        call->io.headers_sent = 1;
        submit_headers(call, 0); /* Trailers-Only */
    } else if (call->io.data_deferred) {
        call->io.data_deferred = 0;
        nghttp2_session_resume_data(conn->ngh, call->io.stream_id);
    }
    mark_dirty(conn);
    if (call->server->cfg->transport.flush == ECHOD_FLUSH_IMMEDIATE) {
        if (conn->processing || conn->in_recv)
            conn->immediate_due = 1;
        else
            echod_conn_flush(conn, ECHOD_FLUSH_TRIGGER_IMMEDIATE);
    }
}

void echod_conn_consume(echod_call_t *call, size_t n)
{
    echod_conn_t *conn = call->conn;
    if (conn->closed || n == 0)
        return;
    nghttp2_session_consume(conn->ngh, call->io.stream_id, n);
    mark_dirty(conn);
}

static void on_deadline(h2o_timeout_entry_t *entry)
{
    echod_call_t *call = H2O_STRUCT_FROM_MEMBER(echod_call_t, io.deadline, entry);
    echod_conn_t *conn = call->conn;
    if (call->io.trailers_queued || call->io.closed)
        return;
    call->io.expired = 1;
    if (!atomic_load_explicit(&call->handler_started, memory_order_acquire))
        ECHOD_COUNT(echod_metrics.deadline_expired_queued);
    echod_call_cancel(call);
    echod_conn_close_call(call, ECHOD_DEADLINE_EXCEEDED, "Deadline exceeded", NULL);
    conn_process(conn);
}

/* --- receiving: nghttp2 callbacks record and touch, nothing more --- */

/*
 * RFC 9113 5.1.1: a HEADERS frame on a client stream id that was skipped (below the highest one
 * used, never opened) is a connection error PROTOCOL_ERROR. nghttp2 ignores it, as it ignores
 * frames on the closed streams it forgot (no_closed_streams); the failure makes
 * nghttp2_session_mem_recv fail, and on_read_held sends GOAWAY(PROTOCOL_ERROR).
 */
static int on_begin_frame(nghttp2_session *session, const nghttp2_frame_hd *hd, void *user_data)
{
    (void)session;
    echod_conn_t *conn = user_data;
    if (hd->type != NGHTTP2_HEADERS || (hd->stream_id & 1) == 0)
        return 0;
    if (echod_stream_ids_headers(&conn->stream_ids, hd->stream_id) != ECHOD_STREAM_ID_SKIPPED)
        return 0;
    echod_debug("connection: HEADERS on stream %d, skipped below %d", hd->stream_id, conn->stream_ids.last);
    return NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    echod_conn_t *conn = user_data;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    echod_call_t *call = echod_call_new(conn->loop->server, conn->loop, conn, frame->hd.stream_id);
    if (call == NULL)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    atomic_fetch_add_explicit(&conn->refs, 1, memory_order_relaxed);
    call->io.deadline.cb = on_deadline;
    call->io.in_conn = 1;
    call->io.next_in_conn = conn->calls;
    if (conn->calls != NULL)
        conn->calls->io.prev_in_conn = call;
    conn->calls = call;
    conn->header_bytes = 0;
    update_idle(conn);
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, call);
    return 0;
}

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

static void keep_metadata(echod_call_t *call, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen)
{
    size_t need = call->io.hdr.meta_len + nlen + vlen + 2;
    char *m = realloc(call->io.hdr.meta, need);
    if (m == NULL)
        return;
    memcpy(m + call->io.hdr.meta_len, name, nlen);
    m[call->io.hdr.meta_len + nlen] = '\0';
    memcpy(m + call->io.hdr.meta_len + nlen + 1, value, vlen);
    m[need - 1] = '\0';
    call->io.hdr.meta = m;
    call->io.hdr.meta_len = need;
    call->io.hdr.meta_count++;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name, size_t namelen,
                     const uint8_t *value, size_t valuelen, uint8_t flags, void *user_data)
{
    (void)flags;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    echod_call_t *call = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (call == NULL)
        return 0;
    echod_conn_t *conn = user_data;
    /* RFC 9113's accounting: name + value + 32 per field */
    conn->header_bytes += namelen + valuelen + 32;
    if (conn->header_bytes > conn->loop->server->cfg->transport.max_header_list_bytes) {
        ECHOD_COUNT(echod_metrics.header_lists_too_large);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets this stream only */
    }
    if (header_is(name, namelen, ":method")) {
        call->io.hdr.method_seen = 1;
        call->io.hdr.is_post = header_is(value, valuelen, "POST");
    } else if (header_is(name, namelen, ":path")) {
        free(call->io.path);
        call->io.path = strndup((const char *)value, valuelen);
        call->io.path_len = valuelen;
    } else if (header_is(name, namelen, "content-type")) {
        call->io.hdr.ct_seen = 1;
        call->io.hdr.ct_ok = content_type_ok(value, valuelen);
    } else if (header_is(name, namelen, "grpc-encoding")) {
        call->io.hdr.enc_seen = 1;
        call->io.hdr.enc_unsupported = echod_encoding_parse((const char *)value, valuelen, &call->io.hdr.encoding) != 0;
    } else if (header_is(name, namelen, "grpc-accept-encoding")) {
        call->io.hdr.enc_seen = 1;
        call->io.hdr.accept = echod_encoding_accept_parse((const char *)value, valuelen);
    } else if (header_is(name, namelen, "grpc-timeout")) {
        if (echod_grpc_timeout_parse((const char *)value, valuelen, &call->io.hdr.timeout_ns) != 0)
            call->io.hdr.timeout_bad = 1;
    } else if (header_is(name, namelen, "echod-stage")) {
        /* a load generator names its ramp stage per call: the loop's copy keeps the lock off the
         * path until the name changes; the metrics decide whether it is valid and new */
        echod_loop_t *loop = conn->loop;
        if (valuelen != 0 && valuelen < sizeof(loop->stage) &&
            (valuelen != strlen(loop->stage) || memcmp(loop->stage, value, valuelen) != 0)) {
            memcpy(loop->stage, value, valuelen);
            loop->stage[valuelen] = '\0';
            echod_metrics_enter_stage(loop->stage, valuelen);
        }
    } else if (echod_work_parse_header((const char *)name, namelen, (const char *)value, valuelen, &call->io.hdr.work,
                                       &call->io.hdr.work_set, &call->io.hdr.work_error)) {
        /* a work knob: also echoed with the rest of the metadata */
        keep_metadata(call, name, namelen, value, valuelen);
    } else if (name[0] != ':' && !is_reserved_header(name, namelen)) {
        keep_metadata(call, name, namelen, value, valuelen);
    }
    return 0;
}

static void reject_http(echod_call_t *call, const char *status, const char *message)
{
    echod_conn_t *conn = call->conn;
    nghttp2_nv nv[] = {NV(":status", status), NV("content-type", "text/plain; charset=utf-8"),
                       NV("grpc-status", status_code_str(ECHOD_INTERNAL)), NV("grpc-message", message)};
    call->io.rejected = 1;
    call->io.headers_sent = 1;
    call->io.trailers_queued = 1;
    call->io.status_code = ECHOD_INTERNAL;
    nghttp2_submit_response(conn->ngh, call->io.stream_id, nv, sizeof(nv) / sizeof(nv[0]), NULL);
}

/* HEADERS is complete: HTTP-level checks happen here, before the call has any step. */
static void request_headers_done(echod_call_t *call)
{
    echod_conn_t *conn = call->conn;
    if (!call->io.hdr.is_post) {
        reject_http(call, "405", "Method not allowed: gRPC requires POST");
        return;
    }
    if (!call->io.hdr.ct_ok) {
        reject_http(call, "415", "Unsupported content-type: gRPC requires application/grpc");
        return;
    }
    if (call->io.hdr.enc_unsupported) {
        static const nghttp2_nv accept = NV("grpc-accept-encoding", ECHOD_ACCEPT_ENCODING);
        nghttp2_nv nv[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                           NV("grpc-status", status_code_str(ECHOD_UNIMPLEMENTED)),
                           NV("grpc-message", "Unsupported grpc-encoding: supported are " ECHOD_ACCEPT_ENCODING),
                           accept};
        call->io.rejected = 1;
        call->io.headers_sent = 1;
        call->io.trailers_queued = 1;
        call->io.status_code = ECHOD_UNIMPLEMENTED;
        nghttp2_submit_response(conn->ngh, call->io.stream_id, nv, sizeof(nv) / sizeof(nv[0]), NULL);
        return;
    }
    /* grpc-encoding: compressed messages pass the deframer, and the messages step inflates them */
    call->in_encoding = call->io.hdr.encoding;
    call->out_encoding = echod_encoding_respond(conn->loop->server->cfg->transport.compression.respond,
                                                call->in_encoding, call->io.hdr.accept);
    call->io.deframer.allow_compressed = call->in_encoding != ECHOD_ENCODING_IDENTITY;
    if (call->io.path == NULL) {
        call->io.path = strdup("");
        call->io.path_len = 0;
    }
    echod_server_t *server = conn->loop->server;
    const echod_method_t *m = echod_registry_find(&server->registry, call->io.path, call->io.path_len);
    if (m != NULL && m->on_loop) {
        /* before any step: the call switches to the inline runner on this loop */
        echod_serializer_init(&call->serializer, server->dispatcher.exec, server->dispatcher.exec_metrics,
                              ECHOD_SER_INLINE);
    } else {
        uint32_t limit = server->cfg->limits.max_calls_in_flight;
        if (limit != 0 && atomic_load_explicit(&echod_metrics.calls_admitted, memory_order_relaxed) >= limit) {
            ECHOD_COUNT(echod_metrics.calls_shed);
            if (m != NULL) {
                /* as a load-shedding interceptor would: started and handled, never run */
                ECHOD_COUNT(echod_metrics.methods[m->metrics_index].started);
                ECHOD_COUNT(echod_metrics.methods[m->metrics_index].handled[ECHOD_RESOURCE_EXHAUSTED]);
            }
            call->io.started = 1; /* shed before any step: nothing was accepted */
            call->io.rejected = 1;
            echod_conn_close_call(call, ECHOD_RESOURCE_EXHAUSTED, "Server at limits.max_calls_in_flight", NULL);
            return;
        }
        call->admitted = 1;
        echod_metrics_add_admitted(1);
    }
    if (server->cfg->work.allow_metadata_overrides) {
        call->work_error = call->io.hdr.work_error;
        call->io.hdr.work_error = NULL;
    }
    echod_work_resolve(server->cfg, call->io.path, &call->io.hdr.work, call->io.hdr.work_set, &call->work,
                       &call->work_error);
    if (call->io.hdr.timeout_bad) {
        call->io.started = 1; /* no steps: the request never reached a method */
        call->io.rejected = 1;
        echod_conn_close_call(call, ECHOD_INTERNAL, "Malformed grpc-timeout header", NULL);
        return;
    }
    if (call->io.hdr.timeout_ns != 0) {
        uint64_t ms = (call->io.hdr.timeout_ns + 999999) / 1000000;
        uint64_t now = h2o_now(conn->loop->evloop);
        call->io.deadline_ms = ms > UINT64_MAX - now ? UINT64_MAX : now + ms;
        echod_loop_link_deadline(conn->loop, &call->io.deadline, call->io.deadline_ms);
    }
    touch(call);
}

/*
 * transport.max_resets_per_second as a token bucket (burst = one second's worth). nghttp2's own
 * limiter answers with GOAWAY(INTERNAL_ERROR) and leaves the connection open; this one terminates
 * it with ENHANCE_YOUR_CALM, as the config promises. True when the peer is over the rate.
 */
static int reset_flood(echod_conn_t *conn)
{
    uint64_t rate = conn->loop->server->cfg->transport.max_resets_per_second, now = h2o_now(conn->loop->evloop);
    if (rate == 0)
        return 0;
    uint64_t budget = conn->reset_budget + (now - conn->reset_budget_ms) * rate, cap = rate * 1000;
    conn->reset_budget = budget < cap ? budget : cap;
    conn->reset_budget_ms = now;
    if (conn->reset_budget < 1000)
        return 1;
    conn->reset_budget -= 1000;
    return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    echod_conn_t *conn = user_data;
    if (!conn->established) {
        /* the preface and a first frame arrived: the handshake timer gives way to the idle one */
        conn->established = 1;
        h2o_timeout_unlink(&conn->guard_entry);
        if (conn->goaway_notice)
            arm_guard_deadline(conn);
        else
            update_idle(conn);
    }
    if (frame->hd.type == NGHTTP2_PING && (frame->hd.flags & NGHTTP2_FLAG_ACK) && conn->goaway_notice &&
        memcmp(frame->ping.opaque_data, goaway_ping, sizeof(goaway_ping)) == 0) {
        final_goaway(conn);
        return 0;
    }
    if (frame->hd.type == NGHTTP2_RST_STREAM && reset_flood(conn)) {
        echod_debug("connection: over transport.max_resets_per_second, closing");
        terminate(conn, NGHTTP2_ENHANCE_YOUR_CALM, ECHOD_CLOSE_RESET_FLOOD); /* the rest of the input is ignored */
        return 0;
    }
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
        return 0;
    echod_call_t *call = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (call == NULL)
        return 0;
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
        call->io.end_stream = 1;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
        request_headers_done(call);
        return 0;
    }
    if (!call->io.rejected)
        touch(call);
    return 0;
}

static int on_data_chunk_recv(nghttp2_session *session, uint8_t flags, int32_t stream_id, const uint8_t *data,
                              size_t len, void *user_data)
{
    (void)flags;
    (void)user_data;
    echod_call_t *call = nghttp2_session_get_stream_user_data(session, stream_id);
    if (call == NULL || call->io.rejected || call->io.deframe_failed || call->io.trailers_queued) {
        nghttp2_session_consume(session, stream_id, len);
        return 0;
    }
    echod_deframer_t *d = &call->io.deframer;
    if (echod_deframer_feed(d, data, len) != ECHOD_DEFRAME_OK) {
        call->io.deframe_failed = 1;
        nghttp2_session_consume(session, stream_id, len + call->io.held_bytes);
        call->io.held_bytes = 0;
        touch(call);
        return 0;
    }
    /* bytes return to the window as messages are delivered: a slow handler back-pressures */
    if (d->count == 0) {
        nghttp2_session_consume(session, stream_id, len + call->io.held_bytes);
        call->io.held_bytes = 0;
    } else {
        call->io.held_bytes += len;
        touch(call);
    }
    return 0;
}

static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    echod_conn_t *conn = user_data;
    conn->frames++;
    /* nghttp2 refuses a stream above the max_concurrent_streams we advertised from the start
     * (before the peer acks our SETTINGS), without a callback: its RST_STREAM is what counts */
    if (frame->hd.type == NGHTTP2_RST_STREAM && frame->rst_stream.error_code == NGHTTP2_REFUSED_STREAM)
        ECHOD_COUNT(echod_metrics.streams_refused);
    if (frame->hd.type == NGHTTP2_GOAWAY) {
        ECHOD_COUNT(echod_metrics.goaways_sent);
        if (frame->goaway.last_stream_id == INT32_MAX && !conn->goaway_final)
            nghttp2_submit_ping(session, NGHTTP2_FLAG_NONE, goaway_ping);
    }
    if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    echod_call_t *call = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (call == NULL)
        return 0;
    call->io.trailers_sent = 1;
    /* a server that ends before the client did resets the rest of the stream (see echod_conn_close_call) */
    if (!call->io.end_stream)
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code, void *user_data)
{
    (void)error_code;
    (void)user_data;
    echod_call_t *call = nghttp2_session_get_stream_user_data(session, stream_id);
    if (call == NULL)
        return 0;
    nghttp2_session_set_stream_user_data(session, stream_id, NULL);
    stream_closed(call);
    return 0;
}

static ssize_t send_cb(nghttp2_session *session, const uint8_t *data, size_t length, int flags, void *user_data)
{
    (void)session;
    (void)flags;
    echod_conn_t *conn = user_data;
    if (bytes_append(&conn->out, data, length) != 0)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    return (ssize_t)length;
}

/* --- connection lifecycle --- */

static void on_read_held(echod_conn_t *conn, h2o_socket_t *sock, const char *err);

/* Any flush can close the connection: callbacks hold a reference for as long as they use it. */
static void on_read(h2o_socket_t *sock, const char *err)
{
    echod_conn_t *conn = sock->data;
    conn_hold(conn);
    on_read_held(conn, sock, err);
    echod_conn_release(conn);
}

static void on_read_held(echod_conn_t *conn, h2o_socket_t *sock, const char *err)
{
    if (err != NULL) {
        conn_close(conn);
        return;
    }
    conn->in_recv = 1;
    ssize_t rv = nghttp2_session_mem_recv(conn->ngh, (const uint8_t *)sock->input->bytes, sock->input->size);
    conn->in_recv = 0;
    if (rv < 0) {
        /* Send the GOAWAY, then close. nghttp2 queues one for protocol errors (terminating again keeps
         * it); not for a bad preface or FLOODED (SETTINGS/PING acks piling up), where a session still
         * wanting to read would keep this read-stopped connection open forever. */
        echod_debug("connection: nghttp2_session_mem_recv: %s", nghttp2_strerror((int)rv));
        int flood = rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS;
        terminate(conn, flood ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR,
                  flood ? ECHOD_CLOSE_FLOOD : ECHOD_CLOSE_PROTOCOL_ERROR);
        h2o_buffer_consume(&sock->input, sock->input->size);
        h2o_socket_read_stop(sock);
        echod_conn_flush(conn, ECHOD_FLUSH_TRIGGER_READ_COMPLETE);
        return;
    }
    h2o_buffer_consume(&sock->input, (size_t)rv);
    conn_process(conn);
    if (conn->closed)
        return;
    if (conn->loop->server->cfg->transport.flush == ECHOD_FLUSH_READ_COMPLETE)
        echod_conn_flush(conn, ECHOD_FLUSH_TRIGGER_READ_COMPLETE);
    if (!conn->closed && nghttp2_session_want_write(conn->ngh))
        mark_dirty(conn);
    if (!conn->closed)
        maybe_close(conn);
}

static void conn_close(echod_conn_t *conn)
{
    if (conn->closed)
        return;
    conn->closed = 1;
    h2o_timeout_unlink(&conn->tail_entry);
    h2o_timeout_unlink(&conn->guard_entry);
    h2o_timeout_unlink(&conn->age_entry);
    /* nghttp2_session_del does not report stream closes: cancel every call ourselves */
    while (conn->calls != NULL)
        stream_closed(conn->calls);
    conn_process(conn);
    nghttp2_session_del(conn->ngh);
    conn->ngh = NULL;
    h2o_linklist_unlink(&conn->link);
    h2o_socket_close(conn->sock);
    conn->sock = NULL;
    atomic_fetch_sub_explicit(&echod_metrics.connections, 1, memory_order_relaxed);
    echod_conn_release(conn);
}

void echod_conn_abort(echod_conn_t *conn)
{
    conn_close(conn);
}

static void final_goaway(echod_conn_t *conn)
{
    if (conn->goaway_final)
        return;
    conn->goaway_final = 1;
    nghttp2_submit_goaway(conn->ngh, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(conn->ngh),
                          NGHTTP2_NO_ERROR, NULL, 0);
}

/*
 * The double GOAWAY of gRPC servers: a notice with stream id 2^31-1 makes the client stop opening
 * streams without refusing any in flight; the final GOAWAY, naming the last stream processed,
 * goes out when the PING sent with the notice comes back, i.e. once the client has seen it.
 */
void echod_conn_goaway(echod_conn_t *conn)
{
    if (conn->closed || conn->goaway_notice)
        return;
    if (conn->ngh == NULL) {
        /* still in the TLS handshake: no session to say GOAWAY with, and no call to wait for */
        conn_close(conn);
        return;
    }
    conn->goaway_notice = 1;
    /* the PING follows once the notice is on the wire (on_frame_send): nghttp2 would otherwise
     * send it first, and its ack would prove nothing about the notice */
    nghttp2_submit_shutdown_notice(conn->ngh);
    if (conn->established) /* else the handshake timer still runs, and closes it */
        arm_guard_deadline(conn);
    echod_conn_flush(conn, ECHOD_FLUSH_TRIGGER_LOOP_TAIL);
}

size_t echod_conn_begin_drain(echod_conn_t *conn)
{
    size_t open = 0;
    for (echod_call_t *call = conn->calls; call != NULL; call = call->io.next_in_conn) {
        if (!call->io.rejected && !call->io.trailers_queued) {
            call->io.drain_open = 1;
            open++;
        }
    }
    echod_conn_goaway(conn);
    return open;
}

void echod_conn_cut(echod_conn_t *conn)
{
    if (conn->closed)
        return;
    if (conn->ngh == NULL) {
        conn_close(conn);
        return;
    }
    for (echod_call_t *call = conn->calls; call != NULL; call = call->io.next_in_conn) {
        if (call->io.rejected || call->io.trailers_queued)
            continue;
        call->io.drain_cut = 1;
        if (call->io.drain_open) /* a max_connection_age grace cut is not a drain cut */
            ECHOD_COUNT(echod_metrics.drain_streams_cut);
        echod_call_cancel(call);
        echod_conn_close_call(call, ECHOD_UNAVAILABLE, "Server shutting down: shutdown.drain_timeout passed", NULL);
    }
    final_goaway(conn);
    echod_conn_flush(conn, ECHOD_FLUSH_TRIGGER_LOOP_TAIL);
}

/* nghttp2's allocator: the loop's pool (a session lives on its loop thread only) */
static void *pool_malloc(size_t size, void *pool)
{
    return echod_pool_malloc(pool, size);
}

static void pool_free(void *ptr, void *pool)
{
    echod_pool_free(pool, ptr);
}

static void *pool_calloc(size_t n, size_t size, void *pool)
{
    return echod_pool_calloc(pool, n, size);
}

static void *pool_realloc(void *ptr, size_t size, void *pool)
{
    return echod_pool_realloc(pool, ptr, size);
}

static int session_start(echod_conn_t *conn)
{
    const echod_config_t *cfg = conn->loop->server->cfg;
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return -1;
    nghttp2_session_callbacks_set_send_callback(cbs, send_cb);
    nghttp2_session_callbacks_set_send_data_callback(cbs, send_data_cb);
    nghttp2_session_callbacks_set_on_begin_frame_callback(cbs, on_begin_frame);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data_chunk_recv);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_option_new(&opt);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    /* CVE-2023-44487: a peer resetting streams faster than this gets GOAWAY(ENHANCE_YOUR_CALM) */
    /* reset_flood() enforces the rate; nghttp2's own limiter stays as a backstop at twice it */
    uint64_t resets =
        cfg->transport.max_resets_per_second != 0 ? 2 * (uint64_t)cfg->transport.max_resets_per_second : UINT32_MAX;
    nghttp2_option_set_stream_reset_rate_limit(opt, resets, resets);
    nghttp2_option_set_max_continuations(opt, 8);
    /* closed streams are kept only to anchor RFC 7540 priorities, which gRPC clients do not send
     * (RFC 9113 drops them): -200 instructions per unary call, and up to max_concurrent_streams
     * kept streams (~350 bytes each) per connection; frames on a closed stream are then ignored,
     * not answered STREAM_CLOSED (docs/http2-conformance.md has the figures) */
    nghttp2_option_set_no_closed_streams(opt, 1);
    nghttp2_mem mem = {&conn->loop->pool, pool_malloc, pool_free, pool_calloc, pool_realloc};
    int rv = nghttp2_session_server_new3(&conn->ngh, cbs, conn, opt, &mem);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    if (rv != 0)
        return -1;
    conn->reset_budget = (uint64_t)cfg->transport.max_resets_per_second * 1000;
    conn->reset_budget_ms = h2o_now(conn->loop->evloop);
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, cfg->transport.max_concurrent_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, cfg->transport.initial_window_bytes},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, cfg->transport.max_header_list_bytes},
    };
    nghttp2_submit_settings(conn->ngh, NGHTTP2_FLAG_NONE, settings, 3);
    /* grpc-java's flowControlWindow applies to the connection as well as each stream */
    nghttp2_session_set_local_window_size(conn->ngh, NGHTTP2_FLAG_NONE, 0,
                                          (int32_t)cfg->transport.initial_window_bytes);
    return 0;
}

static void conn_start(echod_conn_t *conn)
{
    if (session_start(conn) != 0) {
        conn_close(conn);
        return;
    }
    start_age(conn);
    h2o_socket_read_start(conn->sock, on_read);
    mark_dirty(conn); /* our SETTINGS */
    if (conn->sock->input->size != 0)
        on_read(conn->sock, NULL);
}

static void on_handshake(h2o_socket_t *sock, const char *err)
{
    echod_conn_t *conn = sock->data;
    if (err != NULL) {
        echod_debug("connection: TLS handshake failed: %s", err);
        conn_close(conn);
        return;
    }
    h2o_iovec_t proto = h2o_socket_ssl_get_selected_protocol(sock);
    if (!(proto.len == 2 && memcmp(proto.base, "h2", 2) == 0)) {
        /* the handshake succeeds without ALPN h2, but gRPC needs HTTP/2 */
        echod_debug("connection: TLS client did not negotiate ALPN h2");
        conn_close(conn);
        return;
    }
    conn_start(conn);
}

void echod_conn_accept(echod_loop_t *loop, h2o_socket_t *sock)
{
    echod_conn_t *conn = calloc(1, sizeof(*conn));
    if (conn == NULL) {
        h2o_socket_close(sock);
        return;
    }
    uint32_t max = loop->server->cfg->limits.max_connections;
    if (max != 0 && atomic_load_explicit(&echod_metrics.connections, memory_order_relaxed) >= (int64_t)max) {
        ECHOD_COUNT(echod_metrics.connections_closed[ECHOD_CLOSE_LIMIT]);
        h2o_socket_close(sock);
        free(conn);
        return;
    }
    int one = 1;
    setsockopt(h2o_socket_get_fd(sock), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    conn->loop = loop;
    conn->sock = sock;
    sock->data = conn;
    atomic_init(&conn->refs, 1);
    conn->tail_entry.cb = on_tail;
    conn->guard_entry.cb = on_guard;
    conn->age_entry.cb = on_age;
    if (loop->server->cfg->transport.handshake_timeout_ms != 0)
        h2o_timeout_link(loop->evloop, &loop->handshake, &conn->guard_entry);
    h2o_linklist_insert(&loop->conns, &conn->link);
    atomic_fetch_add_explicit(&echod_metrics.connections, 1, memory_order_relaxed); /* shared: the limit reads it */
    ECHOD_COUNT(echod_metrics.connections_total);
    if (loop->server->ssl_ctx != NULL)
        h2o_socket_ssl_handshake(sock, loop->server->ssl_ctx, NULL, on_handshake);
    else
        conn_start(conn);
}
