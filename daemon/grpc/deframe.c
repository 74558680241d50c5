#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "grpc/deframe.h"
#include "util/pool.h"
#include "util/err.h"

/* Bit 0 is the only flag gRPC defines; the rest must be zero so that future meanings are not misread. */
#define DEFRAME_FLAG_COMPRESSED 0x01u

static void deframe_write_prefix(uint8_t *p, uint8_t flag, uint32_t len)
{
    p[0] = flag;
    p[1] = (uint8_t)(len >> 24);
    p[2] = (uint8_t)(len >> 16);
    p[3] = (uint8_t)(len >> 8);
    p[4] = (uint8_t)len;
}

/* Never NULL: out of memory aborts (util/err.h). */
static echod_msg_t *deframe_alloc(uint32_t len)
{
#if SIZE_MAX <= UINT32_MAX
    /* On 32-bit targets a payload near 4 GiB would wrap the size passed to malloc. */
    if (len > SIZE_MAX - sizeof(echod_msg_t) - ECHOD_GRPC_PREFIX)
        echod_oom("gRPC message");
#endif
    /* The thread's pool on a loop (a read batch allocates many messages, and glibc's thread cache
     * holds 7 blocks of a size: the rest went to _int_free), malloc on a worker. */
    echod_msg_t *msg =
        echod_must(echod_pool_thread_malloc(sizeof(echod_msg_t) + ECHOD_GRPC_PREFIX + (size_t)len), "gRPC message");
    msg->next = NULL;
    msg->len = len;
    return msg;
}

echod_msg_t *echod_msg_new(uint32_t len)
{
    echod_msg_t *msg = deframe_alloc(len);
    deframe_write_prefix(msg->frame, 0, len);
    return msg;
}

void echod_msg_set_prefix(echod_msg_t *msg, uint8_t flag, uint32_t len)
{
    msg->len = len;
    deframe_write_prefix(msg->frame, flag, len);
}

echod_msg_t *echod_msg_from(const void *data, size_t len)
{
#if SIZE_MAX > UINT32_MAX
    /* The wire length is 32 bits: a bigger buffer cannot be one gRPC message. */
    if (len > UINT32_MAX)
        return NULL;
#endif
    echod_msg_t *msg = echod_msg_new((uint32_t)len);
    /* memcpy from NULL is undefined even for 0 bytes, and callers pass (NULL, 0) for empty messages. */
    if (msg != NULL && len != 0)
        memcpy(echod_msg_payload(msg), data, len);
    return msg;
}

void echod_msg_free(echod_msg_t *msg)
{
    echod_pool_release(msg);
}

void echod_deframer_init(echod_deframer_t *d, uint32_t max_message)
{
    memset(d, 0, sizeof(*d));
    d->max_message = max_message;
}

static void deframe_enqueue(echod_deframer_t *d, echod_msg_t *msg)
{
    msg->next = NULL;
    if (d->tail != NULL)
        d->tail->next = msg;
    else
        d->head = msg;
    d->tail = msg;
    d->count++;
}

static echod_deframe_status_t deframe_fail(echod_deframer_t *d, echod_deframe_status_t error, uint32_t len)
{
    d->error = error;
    d->error_len = len;
    return error;
}

/*
 * Validates a complete prefix and allocates the message it announces. Everything is checked before malloc so
 * that a hostile length costs nothing; the prefix stays in d->prefix after an error, as the message did start.
 */
static echod_deframe_status_t deframe_start(echod_deframer_t *d)
{
    uint8_t flag = d->prefix[0];
    uint32_t len = (uint32_t)d->prefix[1] << 24 | (uint32_t)d->prefix[2] << 16 | (uint32_t)d->prefix[3] << 8 |
                   (uint32_t)d->prefix[4];

    if ((flag & ~DEFRAME_FLAG_COMPRESSED) != 0)
        return deframe_fail(d, ECHOD_DEFRAME_BAD_FLAGS, 0);
    if ((flag & DEFRAME_FLAG_COMPRESSED) != 0 && !d->allow_compressed)
        return deframe_fail(d, ECHOD_DEFRAME_COMPRESSED, 0);
    if (len > d->max_message)
        return deframe_fail(d, ECHOD_DEFRAME_TOO_LARGE, len);

    echod_msg_t *msg = deframe_alloc(len);
    memcpy(msg->frame, d->prefix, ECHOD_GRPC_PREFIX);
    d->prefix_have = 0;

    if (len == 0) {
        deframe_enqueue(d, msg);
    } else {
        d->cur = msg;
        d->cur_have = 0;
    }
    return ECHOD_DEFRAME_OK;
}

echod_deframe_status_t echod_deframer_feed(echod_deframer_t *d, const uint8_t *data, size_t len)
{
    size_t off = 0;

    if (d->error != ECHOD_DEFRAME_OK)
        return d->error;

    while (off < len) {
        size_t n;
        if (d->cur == NULL) {
            n = ECHOD_GRPC_PREFIX - d->prefix_have;
            if (n > len - off)
                n = len - off;
            memcpy(d->prefix + d->prefix_have, data + off, n);
            d->prefix_have += n;
            off += n;
            if (d->prefix_have == ECHOD_GRPC_PREFIX) {
                echod_deframe_status_t st = deframe_start(d);
                if (st != ECHOD_DEFRAME_OK)
                    return st;
            }
        } else {
            /* Payload bytes go straight from the DATA frame into the message: the one and only copy. */
            n = d->cur->len - d->cur_have;
            if (n > len - off)
                n = len - off;
            memcpy(echod_msg_payload(d->cur) + d->cur_have, data + off, n);
            d->cur_have += n;
            off += n;
            if (d->cur_have == d->cur->len) {
                deframe_enqueue(d, d->cur);
                d->cur = NULL;
                d->cur_have = 0;
            }
        }
    }
    return ECHOD_DEFRAME_OK;
}

echod_msg_t *echod_deframer_pop(echod_deframer_t *d)
{
    echod_msg_t *msg = d->head;
    if (msg == NULL)
        return NULL;
    d->head = msg->next;
    if (d->head == NULL)
        d->tail = NULL;
    d->count--;
    msg->next = NULL;
    return msg;
}

int echod_deframer_partial(const echod_deframer_t *d)
{
    return d->prefix_have != 0 || d->cur != NULL;
}

void echod_deframer_dispose(echod_deframer_t *d)
{
    echod_msg_t *msg;
    while ((msg = echod_deframer_pop(d)) != NULL)
        echod_msg_free(msg);
    echod_msg_free(d->cur);
    d->cur = NULL;
    d->cur_have = 0;
    d->prefix_have = 0;
}
