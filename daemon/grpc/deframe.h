/*
 * gRPC message framing: 1 flag byte, 4-byte big-endian length, payload. The deframer turns
 * the DATA bytes of one stream, split and merged any way the peer likes, into whole messages.
 *
 * Each message keeps its 5-byte prefix in front of the payload, so a handler that echoes a
 * message can send the very same buffer back (same flag, same length): no re-encoding.
 *
 * Owned by one stream; called on that stream's loop thread only. Messages popped from it are
 * owned by the caller and may then move to any thread.
 *
 * Messages come from the calling thread's pool (echod_pool_thread_malloc: the loop's pool on a
 * loop thread, malloc elsewhere) and echod_msg_free may be called on any thread: a message
 * goes back to its loop's pool when freed on that loop's thread, to free() anywhere else.
 */
#ifndef ECHOD_DEFRAME_H
#define ECHOD_DEFRAME_H

#include <stddef.h>
#include <stdint.h>

#define ECHOD_GRPC_PREFIX 5

typedef struct echod_msg echod_msg_t;
struct echod_msg {
    echod_msg_t *next; /* free for the owner's queues */
    uint32_t len;      /* payload length */
    uint8_t frame[];   /* ECHOD_GRPC_PREFIX + len bytes: flag, length, payload */
};

/* A message whose payload is `len` bytes, prefix filled in (flag 0), payload uninitialised.
 * Out of memory aborts (util/err.h), here and in the deframer. */
echod_msg_t *echod_msg_new(uint32_t len);
/* Rewrites the 5-byte prefix (flag, length) and msg->len: a message may shrink in place, never grow. */
void echod_msg_set_prefix(echod_msg_t *msg, uint8_t flag, uint32_t len);
/* A copy of data as an uncompressed message; NULL when len does not fit a gRPC frame (4 GiB). */
echod_msg_t *echod_msg_from(const void *data, size_t len);
/* Any thread; NULL is a no-op. */
void echod_msg_free(echod_msg_t *msg);
static inline uint8_t *echod_msg_payload(echod_msg_t *msg)
{
    return msg->frame + ECHOD_GRPC_PREFIX;
}
static inline size_t echod_msg_frame_len(const echod_msg_t *msg)
{
    return ECHOD_GRPC_PREFIX + (size_t)msg->len;
}

typedef enum {
    ECHOD_DEFRAME_OK = 0,
    ECHOD_DEFRAME_TOO_LARGE,  /* declared length above the limit: RESOURCE_EXHAUSTED */
    ECHOD_DEFRAME_COMPRESSED, /* flag bit 0 set with no grpc-encoding in use: INTERNAL */
    ECHOD_DEFRAME_BAD_FLAGS,  /* reserved flag bits set: INTERNAL */
} echod_deframe_status_t;

typedef struct {
    uint32_t max_message; /* payload bytes */
    int allow_compressed; /* nonzero when the call's grpc-encoding is gzip or deflate (grpc/codec.h inflates) */
    uint8_t prefix[ECHOD_GRPC_PREFIX];
    size_t prefix_have;
    echod_msg_t *cur; /* message being filled, after its prefix was read */
    size_t cur_have;
    echod_msg_t *head, *tail;     /* complete messages not yet popped */
    size_t count;                 /* complete messages queued */
    echod_deframe_status_t error; /* sticky */
    uint32_t error_len;           /* the declared length, for TOO_LARGE messages */
} echod_deframer_t;

void echod_deframer_init(echod_deframer_t *d, uint32_t max_message);

/* Consumes len bytes. Returns OK or the first (sticky) error; bytes after an error are ignored. */
echod_deframe_status_t echod_deframer_feed(echod_deframer_t *d, const uint8_t *data, size_t len);

/* The oldest complete message, or NULL. Ownership passes to the caller. */
echod_msg_t *echod_deframer_pop(echod_deframer_t *d);

/* Nonzero when a message has started but is not complete (END_STREAM now would be an error). */
int echod_deframer_partial(const echod_deframer_t *d);

/* Frees queued and partial messages. */
void echod_deframer_dispose(echod_deframer_t *d);

#endif
