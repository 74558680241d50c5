#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include "util/h2o_compat.h"
#include "util/err.h"
#include "util/http1.h"

static void on_conn_close(void *data)
{
    echod_http1_conn_t *conn = data;
    echod_http1_t *s = conn->server;
    h2o_linklist_unlink(&conn->link);
    free(conn);
    if (s->cfg.on_close != NULL)
        s->cfg.on_close(s);
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
    echod_http1_t *s = listener->data;
    if (err != NULL)
        return;
    for (int i = 0; i < s->cfg.accept_batch; ++i) {
        h2o_socket_t *sock = h2o_evloop_socket_accept(listener);
        if (sock == NULL)
            break;
        /* zeroed: h2o_linklist_insert wants an unlinked node */
        echod_http1_conn_t *conn = echod_must(calloc(1, sizeof(*conn)), "HTTP/1.1 connection");
        conn->sock = sock;
        conn->server = s;
        h2o_linklist_insert(&s->conns, &conn->link);
        if (s->cfg.on_open != NULL)
            s->cfg.on_open(s);
        if (s->cfg.tcp_nodelay) {
            int one = 1;
            setsockopt(h2o_socket_get_fd(sock), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        /* h2o's HTTP/1 code leaves on_close alone; it fires from h2o_socket_close however that is reached. */
        sock->on_close.cb = on_conn_close;
        sock->on_close.data = conn;
        h2o_accept(&s->accept_ctx, sock);
    }
}

void echod_http1_init(echod_http1_t *s, h2o_evloop_t *loop, int listen_fd, const echod_http1_config_t *cfg)
{
    s->cfg = *cfg;
    h2o_linklist_init_anchor(&s->conns);
    h2o_config_init(&s->globalconf);
    s->globalconf.server_name = h2o_iovec_init(H2O_STRLIT("echod"));
    if (cfg->max_request_body != 0)
        s->globalconf.max_request_entity_size = cfg->max_request_body;
    /* HTTP/1.1 only: h2o's HTTP/2 server needs a graceful-shutdown dance stop does not do. */
    s->globalconf.http1.upgrade_to_http2 = 0;
    h2o_hostconf_t *host = h2o_config_register_host(&s->globalconf, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    echod_http1_handler_t *handler = (echod_http1_handler_t *)h2o_create_handler(path, sizeof(*handler));
    handler->super.on_req = cfg->on_req;
    handler->owner = cfg->owner;
    h2o_context_init(&s->ctx, loop, &s->globalconf);
    s->accept_ctx.ctx = &s->ctx;
    s->accept_ctx.hosts = s->globalconf.hosts;
    /* h2o_evloop_socket_create makes the fd nonblocking itself. */
    s->listener = h2o_evloop_socket_create(loop, listen_fd, H2O_SOCKET_FLAG_DONT_READ);
    s->listener->data = s;
    h2o_socket_read_start(s->listener, on_accept);
}

void echod_http1_stop_accepting(echod_http1_t *s)
{
    if (s->listener == NULL)
        return;
    h2o_socket_read_stop(s->listener);
    h2o_socket_close(s->listener);
    s->listener = NULL;
    /*
     * h2o 2.2.5's HTTP/1 code reads this flag as it parses each request and then answers with
     * Connection: close. Set directly: h2o_context_request_shutdown would also arm HTTP/2's
     * GOAWAY timer in the context, which h2o_context_dispose then asserts is idle.
     */
    s->ctx.shutdown_requested = 1;
}

/* A client that sends into the close anyway is the race every HTTP/1.1 server has. */
static int conn_is_idle(const echod_http1_conn_t *conn)
{
    h2o_socket_t *sock = conn->sock;
    if (!h2o_socket_is_reading(sock) || h2o_socket_is_writing(sock) || sock->input->size != 0)
        return 0;
    int pending = 0;
    return ioctl(h2o_socket_get_fd(sock), FIONREAD, &pending) == 0 && pending == 0;
}

void echod_http1_shut(echod_http1_t *s, int idle_only)
{
    for (h2o_linklist_t *node = s->conns.next; node != &s->conns; node = node->next) {
        echod_http1_conn_t *conn = H2O_STRUCT_FROM_MEMBER(echod_http1_conn_t, link, node);
        if (conn->shut || (idle_only && !conn_is_idle(conn)))
            continue;
        conn->shut = 1;
        shutdown(h2o_socket_get_fd(conn->sock), SHUT_RDWR);
    }
}

int echod_http1_is_empty(echod_http1_t *s)
{
    return h2o_linklist_is_empty(&s->conns);
}

int echod_http1_dispose(echod_http1_t *s)
{
    if (s->listener != NULL || !h2o_linklist_is_empty(&s->conns))
        return -1;
    h2o_multithread_queue_t *ctx_queue = s->ctx.queue;
    h2o_context_dispose(&s->ctx);
    echod_h2o_free_queue(ctx_queue); /* h2o 2.2 closes the context queue's pipe but never frees it */
    h2o_config_dispose(&s->globalconf);
    return 0;
}
