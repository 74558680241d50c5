#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include "grpc/codec.h"
#include "util/err.h"

/* zlib's windowBits: 15 is the zlib wrapper (RFC 1950), +16 the gzip one (RFC 1952). */
#define CODEC_WBITS_ZLIB 15
#define CODEC_WBITS_GZIP (15 + 16)
/* Inflate output starts at this many bytes per compressed byte (a guess, then doubling). */
#define CODEC_INFLATE_RATIO 4
#define CODEC_INFLATE_MIN   256
/* A scratch buffer above this is freed after its message rather than kept for the next. */
#define CODEC_KEEP_SCRATCH (64 * 1024)

struct echod_codec {
    echod_encoding_t inflate_enc, deflate_enc;
    int level;
    int inflate_ready, deflate_ready; /* the z_stream is initialised */
    z_stream in, out;
    uint8_t *scratch; /* inflate output, kept across the messages of a stream */
    size_t scratch_cap;
};

const char *const echod_encoding_names[] = {
    [ECHOD_ENCODING_IDENTITY] = "identity",
    [ECHOD_ENCODING_GZIP] = "gzip",
    [ECHOD_ENCODING_DEFLATE] = "deflate",
};
_Static_assert(sizeof(echod_encoding_names) / sizeof(echod_encoding_names[0]) == ECHOD_ENCODING__COUNT,
               "a name per encoding");

const char *const echod_inflate_status_names[] = {
    [ECHOD_INFLATE_OK] = "ok",
    [ECHOD_INFLATE_TOO_LARGE] = "too_large",
    [ECHOD_INFLATE_CORRUPT] = "corrupt",
    [ECHOD_INFLATE_TRUNCATED] = "truncated",
};
_Static_assert(sizeof(echod_inflate_status_names) / sizeof(echod_inflate_status_names[0]) == ECHOD_INFLATE__COUNT,
               "a name per inflate status");

const char *echod_encoding_name(echod_encoding_t enc)
{
    return (unsigned)enc < ECHOD_ENCODING__COUNT ? echod_encoding_names[enc] : "unknown";
}

int echod_encoding_parse(const char *value, size_t len, echod_encoding_t *out)
{
    for (unsigned e = 0; e < ECHOD_ENCODING__COUNT; e++) {
        if (strlen(echod_encoding_names[e]) == len && memcmp(value, echod_encoding_names[e], len) == 0) {
            *out = (echod_encoding_t)e;
            return 0;
        }
    }
    return -1;
}

unsigned echod_encoding_accept_parse(const char *value, size_t len)
{
    unsigned set = 0;
    size_t i = 0;
    while (i < len) {
        while (i < len && (value[i] == ' ' || value[i] == '\t' || value[i] == ','))
            i++;
        size_t start = i;
        while (i < len && value[i] != ',' && value[i] != ' ' && value[i] != '\t')
            i++;
        echod_encoding_t e;
        if (i > start && echod_encoding_parse(value + start, i - start, &e) == 0)
            set |= 1u << e;
    }
    return set;
}

echod_encoding_t echod_encoding_respond(echod_compression_respond_t respond, echod_encoding_t request, unsigned accept)
{
    echod_encoding_t want = request;
    if (respond == ECHOD_RESPOND_IDENTITY)
        want = ECHOD_ENCODING_IDENTITY;
    else if (respond == ECHOD_RESPOND_GZIP)
        want = ECHOD_ENCODING_GZIP;
    else if (respond == ECHOD_RESPOND_DEFLATE)
        want = ECHOD_ENCODING_DEFLATE;
    return (accept & (1u << want)) != 0 ? want : ECHOD_ENCODING_IDENTITY;
}

const char *echod_inflate_status_str(echod_inflate_status_t st)
{
    switch (st) {
    case ECHOD_INFLATE_OK:
        return "ok";
    case ECHOD_INFLATE_TOO_LARGE:
        return "decompressed message larger than max";
    case ECHOD_INFLATE_CORRUPT:
        return "corrupt compressed message";
    case ECHOD_INFLATE_TRUNCATED:
        return "truncated compressed message";
    case ECHOD_INFLATE__COUNT:
        break;
    }
    return "unknown";
}

static int codec_wbits(echod_encoding_t enc)
{
    return enc == ECHOD_ENCODING_GZIP ? CODEC_WBITS_GZIP : CODEC_WBITS_ZLIB;
}

echod_codec_t *echod_codec_new(echod_encoding_t inflate_enc, echod_encoding_t deflate_enc, int level)
{
    echod_codec_t *c = echod_must(calloc(1, sizeof(*c)), "codec");
    c->inflate_enc = inflate_enc;
    c->deflate_enc = deflate_enc;
    c->level = level;
    return c;
}

void echod_codec_free(echod_codec_t *c)
{
    if (c == NULL)
        return;
    if (c->inflate_ready)
        inflateEnd(&c->in);
    if (c->deflate_ready)
        deflateEnd(&c->out);
    free(c->scratch);
    free(c);
}

/*
 * The inflater, initialised by the first message and reset for each later one: a z_stream's
 * 32 KiB window is allocated once per call, not once per message. zlib's init fails only without
 * memory (the version and parameters are fixed here), and a reset not at all on a stream that
 * init set up.
 */
static void codec_inflate_begin(echod_codec_t *c)
{
    if (c->inflate_ready) {
        inflateReset(&c->in);
        return;
    }
    memset(&c->in, 0, sizeof(c->in));
    if (inflateInit2(&c->in, codec_wbits(c->inflate_enc)) != Z_OK)
        echod_oom("zlib inflater");
    c->inflate_ready = 1;
}

static void codec_scratch_grow(echod_codec_t *c, size_t want)
{
    if (want == 0 || c->scratch_cap >= want)
        return;
    c->scratch = echod_must(realloc(c->scratch, want), "inflated message");
    c->scratch_cap = want;
}

static size_t codec_first_guess(size_t in_len, uint32_t max)
{
    size_t guess = in_len > SIZE_MAX / CODEC_INFLATE_RATIO ? SIZE_MAX : in_len * CODEC_INFLATE_RATIO;
    if (guess < CODEC_INFLATE_MIN)
        guess = CODEC_INFLATE_MIN;
    return guess < max ? guess : max;
}

/* Inflates into c->scratch; *have is the decompressed size. */
static echod_inflate_status_t codec_run_inflate(echod_codec_t *c, const uint8_t *data, size_t len, uint32_t max,
                                                size_t *have)
{
    z_stream *z = &c->in;
    size_t cap = codec_first_guess(len, max);
    uint8_t probe;
    *have = 0;
    codec_scratch_grow(c, cap);
    cap = c->scratch_cap < max ? c->scratch_cap : max; /* a kept scratch is used up to the cap */
    z->next_in = (Bytef *)data;
    z->avail_in = (uInt)len; /* a message is at most max_receive_message_bytes, below 2^31 */
    for (;;) {
        int probing = *have == cap && cap == max;
        if (*have == cap && !probing) {
            size_t grow = cap * 2 < max ? cap * 2 : max;
            codec_scratch_grow(c, grow);
            cap = grow;
        }
        /* At the cap, one more byte of output proves the message too large: it goes to a probe
         * byte, never to a bigger buffer. */
        z->next_out = probing ? &probe : c->scratch + *have;
        z->avail_out = probing ? 1u : (uInt)(cap - *have);
        uInt before_in = z->avail_in, before_out = z->avail_out;
        int rc = inflate(z, Z_NO_FLUSH);
        if (probing && z->avail_out == 0)
            return ECHOD_INFLATE_TOO_LARGE;
        if (!probing)
            *have += before_out - z->avail_out;
        if (rc == Z_STREAM_END)
            return z->avail_in == 0 ? ECHOD_INFLATE_OK : ECHOD_INFLATE_CORRUPT;
        if (rc == Z_MEM_ERROR) /* its window, allocated by the first inflate that needs it */
            echod_oom("zlib inflate window");
        if (rc != Z_OK && rc != Z_BUF_ERROR)
            return ECHOD_INFLATE_CORRUPT; /* Z_DATA_ERROR, Z_NEED_DICT, Z_STREAM_ERROR */
        /* Input used up with output room left: the message ended before the stream did. */
        if (z->avail_in == 0 && z->avail_out != 0)
            return ECHOD_INFLATE_TRUNCATED;
        if (before_in == z->avail_in && before_out == z->avail_out) /* zlib made no progress: never loop on it */
            return z->avail_in == 0 ? ECHOD_INFLATE_TRUNCATED : ECHOD_INFLATE_CORRUPT;
    }
}

echod_inflate_status_t echod_codec_inflate(echod_codec_t *c, const echod_msg_t *in, uint32_t max, echod_msg_t **out)
{
    *out = NULL;
    codec_inflate_begin(c);
    size_t have = 0;
    echod_inflate_status_t st = codec_run_inflate(c, in->frame + ECHOD_GRPC_PREFIX, in->len, max, &have);
    if (st == ECHOD_INFLATE_OK) {
        *out = echod_msg_new((uint32_t)have);
        if (have != 0)
            memcpy(echod_msg_payload(*out), c->scratch, have);
    }
    if (c->scratch_cap > CODEC_KEEP_SCRATCH) {
        free(c->scratch);
        c->scratch = NULL;
        c->scratch_cap = 0;
    }
    return st;
}

/* As codec_inflate_begin (the level is the config's, 1..9). */
static void codec_deflate_begin(echod_codec_t *c)
{
    if (c->deflate_ready) {
        deflateReset(&c->out);
        return;
    }
    memset(&c->out, 0, sizeof(c->out));
    if (deflateInit2(&c->out, c->level, Z_DEFLATED, codec_wbits(c->deflate_enc), 8, Z_DEFAULT_STRATEGY) != Z_OK)
        echod_oom("zlib deflater");
    c->deflate_ready = 1;
}

echod_msg_t *echod_codec_deflate(echod_codec_t *c, const echod_msg_t *in)
{
    codec_deflate_begin(c);
    z_stream *z = &c->out;
    uLong bound = deflateBound(z, in->len);
    if (bound > UINT32_MAX)
        return NULL;
    echod_msg_t *msg = echod_msg_new((uint32_t)bound);
    z->next_in = (Bytef *)(in->frame + ECHOD_GRPC_PREFIX);
    z->avail_in = in->len;
    z->next_out = echod_msg_payload(msg);
    z->avail_out = (uInt)bound;
    /* deflateBound is enough for one Z_FINISH call: anything but Z_STREAM_END is a zlib bug */
    if (deflate(z, Z_FINISH) != Z_STREAM_END) {
        echod_msg_free(msg);
        return NULL;
    }
    echod_msg_set_prefix(msg, 1, (uint32_t)z->total_out);
    return msg;
}
