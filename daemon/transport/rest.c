/*
 * The REST control arm: libh2o 2.2.5's HTTP/1.1 server sharing an I/O loop's evloop.
 *
 * The h2o objects (globalconf, context, sockets) live on the loop thread, like the gRPC
 * connections beside them, because h2o sockets and request pools allocate from thread-local
 * caches. Only `counters` is read from other threads (echod_rest_stats).
 *
 * The HTTP/1.1 server itself, and the way around h2o 2.2.5's gaps (connection list, keep-alive
 * shutdown, leaked queues), is util/http1.c's, shared with the admin listener; this one shares a
 * loop it does not own, and its stop is incremental so the loop keeps serving gRPC meanwhile.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "metrics/metrics.h"
#include "transport/rest.h"
#include "util/h2o_compat.h"
#include "util/http1.h"
#include "util/err.h"
#include "util/log.h"

/* Accepts per listener wake-up: the loop also serves gRPC, so a connect storm must not hog it. */
#define REST_ACCEPT_BATCH 64

/*
 * Written by the loop thread only, read by any: a relaxed load and store (no locked add) is
 * enough for a single writer, and the counters stay exact.
 */
typedef struct {
    _Atomic uint64_t responses[ECHOD_REST_STATUS_MAX];
    _Atomic uint64_t connections_accepted;
    _Atomic uint64_t connections_open;
    _Atomic uint64_t body_bytes_in;
    _Atomic uint64_t body_bytes_out;
} rest_counters_t;

struct echod_rest {
    echod_http1_t http;
    /* h2o's own 400/413 counts already added to `counters` (ctx.emitted_error_status is not atomic) */
    uint64_t emitted_seen_400, emitted_seen_413;
    rest_counters_t counters;
};

static void count(_Atomic uint64_t *counter, uint64_t n)
{
    atomic_store_explicit(counter, atomic_load_explicit(counter, memory_order_relaxed) + n, memory_order_relaxed);
}

/* The instance's own counter (echod_rest_stats), and the process-wide one /metrics shows: the
 * instance is freed while draining, when a scrape may still come. */
#define COUNT(rest, field, n)                                                                                          \
    do {                                                                                                               \
        uint64_t n_ = (n);                                                                                             \
        count(&(rest)->counters.field, n_);                                                                            \
        ECHOD_ADD(echod_metrics.rest.field, n_);                                                                       \
    } while (0)

/*
 * h2o answers a body above the limit (413) or a broken content-length or chunked encoding (400)
 * without calling our handler; it only bumps a plain counter in the context. Such a response
 * always closes its connection, so syncing here and on every request misses none.
 */
static void sync_emitted(echod_rest_t *rest)
{
    uint64_t e400 = rest->http.ctx.emitted_error_status[H2O_STATUS_ERROR_400];
    uint64_t e413 = rest->http.ctx.emitted_error_status[H2O_STATUS_ERROR_413];
    COUNT(rest, responses[ECHOD_REST_STATUS_400], e400 - rest->emitted_seen_400);
    COUNT(rest, responses[ECHOD_REST_STATUS_413], e413 - rest->emitted_seen_413);
    rest->emitted_seen_400 = e400;
    rest->emitted_seen_413 = e413;
}

/* -------------------------------------------------------------------------------------------- */
/* requests */

static void respond_text(echod_rest_t *rest, h2o_req_t *req, echod_rest_status_t counted, int status,
                         const char *reason, const char *body, size_t len)
{
    COUNT(rest, responses[counted], 1);
    req->res.status = status;
    req->res.reason = reason;
    /* h2o_send_inline leaves the length unset (chunked); load tools compare it with what they read. */
    req->res.content_length = len;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("text/plain"));
    /* Copies body into the request pool, and sends no body for HEAD. */
    h2o_send_inline(req, body, len);
}

static void respond_error(echod_rest_t *rest, h2o_req_t *req, echod_rest_status_t counted, int status,
                          const char *reason, const char *body)
{
    respond_text(rest, req, counted, status, reason, body, strlen(body));
}

static int method_is(h2o_req_t *req, const char *method)
{
    return h2o_memis(req->method.base, req->method.len, method, strlen(method));
}

static int hex_value(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/*
 * Decodes a query value as browsers and k6 encode it (%XX, and '+' for a space as in HTML forms).
 * dst holds at least len bytes. Returns the decoded length, or SIZE_MAX for a malformed escape.
 */
static size_t query_decode(char *dst, const char *src, size_t len)
{
    size_t out = 0;
    for (size_t i = 0; i < len; ++i) {
        if (src[i] == '%') {
            int hi, lo;
            if (len - i < 3)
                return SIZE_MAX;
            if ((hi = hex_value((unsigned char)src[i + 1])) < 0 || (lo = hex_value((unsigned char)src[i + 2])) < 0)
                return SIZE_MAX;
            dst[out++] = (char)(hi << 4 | lo);
            i += 2;
        } else {
            dst[out++] = src[i] == '+' ? ' ' : src[i];
        }
    }
    return out;
}

/* Finds name (compared as sent, not decoded) among the '&'-separated pairs of query. */
static int query_param(const char *query, size_t len, const char *name, h2o_iovec_t *value)
{
    const char *p = query, *end = query + len;
    size_t name_len = strlen(name);
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        if (amp == NULL)
            amp = end;
        if ((size_t)(amp - p) >= name_len && memcmp(p, name, name_len) == 0 &&
            (p + name_len == amp || p[name_len] == '=')) {
            const char *v = p + name_len == amp ? amp : p + name_len + 1;
            *value = h2o_iovec_init(v, (size_t)(amp - v));
            return 1;
        }
        if (amp == end)
            break;
        p = amp + 1;
    }
    return 0;
}

static void echo_body(echod_rest_t *rest, h2o_req_t *req)
{
    /* Never called back: the whole response goes out in one final h2o_send (h2o_send_inline does the same). */
    static h2o_generator_t generator = {NULL, NULL};
    h2o_iovec_t body = req->entity.base != NULL ? req->entity : h2o_iovec_init(H2O_STRLIT(""));

    req->res.status = 200;
    req->res.reason = "OK";
    req->res.content_length = body.len;
    ssize_t ct = h2o_find_header(&req->headers, H2O_TOKEN_CONTENT_TYPE, -1);
    if (ct != -1) {
        h2o_iovec_t v = req->headers.entries[ct].value;
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, v.base, v.len);
    } else {
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL,
                       H2O_STRLIT("application/octet-stream"));
    }
    COUNT(rest, responses[ECHOD_REST_STATUS_200], 1);
    COUNT(rest, body_bytes_in, body.len);
    COUNT(rest, body_bytes_out, body.len);
    /*
     * Sent without a copy: the entity lies in the socket's input buffer, which h2o 2.2.5 neither
     * reads into nor consumes until this response is written (reading restarts in on_send_complete).
     */
    h2o_start_response(req, &generator);
    h2o_send(req, &body, body.len != 0 ? 1 : 0, H2O_SEND_STATE_FINAL);
}

static void echo_query(echod_rest_t *rest, h2o_req_t *req)
{
    h2o_iovec_t raw;
    if (req->query_at == SIZE_MAX ||
        !query_param(req->path.base + req->query_at + 1, req->path.len - req->query_at - 1, "message", &raw)) {
        respond_error(rest, req, ECHOD_REST_STATUS_400, 400, "Bad Request", "missing message parameter\n");
        return;
    }
    char *text = h2o_mem_alloc_pool(&req->pool, raw.len + 1);
    size_t len = query_decode(text, raw.base, raw.len);
    if (len == SIZE_MAX) {
        respond_error(rest, req, ECHOD_REST_STATUS_400, 400, "Bad Request", "malformed percent-encoding in message\n");
        return;
    }
    if (!method_is(req, "HEAD"))
        COUNT(rest, body_bytes_out, len);
    respond_text(rest, req, ECHOD_REST_STATUS_200, 200, "OK", text, len);
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    echod_rest_t *rest = ((echod_http1_handler_t *)self)->owner;
    sync_emitted(rest);

    if (!h2o_memis(req->path_normalized.base, req->path_normalized.len, H2O_STRLIT("/echo"))) {
        respond_error(rest, req, ECHOD_REST_STATUS_404, 404, "Not Found", "not found\n");
    } else if (method_is(req, "POST")) {
        echo_body(rest, req);
    } else if (method_is(req, "GET") || method_is(req, "HEAD")) {
        echo_query(rest, req);
    } else {
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL, H2O_STRLIT("GET, HEAD, POST"));
        respond_error(rest, req, ECHOD_REST_STATUS_405, 405, "Method Not Allowed", "method not allowed\n");
    }
    return 0;
}

/* -------------------------------------------------------------------------------------------- */
/* connections */

static void on_open(echod_http1_t *http)
{
    echod_rest_t *rest = http->cfg.owner;
    COUNT(rest, connections_accepted, 1);
    COUNT(rest, connections_open, 1);
}

static void on_close(echod_http1_t *http)
{
    echod_rest_t *rest = http->cfg.owner;
    sync_emitted(rest);
    COUNT(rest, connections_open, (uint64_t)-1);
}

/* -------------------------------------------------------------------------------------------- */
/* API */

echod_rest_t *echod_rest_start(h2o_evloop_t *loop, int listen_fd, char *err, size_t errlen)
{
    int listening = 0;
    socklen_t optlen = sizeof(listening);
    if (getsockopt(listen_fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &optlen) != 0 || !listening) {
        snprintf(err, errlen, "rest: fd %d is not a listening socket", listen_fd);
        return NULL;
    }
    echod_rest_t *rest = echod_must(calloc(1, sizeof(*rest)), "REST arm");
    /* Larger bodies get h2o's own 413 and a close (a chunked one as soon as it outgrows this);
     * accepts are batched because the loop also serves gRPC; TCP_NODELAY as on the gRPC arm,
     * so the two arms differ only in what runs above TCP. */
    echod_http1_config_t cfg = {.on_req = on_req,
                                .owner = rest,
                                .max_request_body = ECHOD_REST_MAX_BODY,
                                .accept_batch = REST_ACCEPT_BATCH,
                                .tcp_nodelay = 1,
                                .on_open = on_open,
                                .on_close = on_close};
    echod_http1_init(&rest->http, loop, listen_fd, &cfg);
    return rest;
}

int echod_rest_stop(echod_rest_t *rest)
{
    echod_http1_stop_accepting(&rest->http);
    echod_http1_shut(&rest->http, 1);
    return echod_http1_is_empty(&rest->http);
}

void echod_rest_abort(echod_rest_t *rest)
{
    echod_http1_stop_accepting(&rest->http);
    echod_http1_shut(&rest->http, 0);
}

/*
 * Socket input buffers and request-pool chunks are recycled into thread-local free lists that
 * nothing empties when the thread ends (the pool's list is even static, out of reach). The loop
 * thread usually ends soon after this; emptying the lists now is harmless if it does not.
 */
void echod_rest_dispose(echod_rest_t *rest)
{
    if (echod_http1_dispose(&rest->http) != 0) {
        /* h2o_context_dispose would assert on the connections' timeouts; a leak at exit is the lesser evil. */
        echod_warn("rest: disposed with connections still open; not freeing the REST server");
        return;
    }
    free(rest);
    echod_h2o_drain_thread_caches();
}

void echod_rest_stats(const echod_rest_t *rest, echod_rest_stats_t *out)
{
    const rest_counters_t *c = &rest->counters;
    for (int i = 0; i < ECHOD_REST_STATUS_MAX; ++i)
        out->responses[i] = atomic_load_explicit(&c->responses[i], memory_order_relaxed);
    out->connections_accepted = atomic_load_explicit(&c->connections_accepted, memory_order_relaxed);
    out->connections_open = atomic_load_explicit(&c->connections_open, memory_order_relaxed);
    out->body_bytes_in = atomic_load_explicit(&c->body_bytes_in, memory_order_relaxed);
    out->body_bytes_out = atomic_load_explicit(&c->body_bytes_out, memory_order_relaxed);
}
