/*
 * Which client stream ids a connection has used, for RFC 9113 section 5.1.1: a HEADERS frame
 * with an id below the highest one used must open a new stream only if that id was skipped, and
 * then it is a connection error (PROTOCOL_ERROR). nghttp2 cannot tell: with
 * no_closed_streams it forgets a stream once closed, so an id it does not know may have been
 * used (frames on it are ignored, which RFC 9113 section 5.1 allows) or never (an error).
 *
 * Clients number their streams 1, 3, 5, ... so a connection normally has no gap at all; the
 * last ECHOD_STREAM_IDS_GAPS gaps are kept (fixed size, no allocation) and an id in an older
 * gap is taken as used (ignored), never as an error. Loop thread only (one per connection).
 */
#ifndef ECHOD_STREAM_IDS_H
#define ECHOD_STREAM_IDS_H

#include <stdint.h>

#define ECHOD_STREAM_IDS_GAPS 8

typedef struct {
    int32_t lo, hi; /* skipped odd ids lo..hi, both odd, lo <= hi */
} echod_stream_ids_gap_t;

typedef struct {
    int32_t last;  /* highest client stream id seen in a HEADERS frame (0: none yet) */
    uint32_t gaps; /* gaps recorded so far; the ring holds the last ECHOD_STREAM_IDS_GAPS */
    echod_stream_ids_gap_t gap[ECHOD_STREAM_IDS_GAPS];
} echod_stream_ids_t;

typedef enum {
    ECHOD_STREAM_ID_NEW,     /* above every id used: a new stream (recorded as used) */
    ECHOD_STREAM_ID_USED,    /* at or below the highest, used (or in a forgotten gap) */
    ECHOD_STREAM_ID_SKIPPED, /* at or below the highest and never used: PROTOCOL_ERROR */
} echod_stream_id_kind_t;

/* Classifies the odd (client) stream id of a HEADERS frame; a new id becomes the highest. */
echod_stream_id_kind_t echod_stream_ids_headers(echod_stream_ids_t *ids, int32_t id);

#endif
