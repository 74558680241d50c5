/* grpc/codec: encoding names, the respond rule, inflate with its cap, deflate round trips. */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "check.h"
#include "grpc/codec.h"

/* A compressed message of `len` bytes of `data` in enc (zlib's own deflate, as a peer writes). */
static echod_msg_t *packed(echod_encoding_t enc, const uint8_t *data, size_t len, int level)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    if (deflateInit2(&z, level, Z_DEFLATED, enc == ECHOD_ENCODING_GZIP ? 31 : 15, 9, Z_DEFAULT_STRATEGY) != Z_OK)
        abort();
    uLong bound = deflateBound(&z, len);
    echod_msg_t *msg = echod_msg_new((uint32_t)bound);
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)len;
    z.next_out = echod_msg_payload(msg);
    z.avail_out = (uInt)bound;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END)
        abort();
    echod_msg_set_prefix(msg, 1, (uint32_t)z.total_out);
    deflateEnd(&z);
    return msg;
}

static void test_names(void)
{
    echod_encoding_t e;
    CHECK(echod_encoding_parse("gzip", 4, &e) == 0 && e == ECHOD_ENCODING_GZIP);
    CHECK(echod_encoding_parse("deflate", 7, &e) == 0 && e == ECHOD_ENCODING_DEFLATE);
    CHECK(echod_encoding_parse("identity", 8, &e) == 0 && e == ECHOD_ENCODING_IDENTITY);
    CHECK(echod_encoding_parse("gzip,deflate", 12, &e) != 0);
    CHECK(echod_encoding_parse("GZIP", 4, &e) != 0);
    CHECK(echod_encoding_parse("gzi", 3, &e) != 0);
    CHECK(echod_encoding_parse("", 0, &e) != 0);
    CHECK(strcmp(echod_encoding_name(ECHOD_ENCODING_DEFLATE), "deflate") == 0);
    CHECK(echod_encoding_accept_parse("identity,deflate,gzip", 21) == 7u);
    CHECK(echod_encoding_accept_parse(" gzip , snappy", 14) == 1u << ECHOD_ENCODING_GZIP);
    CHECK(echod_encoding_accept_parse("gzipx,deflat", 12) == 0);
    CHECK(echod_encoding_accept_parse("", 0) == 0);
}

static void test_respond(void)
{
    unsigned all = 7u, id_only = 1u << ECHOD_ENCODING_IDENTITY;
    CHECK(echod_encoding_respond(ECHOD_RESPOND_REQUEST, ECHOD_ENCODING_GZIP, all) == ECHOD_ENCODING_GZIP);
    CHECK(echod_encoding_respond(ECHOD_RESPOND_REQUEST, ECHOD_ENCODING_GZIP, id_only) == ECHOD_ENCODING_IDENTITY);
    CHECK(echod_encoding_respond(ECHOD_RESPOND_REQUEST, ECHOD_ENCODING_DEFLATE, 0) == ECHOD_ENCODING_IDENTITY);
    CHECK(echod_encoding_respond(ECHOD_RESPOND_IDENTITY, ECHOD_ENCODING_GZIP, all) == ECHOD_ENCODING_IDENTITY);
    CHECK(echod_encoding_respond(ECHOD_RESPOND_GZIP, ECHOD_ENCODING_IDENTITY, all) == ECHOD_ENCODING_GZIP);
    CHECK(echod_encoding_respond(ECHOD_RESPOND_DEFLATE, ECHOD_ENCODING_GZIP, 1u << ECHOD_ENCODING_GZIP) ==
          ECHOD_ENCODING_IDENTITY);
}

static void test_inflate_round_trip(void)
{
    static uint8_t data[100000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i * 7 % 13 + (i % 1000 == 0 ? i : 0));
    for (int e = ECHOD_ENCODING_GZIP; e <= ECHOD_ENCODING_DEFLATE; e++) {
        echod_codec_t *c = echod_codec_new((echod_encoding_t)e, (echod_encoding_t)e, 6);
        /* several messages through one codec: the stream is reset, the scratch reused */
        size_t sizes[] = {0, 1, 255, 256, 257, 1024, 99999, 100000, 7};
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            echod_msg_t *in = packed((echod_encoding_t)e, data, sizes[k], 9), *out = NULL;
            CHECK(echod_codec_inflate(c, in, 100000, &out) == ECHOD_INFLATE_OK);
            CHECK(out != NULL && out->len == sizes[k] && out->frame[0] == 0);
            CHECK(out != NULL && (sizes[k] == 0 || memcmp(echod_msg_payload(out), data, sizes[k]) == 0));
            /* and back through the codec's own deflate */
            echod_msg_t *again = echod_codec_deflate(c, out), *back = NULL;
            CHECK(again != NULL && again->frame[0] == 1);
            CHECK(echod_codec_inflate(c, again, 100000, &back) == ECHOD_INFLATE_OK);
            CHECK(back != NULL && back->len == sizes[k] &&
                  (sizes[k] == 0 || memcmp(echod_msg_payload(back), data, sizes[k]) == 0));
            echod_msg_free(in);
            echod_msg_free(out);
            echod_msg_free(again);
            echod_msg_free(back);
        }
        echod_codec_free(c);
    }
}

static void test_inflate_cap(void)
{
    static uint8_t zeros[(1 << 20) + 1];
    for (int e = ECHOD_ENCODING_GZIP; e <= ECHOD_ENCODING_DEFLATE; e++) {
        echod_codec_t *c = echod_codec_new((echod_encoding_t)e, ECHOD_ENCODING_IDENTITY, 6);
        uint32_t caps[] = {1, 255, 256, 4096, 65536, 1 << 20};
        for (size_t k = 0; k < sizeof(caps) / sizeof(caps[0]); k++) {
            uint32_t cap = caps[k];
            echod_msg_t *at = packed((echod_encoding_t)e, zeros, cap, 9),
                        *over = packed((echod_encoding_t)e, zeros, (size_t)cap + 1, 9);
            echod_msg_t *out = NULL;
            CHECK(echod_codec_inflate(c, at, cap, &out) == ECHOD_INFLATE_OK && out != NULL && out->len == cap);
            echod_msg_free(out);
            CHECK(echod_codec_inflate(c, over, cap, &out) == ECHOD_INFLATE_TOO_LARGE && out == NULL);
            echod_msg_free(at);
            echod_msg_free(over);
        }
        echod_codec_free(c);
    }
}

static void test_inflate_bad(void)
{
    static const uint8_t text[] = "a message that is long enough to be worth compressing, compressing, compressing";
    for (int e = ECHOD_ENCODING_GZIP; e <= ECHOD_ENCODING_DEFLATE; e++) {
        echod_codec_t *c = echod_codec_new((echod_encoding_t)e, ECHOD_ENCODING_IDENTITY, 6);
        echod_msg_t *good = packed((echod_encoding_t)e, text, sizeof(text), 6), *out = NULL;
        uint32_t full = good->len;
        /* every truncation is TRUNCATED (a header cut short too), never OK */
        for (uint32_t cut = 0; cut < full; cut++) {
            echod_msg_t *t = echod_msg_from(echod_msg_payload(good), cut);
            t->frame[0] = 1;
            echod_inflate_status_t st = echod_codec_inflate(c, t, 1 << 20, &out);
            CHECK(st == ECHOD_INFLATE_TRUNCATED || (cut < 2 && st == ECHOD_INFLATE_CORRUPT));
            CHECK(out == NULL);
            echod_msg_free(t);
        }
        /* a garbled header */
        echod_msg_t *bad = echod_msg_from(echod_msg_payload(good), full);
        bad->frame[0] = 1;
        echod_msg_payload(bad)[0] ^= 0xFF;
        CHECK(echod_codec_inflate(c, bad, 1 << 20, &out) == ECHOD_INFLATE_CORRUPT && out == NULL);
        echod_msg_free(bad);
        /* trailing bytes after the stream's end */
        echod_msg_t *trail = echod_msg_new(full + 3);
        memcpy(echod_msg_payload(trail), echod_msg_payload(good), full);
        memcpy(echod_msg_payload(trail) + full, "xyz", 3);
        trail->frame[0] = 1;
        CHECK(echod_codec_inflate(c, trail, 1 << 20, &out) == ECHOD_INFLATE_CORRUPT && out == NULL);
        echod_msg_free(trail);
        /* the codec still works after failures */
        CHECK(echod_codec_inflate(c, good, 1 << 20, &out) == ECHOD_INFLATE_OK && out->len == sizeof(text));
        echod_msg_free(out);
        echod_msg_free(good);
        echod_codec_free(c);
    }
    /* the other format: gzip bytes to a deflate codec */
    echod_codec_t *c = echod_codec_new(ECHOD_ENCODING_DEFLATE, ECHOD_ENCODING_IDENTITY, 6);
    echod_msg_t *gz = packed(ECHOD_ENCODING_GZIP, text, sizeof(text), 6), *out = NULL;
    CHECK(echod_codec_inflate(c, gz, 1 << 20, &out) == ECHOD_INFLATE_CORRUPT && out == NULL);
    echod_msg_free(gz);
    echod_codec_free(c);
    echod_codec_free(NULL);
}

int main(void)
{
    test_names();
    test_respond();
    test_inflate_round_trip();
    test_inflate_cap();
    test_inflate_bad();
    return check_done();
}
