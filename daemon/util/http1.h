/*
 * The HTTP/1.1 server under the admin listener and the REST control arm: libh2o 2.2.5 with one
 * handler at "/" (so unknown paths and wrong methods get the owner's answers), no h2c upgrade,
 * and the connection list h2o does not keep, so that stop can wind connections down.
 *
 * h2o objects allocate from thread-local caches: everything here runs on the thread of the
 * evloop passed to echod_http1_init, from init to dispose.
 *
 * h2o 2.2.5's HTTP/1 has no request_shutdown hook, and closing a socket under it would leave its
 * connection object dangling. echod_http1_shut shuts sockets down instead, so that each next
 * read sees EOF (or write fails) and h2o closes the connection through its own paths.
 */
#ifndef ECHOD_HTTP1_H
#define ECHOD_HTTP1_H

#if !defined(H2O_USE_LIBUV) || H2O_USE_LIBUV != 0
#error "build with -DH2O_USE_LIBUV=0: the HTTP/1.1 servers run on h2o's own evloop, not libuv"
#endif
#include <h2o.h>

typedef struct echod_http1 echod_http1_t;

/* What h2o calls on_req with: the handler, whose `owner` is echod_http1_config_t.owner. */
typedef struct {
    h2o_handler_t super;
    void *owner;
} echod_http1_handler_t;

typedef struct {
    int (*on_req)(h2o_handler_t *self, h2o_req_t *req);
    void *owner;
    size_t max_request_body; /* 0: h2o's default; larger bodies get h2o's own 413 */
    int accept_batch;        /* accepts per listener wake-up, so a connect storm cannot hog the loop */
    int tcp_nodelay;
    void (*on_open)(echod_http1_t *server);  /* optional: a connection was accepted */
    void (*on_close)(echod_http1_t *server); /* optional: one closed, however that happened */
} echod_http1_config_t;

/* An accepted connection. */
typedef struct {
    h2o_linklist_t link;
    h2o_socket_t *sock;
    echod_http1_t *server;
    int shut; /* shutdown(2) done */
} echod_http1_conn_t;

struct echod_http1 {
    echod_http1_config_t cfg;
    h2o_globalconf_t globalconf;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept_ctx;
    h2o_socket_t *listener; /* NULL once accepting stopped */
    h2o_linklist_t conns;   /* echod_http1_conn_t */
};

/* Serves listen_fd (a listening socket; made non-blocking) on loop. */
void echod_http1_init(echod_http1_t *s, h2o_evloop_t *loop, int listen_fd, const echod_http1_config_t *cfg);

/* Closes the listener; requests after this are answered with Connection: close. */
void echod_http1_stop_accepting(echod_http1_t *s);

/* Shuts down every connection, or only the idle ones: between keep-alive requests, holding no
 * part of one, writing nothing, no byte of a next request waiting in the kernel. */
void echod_http1_shut(echod_http1_t *s, int idle_only);

/* True once every connection has closed. */
int echod_http1_is_empty(echod_http1_t *s);

/* Frees the h2o context and config: 0, or -1 (freeing nothing: h2o would assert on their
 * timers) while the listener or a connection is still open. */
int echod_http1_dispose(echod_http1_t *s);

#endif
