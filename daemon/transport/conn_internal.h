/*
 * What a stream uses of its connection: the session, the touched list, the flush scheduling
 * and flow control. Private to the transport (stream.c, and conn.c behind them); the rest of the
 * daemon sees the connection through transport/conn.h only. Loop thread only.
 */
#ifndef ECHOD_CONN_INTERNAL_H
#define ECHOD_CONN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "transport/conn.h"

struct echod_stream;
struct nghttp2_session;

struct echod_loop *echod_conn__loop(echod_conn_t *conn);
struct nghttp2_session *echod_conn__session(echod_conn_t *conn);
int echod_conn__closed(const echod_conn_t *conn);
/* A reference for a new stream (echod_conn_release drops it). */
void echod_conn__hold(echod_conn_t *conn);
/* Puts the stream on the list that conn_process pumps (once, holding a reference). */
void echod_conn__touch(echod_conn_t *conn, struct echod_stream *s);
/* Something was queued in nghttp2: schedule the flush the policy asks for. */
void echod_conn__dirty(echod_conn_t *conn);
/* Pumps every touched stream now (outside nghttp2 callbacks). */
void echod_conn__process(echod_conn_t *conn);
/* transport.flush=immediate after a status: flush now, or after the current read or pump. */
void echod_conn__flush_immediate(echod_conn_t *conn);
/* Returns n received bytes of a stream to the flow-control window. */
void echod_conn__consume(echod_conn_t *conn, int32_t stream_id, size_t n);

#endif
