/*
 * What a connection knows of its client's stream ids, in a fixed size whatever the number of
 * streams, to answer frames on closed streams as RFC 9113 section 5.1 asks
 * (docs/http2-conformance.md, "Closed streams").
 *
 * nghttp2 runs with no_closed_streams: it forgets a stream when it closes, and a frame on an id
 * it does not know is ignored. RFC 9113 5.1.1 needs no record per stream to know such an id is
 * closed: every client id at or below the highest one opened, and not open now, is closed,
 * skipped ids included. What the answer depends on is how the stream closed:
 *   - echod sent RST_STREAM while the client could still send: the client may have sent frames
 *     before it read the reset, and they must be discarded (RFC 9113 5.1, "closed"). Such ids
 *     are kept as two ranges, until a PING sent after the resets comes back: the client has
 *     read them then, and a frame after the ack is its error like any other;
 *   - above the last-stream-id of a GOAWAY echod sent: discarded (RFC 9113 6.8);
 *   - a HEADERS frame on an id the client skipped: it would open a stream below the highest,
 *     a connection error PROTOCOL_ERROR (5.1.1; the last ECHOD_STREAM_IDS_GAPS gaps are kept,
 *     an older one counts as a closed stream);
 *   - otherwise the client itself ended the stream (END_STREAM, RST_STREAM) or never opened it:
 *     DATA or HEADERS on it is a connection error STREAM_CLOSED (RFC 9113 5.1 allows it for any
 *     frame but PRIORITY; nghttp2 answers so for the closed streams it keeps). WINDOW_UPDATE,
 *     RST_STREAM and PRIORITY stay nghttp2's: ignored, as 5.1 allows after echod's END_STREAM.
 *
 * A frame must be classified with nghttp2's state as it is just before nghttp2 reads that frame,
 * which may be in the middle of a read. The connection scans each read for frame headers
 * (transport/frame_scan.h) and asks echod_stream_ids_scan about each; nghttp2 reads the bytes in
 * chunks that end where a frame needs its stream looked up after the frames before it.
 *
 * Loop thread only (one per connection).
 */
#ifndef ECHOD_STREAM_IDS_H
#define ECHOD_STREAM_IDS_H

#include <stdint.h>
#include <nghttp2/nghttp2.h>
#include "transport/events.h"

#define ECHOD_STREAM_IDS_GAPS 8

typedef struct {
    int32_t lo, hi; /* lo > hi: empty */
} echod_stream_id_range_t;

typedef struct {
    int32_t last;  /* highest client stream id of a HEADERS frame (-1: none yet, the next is last + 2) */
    uint32_t gaps; /* gaps recorded so far; the ring holds the last ECHOD_STREAM_IDS_GAPS */
    echod_stream_id_range_t gap[ECHOD_STREAM_IDS_GAPS]; /* skipped odd ids */
    /* streams echod reset while the client could still send: covered by the PING in flight,
     * and reset since it was sent */
    echod_stream_id_range_t reset_pinged, reset_new;
    int32_t goaway_last; /* last-stream-id of the GOAWAY sent (INT32_MAX: none, or the notice) */
    /* the chunk: frames scanned since nghttp2 last read everything before them */
    int32_t chunk_last;                /* `last` when it began: ids above it were opened in it */
    echod_stream_id_range_t chunk_end; /* ids a frame in it may have ended (END_STREAM, RST_STREAM) */
    unsigned chunk_gap : 1;            /* a HEADERS frame in it skipped ids */
    unsigned ping_out : 1;             /* the PING for reset_pinged is in flight */
} echod_stream_ids_t;

void echod_stream_ids_init(echod_stream_ids_t *ids);

/* What a frame needs before nghttp2 reads it. */
typedef enum {
    ECHOD_FRAME_PASS,   /* nothing: not on a client stream that may be closed */
    ECHOD_FRAME_LOOKUP, /* its stream was open before the chunk began, if nghttp2 has it now; else STOP */
    ECHOD_FRAME_STOP,   /* nghttp2 reads the chunk first; then, if it has no open stream of that id,
                           echod_stream_ids_closed answers */
} echod_frame_need_t;

static inline int echod_stream_ids__in(echod_stream_id_range_t r, int32_t id)
{
    return id >= r.lo && id <= r.hi;
}

static inline void echod_stream_ids__widen(echod_stream_id_range_t *r, int32_t id)
{
    if (r->lo > r->hi)
        r->lo = r->hi = id;
    else if (id < r->lo)
        r->lo = id;
    else if (id > r->hi)
        r->hi = id;
}

void echod_stream_ids__gap(echod_stream_ids_t *ids, int32_t id);

/* A frame header, in wire order, before nghttp2 reads the frame (not for CONTINUATION frames of
 * a header block, nor frames inside one: nghttp2's to refuse). A HEADERS frame on a new id makes
 * it the highest. Inline: it sees every frame the client sends. */
static inline echod_frame_need_t echod_stream_ids_scan(echod_stream_ids_t *ids, uint8_t type, uint8_t flags, int32_t id)
{
    /* the connection's and the server's ids, and the frames that neither open nor end a stream:
     * nghttp2's to answer */
    if ((id & 1) == 0 || (type != NGHTTP2_DATA && type != NGHTTP2_HEADERS && type != NGHTTP2_RST_STREAM))
        return ECHOD_FRAME_PASS;
    echod_frame_need_t need = ECHOD_FRAME_PASS;
    if (id > ids->last) {
        if (type != NGHTTP2_HEADERS)
            return ECHOD_FRAME_PASS; /* an idle stream: nghttp2's (PROTOCOL_ERROR) */
        if (id != ids->last + 2)
            echod_stream_ids__gap(ids, id);
        ids->last = id;
    } else if (type != NGHTTP2_RST_STREAM) {
        /* above chunk_last, with no gap in the chunk: a HEADERS frame of this chunk opened it (or
         * nghttp2 refused it, and then drops the frame as it must: the reset is echod's) */
        if (echod_stream_ids__in(ids->chunk_end, id) || (id > ids->chunk_last && ids->chunk_gap))
            need = ECHOD_FRAME_STOP;
        else if (id <= ids->chunk_last)
            need = ECHOD_FRAME_LOOKUP;
    }
    if (type == NGHTTP2_RST_STREAM || (flags & NGHTTP2_FLAG_END_STREAM))
        echod_stream_ids__widen(&ids->chunk_end, id);
    return need;
}

/* nghttp2 has read every frame scanned so far: a new chunk begins. */
static inline void echod_stream_ids_fed(echod_stream_ids_t *ids)
{
    ids->chunk_last = ids->last;
    ids->chunk_end = (echod_stream_id_range_t){1, 0};
    ids->chunk_gap = 0;
}

/* After a STOP: a new chunk begins at that frame, which is scanned into it again. */
void echod_stream_ids_restart(echod_stream_ids_t *ids, uint8_t flags, int32_t id);

/* The answer to a DATA or HEADERS frame on a client id at or below the highest, which nghttp2
 * does not have open. */
echod_closed_frame_t echod_stream_ids_closed(const echod_stream_ids_t *ids, uint8_t type, int32_t id);

/* echod sent RST_STREAM on client stream id while the client could still send on it.
 * 1: send the PING that will tell when the client has read it (none is in flight). */
int echod_stream_ids_reset_sent(echod_stream_ids_t *ids, int32_t id);

/* The client acked that PING. 1: send another, for the resets sent since the first one. */
int echod_stream_ids_ping_acked(echod_stream_ids_t *ids);

/* A GOAWAY went out with this last-stream-id. */
void echod_stream_ids_goaway_sent(echod_stream_ids_t *ids, int32_t last_stream_id);

#endif
