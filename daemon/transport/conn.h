/*
 * One HTTP/2 connection: its socket (TCP or TLS), its nghttp2 session, the list of its streams
 * (transport/stream.h), its write queue with the flush policy (docs/dispatch-model.md), its
 * timers, GOAWAY and drain. Loop thread only, except echod_conn_release (a call, and so its
 * stream, may be freed on a worker).
 *
 * Rule: nghttp2 callbacks only record what happened and "touch" the stream; steps are submitted
 * afterwards by echod_stream_pump, outside nghttp2 (which must not be re-entered from callbacks).
 */
#ifndef ECHOD_CONN_H
#define ECHOD_CONN_H

#include <h2o/socket.h>
#include "transport/events.h"
#include "transport/loop.h"

typedef struct echod_conn echod_conn_t;

/* Takes over an accepted socket (TLS handshake first when the server has a context). */
void echod_conn_accept(echod_loop_t *loop, h2o_socket_t *sock);

/* Flushes if anything is queued, counting it under trigger. */
void echod_conn_flush(echod_conn_t *conn, echod_flush_trigger_t trigger);

/* After a task batch: flushes a connection the batch wrote to; returns the next one dirtied. */
echod_conn_t *echod_conn_flush_batch(echod_conn_t *conn);

/*
 * io.read_batch netty: moves the connections read in the last h2o run to the end of the loop's
 * read batch, oldest first; returns how many the run read.
 */
size_t echod_conn_take_reads(echod_loop_t *loop);

/* io.read_batch netty: serves the read batch, oldest first (each read as the h2o order serves it
 * in its callback, read_complete flush included); returns how many connections it served. */
size_t echod_conn_serve_reads(echod_loop_t *loop);

/* Graceful GOAWAY (notice, PING, final); the connection closes once its streams are done. */
void echod_conn_goaway(echod_conn_t *conn);

/* Shutdown: marks the open streams (counted as finished or cut later), then GOAWAY. Returns how many. */
size_t echod_conn_begin_drain(echod_conn_t *conn);

/* shutdown.drain_timeout passed: every stream still open ends with UNAVAILABLE. */
void echod_conn_cut(echod_conn_t *conn);

/* Closes at once, cancelling every call. */
void echod_conn_abort(echod_conn_t *conn);

/* Drops a call's reference to its connection. Any thread. */
void echod_conn_release(echod_conn_t *conn);

/* Loop thread: the conn behind a linklist node of echod_loop_t.conns. */
echod_conn_t *echod_conn_from_link(h2o_linklist_t *link);

#endif
