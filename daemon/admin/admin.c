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

#include "admin/admin.h"
#include "admin/stage.h"
#include "metrics/exposition.h"
#include "util/h2o_compat.h"
#include "util/http1.h"
#include "util/err.h"
#include "util/listen.h"
#include "util/log.h"

/* How long stop waits for open admin connections to wind down before giving up on them. */
#define ADMIN_DRAIN_MS 2000

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
    echod_http1_t http;
    h2o_multithread_queue_t *queue;
    h2o_multithread_receiver_t wake;
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
    if (!echod_stage_name_ok(name, strlen(name))) {
        respond_text(req, 400, "Bad Request", "expected ?stage=NAME, 1-100 characters of [A-Za-z0-9._:-]\n");
        return 0;
    }
    echod_stage_mark(name);
    respond_text(req, 200, "OK", "marked\n");
    return 0;
}

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    echod_admin_t *admin = ((echod_http1_handler_t *)self)->owner;

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
        /* acquire, against set_serving's seq_cst CAS: a 200 is answered only after what main
         * started before it (the loops) is visible here, as a /metrics scrape after it expects */
        echod_admin_state_t state = atomic_load_explicit(&admin->state, memory_order_acquire);
        if (state == ECHOD_ADMIN_SERVING)
            respond_text(req, 200, "OK", "ready\n");
        else
            respond_text(req, 503, "Service Unavailable", state == ECHOD_ADMIN_STARTING ? "starting\n" : "draining\n");
    }
    return 0;
}

/* -------------------------------------------------------------------------------------------- */
/* connections */

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
    admin->queue = h2o_multithread_create_queue(admin->loop);
    h2o_multithread_register_receiver(admin->queue, &admin->wake, on_wake);
    /* Accepts bounded per wake-up, so a connect storm cannot starve the wake-up pipe of this loop. */
    echod_http1_config_t cfg = {.on_req = on_req, .owner = admin, .accept_batch = 16};
    echod_http1_init(&admin->http, admin->loop, admin->fd, &cfg);
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void teardown(echod_admin_t *admin)
{
    echod_http1_stop_accepting(&admin->http);
    /* An idle keep-alive connection would otherwise sit in the context's request timeout list
     * for 10 s, and disposing the context with it there trips an assertion. */
    echod_http1_shut(&admin->http, 0);
    uint64_t deadline = now_ms() + ADMIN_DRAIN_MS;
    while (!echod_http1_is_empty(&admin->http) && now_ms() < deadline)
        h2o_evloop_run(admin->loop, 10);

    h2o_multithread_unregister_receiver(admin->queue, &admin->wake);
    h2o_multithread_destroy_queue(admin->queue);
    echod_h2o_free_queue(admin->queue);
    admin->queue = NULL;

    if (echod_http1_dispose(&admin->http) != 0) {
        /* Disposing now would assert inside h2o; leaking a stuck connection at exit is the lesser evil. */
        echod_warn("admin: connections still open after %d ms; not freeing the admin server", ADMIN_DRAIN_MS);
        return;
    }
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

echod_admin_t *echod_admin_start(const char *addr, char *err, size_t errlen)
{
    echod_admin_t *admin = echod_must(calloc(1, sizeof(*admin)), "admin listener");
    snprintf(admin->addr, sizeof(admin->addr), "%s", addr);
    char why[256];
    if ((admin->fd = echod_listen(addr, ECHOD_LISTEN_NONBLOCK, &admin->port, why, sizeof(why))) == -1) {
        snprintf(err, errlen, "admin listener %s", why);
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

/* What /readyz answers, process-wide for scrapes (echod_ready, echod_draining): copies of the
 * last state set, which guard nothing. */
static _Atomic int readiness_ready, readiness_draining;

static void set_readiness(int ready, int draining)
{
    atomic_store_explicit(&readiness_ready, ready, memory_order_relaxed);
    atomic_store_explicit(&readiness_draining, draining, memory_order_relaxed);
}

void echod_admin_readiness(int *ready, int *draining)
{
    *ready = atomic_load_explicit(&readiness_ready, memory_order_relaxed);
    *draining = atomic_load_explicit(&readiness_draining, memory_order_relaxed);
}

void echod_admin_set_serving(echod_admin_t *admin)
{
    int starting = ECHOD_ADMIN_STARTING;
    if (atomic_compare_exchange_strong(&admin->state, &starting, ECHOD_ADMIN_SERVING))
        set_readiness(1, 0);
}

void echod_admin_set_draining(echod_admin_t *admin)
{
    atomic_store_explicit(&admin->state, ECHOD_ADMIN_DRAINING, memory_order_relaxed);
    set_readiness(0, 1);
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
