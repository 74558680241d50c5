#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <nghttp2/nghttp2.h>
#include "metrics/metrics.h"
#include "transport/conn_internal.h"
#include "transport/frame_scan.h"
#include "transport/stream.h"
#include "transport/stream_ids.h"
#include "util/clock.h"
#include "util/err.h"
#include "util/limit.h"
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
    echod_stream_t *streams; /* open ones */
    echod_stream_t *touched_head, *touched_tail;
    bytes_t out;     /* frames nghttp2 produced, not yet handed to the socket */
    bytes_t writing; /* the bytes of the one outstanding h2o_socket_write */
    bytes_t pings;   /* transport.flow_control_pings: PING frames for the end of this read (write_pings) */
    h2o_timeout_entry_t tail_entry;
    h2o_timeout_entry_t guard_entry;        /* handshake, then idle timeout */
    h2o_timeout_entry_t age_entry;          /* max_connection_age, then its grace */
    uint64_t reset_budget, reset_budget_ms; /* RST_STREAMs the peer may still send, in 1/1000ths; refilled then */
    echod_conn_t *next_batch_dirty;
    echod_conn_t *next_read;       /* io.read_batch netty: loop->reads_run, then the read batch */
    h2o_linklist_t batch_link;     /* io.read_batch netty: loop->last_batch, in the order it was served */
    const char *read_err;          /* ... and the error its read callback brought, if any */
    size_t frames;                 /* sent since the last counted flush */
    echod_frame_scan_t scan;       /* where the client's frames begin (recv_frames) */
    echod_stream_ids_t stream_ids; /* which client stream ids are closed, and how (RFC 9113 5.1) */
    unsigned in_recv : 1, processing : 1, closed : 1, goaway_notice : 1, goaway_final : 1, immediate_due : 1,
        batch_dirty : 1, established : 1, aged : 1, terminated : 1, read_queued : 1, flow_pings : 1, flow_pinging : 1,
        placed : 1;
};

static void conn_close(echod_conn_t *conn);
static void final_goaway(echod_conn_t *conn);

/* The PING sent with the GOAWAY notice; its ack triggers the final GOAWAY. */
static const uint8_t goaway_ping[8] = {'e', 'c', 'h', 'o', 'd', 'g', 'o', 'a'};
/* The PING sent after RST_STREAMs: its ack says the client has read them (transport/stream_ids.h). */
static const uint8_t reset_ping[8] = {'e', 'c', 'h', 'o', 'd', 'r', 's', 't'};
/* transport.flow_control_pings: the PING grpc-java's flow control sends on a DATA frame, one at a time */
static const uint8_t flow_ping[8] = {'e', 'c', 'h', 'o', 'd', 'b', 'd', 'p'};
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
        free(conn->pings.data);
        free(conn);
    }
}

/* n more bytes at the end of b, to be written by the caller */
static uint8_t *bytes_reserve(bytes_t *b, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap < 16384 ? 16384 : b->cap;
        while (cap < b->len + n)
            cap *= 2;
        b->data = echod_must(realloc(b->data, cap), "connection output");
        b->cap = cap;
    }
    b->len += n;
    return b->data + b->len - n;
}

/* --- flushing (docs/dispatch-model.md, section 6) --- */

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

/*
 * transport.flow_control_pings, as grpc-java's Netty handler: its flow control sends a PING on a
 * DATA frame when none is unacked (AbstractNettyHandler.FlowControlPinger), and Netty flushes
 * the connection at the end of its read (Http2ConnectionHandler.channelReadComplete), acks of the
 * client's PINGs included, while the responses wait in gRPC's WriteQueue for its flush task. So
 * the client's ack and its next PING arrive while the loop's batch still runs, and the connection
 * is ready at the next wait, where Netty reads it at its turn with whatever call its client has
 * sent since (docs/work-model.md, "The capped ramp's tail"). echod writes these frames itself,
 * at the end of the connection's read and before its calls run, as the PING is flushed before
 * the handler runs under directExecutor; what nghttp2 queued is not touched.
 */
static void put_ping(echod_conn_t *conn, uint8_t flags, const uint8_t opaque[8])
{
    uint8_t *f = bytes_reserve(&conn->pings, 17);
    const uint8_t hd[9] = {0, 0, 8, NGHTTP2_PING, flags, 0, 0, 0, 0};
    memcpy(f, hd, sizeof(hd));
    memcpy(f + 9, opaque, 8);
}

static void write_pings(echod_conn_t *conn)
{
    bytes_t *p = &conn->pings;
    if (p->len == 0 || conn->closed)
        return;
    size_t done = 0;
    /* between whole frames: nothing produced is waiting, so the PINGs may go ahead of it */
    if (conn->sock->ssl == NULL && !h2o_socket_is_writing(conn->sock) && conn->out.len == 0) {
        ssize_t n;
        while ((n = write(h2o_socket_get_fd(conn->sock), p->data, p->len)) == -1 && errno == EINTR)
            ;
        if (n > 0)
            done = (size_t)n;
    }
    if (done != p->len) { /* TLS, a write under way, or a full socket: after what is queued */
        memcpy(bytes_reserve(&conn->out, p->len - done), p->data + done, p->len - done);
        start_write(conn);
    }
    p->len = 0;
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
    } else if (h2o_timeout_is_linked(&conn->tail_entry) || conn->batch_dirty) {
        start_write(conn); /* what nghttp2 holds goes with the flush already due, and counts there */
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

/* Idle means no open stream: the timer runs only while conn->streams is empty. */
static void update_idle(echod_conn_t *conn)
{
    uint64_t idle = conn->loop->server->cfg->transport.idle_timeout_ms;
    if (idle == 0 || !conn->established || conn->closed || conn->goaway_notice || conn->terminated)
        return;
    if (conn->streams == NULL && !h2o_timeout_is_linked(&conn->guard_entry))
        h2o_timeout_link(conn->loop->evloop, &conn->loop->idle, &conn->guard_entry);
    else if (conn->streams != NULL)
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

/* --- streams: touched list and bookkeeping --- */

static inline void touch(echod_conn_t *conn, echod_stream_t *s)
{
    if (s->touched)
        return;
    s->touched = 1;
    echod_call_retain(&s->call);
    s->next_touched = NULL;
    if (conn->touched_tail != NULL)
        conn->touched_tail->next_touched = s;
    else
        conn->touched_head = s;
    conn->touched_tail = s;
}

void echod_conn__touch(echod_conn_t *conn, echod_stream_t *s)
{
    touch(conn, s);
}

static void conn_process(echod_conn_t *conn)
{
    if (conn->processing)
        return;
    conn->processing = 1;
    echod_stream_t *s;
    while ((s = conn->touched_head) != NULL) {
        conn->touched_head = s->next_touched;
        if (conn->touched_head == NULL)
            conn->touched_tail = NULL;
        s->touched = 0;
        echod_stream_pump(s);
        echod_call_release(&s->call);
        if (conn->immediate_due) {
            conn->immediate_due = 0;
            conn->processing = 0;
            echod_conn_flush(conn, ECHOD_FLUSH_TRIGGER_IMMEDIATE);
            conn->processing = 1;
        }
    }
    conn->processing = 0;
}

/* The stream is gone (trailers sent and peer done, reset, or connection lost). */
static void stream_gone(echod_stream_t *s)
{
    echod_conn_t *conn = s->conn;
    echod_stream_closed(s);
    if (s->prev_in_conn != NULL)
        s->prev_in_conn->next_in_conn = s->next_in_conn;
    else
        conn->streams = s->next_in_conn;
    if (s->next_in_conn != NULL)
        s->next_in_conn->prev_in_conn = s->prev_in_conn;
    update_idle(conn);
    touch(conn, s);
    echod_call_release(&s->call); /* the transport's reference */
}

/* --- what a stream uses of its connection --- */

echod_loop_t *echod_conn__loop(echod_conn_t *conn)
{
    return conn->loop;
}

nghttp2_session *echod_conn__session(echod_conn_t *conn)
{
    return conn->ngh;
}

int echod_conn__closed(const echod_conn_t *conn)
{
    return conn->closed;
}

void echod_conn__hold(echod_conn_t *conn)
{
    conn_hold(conn);
}

void echod_conn__dirty(echod_conn_t *conn)
{
    mark_dirty(conn);
}

void echod_conn__process(echod_conn_t *conn)
{
    conn_process(conn);
}

void echod_conn__flush_immediate(echod_conn_t *conn)
{
    if (conn->processing || conn->in_recv)
        conn->immediate_due = 1;
    else
        echod_conn_flush(conn, ECHOD_FLUSH_TRIGGER_IMMEDIATE);
}

void echod_conn__consume(echod_conn_t *conn, int32_t stream_id, size_t n)
{
    if (conn->closed || n == 0)
        return;
    nghttp2_session_consume(conn->ngh, stream_id, n);
    mark_dirty(conn);
}

/* --- nghttp2 callbacks: record and touch, nothing more --- */

static int send_data_cb(nghttp2_session *session, nghttp2_frame *frame, const uint8_t *framehd, size_t length,
                        nghttp2_data_source *source, void *user_data)
{
    (void)session;
    (void)frame;
    echod_conn_t *conn = user_data;
    uint8_t *dst = bytes_reserve(&conn->out, 9 + length);
    memcpy(dst, framehd, 9);
    echod_stream_copy_data(source->ptr, dst + 9, length);
    return 0;
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    echod_conn_t *conn = user_data;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    echod_stream_t *s = echod_stream_new(conn, frame->hd.stream_id);
    s->next_in_conn = conn->streams;
    if (conn->streams != NULL)
        conn->streams->prev_in_conn = s;
    conn->streams = s;
    update_idle(conn);
    nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, s);
    return 0;
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
    if (frame->hd.type == NGHTTP2_PING && conn->flow_pings) {
        if (!(frame->hd.flags & NGHTTP2_FLAG_ACK)) { /* nghttp2 does not ack them (session_start) */
            put_ping(conn, NGHTTP2_FLAG_ACK, frame->ping.opaque_data);
            ECHOD_COUNT(echod_metrics.pings_acked_at_read);
            return 0;
        }
        if (memcmp(frame->ping.opaque_data, flow_ping, sizeof(flow_ping)) == 0) {
            conn->flow_pinging = 0;
            return 0;
        }
    }
    if (frame->hd.type == NGHTTP2_DATA && conn->flow_pings && !conn->flow_pinging && !conn->goaway_notice) {
        conn->flow_pinging = 1;
        put_ping(conn, NGHTTP2_FLAG_NONE, flow_ping);
        ECHOD_COUNT(echod_metrics.flow_control_pings);
    }
    if (frame->hd.type == NGHTTP2_PING && (frame->hd.flags & NGHTTP2_FLAG_ACK) && conn->goaway_notice &&
        memcmp(frame->ping.opaque_data, goaway_ping, sizeof(goaway_ping)) == 0) {
        final_goaway(conn);
        return 0;
    }
    if (frame->hd.type == NGHTTP2_PING && (frame->hd.flags & NGHTTP2_FLAG_ACK) &&
        memcmp(frame->ping.opaque_data, reset_ping, sizeof(reset_ping)) == 0) {
        if (echod_stream_ids_ping_acked(&conn->stream_ids)) /* for the resets sent since the first */
            nghttp2_submit_ping(session, NGHTTP2_FLAG_NONE, reset_ping);
        return 0;
    }
    if (frame->hd.type == NGHTTP2_RST_STREAM && reset_flood(conn)) {
        echod_debug("connection: over transport.max_resets_per_second, closing");
        terminate(conn, NGHTTP2_ENHANCE_YOUR_CALM, ECHOD_CLOSE_RESET_FLOOD); /* the rest of the input is ignored */
        return 0;
    }
    if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA)
        return 0;
    echod_stream_t *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (s == NULL)
        return 0;
    if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
        echod_stream_end_received(s);
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
        echod_stream_headers_done(s);
        return 0;
    }
    if (s->steps != ECHOD_STEPS_REJECTED)
        touch(conn, s);
    return 0;
}

static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user_data)
{
    echod_conn_t *conn = user_data;
    conn->frames++;
    /* nghttp2 refuses a stream above the max_concurrent_streams we advertised from the start
     * (before the peer acks our SETTINGS), without a callback: its RST_STREAM is what counts */
    if (frame->hd.type == NGHTTP2_RST_STREAM) {
        if (frame->rst_stream.error_code == NGHTTP2_REFUSED_STREAM)
            ECHOD_COUNT(echod_metrics.streams_refused);
        /* nghttp2 closes the stream after this callback: it still says whether the client had ended it */
        nghttp2_stream *st = nghttp2_session_find_stream(session, frame->hd.stream_id);
        int client_ended = st != NULL && nghttp2_stream_get_state(st) == NGHTTP2_STREAM_STATE_HALF_CLOSED_REMOTE;
        if ((frame->hd.stream_id & 1) && !client_ended &&
            echod_stream_ids_reset_sent(&conn->stream_ids, frame->hd.stream_id))
            nghttp2_submit_ping(session, NGHTTP2_FLAG_NONE, reset_ping); /* after the reset, on the wire */
    }
    if (frame->hd.type == NGHTTP2_GOAWAY) {
        ECHOD_COUNT(echod_metrics.goaways_sent);
        echod_stream_ids_goaway_sent(&conn->stream_ids, frame->goaway.last_stream_id);
        if (frame->goaway.last_stream_id == INT32_MAX && !conn->goaway_final)
            nghttp2_submit_ping(session, NGHTTP2_FLAG_NONE, goaway_ping);
    }
    if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    echod_stream_t *s = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (s == NULL)
        return 0;
    /* a server that ends before the client did resets the rest of the stream (see echod_stream_close) */
    if (echod_stream_end_sent(s))
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code, void *user_data)
{
    (void)error_code;
    (void)user_data;
    echod_stream_t *s = nghttp2_session_get_stream_user_data(session, stream_id);
    if (s == NULL)
        return 0;
    nghttp2_session_set_stream_user_data(session, stream_id, NULL);
    stream_gone(s);
    return 0;
}

static ssize_t send_cb(nghttp2_session *session, const uint8_t *data, size_t length, int flags, void *user_data)
{
    (void)session;
    (void)flags;
    echod_conn_t *conn = user_data;
    uint8_t *dst = bytes_reserve(&conn->out, length);
    memcpy(dst, data, length);
    return (ssize_t)length;
}

/* --- connection lifecycle --- */

static void on_read_held(echod_conn_t *conn, h2o_socket_t *sock, const char *err);

/*
 * io.read_batch netty: h2o runs the read callbacks of one wait newest first (it stacks the ready
 * sockets in the order epoll reports them, which is the order they became ready, then pops
 * them); Netty's selector loop serves the same keys oldest first. So the callback only queues
 * the connection (its bytes stay in sock->input), at the front of loop->reads_run, which puts
 * the run's connections back in the order they became ready, and the loop serves the batch in
 * that order once every event is in (echod_conn_serve_reads). A connection read again before its
 * turn keeps its place; the batch holds a reference.
 */
static void queue_read(echod_conn_t *conn, const char *err)
{
    echod_loop_t *loop = conn->loop;
    if (err != NULL)
        conn->read_err = err;
    if (conn->read_queued)
        return;
    conn->read_queued = 1;
    conn_hold(conn);
    conn->next_read = loop->reads_run;
    loop->reads_run = conn;
    loop->reads_run_count++;
    echod_loop_reads_queued(loop);
}

size_t echod_conn_take_reads(echod_loop_t *loop)
{
    *loop->reads_tail = loop->reads_run;
    for (; *loop->reads_tail != NULL; loop->reads_tail = &(*loop->reads_tail)->next_read)
        ;
    size_t n = loop->reads_run_count;
    loop->reads_run = NULL;
    loop->reads_run_count = 0;
    return n;
}

/*
 * io.read_batch netty: Netty reads a channel when the loop comes to it (NioByteUnsafe.read: up to
 * 16 reads while each fills its buffer), so a connection served late in a batch also takes in
 * what its client sent while the connections before it ran their calls, and under directExecutor
 * a batch grows with its own length (docs/work-model.md, "Multiplexed clients"). h2o read every
 * socket at the wait, in its callback, so the turn reads again what the socket holds now. Not on
 * TLS: h2o decrypts in its own read path, which has no entry for this; a TLS connection is served
 * with the bytes of the wait. A read that finds the end or an error leaves it to h2o's next wait.
 */
#define TURN_READS_MAX 16

static void read_at_turn(echod_conn_t *conn)
{
    h2o_socket_t *sock = conn->sock;
    if (sock->ssl != NULL || !h2o_socket_is_reading(sock))
        return;
    int fd = h2o_socket_get_fd(sock);
    for (int i = 0; i != TURN_READS_MAX; ++i) {
        h2o_iovec_t buf = h2o_buffer_reserve(&sock->input, 4096);
        if (buf.base == NULL)
            echod_oom("connection input");
        ssize_t n;
        while ((n = read(fd, buf.base, buf.len)) == -1 && errno == EINTR)
            ;
        if (n <= 0)
            return;
        sock->input->size += (size_t)n;
        ECHOD_ADD(echod_metrics.turn_read_bytes, (uint64_t)n);
        if ((size_t)n != buf.len)
            return;
    }
}

/*
 * io.read_batch netty: the batch in the order Netty's selector would return it. Java's selector
 * takes every ready key in one epoll_wait (up to 1024 events), and a level-triggered epoll puts
 * each key it returns back on its ready list at once, so every connection of a batch stays there,
 * in the batch's order, until the next wait: the next batch serves the ones still ready in the
 * same order, then those that became ready since, in the order they did (seen on grpc-java's
 * event loop under the capped k6 ramp: consecutive batches in the same order). h2o takes 256
 * events a wait and reads each socket at it, so when a batch needs several waits, the later
 * waits drop the drained sockets of the earlier ones from epoll's list and they come back in
 * the order their next bytes arrive (docs/work-model.md, "The batch's order across h2o's
 * waits"). So the connections of the last batch go first, in its order (loop->last_batch), then
 * the others in the order epoll gave them; the result is the next batch's order.
 */
static void order_reads(echod_loop_t *loop)
{
    h2o_linklist_t order, *node, *next;
    echod_conn_t *conn, **prev = &loop->reads_head;
    h2o_linklist_init_anchor(&order);
    while ((conn = *prev) != NULL) {
        if (conn->closed) { /* by a timer of the waits that gathered the batch: nothing to serve */
            *prev = conn->next_read;
            conn->read_queued = 0;
            echod_conn_release(conn);
        } else {
            conn->placed = 1; /* in the batch, not yet in its order */
            prev = &conn->next_read;
        }
    }
    for (node = loop->last_batch.next; node != &loop->last_batch; node = next) {
        next = node->next;
        conn = H2O_STRUCT_FROM_MEMBER(echod_conn_t, batch_link, node);
        h2o_linklist_unlink(node);
        if (conn->placed) { /* still ready: it keeps its place */
            conn->placed = 0;
            h2o_linklist_insert(&order, node);
        }
    }
    for (conn = loop->reads_head; conn != NULL; conn = conn->next_read) {
        if (conn->placed) { /* ready since the last batch: after it, in epoll's order */
            conn->placed = 0;
            h2o_linklist_insert(&order, &conn->batch_link);
        }
    }
    h2o_linklist_insert_list(&loop->last_batch, &order);
    loop->reads_tail = &loop->reads_head;
    for (node = loop->last_batch.next; node != &loop->last_batch; node = node->next) {
        conn = H2O_STRUCT_FROM_MEMBER(echod_conn_t, batch_link, node);
        *loop->reads_tail = conn;
        loop->reads_tail = &conn->next_read;
    }
    *loop->reads_tail = NULL;
}

size_t echod_conn_serve_reads(echod_loop_t *loop)
{
    size_t served = 0;
    echod_conn_t *conn;
    order_reads(loop);
    while ((conn = loop->reads_head) != NULL) {
        if ((loop->reads_head = conn->next_read) == NULL)
            loop->reads_tail = &loop->reads_head;
        conn->read_queued = 0;
        const char *err = conn->read_err;
        conn->read_err = NULL;
        if (!conn->closed) { /* by a call served before it in the batch (order_reads took the others) */
            /* the first turn follows the wait with no call run between: nothing new to read */
            if (err == NULL && served != 0)
                read_at_turn(conn);
            on_read_held(conn, conn->sock, err);
            served++;
        }
        echod_conn_release(conn);
    }
    return served;
}

/* Any flush can close the connection: callbacks hold a reference for as long as they use it. */
static void on_read(h2o_socket_t *sock, const char *err)
{
    echod_conn_t *conn = sock->data;
    echod_loop_woken(conn->loop, ECHOD_LOOP_WAKE_IO);
    if (conn->loop->server->cfg->io.read_batch == ECHOD_READ_BATCH_NETTY) {
        queue_read(conn, err);
        return;
    }
    conn->loop->reads_run_count++;
    conn_hold(conn);
    on_read_held(conn, sock, err);
    echod_conn_release(conn);
}

/* nghttp2 has the client stream open (or half-closed): it keeps idle ones too, for PRIORITY */
static int client_stream_open(echod_conn_t *conn, int32_t id)
{
    nghttp2_stream *st = nghttp2_session_find_stream(conn->ngh, id);
    return st != NULL && nghttp2_stream_get_state(st) != NGHTTP2_STREAM_STATE_IDLE;
}

/*
 * nghttp2 reads the input, in chunks that end before each frame that may be on a closed stream
 * (transport/stream_ids.h): with the frames before it read, nghttp2's open streams say whether
 * it is, and if it is, echod answers it, which nghttp2 would not. Normal traffic is one chunk:
 * a stream's DATA follows its HEADERS, or nghttp2 has the stream open. Returns 0, a negative
 * nghttp2 error, or 1 when a frame on a closed stream ends the connection (*answer says how; the
 * input from that frame on is not read).
 */
static int recv_frames(echod_conn_t *conn, const uint8_t *in, size_t len, echod_closed_frame_t *answer)
{
    echod_stream_ids_t *ids = &conn->stream_ids;
    const uint8_t *fed = in, *p = in, *end = in + len;
    echod_stream_ids_fed(ids);
    while (p < end && !conn->terminated) { /* terminated by a callback (a reset flood): nghttp2 reads no more */
        echod_frame_hd_t hd;
        if (!echod_frame_scan(&conn->scan, &p, end, &hd))
            break;
        if (hd.in_block)
            continue;
        echod_frame_need_t need = echod_stream_ids_scan(ids, hd.type, hd.flags, hd.stream_id);
        if (need == ECHOD_FRAME_PASS || (need == ECHOD_FRAME_LOOKUP && client_stream_open(conn, hd.stream_id)))
            continue;
        /* the frames before it, up to its header's last byte: nghttp2 has not seen it yet */
        ssize_t rv = nghttp2_session_mem_recv(conn->ngh, fed, (size_t)(p - 1 - fed));
        if (rv < 0)
            return (int)rv;
        fed = p - 1;
        echod_stream_ids_restart(ids, hd.flags, hd.stream_id);
        if (conn->terminated || client_stream_open(conn, hd.stream_id))
            continue; /* open, or half-closed (remote): nghttp2's to answer (STREAM_CLOSED) */
        *answer = echod_stream_ids_closed(ids, hd.type, hd.stream_id);
        ECHOD_COUNT(echod_metrics.closed_stream_frames[*answer]);
        if (*answer != ECHOD_CLOSED_FRAME_DISCARDED) {
            echod_debug("connection: %s on closed stream %d (highest %d)", hd.type == NGHTTP2_DATA ? "DATA" : "HEADERS",
                        hd.stream_id, ids->last);
            return 1;
        }
    }
    ssize_t rv = nghttp2_session_mem_recv(conn->ngh, fed, (size_t)(end - fed));
    return rv < 0 ? (int)rv : 0;
}

static void on_read_held(echod_conn_t *conn, h2o_socket_t *sock, const char *err)
{
    if (err != NULL) {
        conn_close(conn);
        return;
    }
    conn->in_recv = 1;
    echod_closed_frame_t answer = ECHOD_CLOSED_FRAME_DISCARDED;
    int rv = recv_frames(conn, (const uint8_t *)sock->input->bytes, sock->input->size, &answer);
    conn->in_recv = 0;
    if (rv != 0) {
        /* Send the GOAWAY, then close. nghttp2 queues one for protocol errors (terminating again keeps
         * it); not for a bad preface or FLOODED (SETTINGS/PING acks piling up), where a session still
         * wanting to read would keep this read-stopped connection open forever. */
        if (rv == 1) {
            terminate(conn, answer == ECHOD_CLOSED_FRAME_STREAM_CLOSED ? NGHTTP2_STREAM_CLOSED : NGHTTP2_PROTOCOL_ERROR,
                      ECHOD_CLOSE_PROTOCOL_ERROR);
        } else {
            echod_debug("connection: nghttp2_session_mem_recv: %s", nghttp2_strerror(rv));
            int flood = rv == NGHTTP2_ERR_FLOODED || rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS;
            terminate(conn, flood ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR,
                      flood ? ECHOD_CLOSE_FLOOD : ECHOD_CLOSE_PROTOCOL_ERROR);
        }
        h2o_buffer_consume(&sock->input, sock->input->size);
        h2o_socket_read_stop(sock);
        conn->pings.len = 0; /* the GOAWAY says all there is to say */
        echod_conn_flush(conn, ECHOD_FLUSH_TRIGGER_READ_COMPLETE);
        return;
    }
    h2o_buffer_consume(&sock->input, sock->input->size);
    write_pings(conn);
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
    while (conn->streams != NULL)
        stream_gone(conn->streams);
    conn_process(conn);
    nghttp2_session_del(conn->ngh);
    conn->ngh = NULL;
    h2o_linklist_unlink(&conn->link);
    if (h2o_linklist_is_linked(&conn->batch_link))
        h2o_linklist_unlink(&conn->batch_link);
    h2o_socket_close(conn->sock);
    conn->sock = NULL;
    echod_limit_release(&echod_metrics.connections);
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
    for (echod_stream_t *s = conn->streams; s != NULL; s = s->next_in_conn)
        open += (size_t)echod_stream_drain_mark(s);
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
    for (echod_stream_t *s = conn->streams; s != NULL; s = s->next_in_conn)
        echod_stream_cut(s);
    final_goaway(conn);
    echod_conn_flush(conn, ECHOD_FLUSH_TRIGGER_LOOP_TAIL);
}

/* nghttp2's allocator: the loop's pool (a session lives on its loop thread only); nghttp2 never
 * sees NULL (util/err.h: running out of memory aborts) */
static void *pool_malloc(size_t size, void *pool)
{
    return echod_must(echod_pool_malloc(pool, size), "HTTP/2 session");
}

static void pool_free(void *ptr, void *pool)
{
    echod_pool_free(pool, ptr);
}

static void *pool_calloc(size_t n, size_t size, void *pool)
{
    return echod_must(echod_pool_calloc(pool, n, size), "HTTP/2 session");
}

static void *pool_realloc(void *ptr, size_t size, void *pool)
{
    return echod_must(echod_pool_realloc(pool, ptr, size), "HTTP/2 session");
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
    nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cbs, echod_stream_on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, echod_stream_on_data);
    nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
    nghttp2_option_new(&opt);
    nghttp2_option_set_no_auto_window_update(opt, 1);
    conn->flow_pings = cfg->transport.flow_control_pings;
    if (conn->flow_pings)
        nghttp2_option_set_no_auto_ping_ack(opt, 1); /* on_frame_recv acks them, at the end of the read */
    /* CVE-2023-44487: a peer resetting streams faster than this gets GOAWAY(ENHANCE_YOUR_CALM) */
    /* reset_flood() enforces the rate; nghttp2's own limiter stays as a backstop at twice it */
    uint64_t resets =
        cfg->transport.max_resets_per_second != 0 ? 2 * (uint64_t)cfg->transport.max_resets_per_second : UINT32_MAX;
    nghttp2_option_set_stream_reset_rate_limit(opt, resets, resets);
    nghttp2_option_set_max_continuations(opt, 8);
    /* closed streams are kept only to anchor RFC 7540 priorities, which gRPC clients do not send
     * (RFC 9113 drops them): they cost ~200 instructions per unary call, and up to
     * max_concurrent_streams kept streams (~350 bytes each) per connection. nghttp2 then ignores
     * frames on a closed stream; recv_frames answers them from stream_ids instead, which is a
     * fixed size (docs/http2-conformance.md has the figures) */
    nghttp2_option_set_no_closed_streams(opt, 1);
    nghttp2_mem mem = {&conn->loop->pool, pool_malloc, pool_free, pool_calloc, pool_realloc};
    int rv = nghttp2_session_server_new3(&conn->ngh, cbs, conn, opt, &mem);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    if (rv != 0)
        return -1;
    echod_frame_scan_init(&conn->scan);
    echod_stream_ids_init(&conn->stream_ids);
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
    /* reserved before anything else: two loops never accept past the limit together */
    if (!echod_limit_reserve(&echod_metrics.connections, loop->server->cfg->limits.max_connections,
                             &echod_metrics.connections_peak)) {
        ECHOD_COUNT(echod_metrics.connections_closed[ECHOD_CLOSE_LIMIT]);
        h2o_socket_close(sock);
        return;
    }
    echod_conn_t *conn = echod_must(calloc(1, sizeof(*conn)), "connection");
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
    ECHOD_COUNT(echod_metrics.connections_total);
    if (loop->server->ssl_ctx != NULL)
        h2o_socket_ssl_handshake(sock, loop->server->ssl_ctx, NULL, on_handshake);
    else
        conn_start(conn);
}
