#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "grpc/deframe.h"
#include "grpc/status.h"
#include "grpc/timeout.h"

/* A fixed-seed generator, so that a failing split pattern can be reproduced run after run. */
static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint32_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}

static uint32_t rng_below(uint32_t n)
{
    return rng_next() % n;
}

/* A wire stream of n messages, with their lengths kept to check the deframer's output against. */
typedef struct {
    size_t n;
    uint32_t *lens;
    size_t *offsets; /* where each message's prefix starts in buf */
    uint8_t *buf;
    size_t size;
} stream_t;

static void put_prefix(uint8_t *p, uint8_t flag, uint32_t len)
{
    p[0] = flag;
    p[1] = (uint8_t)(len >> 24);
    p[2] = (uint8_t)(len >> 16);
    p[3] = (uint8_t)(len >> 8);
    p[4] = (uint8_t)len;
}

static void stream_build(stream_t *s, const uint32_t *lens, size_t n)
{
    s->n = n;
    s->lens = malloc(n * sizeof(*s->lens) + 1);
    s->offsets = malloc(n * sizeof(*s->offsets) + 1);
    s->size = 0;
    for (size_t i = 0; i < n; i++)
        s->size += ECHOD_GRPC_PREFIX + lens[i];
    s->buf = malloc(s->size + 1);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        s->lens[i] = lens[i];
        s->offsets[i] = off;
        put_prefix(s->buf + off, 0, lens[i]);
        off += ECHOD_GRPC_PREFIX;
        for (uint32_t j = 0; j < lens[i]; j++)
            s->buf[off++] = (uint8_t)rng_next();
    }
}

static void stream_free(stream_t *s)
{
    free(s->lens);
    free(s->offsets);
    free(s->buf);
}

static int stream_is_boundary(const stream_t *s, size_t off)
{
    if (off == s->size)
        return 1;
    for (size_t i = 0; i < s->n; i++)
        if (s->offsets[i] == off)
            return 1;
    return 0;
}

/* Pops everything and compares each message, prefix included, with the bytes that went in. Returns 1 on a match. */
static int drain_and_compare(echod_deframer_t *d, const stream_t *s)
{
    int ok = d->count == s->n;
    for (size_t i = 0; i < s->n; i++) {
        echod_msg_t *msg = echod_deframer_pop(d);
        if (msg == NULL)
            return 0;
        if (msg->len != s->lens[i] || msg->next != NULL ||
            memcmp(msg->frame, s->buf + s->offsets[i], echod_msg_frame_len(msg)) != 0)
            ok = 0;
        echod_msg_free(msg);
    }
    return ok && echod_deframer_pop(d) == NULL && d->count == 0 && d->head == NULL && d->tail == NULL;
}

/* Feeds s cut at the sorted points cuts[0..ncuts), checking partial() at every cut. Returns 1 when all went well. */
static int feed_with_cuts(const stream_t *s, const size_t *cuts, size_t ncuts)
{
    echod_deframer_t d;
    int ok = 1;
    size_t from = 0;

    echod_deframer_init(&d, 1u << 20);
    for (size_t i = 0; i <= ncuts; i++) {
        size_t to = i < ncuts ? cuts[i] : s->size;
        if (echod_deframer_feed(&d, s->buf + from, to - from) != ECHOD_DEFRAME_OK)
            ok = 0;
        if ((echod_deframer_partial(&d) != 0) == stream_is_boundary(s, to))
            ok = 0;
        from = to;
    }
    ok = ok && drain_and_compare(&d, s);
    echod_deframer_dispose(&d);
    return ok;
}

static void test_msg_constructors(void)
{
    echod_msg_t *msg = echod_msg_from("abc", 3);
    CHECK(msg != NULL);
    CHECK(msg->len == 3 && echod_msg_frame_len(msg) == 8);
    CHECK(memcmp(msg->frame, "\0\0\0\0\3abc", 8) == 0);
    echod_msg_free(msg);

    msg = echod_msg_from(NULL, 0);
    CHECK(msg != NULL && msg->len == 0 && memcmp(msg->frame, "\0\0\0\0\0", 5) == 0);
    echod_msg_free(msg);

    msg = echod_msg_new(0x10203);
    CHECK(msg != NULL && msg->len == 0x10203 && memcmp(msg->frame, "\0\0\1\2\3", 5) == 0);
    CHECK(echod_msg_payload(msg) == msg->frame + 5);
    echod_msg_free(msg);
    echod_msg_free(NULL);
}

static void test_deframe_every_split(void)
{
    /* Small enough that every single cut and every pair of cuts can be tried. */
    static const uint32_t lens[] = {0, 3, 1, 0, 0, 7, 2};
    stream_t s;
    size_t cuts[2];
    int all_single = 1, all_double = 1;

    stream_build(&s, lens, sizeof(lens) / sizeof(lens[0]));
    for (size_t a = 0; a <= s.size; a++) {
        cuts[0] = a;
        all_single &= feed_with_cuts(&s, cuts, 1);
        for (size_t b = a; b <= s.size; b++) {
            cuts[1] = b;
            all_double &= feed_with_cuts(&s, cuts, 2);
        }
    }
    CHECK(all_single);
    CHECK(all_double);

    /* One byte at a time: every prefix is split at every point. */
    size_t *bytes = malloc(s.size * sizeof(*bytes));
    for (size_t i = 0; i < s.size; i++)
        bytes[i] = i + 1;
    CHECK(feed_with_cuts(&s, bytes, s.size - 1));
    /* All at once: many messages in one call. */
    CHECK(feed_with_cuts(&s, NULL, 0));
    free(bytes);
    stream_free(&s);
}

static void test_deframe_random(void)
{
    int ok = 1;
    for (int round = 0; round < 50; round++) {
        size_t n = 1 + rng_below(200);
        uint32_t *lens = malloc(n * sizeof(*lens));
        for (size_t i = 0; i < n; i++) {
            /* Plenty of empty and tiny messages, where prefix handling is most likely to go wrong. */
            uint32_t kind = rng_below(4);
            lens[i] = kind == 0 ? 0 : kind == 1 ? rng_below(8) : rng_below(3000);
        }
        stream_t s;
        stream_build(&s, lens, n);

        size_t ncuts = 0, *cuts = malloc((s.size + 1) * sizeof(*cuts));
        for (size_t at = 0; at < s.size;) {
            /* Mostly short chunks, sometimes long ones spanning many messages. */
            at += rng_below(8) == 0 ? 1 + rng_below(20000) : 1 + rng_below(16);
            if (at < s.size)
                cuts[ncuts++] = at;
        }
        ok &= feed_with_cuts(&s, cuts, ncuts);
        free(cuts);
        free(lens);
        stream_free(&s);
    }
    CHECK(ok);
}

static void test_deframe_zero_length(void)
{
    echod_deframer_t d;
    uint8_t wire[15] = {0};

    echod_deframer_init(&d, 0);
    /* A 0-length message completes the moment its prefix does, even at the very end of a feed. */
    CHECK(echod_deframer_feed(&d, wire, 5) == ECHOD_DEFRAME_OK);
    CHECK(d.count == 1 && !echod_deframer_partial(&d) && d.cur == NULL);
    CHECK(echod_deframer_feed(&d, wire, 10) == ECHOD_DEFRAME_OK);
    CHECK(d.count == 3);
    for (int i = 0; i < 3; i++) {
        echod_msg_t *msg = echod_deframer_pop(&d);
        CHECK(msg != NULL && msg->len == 0 && echod_msg_frame_len(msg) == 5);
        CHECK(memcmp(msg->frame, wire, 5) == 0);
        echod_msg_free(msg);
    }
    CHECK(echod_deframer_pop(&d) == NULL && d.count == 0);
    /* An empty feed changes nothing. */
    CHECK(echod_deframer_feed(&d, NULL, 0) == ECHOD_DEFRAME_OK);
    CHECK(!echod_deframer_partial(&d) && d.count == 0);
    echod_deframer_dispose(&d);
}

static void test_deframe_prefix_bytewise(void)
{
    echod_deframer_t d;
    uint8_t wire[5 + 300];

    put_prefix(wire, 0, 300);
    for (int i = 0; i < 300; i++)
        wire[5 + i] = (uint8_t)i;
    echod_deframer_init(&d, 1000);
    for (int i = 0; i < 5; i++) {
        CHECK(echod_deframer_feed(&d, wire + i, 1) == ECHOD_DEFRAME_OK);
        CHECK(echod_deframer_partial(&d));
        CHECK(d.count == 0);
    }
    /* The prefix is complete, so the message exists before any payload arrives. */
    CHECK(d.cur != NULL && d.prefix_have == 0 && d.cur_have == 0);
    CHECK(echod_deframer_feed(&d, wire + 5, 299) == ECHOD_DEFRAME_OK);
    CHECK(echod_deframer_partial(&d) && d.count == 0);
    CHECK(echod_deframer_feed(&d, wire + 304, 1) == ECHOD_DEFRAME_OK);
    CHECK(!echod_deframer_partial(&d) && d.count == 1);
    echod_msg_t *msg = echod_deframer_pop(&d);
    CHECK(msg != NULL && msg->len == 300 && memcmp(msg->frame, wire, sizeof(wire)) == 0);
    echod_msg_free(msg);
    echod_deframer_dispose(&d);
}

static void test_deframe_size_limit(void)
{
    echod_deframer_t d;
    uint8_t wire[5 + 17] = {0};

    put_prefix(wire, 0, 16);
    echod_deframer_init(&d, 16);
    CHECK(echod_deframer_feed(&d, wire, 5 + 16) == ECHOD_DEFRAME_OK);
    CHECK(d.count == 1);

    /* Detected with the prefix alone: no payload needed, nothing allocated. */
    put_prefix(wire, 0, 17);
    CHECK(echod_deframer_feed(&d, wire, 5) == ECHOD_DEFRAME_TOO_LARGE);
    CHECK(d.error == ECHOD_DEFRAME_TOO_LARGE && d.error_len == 17);
    CHECK(d.cur == NULL && d.count == 1);
    /* Sticky: even a valid message is ignored now, and what was complete before stays queued. */
    put_prefix(wire, 0, 0);
    CHECK(echod_deframer_feed(&d, wire, 5) == ECHOD_DEFRAME_TOO_LARGE);
    CHECK(d.count == 1 && d.error_len == 17);
    echod_msg_t *msg = echod_deframer_pop(&d);
    CHECK(msg != NULL && msg->len == 16);
    echod_msg_free(msg);
    echod_deframer_dispose(&d);

    /* A 4 GiB claim must not reach malloc (ASan would abort on the allocation). */
    echod_deframer_init(&d, 4u << 20);
    put_prefix(wire, 0, UINT32_MAX);
    CHECK(echod_deframer_feed(&d, wire, 3) == ECHOD_DEFRAME_OK);
    CHECK(echod_deframer_feed(&d, wire + 3, 2) == ECHOD_DEFRAME_TOO_LARGE);
    CHECK(d.error_len == UINT32_MAX && d.cur == NULL && d.count == 0);
    echod_deframer_dispose(&d);

    /* Messages before the oversized one in the same feed are still delivered. */
    uint8_t two[5 + 2 + 5];
    put_prefix(two, 0, 2);
    two[5] = 'h';
    two[6] = 'i';
    put_prefix(two + 7, 0, 9);
    echod_deframer_init(&d, 8);
    CHECK(echod_deframer_feed(&d, two, sizeof(two)) == ECHOD_DEFRAME_TOO_LARGE);
    CHECK(d.count == 1 && d.error_len == 9);
    echod_deframer_dispose(&d);
    CHECK(d.count == 0 && d.head == NULL);
}

static void test_deframe_flags(void)
{
    echod_deframer_t d;
    uint8_t wire[5 + 1] = {0};

    put_prefix(wire, 1, 1);
    echod_deframer_init(&d, 100);
    CHECK(echod_deframer_feed(&d, wire, sizeof(wire)) == ECHOD_DEFRAME_COMPRESSED);
    CHECK(d.count == 0 && d.cur == NULL && d.error_len == 0);
    CHECK(echod_deframer_feed(&d, wire, sizeof(wire)) == ECHOD_DEFRAME_COMPRESSED);
    echod_deframer_dispose(&d);

    /* Once an encoding is negotiated, the flag is kept in the frame so the echo says compressed too. */
    echod_deframer_init(&d, 100);
    d.allow_compressed = 1;
    CHECK(echod_deframer_feed(&d, wire, sizeof(wire)) == ECHOD_DEFRAME_OK);
    echod_msg_t *msg = echod_deframer_pop(&d);
    CHECK(msg != NULL && msg->frame[0] == 1 && msg->len == 1);
    echod_msg_free(msg);
    echod_deframer_dispose(&d);

    static const uint8_t reserved[] = {0x02, 0x03, 0x04, 0x80, 0xFF, 0x81};
    int ok = 1;
    for (size_t i = 0; i < sizeof(reserved); i++) {
        for (int allow = 0; allow <= 1; allow++) {
            put_prefix(wire, reserved[i], 1);
            echod_deframer_init(&d, 100);
            d.allow_compressed = allow;
            ok &= echod_deframer_feed(&d, wire, 5) == ECHOD_DEFRAME_BAD_FLAGS;
            ok &= d.cur == NULL && d.count == 0;
            ok &= echod_deframer_feed(&d, wire + 5, 1) == ECHOD_DEFRAME_BAD_FLAGS;
            echod_deframer_dispose(&d);
        }
    }
    CHECK(ok);

    /* Reserved bits win over the size check: the flags are read first. */
    put_prefix(wire, 0x40, 1000);
    echod_deframer_init(&d, 10);
    CHECK(echod_deframer_feed(&d, wire, 5) == ECHOD_DEFRAME_BAD_FLAGS);
    echod_deframer_dispose(&d);
}

static void test_deframe_truncation(void)
{
    echod_deframer_t d;
    uint8_t wire[5 + 4 + 5];

    put_prefix(wire, 0, 4);
    memcpy(wire + 5, "ping", 4);
    put_prefix(wire + 9, 0, 0);
    echod_deframer_init(&d, 100);
    CHECK(!echod_deframer_partial(&d));
    CHECK(echod_deframer_feed(&d, wire, 2) == ECHOD_DEFRAME_OK);
    CHECK(echod_deframer_partial(&d)); /* mid-prefix */
    CHECK(echod_deframer_feed(&d, wire + 2, 5) == ECHOD_DEFRAME_OK);
    CHECK(echod_deframer_partial(&d)); /* mid-payload */
    CHECK(echod_deframer_feed(&d, wire + 7, 2) == ECHOD_DEFRAME_OK);
    CHECK(!echod_deframer_partial(&d) && d.count == 1);
    CHECK(echod_deframer_feed(&d, wire + 9, 4) == ECHOD_DEFRAME_OK);
    CHECK(echod_deframer_partial(&d)); /* one byte short of a whole empty message */
    CHECK(echod_deframer_feed(&d, wire + 13, 1) == ECHOD_DEFRAME_OK);
    CHECK(!echod_deframer_partial(&d) && d.count == 2);
    echod_deframer_dispose(&d);
}

static void test_deframe_dispose(void)
{
    echod_deframer_t d;
    uint8_t wire[3 * (5 + 10) + 5 + 3];

    memset(wire, 'x', sizeof(wire));
    for (int i = 0; i < 4; i++)
        put_prefix(wire + i * 15, 0, 10);
    /* Three whole messages queued and the fourth one partially filled. */
    echod_deframer_init(&d, 100);
    CHECK(echod_deframer_feed(&d, wire, sizeof(wire)) == ECHOD_DEFRAME_OK);
    CHECK(d.count == 3 && d.cur != NULL && echod_deframer_partial(&d));
    echod_deframer_dispose(&d);
    CHECK(d.count == 0 && d.cur == NULL && d.head == NULL && !echod_deframer_partial(&d));
    /* Disposing twice is harmless. */
    echod_deframer_dispose(&d);

    /* Mid-prefix: nothing is allocated, but the state is still reset. */
    echod_deframer_init(&d, 100);
    CHECK(echod_deframer_feed(&d, wire, 3) == ECHOD_DEFRAME_OK);
    echod_deframer_dispose(&d);
    CHECK(!echod_deframer_partial(&d));

    /* A popped message outlives the deframer. */
    echod_deframer_init(&d, 100);
    CHECK(echod_deframer_feed(&d, wire, 15) == ECHOD_DEFRAME_OK);
    echod_msg_t *msg = echod_deframer_pop(&d);
    echod_deframer_dispose(&d);
    CHECK(msg != NULL && msg->len == 10);
    echod_msg_free(msg);
}

static int timeout_is(const char *s, uint64_t want)
{
    uint64_t ns = 12345;
    return echod_grpc_timeout_parse(s, strlen(s), &ns) == 0 && ns == want;
}

static int timeout_rejects(const char *s, size_t len)
{
    uint64_t ns = 12345;
    return echod_grpc_timeout_parse(s, len, &ns) == -1;
}

static void test_timeout(void)
{
    CHECK(timeout_is("1n", 1));
    CHECK(timeout_is("1u", 1000));
    CHECK(timeout_is("1m", 1000000));
    CHECK(timeout_is("1S", 1000000000));
    CHECK(timeout_is("1M", UINT64_C(60000000000)));
    CHECK(timeout_is("1H", UINT64_C(3600000000000)));
    CHECK(timeout_is("0S", 0));
    CHECK(timeout_is("250m", UINT64_C(250000000)));
    CHECK(timeout_is("00000007u", 7000));
    CHECK(timeout_is("99999999n", 99999999));
    CHECK(timeout_is("99999999S", UINT64_C(99999999000000000)));
    CHECK(timeout_is("99999999M", UINT64_C(5999999940000000000)));
    /* UINT64_MAX ns is about 5124095.58 hours: the last hour count that fits, then saturation. */
    CHECK(timeout_is("5124095H", UINT64_C(18446742000000000000)));
    CHECK(timeout_is("5124096H", UINT64_MAX));
    CHECK(timeout_is("99999999H", UINT64_MAX));
    /* Only len bytes are looked at. */
    uint64_t ns = 0;
    CHECK(echod_grpc_timeout_parse("5Sgarbage", 2, &ns) == 0 && ns == UINT64_C(5000000000));

    CHECK(timeout_rejects("", 0));
    CHECK(timeout_rejects(NULL, 0));
    CHECK(timeout_rejects("S", 1));
    CHECK(timeout_rejects("1", 1));
    CHECK(timeout_rejects("10", 2));
    CHECK(timeout_rejects("10S", 2)); /* the unit lies beyond len */
    CHECK(timeout_rejects("123456789S", 10));
    CHECK(timeout_rejects("000000001S", 10));
    CHECK(timeout_rejects("+1S", 3));
    CHECK(timeout_rejects("-1S", 3));
    CHECK(timeout_rejects(" 1S", 3));
    CHECK(timeout_rejects("1 S", 3));
    CHECK(timeout_rejects("1S ", 3));
    CHECK(timeout_rejects("1S\0", 3));
    CHECK(timeout_rejects("1SS", 3));
    CHECK(timeout_rejects("1.5S", 4));
    CHECK(timeout_rejects("0x1S", 4));
    CHECK(timeout_rejects("1s", 2));
    CHECK(timeout_rejects("1h", 2));
    CHECK(timeout_rejects("1U", 2));
    CHECK(timeout_rejects("1N", 2));
    CHECK(timeout_rejects("1x", 2));
    CHECK(timeout_rejects("1\xff", 2));
    CHECK(timeout_rejects("\xd9\xa1S", 3)); /* non-ASCII digit */
}

static void test_status_names(void)
{
    static const char *const want[] = {
        "OK",        "CANCELLED",       "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
        "NOT_FOUND", "ALREADY_EXISTS",  "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
        "ABORTED",   "OUT_OF_RANGE",    "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
        "DATA_LOSS", "UNAUTHENTICATED",
    };
    int ok = 1;
    for (int i = 0; i < 17; i++)
        ok &= strcmp(echod_status_name(i), want[i]) == 0;
    CHECK(ok);
    CHECK(strcmp(echod_status_name(ECHOD_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED") == 0);
    CHECK(strcmp(echod_status_name(ECHOD_UNAUTHENTICATED), "UNAUTHENTICATED") == 0);
    CHECK(strcmp(echod_status_name(-1), "UNKNOWN") == 0);
    CHECK(strcmp(echod_status_name(17), "UNKNOWN") == 0);
    CHECK(strcmp(echod_status_name(INT_MAX), "UNKNOWN") == 0);
    CHECK(strcmp(echod_status_name(INT_MIN), "UNKNOWN") == 0);
}

static int encodes_to(const char *msg, const char *want)
{
    char buf[256];
    size_t n = echod_status_encode_message(buf, sizeof(buf), msg);
    return n == strlen(want) && strcmp(buf, want) == 0;
}

static int decodes_to(const char *src, const char *want, size_t want_len)
{
    char buf[256];
    size_t n = echod_status_decode_message(buf, sizeof(buf), src, strlen(src));
    return n == want_len && memcmp(buf, want, want_len) == 0 && buf[n] == '\0';
}

static void test_status_encode(void)
{
    CHECK(encodes_to("", ""));
    CHECK(encodes_to("no such method", "no such method"));
    CHECK(encodes_to("100%", "100%25"));
    CHECK(encodes_to("%%", "%25%25"));
    CHECK(encodes_to("a\tb\r\n", "a%09b%0D%0A"));
    CHECK(encodes_to(" ~", " ~")); /* both ends of the unescaped range */
    CHECK(encodes_to("\x1f\x7f", "%1F%7F"));
    CHECK(encodes_to("h\xc3\xa9llo \xe2\x9c\x93", "h%C3%A9llo %E2%9C%93"));
    CHECK(encodes_to("\xff", "%FF"));

    char buf[8];
    memset(buf, '#', sizeof(buf));
    CHECK(echod_status_encode_message(buf, 0, "abc") == 0 && buf[0] == '#');
    CHECK(echod_status_encode_message(buf, 1, "abc") == 0 && buf[0] == '\0');
    CHECK(echod_status_encode_message(buf, 4, "abcdef") == 3 && strcmp(buf, "abc") == 0);
    /* "ab%25" needs 5 bytes plus the NUL: with one byte short, the escape goes whole. */
    CHECK(echod_status_encode_message(buf, 5, "ab%") == 2 && strcmp(buf, "ab") == 0);
    CHECK(echod_status_encode_message(buf, 6, "ab%") == 5 && strcmp(buf, "ab%25") == 0);
    /* No skipping ahead to a shorter character after an escape did not fit. */
    CHECK(echod_status_encode_message(buf, 4, "a\nbc") == 1 && strcmp(buf, "a") == 0);

    /* At every cap, the output is a prefix of the full encoding that ends on an escape boundary. */
    const char *msg = "\xc3\xa9t\xc3\xa9 100% \x01!";
    char full[64], part[64], back[64];
    size_t full_len = echod_status_encode_message(full, sizeof(full), msg);
    int ok = full_len == strlen("%C3%A9t%C3%A9 100%25 %01!");
    for (size_t cap = 1; cap <= full_len + 1; cap++) {
        memset(part, '#', sizeof(part));
        size_t n = echod_status_encode_message(part, cap, msg);
        ok &= n < cap && part[n] == '\0' && memcmp(part, full, n) == 0;
        /* Stopped only because the next whole unit (a byte or an escape) did not fit. */
        ok &= n == full_len || n + (full[n] == '%' ? 3 : 1) > cap - 1;
        size_t m = echod_status_decode_message(back, sizeof(back), part, n);
        ok &= memcmp(back, msg, m) == 0 && (n == 0 || part[n - 1] != '%') && (n < 2 || part[n - 2] != '%');
        ok &= part[cap] == '#' || cap == sizeof(part);
    }
    CHECK(ok);
}

static void test_status_decode(void)
{
    CHECK(decodes_to("", "", 0));
    CHECK(decodes_to("plain", "plain", 5));
    CHECK(decodes_to("%41%42", "AB", 2));
    CHECK(decodes_to("%4a%4A", "JJ", 2));
    CHECK(decodes_to("h%C3%A9", "h\xc3\xa9", 3));
    CHECK(decodes_to("%00x", "\0x", 2));
    /* Broken escapes survive as they came. */
    CHECK(decodes_to("100%", "100%", 4));
    CHECK(decodes_to("%4", "%4", 2));
    CHECK(decodes_to("%zz%", "%zz%", 4));
    CHECK(decodes_to("%G1", "%G1", 3));
    CHECK(decodes_to("%%41", "%A", 2));
    CHECK(decodes_to("%2%41", "%2A", 3));

    char buf[8];
    memset(buf, '#', sizeof(buf));
    CHECK(echod_status_decode_message(buf, 0, "abc", 3) == 0 && buf[0] == '#');
    CHECK(echod_status_decode_message(buf, 1, "abc", 3) == 0 && buf[0] == '\0');
    CHECK(echod_status_decode_message(buf, 3, "%41%42%43", 9) == 2 && strcmp(buf, "AB") == 0);
    CHECK(echod_status_decode_message(buf, sizeof(buf), "%41%42", 5) == 3 && strcmp(buf, "A%4") == 0);

    /* Every byte but NUL survives a round trip, and the encoding is pure printable ASCII. */
    char raw[256], enc[256 * 3 + 1], dec[256];
    for (int i = 1; i < 256; i++)
        raw[i - 1] = (char)i;
    raw[255] = '\0';
    size_t n = echod_status_encode_message(enc, sizeof(enc), raw);
    int printable = 1;
    for (size_t i = 0; i < n; i++)
        printable &= enc[i] >= 0x20 && enc[i] <= 0x7E;
    CHECK(printable);
    CHECK(n == 95 - 1 + 3 * (255 - 95 + 1)); /* 95 printable bytes minus '%', the rest escaped */
    CHECK(echod_status_decode_message(dec, sizeof(dec), enc, n) == 255 && memcmp(dec, raw, 256) == 0);

    /* Random byte strings, round-tripped. */
    int ok = 1;
    for (int round = 0; round < 500; round++) {
        size_t len = rng_below(60);
        for (size_t i = 0; i < len; i++)
            raw[i] = (char)(1 + rng_below(255));
        raw[len] = '\0';
        n = echod_status_encode_message(enc, sizeof(enc), raw);
        ok &= echod_status_decode_message(dec, sizeof(dec), enc, n) == len && memcmp(dec, raw, len + 1) == 0;
    }
    CHECK(ok);
}

int main(void)
{
    test_msg_constructors();
    test_deframe_every_split();
    test_deframe_random();
    test_deframe_zero_length();
    test_deframe_prefix_bytewise();
    test_deframe_size_limit();
    test_deframe_flags();
    test_deframe_truncation();
    test_deframe_dispose();
    test_timeout();
    test_status_names();
    test_status_encode();
    test_status_decode();
    return check_done();
}
