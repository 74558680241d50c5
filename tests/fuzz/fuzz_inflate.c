/*
 * libFuzzer: the inflating deframer, i.e. the deframer (daemon/grpc/deframe.c) with compressed
 * messages allowed, then each compressed message through echod_codec_inflate
 * (daemon/grpc/codec.c), checked against a plain one-shot zlib inflate of the same payload.
 *
 * Input: byte 0 picks the encoding (bit 0: gzip or deflate) and the decompressed cap (the
 * rest: 1 << (b >> 1) % 21 bytes, so at-cap and over-cap cases are cheap to reach), byte 1 the
 * chunk size the rest is fed in. For every message: OK must mean the reference inflated the
 * same bytes to its end within the cap; TOO_LARGE that it produced more than the cap; a valid
 * result also survives echod_codec_deflate and back.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "grpc/codec.h"
#include "grpc/deframe.h"

typedef enum { REF_OK, REF_TOO_LARGE, REF_BAD } ref_result_t;

/* The obvious reading: one inflate call into cap + 1 bytes of room. */
static ref_result_t reference(echod_encoding_t enc, const uint8_t *in, size_t len, uint32_t cap, uint8_t *out,
                              size_t *out_len)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    if (inflateInit2(&z, enc == ECHOD_ENCODING_GZIP ? 31 : 15) != Z_OK)
        abort();
    z.next_in = (Bytef *)in;
    z.avail_in = (uInt)len;
    z.next_out = out;
    z.avail_out = cap + 1;
    int rc = inflate(&z, Z_FINISH);
    *out_len = z.total_out;
    inflateEnd(&z);
    if (*out_len > cap)
        return REF_TOO_LARGE;
    if (rc == Z_STREAM_END && z.avail_in == 0)
        return REF_OK;
    return REF_BAD;
}

static void check_message(echod_codec_t *codec, echod_encoding_t enc, const echod_msg_t *msg, uint32_t cap,
                          uint8_t *ref)
{
    echod_msg_t *out = NULL;
    echod_inflate_status_t st = echod_codec_inflate(codec, msg, cap, &out);
    size_t ref_len;
    ref_result_t want = reference(enc, echod_msg_payload((echod_msg_t *)msg), msg->len, cap, ref, &ref_len);
    if ((st == ECHOD_INFLATE_OK) != (want == REF_OK))
        abort();
    if ((st == ECHOD_INFLATE_TOO_LARGE) != (want == REF_TOO_LARGE))
        abort();
    if (st != ECHOD_INFLATE_OK) {
        if (out != NULL)
            abort();
        return;
    }
    if (out->len != ref_len || (ref_len != 0 && memcmp(echod_msg_payload(out), ref, ref_len) != 0) ||
        out->frame[0] != 0)
        abort();
    echod_msg_t *packed = echod_codec_deflate(codec, out);
    if (packed != NULL) {
        echod_msg_t *back = NULL;
        if (packed->frame[0] != 1 || echod_codec_inflate(codec, packed, cap, &back) != ECHOD_INFLATE_OK ||
            back->len != out->len ||
            (out->len != 0 && memcmp(echod_msg_payload(back), echod_msg_payload(out), out->len) != 0))
            abort();
        echod_msg_free(back);
        echod_msg_free(packed);
    }
    echod_msg_free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    echod_encoding_t enc = (data[0] & 1) ? ECHOD_ENCODING_GZIP : ECHOD_ENCODING_DEFLATE;
    uint32_t cap = 1u << ((data[0] >> 1) % 21);
    size_t chunk = (size_t)data[1] + 1;
    data += 2;
    size -= 2;

    uint8_t *ref = malloc((size_t)cap + 1);
    echod_codec_t *codec = echod_codec_new(enc, enc, 1);
    if (ref == NULL || codec == NULL) {
        free(ref);
        echod_codec_free(codec);
        return 0;
    }
    echod_deframer_t d;
    echod_deframer_init(&d, 1u << 20); /* the wire cap: above every input libFuzzer makes */
    d.allow_compressed = 1;
    for (size_t off = 0; off < size; off += chunk) {
        size_t n = size - off < chunk ? size - off : chunk;
        if (echod_deframer_feed(&d, data + off, n) != ECHOD_DEFRAME_OK)
            break;
        echod_msg_t *msg;
        while ((msg = echod_deframer_pop(&d)) != NULL) {
            if (msg->frame[0] & 1)
                check_message(codec, enc, msg, cap, ref);
            echod_msg_free(msg);
        }
    }
    echod_deframer_dispose(&d);
    echod_codec_free(codec);
    free(ref);
    return 0;
}
