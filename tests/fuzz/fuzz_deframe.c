/*
 * libFuzzer: the gRPC deframer (daemon/grpc/deframe.c) against a reference parser.
 *
 * Input: byte 0 picks the message limit and whether compression is allowed, byte 1 the size of
 * the chunks the rest is fed in (DATA frames split any way), byte 2 when messages are popped
 * (after every chunk, or only at the end). The messages popped, and the error if any, must be
 * exactly what a plain reading of the bytes gives.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "grpc/deframe.h"

typedef struct {
    size_t count;
    echod_deframe_status_t error;
} expect_t;

/* The same bytes read the obvious way: prefix, length, payload, until the bytes or the rules end. */
static const uint8_t *expect_next(const uint8_t *p, const uint8_t *end, uint32_t max, int compressed_ok, expect_t *e,
                                  uint32_t *len)
{
    if (end - p < ECHOD_GRPC_PREFIX)
        return NULL;
    uint8_t flag = p[0];
    uint32_t n = (uint32_t)p[1] << 24 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 8 | p[4];
    if (flag & ~1u) {
        e->error = ECHOD_DEFRAME_BAD_FLAGS;
        return NULL;
    }
    if ((flag & 1u) && !compressed_ok) {
        e->error = ECHOD_DEFRAME_COMPRESSED;
        return NULL;
    }
    if (n > max) {
        e->error = ECHOD_DEFRAME_TOO_LARGE;
        return NULL;
    }
    if ((size_t)(end - p - ECHOD_GRPC_PREFIX) < n)
        return NULL;
    *len = n;
    return p;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    uint32_t max = (uint32_t)(data[0] >> 1) * 97; /* 0 .. 12319: around the lengths the input can carry */
    int compressed_ok = data[0] & 1;
    size_t chunk = (size_t)data[1] % 64 + 1;
    int pop_early = data[2] & 1;
    const uint8_t *in = data + 3, *end = data + size;

    echod_deframer_t d;
    echod_deframer_init(&d, max);
    d.allow_compressed = compressed_ok;

    expect_t e = {0, ECHOD_DEFRAME_OK};
    const uint8_t *ref = in;
    echod_deframe_status_t st = ECHOD_DEFRAME_OK;

    for (const uint8_t *p = in; p < end;) {
        size_t n = (size_t)(end - p) < chunk ? (size_t)(end - p) : chunk;
        st = echod_deframer_feed(&d, p, n);
        p += n;
        if (st != ECHOD_DEFRAME_OK)
            break;
        if (!pop_early)
            continue;
        echod_msg_t *m;
        while ((m = echod_deframer_pop(&d)) != NULL) {
            uint32_t len;
            if (expect_next(ref, end, max, compressed_ok, &e, &len) == NULL || m->len != len ||
                memcmp(m->frame, ref, ECHOD_GRPC_PREFIX + (size_t)len) != 0)
                abort(); /* a message the bytes do not contain */
            ref += ECHOD_GRPC_PREFIX + len;
            e.count++;
            echod_msg_free(m);
        }
    }
    echod_msg_t *m;
    while ((m = echod_deframer_pop(&d)) != NULL) {
        uint32_t len;
        if (expect_next(ref, end, max, compressed_ok, &e, &len) == NULL || m->len != len ||
            memcmp(m->frame, ref, ECHOD_GRPC_PREFIX + (size_t)len) != 0)
            abort();
        ref += ECHOD_GRPC_PREFIX + len;
        e.count++;
        echod_msg_free(m);
    }
    if (d.count != 0)
        abort();
    /* nothing more to pop: the reference must agree that the rest is an error or incomplete */
    uint32_t len;
    if (expect_next(ref, end, max, compressed_ok, &e, &len) != NULL)
        abort(); /* a whole message the deframer did not deliver */
    if (e.error != st)
        abort(); /* a different verdict */
    if (st != ECHOD_DEFRAME_OK && echod_deframer_feed(&d, in, (size_t)(end - in)) != st)
        abort(); /* errors are sticky */
    if (st == ECHOD_DEFRAME_OK && echod_deframer_partial(&d) != (ref != end))
        abort(); /* leftover bytes are exactly a started message */
    echod_deframer_dispose(&d);
    return 0;
}
