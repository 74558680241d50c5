/*
 * The REST control arm: echo by POST and GET/HEAD, percent-decoding, keep-alive and pipelining,
 * 404/405/400/413, the counters, and stop (idle connections closed, busy ones let finish,
 * Connection: close after stop, listener closed, abort of a client that stopped reading).
 *
 * The REST server runs on an h2o evloop in a thread of its own, as on an echod I/O loop; the
 * main thread is the HTTP client, over plain blocking sockets, and drives stop/abort/quit by
 * sending commands through an h2o_multithread queue of that loop.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <h2o.h>
#include "check.h"
#include "transport/rest.h"

/* -------------------------------------------------------------------------------------------- */
/* the loop thread */

typedef enum { CMD_STOP, CMD_ABORT, CMD_QUIT } cmd_op_t;

typedef struct {
    h2o_multithread_message_t super;
    cmd_op_t op;
    int result; /* echod_rest_stop's, for CMD_STOP */
    sem_t done;
} cmd_t;

typedef struct {
    int listen_fd;
    pthread_t thread;
    sem_t ready;     /* the loop thread has started rest (or failed to) */
    sem_t quit_sent; /* main's send_message for CMD_QUIT has returned: the queue's pipe may close */
    char err[256];

    /* loop thread only, except `rest` (read by main after `ready`, for echod_rest_stats) */
    h2o_evloop_t *loop;
    h2o_multithread_queue_t *queue;
    h2o_multithread_receiver_t receiver;
    echod_rest_t *rest;
    int quit;
} server_t;

static void on_cmd(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    server_t *s = H2O_STRUCT_FROM_MEMBER(server_t, receiver, receiver);
    while (!h2o_linklist_is_empty(messages)) {
        cmd_t *cmd = H2O_STRUCT_FROM_MEMBER(cmd_t, super.link, messages->next);
        h2o_linklist_unlink(&cmd->super.link);
        switch (cmd->op) {
        case CMD_STOP:
            cmd->result = echod_rest_stop(s->rest);
            break;
        case CMD_ABORT:
            echod_rest_abort(s->rest);
            break;
        case CMD_QUIT:
            s->quit = 1;
            break;
        }
        /* main owns cmd (on its stack) again from here on */
        sem_post(&cmd->done);
    }
}

/* Empties the thread-local socket-buffer cache this thread's sockets were recycled into. */
static void drain_socket_buffers(void)
{
    h2o_mem_recycle_t *recycle = &h2o_socket_buffer_prototype.allocator;
    while (recycle->cnt != 0)
        free(h2o_mem_alloc_recycle(recycle, 0));
}

static void *server_main(void *arg)
{
    server_t *s = arg;
    s->loop = h2o_evloop_create();
    s->queue = h2o_multithread_create_queue(s->loop);
    h2o_multithread_register_receiver(s->queue, &s->receiver, on_cmd);
    s->rest = echod_rest_start(s->loop, s->listen_fd, s->err, sizeof(s->err));
    sem_post(&s->ready);

    while (!s->quit)
        h2o_evloop_run(s->loop, INT32_MAX);
    if (s->rest != NULL)
        echod_rest_dispose(s->rest);

    while (sem_wait(&s->quit_sent) != 0 && errno == EINTR)
        ;
    h2o_multithread_unregister_receiver(s->queue, &s->receiver);
    h2o_multithread_destroy_queue(s->queue);
    free(s->queue); /* h2o 2.2.5 (evloop) closes the queue's pipe but does not free it */
    /* runs the deferred frees of the sockets closed by stop and destroy_queue */
    h2o_evloop_run(s->loop, 0);
    h2o_evloop_destroy(s->loop);
    /* the queue's pipe socket was closed after echod_rest_dispose emptied this cache */
    drain_socket_buffers();
    return NULL;
}

static int command(server_t *s, cmd_op_t op)
{
    cmd_t cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.op = op;
    sem_init(&cmd.done, 0, 0);
    h2o_multithread_send_message(&s->receiver, &cmd.super);
    if (op == CMD_QUIT)
        sem_post(&s->quit_sent);
    while (sem_wait(&cmd.done) != 0 && errno == EINTR)
        ;
    sem_destroy(&cmd.done);
    return cmd.result;
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Sends CMD_STOP every 10 ms until it reports every connection gone; 1 if it did within ms. */
static int stop_within(server_t *s, int ms)
{
    uint64_t deadline = now_ms() + (uint64_t)ms;
    do {
        if (command(s, CMD_STOP))
            return 1;
        usleep(10000);
    } while (now_ms() < deadline);
    return 0;
}

/* 1 if the server's count of open connections reaches n within ms. */
static int open_within(server_t *s, uint64_t n, int ms)
{
    uint64_t deadline = now_ms() + (uint64_t)ms;
    echod_rest_stats_t st;
    for (;;) {
        echod_rest_stats(s->rest, &st);
        if (st.connections_open == n)
            return 1;
        if (now_ms() >= deadline)
            return 0;
        usleep(5000);
    }
}

/* -------------------------------------------------------------------------------------------- */
/* a tiny HTTP/1.1 client */

typedef struct {
    int fd;
    char *data; /* bytes received and not yet consumed as a response */
    size_t len, cap;
} client_t;

typedef struct {
    int status;
    char head[8192]; /* status line and headers, NUL-terminated */
    char *body;
    size_t body_len;
    int saw_eof; /* the body was delimited by the server closing the connection */
} resp_t;

static int open_conn(int port, int rcvbuf)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    /* Set before connect so the window it announces is small from the start. */
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int client_open(client_t *c, int port)
{
    memset(c, 0, sizeof(*c));
    c->fd = open_conn(port, 0);
    return c->fd >= 0 ? 0 : -1;
}

static void client_close(client_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->data);
    memset(c, 0, sizeof(*c));
    c->fd = -1;
}

static int send_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len != 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int send_str(client_t *c, const char *s)
{
    return send_all(c->fd, s, strlen(s));
}

/* Reads more bytes into c->data: >0 read, 0 EOF, -1 error or timeout. */
static ssize_t client_fill(client_t *c)
{
    if (c->cap - c->len < 65536) {
        size_t cap = c->cap == 0 ? 131072 : c->cap * 2;
        char *p = realloc(c->data, cap);
        if (p == NULL)
            return -1;
        c->data = p;
        c->cap = cap;
    }
    ssize_t n;
    while ((n = recv(c->fd, c->data + c->len, c->cap - c->len, 0)) < 0 && errno == EINTR)
        ;
    if (n > 0)
        c->len += (size_t)n;
    return n;
}

/* The value of header `name` in head (case-insensitive), copied into out; 0 if absent. */
static int header(const char *head, const char *name, char *out, size_t outlen)
{
    size_t n = strlen(name);
    for (const char *p = strstr(head, "\r\n"); p != NULL; p = strstr(p + 2, "\r\n")) {
        const char *line = p + 2;
        if (strncasecmp(line, name, n) == 0 && line[n] == ':') {
            const char *v = line + n + 1, *end = strstr(v, "\r\n");
            while (*v == ' ')
                ++v;
            if (end == NULL)
                end = v + strlen(v);
            size_t len = (size_t)(end - v) < outlen - 1 ? (size_t)(end - v) : outlen - 1;
            memcpy(out, v, len);
            out[len] = '\0';
            return 1;
        }
    }
    return 0;
}

/* Decodes a complete chunked body in place; returns its length or SIZE_MAX if malformed. */
static size_t dechunk(char *buf, size_t len)
{
    size_t in = 0, out = 0;
    for (;;) {
        char *end;
        unsigned long size = strtoul(buf + in, &end, 16);
        char *crlf = memmem(buf + in, len - in, "\r\n", 2);
        if (crlf == NULL || end == buf + in)
            return SIZE_MAX;
        in = (size_t)(crlf - buf) + 2;
        if (size == 0)
            return out;
        if (len - in < size + 2)
            return SIZE_MAX;
        memmove(buf + out, buf + in, size);
        out += size;
        in += size + 2;
    }
}

static void resp_free(resp_t *r)
{
    free(r->body);
    memset(r, 0, sizeof(*r));
}

/* Reads one response (HEAD: no body whatever Content-Length says). 0 on success. */
static int read_response(client_t *c, resp_t *r, int is_head)
{
    memset(r, 0, sizeof(*r));
    char *eoh;
    while ((eoh = c->len != 0 ? memmem(c->data, c->len, "\r\n\r\n", 4) : NULL) == NULL) {
        if (client_fill(c) <= 0)
            return -1;
    }
    size_t head_len = (size_t)(eoh - c->data) + 4;
    if (head_len >= sizeof(r->head))
        return -1;
    memcpy(r->head, c->data, head_len);
    r->head[head_len] = '\0';
    if (sscanf(r->head, "HTTP/1.1 %d", &r->status) != 1)
        return -1;

    char value[64];
    size_t body_len;
    int chunked = header(r->head, "transfer-encoding", value, sizeof(value)) && strcasecmp(value, "chunked") == 0;
    if (is_head) {
        body_len = 0;
    } else if (header(r->head, "content-length", value, sizeof(value))) {
        body_len = strtoull(value, NULL, 10);
        while (c->len - head_len < body_len) {
            if (client_fill(c) <= 0)
                return -1;
        }
    } else {
        /* only h2o's own error responses come without a length, and they close the connection */
        ssize_t n;
        while ((n = client_fill(c)) > 0)
            ;
        if (n < 0)
            return -1;
        r->saw_eof = 1;
        body_len = c->len - head_len;
    }
    r->body = malloc(body_len + 1);
    memcpy(r->body, c->data + head_len, body_len);
    r->body[body_len] = '\0';
    r->body_len = body_len;
    if (chunked && (r->body_len = dechunk(r->body, body_len)) == SIZE_MAX)
        return -1;
    memmove(c->data, c->data + head_len + body_len, c->len - head_len - body_len);
    c->len -= head_len + body_len;
    return 0;
}

/* 1 if the server closes the connection (EOF, or a reset) within the receive timeout. */
static int sees_close(int fd)
{
    char b;
    ssize_t n;
    while ((n = recv(fd, &b, 1, 0)) < 0 && errno == EINTR)
        ;
    return n == 0 || (n < 0 && errno == ECONNRESET);
}

/* One request on its own connection. */
static int roundtrip(int port, const char *request, const void *body, size_t body_len, int is_head, resp_t *r)
{
    client_t c;
    if (client_open(&c, port) != 0)
        return -1;
    int rv = send_str(&c, request) == 0 && (body_len == 0 || send_all(c.fd, body, body_len) == 0)
                 ? read_response(&c, r, is_head)
                 : -1;
    client_close(&c);
    return rv;
}

static int has_header(const resp_t *r, const char *name, const char *want)
{
    char value[256];
    return header(r->head, name, value, sizeof(value)) && strcmp(value, want) == 0;
}

/* -------------------------------------------------------------------------------------------- */
/* tests */

static void test_post(int port)
{
    resp_t r;
    CHECK(roundtrip(port,
                    "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Type: application/x-test; a=b\r\n"
                    "Content-Length: 11\r\n\r\nhello world",
                    NULL, 0, 0, &r) == 0);
    CHECK(r.status == 200);
    CHECK(r.body_len == 11 && memcmp(r.body, "hello world", 11) == 0);
    CHECK(has_header(&r, "content-type", "application/x-test; a=b"));
    CHECK(has_header(&r, "content-length", "11"));
    resp_free(&r);

    /* no content-type: octet-stream; binary bytes (NUL, 0xff) come back unchanged */
    static const char bin[] = {'a', 0, (char)0xff, '\r', '\n', 'z'};
    CHECK(roundtrip(port, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 6\r\n\r\n", bin, sizeof(bin), 0, &r) == 0);
    CHECK(r.status == 200);
    CHECK(r.body_len == sizeof(bin) && memcmp(r.body, bin, sizeof(bin)) == 0);
    CHECK(has_header(&r, "content-type", "application/octet-stream"));
    resp_free(&r);

    /* empty body */
    CHECK(roundtrip(port, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n", NULL, 0, 0, &r) == 0);
    CHECK(r.status == 200 && r.body_len == 0 && has_header(&r, "content-length", "0"));
    resp_free(&r);

    /* chunked request body: h2o reassembles it, the response has a length */
    CHECK(roundtrip(port,
                    "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Type: text/x-c\r\n\r\n"
                    "5\r\nhello\r\n6\r\n chunk\r\n0\r\n\r\n",
                    NULL, 0, 0, &r) == 0);
    CHECK(r.status == 200);
    CHECK(r.body_len == 11 && memcmp(r.body, "hello chunk", 11) == 0);
    CHECK(has_header(&r, "content-length", "11"));
    resp_free(&r);

    /* Expect: 100-continue (curl sends it for large bodies) */
    client_t c;
    CHECK(client_open(&c, port) == 0);
    CHECK(send_str(&c, "POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n") == 0);
    CHECK(read_response(&c, &r, 1) == 0 && r.status == 100);
    resp_free(&r);
    CHECK(send_str(&c, "abc") == 0);
    CHECK(read_response(&c, &r, 0) == 0 && r.status == 200 && r.body_len == 3 && memcmp(r.body, "abc", 3) == 0);
    resp_free(&r);
    client_close(&c);
}

/* A body of n bytes with no repeating period a short buffer mix-up could hide behind. */
static char *pattern(size_t n)
{
    char *p = malloc(n);
    uint32_t x = 2463534242u;
    for (size_t i = 0; i < n; ++i) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (char)x;
    }
    return p;
}

static void test_large(int port)
{
    char request[256];
    resp_t r;
    size_t sizes[] = {1024 * 1024, ECHOD_REST_MAX_BODY};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
        char *body = pattern(sizes[i]);
        snprintf(request, sizeof(request), "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n", sizes[i]);
        CHECK(roundtrip(port, request, body, sizes[i], 0, &r) == 0);
        CHECK(r.status == 200);
        CHECK(r.body_len == sizes[i] && r.body != NULL && memcmp(r.body, body, sizes[i]) == 0);
        resp_free(&r);
        free(body);
    }

    /* one byte over the limit: h2o's 413 before the body is sent, and the connection closes */
    client_t c;
    CHECK(client_open(&c, port) == 0);
    snprintf(request, sizeof(request), "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %u\r\n\r\n",
             ECHOD_REST_MAX_BODY + 1);
    CHECK(send_str(&c, request) == 0);
    CHECK(read_response(&c, &r, 0) == 0);
    CHECK(r.status == 413);
    CHECK(has_header(&r, "connection", "close"));
    resp_free(&r);
    CHECK(sees_close(c.fd));
    client_close(&c);
}

static void test_get(int port)
{
    resp_t r;
    CHECK(roundtrip(port, "GET /echo?message=hello%20world%21+plus%2B HTTP/1.1\r\nHost: t\r\n\r\n", NULL, 0, 0, &r) ==
          0);
    CHECK(r.status == 200);
    CHECK(r.body_len == 18 && memcmp(r.body, "hello world! plus+", 18) == 0);
    CHECK(strcmp(r.body, "hello world! plus+") == 0);
    CHECK(has_header(&r, "content-type", "text/plain"));
    resp_free(&r);

    /* UTF-8 and a NUL byte, among other parameters */
    CHECK(roundtrip(port, "GET /echo?a=1&message=%E2%82%AC%00x&message2=no HTTP/1.1\r\nHost: t\r\n\r\n", NULL, 0, 0,
                    &r) == 0);
    CHECK(r.status == 200 && r.body_len == 5 && memcmp(r.body, "\xe2\x82\xac\0x", 5) == 0);
    resp_free(&r);

    /* empty message */
    CHECK(roundtrip(port, "GET /echo?message= HTTP/1.1\r\nHost: t\r\n\r\n", NULL, 0, 0, &r) == 0);
    CHECK(r.status == 200 && r.body_len == 0);
    resp_free(&r);

    /* HEAD: the GET headers, no body */
    client_t c;
    CHECK(client_open(&c, port) == 0);
    CHECK(send_str(&c, "HEAD /echo?message=abcd HTTP/1.1\r\nHost: t\r\n\r\n") == 0);
    CHECK(read_response(&c, &r, 1) == 0);
    CHECK(r.status == 200 && has_header(&r, "content-length", "4") && has_header(&r, "content-type", "text/plain"));
    resp_free(&r);
    /* nothing but the next response follows the HEAD response on the connection */
    CHECK(send_str(&c, "GET /echo?message=next HTTP/1.1\r\nHost: t\r\n\r\n") == 0);
    CHECK(read_response(&c, &r, 0) == 0 && r.status == 200 && strcmp(r.body, "next") == 0);
    resp_free(&r);
    client_close(&c);

    /* no message, or a broken escape: 400 */
    const char *bad[] = {"GET /echo HTTP/1.1\r\nHost: t\r\n\r\n", "GET /echo?msg=x HTTP/1.1\r\nHost: t\r\n\r\n",
                         "GET /echo?message=%4 HTTP/1.1\r\nHost: t\r\n\r\n",
                         "GET /echo?message=%zz HTTP/1.1\r\nHost: t\r\n\r\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
        CHECK(roundtrip(port, bad[i], NULL, 0, 0, &r) == 0);
        CHECK(r.status == 400);
        resp_free(&r);
    }
}

static void test_keepalive(int port)
{
    client_t c;
    resp_t r;
    CHECK(client_open(&c, port) == 0);
    /* two requests, one after the other, on one connection */
    CHECK(send_str(&c, "GET /echo?message=one HTTP/1.1\r\nHost: t\r\n\r\n") == 0);
    CHECK(read_response(&c, &r, 0) == 0 && r.status == 200 && strcmp(r.body, "one") == 0);
    CHECK(has_header(&r, "connection", "keep-alive"));
    resp_free(&r);
    CHECK(send_str(&c, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\ntwo") == 0);
    CHECK(read_response(&c, &r, 0) == 0 && r.status == 200 && strcmp(r.body, "two") == 0);
    resp_free(&r);

    /* pipelined: three requests in one write, answered in order; errors keep the connection */
    CHECK(send_str(&c, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nA"
                       "GET /nope HTTP/1.1\r\nHost: t\r\n\r\n"
                       "GET /echo?message=C HTTP/1.1\r\nHost: t\r\n\r\n") == 0);
    CHECK(read_response(&c, &r, 0) == 0 && r.status == 200 && strcmp(r.body, "A") == 0);
    resp_free(&r);
    CHECK(read_response(&c, &r, 0) == 0 && r.status == 404);
    resp_free(&r);
    CHECK(read_response(&c, &r, 0) == 0 && r.status == 200 && strcmp(r.body, "C") == 0);
    resp_free(&r);

    /* a client asking for close gets it */
    CHECK(send_str(&c, "GET /echo?message=bye HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n") == 0);
    CHECK(read_response(&c, &r, 0) == 0 && r.status == 200 && has_header(&r, "connection", "close"));
    resp_free(&r);
    CHECK(sees_close(c.fd));
    client_close(&c);
}

static void test_errors(int port)
{
    resp_t r;
    const char *not_found[] = {"GET / HTTP/1.1\r\nHost: t\r\n\r\n", "GET /echo/ HTTP/1.1\r\nHost: t\r\n\r\n",
                               "POST /echoes HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx"};
    for (size_t i = 0; i < sizeof(not_found) / sizeof(not_found[0]); ++i) {
        CHECK(roundtrip(port, not_found[i], NULL, 0, 0, &r) == 0);
        CHECK(r.status == 404);
        resp_free(&r);
    }
    const char *not_allowed[] = {"PUT /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx",
                                 "DELETE /echo HTTP/1.1\r\nHost: t\r\n\r\n",
                                 "OPTIONS /echo HTTP/1.1\r\nHost: t\r\n\r\n"};
    for (size_t i = 0; i < sizeof(not_allowed) / sizeof(not_allowed[0]); ++i) {
        CHECK(roundtrip(port, not_allowed[i], NULL, 0, 0, &r) == 0);
        CHECK(r.status == 405);
        CHECK(has_header(&r, "allow", "GET, HEAD, POST"));
        resp_free(&r);
    }
    /* no HTTP/2: an h2c upgrade is answered over HTTP/1.1, a prior-knowledge preface is closed */
    CHECK(roundtrip(port,
                    "GET /echo?message=u HTTP/1.1\r\nHost: t\r\nConnection: Upgrade, HTTP2-Settings\r\n"
                    "Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
                    NULL, 0, 0, &r) == 0);
    CHECK(r.status == 200 && strcmp(r.body, "u") == 0);
    resp_free(&r);
    CHECK(roundtrip(port, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", NULL, 0, 0, &r) == 0);
    CHECK(r.status == 400 && has_header(&r, "connection", "close"));
    resp_free(&r);

    /* a body h2o cannot frame: its own 400, and a close */
    const char *unframed[] = {"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n",
                              "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"};
    for (size_t i = 0; i < sizeof(unframed) / sizeof(unframed[0]); ++i) {
        CHECK(roundtrip(port, unframed[i], NULL, 0, 0, &r) == 0);
        CHECK(r.status == 400 && has_header(&r, "connection", "close"));
        resp_free(&r);
    }

    /* h2o normalizes the path before we see it */
    CHECK(roundtrip(port, "GET /x/../%65cho?message=n HTTP/1.1\r\nHost: t\r\n\r\n", NULL, 0, 0, &r) == 0);
    CHECK(r.status == 200 && strcmp(r.body, "n") == 0);
    resp_free(&r);
}

static void test_start_errors(void)
{
    char err[256] = "";
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    /* not listening: refused before any h2o object exists, the loop is not even looked at */
    CHECK(echod_rest_start(NULL, fd, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "not a listening socket") != NULL);
    close(fd);
}

static void test_stop(server_t *s, int port)
{
    resp_t r;
    /* idle: one response done, waiting for the next request */
    client_t idle;
    CHECK(client_open(&idle, port) == 0);
    CHECK(send_str(&idle, "GET /echo?message=x HTTP/1.1\r\nHost: t\r\n\r\n") == 0);
    CHECK(read_response(&idle, &r, 0) == 0 && r.status == 200);
    resp_free(&r);

    /* mid-body: headers parsed (keep-alive decided) before stop */
    client_t body;
    CHECK(client_open(&body, port) == 0);
    CHECK(send_str(&body, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhe") == 0);

    /* mid-headers: the request is parsed after stop */
    client_t head;
    CHECK(client_open(&head, port) == 0);
    CHECK(send_str(&head, "GET /echo?message=late HTTP/1.1\r\nHo") == 0);

    /* a client that stopped reading a 4 MiB response through a tiny window */
    int stuck = open_conn(port, 4096);
    CHECK(stuck >= 0);
    char *big = pattern(ECHOD_REST_MAX_BODY);
    char request[128];
    snprintf(request, sizeof(request), "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %u\r\n\r\n",
             ECHOD_REST_MAX_BODY);
    CHECK(send_all(stuck, request, strlen(request)) == 0 && send_all(stuck, big, ECHOD_REST_MAX_BODY) == 0);
    free(big);
    /* let the server read every connection's bytes (if it has not, they count as busy anyway) */
    usleep(200000);

    CHECK(command(s, CMD_STOP) == 0);

    /* the listener is gone */
    CHECK(open_conn(port, 0) < 0);
    /* the idle connection is closed */
    CHECK(sees_close(idle.fd));
    client_close(&idle);

    /* the body finishes and is answered as usual (keep-alive, as decided before stop) ... */
    CHECK(send_str(&body, "llo") == 0);
    CHECK(read_response(&body, &r, 0) == 0 && r.status == 200 && strcmp(r.body, "hello") == 0);
    resp_free(&r);
    /* ... the late request is answered with Connection: close, and closed */
    CHECK(send_str(&head, "st: t\r\n\r\n") == 0);
    CHECK(read_response(&head, &r, 0) == 0 && r.status == 200 && strcmp(r.body, "late") == 0);
    CHECK(has_header(&r, "connection", "close"));
    resp_free(&r);
    CHECK(sees_close(head.fd));
    client_close(&head);

    /* the body connection is idle again: the next stop closes it; the stuck one holds stop off */
    CHECK(command(s, CMD_STOP) == 0);
    CHECK(sees_close(body.fd));
    client_close(&body);
    /* the client sees the shutdown at once; h2o closes its side when it next reads */
    CHECK(open_within(s, 1, 2000));
    CHECK(command(s, CMD_STOP) == 0);

    /* abort ends the stuck one */
    command(s, CMD_ABORT);
    CHECK(stop_within(s, 2000));
    close(stuck);
}

static void test_stats(server_t *s)
{
    /* after stop: every connection closed, so h2o's own 413 has been counted too */
    echod_rest_stats_t st;
    echod_rest_stats(s->rest, &st);
    printf("rest stats: 200=%llu 400=%llu 404=%llu 405=%llu 413=%llu accepted=%llu open=%llu in=%llu out=%llu\n",
           (unsigned long long)st.responses[ECHOD_REST_STATUS_200],
           (unsigned long long)st.responses[ECHOD_REST_STATUS_400],
           (unsigned long long)st.responses[ECHOD_REST_STATUS_404],
           (unsigned long long)st.responses[ECHOD_REST_STATUS_405],
           (unsigned long long)st.responses[ECHOD_REST_STATUS_413], (unsigned long long)st.connections_accepted,
           (unsigned long long)st.connections_open, (unsigned long long)st.body_bytes_in,
           (unsigned long long)st.body_bytes_out);
    /* test_post 5, test_large 2, test_get 5 (HEAD counts), test_keepalive 5, test_errors 2, test_stop 4 */
    CHECK(st.responses[ECHOD_REST_STATUS_200] == 5 + 2 + 5 + 5 + 2 + 4);
    /* test_get 4; test_errors 2 from h2o (unframed bodies), not its 400 for the HTTP/2 preface */
    CHECK(st.responses[ECHOD_REST_STATUS_400] == 4 + 2);
    CHECK(st.responses[ECHOD_REST_STATUS_404] == 3 + 1);
    CHECK(st.responses[ECHOD_REST_STATUS_405] == 3);
    CHECK(st.responses[ECHOD_REST_STATUS_413] == 1);
    CHECK(st.connections_open == 0);
    /* test_post (5 requests), test_large (2), test_keepalive (2), test_stop (hello and 4 MiB) */
    uint64_t in = 11 + 6 + 0 + 11 + 3 + 1024 * 1024 + ECHOD_REST_MAX_BODY + 3 + 1 + 5 + ECHOD_REST_MAX_BODY;
    CHECK(st.body_bytes_in == in);
    CHECK(st.connections_accepted >= 20);
}

int main(void)
{
    /* h2o writes with writev: a client gone mid-response must be EPIPE, not a dead test */
    signal(SIGPIPE, SIG_IGN);

    server_t s;
    memset(&s, 0, sizeof(s));
    s.listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = 0};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t slen = sizeof(sin);
    if (s.listen_fd < 0 || bind(s.listen_fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
        listen(s.listen_fd, 128) != 0 || getsockname(s.listen_fd, (struct sockaddr *)&sin, &slen) != 0) {
        perror("listen");
        return 1;
    }
    int port = ntohs(sin.sin_port);
    sem_init(&s.ready, 0, 0);
    sem_init(&s.quit_sent, 0, 0);
    if (pthread_create(&s.thread, NULL, server_main, &s) != 0) {
        perror("pthread_create");
        return 1;
    }
    while (sem_wait(&s.ready) != 0 && errno == EINTR)
        ;
    CHECK(s.rest != NULL);
    if (s.rest == NULL) {
        fprintf(stderr, "echod_rest_start: %s\n", s.err);
    } else {
        test_start_errors();
        test_post(port);
        test_large(port);
        test_get(port);
        test_keepalive(port);
        test_errors(port);
        test_stop(&s, port);
        test_stats(&s);
    }
    command(&s, CMD_QUIT);
    pthread_join(s.thread, NULL);
    sem_destroy(&s.ready);
    sem_destroy(&s.quit_sent);
    return check_done();
}
