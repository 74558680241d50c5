/*
 * The admin listener: libh2o's HTTP/1.1 server on a thread and evloop of its own.
 *
 * Every h2o object (loop, globalconf, context, sockets) is created, used and destroyed on the
 * admin thread. That matters beyond tidiness: h2o sockets take their buffers from a thread-local
 * prototype (h2o_socket_buffer_prototype), so a socket created on the main thread and serviced
 * here would allocate from, and recycle into, another thread's cache.
 *
 * The main thread only touches the plain listening fd (so bind errors are reported
 * synchronously), the atomic flags, and the multithread receiver used to wake the loop.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#if !defined(H2O_USE_LIBUV) || H2O_USE_LIBUV != 0
#error "build with -DH2O_USE_LIBUV=0: the admin server runs on h2o's own evloop, not libuv"
#endif
#include <h2o.h>

#include "admin/admin.h"
#include "metrics/metrics.h"
#include "util/h2o_compat.h"
#include "util/log.h"

/* How long stop waits for open admin connections to wind down before giving up on them. */
#define ADMIN_DRAIN_MS 2000

/* An accepted connection, tracked so that stop can close it (h2o keeps no list we may walk). */
typedef struct {
    h2o_linklist_t link;
    h2o_socket_t *sock;
    echod_admin_t *admin;
} admin_conn_t;

typedef struct {
    h2o_handler_t super;
    echod_admin_t *admin;
} admin_handler_t;

/* What /readyz says; only ever moves forward. */
typedef enum {
    ECHOD_ADMIN_STARTING = 0,
    ECHOD_ADMIN_SERVING,
    ECHOD_ADMIN_DRAINING,
} echod_admin_state_t;

struct echod_admin {
    char addr[128]; /* as given, for log lines */
    int fd;         /* listening socket; owned by `listener` once the thread has wrapped it */
    int port;
    pthread_t thread;
    sem_t ready; /* posted by the admin thread once the wake-up receiver exists */
    sem_t woken; /* posted by stop once its wake-up write is done; only then may the pipe close */
    _Atomic int stopping;
    _Atomic int state; /* echod_admin_state_t */

    /* admin thread only, between `ready` and the end of the thread */
    h2o_evloop_t *loop;
    h2o_globalconf_t globalconf;
    h2o_context_t ctx;
    h2o_accept_ctx_t accept_ctx;
    h2o_socket_t *listener;
    h2o_multithread_queue_t *queue;
    h2o_multithread_receiver_t wake;
    h2o_linklist_t conns; /* admin_conn_t */
};

/* -------------------------------------------------------------------------------------------- */
/* requests */

static void respond(h2o_req_t *req, int status, const char *reason, const char *content_type, const char *body,
                    size_t len)
{
    req->res.status = status;
    req->res.reason = reason;
    /* h2o_send_inline leaves this unset (chunked); a known length keeps simple scrapers simple. */
    req->res.content_length = len;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, content_type, strlen(content_type));
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CACHE_CONTROL, NULL, H2O_STRLIT("no-store"));
    /* Copies body into the request pool, so the caller may free it right away. */
    h2o_send_inline(req, body, len);
}

static void respond_text(h2o_req_t *req, int status, const char *reason, const char *body)
{
    respond(req, status, reason, "text/plain; charset=utf-8", body, strlen(body));
}

static int path_is(h2o_req_t *req, const char *path)
{
    return h2o_memis(req->path_normalized.base, req->path_normalized.len, path, strlen(path));
}

/*
 * POST /admin/mark?stage=NAME: names the ramp stage in /metrics (echod_stage_info) so scrapes
 * can be cut at stage boundaries. NAME: 1-100 characters of [A-Za-z0-9._:-].
 */
static int on_mark(h2o_req_t *req)
{
    if (!h2o_memis(req->method.base, req->method.len, H2O_STRLIT("POST"))) {
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL, H2O_STRLIT("POST"));
        respond_text(req, 405, "Method Not Allowed", "use POST /admin/mark?stage=NAME\n");
        return 0;
    }
    char name[128] = "";
    if (req->query_at != SIZE_MAX) {
        const char *q = req->path.base + req->query_at + 1, *end = req->path.base + req->path.len;
        while (q < end) {
            const char *amp = memchr(q, '&', (size_t)(end - q));
            const char *stop = amp != NULL ? amp : end;
            if (stop - q > 6 && memcmp(q, "stage=", 6) == 0 && stop - q - 6 < (ptrdiff_t)sizeof(name))
                snprintf(name, sizeof(name), "%.*s", (int)(stop - q - 6), q + 6);
            q = stop + 1;
        }
    }
    if (!echod_metrics_stage_name_ok(name, strlen(name))) {
        respond_text(req, 400, "Bad Request", "expected ?stage=NAME, 1-100 characters of [A-Za-z0-9._:-]\n");
        return 0;
    }
    echod_metrics_mark_stage(name);
    respond_text(req, 200, "OK", "marked\n");
    return 0;
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    echod_admin_t *admin = ((admin_handler_t *)self)->admin;

    if (path_is(req, "/admin/mark"))
        return on_mark(req);
    int known = path_is(req, "/metrics") || path_is(req, "/healthz") || path_is(req, "/readyz");
    if (!known) {
        respond_text(req, 404, "Not Found", "not found\n");
        return 0;
    }
    /* HEAD is GET without the body; h2o_send_inline drops the body for HEAD itself. */
    if (!h2o_memis(req->method.base, req->method.len, H2O_STRLIT("GET")) &&
        !h2o_memis(req->method.base, req->method.len, H2O_STRLIT("HEAD"))) {
        h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_ALLOW, NULL, H2O_STRLIT("GET, HEAD"));
        respond_text(req, 405, "Method Not Allowed", "method not allowed\n");
        return 0;
    }

    if (path_is(req, "/metrics")) {
        size_t len;
        char *body = echod_metrics_render(&len);
        if (body == NULL) {
            respond_text(req, 500, "Internal Server Error", "out of memory\n");
            return 0;
        }
        respond(req, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", body, len);
        free(body);
    } else if (path_is(req, "/healthz")) {
        respond_text(req, 200, "OK", "ok\n");
    } else {
        echod_admin_state_t state = atomic_load_explicit(&admin->state, memory_order_relaxed);
        if (state == ECHOD_ADMIN_SERVING)
            respond_text(req, 200, "OK", "ready\n");
        else
            respond_text(req, 503, "Service Unavailable", state == ECHOD_ADMIN_STARTING ? "starting\n" : "draining\n");
    }
    return 0;
}

/* -------------------------------------------------------------------------------------------- */
/* connections */

static void on_conn_close(void *data)
{
    admin_conn_t *conn = data;
    h2o_linklist_unlink(&conn->link);
    free(conn);
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
    echod_admin_t *admin = listener->data;
    if (err != NULL)
        return;

    /* Bounded, so a connect storm cannot starve the wake-up pipe of this loop. */
    for (int i = 0; i < 16; ++i) {
        h2o_socket_t *sock = h2o_evloop_socket_accept(listener);
        if (sock == NULL)
            break;
        admin_conn_t *conn = calloc(1, sizeof(*conn)); /* h2o_linklist_insert wants an unlinked (zeroed) node */
        if (conn == NULL) {
            h2o_socket_close(sock);
            continue;
        }
        conn->sock = sock;
        conn->admin = admin;
        h2o_linklist_insert(&admin->conns, &conn->link);
        /* h2o's HTTP/1 code leaves on_close alone; it fires from h2o_socket_close however it is reached. */
        sock->on_close.cb = on_conn_close;
        sock->on_close.data = conn;
        h2o_accept(&admin->accept_ctx, sock);
    }
}

/* Only a wake-up: stop sets the flag first, and the run loop looks at it after every iteration. */
static void on_wake(h2o_multithread_receiver_t *receiver, h2o_linklist_t *messages)
{
    (void)receiver;
    while (!h2o_linklist_is_empty(messages))
        h2o_linklist_unlink(messages->next);
}

/* -------------------------------------------------------------------------------------------- */
/* the admin thread */

static void setup(echod_admin_t *admin)
{
    admin->loop = h2o_evloop_create();
    h2o_linklist_init_anchor(&admin->conns);

    h2o_config_init(&admin->globalconf);
    admin->globalconf.server_name = h2o_iovec_init(H2O_STRLIT("echod"));
    /* The admin port speaks HTTP/1.1 only; an h2c upgrade would hand the socket to code we never test. */
    admin->globalconf.http1.upgrade_to_http2 = 0;
    h2o_hostconf_t *host = h2o_config_register_host(&admin->globalconf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    /* One handler at "/" sees every path, so unknown paths and wrong methods get our answers. */
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    admin_handler_t *handler = (admin_handler_t *)h2o_create_handler(path, sizeof(*handler));
    handler->super.on_req = on_req;
    handler->admin = admin;

    h2o_context_init(&admin->ctx, admin->loop, &admin->globalconf);
    admin->accept_ctx.ctx = &admin->ctx;
    admin->accept_ctx.hosts = admin->globalconf.hosts;

    admin->queue = h2o_multithread_create_queue(admin->loop);
    h2o_multithread_register_receiver(admin->queue, &admin->wake, on_wake);

    admin->listener = h2o_evloop_socket_create(admin->loop, admin->fd, H2O_SOCKET_FLAG_DONT_READ);
    admin->listener->data = admin;
    h2o_socket_read_start(admin->listener, on_accept);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void teardown(echod_admin_t *admin)
{
    h2o_socket_read_stop(admin->listener);
    h2o_socket_close(admin->listener);
    admin->listener = NULL;

    /*
     * HTTP/1 in h2o 2.2.5 has no request_shutdown hook, so an idle keep-alive connection would sit
     * in the context's request timeout list for 10 s, and disposing the context with it there
     * trips an assertion. Shutting the socket down makes its next read see EOF, so h2o closes the
     * connection through its own error path and frees everything it owns.
     */
    for (h2o_linklist_t *node = admin->conns.next; node != &admin->conns; node = node->next) {
        admin_conn_t *conn = H2O_STRUCT_FROM_MEMBER(admin_conn_t, link, node);
        shutdown(h2o_socket_get_fd(conn->sock), SHUT_RDWR);
    }
    uint64_t deadline = now_ms() + ADMIN_DRAIN_MS;
    while (!h2o_linklist_is_empty(&admin->conns) && now_ms() < deadline)
        h2o_evloop_run(admin->loop, 10);

    h2o_multithread_unregister_receiver(admin->queue, &admin->wake);
    h2o_multithread_destroy_queue(admin->queue);
    echod_h2o_free_queue(admin->queue);
    admin->queue = NULL;

    if (!h2o_linklist_is_empty(&admin->conns)) {
        /* Disposing now would assert inside h2o; leaking a stuck connection at exit is the lesser evil. */
        echod_warn("admin: connections still open after %d ms; not freeing the admin server", ADMIN_DRAIN_MS);
        return;
    }
    h2o_multithread_queue_t *ctx_queue = admin->ctx.queue;
    h2o_context_dispose(&admin->ctx);
    echod_h2o_free_queue(ctx_queue); /* the same leak, inherited by h2o_context_dispose */
    h2o_config_dispose(&admin->globalconf);
    /*
     * Frees the sockets closed above (the loop only unlinks them until its next state update).
     * 2.2.5 does not close the loop's epoll descriptor here: one fd per admin start/stop stays open.
     */
    h2o_evloop_destroy(admin->loop);
    admin->loop = NULL;

    echod_h2o_drain_thread_caches();
}

static void *admin_main(void *arg)
{
    echod_admin_t *admin = arg;

    pthread_setname_np(pthread_self(), "echod-admin");
    setup(admin);
    sem_post(&admin->ready);

    while (!atomic_load_explicit(&admin->stopping, memory_order_acquire))
        h2o_evloop_run(admin->loop, INT32_MAX);

    /*
     * The loop may have woken for another reason and seen `stopping` while stop is still inside
     * h2o_multithread_send_message, which writes to the queue's pipe after dropping the queue
     * lock. Closing the pipe under that write could make it land on a reused descriptor.
     */
    while (sem_wait(&admin->woken) != 0 && errno == EINTR)
        ;
    teardown(admin);
    return NULL;
}

/* -------------------------------------------------------------------------------------------- */
/* main thread */

/* Splits "host:port" ("[v6]:port" too); an empty host or "*" means every address. */
static int split_listen(const char *addr, char *host, size_t hostlen, char *port, size_t portlen)
{
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || colon[1] == '\0')
        return -1;
    const char *h = addr, *hend = colon;
    if (*h == '[') {
        if (hend == h || hend[-1] != ']')
            return -1;
        ++h;
        --hend;
    }
    if ((size_t)(hend - h) >= hostlen || strlen(colon + 1) >= portlen)
        return -1;
    memcpy(host, h, (size_t)(hend - h));
    host[hend - h] = '\0';
    if (strcmp(host, "*") == 0)
        host[0] = '\0';
    strcpy(port, colon + 1);
    for (const char *p = port; *p != '\0'; ++p)
        if (*p < '0' || *p > '9')
            return -1;
    return atoi(port) <= 65535 ? 0 : -1;
}

static int open_listener(const char *addr, int *port_out, char *err, size_t errlen)
{
    char host[256], port[16];
    if (split_listen(addr, host, sizeof(host), port, sizeof(port)) != 0) {
        snprintf(err, errlen, "admin listener %s: expected host:port", addr);
        return -1;
    }

    struct addrinfo hints, *res;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(host[0] != '\0' ? host : NULL, port, &hints, &res);
    if (gai != 0) {
        snprintf(err, errlen, "admin listener %s: %s", addr, gai_strerror(gai));
        return -1;
    }

    int fd = -1, saved = 0;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd == -1) {
            saved = errno;
            continue;
        }
        int on = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd == -1) {
        snprintf(err, errlen, "admin listener %s: %s", addr, strerror(saved));
        return -1;
    }

    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);
    *port_out = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sslen) == 0) {
        if (ss.ss_family == AF_INET)
            *port_out = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            *port_out = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return fd;
}

echod_admin_t *echod_admin_start(const char *addr, char *err, size_t errlen)
{
    echod_admin_t *admin = calloc(1, sizeof(*admin));
    if (admin == NULL) {
        snprintf(err, errlen, "admin listener %s: out of memory", addr);
        return NULL;
    }
    snprintf(admin->addr, sizeof(admin->addr), "%s", addr);
    if ((admin->fd = open_listener(addr, &admin->port, err, errlen)) == -1) {
        free(admin);
        return NULL;
    }
    sem_init(&admin->ready, 0, 0);
    sem_init(&admin->woken, 0, 0);

    /*
     * The thread starts with every signal blocked: signals are the main thread's business, and a
     * blocked SIGPIPE turns a write to a vanished scraper into EPIPE instead of killing the process.
     */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&admin->thread, NULL, admin_main, admin);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        snprintf(err, errlen, "admin listener %s: cannot start thread: %s", addr, strerror(rc));
        close(admin->fd);
        sem_destroy(&admin->ready);
        sem_destroy(&admin->woken);
        free(admin);
        return NULL;
    }
    /* Until the receiver exists there is nothing stop could wake. */
    while (sem_wait(&admin->ready) != 0 && errno == EINTR)
        ;
    echod_info("admin listening on %s (port %d)", admin->addr, admin->port);
    return admin;
}

int echod_admin_port(const echod_admin_t *admin)
{
    return admin->port;
}

void echod_admin_set_serving(echod_admin_t *admin)
{
    int starting = ECHOD_ADMIN_STARTING;
    atomic_compare_exchange_strong(&admin->state, &starting, ECHOD_ADMIN_SERVING);
}

void echod_admin_set_draining(echod_admin_t *admin)
{
    atomic_store_explicit(&admin->state, ECHOD_ADMIN_DRAINING, memory_order_relaxed);
}

void echod_admin_stop(echod_admin_t *admin)
{
    if (admin == NULL)
        return;
    atomic_store_explicit(&admin->stopping, 1, memory_order_release);
    /* A NULL message only writes to the loop's wake-up pipe; the loop then sees `stopping`. */
    h2o_multithread_send_message(&admin->wake, NULL);
    sem_post(&admin->woken);
    pthread_join(admin->thread, NULL);
    sem_destroy(&admin->ready);
    sem_destroy(&admin->woken);
    free(admin);
}
