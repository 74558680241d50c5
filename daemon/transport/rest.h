/*
 * The REST control arm (listen.rest): an HTTP/1.1 echo served by libh2o's own HTTP/1.1 server on
 * an I/O loop's evloop, beside that loop's gRPC connections. It does not go through the dispatch
 * model (no executor, no serializer, no call accounting): it is the untouched baseline a capacity
 * study compares the gRPC arms against.
 *   POST /echo               200, the request body back; content-type: the request's, else
 *                            application/octet-stream
 *   GET|HEAD /echo?message=T 200, T percent-decoded ('+' is a space), text/plain
 *   anything else            404 (other paths), 405 with Allow (other methods on /echo),
 *                            400 (no or malformed message), 413 (body above 4 MiB)
 * Keep-alive and pipelining are h2o's. No HTTP/2: an h2c Upgrade header is ignored (the request is
 * answered over HTTP/1.1) and a prior-knowledge preface gets h2o's 400 and a close.
 *
 * Threading: everything except echod_rest_stats runs on the thread of the evloop given to
 * echod_rest_start, and must not be called while that evloop is being run by another thread.
 */
#ifndef ECHOD_REST_H
#define ECHOD_REST_H

#include <stddef.h>
#include <stdint.h>
#include <h2o/socket.h>
#include "transport/events.h" /* echod_rest_status_t: the statuses echod_rest_stats counts */

/* The largest request body accepted; one byte more is answered 413 and the connection closed. */
#define ECHOD_REST_MAX_BODY (4u * 1024 * 1024)

typedef struct echod_rest echod_rest_t;

typedef struct {
    /*
     * Including the 413 and the 400 (broken body framing) h2o sends by itself, but not its 400
     * for a request it cannot parse at all: 2.2.5 counts those nowhere.
     */
    uint64_t responses[ECHOD_REST_STATUS_MAX];
    uint64_t connections_accepted;
    uint64_t connections_open;
    uint64_t body_bytes_in;  /* request bodies echoed by POST */
    uint64_t body_bytes_out; /* response bodies of 200s (HEAD counts none) */
} echod_rest_stats_t;

/*
 * Loop thread: serves HTTP/1.1 on listen_fd (bound and listening; made nonblocking here) with
 * loop. On success the fd belongs to rest (closed by the first echod_rest_stop); on failure
 * (NULL, err filled) it is still the caller's.
 */
echod_rest_t *echod_rest_start(h2o_evloop_t *loop, int listen_fd, char *err, size_t errlen);

/*
 * Loop thread: stops accepting, makes every later response end its connection, and closes the
 * connections that are idle (between keep-alive requests); a connection mid-request is left to
 * finish and is closed once idle. Returns nonzero once every connection is gone: call it again
 * (from a timer or between loop iterations) until then. Connections close on the loop's next
 * iteration, so the first call returns nonzero only if none was open.
 */
int echod_rest_stop(echod_rest_t *rest);

/*
 * Loop thread, after echod_rest_stop: shuts every connection down whatever it is doing (a client
 * that stopped reading mid-response would otherwise hold stop off forever), for a drain deadline.
 * Keep calling echod_rest_stop until it returns nonzero, normally on the next loop iteration.
 */
void echod_rest_abort(echod_rest_t *rest);

/*
 * Loop thread, after echod_rest_stop returned nonzero: frees the h2o context and config, and
 * empties this thread's h2o request-pool and socket-buffer caches (see rest.c). The evloop must
 * run once more (or be destroyed) to free the sockets closed by stop; it stays the caller's.
 */
void echod_rest_dispose(echod_rest_t *rest);

/* Any thread, until dispose: a snapshot of the counters (each one read atomically). */
void echod_rest_stats(const echod_rest_t *rest, echod_rest_stats_t *out);

#endif
