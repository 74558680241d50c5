/*
 * The grpc-encoding values and the outcomes of inflating a message, as enums with their label
 * values (indexed by the enum; grpc/codec.c defines them and asserts one per value). A leaf: what
 * counts them (metrics/metrics.h) needs these and not the codec.
 */
#ifndef ECHOD_ENCODING_H
#define ECHOD_ENCODING_H

typedef enum {
    ECHOD_ENCODING_IDENTITY = 0,
    ECHOD_ENCODING_GZIP,
    ECHOD_ENCODING_DEFLATE,
    ECHOD_ENCODING__COUNT
} echod_encoding_t;
extern const char *const echod_encoding_names[]; /* "identity", "gzip", "deflate" */

typedef enum {
    ECHOD_INFLATE_OK = 0,
    ECHOD_INFLATE_TOO_LARGE, /* decompressed size above the cap: RESOURCE_EXHAUSTED */
    ECHOD_INFLATE_CORRUPT,   /* not a valid stream of the encoding (or bytes after its end): INTERNAL */
    ECHOD_INFLATE_TRUNCATED, /* the message ended before the compressed stream did: INTERNAL */
    ECHOD_INFLATE__COUNT
} echod_inflate_status_t;
extern const char *const echod_inflate_status_names[]; /* "ok", "too_large", ...: label values */

#endif
