/*
 * Where the HTTP/2 frames begin in what a client sends: the frame headers of a connection's
 * input, found ahead of nghttp2 so that the connection can look at each frame before nghttp2
 * reads it (transport/stream_ids.h says why). Only the framing: the client preface is skipped,
 * each 9-byte header is read (also across reads) and its payload skipped; nothing is checked,
 * nghttp2 does that. Loop thread only (one per connection).
 *
 * On the path of every frame received: the common case (the next header whole in this read) is
 * inline, the rest (a header split across reads, a payload that runs past the read) is not.
 */
#ifndef ECHOD_FRAME_SCAN_H
#define ECHOD_FRAME_SCAN_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <nghttp2/nghttp2.h>

#define ECHOD_FRAME_HEADER 9

typedef struct {
    uint32_t skip;                  /* bytes before the next frame header: the preface, then payloads */
    uint8_t hd[ECHOD_FRAME_HEADER]; /* a header split across reads */
    uint8_t have;                   /* bytes of it in hd */
    uint8_t in_block;               /* inside a header block (HEADERS without END_HEADERS, CONTINUATIONs) */
} echod_frame_scan_t;

typedef struct {
    uint32_t length;
    uint8_t type, flags;
    int32_t stream_id;
    int in_block; /* the frame came inside a header block: a CONTINUATION, or nghttp2's error */
} echod_frame_hd_t;

/* A server connection's scanner: the client preface comes first. */
void echod_frame_scan_init(echod_frame_scan_t *fs);

/* A whole header at h: into *hd, and the scanner past it. */
static inline void echod_frame_scan__header(echod_frame_scan_t *fs, const uint8_t *h, echod_frame_hd_t *hd)
{
    uint32_t w;
    memcpy(&w, h, 4);
    w = __builtin_bswap32(w); /* length (24 bits), type */
    hd->length = w >> 8;
    hd->type = (uint8_t)w;
    hd->flags = h[4];
    memcpy(&w, h + 5, 4);
    hd->stream_id = (int32_t)(__builtin_bswap32(w) & 0x7fffffffu);
    hd->in_block = fs->in_block;
    if (hd->type == NGHTTP2_HEADERS || hd->type == NGHTTP2_PUSH_PROMISE || hd->type == NGHTTP2_CONTINUATION)
        fs->in_block = !(hd->flags & NGHTTP2_FLAG_END_HEADERS);
    fs->skip = hd->length;
}

int echod_frame_scan__slow(echod_frame_scan_t *fs, const uint8_t **p, const uint8_t *end, echod_frame_hd_t *hd);

/* Reads from *p up to the end of the next complete frame header, which goes to *hd, and returns 1
 * (*p then points just past the header: its last byte is (*p)[-1]); or reads up to end and
 * returns 0. */
static inline int echod_frame_scan(echod_frame_scan_t *fs, const uint8_t **p, const uint8_t *end, echod_frame_hd_t *hd)
{
    if (fs->have == 0) {
        size_t left = (size_t)(end - *p);
        if (left <= fs->skip) { /* the payload runs to the end of this read, or past it */
            fs->skip -= (uint32_t)left;
            *p = end;
            return 0;
        }
        if (left - fs->skip >= ECHOD_FRAME_HEADER) {
            const uint8_t *h = *p + fs->skip;
            echod_frame_scan__header(fs, h, hd);
            *p = h + ECHOD_FRAME_HEADER;
            return 1;
        }
    }
    return echod_frame_scan__slow(fs, p, end, hd); /* a header split across reads */
}

#endif
